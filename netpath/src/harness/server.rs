//! The thread scaffold of a client/server exchange, whatever it carries: a server thread that
//! gets ready (enters its namespace, listens) and says so, then a client thread, both joined,
//! a panic turned into an error.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread::ScopedJoinHandle;
use std::time::Instant;

use anyhow::{Context as _, Result, anyhow};

use super::rr::{CLIENT_COMM, RrResult, SERVER_COMM};
use crate::sys::netns::Netns;

/// A harness server's first step, on its own thread: enter `ns` and listen on `bind`. The
/// outcome goes to `ready` (`ok()` on success) so the client side waits for it, and is
/// returned too.
pub fn listen_in<T>(
    ns: &Netns,
    bind: std::net::SocketAddrV4,
    ready: &mpsc::Sender<Result<T>>,
    ok: impl FnOnce() -> T,
) -> Result<std::net::TcpListener> {
    ready_with(ready, ok, || {
        ns.enter()?;
        std::net::TcpListener::bind(bind)
            .with_context(|| format!("server: cannot listen on {bind} in {}", ns.name))
    })
}

/// Runs a server's `setup` and says how it went on `ready` (`ok()` on success).
pub fn ready_with<T, S>(
    ready: &mpsc::Sender<Result<T>>,
    ok: impl FnOnce() -> T,
    setup: impl FnOnce() -> Result<S>,
) -> Result<S> {
    match setup() {
        Ok(s) => {
            let _ = ready.send(Ok(ok()));
            Ok(s)
        }
        Err(e) => {
            let msg = format!("{e:#}");
            let _ = ready.send(Err(e));
            Err(anyhow!(msg))
        }
    }
}

/// Join a scoped thread, turning a panic into an error.
pub fn join<T>(h: ScopedJoinHandle<'_, Result<T>>, what: &str) -> Result<T> {
    h.join()
        .unwrap_or_else(|p| Err(anyhow!("{what} thread panicked: {}", crate::panic_msg(&p))))
}

/// How the two ends of one request/response exchange are run.
pub struct Ends<'a> {
    /// What the errors call the exchange ("UDP request/response").
    pub what: &'static str,
    /// Bound on the server getting ready.
    pub deadline: Instant,
    /// Tells a waiting server the client is gone: `true` when it failed or never started.
    pub stop: &'a (dyn Fn(bool) + Sync),
}

/// Runs `server` (handed the ready channel and where to leave its socket's NAPI id) and, once
/// it is ready, `client` (handed the server's thread id); the client's result, with the
/// server's NAPI id, or the first error.
pub fn client_server<S, C>(ends: &Ends, server: S, client: C) -> Result<RrResult>
where
    S: FnOnce(mpsc::Sender<Result<u32>>, &AtomicU32) -> Result<()> + Send,
    C: FnOnce(u32) -> Result<RrResult> + Send,
{
    let server_napi = &AtomicU32::new(0);
    std::thread::scope(|s| {
        let (ready_tx, ready_rx) = mpsc::channel::<Result<u32>>();
        let server = std::thread::Builder::new()
            .name(SERVER_COMM.into())
            .spawn_scoped(s, move || server(ready_tx, server_napi))
            .context("spawning the server thread")?;
        let wait = ends.deadline.saturating_duration_since(Instant::now());
        let server_tid = match ready_rx.recv_timeout(wait) {
            Ok(Ok(tid)) => tid,
            Ok(Err(e)) => {
                let _ = server.join();
                return Err(e);
            }
            Err(_) => {
                (ends.stop)(true);
                return Err(match join(server, "server") {
                    Ok(()) => anyhow!("server thread ended before listening"),
                    Err(e) => e,
                });
            }
        };
        let client = std::thread::Builder::new()
            .name(CLIENT_COMM.into())
            .spawn_scoped(s, move || client(server_tid))
            .context("spawning the client thread")?;
        let cres = join(client, "client");
        (ends.stop)(cres.is_err());
        let sres = join(server, "server");
        match (cres, sres) {
            (Ok(mut r), Ok(())) => {
                if let Some(ids) = r.napi_ids.as_mut() {
                    ids.1 = server_napi.load(Ordering::Relaxed);
                }
                Ok(r)
            }
            (Err(e), _) => Err(e.context(format!("{} client failed", ends.what))),
            (Ok(_), Err(e)) => Err(e.context(format!("{} server failed", ends.what))),
        }
    })
}

/// Runs `client` alone on a client thread (an exchange the target's kernel answers).
pub fn client_only<C>(what: &'static str, client: C) -> Result<RrResult>
where
    C: FnOnce() -> Result<RrResult> + Send,
{
    std::thread::scope(|s| {
        let h = std::thread::Builder::new()
            .name(CLIENT_COMM.into())
            .spawn_scoped(s, client)
            .context("spawning the client thread")?;
        join(h, "client").with_context(|| format!("{what} client failed"))
    })
}
