//! `cargo xtask screenshot`: renders netpath's HTML report with Debian's chromium, headless,
//! to a PNG, so the report can be checked the way a person sees it.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};
use clap::Args;

use crate::{cmd, paths, setup};

#[derive(Args, Debug)]
pub struct ScreenshotArgs {
    /// The report to render. Without it, a short `netpath compare -d host,bridge,overlay
    /// --report` run (root, about a minute) makes one at target/report/report.html.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// Where to write the PNG (default: the report's path with .png).
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
    /// Browser window width and height in pixels; the page is cut at the height.
    #[arg(long, default_value = "1100,3400")]
    pub window: String,
}

pub fn run(args: &ScreenshotArgs) -> anyhow::Result<()> {
    setup::run(&setup::SetupArgs {
        screenshot: true,
        ..Default::default()
    })?;
    let html = match &args.html {
        Some(h) => h.clone(),
        None => fresh_report()?,
    };
    let html = html
        .canonicalize()
        .with_context(|| format!("{}: no such report", html.display()))?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| html.with_extension("png"));
    shoot(&html, &out, &args.window)?;
    println!("{}", out.display());
    Ok(())
}

fn fresh_report() -> anyhow::Result<PathBuf> {
    let exe = paths::release_netpath()?;
    let target = paths::target_dir(&paths::workspace_root())?;
    let dir = target.join("report");
    std::fs::create_dir_all(&dir)?;
    let html = dir.join("report.html");
    cmd::run(Command::new(exe).args([
        "compare",
        "-d",
        "host,bridge,overlay",
        "-n",
        "5000",
        "--rounds",
        "3",
        "--bulk",
        "0",
        "--burst",
        "0",
        "-o",
        html.to_str().context("target path is not UTF-8")?,
    ]))?;
    Ok(html)
}

/// chromium as root needs --no-sandbox; no GPU here. The page has no script and fetches
/// nothing, so the first paint is the whole report.
fn shoot(html: &Path, out: &Path, window: &str) -> anyhow::Result<()> {
    let browser = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|b| on_path(b))
        .context(
            "no chromium on PATH: `cargo xtask setup --screenshot` installs Debian's chromium",
        )?;
    let _ = std::fs::remove_file(out);
    cmd::run(Command::new(browser).args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        &format!("--window-size={window}"),
        &format!("--screenshot={}", out.display()),
        &format!("file://{}", html.display()),
    ]))?;
    if !out.exists() {
        bail!("chromium wrote no {}", out.display());
    }
    Ok(())
}

fn on_path(exe: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(exe).is_file()))
}
