//! Root qdiscs of a link: netem for the emulated wire (`lab::netem`), fq / fq_codel for
//! `tune --knob qdisc`, and reading back which one a link has.

use anyhow::{Context, Result, anyhow};
use futures::{StreamExt, TryStreamExt};
use rtnetlink::packet_core::{
    DefaultNla, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST, NetlinkMessage,
    NetlinkPayload,
};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::tc::{TcAttribute, TcHandle, TcMessage};

use super::{ENODEV, ENOENT, Nl, UnknownQdisc, nl_errno};

/// `TCA_OPTIONS` of a qdisc message (linux/rtnetlink.h).
const TCA_OPTIONS: u16 = 2;

impl Nl {
    /// `tc qdisc add dev IFINDEX root KIND …`, with `options` the qdisc's `TCA_OPTIONS`
    /// payload exactly as the kernel parses it (netlink-packet-route has no typed options
    /// for every qdisc, netem among them). A kind the kernel does not know is an
    /// [`UnknownQdisc`] error (the kernel answers ENOENT after trying to load its module).
    pub fn add_root_qdisc(&self, ifindex: u32, kind: &str, options: Vec<u8>) -> Result<()> {
        self.new_root_qdisc(ifindex, kind, Some(options), NLM_F_EXCL | NLM_F_CREATE)
    }

    /// `tc qdisc replace dev IFINDEX root KIND` with the kind's defaults (no options).
    pub fn replace_root_qdisc(&self, ifindex: u32, kind: &str) -> Result<()> {
        self.new_root_qdisc(ifindex, kind, None, NLM_F_REPLACE | NLM_F_CREATE)
    }

    fn new_root_qdisc(
        &self,
        ifindex: u32,
        kind: &str,
        options: Option<Vec<u8>>,
        flags: u16,
    ) -> Result<()> {
        let mut msg = TcMessage::with_index(ifindex as i32);
        msg.header.parent = TcHandle::ROOT;
        msg.attributes.push(TcAttribute::Kind(kind.to_string()));
        if let Some(options) = options {
            msg.attributes
                .push(TcAttribute::Other(DefaultNla::new(TCA_OPTIONS, options)));
        }
        let mut req = NetlinkMessage::from(RouteNetlinkMessage::NewQueueDiscipline(msg));
        req.header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        let mut handle = self.handle.clone();
        let res = self.block(async move {
            let mut resp = handle.request(req)?;
            while let Some(m) = resp.next().await {
                if let NetlinkPayload::Error(e) = m.payload
                    && e.code.is_some()
                {
                    return Err(rtnetlink::Error::NetlinkError(e));
                }
            }
            Ok(())
        });
        match res {
            Ok(()) => Ok(()),
            Err(e) if nl_errno(&e) == Some(ENOENT) => Err(UnknownQdisc(kind.to_string()).into()),
            Err(e) => Err(anyhow!(e))
                .with_context(|| format!("netlink: setting a {kind} root qdisc on link {ifindex}")),
        }
    }

    /// `tc qdisc del dev IFINDEX root`: the link goes back to its default qdisc (`noqueue` for
    /// the lab's virtual links). A link with no qdisc of its own to delete is fine.
    pub fn del_root_qdisc(&self, ifindex: u32) -> Result<()> {
        let mut req = self.handle.qdisc().del(ifindex as i32);
        req.message_mut().header.parent = TcHandle::ROOT;
        match self.block(req.execute()) {
            Ok(()) => Ok(()),
            Err(e) if matches!(nl_errno(&e), Some(ENOENT) | Some(ENODEV)) => Ok(()),
            Err(e) if nl_errno(&e) == Some(EINVAL) => Ok(()),
            Err(e) => Err(anyhow!(e))
                .with_context(|| format!("netlink: deleting the root qdisc of link {ifindex}")),
        }
    }

    /// The kind of the root qdisc of a link (`noqueue`, `netem`, ...), if it has one.
    pub fn root_qdisc(&self, ifindex: u32) -> Result<Option<String>> {
        Ok(self.root_qdiscs()?.remove(&ifindex))
    }

    /// Every link's root qdisc kind in this namespace, by ifindex: one dump for all of them.
    pub fn root_qdiscs(&self) -> Result<std::collections::HashMap<u32, String>> {
        let msgs: Vec<TcMessage> = self
            .block(self.handle.qdisc().get().execute().try_collect())
            .context("netlink: listing qdiscs")?;
        Ok(msgs
            .iter()
            .filter(|m| m.header.parent == TcHandle::ROOT)
            .filter_map(|m| {
                let kind = m.attributes.iter().find_map(|a| match a {
                    TcAttribute::Kind(k) => Some(k.clone()),
                    _ => None,
                })?;
                Some((m.header.index as u32, kind))
            })
            .collect())
    }
}

/// The kernel's answer to deleting the built-in default (`noqueue`) root of a link.
const EINVAL: i32 = 22;
