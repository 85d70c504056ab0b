//! `--controller kubefed`: KubeFed v0.10.0's controller-manager as the controller under test,
//! on the same clusters, CRDs (hubfed's `crds/`, wire compatible with KubeFed v1beta1),
//! FederatedTypeConfigs and KubeFedClusters as hubfed gets.
//!
//! What it needs beyond what hubfed needs: a complete KubeFedConfig in its namespace (it
//! validates the one it finds and refuses to start on a partial one), written here with
//! KubeFed's defaults and the benchmark's reconcile concurrency; its leader-election lock (it
//! cannot run without leader election) deleted before each start, since v0.10.0 does not
//! release it when stopped and a new process would wait out the 15 s lease.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash as _, Hasher as _};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use hubfed_api::federatedtypeconfig::ResourceScope;
use hubfed_api::kubefedconfig::KubeFedConfigSpec;
use hubfed_api::propagatedversion::PropagatedVersion;
use hubfed_e2e::KUBEFED_NAMESPACE;
use hubfed_testenv::TestEnv;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};

use super::workload::KINDS;

/// The release under comparison.
pub const VERSION: &str = "v0.10.0";
/// KubeFed's leader-election lock: a ConfigMap of this name in its namespace (the
/// KubeFedConfig's default `resourceLock: configmaps`; v0.10.0 offers no Lease lock).
const LOCK: &str = "kubefed-controller-manager";

/// The KubeFedConfig KubeFed gets: its own defaults (those of its chart), cluster scoped,
/// with `syncController.maxConcurrentReconciles` and `statusController.maxConcurrentReconciles`
/// set to the benchmark's `--reconcile-concurrency` (KubeFed's default is 1). KubeFed has no
/// member write limit to set.
pub fn config(reconcile_concurrency: u16) -> KubeFedConfigSpec {
    let mut spec = KubeFedConfigSpec::with_defaults(ResourceScope::Cluster);
    let concurrency = i64::from(reconcile_concurrency);
    if let Some(sync) = spec.sync_controller.as_mut() {
        sync.max_concurrent_reconciles = Some(concurrency);
    }
    if let Some(status) = spec.status_controller.as_mut() {
        status.max_concurrent_reconciles = Some(concurrency);
    }
    spec
}

/// The controller-manager's flags: the hub kubeconfig (its current context is the hub), its
/// namespace, metrics and healthz on loopback ports, and the chart's log level (2; env
/// `HUBFED_BENCH_KUBEFED_LOG_LEVEL` for another).
pub fn args(env: &TestEnv, metrics_port: u16, healthz_port: u16) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", env.kubeconfig_path().display()),
        format!("--kubefed-namespace={KUBEFED_NAMESPACE}"),
        format!("--metrics-addr=127.0.0.1:{metrics_port}"),
        format!("--healthz-addr=127.0.0.1:{healthz_port}"),
        format!(
            "--v={}",
            std::env::var("HUBFED_BENCH_KUBEFED_LOG_LEVEL").unwrap_or_else(|_| "2".to_owned())
        ),
    ]
}

/// Deletes the leader-election lock a stopped controller-manager left behind.
pub async fn release_lock(hub: &Client) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    match api.delete(LOCK, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e).context("deleting KubeFed's leader-election ConfigMap"),
    }
}

/// The controller-manager binary: `given`, or built on demand (and cached outside the repo)
/// by `hack/build-kubefed.sh`.
pub fn binary(given: Option<&PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(path) = given {
        anyhow::ensure!(path.is_file(), "{} is missing", path.display());
        return Ok(path.clone());
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hack/build-kubefed.sh");
    super::progress(format_args!(
        "KubeFed {VERSION}: {} (builds it the first time, ~1 min)",
        script.display()
    ));
    let output = std::process::Command::new(&script)
        .env("KUBEFED_VERSION", VERSION)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    anyhow::ensure!(
        output.status.success(),
        "{} failed ({})",
        script.display(),
        output.status
    );
    let dir = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let binary = PathBuf::from(dir).join("controller-manager");
    anyhow::ensure!(binary.is_file(), "{} is missing", binary.display());
    Ok(binary)
}

/// A fingerprint of the resourceVersions of every hub object the sync controllers write in
/// `namespaces` (federated objects and their status, FederatedNamespaces, PropagatedVersions):
/// unchanged fingerprints mean nothing was written in between.
pub async fn hub_fingerprint(hub: &Client, namespaces: &[String]) -> anyhow::Result<u64> {
    let mut hasher = DefaultHasher::new();
    let mut resources: Vec<_> = KINDS.iter().map(|k| k.federated()).collect();
    resources.push(hubfed_e2e::federated("Namespace"));
    for ns in namespaces {
        for resource in &resources {
            let api: Api<DynamicObject> = Api::namespaced_with(hub.clone(), ns, resource);
            let list = api.list_metadata(&ListParams::default()).await?;
            for item in list.items {
                (
                    &resource.kind,
                    item.metadata.name,
                    item.metadata.resource_version,
                )
                    .hash(&mut hasher);
            }
        }
        let api: Api<PropagatedVersion> = Api::namespaced(hub.clone(), ns);
        for item in api.list_metadata(&ListParams::default()).await?.items {
            (item.metadata.name, item.metadata.resource_version).hash(&mut hasher);
        }
    }
    Ok(hasher.finish())
}
