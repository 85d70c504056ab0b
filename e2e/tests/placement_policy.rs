//! Placement by intent (PlacementPolicy) on three members that schedule pods: at most N
//! clusters spread over a region label (shown by `hubfedctl status`), staying put when the
//! policy changes so that a fresh choice would differ, stable when a cluster joins the
//! candidates (the policy's `status.candidates` proves it looked again), an RSP spreading
//! replicas over the chosen clusters only (and leaving the placement to the policy when it
//! targets another kind, or handing it back at once when broken or deleted), and failover — a frozen member is replaced after the grace period,
//! the workload reaches Ready elsewhere, and nothing flaps when the member comes back (it
//! moves back only with `moveBack`).
//!
//! The tests run one at a time (one of them freezes member2).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hubfed_api::kubefedcluster::KubeFedCluster;
use hubfed_api::scheduling::PlacementPolicySpec;
use hubfed_core::intent::{ClusterState, Previous, choose};
use hubfed_e2e::scheduling::{create_placement_policy, member_replicas, placement_policies, rsps};
use hubfed_e2e::{
    Federation, KUBEFED_NAMESPACE, TIMEOUT, Wait, create_federated, federated, hubfedctl, report,
    target, three_members_one_at_a_time, unique_name, unique_ns, wait_event, wait_for,
};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::sync::MutexGuard;

const CLUSTERS: [&str; 3] = ["member1", "member2", "member3"];
/// Labels of the three KubeFedClusters.
const LABELS: [(&str, &str, &str); 3] = [
    ("member1", "eu", "bronze"),
    ("member2", "eu", "gold"),
    ("member3", "us", "bronze"),
];

/// The federation, with member3 joined and the clusters labelled — and the labels seen by the
/// controller's registry — and this binary's one-at-a-time lock, to hold for the whole test.
async fn fed() -> anyhow::Result<(&'static Federation, MutexGuard<'static, ()>)> {
    three_members_one_at_a_time(|fed| async move {
        let hub = fed.hub().await?;
        let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
        for (name, region, tier) in LABELS {
            let patch = json!({"metadata": {"labels": {"region": region, "tier": tier}}});
            clusters
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        labels_seen(fed, &hub).await
    })
    .await
}

/// Waits until the controller's registry holds every cluster's labels: a PlacementPolicy
/// selecting by both labels lists all three clusters as its candidates. Otherwise the first
/// test may create its policy before the labels reach the registry, and the policy decides
/// on what the registry shows then — one eu cluster, say; an RSP with `rebalance: false`
/// then keeps the replicas placed meanwhile (4 / 2 instead of 3 / 3).
async fn labels_seen(fed: &Federation, hub: &Client) -> anyhow::Result<()> {
    let namespace = unique_ns("policy-labels");
    fed.create_federated_namespace(&namespace, &CLUSTERS)
        .await?;
    create_federated(hub, "ConfigMap", Some(&namespace), "labels", configmap()).await?;
    let spec = json!({
        "targetKind": "FederatedConfigMap",
        "clusterSelector": {"matchExpressions": [
            {"key": "region", "operator": "In", "values": ["eu", "us"]},
            {"key": "tier", "operator": "In", "values": ["bronze", "gold"]},
        ]},
    });
    create_placement_policy(hub, &namespace, "labels", spec).await?;
    wait_for(
        "the clusters' labels in the controller's registry",
        TIMEOUT,
        async || {
            let (_, status) = chosen(hub, &namespace, "labels").await?;
            Ok(if status["candidates"] == json!(CLUSTERS) {
                Wait::Done(())
            } else {
                Wait::Pending(format!("status {status}"))
            })
        },
    )
    .await
}

/// The policy's chosen clusters (status) and its `Placed` condition status.
async fn chosen(hub: &Client, namespace: &str, name: &str) -> anyhow::Result<(Vec<String>, Value)> {
    let policy = placement_policies(hub, namespace).get(name).await?;
    let status = &policy.data["status"];
    let clusters = status["clusters"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|c| c["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Ok((clusters, status.clone()))
}

/// The clusters holding the member object `namespace/name` of `kind`.
async fn holders(
    fed: &Federation,
    kind: &str,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    for cluster in CLUSTERS {
        if fed
            .member_object(cluster, &target(kind), Some(namespace), name)
            .await?
            .is_some()
        {
            found.push(cluster.to_owned());
        }
    }
    Ok(found)
}

async fn wait_chosen(
    fed: &Federation,
    hub: &Client,
    namespace: &str,
    name: &str,
    check: impl Fn(&[String]) -> bool,
    timeout: Duration,
) -> anyhow::Result<Vec<String>> {
    wait_for(
        &format!("PlacementPolicy {namespace}/{name}'s choice"),
        timeout,
        async || {
            let (clusters, status) = chosen(hub, namespace, name).await?;
            let placed = status["conditions"][0]["status"] == "True";
            let holding = holders(fed, "ConfigMap", namespace, name).await?;
            Ok(if placed && check(&clusters) && holding == clusters {
                Wait::Done(clusters)
            } else {
                Wait::Pending(format!("status {status}, copies in {holding:?}"))
            })
        },
    )
    .await
}

fn configmap() -> Value {
    json!({"template": {"data": {"greeting": "hello"}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_clusters_spread_over_regions_and_stay_put() -> anyhow::Result<()> {
    let (fed, _one) = fed().await?;
    let hub = fed.hub().await?;
    let namespace = unique_ns("policy-spread");
    fed.create_federated_namespace(&namespace, &CLUSTERS)
        .await?;
    create_federated(&hub, "ConfigMap", Some(&namespace), "cfg", configmap()).await?;
    create_placement_policy(
        &hub,
        &namespace,
        "cfg",
        json!({
            "targetKind": "FederatedConfigMap",
            "maxClusters": 2,
            "spread": [{"topologyKey": "region", "maxPerValue": 1}],
        }),
    )
    .await?;
    // One eu cluster and the us one.
    let clusters = wait_chosen(
        fed,
        &hub,
        &namespace,
        "cfg",
        |c| c.len() == 2 && c.contains(&"member3".to_owned()),
        TIMEOUT,
    )
    .await?;
    report(format_args!("maxClusters 2, one per region: {clusters:?}"));
    wait_event(
        &hub,
        &namespace,
        "Placed",
        &["FederatedConfigMap", "member3"],
    )
    .await?;
    // hubfedctl status shows the choice above its table.
    let (code, stdout, stderr) = hubfedctl(
        fed.env().kubeconfig_path(),
        &["status", "configmaps/cfg", "-n", &namespace],
    )
    .await;
    anyhow::ensure!(code == 0, "hubfedctl status: {code} {stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("placed by PlacementPolicy cfg: "))
        .ok_or_else(|| anyhow::anyhow!("no policy line in:\n{stdout}"))?;
    for cluster in &clusters {
        anyhow::ensure!(line.contains(cluster.as_str()), "{cluster} not in {line:?}");
    }

    // Stay put: a preference for the eu cluster that was not chosen — a fresh choice would
    // take it now (checked with the same decision function) — changes nothing once the
    // controller has seen the new spec (observedGeneration).
    let eu_out = ["member1", "member2"]
        .into_iter()
        .find(|c| !clusters.iter().any(|chosen| chosen == c))
        .ok_or_else(|| anyhow::anyhow!("both eu clusters chosen: {clusters:?}"))?;
    let tier = LABELS
        .iter()
        .find(|(name, _, _)| *name == eu_out)
        .map(|(_, _, tier)| *tier)
        .unwrap_or_default();
    let preferred = json!({
        "targetKind": "FederatedConfigMap",
        "maxClusters": 2,
        "spread": [{"topologyKey": "region", "maxPerValue": 1}],
        "preferences": [{"weight": 100, "clusterSelector": {"matchLabels": {"tier": tier}}}],
    });
    let fresh = fresh_choice(
        &serde_json::from_value(preferred.clone())?,
        &namespace,
        "cfg",
    );
    anyhow::ensure!(
        fresh.contains(&eu_out.to_owned()),
        "a fresh choice would not take {eu_out}: {fresh:?} — the test would prove nothing"
    );
    let patched = placement_policies(&hub, &namespace)
        .patch(
            "cfg",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": preferred})),
        )
        .await?;
    let generation = patched.metadata.generation;
    wait_for(
        "the policy reconciled at its new generation",
        TIMEOUT,
        async || {
            let (now, status) = chosen(&hub, &namespace, "cfg").await?;
            anyhow::ensure!(now == clusters, "the choice moved: {status}");
            Ok(if status["observedGeneration"].as_i64() == generation {
                Wait::Done(())
            } else {
                Wait::Pending(format!("status {status}"))
            })
        },
    )
    .await?;
    let holding = holders(fed, "ConfigMap", &namespace, "cfg").await?;
    anyhow::ensure!(holding == clusters, "copies moved to {holding:?}");
    Ok(())
}

/// The clusters `choose` picks for `namespace/name` among the three members, all Ready and
/// labelled as in [`LABELS`], with no previous choice.
fn fresh_choice(spec: &PlacementPolicySpec, namespace: &str, name: &str) -> Vec<String> {
    let clusters: Vec<ClusterState> = LABELS
        .iter()
        .map(|(cluster, region, tier)| ClusterState {
            name: (*cluster).to_owned(),
            labels: [("region", *region), ("tier", *tier)]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            ready: true,
            since: None,
        })
        .collect();
    choose(
        spec,
        &format!("{namespace}/{name}"),
        &clusters,
        &Previous::default(),
        0,
    )
    .map(|c| c.clusters.into_keys().collect())
    .unwrap_or_default()
}

/// An object whose fresh choice among member1..3 (maxClusters 1) is member3 while among
/// member1..2 it is another: a choice made before member3 was a candidate must survive
/// member3 becoming one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_joining_the_candidates_does_not_reshuffle() -> anyhow::Result<()> {
    let (fed, _one) = fed().await?;
    let hub = fed.hub().await?;
    let namespace = unique_ns("policy-stable");
    let spec: PlacementPolicySpec = serde_json::from_value(json!({
        "targetKind": "FederatedConfigMap",
        "maxClusters": 1,
        "clusterSelector": {"matchLabels": {"pool": "blue"}},
    }))?;
    let state = |name: &str| ClusterState {
        name: name.to_owned(),
        ready: true,
        ..ClusterState::default()
    };
    let name = (0..200)
        .map(|i| format!("stable-{i}"))
        .find(|name| {
            let key = format!("{namespace}/{name}");
            let pick = |clusters: &[ClusterState]| {
                choose(
                    &PlacementPolicySpec {
                        cluster_selector: None,
                        ..spec.clone()
                    },
                    &key,
                    clusters,
                    &Previous::default(),
                    0,
                )
                .map(|c| c.clusters.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
            };
            pick(&[state("member1"), state("member2"), state("member3")]) == ["member3"]
        })
        .ok_or_else(|| anyhow::anyhow!("no name ranks member3 first"))?;
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let pool = |value: Option<&str>| json!({"metadata": {"labels": {"pool": value}}});
    for member in ["member1", "member2"] {
        clusters
            .patch(
                member,
                &PatchParams::default(),
                &Patch::Merge(pool(Some("blue"))),
            )
            .await?;
    }
    let result = async {
        fed.create_federated_namespace(&namespace, &CLUSTERS)
            .await?;
        create_federated(&hub, "ConfigMap", Some(&namespace), &name, configmap()).await?;
        create_placement_policy(&hub, &namespace, &name, serde_json::to_value(&spec)?).await?;
        let before = wait_chosen(fed, &hub, &namespace, &name, |c| c.len() == 1, TIMEOUT).await?;
        assert_ne!(before, ["member3"]);
        let (_, status) = chosen(&hub, &namespace, &name).await?;
        anyhow::ensure!(
            status["candidates"] == json!(["member1", "member2"]),
            "candidates before: {status}"
        );
        clusters
            .patch(
                "member3",
                &PatchParams::default(),
                &Patch::Merge(pool(Some("blue"))),
            )
            .await?;
        // The registry publishes the label; the policy is looked at again (a registry change
        // wakes every policy): its status lists member3 among the candidates once it has
        // decided with member3 a candidate — in the same write as the choice, which must not
        // have moved, nor the copy.
        wait_for(
            "member3 among the policy's candidates",
            TIMEOUT,
            async || {
                let (now, status) = chosen(&hub, &namespace, &name).await?;
                anyhow::ensure!(now == before, "the choice moved from {before:?}: {status}");
                Ok(
                    if status["candidates"] == json!(["member1", "member2", "member3"]) {
                        Wait::Done(())
                    } else {
                        Wait::Pending(format!("status {status}"))
                    },
                )
            },
        )
        .await?;
        let holding = holders(fed, "ConfigMap", &namespace, &name).await?;
        anyhow::ensure!(holding == before, "the copy moved to {holding:?}");
        anyhow::Ok(())
    }
    .await;
    for member in ["member1", "member2", "member3"] {
        clusters
            .patch(member, &PatchParams::default(), &Patch::Merge(pool(None)))
            .await?;
    }
    result
}

/// An RSP and a PlacementPolicy of the same name: the policy chooses the clusters, the RSP
/// spreads the replicas over those only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rsp_spreads_over_the_chosen_clusters() -> anyhow::Result<()> {
    let (fed, _one) = fed().await?;
    let (hub, namespace) = with_web(fed, "policy-rsp").await?;
    create_eu_policy(&hub, &namespace, "web").await?;
    create_rsp(&hub, &namespace, "web", 6, false).await?;
    wait_replicas(
        fed,
        &namespace,
        "web",
        &[("member1", 3), ("member2", 3)],
        TIMEOUT,
    )
    .await?;
    Ok(())
}

/// An RSP of the same name that targets another kind does not schedule the policy's target:
/// the policy writes its placement itself (it used to leave it to the RSP, and the object was
/// placed nowhere).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rsp_of_another_kind_leaves_the_placement_to_the_policy() -> anyhow::Result<()> {
    let (fed, _one) = fed().await?;
    let (hub, namespace) = with_web(fed, "policy-rsp-kind").await?;
    create_rsp_for(&hub, &namespace, "web", "FederatedReplicaSet", 6, false).await?;
    create_eu_policy(&hub, &namespace, "web").await?;
    wait_replicas(
        fed,
        &namespace,
        "web",
        &[("member1", 2), ("member2", 2)],
        TIMEOUT,
    )
    .await?;
    Ok(())
}

/// PlacementPolicy `namespace/name` for the FederatedDeployment of that name: the clusters of
/// region eu (member1, member2).
async fn create_eu_policy(hub: &Client, namespace: &str, name: &str) -> anyhow::Result<()> {
    let spec = json!({
        "targetKind": "FederatedDeployment",
        "clusterSelector": {"matchLabels": {"region": "eu"}},
    });
    create_placement_policy(hub, namespace, name, spec).await
}

/// A new namespace `unique_ns(prefix)` federated to every cluster, holding FederatedDeployment
/// `web` ([`deployment`]); returns a hub client and the namespace.
async fn with_web(fed: &Federation, prefix: &str) -> anyhow::Result<(Client, String)> {
    let hub = fed.hub().await?;
    let namespace = unique_ns(prefix);
    fed.create_federated_namespace(&namespace, &CLUSTERS)
        .await?;
    create_federated(
        &hub,
        "Deployment",
        Some(&namespace),
        "web",
        deployment("web"),
    )
    .await?;
    Ok((hub, namespace))
}

fn deployment(app: &str) -> Value {
    json!({"template": {"spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": app}},
        "template": {
            "metadata": {"labels": {"app": app}},
            "spec": {"containers": [{"name": app, "image": "registry.k8s.io/pause:3.10"}]},
        },
    }}})
}

async fn create_rsp(
    hub: &Client,
    namespace: &str,
    name: &str,
    total: i64,
    rebalance: bool,
) -> anyhow::Result<()> {
    create_rsp_for(
        hub,
        namespace,
        name,
        "FederatedDeployment",
        total,
        rebalance,
    )
    .await
}

async fn create_rsp_for(
    hub: &Client,
    namespace: &str,
    name: &str,
    target_kind: &str,
    total: i64,
    rebalance: bool,
) -> anyhow::Result<()> {
    hubfed_e2e::scheduling::create_rsp(
        hub,
        namespace,
        name,
        json!({"targetKind": target_kind, "totalReplicas": total, "rebalance": rebalance}),
    )
    .await
}

/// The clusters in the FederatedDeployment's `spec.placement.clusters`, sorted.
async fn placement(hub: &Client, namespace: &str, name: &str) -> anyhow::Result<Vec<String>> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(hub.clone(), namespace, &federated("Deployment"));
    let object = api.get(name).await?;
    let mut clusters: Vec<String> = object.data["spec"]["placement"]["clusters"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|c| c["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    clusters.sort_unstable();
    Ok(clusters)
}

/// An RSP that stops scheduling the policy's target — broken (a negative `totalReplicas`) or
/// deleted — hands the placement back to the policy at once: the policy controller watches
/// RSPs (it used to notice only on its 30 s resync). The RSP (`intersectWithClusterSelector`,
/// the Deployment's selector `tier: gold`) placed the object in member2 only of the policy's
/// member1 and member2; the policy then writes both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rsp_hands_the_placement_back_at_once() -> anyhow::Result<()> {
    let (fed, _one) = fed().await?;
    let hub = fed.hub().await?;
    for deleted in [false, true] {
        let namespace = unique_ns("policy-rsp-back");
        fed.create_federated_namespace(&namespace, &CLUSTERS)
            .await?;
        // The RSP intersects with the FederatedNamespace's selector too: every cluster.
        let every = json!({"spec": {"placement": {"clusterSelector": {}}}});
        Api::<DynamicObject>::namespaced_with(hub.clone(), &namespace, &federated("Namespace"))
            .patch(&namespace, &PatchParams::default(), &Patch::Merge(&every))
            .await?;
        let mut gold = deployment("web");
        gold["placement"] = json!({"clusterSelector": {"matchLabels": {"tier": "gold"}}});
        create_federated(&hub, "Deployment", Some(&namespace), "web", gold).await?;
        // The RSP first: the policy never writes the placement while it schedules.
        hubfed_e2e::scheduling::create_rsp(
            &hub,
            &namespace,
            "web",
            json!({
                "targetKind": "FederatedDeployment",
                "totalReplicas": 1,
                "intersectWithClusterSelector": true,
            }),
        )
        .await?;
        create_eu_policy(&hub, &namespace, "web").await?;
        wait_for("the RSP's placement in member2", TIMEOUT, async || {
            let clusters = placement(&hub, &namespace, "web").await?;
            Ok(if clusters == ["member2"] {
                Wait::Done(())
            } else {
                Wait::Pending(format!("placement {clusters:?}"))
            })
        })
        .await?;
        // The policy reconciled just now: its next resync is 30 s away.
        let touch = json!({"metadata": {"annotations": {"e2e/touched": unique_name("t")}}});
        placement_policies(&hub, &namespace)
            .patch("web", &PatchParams::default(), &Patch::Merge(&touch))
            .await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let began = Instant::now();
        if deleted {
            rsps(&hub, &namespace)
                .delete("web", &Default::default())
                .await?;
        } else {
            let broken = json!({"spec": {"totalReplicas": -1}});
            rsps(&hub, &namespace)
                .patch("web", &PatchParams::default(), &Patch::Merge(&broken))
                .await?;
        }
        let how = if deleted { "deleted" } else { "broken" };
        wait_for(
            &format!("the policy's placement once the RSP is {how} (well before the resync)"),
            Duration::from_secs(10),
            async || {
                let clusters = placement(&hub, &namespace, "web").await?;
                Ok(if clusters == ["member1", "member2"] {
                    Wait::Done(())
                } else {
                    Wait::Pending(format!("placement {clusters:?}"))
                })
            },
        )
        .await?;
        report(format!(
            "RSP {how}: placement handed back to the policy after {:.1}s",
            began.elapsed().as_secs_f64()
        ));
    }
    Ok(())
}

/// Waits until exactly these members hold the Deployment, each with that many replicas, all
/// ready.
async fn wait_replicas(
    fed: &Federation,
    namespace: &str,
    name: &str,
    expected: &[(&str, i64)],
    timeout: Duration,
) -> anyhow::Result<()> {
    let want: BTreeMap<String, (i64, i64)> = expected
        .iter()
        .map(|(c, n)| ((*c).to_owned(), (*n, *n)))
        .collect();
    wait_for(
        &format!("{namespace}/{name} as {expected:?}, ready"),
        timeout,
        async || {
            let found = member_replicas(fed, &CLUSTERS, namespace, name).await?;
            Ok(if found == want {
                Wait::Done(())
            } else {
                Wait::Pending(format!("members (replicas, ready): {found:?}"))
            })
        },
    )
    .await
}

/// In namespace `unique_ns(ns_prefix)`, federated to every cluster: Deployment
/// `unique_name(name_prefix)` ([`deployment`]) and its PlacementPolicy choosing `max_clusters`
/// clusters, preferring tier gold (member2), failing over after 10 s. Returns the namespace and
/// the name.
async fn gold_with_failover(
    fed: &Federation,
    ns_prefix: &str,
    name_prefix: &str,
    max_clusters: usize,
) -> anyhow::Result<(String, String)> {
    let hub = fed.hub().await?;
    let namespace = unique_ns(ns_prefix);
    let name = unique_name(name_prefix);
    fed.create_federated_namespace(&namespace, &CLUSTERS)
        .await?;
    create_federated(
        &hub,
        "Deployment",
        Some(&namespace),
        &name,
        deployment(&name),
    )
    .await?;
    create_placement_policy(
        &hub,
        &namespace,
        &name,
        json!({
            "targetKind": "FederatedDeployment",
            "maxClusters": max_clusters,
            "preferences": [{"weight": 50, "clusterSelector": {"matchLabels": {"tier": "gold"}}}],
            "failover": {"gracePeriodSeconds": 10},
        }),
    )
    .await?;
    Ok((namespace, name))
}

/// Waits (3 minutes: health threshold and grace period) until the policy `namespace/name`
/// has replaced frozen `frozen` (its one chosen cluster) and says so; returns the replacement.
async fn wait_replaced(
    hub: &Client,
    namespace: &str,
    name: &str,
    frozen: &str,
) -> anyhow::Result<String> {
    wait_for(
        &format!("the workload replaced away from frozen {frozen}"),
        Duration::from_secs(180),
        async || {
            let (clusters, status) = chosen(hub, namespace, name).await?;
            Ok(match clusters.as_slice() {
                [one] if one != frozen && status["failedOver"][0]["cluster"] == frozen => {
                    Wait::Done(one.clone())
                }
                _ => Wait::Pending(format!("status {status}")),
            })
        },
    )
    .await
}

/// Resumes a frozen API server when dropped, whatever the test's outcome.
struct Frozen(&'static hubfed_testenv::Cluster);

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = self.0.resume();
    }
}

/// member2 (preferred: tier gold) runs the workload; frozen, it is replaced after the grace
/// period and the workload is Ready elsewhere; back, nothing moves (no `moveBack`); with
/// `moveBack`, the workload returns once member2 has been Ready for the grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_after_the_grace_period_and_no_flapping() -> anyhow::Result<()> {
    let (fed, _one) = fed().await?;
    let hub = fed.hub().await?;
    let (namespace, name) = gold_with_failover(fed, "policy-failover", "app", 1).await?;
    wait_replicas(fed, &namespace, &name, &[("member2", 2)], TIMEOUT).await?;

    let member2 = fed.cluster("member2")?;
    member2.pause()?;
    let frozen = Frozen(member2);
    let froze = Instant::now();
    let away = wait_replaced(&hub, &namespace, &name, "member2").await?;
    let replaced = froze.elapsed();
    // Ready there: the Deployment runs in the replacement (member2 is frozen, its copy is
    // unreachable and not counted).
    wait_for(
        "the Deployment ready in the replacement",
        TIMEOUT,
        async || {
            let object = fed
                .member_object(&away, &target("Deployment"), Some(&namespace), &name)
                .await?;
            let ready = object
                .as_ref()
                .and_then(|o| o["status"]["readyReplicas"].as_i64());
            Ok(if ready == Some(2) {
                Wait::Done(())
            } else {
                Wait::Pending(format!("readyReplicas {ready:?}"))
            })
        },
    )
    .await?;
    report(format_args!(
        "failover: member2 frozen → replaced by {away} after {:.1}s (health threshold + 10 s grace), Ready there after {:.1}s",
        replaced.as_secs_f64(),
        froze.elapsed().as_secs_f64()
    ));
    wait_event(&hub, &namespace, "FailedOver", &["member2", "replaced"]).await?;

    drop(frozen);
    hubfed_e2e::wait_clusters_ready(&hub, &["member2"]).await?;
    // Back and Ready: the record of the failover is dropped once member2 has been Ready for
    // the grace period — proof the policy looked again — and the workload stays where it is.
    wait_for(
        "the failover record dropped, the choice unchanged",
        TIMEOUT,
        async || {
            let (clusters, status) = chosen(&hub, &namespace, &name).await?;
            anyhow::ensure!(clusters == [away.clone()], "the choice moved: {status}");
            Ok(if status["failedOver"].is_null() {
                Wait::Done(())
            } else {
                Wait::Pending(format!("status {status}"))
            })
        },
    )
    .await?;
    // member2's copy, unreachable when the workload moved, is removed now that it is back.
    wait_for("the copy only in the replacement", TIMEOUT, async || {
        let holding = holders(fed, "Deployment", &namespace, &name).await?;
        Ok(if holding == [away.clone()] {
            Wait::Done(())
        } else {
            Wait::Pending(format!("copies in {holding:?}"))
        })
    })
    .await?;

    move_back(fed, &namespace, &name, &away).await
}

/// moveBack: fail over again (freeze `away`, the replacement), then thaw it: the workload
/// returns to it once it has been Ready for the grace period, giving up its own replacement.
async fn move_back(
    fed: &Federation,
    namespace: &str,
    name: &str,
    away: &str,
) -> anyhow::Result<()> {
    let hub = fed.hub().await?;
    let (namespace, name, away) = (namespace.to_owned(), name.to_owned(), away.to_owned());
    placement_policies(&hub, &namespace)
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"failover": {"gracePeriodSeconds": 10, "moveBack": true}}}),
            ),
        )
        .await?;
    let home = fed.cluster(&away)?;
    home.pause()?;
    let frozen = Frozen(home);
    let second = wait_replaced(&hub, &namespace, &name, &away).await?;
    drop(frozen);
    let thawed = Instant::now();
    wait_for(
        &format!("the workload back in {away}"),
        TIMEOUT,
        async || {
            let (clusters, status) = chosen(&hub, &namespace, &name).await?;
            Ok(
                if clusters == [away.clone()] && status["clusters"][0]["reason"] == "MovedBack" {
                    Wait::Done(())
                } else {
                    Wait::Pending(format!("status {status}"))
                },
            )
        },
    )
    .await?;
    wait_replicas(fed, &namespace, &name, &[(away.as_str(), 2)], TIMEOUT).await?;
    report(format_args!(
        "moveBack: {away} frozen → {second}; thawed → back in {away} {:.1}s later (Ready again + 10 s grace)",
        thawed.elapsed().as_secs_f64()
    ));
    wait_event(&hub, &namespace, "MovedBack", &[away.as_str()]).await?;
    Ok(())
}

/// The replicas of an RSP-scheduled workload follow failover: the policy chooses two
/// clusters, the RSP spreads 6 replicas 3/3 over them; member2 frozen, its replicas first go
/// to the other chosen cluster (KubeFed: only Ready clusters get replicas), then, after the
/// grace period, the policy replaces member2 and the RSP spreads 3/3 again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsp_replicas_follow_failover() -> anyhow::Result<()> {
    let (fed, _one) = fed().await?;
    let hub = fed.hub().await?;
    let (namespace, name) = gold_with_failover(fed, "policy-rsp-failover", "spread", 2).await?;
    // rebalance: without it KubeFed's planner leaves the replicas where they run (all 6 in
    // the cluster that took member2's share) when the replacement arrives.
    create_rsp(&hub, &namespace, &name, 6, true).await?;
    let (first, _) = wait_for("two clusters chosen", TIMEOUT, async || {
        let (clusters, status) = chosen(&hub, &namespace, &name).await?;
        Ok(
            if clusters.len() == 2 && clusters.contains(&"member2".to_owned()) {
                Wait::Done((clusters, status))
            } else {
                Wait::Pending(format!("status {status}"))
            },
        )
    })
    .await?;
    let other = first
        .iter()
        .find(|c| *c != "member2")
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no second cluster in {first:?}"))?;
    let spare = CLUSTERS
        .iter()
        .find(|c| !first.iter().any(|f| f == *c))
        .map(|c| (*c).to_owned())
        .ok_or_else(|| anyhow::anyhow!("no spare cluster"))?;
    let mut expected = vec![("member2", 3), (other.as_str(), 3)];
    expected.sort_unstable();
    wait_replicas(fed, &namespace, &name, &expected, TIMEOUT).await?;

    let member2 = fed.cluster("member2")?;
    member2.pause()?;
    let frozen = Frozen(member2);
    let froze = Instant::now();
    // Only the reachable clusters are read while member2 is frozen.
    let ready_in = async |cluster: &str| -> anyhow::Result<Option<(i64, i64)>> {
        let object = fed
            .member_object(cluster, &target("Deployment"), Some(&namespace), &name)
            .await?;
        Ok(object.map(|o| {
            (
                o["spec"]["replicas"].as_i64().unwrap_or(0),
                o["status"]["readyReplicas"].as_i64().unwrap_or(0),
            )
        }))
    };
    wait_for(
        &format!("3 replicas each in {other} and {spare} after the failover"),
        Duration::from_secs(180),
        async || {
            let (clusters, status) = chosen(&hub, &namespace, &name).await?;
            let counts = (ready_in(&other).await?, ready_in(&spare).await?);
            Ok(if counts == (Some((3, 3)), Some((3, 3))) {
                Wait::Done(())
            } else {
                Wait::Pending(format!("chosen {clusters:?} ({status}); (replicas, ready) in {other}, {spare}: {counts:?}"))
            })
        },
    )
    .await?;
    report(format_args!(
        "RSP failover: member2 frozen → 3/3 in {other} and {spare} after {:.1}s",
        froze.elapsed().as_secs_f64()
    ));
    drop(frozen);
    hubfed_e2e::wait_clusters_ready(&hub, &["member2"]).await?;
    // Back: member2's copy goes (no longer placed), nothing else moves.
    let mut expected = vec![(other.as_str(), 3), (spare.as_str(), 3)];
    expected.sort_unstable();
    wait_replicas(fed, &namespace, &name, &expected, TIMEOUT).await?;
    Ok(())
}
