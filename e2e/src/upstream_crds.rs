//! Upstream projects' CRDs (KubeFed's, the Multi-Cluster Services API's), read from their Go
//! modules, and where hubfed's CRDs differ from them, field by field.
//!
//! A module comes through the Go module proxy into the Go module cache by a `hack/*-module.sh`
//! script ([`go_module_dir`]); [`crds_in`] reads a CRD file and [`crd_differences`] compares
//! one upstream CRD with hubfed's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;
use serde::Deserialize as _;
use serde_json::Value;

/// The directory of an upstream Go module at `version`, printed by `hack/<script>` (which
/// reads the version from `version_env`), or `None` when Go is missing (the caller skips).
pub fn go_module_dir(
    script: &str,
    version_env: &str,
    version: &str,
) -> anyhow::Result<Option<PathBuf>> {
    let path = hack_script(script);
    let output = Command::new(&path)
        .env(version_env, version)
        .output()
        .with_context(|| format!("running {}", path.display()))?;
    if output.status.code() == Some(3) {
        return Ok(None);
    }
    anyhow::ensure!(
        output.status.success(),
        "{} failed: {}",
        path.display(),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(Some(PathBuf::from(
        String::from_utf8_lossy(&output.stdout).trim(),
    )))
}

/// The path of `hack/<name>`.
pub fn hack_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../hack")
        .join(name)
}

/// The CRDs of a multi-document YAML file, by name.
pub fn crds_in(path: &Path) -> anyhow::Result<BTreeMap<String, Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut crds = BTreeMap::new();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let crd =
            Value::deserialize(document).with_context(|| format!("parsing {}", path.display()))?;
        if crd.is_null() {
            continue;
        }
        let name = crd["metadata"]["name"]
            .as_str()
            .with_context(|| format!("a CRD without a name in {}", path.display()))?;
        crds.insert(name.to_owned(), crd);
    }
    Ok(crds)
}

/// Schema keywords compared at every level: every keyword of a structural schema but
/// `description` (never compared), `nullable` (see [`crd_differences`]) and `required`,
/// `properties`, `items` and `additionalProperties` (compared on their own).
const SCHEMA_KEYWORDS: [&str; 28] = [
    "type",
    "format",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "default",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
];

/// Where hubfed's CRD `hubfed` differs from `upstream`'s (e.g. `"KubeFed"`) `theirs`, one line
/// per difference, such as `v1.schema.spec.y type: KubeFed "integer", hubfed "string"`.
///
/// Compared: group, scope, names, every version's served/storage flags, subresources,
/// printer columns and schema (each keyword of [`SCHEMA_KEYWORDS`], required fields,
/// properties present on one side only), recursively; numbers by value (`0` is `0.0`). Not
/// differences: descriptions; `listKind` left out (the API server defaults it to
/// `<kind>List`); `apiVersion`, `kind` and `metadata` left out of the root schema (the API
/// server knows them); `nullable: true` added (it accepts a null, refuses nothing upstream
/// accepts). Metadata (labels, annotations) is not compared.
pub fn crd_differences(upstream: &str, theirs: &Value, hubfed: &Value) -> Vec<String> {
    let mut out = Differences {
        upstream,
        lines: Vec::new(),
    };
    let (k, h) = (&theirs["spec"], &hubfed["spec"]);
    for field in ["group", "scope"] {
        out.differ(field, &k[field], &h[field]);
    }
    let mut names: Vec<&String> = keys(&k["names"]).chain(keys(&h["names"])).collect();
    names.sort();
    names.dedup();
    for name in names {
        let (kv, hv) = (&k["names"][name], &h["names"][name]);
        let defaulted = name == "listKind"
            && hv.is_null()
            && kv.as_str()
                == h["names"]["kind"]
                    .as_str()
                    .map(|kind| format!("{kind}List"))
                    .as_deref();
        if !defaulted {
            out.differ(&format!("names.{name}"), kv, hv);
        }
    }
    let versions = |spec: &Value| -> BTreeMap<String, Value> {
        spec["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| Some((v["name"].as_str()?.to_owned(), v.clone())))
            .collect()
    };
    let (kv, hv) = (versions(k), versions(h));
    for (name, version) in &kv {
        let Some(ours) = hv.get(name) else {
            out.lines.push(format!("{name}: version missing"));
            continue;
        };
        for field in ["served", "storage", "subresources"] {
            out.differ(&format!("{name}.{field}"), &version[field], &ours[field]);
        }
        out.printer_columns(name, version, ours);
        out.schema(
            &format!("{name}.schema"),
            &version["schema"]["openAPIV3Schema"],
            &ours["schema"]["openAPIV3Schema"],
        );
    }
    out.lines.extend(
        hv.keys()
            .filter(|name| !kv.contains_key(*name))
            .map(|name| format!("{name}: version added")),
    );
    out.lines
}

/// The differences found so far, and whose CRD hubfed's is compared with.
struct Differences<'a> {
    upstream: &'a str,
    lines: Vec<String>,
}

impl Differences<'_> {
    fn differ(&mut self, path: &str, theirs: &Value, hubfed: &Value) {
        if !same(theirs, hubfed) {
            self.lines.push(format!(
                "{path}: {} {theirs}, hubfed {hubfed}",
                self.upstream
            ));
        }
    }

    /// Printer columns by name: their names (in order), then each column both have.
    fn printer_columns(&mut self, version: &str, theirs: &Value, hubfed: &Value) {
        let columns = |v: &Value| -> Vec<Value> {
            v["additionalPrinterColumns"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        };
        let (k, h) = (columns(theirs), columns(hubfed));
        let names =
            |columns: &[Value]| -> Value { columns.iter().map(|c| c["name"].clone()).collect() };
        let path = format!("{version}.additionalPrinterColumns");
        self.differ(&format!("{path} names"), &names(&k), &names(&h));
        for column in &k {
            if let Some(ours) = h.iter().find(|c| c["name"] == column["name"]) {
                self.differ(&format!("{path}.{}", column["name"]), column, ours);
            }
        }
    }

    fn schema(&mut self, path: &str, theirs: &Value, hubfed: &Value) {
        for keyword in SCHEMA_KEYWORDS {
            self.differ(
                &format!("{path} {keyword}"),
                &theirs[keyword],
                &hubfed[keyword],
            );
        }
        if theirs["nullable"] != hubfed["nullable"] && hubfed["nullable"] != Value::Bool(true) {
            self.differ(
                &format!("{path} nullable"),
                &theirs["nullable"],
                &hubfed["nullable"],
            );
        }
        let (kr, hr) = (required(theirs), required(hubfed));
        if kr != hr {
            self.lines.push(format!(
                "{path} required: {} {kr:?}, hubfed {hr:?}",
                self.upstream
            ));
        }
        let root = !path.contains('.') || path.ends_with(".schema");
        let (kp, hp) = (&theirs["properties"], &hubfed["properties"]);
        for name in keys(kp) {
            let here = format!("{path}.{name}");
            if hp.get(name).is_some() {
                self.schema(&here, &kp[name], &hp[name]);
            } else if !(root && ["apiVersion", "kind", "metadata"].contains(&name.as_str())) {
                self.lines.push(format!("{here}: missing"));
            }
        }
        self.lines.extend(
            keys(hp)
                .filter(|name| kp.get(*name).is_none())
                .map(|name| format!("{path}.{name}: added")),
        );
        for (keyword, suffix) in [("items", "[]"), ("additionalProperties", "{}")] {
            let (kx, hx) = (&theirs[keyword], &hubfed[keyword]);
            if kx.is_object() || hx.is_object() {
                self.schema(&format!("{path}{suffix}"), kx, hx);
            } else {
                self.differ(&format!("{path} {keyword}"), kx, hx);
            }
        }
    }
}

/// A schema's required fields, sorted.
fn required(schema: &Value) -> Vec<String> {
    let mut names: Vec<String> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// Equal, numbers by value: YAML's `minimum: 0` is the `0.0` a generated CRD writes.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn keys(value: &Value) -> impl Iterator<Item = &String> {
    value.as_object().into_iter().flat_map(|map| map.keys())
}

/// Checks the differences `found` from `upstream`'s CRDs against the `deliberate` list: each
/// difference found must be listed, and each listed one still found.
///
/// `found` holds `(CRD name, whether it is one of a family, difference)`; a `deliberate` row
/// `(CRD name or "*" for every CRD of the family, difference, why)`.
pub fn check_deliberate(
    upstream: &str,
    found: &[(String, bool, String)],
    deliberate: &[(&str, &str, &str)],
) -> anyhow::Result<()> {
    let listed = |name: &str, family: bool, difference: &str| {
        deliberate
            .iter()
            .any(|(n, d, _)| (*n == name || (*n == "*" && family)) && *d == difference)
    };
    let unexplained: Vec<String> = found
        .iter()
        .filter(|(name, family, difference)| !listed(name, *family, difference))
        .map(|(name, _, difference)| format!("{name}: {difference}"))
        .collect();
    let seen: std::collections::BTreeSet<(&str, &str)> = found
        .iter()
        .map(|(name, family, difference)| {
            let name = if *family { "*" } else { name.as_str() };
            (name, difference.as_str())
        })
        .collect();
    let stale: Vec<String> = deliberate
        .iter()
        .filter(|(name, difference, _)| !seen.contains(&(*name, *difference)))
        .map(|(name, difference, _)| format!("{name}: {difference}"))
        .collect();
    anyhow::ensure!(
        unexplained.is_empty() && stale.is_empty(),
        "differences from {upstream} not listed as deliberate:\n  {}\nlisted but gone:\n  {}",
        unexplained.join("\n  "),
        stale.join("\n  ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::crd_differences;
    use serde_json::json;

    fn crd(schema: serde_json::Value, names: serde_json::Value) -> serde_json::Value {
        json!({"spec": {"group": "core.kubefed.io", "scope": "Namespaced", "names": names,
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": schema}}]}})
    }

    #[test]
    fn a_field_missing_added_or_retyped_is_a_difference() {
        let names = json!({"kind": "A", "listKind": "AList", "plural": "as"});
        let kubefed = crd(
            json!({"type": "object", "properties": {
                "apiVersion": {"type": "string"},
                "spec": {"type": "object", "required": ["x"], "properties": {
                    "x": {"type": "string"}, "y": {"type": "integer"}}}}}),
            names,
        );
        let hubfed = crd(
            json!({"type": "object", "properties": {
                "spec": {"type": "object", "nullable": true, "properties": {
                    "x": {"type": "string", "description": "words"},
                    "z": {"type": "string"}, "y": {"type": "string"}}}}}),
            json!({"kind": "A", "plural": "as"}),
        );
        assert_eq!(
            crd_differences("KubeFed", &kubefed, &hubfed),
            [
                "v1.schema.spec required: KubeFed [\"x\"], hubfed []",
                "v1.schema.spec.y type: KubeFed \"integer\", hubfed \"string\"",
                "v1.schema.spec.z: added",
            ]
        );
        assert!(crd_differences("KubeFed", &kubefed, &kubefed).is_empty());
    }

    #[test]
    fn limits_are_compared_numbers_by_value() {
        let names = json!({"kind": "A", "plural": "as"});
        let schema = |minimum: serde_json::Value, max_items: u64| {
            json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
                "n": {"type": "integer", "minimum": minimum},
                "l": {"type": "array", "maxItems": max_items, "items": {"type": "string"}}}}}})
        };
        let upstream = crd(schema(json!(0), 2), names.clone());
        assert!(
            crd_differences("MCS", &upstream, &crd(schema(json!(0.0), 2), names.clone()))
                .is_empty()
        );
        assert_eq!(
            crd_differences("MCS", &upstream, &crd(schema(json!(1.0), 3), names)),
            [
                "v1.schema.spec.l maxItems: MCS 2, hubfed 3",
                "v1.schema.spec.n minimum: MCS 0, hubfed 1.0",
            ]
        );
    }
}
