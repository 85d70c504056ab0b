//! The schema of a built-in kind for its `Federated<Kind>` template, from the API server's
//! OpenAPI v3 document of the kind's group/version (`/openapi/v3/apis/<group>/<version>`,
//! core: `/openapi/v3/api/v1`), as KubeFed took it from OpenAPI v2.
//!
//! The result has the shape of a CRD's `openAPIV3Schema`, so `hubfed_api::federatedcrd`
//! treats built-in and CRD targets alike: no `$ref`, only keywords structural schemas accept,
//! root `metadata` as `{type: object}`, no `status`. Defaults are dropped because the API
//! server would write them into users' templates, enums because a member can accept values
//! the hub does not know yet, and descriptions as KubeFed did: with them a Deployment's
//! schema is about seven times larger (some 340 kB instead of 50 kB).

use serde_json::{Map, Value, json};

/// Where OpenAPI v3 `$ref`s point.
const REF_PREFIX: &str = "#/components/schemas/";

/// ObjectMeta is kept free-form at every level: the root as in a CRD, nested ones (pod
/// templates) so that what kubectl writes there, such as `creationTimestamp: null`, is kept
/// as written rather than pruned as a null of a typed field.
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// Validation keywords structural schemas accept, copied as they are. Not `enum`: the hub's
/// list of values can be older than a member's, and a template is validated again by each
/// member it reaches.
const KEPT_VALIDATIONS: &[&str] = &[
    "nullable",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
];

/// Formats the API server validates in CRDs; others (e.g. `quantity`) are dropped.
const KEPT_FORMATS: &[&str] = &[
    "int32",
    "int64",
    "float",
    "double",
    "byte",
    "date",
    "date-time",
];

/// The structural schema of `group`/`version` `kind` in the OpenAPI v3 `document` (the
/// component whose `x-kubernetes-group-version-kind` names it; `group` is empty for the core
/// group), or `None` when the document has no such kind.
pub fn kind_schema(document: &Value, group: &str, version: &str, kind: &str) -> Option<Value> {
    let schemas = document.get("components")?.get("schemas")?.as_object()?;
    let (name, definition) = schemas.iter().find(|(_, schema)| {
        schema
            .get("x-kubernetes-group-version-kind")
            .and_then(Value::as_array)
            .is_some_and(|gvks| {
                gvks.iter().any(|gvk| {
                    gvk.get("group").and_then(Value::as_str).unwrap_or_default() == group
                        && gvk.get("version").and_then(Value::as_str) == Some(version)
                        && gvk.get("kind").and_then(Value::as_str) == Some(kind)
                })
            })
    })?;
    let mut root = definition.as_object()?.clone();
    let had_metadata = match root.get_mut("properties").and_then(Value::as_object_mut) {
        Some(properties) => {
            properties.remove("status");
            properties.remove("metadata").is_some()
        }
        None => false,
    };
    let mut schema = Inliner { schemas }.convert(&Value::Object(root), &mut vec![name.clone()]);
    if had_metadata && let Some(properties) = schema.get_mut("properties") {
        properties["metadata"] = json!({ "type": "object" });
    }
    Some(schema)
}

/// Inlines the references of one document's component schemas.
struct Inliner<'a> {
    schemas: &'a Map<String, Value>,
}

impl Inliner<'_> {
    /// The structural form of `node`; `expanding` holds the components being inlined on the
    /// way here, so a component that contains itself ends in a free-form node.
    fn convert(&self, node: &Value, expanding: &mut Vec<String>) -> Value {
        let Some(node) = node.as_object() else {
            return any_value();
        };
        let references = references(node);
        if !references.is_empty() || node.contains_key("allOf") {
            return self.convert_referring(node, references, expanding);
        }
        if node.get("format").is_some_and(|f| f == "int-or-string")
            || is_true(node, "x-kubernetes-int-or-string")
        {
            return int_or_string();
        }
        let type_ = match structural_type(node) {
            Ok(type_) => type_,
            Err(untyped) => return untyped,
        };
        let mut out = kept_keywords(node, type_);
        match type_ {
            "object" => self.convert_object(node, &mut out, expanding),
            "array" => self.convert_array(node, &mut out, expanding),
            _ => {}
        }
        Value::Object(out)
    }

    /// [`Self::convert`] for a node with `references` (or `allOf`): what they stand for is
    /// merged in and converted, unless it is ObjectMeta or contains itself.
    fn convert_referring(
        &self,
        node: &Map<String, Value>,
        references: Vec<String>,
        expanding: &mut Vec<String>,
    ) -> Value {
        if references.iter().any(|r| r == OBJECT_META) {
            return free_object();
        }
        if let Some(recursive) = references.iter().find(|r| expanding.contains(r)) {
            let is_object = self
                .schemas
                .get(recursive)
                .and_then(|s| s.get("type"))
                .is_some_and(|t| t == "object");
            return if is_object {
                free_object()
            } else {
                any_value()
            };
        }
        let merged = self.merge(node);
        let depth = expanding.len();
        expanding.extend(references);
        let converted = self.convert(&Value::Object(merged), expanding);
        expanding.truncate(depth);
        converted
    }

    fn convert_object(
        &self,
        node: &Map<String, Value>,
        out: &mut Map<String, Value>,
        expanding: &mut Vec<String>,
    ) {
        let properties = node.get("properties").and_then(Value::as_object);
        if let Some(properties) = properties {
            let converted: Map<String, Value> = properties
                .iter()
                .map(|(name, schema)| (name.clone(), self.convert(schema, expanding)))
                .collect();
            out.insert("properties".to_owned(), Value::Object(converted));
        }
        match node.get("additionalProperties") {
            Some(schema @ Value::Object(_)) if properties.is_none() => {
                let converted = self.convert(schema, expanding);
                out.insert("additionalProperties".to_owned(), converted);
            }
            // `true`, or a map schema next to properties: structural schemas allow neither.
            Some(Value::Object(_) | Value::Bool(true)) => preserve_unknown_fields(out),
            _ => {}
        }
        if !out.contains_key("properties") && !out.contains_key("additionalProperties") {
            // A free-form object such as RawExtension: typed as nothing, so nothing pruned.
            preserve_unknown_fields(out);
        }
        if let Some(required) = node.get("required").filter(|r| r.is_array()) {
            out.insert("required".to_owned(), required.clone());
        }
        for keyword in ["x-kubernetes-map-type", "x-kubernetes-embedded-resource"] {
            if let Some(value) = node.get(keyword) {
                out.insert(keyword.to_owned(), value.clone());
            }
        }
    }

    fn convert_array(
        &self,
        node: &Map<String, Value>,
        out: &mut Map<String, Value>,
        expanding: &mut Vec<String>,
    ) {
        let items = match node.get("items") {
            Some(items) => self.convert(items, expanding),
            None => any_value(),
        };
        let list_type = node.get("x-kubernetes-list-type").and_then(Value::as_str);
        let map_keys = node
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array);
        match (list_type, map_keys) {
            (Some("map"), Some(keys)) => {
                // A map key must be required or defaulted, and defaults are dropped: a key
                // that was only defaulted (ContainerPort's protocol) makes the list atomic.
                let required = items.get("required").and_then(Value::as_array);
                let all_required = keys
                    .iter()
                    .all(|key| required.is_some_and(|r| r.contains(key)));
                if all_required {
                    out.insert("x-kubernetes-list-type".to_owned(), json!("map"));
                    out.insert(
                        "x-kubernetes-list-map-keys".to_owned(),
                        Value::Array(keys.clone()),
                    );
                }
            }
            (Some("map"), None) => {}
            (Some(list_type), _) => {
                out.insert("x-kubernetes-list-type".to_owned(), json!(list_type));
            }
            (None, _) => {}
        }
        out.insert("items".to_owned(), items);
    }

    /// `node` with its `$ref` and `allOf` members replaced by what they stand for: the
    /// referenced components, then inline `allOf` keywords, then `node`'s own keywords (a
    /// wrapper's description and default). The components' own references are kept, for the
    /// next round of [`Self::convert`].
    fn merge(&self, node: &Map<String, Value>) -> Map<String, Value> {
        let mut parts: Vec<&Map<String, Value>> = vec![node];
        parts.extend(
            node.get("allOf")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_object),
        );
        let mut merged = Map::new();
        for component in parts.iter().filter_map(|part| self.component(part)) {
            merge_keywords(&mut merged, component, &[]);
        }
        for member in &parts[1..] {
            merge_keywords(&mut merged, member, &["$ref"]);
        }
        merge_keywords(&mut merged, node, &["$ref", "allOf"]);
        merged
    }

    /// The component `part`'s `$ref` points to.
    fn component(&self, part: &Map<String, Value>) -> Option<&Map<String, Value>> {
        let name = part.get("$ref")?.as_str()?.strip_prefix(REF_PREFIX)?;
        self.schemas.get(name)?.as_object()
    }
}

/// Adds `part`'s keywords but `skipped` to `merged`: properties and requirements accumulate,
/// anything else is replaced.
fn merge_keywords(merged: &mut Map<String, Value>, part: &Map<String, Value>, skipped: &[&str]) {
    for (key, value) in part {
        if skipped.contains(&key.as_str()) {
            continue;
        }
        match (key.as_str(), merged.get_mut(key), value) {
            ("properties", Some(Value::Object(existing)), Value::Object(more)) => {
                existing.extend(more.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            ("required", Some(Value::Array(existing)), Value::Array(more)) => {
                for name in more {
                    if !existing.contains(name) {
                        existing.push(name.clone());
                    }
                }
            }
            _ => {
                merged.insert(key.clone(), value.clone());
            }
        }
    }
}

/// The component names `node` refers to, directly or through `allOf`.
/// The `type` of a node the structural way: a node with properties is an object. `Err` holds
/// the structural form of a node without a usable type.
fn structural_type(node: &Map<String, Value>) -> Result<&str, Value> {
    let object_like = node.contains_key("properties") || node.contains_key("additionalProperties");
    match node.get("type") {
        Some(Value::String(type_)) => Ok(type_.as_str()),
        None if object_like => Ok("object"),
        // IntOrString is `oneOf: [integer, string]`; other alternatives (Quantity is string or
        // number) have no structural form but "any value".
        None if alternative_types(node) == ["integer", "string"] => Err(int_or_string()),
        None | Some(_) => Err(any_value()),
    }
}

/// The structural form of `node` but its members and items: its type, and the format and
/// validations kept.
fn kept_keywords(node: &Map<String, Value>, type_: &str) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("type".to_owned(), json!(type_));
    if let Some(format) = node.get("format").and_then(Value::as_str)
        && KEPT_FORMATS.contains(&format)
    {
        out.insert("format".to_owned(), json!(format));
    }
    for keyword in KEPT_VALIDATIONS {
        if let Some(value) = node.get(*keyword) {
            out.insert((*keyword).to_owned(), value.clone());
        }
    }
    if is_true(node, "x-kubernetes-preserve-unknown-fields") {
        preserve_unknown_fields(&mut out);
    }
    out
}

/// Whether `node`'s `keyword` is `true`.
fn is_true(node: &Map<String, Value>, keyword: &str) -> bool {
    node.get(keyword).is_some_and(|v| v == true)
}

fn preserve_unknown_fields(out: &mut Map<String, Value>) {
    out.insert(
        "x-kubernetes-preserve-unknown-fields".to_owned(),
        json!(true),
    );
}

fn references(node: &Map<String, Value>) -> Vec<String> {
    let direct = node.get("$ref");
    let wrapped = node
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|member| member.get("$ref"));
    direct
        .into_iter()
        .chain(wrapped)
        .filter_map(Value::as_str)
        .map(|r| r.strip_prefix(REF_PREFIX).unwrap_or(r).to_owned())
        .collect()
}

/// The sorted types of `node`'s `oneOf` / `anyOf` alternatives.
fn alternative_types(node: &Map<String, Value>) -> Vec<&str> {
    let mut types: Vec<&str> = ["oneOf", "anyOf"]
        .iter()
        .filter_map(|keyword| node.get(*keyword).and_then(Value::as_array))
        .flatten()
        .filter_map(|alternative| alternative.get("type").and_then(Value::as_str))
        .collect();
    types.sort_unstable();
    types.dedup();
    types
}

fn int_or_string() -> Value {
    json!({ "x-kubernetes-int-or-string": true })
}

fn free_object() -> Value {
    json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

fn any_value() -> Value {
    json!({ "x-kubernetes-preserve-unknown-fields": true })
}

#[cfg(test)]
mod tests;
