//! What the derived JSON Schemas (`render::schema`) say beyond the Rust types: the values a
//! name field takes, and the lost counters every result carries.
use netpath_common::hop::Dir;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

/// A one-way direction's name (`Dir::name`).
pub fn dir(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "enum": [Dir::Request.name(), Dir::Response.name()] })
}

/// Figures keyed by one-way direction.
pub fn by_dir<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "propertyNames": dir(g),
        "additionalProperties": g.subschema_for::<T>(),
    })
}

/// The lost and unmatched event counters (`super::LOST`), every one always present.
pub struct Lost;

impl JsonSchema for Lost {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Lost".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let names: Vec<&str> = super::LOST
            .iter()
            .map(|&c| netpath_common::counter::NAMES[c as usize])
            .collect();
        json_schema!({
            "description": "Lost and unmatched events, counted in the kernel; every counter is always present.",
            "type": "object",
            "required": names,
            "additionalProperties": { "type": "integer", "minimum": 0 },
        })
    }
}
