//! Writes netpath's man pages into the directory given (`cargo xtask man` runs it with
//! target/man): netpath.1 and one netpath-COMMAND.1 per command, from the command tree
//! `--help` prints (clap_mangen).
fn main() -> std::io::Result<()> {
    use clap::CommandFactory as _;
    let dir = std::env::args_os()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("target/man"));
    std::fs::create_dir_all(&dir)?;
    let cmd = netpath::cli::Cli::command().version(netpath::cli::top::short_version());
    clap_mangen::generate_to(cmd, &dir)?;
    println!("wrote netpath's man pages to {}", dir.display());
    Ok(())
}
