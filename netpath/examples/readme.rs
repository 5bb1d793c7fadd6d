//! Writes README's example output again from its checked-in run (`cargo xtask readme` runs it
//! with the repository's README.md): `netpath::render::readme`.
fn main() -> anyhow::Result<()> {
    let root = std::env::args_os()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("."));
    let path = root.join("README.md");
    let readme = std::fs::read_to_string(&path)?;
    let block = netpath::render::readme::render(&root)?;
    let new = netpath::render::readme::replace_block(&readme, &block)?;
    if new == readme {
        println!("README.md's example is what netpath renders already");
    } else {
        std::fs::write(&path, new)?;
        println!(
            "wrote README.md's example from {}",
            netpath::render::readme::FIXTURE
        );
    }
    Ok(())
}
