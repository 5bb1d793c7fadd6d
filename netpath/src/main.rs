//! `netpath`: the command line parsed (clap) and dispatched to its command, and the exit
//! status; the commands are listed in `netpath::cli` (`commands!`), each with its flags and run
//! in `cli/<command>.rs`.
use std::process::ExitCode;

use clap::Parser;
use netpath::cli::Cmd;

/// Where the microseconds go when containers talk.
///
/// Per-hop latency of each packet through veth, bridge, NAT, VXLAN and the socket, per Docker
/// network driver, measured with eBPF.
#[derive(Parser)]
#[command(name = "netpath", version, after_help = EXAMPLES, arg_required_else_help = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

const EXAMPLES: &str = "EXAMPLES:
    netpath doctor                       what this kernel allows, and the backend netpath picks
    netpath compare                      every driver on the embedded netns lab
    netpath compare -d bridge,host --rounds 5 --bulk 0 --burst 0
    netpath compare -d bridge --wait block --cpus same   what an application sees, both ends on one CPU
    netpath compare --driver bridge -n 50000 --json > bridge.json
    netpath trace --port 11111 --count 5  five complete packet timelines on the bridge lab
    netpath trace --netns srv --iface eth0 --json
    netpath bench --rounds 5             netpath's own cost, as ratios against sockperf and iperf3
    netpath bench --stability            do compare's ratios hold still, idle vs a busy loop?
    netpath compare -d bridge,overlay --underlay-delay 50us   same node vs cross node
    netpath compare --docker --lab       real Docker networks next to the lab, one run
    netpath compare --between web db     between two running containers (client web, server db)
    netpath compare --between shop/web-0 shop/db-0   between two pods (Docker or containerd)
    netpath trace --container web --container db --port 5432
    netpath trace --container shop/web-0        a pod's traffic, whatever runtime runs it
    netpath inspect web
    netpath serve --all                  Prometheus metrics of every running container's traffic
    netpath serve --label app=web --listen 0.0.0.0:9433
    netpath tune -d bridge --knob gro --rounds 5   veth GRO on vs off, interleaved, with the noise
    netpath tune -d bridge --knob nodelay          Nagle and the delayed ACK on a two-write request
    netpath tune -d bridge --knob wait=block,spin  the receiver's wakeup, A/B
    netpath compare -d bridge,host --report run.html --svg run.svg
    netpath report bridge.json -o bridge.html   the HTML report of a saved compare --json
    netpath diff -d overlay --vs bridge  which hops make overlay slower, with each delta's noise
    netpath diff a.json b.json --driver bridge   the same driver in two saved runs
    netpath cleanup                      remove what a killed run left behind";

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    netpath::render::quiet_broken_pipe();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // `netpath` alone: the help, as it is, and a failed exit (nothing was asked).
            let _ = e.print();
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!(
                "netpath: {} (see `netpath --help`)",
                netpath::render::output::clap_line(&e)
            );
            return ExitCode::from(2);
        }
    };
    netpath::record::header::mark_start();
    let result = cli.cmd.run();
    netpath::lab::wait_if_interrupted();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("netpath: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    /// Every flag and positional of every subcommand says what it is, and every subcommand's
    /// help ends with examples.
    #[test]
    fn every_argument_described_every_command_with_examples() {
        let cmd = super::Cli::command();
        cmd.clone().debug_assert();
        for sub in cmd.get_subcommands() {
            let name = sub.get_name();
            for a in sub.get_arguments().filter(|a| a.get_id() != "help") {
                assert!(
                    a.get_help().is_some() || a.get_long_help().is_some(),
                    "netpath {name}: {} has no description",
                    a.get_id()
                );
            }
            let after = sub
                .get_after_help()
                .map(|h| h.to_string())
                .unwrap_or_default();
            assert!(
                after.starts_with("EXAMPLES:"),
                "netpath {name}: no EXAMPLES"
            );
            assert!(
                after.contains(&format!("netpath {name}")),
                "netpath {name}: {after}"
            );
        }
    }
}
