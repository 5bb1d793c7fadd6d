//! Network namespaces, the one way into them for the lab and for Docker alike.
//!
//! A [`Netns`] is named by `/run/netns/NAME` (created the way `ip netns add` does it: a
//! thread unshares `CLONE_NEWNET` and its `/proc/thread-self/ns/net` is bind-mounted there,
//! which keeps the namespace alive after the thread is gone), by any namespace file
//! (`/proc/PID/ns/net`, Docker's `/run/docker/netns/…`), or by an fd netpath holds
//! ([`Held`], `/proc/self/fd/N`). Code runs inside one on a scoped thread ([`Netns::run`]),
//! or on the calling thread, which returns home afterwards ([`Netns::run_here`]) or stays
//! ([`Netns::enter`]).

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, setns, unshare};

/// Makes the child `cmd` spawns join the network namespace open at `fd`, between fork and
/// exec, and nothing else of the parent's namespaces (`ip netns exec` would also remount
/// /sys). `fd` must stay open until `spawn` returns.
pub fn spawn_in(
    cmd: &mut std::process::Command,
    fd: std::os::fd::RawFd,
) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: only setns(2), async-signal-safe, runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Where named network namespaces live (same place as iproute2 uses).
pub const NETNS_RUN_DIR: &str = "/run/netns";

/// A named network namespace: `/run/netns/NAME`, a bind mount of an nsfs inode.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Netns {
    pub name: String,
    pub path: PathBuf,
    /// Inode number of the namespace (as in `net:[INUM]` and `bpf_get_netns_cookie`-free
    /// kernel views such as `skb->dev->nd_net->ns.inum`).
    pub inum: u32,
}

impl Netns {
    /// Create `/run/netns/NAME` holding a fresh, empty network namespace.
    pub fn create(name: &str) -> Result<Netns> {
        validate_name(name)?;
        require_root()?;
        ensure_run_dir()?;
        let path = Path::new(NETNS_RUN_DIR).join(name);
        // The mount point: an empty file, created exclusively so we never take over a
        // namespace somebody else named the same.
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o444)
            .open(&path)
            .with_context(|| format!("cannot create netns mount point {}", path.display()))?;

        let p2 = path.clone();
        let res = std::thread::Builder::new()
            .name("np-netns-new".into())
            .spawn(move || -> Result<()> {
                // Only this thread moves to the new namespace; it exits right after.
                unshare(CloneFlags::CLONE_NEWNET)
                    .context("unshare(CLONE_NEWNET) failed (needs CAP_SYS_ADMIN)")?;
                let tid = nix::unistd::gettid();
                let src = format!("/proc/self/task/{tid}/ns/net");
                mount(
                    Some(src.as_str()),
                    &p2,
                    None::<&str>,
                    MsFlags::MS_BIND,
                    None::<&str>,
                )
                .with_context(|| format!("bind mount {src} on {}", p2.display()))?;
                Ok(())
            })
            .context("spawning netns creation thread")?
            .join()
            .map_err(|_| anyhow!("netns creation thread panicked"))?;
        if let Err(e) = res {
            let _ = std::fs::remove_file(&path);
            return Err(e.context(format!("cannot create network namespace {name}")));
        }
        let inum = match ns_inum(&path) {
            Ok(i) => i,
            Err(e) => {
                let _ = umount2(&path, MntFlags::MNT_DETACH);
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        };
        Ok(Netns {
            name: name.to_string(),
            path,
            inum,
        })
    }

    /// Look up an existing named namespace (`/run/netns/NAME`).
    pub fn open_existing(name: &str) -> Result<Netns> {
        validate_name(name)?;
        Self::at(name, &Path::new(NETNS_RUN_DIR).join(name))
    }

    /// The namespace at a namespace file (`/proc/PID/ns/net`, `/run/docker/netns/…`), called
    /// `name` in device lists and messages.
    pub fn at(name: &str, path: &Path) -> Result<Netns> {
        Ok(Netns {
            name: name.to_string(),
            path: path.to_path_buf(),
            inum: ns_inum(path)?,
        })
    }

    /// Unmount and remove `/run/netns/NAME`. The kernel frees the namespace (and the
    /// links in it) once nothing else refers to it. A missing file is not an error.
    pub fn delete(&self) -> Result<()> {
        match umount2(&self.path, MntFlags::MNT_DETACH) {
            Ok(()) | Err(Errno::EINVAL) | Err(Errno::ENOENT) => {}
            Err(e) => {
                return Err(anyhow!(e))
                    .with_context(|| format!("cannot unmount {}", self.path.display()));
            }
        }
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).with_context(|| format!("cannot remove {}", self.path.display())),
        }
    }

    /// An fd on the namespace (for `setns` or `IFLA_NET_NS_FD`). Holding it keeps the
    /// namespace alive.
    pub fn open(&self) -> Result<OwnedFd> {
        let f = File::open(&self.path)
            .with_context(|| format!("cannot open network namespace {}", self.path.display()))?;
        Ok(f.into())
    }

    /// `setns(CLONE_NEWNET)` for the calling thread only.
    pub fn enter(&self) -> Result<()> {
        let fd = self.open()?;
        setns(fd.as_fd(), CloneFlags::CLONE_NEWNET)
            .with_context(|| format!("setns into network namespace {} failed", self.name))
    }

    /// Run `f` on the calling thread inside this namespace, then return the thread to the
    /// namespace it was in (for work that must happen on this thread, such as attaching a
    /// program through a handle it owns).
    pub fn run_here<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let home = File::open("/proc/thread-self/ns/net").context("own netns")?;
        self.enter()?;
        let r = f();
        setns(home.as_fd(), CloneFlags::CLONE_NEWNET).context("returning to the original netns")?;
        r
    }

    /// Run `f` on a new scoped thread that has entered this namespace.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
        std::thread::scope(|s| {
            let h = std::thread::Builder::new()
                .name(format!("np-in-{}", short(&self.name)))
                .spawn_scoped(s, || -> Result<T> {
                    self.enter()?;
                    f()
                })
                .context("spawning netns thread")?;
            match h.join() {
                Ok(r) => r,
                Err(p) => Err(anyhow!(
                    "thread inside netns {} panicked: {}",
                    self.name,
                    crate::panic_msg(&p)
                )),
            }
        })
    }
}

/// A namespace with an fd held on it: the fd keeps the namespace alive and marks it as in
/// use by this process (`netpath cleanup` run elsewhere leaves it alone).
pub struct Held {
    pub ns: Netns,
    fd: OwnedFd,
}

impl Held {
    /// Hold `ns` open; its path stays as it is.
    pub fn open(ns: Netns) -> Result<Held> {
        let fd = ns.open()?;
        Ok(Held { ns, fd })
    }

    /// Hold the namespace at `path` and name it through the fd (`/proc/self/fd/N`, valid while
    /// held, so a container that exits cannot swap another namespace in under that path). With
    /// `inum`, the namespace must still be that one.
    pub fn through_fd(name: &str, path: &Path, inum: Option<u32>) -> Result<Held> {
        let fd: OwnedFd = File::open(path)
            .with_context(|| format!("cannot open network namespace {}", path.display()))?
            .into();
        let ns = Netns::at(
            name,
            &PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())),
        )?;
        if let Some(want) = inum
            && want != ns.inum
        {
            bail!(
                "namespace {} changed under us ({want} → {})",
                path.display(),
                ns.inum
            );
        }
        Ok(Held { ns, fd })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.ns.fmt(f)
    }
}

/// Write a sysctl under /proc/sys for the calling thread's network namespace (net.* sysctls
/// follow the writer's netns).
pub fn write_sysctl(key: &str, value: &str) -> Result<()> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    std::fs::write(&path, value).with_context(|| format!("cannot write {value} to {path}"))
}

/// Read a sysctl under /proc/sys as the calling thread's network namespace sees it.
pub fn read_sysctl(key: &str) -> Result<String> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    Ok(std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {path}"))?
        .trim()
        .to_string())
}

/// Thread names are limited to 15 bytes.
fn short(s: &str) -> &str {
    let mut end = s.len().min(9);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The nsfs inode of a namespace file (the `INUM` in `net:[INUM]`).
pub fn ns_inum(path: &Path) -> Result<u32> {
    let md = std::fs::metadata(path)
        .with_context(|| format!("cannot stat network namespace {}", path.display()))?;
    let ino = md.ino();
    u32::try_from(ino).map_err(|_| anyhow!("netns inode {ino} does not fit in u32"))
}

/// Inode of the calling thread's current network namespace.
pub fn current_inum() -> Result<u32> {
    let tid = nix::unistd::gettid();
    ns_inum(Path::new(&format!("/proc/self/task/{tid}/ns/net")))
}

fn validate_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 64
        || name.starts_with('.')
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        bail!("invalid network namespace name {name:?}");
    }
    Ok(())
}

pub fn require_root() -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("the netns lab needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); run netpath as root");
    }
    Ok(())
}

/// Create `/run/netns` like iproute2 does: if we create it, make it a shared bind
/// mount of itself so namespaces mounted later propagate to other mount namespaces.
/// An existing directory is left exactly as it is.
fn ensure_run_dir() -> Result<()> {
    let dir = Path::new(NETNS_RUN_DIR);
    if dir.is_dir() {
        return Ok(());
    }
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => {
            return Err(e).with_context(|| format!("cannot create {NETNS_RUN_DIR}"));
        }
    }
    let shared = MsFlags::MS_SHARED | MsFlags::MS_REC;
    if let Err(Errno::EINVAL) = mount(None::<&str>, dir, None::<&str>, shared, None::<&str>) {
        // Not a mount point yet: bind it onto itself, then make it shared. Failure is
        // harmless for this process (the bind mounts still work here), so best effort.
        if mount(
            Some(dir),
            dir,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .is_ok()
        {
            let _ = mount(None::<&str>, dir, None::<&str>, shared, None::<&str>);
        }
    }
    Ok(())
}
