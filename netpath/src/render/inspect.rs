//! `netpath inspect`'s text: the container, its networks, each interface and its other end,
//! published ports and their docker-proxy, NAT rules and device settings.
use crate::runtime::{InspectReport, InterfaceReport};

impl super::Render for InspectReport {
    const KIND: &'static str = "inspect";
    fn text(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        write!(w, "{}", self.render())
    }
}

impl InspectReport {
    /// The human-readable report.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let short = crate::runtime::short_id(&self.id);
        let _ = writeln!(
            s,
            "container {} ({short}), pid {}",
            self.container, self.pid
        );
        // Who runs it and its pod, where Docker's name alone does not say it.
        if let Some(r) = self
            .record
            .as_ref()
            .filter(|r| r.runtime != crate::runtime::Runtime::Docker || r.pod.is_some())
        {
            let _ = writeln!(s, "  {}", r.describe());
        }
        let _ = writeln!(
            s,
            "  network mode {}, netns {} (net:[{}]), MTU {}",
            self.network_mode,
            self.netns,
            self.netns_inum,
            self.mtu
                .map(|m| m.to_string())
                .unwrap_or_else(|| "-".into())
        );
        for n in &self.networks {
            let _ = writeln!(
                s,
                "  network {}: {}/{} gw {}",
                n.name,
                n.ip.map(|i| i.to_string()).unwrap_or_else(|| "-".into()),
                n.prefix_len.unwrap_or(0),
                n.gateway
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| "-".into())
            );
        }
        for i in &self.interfaces {
            s.push_str(&i.render());
        }
        for p in &self.ports {
            let _ = writeln!(
                s,
                "  published {}:{} -> {}/{}",
                p.host_ip, p.host_port, p.container_port, p.proto
            );
        }
        for p in &self.proxies {
            let _ = writeln!(
                s,
                "  docker-proxy pid {}: {} {}:{} -> {}:{}",
                p.pid, p.proto, p.host_ip, p.host_port, p.container_ip, p.container_port
            );
        }
        if !self.nat_rules.is_empty() {
            let _ = writeln!(s, "  NAT rules mentioning it:");
            for r in &self.nat_rules {
                let _ = writeln!(s, "    {r}");
            }
        }
        for d in &self.devices {
            let _ = writeln!(
                s,
                "  device {}/{}: mtu {}, rps_cpus [{}]",
                d.netns,
                d.name,
                d.mtu,
                d.rps_cpus.join(" ")
            );
        }
        s
    }
}

impl InterfaceReport {
    /// One line: the interface, its addresses, its other end and that end's bridge.
    pub fn render(&self) -> String {
        let mut s = format!(
            "  {} ({}, ifindex {}, mtu {})",
            self.name, self.kind, self.ifindex, self.mtu
        );
        if !self.addrs.is_empty() {
            s.push_str(&format!(" {}", self.addrs.join(" ")));
        }
        if let Some(p) = &self.peer {
            s.push_str(&format!(
                " <-> {p} {}",
                self.peer_kind.as_deref().unwrap_or("")
            ));
        }
        if let Some(b) = &self.bridge {
            s.push_str(&format!(
                " on bridge {b} (mtu {})",
                self.bridge_mtu.unwrap_or(0)
            ));
        }
        if !self.vxlans.is_empty() {
            s.push_str(&format!(" with {}", self.vxlans.join(", ")));
        }
        s.push('\n');
        s
    }
}
