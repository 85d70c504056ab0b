//! The controllers proper (registry, shared caches, scheduler, policies, the FTC controller)
//! and how they are stopped.

use std::sync::Arc;
use std::time::Duration;

use hubfed_api::kubefedconfig::KubeFedConfigSpec;
use kube::Client;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::admin::Health;
use crate::clusters::{HealthCheckSettings, MemberClientPool};
use crate::metrics::METRICS;
use crate::settings::ControllerConfig;
use crate::sync::Shared;

/// Once asked to stop, how long the controllers may take to finish the work in flight
/// (member writes, status writes); whatever is still running then is cancelled. A lost lease
/// is different: see the leader election's `LOST_LEASE_STOP_TIMEOUT`.
pub(super) const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs the controllers until they end by themselves or `stop` is cancelled; then they stop
/// taking work and get [`DRAIN_TIMEOUT`] to finish what is in flight, after which it is
/// cancelled (the controllers are dropped; their tasks observe `stop` or are aborted).
pub(super) async fn drained(
    plane: impl std::future::Future<Output = anyhow::Result<()>>,
    stop: &CancellationToken,
) -> anyhow::Result<()> {
    tokio::pin!(plane);
    tokio::select! {
        result = &mut plane => return result,
        () = stop.cancelled() => {}
    }
    info!(
        "stopping the controllers: no new work; work in flight has {}s to finish",
        DRAIN_TIMEOUT.as_secs()
    );
    match tokio::time::timeout(DRAIN_TIMEOUT, plane).await {
        Ok(result) => {
            info!("controllers stopped");
            result
        }
        Err(_) => {
            warn!(
                "the controllers did not finish their work in flight within {}s: cancelled",
                DRAIN_TIMEOUT.as_secs()
            );
            Ok(())
        }
    }
}

/// The controllers proper: registry, shared caches and the FTC controller.
pub(super) async fn control_plane(
    hub: Client,
    config: ControllerConfig,
    kubefed: tokio::sync::watch::Receiver<KubeFedConfigSpec>,
    health: Arc<Health>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let kubefed_config = kubefed.borrow().clone();
    let pool = MemberClientPool::new(
        hub.clone(),
        config.kubefed_namespace.clone(),
        HealthCheckSettings::from_config(&kubefed_config),
        config.member_write_concurrency,
    );
    let pool_task = tokio::spawn(pool.clone().run(shutdown.clone()));
    pool.wait_until_synced().await;
    tokio::spawn(export_cluster_gauges(Arc::clone(&pool), shutdown.clone()));

    let shared = Shared::start(hub.clone(), pool, &config, kubefed, shutdown.clone());
    let crds = crate::hub_crds::report(
        hub.clone(),
        &crate::hub_crds::HubCrd::CONTROLLER,
        shutdown.clone(),
    );
    tokio::spawn(crds);
    let rsp_scheduler =
        kubefed_config.feature_enabled(hubfed_api::kubefedconfig::FEATURE_SCHEDULER_PREFERENCES);
    if rsp_scheduler {
        let scheduler = crate::schedule::Scheduler {
            hub: hub.clone(),
            pool: Arc::clone(&shared.pool),
            scope: shared.scope,
            kubefed_namespace: config.kubefed_namespace.clone(),
            unschedulable_threshold: config.unschedulable_threshold,
        };
        tokio::spawn(scheduler.run(shutdown.clone()));
    }
    let policies = crate::policy::PolicyController {
        hub: hub.clone(),
        pool: Arc::clone(&shared.pool),
        scope: shared.scope,
        kubefed_namespace: config.kubefed_namespace.clone(),
        rsp_scheduler,
    };
    tokio::spawn(policies.run(shutdown.clone()));
    if config.mcs {
        let settings = crate::mcs::McsSettings {
            endpoint_ttl: config.mcs_endpoint_ttl,
            concurrency: usize::from(config.reconcile_concurrency),
            list_page_size: config.member_list_page_size,
        };
        let mcs = crate::mcs::run(
            hub.clone(),
            Arc::clone(&shared.pool),
            config.kubefed_namespace.clone(),
            settings,
            shutdown.clone(),
        );
        tokio::spawn(mcs);
    }
    if config.dns {
        let settings = crate::dns::DnsSettings {
            groups: config.dns_endpoint_groups,
            lookup: Arc::new(crate::dns::SystemLookup),
            list_page_size: config.member_list_page_size,
        };
        let dns = crate::dns::run(
            hub.clone(),
            Arc::clone(&shared.pool),
            shared.scope,
            config.kubefed_namespace.clone(),
            settings,
            shutdown.clone(),
        );
        tokio::spawn(dns);
    }
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
    use super::drained;
    use std::time::Duration;
    use tokio_util::sync::CancellationToken;

    #[tokio::test]
    async fn controllers_that_end_or_stop_in_time_are_waited_for() {
        let stop = CancellationToken::new();
        let ended = drained(async { Err(anyhow::anyhow!("failed")) }, &stop).await;
        assert!(ended.is_err(), "the controllers' own end is passed on");

        // Asked to stop, the controllers finish their work in flight.
        let (finished_tx, finished_rx) = tokio::sync::oneshot::channel();
        let plane = {
            let stop = stop.clone();
            async move {
                stop.cancelled().await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = finished_tx.send(());
                Ok(())
            }
        };
        stop.cancel();
        let began = std::time::Instant::now();
        drained(plane, &stop).await.expect("stopped");
        assert!(finished_rx.await.is_ok(), "the work in flight was finished");
        assert!(began.elapsed() < super::DRAIN_TIMEOUT);
    }
}
