//! A namespaced control plane (KubeFedConfig `scope: Namespaced`): only federated objects in
//! the control plane's own namespace are propagated — to the same namespace in the members,
//! without a FederatedNamespace — and objects anywhere else are left alone.
//!
//! Its own clusters and controller: the scope is fixed when the KubeFedConfig is created.

use std::time::Duration;

use hubfed_api::federatedtypeconfig::ResourceScope;
use hubfed_api::kubefedconfig::KubeFedConfigSpec;
use hubfed_api::names::MANAGED_LABEL;
use hubfed_e2e::controller::ControllerTask;
use hubfed_e2e::{
    KUBEFED_NAMESPACE, MEMBERS, PrivateFederation, TIMEOUT, Wait, create_federated,
    create_hub_namespace, dynamic_api, federated, federated_object, get_value, hubfedctl,
    member_mismatch, placement, propagated_ok, register_cluster, target, wait_clusters_ready,
    wait_for,
};
use hubfed_testenv::TestEnv;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::PostParams;
use kube::{Api, ResourceExt as _};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespaced_control_plane_propagates_only_its_own_namespace() -> anyhow::Result<()> {
    let env = PrivateFederation::new()
        .config(KubeFedConfigSpec::with_defaults(ResourceScope::Namespaced))
        .start()
        .await?;
    let hub = env.hub().client().await?;

    // Objects outside the control plane's namespace come first: a controller that ignored
    // the scope would have propagated them by the time the inside object converges.
    let outside = "scope-outside";
    create_hub_namespace(&hub, outside).await?;
    let spec = json!({"placement": placement(&MEMBERS)});
    create_federated(&hub, "Namespace", Some(outside), outside, spec).await?;
    let spec =
        json!({"template": {"data": {"where": "outside"}}, "placement": placement(&MEMBERS)});
    let outside_cms = create_federated(&hub, "ConfigMap", Some(outside), "elsewhere", spec).await?;

    let controller = ControllerTask::spawn("the controller", hub.clone(), Default::default());
    wait_clusters_ready(&hub, &MEMBERS).await?;

    let spec = json!({"template": {"data": {"where": "inside"}}, "placement": placement(&MEMBERS)});
    let inside_cms =
        create_federated(&hub, "ConfigMap", Some(KUBEFED_NAMESPACE), "settings", spec).await?;
    let inside = json!("inside");
    wait_for(
        "the control plane's own namespace propagated",
        TIMEOUT,
        async || {
            let mut pending = Vec::new();
            for name in MEMBERS {
                let member = env.cluster(name).expect("member").client().await?;
                let cms = dynamic_api(member, &target("ConfigMap"), Some(KUBEFED_NAMESPACE));
                pending.extend(member_mismatch(
                    name,
                    get_value(&cms, "settings").await?.as_ref(),
                    &[("/data/where", Some(&inside))],
                ));
            }
            let object = get_value(&inside_cms, "settings")
                .await?
                .ok_or_else(|| anyhow::anyhow!("the FederatedConfigMap disappeared"))?;
            if let Wait::Pending(problem) = propagated_ok(&object, &MEMBERS) {
                pending.push(problem);
            }
            Ok(Wait::all_or_pending(pending))
        },
    )
    .await?;

    // A moment more for anything outside to show up, then: nothing there, nothing written.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for name in MEMBERS {
        let member = env.cluster(name).expect("member").client().await?;
        let namespace = Api::<Namespace>::all(member.clone())
            .get_opt(outside)
            .await?;
        anyhow::ensure!(
            namespace.is_none(),
            "{name}: namespace {outside} was propagated by a namespaced control plane"
        );
        let cms = dynamic_api(member, &target("ConfigMap"), Some(outside));
        anyhow::ensure!(
            get_value(&cms, "elsewhere").await?.is_none(),
            "{name}: {outside}/elsewhere was propagated by a namespaced control plane"
        );
    }
    let elsewhere = get_value(&outside_cms, "elsewhere")
        .await?
        .ok_or_else(|| anyhow::anyhow!("{outside}/elsewhere disappeared"))?;
    anyhow::ensure!(
        elsewhere.get("status").is_none()
            && elsewhere["metadata"]["finalizers"].as_array().is_none(),
        "a namespaced control plane touched {outside}/elsewhere: {elsewhere}"
    );

    join_credentials_are_protected(&env, &hub).await?;
    hub_as_member_is_protected(&env, &hub).await?;
    unjoin_keeps_the_namespace(&env).await?;

    controller.stop().await??;
    Ok(())
}

/// Issue 9 (9): the namespaced control plane propagates from its own namespace, where each
/// member keeps the join's credentials (`<cluster>-<hub>`, by `hubfedctl join`): a
/// FederatedSecret of that name never overwrites them.
async fn join_credentials_are_protected(env: &TestEnv, hub: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Secret;
    let name = "member1-hub";
    let member1: Api<Secret> = Api::namespaced(
        env.cluster("member1").expect("member").client().await?,
        KUBEFED_NAMESPACE,
    );
    let credentials: Secret = serde_json::from_value(
        json!({"metadata": {"name": name}, "stringData": {"token": "the join's token"}}),
    )?;
    member1.create(&PostParams::default(), &credentials).await?;
    let secrets = dynamic_api(hub.clone(), &federated("Secret"), Some(KUBEFED_NAMESPACE));
    let spec = json!({"template": {"stringData": {"token": "overwritten"}}, "placement": placement(&MEMBERS)});
    secrets
        .create(
            &PostParams::default(),
            &federated_object(&federated("Secret"), Some(KUBEFED_NAMESPACE), name, spec),
        )
        .await?;
    wait_for(
        "member1 Protected, member2 propagated",
        TIMEOUT,
        async || {
            let object = get_value(&secrets, name).await?;
            let status = |cluster: &str| {
                object
                    .as_ref()
                    .and_then(|o| hubfed_e2e::cluster_status(o, cluster))
                    .map(|e| e["status"].clone())
            };
            Ok(match (status("member1"), status("member2")) {
                (Some(p), Some(ok)) if p == "Protected" && ok.is_null() => Wait::Done(()),
                other => Wait::Pending(format!("status member1, member2: {other:?}")),
            })
        },
    )
    .await?;
    let kept = member1.get(name).await?;
    let token = kept.data.and_then(|d| d.get("token").cloned());
    anyhow::ensure!(
        token.as_ref().map(|t| t.0.as_slice()) == Some(b"the join's token".as_slice()),
        "member1's credentials were overwritten: {token:?}"
    );
    Ok(())
}

/// Issue 9 (9): with the hub joined as a member, a federated object in the control plane's
/// namespace placed on the hub would write over (and, deleted, delete) the hub's own object
/// of that name — the very namespace the control plane lives in. Nothing is written or
/// deleted there: `Protected`; other clusters propagate as usual.
async fn hub_as_member_is_protected(env: &TestEnv, hub: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ConfigMap;
    register_cluster(hub, "hub-self", env.hub()).await?;
    wait_clusters_ready(hub, &["hub-self"]).await?;
    let name = "precious";
    let own: Api<ConfigMap> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    own.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}, "data": {"mine": "yes"}}))?,
    )
    .await?;
    let federated_cms = dynamic_api(
        hub.clone(),
        &federated("ConfigMap"),
        Some(KUBEFED_NAMESPACE),
    );
    let spec = json!({"template": {"data": {"mine": "no"}}, "placement": placement(&["hub-self", "member1"])});
    federated_cms
        .create(
            &PostParams::default(),
            &federated_object(&federated("ConfigMap"), Some(KUBEFED_NAMESPACE), name, spec),
        )
        .await?;
    wait_for(
        "hub-self Protected, member1 propagated",
        TIMEOUT,
        async || {
            let object = get_value(&federated_cms, name).await?;
            let status = |cluster: &str| {
                object
                    .as_ref()
                    .and_then(|o| hubfed_e2e::cluster_status(o, cluster))
                    .map(|e| e["status"].clone())
            };
            Ok(match (status("hub-self"), status("member1")) {
                (Some(p), Some(ok)) if p == "Protected" && ok.is_null() => Wait::Done(()),
                other => Wait::Pending(format!("status hub-self, member1: {other:?}")),
            })
        },
    )
    .await?;
    federated_cms.delete(name, &Default::default()).await?;
    wait_for("the FederatedConfigMap deleted", TIMEOUT, async || {
        Ok(match get_value(&federated_cms, name).await? {
            None => Wait::Done(()),
            Some(o) => Wait::Pending(format!("finalizers {}", o["metadata"]["finalizers"])),
        })
    })
    .await?;
    let kept = own.get_opt(name).await?;
    let data = kept.as_ref().and_then(|c| c.data.clone());
    anyhow::ensure!(
        data.as_ref()
            .and_then(|d| d.get("mine"))
            .map(String::as_str)
            == Some("yes")
            && kept.is_some_and(|c| !c.labels().contains_key(MANAGED_LABEL)),
        "the hub's own {KUBEFED_NAMESPACE}/{name} was written or deleted: {data:?}"
    );
    Api::<hubfed_api::kubefedcluster::KubeFedCluster>::namespaced(hub.clone(), KUBEFED_NAMESPACE)
        .delete("hub-self", &Default::default())
        .await?;
    Ok(())
}

/// Issue 9 (7): unjoin used to delete the member's control-plane namespace, which in a
/// namespaced control plane holds every propagated object: it is kept.
async fn unjoin_keeps_the_namespace(env: &TestEnv) -> anyhow::Result<()> {
    let (code, stdout, stderr) = hubfedctl(env.kubeconfig_path(), &["unjoin", "member2"]).await;
    anyhow::ensure!(code == 0, "unjoin failed: {stdout}{stderr}");
    anyhow::ensure!(
        format!("{stdout}{stderr}").contains(
            "namespace kube-federation-system in member2 holds what it propagated and is kept"
        ),
        "{stdout}{stderr}"
    );
    let member2 = env.cluster("member2").expect("member").client().await?;
    let cms = dynamic_api(
        member2.clone(),
        &target("ConfigMap"),
        Some(KUBEFED_NAMESPACE),
    );
    let namespace = Api::<Namespace>::all(member2)
        .get_opt(KUBEFED_NAMESPACE)
        .await?;
    anyhow::ensure!(
        namespace.is_some_and(|n| n.metadata.deletion_timestamp.is_none()),
        "unjoin deleted member2's {KUBEFED_NAMESPACE}"
    );
    anyhow::ensure!(
        get_value(&cms, "settings").await?.is_some(),
        "the propagated ConfigMap is gone from member2"
    );
    Ok(())
}
