//! `netpath doctor`'s output: the capabilities found and the backend picked, as the table
//! below or as JSON.
use serde::Serialize;
use std::io::Write;

use crate::{probe::backend::Backend, probe::doctor::Capabilities};

/// What `doctor` reports (its JSON body: `backend`, `capabilities`).
#[derive(Serialize, schemars::JsonSchema)]
pub struct DoctorOutput {
    /// The backend `--backend auto` would pick (None: the kernel allows none).
    pub backend: Option<Backend>,
    pub capabilities: Capabilities,
}

impl super::Render for DoctorOutput {
    const KIND: &'static str = "doctor";
    fn text(&self, w: &mut dyn Write) -> std::io::Result<()> {
        print(w, &self.capabilities, self.backend)
    }
    /// Nothing: with -q the exit status says whether a backend can attach.
    fn answer(&self, _w: &mut dyn Write) -> std::io::Result<()> {
        Ok(())
    }
}

fn print(w: &mut dyn Write, c: &Capabilities, chosen: Option<Backend>) -> std::io::Result<()> {
    let btf = if c.btf {
        "yes (/sys/kernel/btf/vmlinux)"
    } else {
        "no"
    };
    let rows = [
        ["kernel", &c.kernel],
        ["lockdown", &c.lockdown],
        ["BTF", btf],
    ];
    let rows = rows.map(|r| r.map(str::to_string).to_vec()).to_vec();
    super::table::write(w, "", &[], rows, &[0, 1])?;
    writeln!(w)?;
    let yes = |ok: bool| if ok { "yes" } else { "no" }.to_string();
    let mut rows: Vec<Vec<String>> = (c.checks.iter())
        .map(|ch| vec![ch.name.to_string(), yes(ch.ok), ch.detail.clone()])
        .collect();
    rows.push(vec![
        "docker".into(),
        yes(c.docker.ok),
        c.docker.detail.clone(),
    ]);
    super::table::write(
        w,
        "",
        &["program type", "usable", "detail"],
        rows,
        &[0, 1, 2],
    )?;
    writeln!(w)?;
    let rows = [Backend::Fentry, Backend::Kprobe, Backend::Tracepoint]
        .into_iter()
        .map(|b| {
            let state = if !c.usable(b) {
                "kernel refuses"
            } else if Backend::implemented().contains(&b) {
                "usable"
            } else {
                "kernel allows; not in this build"
            };
            vec![format!("backend {}", b.name()), state.to_string()]
        })
        .collect();
    // No header: each row names itself (`backend tracepoint  usable`).
    super::table::write(w, "", &[], rows, &[0, 1])?;
    if let Some(b) = chosen {
        let hops: Vec<&str> = b.visible_hops().iter().map(|h| h.name()).collect();
        writeln!(
            w,
            "chosen backend: {} (hops: {})",
            b.name(),
            hops.join(", ")
        )?;
    }
    Ok(())
}
