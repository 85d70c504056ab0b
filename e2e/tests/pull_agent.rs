//! Pull mode end to end (docs/user-guide.md "Push or pull"): member1 joined in push mode,
//! member2 in pull mode with `hubfed-agent` running as a process that has only member2's
//! kubeconfig and what `hubfedctl join --mode pull` gave it. The same federated objects go to
//! both: create, override, update, drift correction, placement change, delete, orphan, garbage
//! collection after the agent was down, and a controller restart — each must converge in the
//! pull member as in the push member, with statuses identical in form.
//!
//! Own environment (a hub and two members, with kube-controller-manager for the token
//! Secrets), its own controller process and agent.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use hubfed_api::kubefedcluster::KubeFedCluster;
use hubfed_e2e::agent::AgentProcess;
use hubfed_e2e::controller::{ControllerOptions, ControllerProcess, sample};
use hubfed_e2e::{
    KUBEFED_NAMESPACE, PrivateFederation, TIMEOUT, Wait, cluster_status, create_federated,
    create_federated_namespace, get_value, hubfedctl, is_managed, member_mismatch, modify_as,
    placement, propagated_ok, pull_health_checks, report, target, wait_for,
};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

/// Garbage collection of the agent runs every 30 s, plus the heartbeat's way back to Ready.
const GC_TIMEOUT: Duration = Duration::from_secs(90);

struct Setup {
    env: hubfed_testenv::TestEnv,
    hub: Client,
    member1: Client,
    member2: Client,
    controller: ControllerProcess,
    agent: AgentProcess,
}

async fn start() -> anyhow::Result<Setup> {
    let env = PrivateFederation::new()
        .config(pull_health_checks())
        .unjoined()
        .start()
        .await?;
    let hub = env.hub().client().await?;
    let controller = ControllerProcess::start(&env, &ControllerOptions::single("pull-agent"))?;
    for args in [
        &["join", "member1", "--cluster-context", "member1"][..],
        &[
            "join",
            "member2",
            "--mode",
            "pull",
            "--cluster-context",
            "member2",
        ][..],
    ] {
        let (code, out, err) = hubfedctl(env.kubeconfig_path(), args).await;
        ensure!(code == 0, "{args:?}: exit {code}\n{out}\n{err}");
    }
    let agent = AgentProcess::start(&env, "member2", 1).await?;
    let member1 = env.cluster("member1").context("member1")?.client().await?;
    let member2 = env.cluster("member2").context("member2")?.client().await?;
    Ok(Setup {
        env,
        hub,
        member1,
        member2,
        controller,
        agent,
    })
}

async fn wait_ready(hub: &Client, name: &str, ready: bool) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let want = if ready { "Ready" } else { "Offline" };
    wait_for(&format!("{name} {want}"), TIMEOUT, async || {
        let cluster = clusters.get(name).await?;
        let conditions = cluster.status.map(|s| s.conditions).unwrap_or_default();
        Ok(
            if conditions
                .iter()
                .any(|c| c.type_ == want && c.status == "True")
            {
                Wait::Done(())
            } else {
                Wait::Pending(format!("conditions {conditions:?}"))
            },
        )
    })
    .await?;
    Ok(started.elapsed())
}

/// Waits until both members hold `name` as `check` wants it (`None`: absent).
async fn wait_copies(
    setup: &Setup,
    ns: &str,
    name: &str,
    what: &str,
    check: impl Fn(&str, Option<&Value>) -> Option<String>,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let resource = target("ConfigMap");
    wait_for(what, TIMEOUT, async || {
        let mut problems = Vec::new();
        for (cluster, client) in [("member1", &setup.member1), ("member2", &setup.member2)] {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
            let copy = get_value(&api, name).await?;
            problems.extend(check(cluster, copy.as_ref()));
        }
        Ok(Wait::all_or_pending(problems))
    })
    .await?;
    Ok(started.elapsed())
}

fn data_is(cluster: &str, copy: Option<&Value>, key: &str, want: &str) -> Option<String> {
    member_mismatch(
        cluster,
        copy,
        &[(&format!("/data/{key}"), Some(&json!(want)))],
    )
}

async fn wait_propagated(
    api: &Api<DynamicObject>,
    name: &str,
    clusters: &[&str],
) -> anyhow::Result<Value> {
    wait_for(
        &format!("{name} propagated to {clusters:?}"),
        TIMEOUT,
        async || {
            let object = get_value(api, name)
                .await?
                .context("the federated object is gone")?;
            Ok(match propagated_ok(&object, clusters) {
                Wait::Done(()) => Wait::Done(object),
                Wait::Pending(p) => Wait::Pending(p),
            })
        },
    )
    .await
}

/// The shape of a `status.clusters[]` entry: its keys (the values differ by cluster).
fn shape(entry: Option<&Value>) -> Vec<String> {
    entry
        .and_then(Value::as_object)
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_member_converges_like_a_push_member() -> anyhow::Result<()> {
    let mut setup = start().await?;
    let result = scenario(&mut setup).await;
    if result.is_err() {
        report(format!("agent log:\n{}", setup.agent.log_tail(60)));
        report(format!(
            "controller log:\n{}",
            setup.controller.log_tail(60)
        ));
    }
    result
}

async fn scenario(setup: &mut Setup) -> anyhow::Result<()> {
    let hub = setup.hub.clone();
    let ready = wait_ready(&hub, "member2", true).await?;
    wait_ready(&hub, "member1", true).await?;
    report(format!(
        "pull: member2 Ready {:.1}s after the agent started",
        ready.as_secs_f64()
    ));

    // A namespace through both (the pull member's Namespace goes through its agent too).
    let ns = "pull-e2e";
    let members = [
        ("member1", setup.member1.clone()),
        ("member2", setup.member2.clone()),
    ];
    create_federated_namespace(&hub, &members, ns).await?;

    // Create with an override for the pull member.
    let started = Instant::now();
    let spec = json!({
        "template": { "data": { "a": "1", "b": "x" } },
        "placement": placement(&["member1", "member2"]),
        "overrides": [{ "clusterName": "member2", "clusterOverrides": [{ "path": "/data/a", "value": "2" }] }],
    });
    let api = create_federated(&hub, "ConfigMap", Some(ns), "web", spec).await?;
    wait_copies(
        setup,
        ns,
        "web",
        "web in both, overridden in member2",
        |c, copy| data_is(c, copy, "a", if c == "member2" { "2" } else { "1" }),
    )
    .await?;
    let object = wait_propagated(&api, "web", &["member1", "member2"]).await?;
    report(format!(
        "pull: create with override converged in {:.1}s",
        started.elapsed().as_secs_f64()
    ));
    let (push_entry, pull_entry) = (
        cluster_status(&object, "member1"),
        cluster_status(&object, "member2"),
    );
    ensure!(
        shape(push_entry) == shape(pull_entry),
        "status entries differ in form: push {push_entry:?}, pull {pull_entry:?}"
    );

    // Update.
    let started = Instant::now();
    let patch = json!({"spec": {"template": {"data": {"b": "y"}}}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_copies(setup, ns, "web", "the update in both", |c, copy| {
        data_is(c, copy, "b", "y")
    })
    .await?;
    report(format!(
        "pull: update converged in {:.1}s",
        started.elapsed().as_secs_f64()
    ));
    wait_propagated(&api, "web", &["member1", "member2"]).await?;
    quiet_and_evented(setup, ns).await?;

    // Drift in the pull member, by a person: reverted.
    let resource = target("ConfigMap");
    let member2_api: Api<DynamicObject> =
        Api::namespaced_with(setup.member2.clone(), ns, &resource);
    let started = Instant::now();
    modify_as(&member2_api, "web", "kubectl-edit", |copy| {
        copy["data"]["b"] = json!("drifted");
    })
    .await?;
    wait_copies(setup, ns, "web", "the drift reverted", |c, copy| {
        data_is(c, copy, "b", "y")
    })
    .await?;
    report(format!(
        "pull: drift reverted in {:.1}s",
        started.elapsed().as_secs_f64()
    ));
    // The hub's metrics count the pull member as a push member's: its managed copies (the
    // gauge is refreshed every 10 s) and the drift its agent reverted.
    wait_for(
        "the pull member in the hub's metrics",
        TIMEOUT,
        async || {
            let metrics = setup.controller.metrics().await.unwrap_or_default();
            let member2 = "cluster=\"member2\"";
            let managed = sample(
                &metrics,
                "hubfed_managed_objects",
                &[member2, "federatedconfigmap"],
            );
            let drift = sample(&metrics, "hubfed_drift_total", &[member2, "Reverted"]);
            Ok(match (managed, drift) {
                (Some(m), Some(d)) if m >= 1.0 && d >= 1.0 => Wait::Done(()),
                other => Wait::Pending(format!("managed, drift: {other:?}")),
            })
        },
    )
    .await?;

    // Placement change: out of the pull member (deleted there), and back.
    let started = Instant::now();
    let patch = json!({"spec": {"placement": placement(&["member1"])}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_copies(setup, ns, "web", "web only in member1", |c, copy| {
        match (c, copy) {
            ("member2", None) => None,
            ("member2", Some(_)) => Some("member2: still there".to_owned()),
            (c, copy) => data_is(c, copy, "b", "y"),
        }
    })
    .await?;
    let object = wait_propagated(&api, "web", &["member1"]).await?;
    ensure!(
        cluster_status(&object, "member2").is_none(),
        "member2 still in status: {}",
        object["status"]
    );
    let patch = json!({"spec": {"placement": placement(&["member1", "member2"])}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_copies(setup, ns, "web", "web back in member2", |c, copy| {
        data_is(c, copy, "b", "y")
    })
    .await?;
    wait_propagated(&api, "web", &["member1", "member2"]).await?;
    report(format!(
        "pull: placement out and back in {:.1}s",
        started.elapsed().as_secs_f64()
    ));

    // Orphaning deletion: the copies stay, unlabelled.
    let patch = json!({"metadata": {"annotations": {"kubefed.io/orphan": "true"}}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    api.delete("web", &DeleteParams::default()).await?;
    wait_for("web deleted from the hub", TIMEOUT, async || {
        Ok(match get_value(&api, "web").await? {
            None => Wait::Done(()),
            Some(o) => Wait::Pending(format!("finalizers {}", o["metadata"]["finalizers"])),
        })
    })
    .await?;
    wait_copies(
        setup,
        ns,
        "web",
        "orphaned copies, unlabelled",
        |c, copy| match copy {
            None => Some(format!("{c}: an orphaned copy was deleted")),
            Some(copy) if is_managed(copy) => Some(format!("{c}: still managed")),
            Some(_) => None,
        },
    )
    .await?;

    // Deletion: the copies go.
    let spec = json!({
        "template": { "data": { "k": "v" } },
        "placement": placement(&["member1", "member2"]),
    });
    create_federated(&hub, "ConfigMap", Some(ns), "db", spec).await?;
    wait_copies(setup, ns, "db", "db in both", |c, copy| {
        data_is(c, copy, "k", "v")
    })
    .await?;
    wait_propagated(&api, "db", &["member1", "member2"]).await?;
    let started = Instant::now();
    api.delete("db", &DeleteParams::default()).await?;
    wait_copies(setup, ns, "db", "db deleted in both", |c, copy| {
        copy.map(|_| format!("{c}: still there"))
    })
    .await?;
    wait_for("db gone from the hub", TIMEOUT, async || {
        Ok(match get_value(&api, "db").await? {
            None => Wait::Done(()),
            Some(o) => Wait::Pending(format!("status {}", o["status"])),
        })
    })
    .await?;
    report(format!(
        "pull: deletion converged in {:.1}s",
        started.elapsed().as_secs_f64()
    ));

    // Garbage collection after the agent was down: the object is deleted while member2 is
    // Offline (the deletion does not wait for it); the copy goes when the agent is back.
    // Another object leaves member2's placement and comes back while the agent is away: its
    // copy must survive (the pending deletion is withdrawn), the same copy (same UID).
    let spec = json!({
        "template": { "data": { "k": "v" } },
        "placement": placement(&["member1", "member2"]),
    });
    create_federated(&hub, "ConfigMap", Some(ns), "gc", spec.clone()).await?;
    create_federated(&hub, "ConfigMap", Some(ns), "stay", spec).await?;
    for name in ["gc", "stay"] {
        wait_copies(setup, ns, name, &format!("{name} in both"), |c, copy| {
            data_is(c, copy, "k", "v")
        })
        .await?;
        wait_propagated(&api, name, &["member1", "member2"]).await?;
    }
    let stay_uid = get_value(&member2_api, "stay")
        .await?
        .context("stay in member2")?["metadata"]["uid"]
        .clone();
    setup.agent.kill().await?;
    let offline = wait_ready(&hub, "member2", false).await?;
    report(format!(
        "pull: agent killed → member2 Offline in {:.1}s",
        offline.as_secs_f64()
    ));
    api.delete("gc", &DeleteParams::default()).await?;
    wait_for(
        "gc deleted from the hub with member2 Offline",
        TIMEOUT,
        async || {
            Ok(match get_value(&api, "gc").await? {
                None => Wait::Done(()),
                Some(o) => Wait::Pending(format!("status {}", o["status"])),
            })
        },
    )
    .await?;
    let copy = get_value(&member2_api, "gc").await?;
    ensure!(
        copy.is_some(),
        "member2's copy went while its agent was down"
    );
    for clusters in [&["member1"][..], &["member1", "member2"][..]] {
        let patch = json!({"spec": {"placement": placement(clusters)}});
        api.patch("stay", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        // Let the controller settle each placement (a tombstone, then its withdrawal).
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    setup.agent = AgentProcess::start(&setup.env, "member2", 1).await?;
    let started = Instant::now();
    let back = wait_ready(&hub, "member2", true).await?;
    let resource = target("ConfigMap");
    wait_for("member2's leftover collected", GC_TIMEOUT, async || {
        let api: Api<DynamicObject> = Api::namespaced_with(setup.member2.clone(), ns, &resource);
        Ok(match get_value(&api, "gc").await? {
            None => Wait::Done(()),
            Some(copy) => Wait::Pending(format!("labels {:?}", copy["metadata"]["labels"])),
        })
    })
    .await?;
    report(format!(
        "pull: agent back → Ready in {:.1}s, leftover collected in {:.1}s",
        back.as_secs_f64(),
        started.elapsed().as_secs_f64()
    ));
    wait_propagated(&api, "stay", &["member1", "member2"]).await?;
    let stay = get_value(&member2_api, "stay").await?;
    ensure!(
        stay.as_ref()
            .is_some_and(|s| s["metadata"]["uid"] == stay_uid),
        "member2's copy of stay, placed out and back while the agent was away, was replaced or removed: {stay:?}"
    );

    // The hub controller restarts: the agent carries on, and new work still arrives.
    setup.controller.kill().await?;
    setup.controller =
        ControllerProcess::start(&setup.env, &ControllerOptions::single("pull-agent-2"))?;
    let spec = json!({
        "template": { "data": { "after": "restart" } },
        "placement": placement(&["member1", "member2"]),
    });
    let started = Instant::now();
    create_federated(&hub, "ConfigMap", Some(ns), "later", spec).await?;
    wait_copies(
        setup,
        ns,
        "later",
        "later in both after a controller restart",
        |c, copy| data_is(c, copy, "after", "restart"),
    )
    .await?;
    wait_propagated(&api, "later", &["member1", "member2"]).await?;
    ensure!(
        setup.agent.is_alive(),
        "the agent stopped when the controller restarted"
    );
    report(format!(
        "pull: after a controller restart, a new object converged in {:.1}s",
        started.elapsed().as_secs_f64()
    ));
    unjoin_through_agent(setup, ns).await
}

/// Once converged, nothing is written any more — not the work, not the copy, not the
/// federated object — and the pull member's writes were recorded as Events on the federated
/// object, as the push member's are.
async fn quiet_and_evented(setup: &Setup, ns: &str) -> anyhow::Result<()> {
    use hubfed_api::work::Work;
    let works: Api<Work> = Api::namespaced(
        setup.hub.clone(),
        &hubfed_core::pull::cluster_namespace("member2"),
    );
    let work_name = hubfed_core::pull::work_name("", "ConfigMap", Some(ns), "web");
    let member2: Api<DynamicObject> =
        Api::namespaced_with(setup.member2.clone(), ns, &target("ConfigMap"));
    let federated: Api<DynamicObject> =
        Api::namespaced_with(setup.hub.clone(), ns, &hubfed_e2e::federated("ConfigMap"));
    let versions = async || -> anyhow::Result<[Option<String>; 3]> {
        Ok([
            works.get(&work_name).await?.metadata.resource_version,
            member2.get("web").await?.metadata.resource_version,
            federated.get("web").await?.metadata.resource_version,
        ])
    };
    // Let the last reports settle, then nothing may move for a while.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = versions().await?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = versions().await?;
    ensure!(
        before == after,
        "writes while nothing changed (work, member2 copy, federated object): {before:?} → {after:?}"
    );
    // The PropagatedVersion records the pull member's copy version, as a push member's.
    let versions: Api<hubfed_api::propagatedversion::PropagatedVersion> =
        Api::namespaced(setup.hub.clone(), ns);
    let name = hubfed_api::propagatedversion::propagated_version_name("ConfigMap", "web");
    let recorded = versions
        .get(&name)
        .await?
        .status
        .map(|s| s.cluster_versions)
        .unwrap_or_default();
    let clusters: Vec<&str> = recorded.iter().map(|v| v.cluster_name.as_str()).collect();
    ensure!(
        clusters == ["member1", "member2"],
        "PropagatedVersion {name} records {clusters:?}"
    );
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(setup.hub.clone(), ns);
    wait_for("the pull member's writes as Events", TIMEOUT, async || {
        let list = events.list(&kube::api::ListParams::default()).await?;
        let messages: Vec<String> = list
            .items
            .iter()
            .filter(|e| e.involved_object.name.as_deref() == Some("web"))
            .filter(|e| {
                matches!(
                    e.reason.as_deref(),
                    Some("CreateInCluster" | "UpdateInCluster")
                )
            })
            .filter_map(|e| e.message.clone())
            .collect();
        Ok(if messages.iter().any(|m| m.contains("member2")) {
            Wait::Done(())
        } else {
            Wait::Pending(format!("events {messages:?}"))
        })
    })
    .await
}

/// Unjoin with --remove-managed-resources while hubfedctl cannot reach the member (no
/// context for it: a member behind NAT): its agent removes the copies, then the hub side
/// goes; member1 keeps its copies.
async fn unjoin_through_agent(setup: &Setup, ns: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    let args = [
        "unjoin",
        "member2",
        "--cluster-context",
        "unreachable-from-here",
        "--remove-managed-resources",
    ];
    let (code, out, err) = hubfedctl(setup.env.kubeconfig_path(), &args).await;
    ensure!(
        code == 0,
        "unjoin member2 through its agent: exit {code}\n{out}\n{err}"
    );
    let member2: Api<DynamicObject> =
        Api::namespaced_with(setup.member2.clone(), ns, &target("ConfigMap"));
    wait_for(
        "member2's copies removed by its agent",
        TIMEOUT,
        async || {
            Ok(match get_value(&member2, "later").await? {
                None => Wait::Done(()),
                Some(copy) if copy["metadata"]["deletionTimestamp"].is_string() => {
                    Wait::Pending("terminating".to_owned())
                }
                Some(_) => Wait::Pending("still there".to_owned()),
            })
        },
    )
    .await?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(setup.hub.clone());
    let work_ns = hubfed_core::pull::cluster_namespace("member2");
    let left = namespaces.get_opt(&work_ns).await?;
    ensure!(
        left.as_ref()
            .is_none_or(|n| n.metadata.deletion_timestamp.is_some()),
        "the work namespace {work_ns} is left"
    );
    let member1: Api<DynamicObject> =
        Api::namespaced_with(setup.member1.clone(), ns, &target("ConfigMap"));
    ensure!(
        get_value(&member1, "later").await?.is_some(),
        "member1's copy went with member2's unjoin"
    );
    report(format!(
        "pull: unjoin --remove-managed-resources through the agent in {:.1}s\n{out}",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}
