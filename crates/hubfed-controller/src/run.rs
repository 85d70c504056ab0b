//! Wiring: KubeFedConfig, the cluster registry, shared caches and the FTC controller.

use std::sync::Arc;

use hubfed_api::federatedtypeconfig::ResourceScope;
use hubfed_api::kubefedconfig::{KubeFedConfig, KubeFedConfigSpec};
use hubfed_api::names::KUBEFED_CONFIG_NAME;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::admin::Health;
use crate::clusters::{HealthCheckSettings, MemberClientPool};
use crate::metrics::METRICS;
use crate::sync::Shared;

/// Name of the leader-election Lease (KubeFed's lock name).
pub const LEASE_NAME: &str = "kubefed-controller-manager";

/// Run-time settings that do not come from KubeFedConfig.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Elect a leader through a Lease; only the leader runs the controllers and writes.
    pub leader_elect: bool,
    /// This replica's identity in the Lease; default `<hostname>_<random>`.
    pub identity: Option<String>,
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
            leader_elect: false,
            identity: None,
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
    // As KubeFed: an invalid configuration stops the controller with a clear message.
    let errors = hubfed_core::validation::validate_kubefed_config(&spec, None);
    if !errors.is_empty() {
        anyhow::bail!(
            "KubeFedConfig {namespace}/{KUBEFED_CONFIG_NAME} is invalid: {}",
            hubfed_core::validation::summary(&errors)
        );
    }
    Ok(spec)
}

/// Runs the control plane until `shutdown` is cancelled.
pub async fn run(
    hub: Client,
    config: ControllerConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    run_with(hub, config, Arc::new(Health::default()), shutdown).await
}

fn identity(config: &ControllerConfig) -> String {
    config.identity.clone().unwrap_or_else(|| {
        let host = std::env::var("HOSTNAME")
            .or_else(|_| std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()))
            .unwrap_or_else(|_| "hubfed".to_string());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        format!("{host}_{:08x}{:08x}", std::process::id(), nanos)
    })
}

fn seconds(value: Option<&String>, default: u64) -> u64 {
    value
        .and_then(|v| hubfed_api::duration::parse_go_duration(v).ok())
        .map(|d| d.as_secs().max(1))
        .unwrap_or(default)
}

/// Like [`run`], reporting readiness in `health`. With leader election, waits for the lease
/// and runs the controllers while holding it. A replica that loses the lease (it could not
/// renew in time: an overloaded machine, a slow hub) stops its controllers and goes back to
/// standby; it does not exit, so no supervisor is needed to bring it back.
///
/// A change of the KubeFedConfig restarts the controllers in the process with the new
/// settings (scope, health checks, leader election, concurrency, feature gates); only
/// `adoptResources` is applied without a restart. An invalid change is ignored with an error
/// in the log: the admission webhook refuses those before they are stored.
pub async fn run_with(
    hub: Client,
    config: ControllerConfig,
    health: Arc<Health>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    loop {
        let kubefed_config = load_kubefed_config(&hub, &config.kubefed_namespace).await?;
        info!(
            namespace = %config.kubefed_namespace,
            "Using valid KubeFedConfig \"{}/{}\"",
            config.kubefed_namespace,
            KUBEFED_CONFIG_NAME
        );
        let restart = shutdown.child_token();
        let follower = tokio::spawn(follow_config(
            hub.clone(),
            config.kubefed_namespace.clone(),
            kubefed_config.clone(),
            restart.clone(),
        ));
        let result = if config.leader_elect {
            campaign(&hub, &config, &kubefed_config, &health, &restart).await
        } else {
            METRICS.leader.with_label_values::<&str>(&[]).set(1);
            control_plane(
                hub.clone(),
                config.clone(),
                kubefed_config,
                Arc::clone(&health),
                restart.clone(),
            )
            .await
        };
        follower.abort();
        result?;
        if shutdown.is_cancelled() || !restart.is_cancelled() {
            return Ok(());
        }
        info!("restarting the controllers with the changed KubeFedConfig");
    }
}

/// Whether a KubeFedConfig change needs the controllers restarted: any change of the
/// defaulted spec except `syncController.adoptResources`, which the sync controllers follow
/// themselves.
fn needs_restart(running: &KubeFedConfigSpec, changed: &KubeFedConfigSpec) -> bool {
    let comparable = |spec: &KubeFedConfigSpec| {
        let mut spec = spec.clone();
        if let Some(sync) = spec.sync_controller.as_mut() {
            sync.adopt_resources = None;
        }
        spec
    };
    comparable(running) != comparable(changed)
}

/// Cancels `restart` when the KubeFedConfig changes in a way [`needs_restart`].
async fn follow_config(
    hub: Client,
    namespace: String,
    running: KubeFedConfigSpec,
    restart: CancellationToken,
) {
    use futures::StreamExt as _;
    use kube::runtime::{WatchStreamExt as _, watcher};
    let api: Api<KubeFedConfig> = Api::namespaced(hub, &namespace);
    let selector = format!("metadata.name={KUBEFED_CONFIG_NAME}");
    let stream = watcher(api, watcher::Config::default().fields(&selector))
        .default_backoff()
        .applied_objects();
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        let mut spec = match item {
            Ok(config) => config.spec,
            Err(e) => {
                tracing::warn!(error = %e, "KubeFedConfig watch error");
                continue;
            }
        };
        spec.apply_defaults();
        if !needs_restart(&running, &spec) {
            continue;
        }
        let errors = hubfed_core::validation::validate_kubefed_config(&spec, None);
        if !errors.is_empty() {
            tracing::error!(
                "KubeFedConfig {namespace}/{KUBEFED_CONFIG_NAME} changed but is invalid, keeping the running settings: {}",
                hubfed_core::validation::summary(&errors)
            );
            continue;
        }
        info!("KubeFedConfig changed");
        restart.cancel();
        return;
    }
}

/// Stands for leader until `stop`: leads while holding the lease, stands by otherwise.
async fn campaign(
    hub: &Client,
    config: &ControllerConfig,
    kubefed_config: &KubeFedConfigSpec,
    health: &Arc<Health>,
    stop: &CancellationToken,
) -> anyhow::Result<()> {
    loop {
        match lead_once(hub, config, kubefed_config, health, stop).await? {
            Term::Done => return Ok(()),
            Term::Lost => {
                tracing::error!("lost the leader lease: controllers stopped, back to standby");
            }
        }
    }
}

/// How one term as a candidate ended.
enum Term {
    /// Shut down.
    Done,
    /// Led, then lost the lease.
    Lost,
}

/// Waits for the lease, then runs the controllers until the lease is lost or shutdown.
async fn lead_once(
    hub: &Client,
    config: &ControllerConfig,
    kubefed_config: &KubeFedConfigSpec,
    health: &Arc<Health>,
    shutdown: &CancellationToken,
) -> anyhow::Result<Term> {
    let leader_elect = kubefed_config.leader_elect.clone().unwrap_or_default();
    let lease_duration = seconds(leader_elect.lease_duration.as_ref(), 15);
    let renew_deadline = seconds(leader_elect.renew_deadline.as_ref(), 10).min(lease_duration - 1);
    let identity = identity(config);
    // Replicas starting together race to create the Lease; the loser's build fails with a
    // conflict. Retry (also covers transient API errors) instead of exiting.
    let mut delay = std::time::Duration::from_millis(200);
    let manager = loop {
        let built = kube_lease_manager::LeaseManagerBuilder::new(hub.clone(), LEASE_NAME)
            .with_namespace(&config.kubefed_namespace)
            .with_identity(&identity)
            .with_duration(lease_duration)
            .with_grace(lease_duration - renew_deadline)
            .with_field_manager("hubfed-leader-election")
            .build()
            .await;
        match built {
            Ok(manager) => break manager,
            Err(e) => {
                tracing::warn!(error = %e, "setting up leader election failed; retrying");
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(Term::Done),
                    () = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(std::time::Duration::from_secs(5));
            }
        }
    };
    let (mut leading, lease_task) = manager.watch().await;
    info!(identity = %identity, lease = %format!("{}/{LEASE_NAME}", config.kubefed_namespace), "waiting for the leader lease");
    METRICS.leader.with_label_values::<&str>(&[]).set(0);
    // A standby is ready: it serves webhooks and metrics and waits its turn.
    let standby_ready = tokio::spawn({
        let health = Arc::clone(health);
        async move {
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            health.set_ready(true);
        }
    });
    loop {
        if *leading.borrow_and_update() {
            break;
        }
        tokio::select! {
            () = shutdown.cancelled() => {
                standby_ready.abort();
                drop(leading);
                let _ = lease_task.await;
                return Ok(Term::Done);
            }
            changed = leading.changed() => if changed.is_err() {
                return Err(anyhow::anyhow!("leader election stopped"));
            },
        }
    }
    standby_ready.abort();
    health.set_ready(false);
    info!(identity = %identity, "promoted as leader");
    METRICS.leader.with_label_values::<&str>(&[]).set(1);

    let controllers = shutdown.child_token();
    let lost = async {
        loop {
            if leading.changed().await.is_err() || !*leading.borrow() {
                return;
            }
        }
    };
    let plane = control_plane(
        hub.clone(),
        config.clone(),
        kubefed_config.clone(),
        Arc::clone(health),
        controllers.clone(),
    );
    tokio::pin!(plane);
    let term = tokio::select! {
        result = &mut plane => result.map(|()| Term::Done),
        () = lost => {
            // Stop every controller and wait until they have: a standby must not write.
            controllers.cancel();
            match tokio::time::timeout(std::time::Duration::from_secs(30), &mut plane).await {
                Ok(_) => Ok(Term::Lost),
                Err(_) => Err(anyhow::anyhow!(
                    "lost the leader lease and the controllers did not stop within 30s"
                )),
            }
        }
    };
    METRICS.leader.with_label_values::<&str>(&[]).set(0);
    health.set_ready(false);
    // Closing the channel stops renewing; releasing lets a standby take over at once.
    drop(leading);
    if let Ok(Ok(manager)) = lease_task.await {
        let _ = manager.release().await;
    }
    term
}

/// The controllers proper: registry, shared caches and the FTC controller.
async fn control_plane(
    hub: Client,
    config: ControllerConfig,
    kubefed_config: KubeFedConfigSpec,
    health: Arc<Health>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let pool = MemberClientPool::new(
        hub.clone(),
        config.kubefed_namespace.clone(),
        HealthCheckSettings::from_config(&kubefed_config),
        config.member_write_concurrency,
    );
    let pool_task = tokio::spawn(pool.clone().run(shutdown.clone()));
    pool.wait_until_synced().await;
    tokio::spawn(export_cluster_gauges(Arc::clone(&pool), shutdown.clone()));

    let shared = Shared::start(
        hub.clone(),
        pool,
        &config,
        &kubefed_config,
        shutdown.clone(),
    );
    health.set_ready(true);
    let ftcs = crate::ftc::run(Arc::clone(&shared), shutdown.clone());
    let result = ftcs.await;
    health.set_ready(false);
    shutdown.cancel();
    let _ = pool_task.await;
    result
}

/// Keeps `hubfed_cluster_ready` and `kubefedcluster_state` in step with the registry.
async fn export_cluster_gauges(pool: Arc<MemberClientPool>, shutdown: CancellationToken) {
    let mut changes = pool.subscribe();
    let mut known: Vec<String> = Vec::new();
    loop {
        let clusters = pool.clusters();
        for gone in known
            .iter()
            .filter(|k| !clusters.iter().any(|c| &c.name == *k))
        {
            let _ = METRICS.cluster_ready.remove_label_values(&[gone.as_str()]);
            for state in ["ready", "notready", "offline"] {
                let _ = METRICS
                    .kubefedcluster_state
                    .remove_label_values(&[state, gone.as_str()]);
            }
        }
        known = clusters.iter().map(|c| c.name.clone()).collect();
        for c in &clusters {
            let state = match (c.ready, c.client.is_some()) {
                (true, _) => "ready",
                (false, true) => "notready",
                (false, false) => "offline",
            };
            METRICS
                .cluster_ready
                .with_label_values(&[c.name.as_str()])
                .set(i64::from(c.ready));
            for s in ["ready", "notready", "offline"] {
                METRICS
                    .kubefedcluster_state
                    .with_label_values(&[s, c.name.as_str()])
                    .set(i64::from(s == state));
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::needs_restart;
    use hubfed_api::federatedtypeconfig::ResourceScope;
    use hubfed_api::kubefedconfig::{KubeFedConfigSpec, ResourceAdoption};

    #[test]
    fn every_setting_but_adoption_restarts_the_controllers() {
        let running = KubeFedConfigSpec::with_defaults(ResourceScope::Cluster);
        assert!(!needs_restart(&running, &running.clone()));

        let mut adoption = running.clone();
        adoption
            .sync_controller
            .get_or_insert_with(Default::default)
            .adopt_resources = Some(ResourceAdoption::Disabled);
        assert!(
            !needs_restart(&running, &adoption),
            "adoptResources is followed live"
        );

        let mut health = running.clone();
        health
            .cluster_health_check
            .get_or_insert_with(Default::default)
            .failure_threshold = Some(7);
        assert!(needs_restart(&running, &health));

        let scope = KubeFedConfigSpec::with_defaults(ResourceScope::Namespaced);
        assert!(needs_restart(&running, &scope));

        let mut lease = running.clone();
        lease
            .leader_elect
            .get_or_insert_with(Default::default)
            .lease_duration = Some("31s".into());
        assert!(needs_restart(&running, &lease));
    }
}
