//! The JSON Schemas under `schemas/`, derived from the types every `--json` output serializes
//! (schemars, serialize contract: a field is required unless serde may skip it). One file per
//! output kind; the header and every piece two kinds share go to `common.json`, so each piece
//! is described once. `cargo xtask schemas` writes them; a unit test fails when the committed
//! files differ from what the types give.
use std::collections::{BTreeMap, BTreeSet};

use schemars::{JsonSchema, SchemaGenerator, generate::SchemaSettings};
use serde_json::{Map, Value, json};

use super::Render;
use crate::record::header::Header;

const BASE: &str = "https://netpath.local/schemas/1/";
const COMMON: &str = "common.json";

/// One output kind: its `kind`, its schema's title and the body's schema (its fields beside
/// the header).
struct Output {
    kind: &'static str,
    title: &'static str,
    body: Value,
}

fn output<T: Render + JsonSchema>(g: &mut SchemaGenerator, title: &'static str) -> Output {
    Output {
        kind: T::KIND,
        title,
        body: T::json_schema(g).to_value(),
    }
}

/// Every JSON output netpath writes, in `kind` order of the header's enum.
fn outputs(g: &mut SchemaGenerator) -> Vec<Output> {
    vec![
        output::<super::compare::CompareOutput>(g, "netpath compare --json"),
        output::<crate::trace::TraceOutput>(g, "netpath trace --json"),
        output::<super::doctor::DoctorOutput>(g, "netpath doctor --json"),
        output::<crate::bench::BenchReport>(g, "netpath bench --json"),
        output::<crate::runtime::InspectReport>(g, "netpath inspect CONTAINER --json"),
        output::<crate::measure::diff::DiffResult>(g, "netpath diff --json"),
        output::<crate::tune::TuneResult>(g, "netpath tune --json"),
        output::<crate::validate::ValidateOutput>(g, "netpath validate --json"),
        output::<super::cleanup::CleanupOutput>(g, "netpath cleanup --json"),
        output::<super::cleanup::ImageOutput>(g, "netpath image --json"),
    ]
}

/// Every schema file, name → contents: `common.json` and one per output kind.
pub fn generate() -> BTreeMap<String, Value> {
    let mut g = SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator();
    let header = g.subschema_for::<Header>().to_value();
    let outputs = outputs(&mut g);
    let mut defs = g.take_definitions(true);
    let kinds: Vec<&str> = outputs.iter().map(|o| o.kind).collect();
    if let Some(kind) = defs
        .get_mut("Header")
        .and_then(|h| h.pointer_mut("/properties/kind"))
    {
        kind["enum"] = json!(kinds);
    }

    let roots: Vec<Value> = outputs.iter().map(|o| root(o, &header)).collect();
    let common = common_defs(&roots, &defs, &header);
    let mut files = BTreeMap::new();
    for (o, mut r) in outputs.iter().zip(roots) {
        let own: BTreeSet<String> = reachable(&r, &defs)
            .into_iter()
            .filter(|d| !common.contains(d))
            .collect();
        let mut doc = Map::new();
        doc.insert("$schema".into(), json!(META));
        doc.insert("$id".into(), json!(format!("{BASE}{}.json", o.kind)));
        doc.insert("title".into(), json!(o.title));
        let Value::Object(body) = r.take() else {
            unreachable!("an output is an object")
        };
        doc.extend(body);
        if !own.is_empty() {
            doc.insert("$defs".into(), Value::Object(pick(&defs, &own)));
        }
        let mut doc = Value::Object(doc);
        to_common(&mut doc, &common);
        files.insert(format!("{}.json", o.kind), doc);
    }
    files.insert(
        COMMON.into(),
        json!({
            "$schema": META,
            "$id": format!("{BASE}{COMMON}"),
            "title": "netpath output: the header and the parts several kinds share",
            "$defs": pick(&defs, &common),
        }),
    );
    files
}

const META: &str = "https://json-schema.org/draft/2020-12/schema";

/// An output's schema: the header (its `kind` fixed to this output's) first, then the body's
/// fields.
fn root(o: &Output, header: &Value) -> Value {
    let mut r = o.body.clone();
    let mut h = header.clone();
    h["properties"] = json!({ "kind": { "const": o.kind } });
    let props = r["properties"]
        .as_object_mut()
        .expect("an output has fields");
    let mut with_header = Map::new();
    with_header.insert("header".into(), h);
    with_header.extend(std::mem::take(props));
    *props = with_header;
    let required = r["required"].as_array_mut().expect("an output has fields");
    required.insert(0, json!("header"));
    r
}

/// The definitions `common.json` holds: the header, every definition two outputs reach, and
/// whatever those reach in turn.
fn common_defs(roots: &[Value], defs: &Map<String, Value>, header: &Value) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for r in roots {
        for d in reachable(r, defs) {
            *seen.entry(d).or_default() += 1;
        }
    }
    let mut common: BTreeSet<String> = seen
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(d, _)| d)
        .collect();
    common.extend(reachable(header, defs));
    let shared: Vec<Value> = common.iter().map(|d| defs[d].clone()).collect();
    for s in &shared {
        common.extend(reachable(s, defs));
    }
    common
}

/// The definition names `v` refers to, directly or through other definitions.
fn reachable(v: &Value, defs: &Map<String, Value>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut todo = Vec::new();
    refs(v, &mut todo);
    while let Some(d) = todo.pop() {
        if out.insert(d.clone()) {
            refs(&defs[&d], &mut todo);
        }
    }
    out
}

fn refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                out.extend(r.strip_prefix("#/$defs/").map(str::to_string));
            }
            m.values().for_each(|x| refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

fn pick(defs: &Map<String, Value>, names: &BTreeSet<String>) -> Map<String, Value> {
    names.iter().map(|n| (n.clone(), defs[n].clone())).collect()
}

/// Points an output's references to shared definitions at `common.json`.
fn to_common(v: &mut Value, common: &BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get_mut("$ref")
                && let Some(name) = r.strip_prefix("#/$defs/")
                && common.contains(name)
            {
                *r = format!("{COMMON}#/$defs/{name}");
            }
            m.values_mut().for_each(|x| to_common(x, common));
        }
        Value::Array(a) => a.iter_mut().for_each(|x| to_common(x, common)),
        _ => {}
    }
}

/// The files as written: pretty JSON, two-space indent, a final newline.
pub fn text(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).expect("a schema serializes");
    s.push('\n');
    s
}

/// Writes every schema file into `dir`.
pub fn write(dir: &std::path::Path) -> std::io::Result<()> {
    for (name, v) in generate() {
        std::fs::write(dir.join(name), text(&v))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A type changed without `cargo xtask schemas`: the committed schemas would describe
    /// output netpath no longer writes.
    #[test]
    fn committed_schemas_equal_the_generated_ones() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas");
        let generated = generate();
        let mut stale = Vec::new();
        for (name, v) in &generated {
            let committed = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            if committed != text(v) {
                stale.push(name.clone());
            }
        }
        let mut extra: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".json") && !generated.contains_key(n))
            .collect();
        extra.sort();
        assert!(
            stale.is_empty() && extra.is_empty(),
            "schemas/ differs from the types: {stale:?} stale, {extra:?} not generated; run `cargo xtask schemas`"
        );
    }
}
