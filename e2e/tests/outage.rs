//! A member outage: both members joined with `hubfedctl join` (least privilege), one member's
//! API server frozen (SIGSTOP). Its KubeFedCluster goes `Offline` after the configured
//! failure threshold, objects placed there report `ClusterNotReady` while the other member
//! keeps converging; once it answers again it is `Ready` and catches up.
//!
//! Its own clusters and controller: freezing a member would disturb every other test, and the
//! KubeFedConfig's health settings must be in place before the controller starts.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use hubfed_api::kubefedcluster::{ClusterConditionType, KubeFedCluster};
use hubfed_e2e::{
    Expected, KUBEFED_NAMESPACE, PrivateFederation, TIMEOUT, Wait, cluster_status,
    create_federated, create_hub_namespace, dynamic_api, fast_health_checks, get_value, hubfedctl,
    member_mismatch, modify, propagation_condition, report, show, target, wait_for,
    wait_propagated,
};
use hubfed_testenv::Cluster;
use kube::api::Api;
use serde_json::json;

/// Resumes a frozen API server when dropped, so a failing test never leaves it stopped.
struct Frozen<'a>(&'a Cluster);

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        let _ = self.0.resume();
    }
}

/// The KubeFedCluster's conditions as `type=status` pairs.
fn conditions(cluster: &KubeFedCluster) -> Vec<String> {
    cluster
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .map(|c| format!("{}={}", c.type_, c.status))
        .collect()
}

#[tokio::test]
async fn a_member_outage_marks_only_that_member_and_heals() -> anyhow::Result<()> {
    let env = PrivateFederation::new()
        .config(fast_health_checks())
        .unjoined()
        .shared()
        .env();
    let kubeconfig = env.kubeconfig_path();
    let hub = env.hub().client().await?;
    for member in ["member1", "member2"] {
        let (code, stdout, stderr) = hubfedctl(kubeconfig, &["join", member]).await;
        ensure!(
            code == 0 && stdout.contains("joined and Ready"),
            "join {member}: exit {code}\n{stdout}\n{stderr}"
        );
    }

    // A ConfigMap in a federated namespace, on both members.
    let ns = "outage";
    create_hub_namespace(&hub, ns).await?;
    let both = json!({ "clusterSelector": { "matchLabels": {} } });
    create_federated(
        &hub,
        "Namespace",
        Some(ns),
        ns,
        json!({ "placement": both }),
    )
    .await?;
    let fcm = create_federated(
        &hub,
        "ConfigMap",
        Some(ns),
        "settings",
        json!({ "placement": both, "template": { "data": { "version": "1" } } }),
    )
    .await?;
    let configmaps = target("ConfigMap");
    let member_api = async |name: &str| -> anyhow::Result<_> {
        let client = env.cluster(name).context("no member")?.client().await?;
        Ok(dynamic_api(client, &configmaps, Some(ns)))
    };
    let member1 = member_api("member1").await?;
    let member2 = member_api("member2").await?;
    let version = |v: &str| json!(v);
    let converged = async |wanted: &str| {
        let wanted = version(wanted);
        let both = [("member1", &member1), ("member2", &member2)];
        wait_propagated(
            &format!("version {wanted} in both members, Propagation=True"),
            &fcm,
            "settings",
            &["member1", "member2"],
            &Expected::each(both, &[("/data/version", Some(&wanted))]),
        )
        .await
    };
    converged("1").await?;

    // Freeze member2.
    let frozen_cluster = env.cluster("member2").context("no member2")?;
    frozen_cluster.pause()?;
    let frozen = Frozen(frozen_cluster);
    let paused_at = Instant::now();
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    wait_for("member2 Offline", Duration::from_secs(30), async || {
        let cluster = clusters.get("member2").await?;
        let offline = cluster
            .status
            .as_ref()
            .and_then(|s| s.condition(ClusterConditionType::Offline))
            .is_some_and(|c| c.status == "True");
        Ok(if offline && !cluster.is_ready() {
            Wait::Done(())
        } else {
            Wait::Pending(format!("conditions {:?}", conditions(&cluster)))
        })
    })
    .await?;
    report(format_args!(
        "member2 Offline {:.1}s after its API server froze (period 1s, failureThreshold 2, timeout 1s)",
        paused_at.elapsed().as_secs_f64()
    ));
    ensure!(
        clusters.get("member1").await?.is_ready(),
        "member1 is not Ready while only member2 is frozen"
    );
    let (code, table, _) = hubfedctl(kubeconfig, &["get", "clusters"]).await;
    ensure!(
        code == 0
            && table
                .lines()
                .any(|l| l.starts_with("member2") && l.contains("False (Offline)")),
        "get clusters does not show member2 Offline:\n{table}"
    );

    // The template changes: member1 converges, member2 is reported ClusterNotReady.
    modify(&fcm, "settings", |object| {
        object["spec"]["template"]["data"]["version"] = json!("2");
    })
    .await?;
    wait_for(
        "member1 at version 2, member2 ClusterNotReady",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            let found = get_value(&member1, "settings").await?;
            problems.extend(member_mismatch(
                "member1",
                found.as_ref(),
                &[("/data/version", Some(&version("2")))],
            ));
            let object = get_value(&fcm, "settings").await?.context("fcm gone")?;
            let member2_status = cluster_status(&object, "member2");
            if member2_status.map(|s| &s["status"]) != Some(&json!("ClusterNotReady")) {
                problems.push(format!("status.clusters[member2] {}", show(member2_status)));
            }
            let member1_status = cluster_status(&object, "member1");
            if member1_status.is_none_or(|s| s.get("status").is_some_and(|v| v != "")) {
                problems.push(format!("status.clusters[member1] {}", show(member1_status)));
            }
            let condition = propagation_condition(&object);
            if condition.map(|c| &c["status"]) != Some(&json!("False")) {
                problems.push(format!("Propagation {}", show(condition)));
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;

    // Thaw member2: Ready again, and it catches up.
    drop(frozen);
    let resumed_at = Instant::now();
    wait_for("member2 Ready again", TIMEOUT, async || {
        let cluster = clusters.get("member2").await?;
        Ok(if cluster.is_ready() {
            Wait::Done(())
        } else {
            Wait::Pending(format!("conditions {:?}", conditions(&cluster)))
        })
    })
    .await?;
    report(format_args!(
        "member2 Ready {:.1}s after its API server resumed",
        resumed_at.elapsed().as_secs_f64()
    ));
    converged("2").await?;
    Ok(())
}
