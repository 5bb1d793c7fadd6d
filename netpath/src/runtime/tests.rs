use std::collections::BTreeMap;

use super::cgroup::{CgroupRef, Hint, Qos};
use super::containerd::{CtrContainer, Listing};
use super::procscan::ProcContainer;
use super::scan::{DockerSeen, Inputs, assemble};
use super::*;

const UID: &str = "5c1f0d2e-8a3b-4c6d-9e7f-0a1b2c3d4e5f";

fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn cri(id: &str, kind: &str, container: Option<&str>, pid: u32) -> CtrContainer {
    let mut l = labels(&[
        (k8s::POD_NAMESPACE, "shop"),
        (k8s::POD_NAME, "web-0"),
        (k8s::POD_UID, UID),
        (k8s::CRI_KIND, kind),
    ]);
    if let Some(c) = container {
        l.insert(k8s::CONTAINER_NAME.into(), c.into());
    }
    if kind == "sandbox" {
        l.insert("app".into(), "web".into());
    }
    CtrContainer {
        namespace: "k8s.io".into(),
        id: id.into(),
        image: String::new(),
        labels: l,
        pid: Some(pid),
    }
}

fn proc(id: &str, hint: Hint, pid: u32, pod: bool) -> (String, ProcContainer) {
    (
        id.to_string(),
        ProcContainer {
            cgroup: CgroupRef {
                id: id.into(),
                hint,
                containerd_namespace: None,
                pod_uid: pod.then(|| UID.to_string()),
                qos: pod.then_some(Qos::Burstable),
            },
            pid,
            netns_inum: 4_026_532_000 + pid,
        },
    )
}

fn pod_listing() -> Listing {
    Listing {
        namespaces: vec!["k8s.io".into()],
        containers: vec![
            cri("sandbox1", "sandbox", None, 100),
            cri("app1", "container", Some("nginx"), 101),
        ],
    }
}

#[test]
fn containerd_pods_are_named_by_their_labels() {
    let procs = BTreeMap::from([
        proc("sandbox1", Hint::Containerd, 100, true),
        proc("app1", Hint::Containerd, 101, true),
    ]);
    let s = assemble(Inputs {
        docker: None,
        containerd: Some(Ok(pod_listing())),
        procs: &procs,
        netns_of: &|_| Some(7),
    });
    assert!(s.failed.is_empty());
    assert_eq!(s.containers.len(), 2, "{:?}", s.containers);
    let app = s.containers.iter().find(|c| c.id == "app1").unwrap();
    assert_eq!(app.runtime, Runtime::Containerd);
    assert_eq!(app.name, "nginx");
    assert_eq!(
        app.k8s_labels(),
        ("shop".into(), "web-0".into(), "nginx".into())
    );
    assert_eq!(app.pod.as_ref().unwrap().qos, Some("Burstable"));
    // The pod's own labels reach its containers.
    assert!(app.has_labels(&["app=web".into()]));
    for n in ["app1", "nginx", "shop/web-0", "shop/web-0/nginx"] {
        assert!(app.matches(n), "{n}");
    }
    assert!(!app.matches("shop/web-0/other") && !app.matches("shop"));
    let sb = s.containers.iter().find(|c| c.id == "sandbox1").unwrap();
    assert!(sb.sandbox && sb.matches("shop/web-0") && !sb.matches("shop/web-0/nginx"));
    assert_eq!(sb.k8s_labels().2, "");
}

#[test]
fn cgroup_alone_only_where_no_runtime_of_that_kind_is_here() {
    let id = "a".repeat(64);
    let procs = BTreeMap::from([
        proc(&id, Hint::Containerd, 300, true),
        proc(&"d".repeat(64), Hint::Docker, 400, false),
    ]);
    // No containerd on this node: found by its cgroup, said so, its pod by UID.
    let s = assemble(Inputs {
        docker: Some(Ok(Vec::new())),
        containerd: None,
        procs: &procs,
        netns_of: &|_| None,
    });
    assert_eq!(s.containers.len(), 1, "{:?}", s.containers);
    let c = &s.containers[0];
    assert_eq!((c.runtime, c.name.as_str()), (Runtime::Cgroup, &id[..12]));
    assert_eq!(c.k8s_labels().1, UID);
    assert!(c.matches(UID));
    // containerd is here but down: its containers wait for it rather than change names.
    let s = assemble(Inputs {
        docker: Some(Ok(Vec::new())),
        containerd: Some(Err("containerd not reachable".into())),
        procs: &procs,
        netns_of: &|_| None,
    });
    assert!(s.containers.is_empty(), "{:?}", s.containers);
    assert_eq!(s.failed[0].0, Runtime::Containerd);
}

#[test]
fn ids_read_short_only_when_hex() {
    let hex = "d".repeat(64);
    assert_eq!(short_id(&hex), &hex[..12]);
    assert_eq!(short_id("np1a2b3c-a-agent"), "np1a2b3c-a-agent");
}

#[test]
fn docker_containers_keep_their_names() {
    let id = "d".repeat(64);
    let procs = BTreeMap::from([proc(&id, Hint::Docker, 400, false)]);
    let s = assemble(Inputs {
        docker: Some(Ok(vec![DockerSeen {
            id: id.clone(),
            name: "web".into(),
            labels: labels(&[("netpath", "1")]),
        }])),
        containerd: None,
        procs: &procs,
        netns_of: &|_| None,
    });
    let c = &s.containers[0];
    assert_eq!(
        (c.runtime, c.name.as_str(), c.pid),
        (Runtime::Docker, "web", Some(400))
    );
    assert_eq!(c.k8s_labels(), (String::new(), String::new(), "web".into()));
    assert!(c.matches("web") && c.matches(&id[..12]) && !c.matches(&id[..6]));
    assert!(c.has_labels(&["netpath".into()]) && !c.has_labels(&["netpath=2".into()]));
}
