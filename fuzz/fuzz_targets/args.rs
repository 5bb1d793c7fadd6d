//! The option and argument parsers: numeric bounds, wire durations, the agent's serve
//! options, docker-proxy command lines, ldd output, /proc/net counters.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netpath::bounds;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = bounds::int(bounds::REQUESTS)(s);
    let _ = bounds::int(bounds::STREAMS)(s);
    let _ = bounds::float(bounds::PHASE_SECS)(s);
    let _ = bounds::phase_secs_nonzero(s);
    let _ = netpath::lab::netem::parse_wire_duration(s);
    let words: Vec<String> = s.split_whitespace().map(String::from).collect();
    let _ = netpath::docker::agent::ServeOpts::parse(&words);
    let _ = netpath::proxy::parse_proxy_args(1, &words);
    let _ = netpath::docker::image::parse_ldd(s);
    if let Some((a, b)) = s.split_at_checked(s.len() / 2) {
        let _ = netpath::harness::context::NetCounters::parse(a, b);
    }
});
