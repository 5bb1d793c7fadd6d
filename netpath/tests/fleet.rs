//! The fleet files under deploy/: the DaemonSet against Kubernetes' own schemas, offline
//! (kubernetes-validate, installed by `cargo xtask setup --tests` into target/tools/venv), and the
//! example scrape configs with promtool. Host only; needs no privilege.
use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(p)
}

/// kubernetes-validate from the venv `cargo xtask setup --tests` made in the target directory
/// (found from this test binary's path), else from PATH.
fn kubernetes_validate() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .map(|a| a.join("tools/venv/bin/kubernetes-validate"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("kubernetes-validate"))
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (`cargo xtask setup --tests` installs it)"));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
fn daemonset_validates_against_kubernetes_schemas() {
    let manifest = deploy("kubernetes/netpath-daemonset.yaml");
    let (ok, said) = run(Command::new(kubernetes_validate())
        .arg("--strict")
        .arg(&manifest));
    eprintln!("{said}");
    assert!(ok, "{said}");
    assert!(
        said.contains("daemonset/netpath") && said.contains("passed"),
        "{said}"
    );
    // The validator really checks: a wrong type is refused.
    let text = std::fs::read_to_string(&manifest).unwrap();
    let broken = std::env::temp_dir().join(format!("np-fleet-{}.yaml", std::process::id()));
    std::fs::write(
        &broken,
        text.replace("hostNetwork: true", "hostNetwork: yes-please"),
    )
    .unwrap();
    let (ok, said) = run(Command::new(kubernetes_validate())
        .arg("--strict")
        .arg(&broken));
    std::fs::remove_file(&broken).unwrap();
    assert!(!ok, "a broken manifest passed: {said}");
    // What the node agent needs is there.
    for needed in [
        "hostNetwork: true",
        "hostPID: true",
        "/sys/kernel/btf",
        "/sys/kernel/tracing",
        "/sys/fs/bpf",
        "/run/containerd/containerd.sock",
        "/sys/fs/cgroup",
        "automountServiceAccountToken: false",
        "pod-security.kubernetes.io/enforce: privileged",
        "fieldPath: status.hostIP",
        "--listen\", \"$(NODE_IP):9433",
        "priorityClassName: netpath-node-agent",
        "prometheus.io/scrape: \"true\"",
        "readinessProbe",
        "requests",
        "limits",
        "\"BPF\"",
        "\"PERFMON\"",
    ] {
        assert!(text.contains(needed), "the DaemonSet lacks {needed}");
    }
    // Liveness asks /ready (answered by serve's HTTP side as long as it lives), not a scrape.
    let liveness = text.split("livenessProbe:").nth(1).unwrap();
    let path = liveness.lines().find(|l| l.contains("path:")).unwrap();
    assert!(path.trim() == "path: /ready", "liveness probes {path}");
    // The sockets and the host's trees netpath only reads are mounted read only.
    for ro in ["containerd-sock", "cgroup", "btf", "netns"] {
        let mount = text
            .split("volumeMounts:")
            .nth(1)
            .and_then(|m| m.split(&format!("- name: {ro}\n")).nth(1))
            .unwrap_or_else(|| panic!("no {ro} mount"));
        let block: Vec<&str> = mount
            .lines()
            .take_while(|l| !l.contains("- name:"))
            .collect();
        assert!(
            block.iter().any(|l| l.trim() == "readOnly: true"),
            "{ro} is not read only: {block:?}"
        );
    }
}

#[test]
fn scrape_configs_pass_promtool() {
    let (ok, said) = run(Command::new("promtool")
        .args(["check", "config"])
        .arg(deploy("prometheus/prometheus.yml")));
    eprintln!("{said}");
    assert!(ok, "{said}");
    // Debian's promtool is built without Kubernetes discovery: the Kubernetes example is
    // checked as far as it can be (YAML and everything else parse; only that field is
    // unknown to this build).
    let (ok, said) = run(Command::new("promtool")
        .args(["check", "config"])
        .arg(deploy("prometheus/prometheus-kubernetes.yml")));
    eprintln!("{said}");
    if !ok {
        let errors: Vec<&str> = said.lines().filter(|l| l.contains("field ")).collect();
        assert!(
            !errors.is_empty()
                && errors
                    .iter()
                    .all(|l| l.contains("field kubernetes_sd_configs not found")),
            "{said}"
        );
        eprintln!(
            "note: this promtool has no Kubernetes discovery; prometheus-kubernetes.yml checked up to kubernetes_sd_configs"
        );
    }
}
