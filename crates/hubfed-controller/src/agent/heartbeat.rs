//! The agent's heartbeat: its Lease `hubfed-agent` in the cluster's work namespace, renewed
//! every interval, with the member's Kubernetes version. The hub's registry publishes the
//! member `Ready` while renewals arrive within the Lease's duration (four intervals), and
//! `Offline` after its health thresholds when they stop.

use std::sync::Arc;

use hubfed_api::work::{AGENT_KUBERNETES_VERSION_ANNOTATION, AGENT_LEASE_NAME};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Agent;

/// The Lease's duration in intervals.
const LEASE_INTERVALS: u64 = 4;

/// Renews the heartbeat until `shutdown`.
pub async fn run(agent: Arc<Agent>, shutdown: CancellationToken) {
    let leases: Api<Lease> = Api::namespaced(agent.hub.clone(), &agent.work_namespace);
    let mut failing = false;
    loop {
        match renew(&agent, &leases).await {
            Ok(()) if failing => {
                info!("heartbeat renewed again");
                failing = false;
            }
            Ok(()) => {}
            Err(e) => {
                if !failing {
                    warn!(error = %e, "cannot renew the heartbeat in the hub; retrying every interval");
                }
                failing = true;
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(agent.heartbeat_interval) => {}
        }
    }
}

async fn renew(agent: &Agent, leases: &Api<Lease>) -> anyhow::Result<()> {
    let version = match agent.member.apiserver_version().await {
        Ok(info) => Some(info.git_version),
        Err(e) => {
            // The member is unreachable: no heartbeat, so the hub sees the cluster go Offline
            // (a member the agent cannot reach takes no work).
            anyhow::bail!("the member's API server does not answer: {e}");
        }
    };
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    let duration =
        i32::try_from(agent.heartbeat_interval.as_secs() * LEASE_INTERVALS).unwrap_or(i32::MAX);
    let patch = json!({
        "metadata": { "annotations": { AGENT_KUBERNETES_VERSION_ANNOTATION: version } },
        "spec": {
            "holderIdentity": holder(agent),
            "leaseDurationSeconds": duration,
            "renewTime": now,
        },
    });
    match leases
        .patch(
            AGENT_LEASE_NAME,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => {
            let lease: Lease = serde_json::from_value(json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": AGENT_LEASE_NAME,
                    "namespace": agent.work_namespace,
                    "annotations": patch["metadata"]["annotations"],
                },
                "spec": patch["spec"],
            }))?;
            leases.create(&PostParams::default(), &lease).await?;
            info!(namespace = %agent.work_namespace, "heartbeat Lease created");
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

fn holder(agent: &Agent) -> String {
    match std::env::var("HOSTNAME") {
        Ok(host) if !host.is_empty() => format!("{}/{host}", agent.cluster),
        _ => agent.cluster.clone(),
    }
}
