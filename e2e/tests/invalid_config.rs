//! An invalid KubeFedConfig at start (issue 9): KubeFed's controller exited, taking the
//! admission webhooks down with it, and with `failurePolicy: Fail` they then refused the fix.
//! hubfed keeps running, says what is wrong (a log line and a Warning Event
//! `InvalidConfiguration` on the KubeFedConfig), and starts the controllers as soon as the
//! KubeFedConfig is valid.
//!
//! Its own clusters and controller: the KubeFedConfig must be invalid before the controller
//! starts.

use std::time::Duration;

use anyhow::ensure;
use hubfed_api::federatedtypeconfig::ResourceScope;
use hubfed_api::kubefedconfig::{KubeFedConfig, KubeFedConfigSpec, LeaderElectConfig};
use hubfed_api::names::KUBEFED_CONFIG_NAME;
use hubfed_e2e::{
    KUBEFED_NAMESPACE, MEMBERS, PrivateFederation, TIMEOUT, Wait, apply, wait_clusters_ready,
    wait_for,
};
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_kubefed_config_is_waited_out_not_fatal() -> anyhow::Result<()> {
    let env = PrivateFederation::new().start().await?;
    let hub = env.hub().client().await?;
    let configs: Api<KubeFedConfig> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let config = |lease: &str| {
        let mut spec = KubeFedConfigSpec::with_defaults(ResourceScope::Cluster);
        spec.leader_elect = Some(LeaderElectConfig {
            lease_duration: Some(lease.to_owned()),
            ..spec.leader_elect.clone().unwrap_or_default()
        });
        let mut config = KubeFedConfig::new(KUBEFED_CONFIG_NAME, spec);
        config.metadata.namespace = Some(KUBEFED_NAMESPACE.to_owned());
        config
    };
    // Not longer than the default renewDeadline (10s): invalid.
    apply(&configs, &config("10s")).await?;

    let stop = CancellationToken::new();
    let controller = tokio::spawn(hubfed_controller::run(
        hub.clone(),
        hubfed_controller::ControllerConfig::default(),
        stop.clone(),
    ));
    let events: Api<Event> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    wait_for("an InvalidConfiguration event", TIMEOUT, async || {
        let found = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("InvalidConfiguration"));
        Ok(match found {
            Some(event)
                if event
                    .message
                    .as_deref()
                    .is_some_and(|m| m.contains("leaseDuration")) =>
            {
                Wait::Done(())
            }
            other => Wait::Pending(format!("event {other:?}")),
        })
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(
        !controller.is_finished(),
        "the controller stopped on an invalid KubeFedConfig: {:?}",
        controller.await
    );

    // Fixed: the controllers start and bring the members up.
    apply(&configs, &config("15s")).await?;
    wait_clusters_ready(&hub, &MEMBERS).await?;

    stop.cancel();
    controller.await??;
    Ok(())
}
