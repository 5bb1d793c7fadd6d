//! Kernel struct offsets from BTF at run time. Aya has no CO-RE for Rust programs, so the loader
//! reads `/sys/kernel/btf/vmlinux` and hands the offsets to the programs as load-time globals.
use anyhow::{Context as _, Result, anyhow, bail};
use btf_rs::{Btf, Type};
use netpath_common::KernelOffsets;

pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

/// Fails with one line before anything is built when the kernel has no BTF (every backend
/// reads its struct offsets from it).
pub fn require() -> Result<()> {
    if !std::path::Path::new(VMLINUX).is_file() {
        bail!(
            "no kernel BTF at {VMLINUX}: netpath needs a kernel built with CONFIG_DEBUG_INFO_BTF=y \
             (and sysfs mounted at /sys)"
        );
    }
    Ok(())
}

pub fn load_vmlinux() -> Result<Btf> {
    Btf::from_file(VMLINUX).with_context(|| {
        format!("cannot read kernel BTF at {VMLINUX}: netpath needs a kernel built with CONFIG_DEBUG_INFO_BTF=y")
    })
}

/// Follows typedefs and qualifiers down to the underlying type.
fn strip(btf: &Btf, mut t: Type) -> Result<Type> {
    loop {
        match t {
            Type::Typedef(_)
            | Type::Volatile(_)
            | Type::Const(_)
            | Type::Restrict(_)
            | Type::TypeTag(_) => {
                let bt = t
                    .as_btf_type()
                    .ok_or_else(|| anyhow!("BTF type without reference"))?;
                t = btf.resolve_chained_type(bt)?;
            }
            _ => return Ok(t),
        }
    }
}

/// Byte offset of `field` in `ty` (a struct or union), looking through anonymous members.
fn member_offset(btf: &Btf, ty: &Type, field: &str) -> Result<Option<u32>> {
    let s = match ty {
        Type::Struct(s) | Type::Union(s) => s,
        _ => bail!("not a struct or union"),
    };
    for m in &s.members {
        let name = btf.resolve_name(m).unwrap_or_default();
        if name == field {
            if m.bitfield_size().is_some_and(|b| b != 0) {
                bail!("{field} is a bitfield");
            }
            return Ok(Some(m.bit_offset() / 8));
        }
        if name.is_empty() {
            let inner = strip(btf, btf.resolve_chained_type(m)?)?;
            if let Some(off) = member_offset(btf, &inner, field)? {
                return Ok(Some(m.bit_offset() / 8 + off));
            }
        }
    }
    Ok(None)
}

/// Offset of a dotted path such as `ns.inum` inside `struct <name>`.
pub fn offset_of(btf: &Btf, name: &str, path: &str) -> Result<u32> {
    let types = btf.resolve_types_by_name(name)?;
    let mut ty = types
        .into_iter()
        .find(|t| matches!(t, Type::Struct(_)))
        .ok_or_else(|| anyhow!("struct {name} not in kernel BTF"))?;
    let mut total = 0;
    for field in path.split('.') {
        let off = member_offset(btf, &ty, field)?
            .ok_or_else(|| anyhow!("struct {name} has no field {path} in this kernel's BTF"))?;
        total += off;
        // Descend for the next component.
        let s = match &ty {
            Type::Struct(s) | Type::Union(s) => s.clone(),
            _ => unreachable!(),
        };
        ty = find_member_type(btf, &s.members, field)?.unwrap_or(Type::Void);
    }
    Ok(total)
}

fn find_member_type(btf: &Btf, members: &[btf_rs::Member], field: &str) -> Result<Option<Type>> {
    for m in members {
        let name = btf.resolve_name(m).unwrap_or_default();
        if name == field {
            return Ok(Some(strip(btf, btf.resolve_chained_type(m)?)?));
        }
        if name.is_empty()
            && let Type::Struct(s) | Type::Union(s) = strip(btf, btf.resolve_chained_type(m)?)?
            && let Some(t) = find_member_type(btf, &s.members, field)?
        {
            return Ok(Some(t));
        }
    }
    Ok(None)
}

/// Every offset the programs need.
pub fn kernel_offsets(btf: &Btf) -> Result<KernelOffsets> {
    let o = |s, f| offset_of(btf, s, f).with_context(|| format!("offset of {s}.{f}"));
    Ok(KernelOffsets {
        skb_dev: o("sk_buff", "dev")?,
        skb_head: o("sk_buff", "head")?,
        skb_network_header: o("sk_buff", "network_header")?,
        skb_transport_header: o("sk_buff", "transport_header")?,
        dev_ifindex: o("net_device", "ifindex")?,
        // possible_net_t { struct net *net; }: the pointer is its first member.
        dev_nd_net: o("net_device", "nd_net")? + o("possible_net_t", "net").unwrap_or(0),
        net_ns_inum: o("net", "ns.inum")?,
        // struct sock starts with struct sock_common __sk_common.
        sk_daddr: o("sock_common", "skc_daddr")?,
        sk_dport: o("sock_common", "skc_dport")?,
        sk_rcvq_tail: o("sock", "sk_receive_queue.prev")?,
        skb_sk: o("sk_buff", "sk")?,
        task_pid: o("task_struct", "pid")?,
        sk_rcv_saddr: o("sock_common", "skc_rcv_saddr")?,
        sk_num: o("sock_common", "skc_num")?,
        tcp_rcv_nxt: o("tcp_sock", "rcv_nxt")?,
        tcp_copied_seq: o("tcp_sock", "copied_seq")?,
    })
}

/// The nf_tables offsets of the chain probes (`--parts` without netfilter programs), from
/// vmlinux where nf_tables is built in, else from the module's split BTF (loaded first with
/// `modprobe`: the offsets are fixed at load, before any ruleset may have pulled it in).
pub fn nft_offsets(vmlinux: &Btf) -> Result<netpath_common::NftOffsets> {
    const MODULE: &str = "/sys/kernel/btf/nf_tables";
    let split;
    let btf = if offset_of(vmlinux, "nft_chain", "name").is_ok() {
        vmlinux
    } else {
        if !std::path::Path::new(MODULE).is_file() {
            // Best effort: a missing module is said by the read below.
            let _ = std::process::Command::new("modprobe")
                .arg("nf_tables")
                .status();
        }
        split = Btf::from_split_file(MODULE, vmlinux)
            .with_context(|| format!("no nf_tables BTF at {MODULE}"))?;
        &split
    };
    let o = |s, f| offset_of(btf, s, f).with_context(|| format!("offset of {s}.{f}"));
    Ok(netpath_common::NftOffsets {
        pkt_skb: o("nft_pktinfo", "skb")?,
        pkt_state: o("nft_pktinfo", "state")?,
        state_hook: o("nf_hook_state", "hook")?,
        state_net: o("nf_hook_state", "net")?,
        chain_name: o("nft_chain", "name")?,
        chain_table: o("nft_chain", "table")?,
        table_name: o("nft_table", "name")?,
        _pad: 0,
    })
}

/// Value → name of a kernel enum, e.g. `skb_drop_reason` (its values change between kernels,
/// so they are never compiled in). Names lose the common prefix: `SKB_DROP_REASON_NOT_SPECIFIED`
/// becomes `NOT_SPECIFIED`.
pub fn enum_names(btf: &Btf, name: &str, prefix: &str) -> std::collections::BTreeMap<u32, String> {
    let mut out = std::collections::BTreeMap::new();
    for t in btf.resolve_types_by_name(name).unwrap_or_default() {
        if let Type::Enum(e) = t {
            for m in &e.members {
                if let Ok(n) = btf.resolve_name(m) {
                    out.insert(m.val(), n.trim_start_matches(prefix).to_string());
                }
            }
        }
    }
    out
}

/// Whether a function exists in vmlinux BTF (or a module's), for function-probe backends.
pub fn has_func(btf: &Btf, func: &str) -> bool {
    btf.resolve_types_by_name(func)
        .map(|v| v.iter().any(|t| matches!(t, Type::Func(_))))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_resolve_on_this_kernel() {
        let btf = load_vmlinux().expect("this machine has BTF");
        let o = kernel_offsets(&btf).unwrap();
        // Sanity, not values: fields exist, are distinct, and lie inside the structs.
        assert!(o.skb_head > 0 && o.skb_head < 256, "{o:?}");
        assert_ne!(o.skb_dev, o.skb_head);
        assert!(o.skb_sk > 0 && o.skb_sk != o.skb_dev, "{o:?}");
        assert_ne!(o.skb_network_header, o.skb_transport_header);
        assert!(o.dev_ifindex > 0 && o.dev_nd_net > 0, "{o:?}");
        assert!(offset_of(&btf, "sk_buff", "no_such_field").is_err());
        // A dotted path descends into the member's type (here through sk_buff_head's
        // anonymous union): prev is the queue's second pointer.
        let prev = offset_of(&btf, "sk_buff_head", "prev").unwrap();
        assert_eq!(prev, 8);
        assert_eq!(
            o.sk_rcvq_tail,
            offset_of(&btf, "sock", "sk_receive_queue").unwrap() + prev
        );
        let reasons = enum_names(&btf, "skb_drop_reason", "SKB_DROP_REASON_");
        assert!(
            reasons.values().any(|n| n == "NETFILTER_DROP"),
            "{reasons:?}"
        );
    }
}
