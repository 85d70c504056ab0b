//! A staged rollout whose canary answers the apply of the new revision with a server error
//! (500) does not halt: only an apply the member refuses halts (docs/user-guide.md "Rollouts");
//! the apply is retried, and once the member answers again the revision goes on, stage by
//! stage, to every cluster.
//!
//! Its own test binary: member2 is re-joined through a proxy that injects the errors.

use hubfed_e2e::fault_proxy::{Fault, FaultProxy, FaultResponse};
use hubfed_e2e::{
    Federation, KUBEFED_NAMESPACE, MEMBERS, TIMEOUT, Wait, cluster_status, create_federated,
    placement, target, unique_name, unique_ns, wait_for,
};
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_error_on_the_canary_does_not_halt_the_rollout() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let hub = fed.hub().await?;
    let member2 = fed.cluster("member2")?;
    let proxy = FaultProxy::start(&member2.server_url(), member2.ca_pem(), None).await?;
    fed.unjoin("member2").await?;
    fed.join_via("member2", member2, &proxy.url(), proxy.ca_pem())
        .await?;

    let strategy_name = unique_name("canary-member2");
    let strategies: Api<DynamicObject> = Api::namespaced_with(
        hub.clone(),
        KUBEFED_NAMESPACE,
        &ApiResource {
            group: "scheduling.hubfed.io".into(),
            version: "v1alpha1".into(),
            api_version: "scheduling.hubfed.io/v1alpha1".into(),
            kind: "RolloutStrategy".into(),
            plural: "rolloutstrategies".into(),
        },
    );
    let strategy: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "scheduling.hubfed.io/v1alpha1",
        "kind": "RolloutStrategy",
        "metadata": {"name": strategy_name, "namespace": KUBEFED_NAMESPACE},
        "spec": {
            "stages": [{"name": "canary", "clusters": ["member2"]}, {"name": "rest"}],
            "soakSeconds": 1,
        },
    }))?;
    strategies.create(&PostParams::default(), &strategy).await?;

    let namespace = unique_ns("rollout-faults");
    let name = unique_name("settings");
    fed.create_federated_namespace(&namespace, &MEMBERS).await?;
    let spec = |version: &str| json!({"template": {"data": {"version": version}}, "placement": placement(&MEMBERS)});
    let api = create_federated(&hub, "ConfigMap", Some(&namespace), &name, spec("v1")).await?;
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"hubfed.io/rollout-strategy": strategy_name}}}),
        ),
    )
    .await?;
    let wait_version = async |version: &str| {
        wait_for(&format!("{version} everywhere"), TIMEOUT, async || {
            let mut pending = Vec::new();
            for cluster in MEMBERS {
                let map = fed
                    .member_object(cluster, &target("ConfigMap"), Some(&namespace), &name)
                    .await?;
                let found = map.map(|m| m["data"]["version"].clone());
                if found != Some(json!(version)) {
                    pending.push(format!("{cluster}: {found:?}"));
                }
            }
            Ok(Wait::all_or_pending(pending))
        })
        .await
    };
    wait_version("v1").await?;
    let state_name =
        hubfed_core::rollout::state_name("FederatedConfigMap", Some(&namespace), &name);
    let maps: Api<ConfigMap> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    wait_for("the object's rollout state", TIMEOUT, async || {
        Ok(match maps.get_opt(&state_name).await? {
            Some(_) => Wait::Done(()),
            None => Wait::Pending("no state yet".into()),
        })
    })
    .await?;

    // The canary answers every apply of the copy with 500 for a while (503s the client retries itself).
    proxy.set_faults(vec![Fault {
        path: format!("/api/v1/namespaces/{namespace}/configmaps/{name}"),
        method: Some(http::Method::PATCH),
        response: FaultResponse::Status(500),
    }]);
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": spec("v2") })),
    )
    .await?;
    // The reconcile's apply (the client's own retries included) fails: member2 UpdateFailed;
    // the rollout's state is saved before the status.
    wait_for("member2 UpdateFailed", TIMEOUT, async || {
        let object = api.get(&name).await?;
        let status = cluster_status(&object.data, "member2").cloned();
        Ok(match status {
            Some(entry) if entry["status"] == "UpdateFailed" => Wait::Done(()),
            other => Wait::Pending(format!("{other:?} ({} faults)", proxy.fault_hits())),
        })
    })
    .await?;
    let state = maps
        .get(&state_name)
        .await?
        .data
        .unwrap_or_default()
        .get("state")
        .cloned()
        .unwrap_or_default();
    anyhow::ensure!(
        !state.contains("\"Halted\""),
        "a server error halted the rollout: {state}"
    );
    proxy.set_faults(Vec::new());
    wait_version("v2").await?;
    let events: Api<Event> = Api::namespaced(hub.clone(), &namespace);
    let halts: Vec<_> = events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("RolloutHalted"))
        .filter_map(|e| e.message)
        .collect();
    anyhow::ensure!(halts.is_empty(), "halted: {halts:?}");
    Ok(())
}
