//! Wiring: KubeFedConfig, the cluster registry, shared caches and the FTC controller.

use std::sync::Arc;

use hubfed_api::federatedtypeconfig::ResourceScope;
use hubfed_api::kubefedconfig::{KubeFedConfig, KubeFedConfigSpec};
use hubfed_api::names::KUBEFED_CONFIG_NAME;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::clusters::{HealthCheckSettings, MemberClientPool};
use crate::sync::Shared;

/// Run-time settings that do not come from KubeFedConfig.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Namespace of FTCs, KubeFedClusters, their Secrets and the KubeFedConfig.
    pub kubefed_namespace: String,
    /// Concurrent writes to one member cluster.
    pub member_write_concurrency: usize,
    /// Concurrent reconciles per federated type (KubeFedConfig's
    /// `syncController.maxConcurrentReconciles` raises it, never lowers it).
    pub reconcile_concurrency: u16,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            kubefed_namespace: hubfed_api::names::DEFAULT_KUBEFED_NAMESPACE.to_string(),
            member_write_concurrency: 16,
            reconcile_concurrency: 16,
        }
    }
}

/// Reads the KubeFedConfig, creating it with defaults when missing (as KubeFed does).
async fn load_kubefed_config(hub: &Client, namespace: &str) -> anyhow::Result<KubeFedConfigSpec> {
    let api: Api<KubeFedConfig> = Api::namespaced(hub.clone(), namespace);
    let mut spec = match api.get_opt(KUBEFED_CONFIG_NAME).await? {
        Some(existing) => existing.spec,
        None => {
            let spec = KubeFedConfigSpec::with_defaults(ResourceScope::Cluster);
            let mut object = KubeFedConfig::new(KUBEFED_CONFIG_NAME, spec.clone());
            object.metadata.namespace = Some(namespace.to_string());
            match api.create(&PostParams::default(), &object).await {
                Ok(_) => info!(namespace, "created KubeFedConfig with defaults"),
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
            spec
        }
    };
    spec.apply_defaults();
    Ok(spec)
}

/// Runs the control plane until `shutdown` is cancelled.
pub async fn run(
    hub: Client,
    config: ControllerConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let kubefed_config = load_kubefed_config(&hub, &config.kubefed_namespace).await?;
    info!(namespace = %config.kubefed_namespace, "using KubeFedConfig {}/{}", config.kubefed_namespace, KUBEFED_CONFIG_NAME);

    let pool = MemberClientPool::new(
        hub.clone(),
        config.kubefed_namespace.clone(),
        HealthCheckSettings::from_config(&kubefed_config),
        config.member_write_concurrency,
    );
    let pool_task = tokio::spawn(pool.clone().run(shutdown.clone()));
    pool.wait_until_synced().await;

    let shared = Shared::start(
        hub.clone(),
        pool,
        &config,
        &kubefed_config,
        shutdown.clone(),
    );
    let ftcs = crate::ftc::run(Arc::clone(&shared), shutdown.clone());
    let result = ftcs.await;
    shutdown.cancel();
    let _ = pool_task.await;
    result
}
