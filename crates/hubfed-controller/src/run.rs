//! Wiring: KubeFedConfig, the cluster registry, shared caches and the FTC controller; leader
//! election in [`election`], the controllers proper in [`plane`].

mod election;
mod plane;

use std::sync::Arc;
use std::time::Duration;

use hubfed_api::federatedtypeconfig::ResourceScope;
use hubfed_api::kubefedconfig::{KubeFedConfig, KubeFedConfigSpec};
use hubfed_api::names::KUBEFED_CONFIG_NAME;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::admin::Health;
use crate::metrics::METRICS;
use crate::settings::ControllerConfig;
pub use election::LEASE_NAME;
use election::{Candidate, campaign};
use plane::{control_plane, drained};

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

/// How often an invalid KubeFedConfig is read again while the controllers wait for a valid one.
const INVALID_CONFIG_RETRY: Duration = Duration::from_secs(5);

/// The KubeFedConfig, once it is valid. KubeFed stopped the controller on an invalid one; the
/// webhooks then went down with it and, with `failurePolicy: Fail`, refused the very fix. hubfed
/// keeps the process (and so admission) running and waits: the error is logged and recorded as
/// a Warning Event on the KubeFedConfig, once per distinct problem, and the config is read
/// again every [`INVALID_CONFIG_RETRY`].
async fn valid_kubefed_config(
    hub: &Client,
    namespace: &str,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<KubeFedConfigSpec>> {
    let mut reported = String::new();
    loop {
        let loaded = tokio::select! {
            () = shutdown.cancelled() => return Ok(None),
            loaded = load_kubefed_config(hub, namespace) => loaded,
        };
        // A hub that does not answer, or a stored object that does not even decode, must not
        // end the process (and the webhooks with it) either: the same wait.
        let problem = match loaded {
            Ok(spec) => {
                let errors = hubfed_core::validation::validate_kubefed_config(&spec, None);
                if errors.is_empty() {
                    return Ok(Some(spec));
                }
                format!(
                    "KubeFedConfig {namespace}/{KUBEFED_CONFIG_NAME} is invalid, the controllers wait for a valid one: {}",
                    hubfed_core::validation::summary(&errors)
                )
            }
            Err(e) => format!(
                "KubeFedConfig {namespace}/{KUBEFED_CONFIG_NAME} cannot be read, the controllers wait for it: {e:#}"
            ),
        };
        if problem != reported {
            tracing::error!("{problem}");
            report_invalid_config(hub, namespace, &problem).await;
            reported = problem;
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(None),
            () = tokio::time::sleep(INVALID_CONFIG_RETRY) => {}
        }
    }
}

/// A Warning Event `InvalidConfiguration` on the KubeFedConfig; failures are only logged.
async fn report_invalid_config(hub: &Client, namespace: &str, message: &str) {
    use kube::Resource as _;
    use kube::runtime::events::{Event, EventType, Recorder};
    let api: Api<KubeFedConfig> = Api::namespaced(hub.clone(), namespace);
    // Its metadata only: a spec that does not decode still gets its Event.
    let Ok(Ok(config)) = tokio::time::timeout(
        Duration::from_secs(10),
        api.get_metadata(KUBEFED_CONFIG_NAME),
    )
    .await
    else {
        return;
    };
    let reporter = crate::events::reporter("hubfed-controller");
    let event = Event {
        type_: EventType::Warning,
        reason: "InvalidConfiguration".to_owned(),
        note: Some(message.chars().take(1024).collect()),
        action: "Validate".to_owned(),
        secondary: None,
    };
    let recorder = Recorder::new(hub.clone(), reporter);
    let published = recorder.publish(&event, &config.object_ref(&())).await;
    if let Err(e) = published {
        warn!(error = %e, "recording the InvalidConfiguration event failed");
    }
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

/// Like [`run`], reporting readiness in `health`. With leader election, waits for the lease
/// and runs the controllers while holding it. A replica that loses the lease (it could not
/// renew in time: an overloaded machine, a slow hub) stops its controllers and goes back to
/// standby; it does not exit, so no supervisor is needed to bring it back.
///
/// Cancelling `shutdown` stops everything within bounds, whether or not the hub answers: no
/// new work is taken, work in flight gets [`DRAIN_TIMEOUT`](plane::DRAIN_TIMEOUT) and is then cancelled, and a
/// leader makes one attempt of at most [`LEASE_RELEASE_TIMEOUT`](election::LEASE_RELEASE_TIMEOUT) to release the Lease so a
/// standby takes over at once.
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
    // One identity for the life of the process: a lease it still holds after a restart of
    // the controllers is recognised as its own.
    let identity = identity(&config);
    loop {
        let Some(kubefed_config) =
            valid_kubefed_config(&hub, &config.kubefed_namespace, &shutdown).await?
        else {
            return Ok(());
        };
        info!(
            namespace = %config.kubefed_namespace,
            "Using valid KubeFedConfig \"{}/{}\"",
            config.kubefed_namespace,
            KUBEFED_CONFIG_NAME
        );
        let restart = shutdown.child_token();
        // The one KubeFedConfig watch: a change that needs a restart cancels `restart`; every
        // valid change reaches the running controllers through `updates`.
        let (specs, updates) = tokio::sync::watch::channel(kubefed_config.clone());
        let follower = tokio::spawn(follow_config(
            hub.clone(),
            config.kubefed_namespace.clone(),
            kubefed_config.clone(),
            specs,
            restart.clone(),
        ));
        let result = if config.leader_elect {
            let candidate = Candidate {
                hub: &hub,
                config: &config,
                identity: &identity,
                kubefed_config: &kubefed_config,
                updates: &updates,
                health: &health,
            };
            campaign(&candidate, &restart).await
        } else {
            METRICS.leader.with_label_values::<&str>(&[]).set(1);
            let plane = control_plane(
                hub.clone(),
                config.clone(),
                updates,
                Arc::clone(&health),
                restart.clone(),
            );
            drained(plane, &restart).await
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
    specs: tokio::sync::watch::Sender<KubeFedConfigSpec>,
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
                crate::watch::log_watch_error!(e, "KubeFedConfig watch error");
                continue;
            }
        };
        spec.apply_defaults();
        if spec == *specs.borrow() {
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
        let restart_needed = needs_restart(&running, &spec);
        specs.send_replace(spec);
        if restart_needed {
            info!("KubeFedConfig changed");
            restart.cancel();
            return;
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
