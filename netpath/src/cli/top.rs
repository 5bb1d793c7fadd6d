//! The command line as a whole: `netpath`'s own flags (`-V`, `--version`), its subcommands
//! (`Cmd`) and the examples `netpath --help` ends with. Here rather than in `main.rs` so that
//! tests, `netpath completions` and the man pages (`cargo xtask man`) read the same tree.
use clap::Parser;

use super::Cmd;

/// Where the microseconds go when containers talk.
///
/// Per-hop latency of each packet through veth, bridge, NAT, VXLAN and the socket, per Docker
/// network driver, measured with eBPF.
#[derive(Parser)]
#[command(
    name = "netpath",
    version,
    long_version = "(with the backend this kernel allows: `netpath --version` as root)",
    after_help = EXAMPLES,
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

const EXAMPLES: &str = "EXAMPLES:
    netpath doctor                       what this kernel allows, and the backend netpath picks
    netpath compare                      every driver on the embedded netns lab
    netpath compare -d bridge,host --rounds 5 --bulk 0 --burst 0
    netpath compare -d bridge --wait block --cpus same   what an application sees, both ends on one CPU
    netpath compare -d bridge -n 50000 -o bridge.json    the JSON saved, the text on the terminal
    netpath trace --filter-port 11111 --count 5  five complete packet timelines on the bridge lab
    netpath trace --filter-netns srv --filter-iface eth0 --json
    netpath bench --rounds 5             netpath's own cost, as ratios against sockperf and iperf3
    netpath bench --stability            do compare's ratios hold still, idle vs a busy loop?
    netpath compare -d bridge,overlay --underlay-delay 50us   same node vs cross node
    netpath compare --docker --lab       real Docker networks next to the lab, one run
    netpath compare --between web db     between two running containers (client web, server db)
    netpath compare --between shop/web-0 shop/db-0   between two pods (Docker or containerd)
    netpath trace --container web --container db --filter-port 5432
    netpath trace --container shop/web-0        a pod's traffic, whatever runtime runs it
    netpath inspect web
    netpath serve --all                  Prometheus metrics of every running container's traffic
    netpath serve --label app=web --listen 0.0.0.0:9433
    netpath tune -d bridge --knob gro --rounds 5   veth GRO on vs off, interleaved, with the noise
    netpath tune -d bridge --knob nodelay          Nagle and the delayed ACK on a two-write request
    netpath tune -d bridge --knob wait=block,spin  the receiver's wakeup, A/B
    netpath compare -d bridge,host -o run.html -o run.json   the HTML report and the JSON
    netpath report bridge.json                  the HTML report of a saved run (bridge.html)
    netpath diff -d overlay --vs bridge  which hops make overlay slower, with each delta's noise
    netpath diff a.json b.json -d bridge   the same driver in two saved runs
    netpath completions bash > /etc/bash_completion.d/netpath
    netpath cleanup                      remove what a killed run left behind";

/// `-V`: the version and the commit it was built from (`NETPATH_COMMIT`, set by build.rs;
/// "commit unknown" outside a git checkout).
pub fn short_version() -> &'static str {
    static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "{} ({})",
            env!("CARGO_PKG_VERSION"),
            option_env!("NETPATH_COMMIT").unwrap_or("commit unknown")
        )
    });
    &VERSION
}

/// `--version`: the short version, then the backend this kernel allows (what `doctor`
/// picks), or why it cannot be said (not root, no BTF, no eBPF object).
pub fn long_version() -> String {
    let backend = match crate::probe::doctor::probe() {
        Ok(caps) => {
            match crate::probe::backend::select(crate::probe::backend::BackendChoice::Auto, &caps) {
                Ok(b) => format!("backend: {} (kernel {})", b.name(), caps.kernel),
                Err(e) => format!("backend: none on kernel {} ({e:#})", caps.kernel),
            }
        }
        Err(e) => format!("backend: unknown ({e:#}; `netpath doctor` as root says)"),
    };
    format!("netpath {}\n{backend}", short_version())
}
