//! A containerd node for the tests: a containerd of the test's own (socket, root and state in
//! a directory of its own, so it can be stopped and started again without touching the
//! machine's runtimes), an image imported from a tarball built here (no registry), and pods
//! made as a kubelet's runtime makes them: a network namespace, the CNI bridge plugin called
//! with `CNI_COMMAND=ADD` (host-local IPAM, a netpath-owned subnet and data directory), a
//! sandbox container and an application container started with `ctr` in that namespace,
//! labelled as the CRI labels them. Everything is named `np<id>…`, labelled `netpath`, and
//! removed on drop (also when a test fails): tasks, containers with their snapshots, the
//! image, CNI DEL, the namespaces, the daemon and its directory.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sha2::Digest as _;

/// The containerd namespace the tests' containers live in.
pub const CTR_NAMESPACE: &str = "netpath-test";
/// The Kubernetes namespace their pod labels name.
pub const POD_NAMESPACE: &str = "netpath";
/// Where Debian's containernetworking-plugins are.
const CNI_PATH: &str = "/usr/lib/cni";

/// A containerd of the test's own.
pub struct Containerd {
    pub run_id: String,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// `/run/containerd` and its `s` did not exist before (the shims put their sockets in
    /// `/run/containerd/s` whatever the daemon's state directory).
    made_run_dirs: (bool, bool),
    pub image: String,
    pods: Vec<Pod>,
    /// The FORWARD rule letting the pods' bridge forward when the host's policy drops.
    forward_rule: Option<Vec<String>>,
}

/// One pod: its name (`np<id>-<tag>`), UID, network namespace and address, and the ids of
/// its sandbox and application containers.
#[derive(Clone, Debug)]
pub struct Pod {
    pub name: String,
    pub uid: String,
    pub netns: String,
    pub ip: std::net::Ipv4Addr,
    pub ids: [String; 2],
}

impl Pod {
    /// `namespace/pod`, as netpath is told about it.
    pub fn path(&self) -> String {
        format!("{POD_NAMESPACE}/{}", self.name)
    }
}

impl Containerd {
    /// Starts the daemon, waits until it answers, imports the agent image built from
    /// `netpath` (the binary under test).
    pub fn start() -> Containerd {
        let run_id = netpath::lab::new_run_id().unwrap();
        let dir = tempfile::Builder::new()
            .prefix(&format!("np{run_id}-ctrd"))
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        let made_run_dirs = (
            !Path::new("/run/containerd").exists(),
            !Path::new("/run/containerd/s").exists(),
        );
        let mut c = Containerd {
            image: format!("docker.io/library/np{run_id}-agent:test"),
            run_id,
            dir,
            child: None,
            made_run_dirs,
            pods: Vec::new(),
            forward_rule: None,
        };
        c.write_config();
        c.run_daemon();
        c.import_image();
        c
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("containerd.sock")
    }

    /// `CONTAINERD_ADDRESS` for netpath.
    pub fn env(&self) -> (&'static str, String) {
        ("CONTAINERD_ADDRESS", self.socket().display().to_string())
    }

    fn write_config(&self) {
        let d = self.dir.path().display();
        let cfg = format!(
            "version = 2\nroot = \"{d}/root\"\nstate = \"{d}/state\"\n\
             disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
             [grpc]\n  address = \"{d}/containerd.sock\"\n\
             [ttrpc]\n  address = \"{d}/containerd.sock.ttrpc\"\n\
             [plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"{d}/opt\"\n"
        );
        std::fs::write(self.dir.path().join("config.toml"), cfg).unwrap();
    }

    /// Starts containerd (again, after [`stop`](Self::stop)) and waits until it answers.
    pub fn run_daemon(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("containerd.log"))
            .unwrap();
        let mut cmd = Command::new("containerd");
        cmd.arg("--config")
            .arg(self.dir.path().join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        // A test killed outright stops its daemon too (the test's thread outlives the fixture).
        // SAFETY: prctl is async-signal-safe.
        unsafe {
            use std::os::unix::process::CommandExt as _;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .expect("containerd (Debian's, with docker.io; `cargo xtask setup`)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.ctr(&["version"]).0 {
            assert!(
                Instant::now() < deadline,
                "containerd did not answer within 60 s: {}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Stops containerd as an init system does (SIGTERM); its shims and tasks keep running.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }

    fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// `ctr` against this daemon in the tests' namespace: (succeeded, output).
    pub fn ctr(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("ctr")
            .arg("--address")
            .arg(self.socket())
            .args(["--namespace", CTR_NAMESPACE])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("ctr (Debian's containerd package)");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    fn import_image(&self) {
        let tar = self.dir.path().join("agent.tar");
        let exe = Path::new(env!("CARGO_BIN_EXE_netpath"));
        std::fs::write(&tar, agent_archive(exe, &self.image)).unwrap();
        let (ok, out) = self.ctr(&["images", "import", &tar.display().to_string()]);
        assert!(ok, "ctr images import: {out}");
        let _ = std::fs::remove_file(&tar);
    }

    /// A pod `np<id>-<tag>` as a kubelet's runtime makes one: its network namespace, CNI ADD,
    /// then its sandbox and one application container (`agent`) in that namespace.
    pub fn add_pod(&mut self, tag: &str) -> Pod {
        self.add_pod_with(tag, false)
    }

    /// [`add_pod`](Self::add_pod) whose application container runs where a kubelet's
    /// cgroupfs driver puts a Burstable pod's (`…/kubepods/burstable/pod<UID>/<64 hex id>`,
    /// under `/np<id>` here), with the 64-hex-digit id the CRI gives containers.
    pub fn add_kube_pod(&mut self, tag: &str) -> Pod {
        self.add_pod_with(tag, true)
    }

    fn add_pod_with(&mut self, tag: &str, kube_cgroup: bool) -> Pod {
        let name = format!("np{}-{tag}", self.run_id);
        let netns = format!("np{}-p{tag}", self.run_id);
        let uid = format!(
            "00000000-0000-4000-8000-{}{:06x}",
            self.run_id,
            self.pods.len()
        );
        let app = if kube_cgroup {
            hex(&sha2::Sha256::digest(name.as_bytes()))
        } else {
            format!("{name}-agent")
        };
        let mut pod = Pod {
            ids: [format!("{name}-sandbox"), app],
            name,
            uid,
            netns,
            ip: std::net::Ipv4Addr::UNSPECIFIED,
        };
        self.pods.push(pod.clone());
        let ok = Command::new("ip")
            .args(["netns", "add", &pod.netns])
            .status()
            .unwrap()
            .success();
        assert!(ok, "ip netns add {}", pod.netns);
        let result = self.cni("ADD", &pod.name, &pod.netns);
        let v: serde_json::Value = serde_json::from_str(&result).unwrap();
        pod.ip = v["ips"][0]["address"]
            .as_str()
            .and_then(|a| a.split('/').next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in the CNI result: {result}"));
        self.allow_forwarding();
        self.run_container(&pod, "sandbox", None);
        let cgroup = kube_cgroup.then(|| {
            format!(
                "/np{}/kubepods/burstable/pod{}/{}",
                self.run_id, pod.uid, pod.ids[1]
            )
        });
        self.run_container(&pod, "container", cgroup.as_deref());
        pod
    }

    fn run_container(&self, pod: &Pod, kind: &str, cgroup: Option<&str>) {
        let id = &pod.ids[usize::from(kind == "container")];
        let mut labels = vec![
            "netpath=1".to_string(),
            format!("netpath.run={}", self.run_id),
            format!("io.kubernetes.pod.namespace={POD_NAMESPACE}"),
            format!("io.kubernetes.pod.name={}", pod.name),
            format!("io.kubernetes.pod.uid={}", pod.uid),
            format!("io.cri-containerd.kind={kind}"),
        ];
        if kind == "container" {
            labels.push("io.kubernetes.container.name=agent".to_string());
        }
        let with_ns = format!("network:/run/netns/{}", pod.netns);
        // runc's state in this daemon's directory; no IO, so no FIFOs anywhere.
        let runc_root = self.dir.path().join("runc").display().to_string();
        let mut args = vec!["run", "-d", "--null-io", "--runc-root", &runc_root];
        args.extend(["--with-ns", &with_ns]);
        if let Some(c) = cgroup {
            args.extend(["--cgroup", c]);
        }
        for l in &labels {
            args.extend(["--label", l.as_str()]);
        }
        args.extend([self.image.as_str(), id.as_str()]);
        let (ok, out) = self.ctr(&args);
        assert!(ok, "ctr run {id}: {out}\n{}", self.log_tail());
    }

    /// Calls the CNI bridge plugin (then host-local) with `command` for pod `name` in
    /// `netns`, as a runtime does: the network config on stdin, the rest in the environment.
    /// Returns the plugin's output (its result on ADD).
    fn cni(&self, command: &str, name: &str, netns: &str) -> String {
        let ipam_dir = self.dir.path().join("cni-ipam");
        let k = u8::from_str_radix(&self.run_id[..2], 16).unwrap();
        let conf = serde_json::json!({
            "cniVersion": "0.4.0",
            "name": format!("np{}", self.run_id),
            "type": "bridge",
            "bridge": self.bridge(),
            "isGateway": false,
            "ipMasq": false,
            "ipam": {
                "type": "host-local",
                "subnet": format!("10.219.{k}.0/24"),
                "dataDir": ipam_dir,
            },
        });
        let mut child = Command::new(Path::new(CNI_PATH).join("bridge"))
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", name)
            .env("CNI_NETNS", format!("/run/netns/{netns}"))
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", CNI_PATH)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the CNI bridge plugin (containernetworking-plugins; `cargo xtask setup`)");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(conf.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success() || command == "DEL",
            "CNI {command} {name}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }

    pub fn bridge(&self) -> String {
        format!("np{}cni", self.run_id)
    }

    /// Once Docker has run, the host's FORWARD policy drops what a bridge forwards (with
    /// br_netfilter): a network add-on lets pod traffic through; here one rule for this
    /// bridge does, removed on drop.
    fn allow_forwarding(&mut self) {
        if self.forward_rule.is_some() {
            return;
        }
        let policy = Command::new("iptables").args(["-S", "FORWARD"]).output();
        let drops =
            policy.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("-P FORWARD DROP"));
        if !drops {
            return;
        }
        let br = self.bridge();
        let rule: Vec<String> = ["FORWARD", "-i", &br, "-o", &br, "-j", "ACCEPT"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let ok = Command::new("iptables")
            .arg("-I")
            .args(&rule)
            .status()
            .unwrap()
            .success();
        assert!(ok, "iptables -I {rule:?}");
        self.forward_rule = Some(rule);
    }

    /// Deletes `pod` as a runtime does: its containers (and their snapshots), CNI DEL, its
    /// namespace.
    pub fn delete_pod(&mut self, pod: &Pod) {
        self.remove_pod(pod);
        self.pods.retain(|p| p.name != pod.name);
    }

    fn remove_pod(&self, pod: &Pod) {
        for id in pod.ids.iter().rev() {
            let _ = self.ctr(&["task", "kill", "--signal", "SIGKILL", id]);
            let deadline = Instant::now() + Duration::from_secs(20);
            while !self.ctr(&["task", "delete", id]).0 && Instant::now() < deadline {
                if !self
                    .ctr(&["task", "ls", "-q"])
                    .1
                    .lines()
                    .any(|l| l.trim() == id)
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            let _ = self.ctr(&["containers", "delete", id]);
        }
        if Path::new(&format!("/run/netns/{}", pod.netns)).exists() {
            self.cni("DEL", &pod.name, &pod.netns);
            let _ = Command::new("ip")
                .args(["netns", "del", &pod.netns])
                .status();
        }
    }

    /// The cgroups `/np<id>/kubepods/burstable/pod<UID>` runc made above the containers of
    /// [`add_kube_pod`](Self::add_kube_pod) (it removes only a container's own), in every
    /// hierarchy, deepest first; only empty ones go.
    fn remove_kube_cgroups(&self) {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mounts = info.lines().filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let fstype = post.split(' ').next()?;
            fstype
                .starts_with("cgroup")
                .then(|| pre.split(' ').nth(4).map(PathBuf::from))?
        });
        let top = format!("np{}", self.run_id);
        for m in mounts {
            let root = m.join(&top);
            if !root.exists() {
                continue;
            }
            let mut dirs: Vec<PathBuf> = Vec::new();
            let mut stack = vec![root];
            while let Some(d) = stack.pop() {
                if let Ok(rd) = std::fs::read_dir(&d) {
                    stack.extend(rd.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()));
                }
                dirs.push(d);
            }
            dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
            for d in dirs {
                let _ = std::fs::remove_dir(&d);
            }
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if self.child.is_none() {
            // Stopped by a test that failed before starting it again: tasks need it.
            self.run_daemon();
        }
        for pod in std::mem::take(&mut self.pods) {
            self.remove_pod(&pod);
        }
        self.remove_kube_cgroups();
        let _ = self.ctr(&["images", "rm", &self.image]);
        let _ = self.ctr(&["namespaces", "rm", CTR_NAMESPACE]);
        self.stop();
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge()])
            .stderr(Stdio::null())
            .status();
        if let Some(rule) = self.forward_rule.take() {
            let _ = Command::new("iptables").arg("-D").args(&rule).status();
        }
        unmount_under(self.dir.path());
        // Only if empty: a containerd started meanwhile may use them.
        if self.made_run_dirs.1 {
            let _ = std::fs::remove_dir("/run/containerd/s");
        }
        if self.made_run_dirs.0 {
            let _ = std::fs::remove_dir("/run/containerd");
        }
    }
}

/// Detaches whatever is still mounted under `dir` (a task's rootfs a failed test left), so
/// removing the directory removes nothing else.
fn unmount_under(dir: &Path) {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<&str> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| Path::new(p).starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let _ = nix::mount::umount2(p, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// A `docker save`-format archive of image `reference`: `FROM scratch`, the netpath binary at
/// `exe` as `/netpath` with its shared libraries, `ENTRYPOINT ["/netpath", "agent"]`, `CMD
/// ["hold"]`; what `ctr images import` reads (it checks the layer against the config's
/// `diff_ids`, hence the digests).
pub fn agent_archive(exe: &Path, reference: &str) -> Vec<u8> {
    let mut layer = tar::Builder::new(Vec::new());
    let mut files = vec![(PathBuf::from("netpath"), exe.to_path_buf(), 0o755)];
    for lib in netpath::docker::image::shared_libraries(exe).unwrap() {
        let rel = lib.strip_prefix("/").unwrap().to_path_buf();
        files.push((rel, lib, 0o755));
    }
    for (rel, src, mode) in files {
        let data = std::fs::read(&src).unwrap();
        append(&mut layer, &rel.display().to_string(), &data, mode);
    }
    let layer = layer.into_inner().unwrap();
    let diff_id = format!("sha256:{}", hex(&sha2::Sha256::digest(&layer)));
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": ["/netpath", "agent"],
            "Cmd": ["hold"],
            "Labels": {"netpath": "1"},
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    })
    .to_string();
    let config_name = format!("{}.json", hex(&sha2::Sha256::digest(config.as_bytes())));
    let manifest = serde_json::json!([{
        "Config": config_name,
        "RepoTags": [reference.trim_start_matches("docker.io/library/")],
        "Layers": ["layer/layer.tar"],
    }])
    .to_string();
    let mut out = tar::Builder::new(Vec::new());
    append(&mut out, "layer/layer.tar", &layer, 0o644);
    append(&mut out, &config_name, config.as_bytes(), 0o644);
    append(&mut out, "manifest.json", manifest.as_bytes(), 0o644);
    out.into_inner().unwrap()
}

fn append(b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8], mode: u32) {
    netpath::docker::image::append(b, path, data, mode).unwrap();
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
