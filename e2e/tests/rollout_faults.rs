//! A staged rollout whose canary answers the apply of the new revision with a server error
//! (500) does not halt: only an apply the member refuses halts (docs/user-guide.md "Rollouts");
//! the apply is retried, and once the member answers again the revision goes on, stage by
//! stage, to every cluster.
//!
//! Its own test binary: member2 is re-joined through a proxy that injects the errors.

use hubfed_e2e::fault_proxy::{Fault, FaultProxy, FaultResponse};
use hubfed_e2e::rollout::{RolloutState, create_rollout_strategy, follow_strategy};
use hubfed_e2e::{
    Federation, MEMBERS, TIMEOUT, Wait, cluster_status, create_federated, placement, target,
    unique_name, unique_ns, wait_for, wait_member_field,
};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, Patch, PatchParams};
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
    let stages = json!({
        "stages": [{"name": "canary", "clusters": ["member2"]}, {"name": "rest"}],
        "soakSeconds": 1,
    });
    create_rollout_strategy(&hub, &strategy_name, stages).await?;

    let namespace = unique_ns("rollout-faults");
    let name = unique_name("settings");
    fed.create_federated_namespace(&namespace, &MEMBERS).await?;
    let spec = |version: &str| json!({"template": {"data": {"version": version}}, "placement": placement(&MEMBERS)});
    let api = create_federated(&hub, "ConfigMap", Some(&namespace), &name, spec("v1")).await?;
    follow_strategy(&api, &name, &strategy_name).await?;
    let wait_version = async |version: &str| {
        let copy = (Some(namespace.as_str()), name.as_str());
        let version_is = ("/data/version", &json!(version));
        let what = format!("{version} everywhere");
        wait_member_field(fed, &MEMBERS, &target("ConfigMap"), copy, version_is, &what).await
    };
    wait_version("v1").await?;
    let state = RolloutState::of(&hub, "FederatedConfigMap", Some(&namespace), &name);
    state.wait_stored().await?;

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
    let state = state.text().await?;
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
