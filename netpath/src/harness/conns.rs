//! Plumbing shared by the multi-connection modes (bulk, burst): a server thread that
//! listens in one namespace and hands each accepted connection to its own thread, and
//! client threads that connect from another namespace and start together.

use std::io::ErrorKind;
use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use super::server::{join, listen_in};
use crate::sys::netns::Netns;

/// Ask the kernel to wake this thread's sleeps within 1 ns of the target instead of the
/// default 50 µs slack (per thread; best effort).
pub(crate) fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument; no memory is passed.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Sleep until `t - spin`, then busy-wait (with a spin-loop hint) for the rest. Sleeping
/// alone wakes up tens of µs late on many machines (VMs especially); `spin` trades that
/// much CPU per wait for precision. `spin == 0`: sleep only.
pub(crate) fn sleep_until(t: Instant, spin: Duration) {
    let wake = t.checked_sub(spin).unwrap_or(t);
    loop {
        let now = Instant::now();
        if now >= wake {
            break;
        }
        std::thread::sleep(wake - now);
    }
    while Instant::now() < t {
        std::hint::spin_loop();
    }
}

/// Parameters of one multi-connection run.
pub(crate) struct Plan<'a> {
    pub client_ns: &'a Netns,
    pub server_ns: &'a Netns,
    pub bind: SocketAddrV4,
    pub connect: SocketAddrV4,
    pub connections: usize,
    /// Bound on listening, connecting and accepting.
    pub setup_timeout: Duration,
    /// Socket read/write timeouts of the clients.
    pub io_timeout: Duration,
    pub client_comm: &'a str,
    pub server_comm: &'a str,
}

/// Run `connections` client/server connection pairs.
///
/// The server thread enters `server_ns`, binds `bind` (std sets `SO_REUSEADDR` on
/// listeners, so back-to-back runs on one port do not trip over `TIME_WAIT`), accepts
/// `connections` connections and runs `serve(index, stream)` for each on its own thread
/// (threads spawned after `setns` stay in that namespace). Each client thread enters
/// `client_ns`, connects, and once every client is connected they all run
/// `client(index, stream, start)` with one common start instant.
///
/// Returns the client results in index order and the server results in accept order.
/// Every thread is joined before this returns.
pub(crate) fn run_pairs<C, S, CF, SF>(
    plan: &Plan<'_>,
    client: CF,
    serve: SF,
) -> Result<(Vec<C>, Vec<S>)>
where
    C: Send,
    S: Send,
    CF: Fn(usize, TcpStream, Instant) -> Result<C> + Sync,
    SF: Fn(usize, TcpStream) -> Result<S> + Sync,
{
    let n = plan.connections;
    if n == 0 {
        bail!("need at least one connection");
    }
    if plan.bind.ip().is_unspecified() {
        bail!("refusing to bind the lab server to a wildcard address");
    }
    let deadline = Instant::now() + plan.setup_timeout;
    let stop = AtomicBool::new(false);
    let stop = &stop;
    let (serve, client) = (&serve, &client);

    std::thread::scope(|s| {
        let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();
        let server = std::thread::Builder::new()
            .name(plan.server_comm.into())
            .spawn_scoped(s, move || serve_n(plan, deadline, stop, &ready_tx, serve))
            .context("spawning the server thread")?;
        let server = await_listening(server, &ready_rx, deadline, stop)?;

        let (conn_tx, conn_rx) = mpsc::channel::<std::result::Result<(), String>>();
        let mut gos = Vec::with_capacity(n);
        let mut clients = Vec::with_capacity(n);
        for i in 0..n {
            let (go_tx, go_rx) = mpsc::channel::<Instant>();
            let conn_tx = conn_tx.clone();
            let spawned = std::thread::Builder::new()
                .name(plan.client_comm.into())
                .spawn_scoped(s, move || {
                    client_thread(plan, deadline, conn_tx, &go_rx, |c, t| client(i, c, t))
                });
            match spawned {
                Ok(h) => {
                    gos.push(go_tx);
                    clients.push(h);
                }
                Err(e) => {
                    // Threads already spawned see their go channel close and end.
                    stop.store(true, Ordering::Relaxed);
                    drop(gos);
                    for h in clients {
                        let _ = h.join();
                    }
                    let _ = server.join();
                    return Err(anyhow!(e).context("spawning a client thread"));
                }
            }
        }
        drop(conn_tx);

        let setup_err = await_connected(&conn_rx, n, deadline, plan.setup_timeout).err();
        if setup_err.is_none() {
            let start = Instant::now();
            for g in &gos {
                let _ = g.send(start);
            }
        } else {
            // Let the server stop accepting too.
            stop.store(true, Ordering::Relaxed);
        }
        drop(gos);

        let cres: Vec<Result<Option<C>>> = clients.into_iter().map(|h| join(h, "client")).collect();
        let sres = join(server, "server");
        outcome(setup_err, cres, sres)
    })
}

/// The run's result once every thread is joined: the setup's error first, then a client's,
/// then the server's.
fn outcome<C, S>(
    setup_err: Option<anyhow::Error>,
    cres: Vec<Result<Option<C>>>,
    sres: Result<Vec<S>>,
) -> Result<(Vec<C>, Vec<S>)> {
    if let Some(e) = setup_err {
        return Err(e.context("setting up the connections failed"));
    }
    let mut out = Vec::with_capacity(cres.len());
    for r in cres {
        match r {
            Ok(Some(c)) => out.push(c),
            Ok(None) => bail!("a client was not started"),
            Err(e) => return Err(e.context("client failed")),
        }
    }
    Ok((out, sres.context("server failed")?))
}

/// The server thread: listens, accepts `plan.connections` and serves each on a thread of its
/// own; every one is joined before the first error is reported.
fn serve_n<S: Send>(
    plan: &Plan<'_>,
    deadline: Instant,
    stop: &AtomicBool,
    ready_tx: &mpsc::Sender<Result<()>>,
    serve: &(impl Fn(usize, TcpStream) -> Result<S> + Sync),
) -> Result<Vec<S>> {
    let listener = listen_in(plan.server_ns, plan.bind, ready_tx, || ())?;
    let conns = accept_n(&listener, plan.connections, deadline, stop)?;
    drop(listener);
    std::thread::scope(|s2| {
        let mut hs = Vec::with_capacity(conns.len());
        for (i, c) in conns.into_iter().enumerate() {
            let h = std::thread::Builder::new()
                .name(plan.server_comm.into())
                .spawn_scoped(s2, move || serve(i, c))
                .context("spawning a server connection thread")?;
            hs.push(h);
        }
        let rs: Vec<Result<S>> = hs
            .into_iter()
            .map(|h| join(h, "server connection"))
            .collect();
        rs.into_iter().collect()
    })
}

/// Waits until the server listens; on its error or the deadline, joins it and says why.
fn await_listening<'s, S>(
    server: ScopedJoinHandle<'s, Result<S>>,
    ready_rx: &mpsc::Receiver<Result<()>>,
    deadline: Instant,
    stop: &AtomicBool,
) -> Result<ScopedJoinHandle<'s, Result<S>>> {
    match ready_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        Ok(Ok(())) => Ok(server),
        Ok(Err(e)) => {
            let _ = server.join();
            Err(e)
        }
        Err(_) => {
            stop.store(true, Ordering::Relaxed);
            Err(match join(server, "server") {
                Err(e) => e,
                Ok(_) => anyhow!("server thread ended before listening"),
            })
        }
    }
}

/// One client thread: connects, says so, then runs `run` from the common start instant
/// (`None`: no start came, another client failed).
fn client_thread<C>(
    plan: &Plan<'_>,
    deadline: Instant,
    conn_tx: mpsc::Sender<std::result::Result<(), String>>,
    go_rx: &mpsc::Receiver<Instant>,
    run: impl FnOnce(TcpStream, Instant) -> Result<C>,
) -> Result<Option<C>> {
    let conn = match connect(plan, deadline) {
        Ok(c) => c,
        Err(e) => {
            let _ = conn_tx.send(Err(format!("{e:#}")));
            return Err(e);
        }
    };
    let _ = conn_tx.send(Ok(()));
    drop(conn_tx);
    match go_rx.recv() {
        Ok(start) => run(conn, start).map(Some),
        Err(_) => Ok(None),
    }
}

/// Waits for `n` clients to say they are connected, until the first failure or the deadline.
fn await_connected(
    conn_rx: &mpsc::Receiver<std::result::Result<(), String>>,
    n: usize,
    deadline: Instant,
    timeout: Duration,
) -> Result<()> {
    let mut connected = 0;
    while connected < n {
        match conn_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Ok(())) => connected += 1,
            Ok(Err(e)) => return Err(anyhow!(e)),
            Err(_) => {
                bail!("only {connected} of {n} connections were up before the {timeout:?} timeout")
            }
        }
    }
    Ok(())
}

fn connect(plan: &Plan<'_>, deadline: Instant) -> Result<TcpStream> {
    plan.client_ns.enter()?;
    connect_from(plan.client_ns, plan.connect, deadline, plan.io_timeout)
}

/// A client's connection to `to` before `deadline`, from `ns` (which this thread has
/// entered: named in the error), with read and write timeouts of `io_timeout`. One for the
/// request/response client and the multi-connection modes.
pub(super) fn connect_from(
    ns: &Netns,
    to: SocketAddrV4,
    deadline: Instant,
    io_timeout: Duration,
) -> Result<TcpStream> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        bail!("timeout before connecting");
    }
    let conn = TcpStream::connect_timeout(&SocketAddr::V4(to), left)
        .with_context(|| format!("client: cannot connect to {to} from {}", ns.name))?;
    conn.set_read_timeout(Some(io_timeout))?;
    conn.set_write_timeout(Some(io_timeout))?;
    Ok(conn)
}

/// Accept `n` connections, polling a non-blocking listener until `deadline` or `stop`.
fn accept_n(
    listener: &TcpListener,
    n: usize,
    deadline: Instant,
    stop: &AtomicBool,
) -> Result<Vec<TcpStream>> {
    listener.set_nonblocking(true)?;
    let mut conns = Vec::with_capacity(n);
    while conns.len() < n {
        match listener.accept() {
            Ok((c, _)) => {
                c.set_nonblocking(false)?;
                conns.push(c);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) {
                    bail!("server: stopped after {} of {n} connections", conns.len());
                }
                if Instant::now() >= deadline {
                    bail!(
                        "server: only {} of {n} connections before the timeout",
                        conns.len()
                    );
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("server: accept failed"),
        }
    }
    Ok(conns)
}
