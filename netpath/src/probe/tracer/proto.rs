//! What the harness sends in the next traced run, for the programs (`RUN[run::PROTO]`) and for the
//! attach plan (datagram sends start at `sys_enter_sendto`). One load serves every protocol,
//! so `compare --proto tcp,udp,icmp` interleaves them in its rounds.
use anyhow::{Result, bail};
use netpath_common::run;

use crate::harness::Proto;

impl super::Tracer {
    /// Sets the protocol of the next traced run; only while detached (the attach plan depends
    /// on it).
    pub fn set_proto(&mut self, p: Proto) -> Result<()> {
        if self.attached() {
            bail!("the protocol of a traced run is set before its probes are attached");
        }
        if !self.dgram_bounds && p != Proto::Tcp {
            bail!(
                "--proto {p} needs the socket tracepoints sock:sock_send_length and \
                 sock:sock_recv_length (kernel 6.3+), which this kernel lacks: its receive \
                 syscalls do not name the socket a datagram arrives on; use --proto tcp here"
            );
        }
        let mode = p.kernel();
        self.tids.4.lock().unwrap().set(run::PROTO, mode, 0)?;
        self.dgram = p != Proto::Tcp;
        Ok(())
    }
}
