//! KubeFed's own code and manifests, from its Go module, as test infrastructure.
//!
//! The module (`sigs.k8s.io/kubefed` at [`VERSION`]) comes through the Go module proxy into
//! the Go module cache (`hack/kubefed-module.sh`); its controller-manager is built and cached
//! by `hack/build-kubefed.sh`. Tests that need them skip, saying why, when Go is missing.
//!
//! [`crd_differences`] compares one of KubeFed's CRDs with hubfed's, field by field
//! ([`crate::upstream_crds`]); [`KubefedProcess`] runs KubeFed's controller-manager against a
//! test hub.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;
use serde_json::Value;

pub use crate::upstream_crds::crds_in;

/// The KubeFed release hubfed is a drop-in for.
pub const VERSION: &str = "v0.10.0";

/// The directory of KubeFed's Go module, or `None` when Go is missing (the caller skips).
pub fn module_dir() -> anyhow::Result<Option<PathBuf>> {
    crate::upstream_crds::go_module_dir("kubefed-module.sh", "KUBEFED_VERSION", VERSION)
}

/// Where hubfed's CRD `hubfed` differs from KubeFed's `kubefed`, one line per difference
/// ([`crate::upstream_crds::crd_differences`]).
pub fn crd_differences(kubefed: &Value, hubfed: &Value) -> Vec<String> {
    crate::upstream_crds::crd_differences("KubeFed", kubefed, hubfed)
}

/// KubeFed's controller-manager binary, built and cached by `hack/build-kubefed.sh`, or
/// `None` when Go is missing.
pub fn controller_manager() -> anyhow::Result<Option<PathBuf>> {
    if module_dir()?.is_none() {
        return Ok(None);
    }
    let path = crate::upstream_crds::hack_script("build-kubefed.sh");
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
