//! Validates netpath's JSON against the committed schemas (`schemas/`), with the shared parts
//! (`common.json`) resolved from the repository, never fetched.
use std::path::PathBuf;

use jsonschema::{Registry, Resource};
use serde_json::Value;

const BASE: &str = "https://netpath.local/schemas/1/";

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schemas")
}

fn load(name: &str) -> Value {
    let p = dir().join(name);
    let s = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Panics with every violation (instance path and message) when `v` does not match the
/// schema of output `kind` (compare, trace, doctor, bench, inspect, validate, …).
pub fn validate(kind: &str, v: &Value) {
    let registry = Registry::new()
        .add(
            format!("{BASE}common.json"),
            Resource::from_contents(load("common.json")),
        )
        .unwrap()
        // tune's sides are compare's driver entries, its deltas diff's.
        .add(
            format!("{BASE}compare.json"),
            Resource::from_contents(load("compare.json")),
        )
        .unwrap()
        .add(
            format!("{BASE}diff.json"),
            Resource::from_contents(load("diff.json")),
        )
        .unwrap()
        .prepare()
        .unwrap();
    let schema = load(&format!("{kind}.json"));
    let validator = jsonschema::options()
        .with_registry(&registry)
        .build(&schema)
        .unwrap_or_else(|e| panic!("schemas/{kind}.json: {e}"));
    let errors: Vec<String> = validator
        .iter_errors(v)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{kind} output does not match schemas/{kind}.json:\n{}",
        errors.join("\n")
    );
    assert_eq!(v["header"]["kind"], kind);
}
