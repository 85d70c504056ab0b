//! Remote status (issue 10, KubeFed's `RawResourceStatusCollection`): with the feature gate on
//! and the FTC's `statusCollection: Enabled`, `status.clusters[].remoteStatus` carries each
//! member copy's `.status`, kept current from the member watches, and the FTC reports its
//! status controller `Running`. A member status that changes many times a second becomes at
//! most one hub status write per object every 5 s, and the last state is written.
//!
//! Its own test binary: it turns the gate on in the federation-wide KubeFedConfig (which
//! restarts the controllers) and changes the deployments FTC.

use std::time::Duration;

use anyhow::Context as _;
use hubfed_api::federatedtypeconfig::{ControllerStatus, FederatedTypeConfig};
use hubfed_api::kubefedconfig::KubeFedConfig;
use hubfed_api::names::KUBEFED_CONFIG_NAME;
use hubfed_controller::metrics::METRICS;
use hubfed_e2e::{
    Federation, KUBEFED_NAMESPACE, MEMBERS, TIMEOUT, Wait, cluster_status, create_federated,
    deployment_spec, get_value, report, unique_ns, wait_for,
};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const FTC: &str = "deployments.apps";

async fn collect_deployment_status(fed: &Federation) -> anyhow::Result<()> {
    let hub = fed.hub().await?;
    let configs: Api<KubeFedConfig> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let gate = json!({"spec": {"featureGates": [
        {"name": "PushReconciler", "configuration": "Enabled"},
        {"name": "RawResourceStatusCollection", "configuration": "Enabled"},
        {"name": "SchedulerPreferences", "configuration": "Enabled"},
    ]}});
    configs
        .patch(
            KUBEFED_CONFIG_NAME,
            &PatchParams::default(),
            &Patch::Merge(&gate),
        )
        .await
        .context("turning RawResourceStatusCollection on")?;
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(hub, KUBEFED_NAMESPACE);
    ftcs.patch(
        FTC,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"statusCollection": "Enabled"}})),
    )
    .await?;
    wait_for(
        "the deployments status controller Running",
        TIMEOUT,
        async || {
            let ftc = ftcs.get(FTC).await?;
            let running = ftc.status.as_ref().and_then(|s| s.status_controller);
            Ok(match running {
                Some(ControllerStatus::Running)
                    if ftc.status.as_ref().map(|s| s.observed_generation)
                        == Some(ftc.metadata.generation.unwrap_or(0)) =>
                {
                    Wait::Done(())
                }
                other => Wait::Pending(format!("statusController {other:?}")),
            })
        },
    )
    .await
}

#[tokio::test]
async fn remote_status_follows_the_members_and_is_coalesced() -> anyhow::Result<()> {
    let fed = Federation::shared();
    collect_deployment_status(fed).await?;
    let ns = unique_ns("remote");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let name = "api";
    let hub = create_federated(
        &fed.hub().await?,
        "Deployment",
        Some(&ns),
        name,
        deployment_spec("api", 2, &MEMBERS),
    )
    .await?;

    // The member Deployments' status (their controllers set replicas) shows in the hub.
    wait_for("remoteStatus of both members", TIMEOUT, async || {
        let object = get_value(&hub, name).await?.context("gone")?;
        let mut pending = Vec::new();
        for member in MEMBERS {
            let remote = cluster_status(&object, member).map(|c| c["remoteStatus"].clone());
            match remote {
                Some(status) if status["replicas"] == 2 => {}
                other => pending.push(format!("{member}: {other:?}")),
            }
        }
        Ok(Wait::all_or_pending(pending))
    })
    .await?;

    // member1's status changes ten times within a second: a few hub writes, the last state.
    let deployments: Api<Deployment> = Api::namespaced(fed.client("member1").await?, &ns);
    let deferred_before = deferred();
    for count in 1..=10 {
        deployments
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"collisionCount": count}})),
            )
            .await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_for("the last member status in the hub", TIMEOUT, async || {
        let object = get_value(&hub, name).await?.context("gone")?;
        let count =
            cluster_status(&object, "member1").map(|c| c["remoteStatus"]["collisionCount"].clone());
        Ok(match count {
            Some(c) if c == 10 => Wait::Done(()),
            other => Wait::Pending(format!("collisionCount {other:?}")),
        })
    })
    .await?;
    let deferred = deferred() - deferred_before;
    report(format_args!(
        "remote status: 10 member status changes in 1 s, {deferred} hub status writes deferred"
    ));
    anyhow::ensure!(
        deferred > 0,
        "ten status changes within a second were each written to the hub"
    );
    Ok(())
}

fn deferred() -> u64 {
    METRICS
        .status_writes_deferred
        .with_label_values(&["federateddeployment"])
        .get()
}
