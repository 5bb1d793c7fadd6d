//! `netpath doctor`: what this kernel lets netpath do, learned by loading and attaching a real
//! program of each type, never by guessing from the version.
use std::path::Path;

use anyhow::Result;
use aya::{
    Btf, EbpfLoader,
    programs::{FEntry, KProbe, RawTracePoint, SchedClassifier, TcAttachType, TracePoint},
};
use netpath_common::LoadConfig;
use serde::Serialize;

use crate::probe::backend::{
    Backend,
    probes::{self, Kind, Probe},
};
use crate::probe::tracer::program;

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Capabilities {
    pub kernel: String,
    pub lockdown: String,
    pub btf: bool,
    pub checks: Vec<Check>,
    pub docker: Check,
}

impl Capabilities {
    fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    fn ok(&self, name: &str) -> bool {
        self.check(name).is_some_and(|c| c.ok)
    }

    pub fn usable(&self, b: Backend) -> bool {
        match b {
            Backend::Tracepoint => self.ok("tracepoint") && self.ok("raw_tracepoint"),
            Backend::Kprobe => self.ok("kprobe"),
            Backend::Fentry => self.ok("fentry"),
        }
    }

    pub fn reason(&self, b: Backend) -> String {
        let names: &[&str] = match b {
            Backend::Tracepoint => &["tracepoint", "raw_tracepoint"],
            Backend::Kprobe => &["kprobe"],
            Backend::Fentry => &["fentry"],
        };
        names
            .iter()
            .filter_map(|n| self.check(n))
            .filter(|c| !c.ok)
            .map(|c| format!("{}: {}", c.name, c.detail))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

impl crate::probe::backend::Allows for Capabilities {
    fn usable(&self, b: Backend) -> bool {
        Capabilities::usable(self, b)
    }

    fn reason(&self, b: Backend) -> String {
        Capabilities::reason(self, b)
    }
}

fn result(name: &'static str, r: Result<String>) -> Check {
    match r {
        Ok(detail) => Check {
            name,
            ok: true,
            detail,
        },
        Err(e) => Check {
            name,
            ok: false,
            detail: format!("{e:#}"),
        },
    }
}

fn lockdown() -> String {
    let p = "/sys/kernel/security/lockdown";
    if !Path::new(p).exists() {
        // securityfs may not be mounted; mounting it changes nothing else.
        let _ = nix::mount::mount(
            Some("securityfs"),
            "/sys/kernel/security",
            Some("securityfs"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        );
    }
    match std::fs::read_to_string(p) {
        // Format: "none [integrity] confidentiality"
        Ok(s) => s
            .split_whitespace()
            .find(|w| w.starts_with('['))
            .map(|w| w.trim_matches(['[', ']']).to_string())
            .unwrap_or_else(|| s.trim().to_string()),
        Err(e) => format!("unknown ({e})"),
    }
}

fn kprobes_compiled_in() -> bool {
    Path::new("/sys/bus/event_source/devices/kprobe").exists()
        || Path::new("/sys/kernel/tracing/kprobe_events").exists()
        || Path::new("/sys/kernel/debug/tracing/kprobe_events").exists()
}

/// Loads and attaches one program of each type netpath uses.
pub fn probe() -> Result<Capabilities> {
    crate::sys::ensure_tracefs();
    let uname = nix::sys::utsname::uname()?;
    let kernel = uname.release().to_string_lossy().into_owned();
    let btf = Path::new(crate::sys::btf::VMLINUX).exists();
    let mut checks = Vec::new();

    let obj = crate::probe::tracer::object()?;
    let mut loader = EbpfLoader::new();
    let config = LoadConfig {
        offsets: crate::sys::btf::load_vmlinux()
            .and_then(|b| crate::sys::btf::kernel_offsets(&b))
            .unwrap_or_default(),
        ..LoadConfig::DEFAULT
    };
    loader.override_global(netpath_common::config::GLOBAL, &config, true);
    let mut ebpf = loader.load(obj)?;

    let tp = probes::for_doctor(Kind::Tracepoint);
    checks.push(result(
        "tracepoint",
        (|| {
            let p: &mut TracePoint = program(&mut ebpf, tp.prog)?;
            p.load()?;
            let (category, name) = tp.tracepoint();
            let id = p.attach(category, name)?;
            p.detach(id)?;
            Ok(format!("{} loads and attaches", tp.target))
        })(),
    ));
    let raw = probes::for_doctor(Kind::RawTracepoint);
    checks.push(result(
        "raw_tracepoint",
        (|| {
            let p: &mut RawTracePoint = program(&mut ebpf, raw.prog)?;
            p.load()?;
            let id = p.attach(raw.target)?;
            p.detach(id)?;
            Ok(format!(
                "{} loads and attaches (skb fields via BTF offsets)",
                raw.target
            ))
        })(),
    ));
    checks.push(result(
        "tc",
        check_tc(&mut ebpf, probes::for_doctor(Kind::Tc)),
    ));
    checks.push(result(
        "kprobe",
        check_kprobe(&mut ebpf, probes::for_doctor(Kind::Kprobe)),
    ));
    checks.push(result(
        "fentry",
        check_fentry(&mut ebpf, probes::for_doctor(Kind::Fentry)),
    ));

    let docker = result("docker", docker_ping());
    Ok(Capabilities {
        kernel,
        lockdown: lockdown(),
        btf,
        checks,
        docker,
    })
}

fn check_tc(ebpf: &mut aya::Ebpf, tc: &Probe) -> Result<String> {
    let p: &mut SchedClassifier = program(ebpf, tc.prog)?;
    p.load()?;
    let ty = if tc.target == "egress" {
        TcAttachType::Egress
    } else {
        TcAttachType::Ingress
    };
    // Attach on the loopback of a namespace of our own, never on a host device; registered
    // like a lab's, so a signal during the check removes it (a SIGTERM here left it).
    let run_id = crate::lab::new_run_id()?;
    let ns = crate::lab::cleanup::create_registered(
        &run_id,
        || crate::sys::netns::Netns::create(&format!("np{run_id}-doctor")),
        |ns| &ns.name,
    )?;
    let r = ns.run(|| {
        crate::probe::tracer::add_clsact("lo")?;
        let id = p.attach("lo", ty)?;
        p.detach(id)?;
        Ok(())
    });
    let _ = ns.delete();
    crate::lab::cleanup::unregister(&run_id);
    r?;
    Ok(format!("clsact {} on a netpath netns loopback", tc.target))
}

fn check_kprobe(ebpf: &mut aya::Ebpf, kp: &Probe) -> Result<String> {
    let p: &mut KProbe = program(ebpf, kp.prog)?;
    p.load()?;
    match p.attach(kp.target, 0) {
        Ok(id) => {
            p.detach(id)?;
            Ok(format!("kprobe on {} attaches", kp.target))
        }
        Err(e) if !kprobes_compiled_in() => Err(anyhow::anyhow!(
            "kernel built without kprobes (CONFIG_KPROBES unset: no kprobe PMU, no kprobe_events; {})",
            crate::error_chain(&e)
        )),
        Err(e) => Err(e.into()),
    }
}

fn check_fentry(ebpf: &mut aya::Ebpf, fe: &Probe) -> Result<String> {
    let btf = Btf::from_sys_fs()?;
    let p: &mut FEntry = program(ebpf, fe.prog)?;
    match p.load(fe.target, &btf) {
        Ok(()) => {
            let id = p.attach()?;
            p.detach(id)?;
            Ok(format!("fentry on {} loads and attaches", fe.target))
        }
        Err(e) => {
            let msg = crate::error_chain(&e);
            if msg.contains("Operation not permitted") {
                Err(anyhow::anyhow!(
                    "the kernel refuses fentry/fexit (BPF_PROG_TYPE_TRACING) programs: BPF_PROG_LOAD returned EPERM"
                ))
            } else {
                Err(anyhow::anyhow!(
                    "fentry on {} does not load: {msg}",
                    fe.target
                ))
            }
        }
    }
}

fn docker_ping() -> Result<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let docker = bollard::Docker::connect_with_local_defaults()?;
        let v = tokio::time::timeout(std::time::Duration::from_secs(3), docker.version())
            .await
            .map_err(|_| anyhow::anyhow!("no answer from the Docker daemon within 3 s"))??;
        Ok(format!(
            "daemon {} (API {})",
            v.version.unwrap_or_default(),
            v.api_version.unwrap_or_default()
        ))
    })
    .map_err(|e: anyhow::Error| anyhow::anyhow!("Docker daemon not reachable: {e:#}"))
}
