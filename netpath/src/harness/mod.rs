//! Traffic harness: request/response over plain blocking sockets in the lab namespaces.

pub mod bulk;
pub mod burst;
mod conns;
pub mod context;
pub mod rr;

pub use bulk::{BulkConfig, BulkResult, StreamResult, run_bulk, run_bulk_to, tcp_info};
pub use burst::{
    BurstConfig, BurstResult, run_burst, run_burst_phases, run_burst_to, scheduled_requests,
};
pub use context::{DevContext, NetCounters, device_context, read_counters};
pub use rr::{NoPhases, Phases, RrConfig, RrResult, run_rr};

/// Server side of one request/response connection: a `resp`-byte answer (0x5a bytes) per
/// `req`-byte request, until the client closes. Used by the burst harness and by the Docker
/// traffic agent.
pub fn echo(mut conn: std::net::TcpStream, req: usize, resp: usize) -> anyhow::Result<()> {
    use std::io::{ErrorKind, Read, Write};

    use anyhow::Context as _;
    conn.set_nodelay(true)?;
    // No read timeout: clients always close their end (EOF), even on error.
    let mut rbuf = vec![0u8; req];
    let wbuf = vec![0x5au8; resp];
    loop {
        match conn.read_exact(&mut rbuf) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
                ) =>
            {
                return Ok(());
            }
            Err(e) => return Err(e).context("server: reading a request"),
        }
        match conn.write_all(&wbuf) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => {
                return Ok(());
            }
            Err(e) => return Err(e).context("server: writing a response"),
        }
    }
}
