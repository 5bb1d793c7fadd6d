//! Writes the JSON Schemas derived from netpath's output types into the directory given
//! (`cargo xtask schemas` runs it with the repository's `schemas/`).
fn main() -> std::io::Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("schemas"));
    netpath::render::schema::write(&dir)?;
    println!("wrote the schemas to {}", dir.display());
    Ok(())
}
