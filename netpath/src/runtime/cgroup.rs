//! A task's cgroup path → the container it runs in, as each runtime and cgroup driver lays
//! the tree out:
//!
//! | who | systemd driver | cgroupfs driver |
//! |---|---|---|
//! | Docker | `/system.slice/docker-<id>.scope` | `/docker/<id>` |
//! | containerd (CRI) | `…/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope` | `/kubepods/burstable/pod<uid>/<id>` |
//! | CRI-O | `…/crio-<id>.scope` | `/kubepods/…/pod<uid>/<id>` |
//! | `ctr run` | | `/<containerd namespace>/<id>` |
//!
//! A pod's UID and QoS class come from the `kubepods` levels above the container's.

/// Which runtime a cgroup path says made the container, when it says.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Hint {
    Docker,
    Containerd,
    Crio,
    Podman,
    /// A bare id under `kubepods`: the cgroupfs driver does not name the runtime.
    Unknown,
}

/// A pod's Kubernetes QoS class, from its place under `kubepods`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, schemars::JsonSchema)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl Qos {
    pub fn name(self) -> &'static str {
        match self {
            Qos::Guaranteed => "Guaranteed",
            Qos::Burstable => "Burstable",
            Qos::BestEffort => "BestEffort",
        }
    }
}

/// What a cgroup path tells about the container a task runs in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupRef {
    pub id: String,
    pub hint: Hint,
    /// The containerd namespace of a `ctr`-style `/<namespace>/<id>` path.
    pub containerd_namespace: Option<String>,
    pub pod_uid: Option<String>,
    pub qos: Option<Qos>,
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `<prefix>-<64 hex>.scope` (the systemd driver's container scope).
fn scope_id(c: &str) -> Option<(Hint, &str)> {
    let stem = c.strip_suffix(".scope")?;
    let (prefix, id) = stem.rsplit_once('-')?;
    if !is_hex64(id) {
        return None;
    }
    let hint = match prefix {
        "docker" => Hint::Docker,
        "cri-containerd" => Hint::Containerd,
        "crio" => Hint::Crio,
        "libpod" => Hint::Podman,
        _ => return None,
    };
    Some((hint, id))
}

/// The pod UID a `kubepods` level names: `pod<uid>` (cgroupfs) or
/// `kubepods[-<qos>]-pod<uid with _ for ->.slice` (systemd).
fn pod_uid(c: &str) -> Option<String> {
    let raw = if let Some(s) = c.strip_suffix(".slice") {
        s.rsplit_once("-pod")?.1
    } else {
        c.strip_prefix("pod")?
    };
    let uid = raw.replace('_', "-");
    let ok = uid.len() >= 8 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    ok.then_some(uid)
}

fn qos_of(c: &str) -> Option<Qos> {
    match c {
        "burstable" | "kubepods-burstable.slice" => Some(Qos::Burstable),
        "besteffort" | "kubepods-besteffort.slice" => Some(Qos::BestEffort),
        _ => None,
    }
}

/// The container a task whose cgroup is `path` runs in, if the path is one a runtime makes.
/// `namespaces`: containerd namespaces known on this node, so a `ctr`-made
/// `/<namespace>/<id>` is told from any other two-level cgroup.
pub fn parse(path: &str, namespaces: &[String]) -> Option<CgroupRef> {
    let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let last = *parts.last()?;
    let under_kubepods = parts
        .iter()
        .any(|c| *c == "kubepods" || c.starts_with("kubepods.") || c.starts_with("kubepods-"));
    let (pod_uid, qos) = if under_kubepods {
        let uid = parts[..parts.len() - 1].iter().find_map(|c| pod_uid(c));
        let qos = parts
            .iter()
            .find_map(|c| qos_of(c))
            .unwrap_or(Qos::Guaranteed);
        (uid, Some(qos))
    } else {
        (None, None)
    };
    let (hint, id, ns) = if let Some((hint, id)) = scope_id(last) {
        (hint, id.to_string(), None)
    } else if is_hex64(last) && parts.len() >= 2 && parts[parts.len() - 2] == "docker" {
        (Hint::Docker, last.to_string(), None)
    } else if is_hex64(last) && pod_uid.is_some() {
        (Hint::Unknown, last.to_string(), None)
    } else if parts.len() == 2 && namespaces.iter().any(|n| n == parts[0]) {
        (
            Hint::Containerd,
            last.to_string(),
            Some(parts[0].to_string()),
        )
    } else {
        return None;
    };
    Some(CgroupRef {
        id,
        hint,
        containerd_namespace: ns,
        pod_uid: pod_uid.filter(|_| qos.is_some()),
        qos,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f4e1c0c5b7a9d2e8f6a1b3c5d7e9f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e";
    const UID: &str = "5c1f0d2e-8a3b-4c6d-9e7f-0a1b2c3d4e5f";

    fn p(path: &str) -> Option<CgroupRef> {
        parse(path, &["netpath-test".to_string()])
    }

    #[test]
    fn docker_under_both_drivers() {
        for path in [
            format!("/system.slice/docker-{ID}.scope"),
            format!("/docker/{ID}"),
        ] {
            let r = p(&path).unwrap();
            assert_eq!((r.hint, r.id.as_str()), (Hint::Docker, ID), "{path}");
            assert_eq!((r.pod_uid, r.qos), (None, None));
        }
    }

    #[test]
    fn cri_containerd_pods_with_their_uid_and_qos() {
        let u = UID.replace('-', "_");
        let cases = [
            (
                format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{ID}.scope"
                ),
                Hint::Containerd,
                Qos::Burstable,
            ),
            (
                format!(
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/cri-containerd-{ID}.scope"
                ),
                Hint::Containerd,
                Qos::BestEffort,
            ),
            (
                format!("/kubepods.slice/kubepods-pod{u}.slice/cri-containerd-{ID}.scope"),
                Hint::Containerd,
                Qos::Guaranteed,
            ),
            (
                format!("/kubepods/burstable/pod{UID}/{ID}"),
                Hint::Unknown,
                Qos::Burstable,
            ),
            (
                format!("/kubepods/pod{UID}/{ID}"),
                Hint::Unknown,
                Qos::Guaranteed,
            ),
            (
                format!("/kubepods.slice/kubepods-pod{u}.slice/crio-{ID}.scope"),
                Hint::Crio,
                Qos::Guaranteed,
            ),
            (
                format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/docker-{ID}.scope"
                ),
                Hint::Docker,
                Qos::Burstable,
            ),
        ];
        for (path, hint, qos) in cases {
            let r = p(&path).unwrap_or_else(|| panic!("{path}"));
            assert_eq!(r.id, ID, "{path}");
            assert_eq!(r.hint, hint, "{path}");
            assert_eq!(r.pod_uid.as_deref(), Some(UID), "{path}");
            assert_eq!(r.qos, Some(qos), "{path}");
        }
    }

    #[test]
    fn ctr_tasks_in_a_known_containerd_namespace_only() {
        let r = p("/netpath-test/np1a2b3c-a-app").unwrap();
        assert_eq!(r.hint, Hint::Containerd);
        assert_eq!(r.id, "np1a2b3c-a-app");
        assert_eq!(r.containerd_namespace.as_deref(), Some("netpath-test"));
        // Any other two-level cgroup is nobody's container.
        assert_eq!(p("/process_api/49302f491461b3898766c121efbf9ddf"), None);
        assert_eq!(p("/user.slice/user-0.slice"), None);
    }

    #[test]
    fn not_containers() {
        for path in [
            "/",
            "",
            "/system.slice/containerd.service",
            "/system.slice/docker.service",
            "/kubepods.slice/kubepods-burstable.slice",
            &format!("/system.slice/crio-conmon-{ID}.scope"),
            "/docker/notanid",
        ] {
            assert_eq!(p(path), None, "{path}");
        }
    }
}
