//! Helm in tests: the pinned `helm` binary, `helm template` of the repository's charts as JSON
//! documents, and the README check of a chart's values.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail, ensure};
use serde::Deserialize as _;
use serde_json::Value;

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::{Client, ResourceExt as _};

use crate::{FIELD_MANAGER, KUBEFED_NAMESPACE, dynamic_api};

/// Rendered kinds of `charts/hubfed` a test applies to the hub to run a controller as the
/// chart would: RBAC and the seeded control-plane objects (the Deployment, Services and
/// webhooks need pods and endpoints, which only `image_pod.rs` provides, for the Deployment).
pub const APPLIED_KINDS: [&str; 7] = [
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "KubeFedConfig",
    "FederatedTypeConfig",
];

/// Release name of every render of `charts/hubfed`: objects are then named `hubfed`.
pub const RELEASE: &str = "hubfed";

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ sits in the repository")
        .to_path_buf()
}

/// `charts/hubfed`.
pub fn chart_dir() -> PathBuf {
    repo_root().join("charts/hubfed")
}

/// `HUBFED_HELM`, else the pinned release cached by `hack/build-helm.sh` (its version is read
/// from the script, the one place it is pinned).
pub fn helm_binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("HUBFED_HELM") {
        let path = PathBuf::from(path);
        ensure!(
            path.is_file(),
            "HUBFED_HELM={} is not a file",
            path.display()
        );
        return Ok(path);
    }
    let script = std::fs::read_to_string(repo_root().join("hack/build-helm.sh"))?;
    let version = script
        .lines()
        .find_map(|line| line.strip_prefix("V=${HELM_VERSION:-"))
        .and_then(|rest| rest.strip_suffix('}'))
        .context("hack/build-helm.sh no longer pins V=${HELM_VERSION:-<version>}")?;
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))
        .context("neither XDG_CACHE_HOME nor HOME is set")?;
    let path = cache.join(format!(
        "hubfed/helm/v{}/helm",
        version.trim_start_matches('v')
    ));
    ensure!(
        path.is_file(),
        "helm is missing: no HUBFED_HELM and no {}. Build the pinned helm once with \
         `hack/build-helm.sh` (a few minutes; needs Go), or point HUBFED_HELM at a helm binary.",
        path.display()
    );
    Ok(path)
}

/// Runs helm; its standard output, or an error with its standard error.
pub fn helm(args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new(helm_binary()?)
        .args(args)
        .output()
        .context("running helm")?;
    let stdout = String::from_utf8(output.stdout)?;
    if !output.status.success() {
        bail!(
            "helm {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr),
            stdout
        );
    }
    Ok(stdout)
}

/// `helm template` of the chart in the control-plane namespace with `extra` arguments, as
/// JSON documents.
pub fn render(extra: &[&str]) -> anyhow::Result<Vec<Value>> {
    let chart = chart_dir();
    let chart = chart.to_str().context("chart path is UTF-8")?;
    let mut args = vec!["template", RELEASE, chart, "--namespace", KUBEFED_NAMESPACE];
    args.extend_from_slice(extra);
    parse_documents(&helm(&args)?)
}

/// The YAML documents of `text` as JSON, empty ones left out.
pub fn parse_documents(text: &str) -> anyhow::Result<Vec<Value>> {
    let mut documents = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value = Value::deserialize(document).context("rendered YAML")?;
        if !value.is_null() {
            documents.push(value);
        }
    }
    Ok(documents)
}

/// The documents of kind `kind`.
pub fn of_kind<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}

/// The strings of a JSON array (none when it is not one).
pub fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The values of `chart`'s values.yaml its README.md does not list (a value is listed when
/// its dotted path, or a parent's, appears in backquotes).
pub fn values_missing_from_readme(chart: &Path) -> anyhow::Result<Vec<String>> {
    fn leaves(prefix: &str, value: &Value, readme: &str, missing: &mut Vec<String>) {
        // The root has no name: "``" would match any code fence.
        if !prefix.is_empty() && readme.contains(&format!("`{prefix}`")) {
            return;
        }
        match value.as_object() {
            Some(map) if !map.is_empty() => {
                for (key, child) in map {
                    let path = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    leaves(&path, child, readme, missing);
                }
            }
            _ => missing.push(prefix.to_owned()),
        }
    }
    let values: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(chart.join("values.yaml"))?)?;
    let readme = std::fs::read_to_string(chart.join("README.md"))?;
    let mut missing = Vec::new();
    leaves("", &values, &readme, &mut missing);
    Ok(missing)
}

/// Server-side applies a rendered object as [`FIELD_MANAGER`], finding its resource by
/// discovery.
pub async fn apply_rendered(client: &Client, object: &Value) -> anyhow::Result<()> {
    let (group, version) = match object["apiVersion"].as_str().context("apiVersion")? {
        api_version if api_version.contains('/') => {
            api_version.split_once('/').context("group/version")?
        }
        version => ("", version),
    };
    let kind = object["kind"].as_str().context("kind")?;
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk).await?;
    let object: DynamicObject = serde_json::from_value(object.clone())?;
    let namespace = object.namespace();
    let api = match capabilities.scope {
        Scope::Namespaced => dynamic_api(client.clone(), &resource, namespace.as_deref()),
        Scope::Cluster => dynamic_api(client.clone(), &resource, None),
    };
    api.patch(
        &object.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .with_context(|| format!("applying {kind} {}", object.name_any()))?;
    Ok(())
}

/// Runs helm against the hub of `env`: `args` then `--kubeconfig` and `--kube-context`.
pub fn helm_on_hub(env: &hubfed_testenv::TestEnv, args: &[&str]) -> anyhow::Result<String> {
    let kubeconfig = env
        .kubeconfig_path()
        .to_str()
        .context("kubeconfig path is UTF-8")?;
    let mut all = args.to_vec();
    all.extend_from_slice(&[
        "--kubeconfig",
        kubeconfig,
        "--kube-context",
        env.hub().name(),
    ]);
    helm(&all)
}

/// A hub alone (no members, no kube-controller-manager): what the chart's install tests
/// need, without the cost of members.
pub fn start_hub_only() -> anyhow::Result<hubfed_testenv::TestEnv> {
    Ok(hubfed_testenv::TestEnv::start(
        hubfed_testenv::TestEnvConfig {
            members: 0,
            controller_manager: false,
            ..Default::default()
        },
    )?)
}
