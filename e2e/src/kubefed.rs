//! KubeFed's own code and manifests, from its Go module, as test infrastructure.
//!
//! The module (`sigs.k8s.io/kubefed` at [`VERSION`]) comes through the Go module proxy into
//! the Go module cache (`hack/kubefed-module.sh`); its controller-manager is built and cached
//! by `hack/build-kubefed.sh`. Tests that need them skip, saying why, when Go is missing.
//!
//! [`crd_differences`] compares one of KubeFed's CRDs with hubfed's, field by field;
//! [`KubefedProcess`] runs KubeFed's controller-manager against a test hub.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;
use serde::Deserialize as _;
use serde_json::Value;

/// The KubeFed release hubfed is a drop-in for.
pub const VERSION: &str = "v0.10.0";

/// The directory of KubeFed's Go module, or `None` when Go is missing (the caller skips).
pub fn module_dir() -> anyhow::Result<Option<PathBuf>> {
    let path = script("kubefed-module.sh");
    let output = Command::new(&path)
        .env("KUBEFED_VERSION", VERSION)
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

/// KubeFed's controller-manager binary, built and cached by `hack/build-kubefed.sh`, or
/// `None` when Go is missing.
pub fn controller_manager() -> anyhow::Result<Option<PathBuf>> {
    if module_dir()?.is_none() {
        return Ok(None);
    }
    let path = script("build-kubefed.sh");
    let output = Command::new(&path)
        .env("KUBEFED_VERSION", VERSION)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", path.display()))?;
    anyhow::ensure!(output.status.success(), "{} failed", path.display());
    let binary =
        PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()).join("controller-manager");
    anyhow::ensure!(binary.is_file(), "{} is missing", binary.display());
    Ok(Some(binary))
}

/// KubeFed's controller-manager running against a test environment's hub, with the flags of
/// KubeFed's chart (log level 2, the control-plane namespace), leader election as KubeFed
/// always has it (a ConfigMap lock).
pub struct KubefedProcess {
    process: hubfed_testenv::process::GuardedProcess,
}

/// KubeFed's leader-election lock: a ConfigMap in the control-plane namespace.
pub const LOCK: &str = "kubefed-controller-manager";

impl KubefedProcess {
    /// Starts `binary` against `env`'s hub, first deleting the lock a stopped process left
    /// (v0.10.0 does not release it; a new process would wait out the lease).
    pub async fn start(
        env: &hubfed_testenv::TestEnv,
        binary: &Path,
        label: &str,
    ) -> anyhow::Result<Self> {
        let hub = env.hub().client().await?;
        release_lock(&hub).await?;
        let (metrics, healthz) = (
            crate::controller::free_port()?,
            crate::controller::free_port()?,
        );
        let (process, _) = crate::controller::spawn_guarded(
            "KubeFed's controller-manager",
            hubfed_testenv::process::Spawn {
                name: &format!("kubefed-controller-manager-{label}"),
                program: binary,
                args: vec![
                    format!("--kubeconfig={}", env.kubeconfig_path().display()),
                    format!("--kubefed-namespace={}", crate::KUBEFED_NAMESPACE),
                    format!("--metrics-addr=127.0.0.1:{metrics}"),
                    format!("--healthz-addr=127.0.0.1:{healthz}"),
                    "--v=2".to_owned(),
                ],
                env: Vec::new(),
                pid_dir: &env.dir().join("kubefed-pids"),
                log_file: env.dir().join(format!("logs/kubefed-{label}.log")),
                grace_seconds: 10,
                outlive_others: false,
                remove_dir_after: None,
            },
        )?;
        Ok(Self { process })
    }

    /// The end of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// Stops it (SIGTERM, then SIGKILL after the grace period) and waits until it is gone.
    pub fn stop(self) {
        drop(self.process);
    }
}

/// Deletes KubeFed's leader-election lock.
pub async fn release_lock(hub: &kube::Client) -> anyhow::Result<()> {
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(hub.clone(), crate::KUBEFED_NAMESPACE);
    match api.delete(LOCK, &Default::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e).context("deleting KubeFed's leader-election ConfigMap"),
    }
}

fn script(name: &str) -> PathBuf {
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

/// Schema keywords compared at every level (descriptions are not).
const SCHEMA_KEYWORDS: [&str; 12] = [
    "type",
    "format",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "default",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
];

/// Where hubfed's CRD `hubfed` differs from KubeFed's `kubefed`, one line per difference.
///
/// Compared: group, scope, names, every served version's served/storage flags,
/// subresources, printer columns and schema (each keyword of [`SCHEMA_KEYWORDS`], required
/// fields, properties present on one side only), recursively. Not differences: descriptions;
/// `listKind` left out (the API server defaults it to `<kind>List`, as KubeFed's says);
/// `apiVersion`, `kind` and `metadata` left out of the root schema (the API server knows
/// them); `nullable: true` added (it accepts a null, refuses nothing KubeFed accepts).
pub fn crd_differences(kubefed: &Value, hubfed: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let (k, h) = (&kubefed["spec"], &hubfed["spec"]);
    for field in ["group", "scope"] {
        differ(&mut out, field, &k[field], &h[field]);
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
            differ(&mut out, &format!("names.{name}"), kv, hv);
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
            out.push(format!("{name}: version missing"));
            continue;
        };
        for field in ["served", "storage", "subresources"] {
            differ(
                &mut out,
                &format!("{name}.{field}"),
                &version[field],
                &ours[field],
            );
        }
        printer_column_differences(&mut out, name, version, ours);
        let path = format!("{name}.schema");
        schema_differences(
            &mut out,
            &path,
            &version["schema"]["openAPIV3Schema"],
            &ours["schema"]["openAPIV3Schema"],
        );
    }
    out.extend(
        hv.keys()
            .filter(|name| !kv.contains_key(*name))
            .map(|name| format!("{name}: version added")),
    );
    out
}

/// Printer columns by name: their names (in order), then each column both have.
fn printer_column_differences(
    out: &mut Vec<String>,
    version: &str,
    kubefed: &Value,
    hubfed: &Value,
) {
    let columns = |v: &Value| -> Vec<Value> {
        v["additionalPrinterColumns"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let (k, h) = (columns(kubefed), columns(hubfed));
    let names =
        |columns: &[Value]| -> Value { columns.iter().map(|c| c["name"].clone()).collect() };
    let path = format!("{version}.additionalPrinterColumns");
    differ(out, &format!("{path} names"), &names(&k), &names(&h));
    for column in &k {
        if let Some(ours) = h.iter().find(|c| c["name"] == column["name"]) {
            differ(out, &format!("{path}.{}", column["name"]), column, ours);
        }
    }
}

fn keys(value: &Value) -> impl Iterator<Item = &String> {
    value.as_object().into_iter().flat_map(|map| map.keys())
}

fn differ(out: &mut Vec<String>, path: &str, kubefed: &Value, hubfed: &Value) {
    if kubefed != hubfed {
        out.push(format!("{path}: KubeFed {kubefed}, hubfed {hubfed}"));
    }
}

fn schema_differences(out: &mut Vec<String>, path: &str, kubefed: &Value, hubfed: &Value) {
    for keyword in SCHEMA_KEYWORDS {
        differ(
            out,
            &format!("{path} {keyword}"),
            &kubefed[keyword],
            &hubfed[keyword],
        );
    }
    if kubefed["nullable"] != hubfed["nullable"] && hubfed["nullable"] != Value::Bool(true) {
        differ(
            out,
            &format!("{path} nullable"),
            &kubefed["nullable"],
            &hubfed["nullable"],
        );
    }
    let required = |schema: &Value| -> Vec<String> {
        let mut names: Vec<String> = schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n.as_str().map(str::to_owned))
            .collect();
        names.sort();
        names
    };
    if required(kubefed) != required(hubfed) {
        out.push(format!(
            "{path} required: KubeFed {:?}, hubfed {:?}",
            required(kubefed),
            required(hubfed)
        ));
    }
    let root = !path.contains('.') || path.ends_with(".schema");
    let (kp, hp) = (&kubefed["properties"], &hubfed["properties"]);
    for name in keys(kp) {
        let here = format!("{path}.{name}");
        if hp.get(name).is_some() {
            schema_differences(out, &here, &kp[name], &hp[name]);
        } else if !(root && ["apiVersion", "kind", "metadata"].contains(&name.as_str())) {
            out.push(format!("{here}: missing"));
        }
    }
    out.extend(
        keys(hp)
            .filter(|name| kp.get(*name).is_none())
            .map(|name| format!("{path}.{name}: added")),
    );
    for (keyword, suffix) in [("items", "[]"), ("additionalProperties", "{}")] {
        let (kx, hx) = (&kubefed[keyword], &hubfed[keyword]);
        if kx.is_object() || hx.is_object() {
            schema_differences(out, &format!("{path}{suffix}"), kx, hx);
        } else {
            differ(out, &format!("{path} {keyword}"), kx, hx);
        }
    }
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
            crd_differences(&kubefed, &hubfed),
            [
                "v1.schema.spec required: KubeFed [\"x\"], hubfed []",
                "v1.schema.spec.y type: KubeFed \"integer\", hubfed \"string\"",
                "v1.schema.spec.z: added",
            ]
        );
        assert!(crd_differences(&kubefed, &kubefed).is_empty());
    }
}
