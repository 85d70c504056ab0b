//! Staged rollouts on three members that schedule pods, their strategies and stored state: a
//! cluster-scoped object with a 240-character name has its state stored and deleted with it;
//! an object without a strategy makes no rollout request; a missing strategy holds every
//! change until it exists; a strategy on the type takes effect at once; a large object still
//! rolls out; an unreadable state holds every change.
//!
//! The tests run one at a time (they share the members' capacity and the strategy); the
//! fixture is `hubfed_e2e::staged`.

use std::collections::BTreeMap;
use std::time::Duration;

use hubfed_e2e::rollout::{
    ROLLOUT_STRATEGY_ANNOTATION, RolloutState, create_rollout_strategy, follow_strategy,
    rollout_strategies,
};
use hubfed_e2e::staged::{
    CLUSTERS, STRATEGY, Watches, change, create_deployment, everywhere, hubfedctl, images, setup,
    spec, staged_federation as fed, wait_images, wait_statuses,
};
use hubfed_e2e::{
    KUBEFED_NAMESPACE, TIMEOUT, Wait, create_federated, dynamic_api, federated, target,
    unique_name, unique_ns, wait_absent, wait_event, wait_for, wait_member_field, wait_present,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// A cluster-scoped object (no namespace: its state's name had an invalid `-` label) with a
/// name too long to be part of a ConfigMap name: its rollout state is stored (under a valid
/// name, the full key in an annotation, owned by the object) and goes with the object; the
/// same name created again starts afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_scoped_object_stores_its_state_and_takes_it_along() -> anyhow::Result<()> {
    let (fed, _one) = fed().await?;
    let hub = fed.hub().await?;
    // 240 characters: with the kind and namespace around it, too long for a ConfigMap name.
    let name = format!("{}.{}", unique_name("reader"), "a".repeat(200));
    let name = format!("{name}{}", "b".repeat(240 - name.len()));
    let rules = |verbs: &[&str]| {
        json!({
            "template": {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}]},
            "placement": {"clusters": CLUSTERS.iter().map(|c| json!({"name": c})).collect::<Vec<_>>()},
        })
    };
    let create = async |verbs: &[&str]| -> anyhow::Result<Api<DynamicObject>> {
        let api = create_federated(&hub, "ClusterRole", None, &name, rules(verbs)).await?;
        follow_strategy(&api, &name, STRATEGY).await?;
        Ok(api)
    };
    let wait_verbs = async |verbs: &[&str]| {
        let role = target("ClusterRole");
        let verbs_are = ("/rules/0/verbs", &json!(verbs));
        let what = format!("{name} with {verbs:?}");
        wait_member_field(fed, &CLUSTERS, &role, (None, &name), verbs_are, &what).await
    };
    let api = create(&["get"]).await?;
    wait_verbs(&["get"]).await?;
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": rules(&["get", "list"])})),
    )
    .await?;
    wait_verbs(&["get", "list"]).await?;
    let target = format!("clusterroles/{name}");
    wait_for("the rollout completed", TIMEOUT, async || {
        let (_, out, err) = hubfedctl(&["rollout", "status", &target]).await;
        Ok(if out.contains("(Completed)") {
            Wait::Done(())
        } else {
            Wait::Pending(format!("{out}{err}"))
        })
    })
    .await?;

    let (maps, state_name) =
        RolloutState::of(&hub, "FederatedClusterRole", None, &name).into_parts();
    let map = maps.get(&state_name).await?;
    let uid = api.get(&name).await?.metadata.uid.unwrap_or_default();
    let annotations = map.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get("hubfed.io/rollout-object")
            .map(String::as_str),
        Some(format!("FederatedClusterRole/{name}").as_str())
    );
    assert_eq!(annotations.get("hubfed.io/rollout-object-uid"), Some(&uid));
    let owners = map.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(owners[0].uid, uid);

    // Deleted with its object.
    api.delete(&name, &DeleteParams::default()).await?;
    wait_absent("the rollout state gone", &maps, &state_name).await?;
    wait_absent("the federated object gone", &api, &name).await?;

    // The same name again, a state of an earlier object still there (another UID; halted
    // with a stable revision): a new object, a new state — its first revision goes
    // everywhere, nothing of the earlier state taken over.
    let earlier: ConfigMap = serde_json::from_value(json!({
        "metadata": {
            "name": state_name,
            "annotations": {
                "hubfed.io/rollout-object": format!("FederatedClusterRole/{name}"),
                "hubfed.io/rollout-object-uid": "an-earlier-object",
            },
        },
        "data": {
            "state": json!({
                "revision": "earlier", "stable": "older", "batch": 0, "batchStarted": 0,
                "phase": "Halted", "halted": "member1: not Ready",
                "batches": [{"stage": "canary", "clusters": ["member1"]},
                            {"stage": "rest", "clusters": ["member2", "member3"]}],
                "reached": ["member1"],
            }).to_string(),
            "current": "", "stable": "",
        },
    }))?;
    maps.create(&PostParams::default(), &earlier).await?;
    let api = create(&["watch"]).await?;
    wait_verbs(&["watch"]).await?;
    let uid = api.get(&name).await?.metadata.uid.unwrap_or_default();
    wait_for("the new object's state", TIMEOUT, async || {
        let map = maps.get_opt(&state_name).await?;
        let stored_uid = map
            .as_ref()
            .and_then(|m| m.metadata.annotations.as_ref())
            .and_then(|a| a.get("hubfed.io/rollout-object-uid").cloned());
        Ok(if stored_uid.as_ref() == Some(&uid) {
            Wait::Done(map)
        } else {
            Wait::Pending(format!("{stored_uid:?}"))
        })
    })
    .await?;
    let state: Value = serde_json::from_str(
        maps.get(&state_name)
            .await?
            .data
            .unwrap_or_default()
            .get("state")
            .map_or("null", String::as_str),
    )?;
    anyhow::ensure!(
        state["phase"] == "Completed" && state.get("stable").is_none(),
        "the earlier object's state was taken over: {state}"
    );
    api.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}

/// An object without a strategy makes no rollout request when it is deleted (the path
/// without rollouts): a ConfigMap at its state's name — left by an earlier object of that name
/// — is not touched, and the deletion completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_without_a_strategy_makes_no_rollout_request() -> anyhow::Result<()> {
    let (fed, _one) = fed().await?;
    let namespace = unique_ns("rollout-none");
    let name = unique_name("web");
    fed.create_federated_namespace(&namespace, &CLUSTERS)
        .await?;
    let hub = fed.hub().await?;
    let (maps, state_name) =
        RolloutState::of(&hub, "FederatedDeployment", Some(&namespace), &name).into_parts();
    let leftover: ConfigMap = serde_json::from_value(json!({
        "metadata": {
            "name": state_name,
            "annotations": {"hubfed.io/rollout-object-uid": "an-earlier-object"},
        },
    }))?;
    maps.create(&PostParams::default(), &leftover).await?;
    let api = create_federated(
        &hub,
        "Deployment",
        Some(&namespace),
        &name,
        spec(&name, "app:v1", "10m"),
    )
    .await?;
    wait_images(fed, &namespace, &name, &everywhere("app:v1"), TIMEOUT).await?;
    api.delete(&name, &DeleteParams::default()).await?;
    wait_absent("the federated object gone", &api, &name).await?;
    anyhow::ensure!(
        maps.get_opt(&state_name).await?.is_some(),
        "the deletion of an object without a strategy deleted the ConfigMap at its state's name"
    );
    maps.delete(&state_name, &DeleteParams::default()).await?;
    Ok(())
}

/// A strategy that does not exist holds every change from the first one on: the first
/// revision goes everywhere (nothing to protect), the next is held (`RolloutPending`), the
/// Warning is published once however often the object is looked at, and once the strategy is
/// created the held change rolls out stage by stage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_strategy_holds_every_change_until_it_exists() -> anyhow::Result<()> {
    let (fed, _one) = fed().await?;
    let namespace = unique_ns("rollout-missing");
    let name = unique_name("web");
    let strategy_name = unique_name("late");
    fed.create_federated_namespace(&namespace, &CLUSTERS)
        .await?;
    let hub = fed.hub().await?;
    let resource = federated("Deployment");
    let api = dynamic_api(hub.clone(), &resource, Some(&namespace));
    let mut object = hubfed_e2e::federated_object(
        &resource,
        Some(&namespace),
        &name,
        spec(&name, "app:v1", "10m"),
    );
    object.metadata.annotations = Some(BTreeMap::from([(
        ROLLOUT_STRATEGY_ANNOTATION.to_owned(),
        strategy_name.clone(),
    )]));
    api.create(&PostParams::default(), &object).await?;
    wait_images(fed, &namespace, &name, &everywhere("app:v1"), TIMEOUT).await?;

    change(fed, &namespace, &name, spec(&name, "app:v2", "10m")).await?;
    wait_statuses(fed, &namespace, &name, "every cluster held", |s| {
        s.values()
            .all(|(status, message)| status == "RolloutPending" && message.contains("not found"))
    })
    .await?;
    // Past one recheck (30 s): still held, and said once.
    tokio::time::sleep(Duration::from_secs(35)).await;
    let found = images(fed, &namespace, &name).await?;
    anyhow::ensure!(
        found.values().all(|(image, _)| image == "app:v1"),
        "a change went out without its strategy: {found:?}"
    );
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(hub.clone(), &namespace);
    let warnings: Vec<_> = events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("RolloutStrategyNotFound"))
        .filter(|e| e.involved_object.name.as_deref() == Some(name.as_str()))
        .collect();
    let counts: Vec<_> = warnings
        .iter()
        .map(|e| (e.count, e.series.as_ref().and_then(|s| s.count)))
        .collect();
    anyhow::ensure!(
        warnings.len() == 1 && counts[0].0.unwrap_or(1) <= 1 && counts[0].1.unwrap_or(1) <= 1,
        "RolloutStrategyNotFound said more than once: {counts:?}"
    );

    // The strategy appears: the held change rolls out, the canary first.
    let watches = Watches::start(fed, &namespace, &name).await?;
    let stages = json!({"stages": [{"name": "canary", "clusters": ["member1"]}, {"name": "rest"}]});
    create_rollout_strategy(&hub, &strategy_name, stages).await?;
    wait_images(
        fed,
        &namespace,
        &name,
        &everywhere("app:v2"),
        Duration::from_secs(120),
    )
    .await?;
    let (canary, _) = watches.times("member1", "app:v2");
    for cluster in ["member2", "member3"] {
        let (given, _) = watches.times(cluster, "app:v2");
        anyhow::ensure!(
            canary.is_some() && given.is_some() && given >= canary,
            "{cluster} got app:v2 before the canary: {:?}",
            watches.timeline
        );
    }
    rollout_strategies(&hub)
        .delete(&strategy_name, &DeleteParams::default())
        .await?;
    api.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}

/// The rollout strategy annotated on the FederatedTypeConfig takes effect without a restart
/// (an annotation leaves the FTC's generation as it is): a change of an object without its
/// own annotation is then staged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strategy_on_the_type_takes_effect_at_once() -> anyhow::Result<()> {
    let (fed, _one) = fed().await?;
    let namespace = unique_ns("rollout-ftc");
    let name = unique_name("web");
    let hub = fed.hub().await?;
    let api = create_deployment(fed, &namespace, &name, spec(&name, "app:v1", "10m")).await?;
    wait_images(fed, &namespace, &name, &everywhere("app:v1"), TIMEOUT).await?;
    let ftcs: Api<hubfed_api::federatedtypeconfig::FederatedTypeConfig> =
        Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let annotate = async |strategy: Option<&str>| {
        ftcs.patch(
            "deployments.apps",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {ROLLOUT_STRATEGY_ANNOTATION: strategy}}}),
            ),
        )
        .await
    };
    annotate(Some(STRATEGY)).await?;
    let outcome = async {
        // The state is stored once the type's controller, restarted, looks at the object.
        RolloutState::of(&hub, "FederatedDeployment", Some(&namespace), &name)
            .wait_stored()
            .await?;
        // 100 CPUs: the canary never gets Ready, the others are held.
        change(fed, &namespace, &name, spec(&name, "app:v2", "100")).await?;
        wait_statuses(fed, &namespace, &name, "member2 and member3 held", |s| {
            ["member2", "member3"]
                .iter()
                .all(|c| s[*c].0 == "RolloutPending")
        })
        .await?;
        let found = images(fed, &namespace, &name).await?;
        anyhow::ensure!(
            found["member2"].0 == "app:v1" && found["member3"].0 == "app:v1",
            "{found:?}"
        );
        api.delete(&name, &DeleteParams::default()).await?;
        wait_absent("the federated object gone", &api, &name).await
    }
    .await;
    annotate(None).await?;
    outcome
}

/// A spec over half a MiB: the state's two specs would not fit in its ConfigMap; the stable
/// spec is dropped and the change is rolled out all the same (it was never updated again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_object_still_rolls_out() -> anyhow::Result<()> {
    let (fed, _one) = fed().await?;
    let namespace = unique_ns("rollout-large");
    let name = unique_name("big");
    fed.create_federated_namespace(&namespace, &CLUSTERS)
        .await?;
    let hub = fed.hub().await?;
    let spec = |version: &str| {
        json!({
            "template": {"data": {"version": version, "filler": "x".repeat(600_000)}},
            "placement": {"clusters": CLUSTERS.iter().map(|c| json!({"name": c})).collect::<Vec<_>>()},
        })
    };
    let api = create_federated(&hub, "ConfigMap", Some(&namespace), &name, spec("v1")).await?;
    follow_strategy(&api, &name, STRATEGY).await?;
    let wait_version = async |version: &str| {
        let copy = (Some(namespace.as_str()), name.as_str());
        let version_is = ("/data/version", &json!(version));
        let what = format!("{version} everywhere");
        wait_member_field(
            fed,
            &CLUSTERS,
            &target("ConfigMap"),
            copy,
            version_is,
            &what,
        )
        .await
    };
    wait_version("v1").await?;
    RolloutState::of(&hub, "FederatedConfigMap", Some(&namespace), &name)
        .wait_stored()
        .await?;
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": spec("v2") })),
    )
    .await?;
    wait_version("v2").await?;
    api.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}

/// A stored state that cannot be read holds every change (it was taken for no state: the
/// next revision went everywhere at once), and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_state_holds_every_change() -> anyhow::Result<()> {
    let (fed, _one) = fed().await?;
    let namespace = unique_ns("rollout-unreadable");
    let name = unique_name("web");
    setup(fed, &namespace, &name).await?;
    let hub = fed.hub().await?;
    let (maps, state_name) =
        RolloutState::of(&hub, "FederatedDeployment", Some(&namespace), &name).into_parts();
    wait_present("the object's rollout state", &maps, &state_name).await?;
    maps.patch(
        &state_name,
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"state": "{not json"}})),
    )
    .await?;
    change(fed, &namespace, &name, spec(&name, "app:v2", "10m")).await?;
    wait_event(
        &hub,
        &namespace,
        "RolloutStateUnreadable",
        &[&state_name, "held back"],
    )
    .await?;
    wait_statuses(fed, &namespace, &name, "every cluster held", |s| {
        s.values().all(|(status, message)| {
            status == "RolloutPending" && message.contains("cannot be read")
        })
    })
    .await?;
    let found = images(fed, &namespace, &name).await?;
    anyhow::ensure!(
        found.values().all(|(image, _)| image == "app:v1"),
        "a change went out past an unreadable state: {found:?}"
    );
    let api = dynamic_api(hub.clone(), &federated("Deployment"), Some(&namespace));
    api.delete(&name, &DeleteParams::default()).await?;
    wait_absent("the federated object gone", &api, &name).await?;
    anyhow::ensure!(maps.get_opt(&state_name).await?.is_none(), "state left");
    Ok(())
}
