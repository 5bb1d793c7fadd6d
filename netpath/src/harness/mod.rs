//! Traffic harness: request/response over plain blocking sockets in the lab namespaces.

pub mod bulk;
pub mod burst;
mod conns;
pub mod context;
pub mod dgram;
pub mod icmp;
pub mod proto;
pub mod rr;
pub mod runmode;

pub use bulk::{BulkConfig, BulkResult, StreamResult, run_bulk, run_bulk_to, tcp_info};
pub use burst::{
    BurstConfig, BurstResult, run_burst, run_burst_phases, run_burst_to, scheduled_requests,
};
pub use context::{DevContext, NetCounters, device_context, read_counters};
pub use proto::Proto;
pub use rr::{NoPhases, Phases, RrConfig, RrResult, run_rr};
pub use runmode::{Cpus, Pin, WaitMode};

/// A harness server's first step, on its own thread: enter `ns` and listen on `bind`. The
/// outcome goes to `ready` (`ok()` on success) so the client side waits for it, and is
/// returned too.
fn listen_in<T>(
    ns: &crate::netns::Netns,
    bind: std::net::SocketAddrV4,
    ready: &std::sync::mpsc::Sender<anyhow::Result<T>>,
    ok: impl FnOnce() -> T,
) -> anyhow::Result<std::net::TcpListener> {
    use anyhow::Context as _;
    let setup = || -> anyhow::Result<std::net::TcpListener> {
        ns.enter()?;
        std::net::TcpListener::bind(bind)
            .with_context(|| format!("server: cannot listen on {bind} in {}", ns.name))
    };
    match setup() {
        Ok(l) => {
            let _ = ready.send(Ok(ok()));
            Ok(l)
        }
        Err(e) => {
            let msg = format!("{e:#}");
            let _ = ready.send(Err(e));
            Err(anyhow::anyhow!(msg))
        }
    }
}

/// Server side of one request/response connection: a `resp`-byte answer (0x5a bytes) per
/// `req`-byte request, until the client closes. Used by the burst harness and by the Docker
/// traffic agent.
pub fn echo(conn: std::net::TcpStream, req: usize, resp: usize) -> anyhow::Result<()> {
    let rx = runmode::Receiver::new(WaitMode::Block, Pin::default(), None);
    echo_with(conn, req, resp, &rx)
}

/// [`echo`] waiting for requests as `rx` says.
pub fn echo_with(
    mut conn: std::net::TcpStream,
    req: usize,
    resp: usize,
    rx: &runmode::Receiver,
) -> anyhow::Result<()> {
    use std::io::ErrorKind;

    use anyhow::Context as _;
    conn.set_nodelay(true)?;
    rx.prepare(&conn)?;
    // No read timeout: clients always close their end (EOF), even on error.
    let mut rbuf = vec![0u8; req];
    let wbuf = vec![0x5au8; resp];
    loop {
        match rx.read_exact(&mut conn, &mut rbuf) {
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
        match rx.write_all(&mut conn, &wbuf) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => {
                return Ok(());
            }
            Err(e) => return Err(e).context("server: writing a response"),
        }
    }
}
