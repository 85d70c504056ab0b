//! The hub joined as a member of itself (reference §2.4, "host namespace"): its own
//! namespaces are labelled when federated and only unlabelled, never deleted, when the
//! FederatedNamespace goes.
//!
//! Its own test binary: joining the hub changes the cluster registry that every placement
//! reads. Keep it to this one test, which unjoins the hub at the end.

use anyhow::{Context as _, bail};
use hubfed_api::names::MANAGED_LABEL;
use hubfed_e2e::{
    Federation, TIMEOUT, Wait, dynamic_api, federated, federated_object, get_value, labels,
    member_mismatch, placement, propagated_ok, unique_ns, wait_for,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

#[tokio::test]
async fn hub_as_member_keeps_its_own_namespace() -> anyhow::Result<()> {
    let fed = Federation::shared();
    fed.join("hub", fed.env().hub()).await?;
    let result = federate_a_hub_namespace(fed).await;
    let unjoined = fed.unjoin("hub").await;
    result?;
    unjoined
}

async fn federate_a_hub_namespace(fed: &Federation) -> anyhow::Result<()> {
    let ns = unique_ns("hostns");
    fed.create_hub_namespace(&ns).await?;
    let resource = federated("Namespace");
    let hub_api = dynamic_api(fed.hub().await?, &resource, Some(&ns));
    hub_api
        .create(
            &PostParams::default(),
            &federated_object(
                &resource,
                Some(&ns),
                &ns,
                serde_json::json!({ "placement": placement(&["hub", "member1"]) }),
            ),
        )
        .await
        .context("creating the FederatedNamespace")?;
    let namespaces = [
        ("hub", Api::<Namespace>::all(fed.hub().await?)),
        ("member1", Api::all(fed.client("member1").await?)),
    ];

    wait_for(
        "the namespace managed in the hub and member1, Propagation=True",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            for (cluster, api) in &namespaces {
                let found = api
                    .get_opt(&ns)
                    .await?
                    .map(serde_json::to_value)
                    .transpose()?;
                problems.extend(member_mismatch(cluster, found.as_ref(), &[]));
            }
            let object = get_value(&hub_api, &ns)
                .await?
                .context("the FederatedNamespace disappeared")?;
            if let Wait::Pending(problem) = propagated_ok(&object, &["hub", "member1"]) {
                problems.push(problem);
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;

    hub_api
        .delete(&ns, &DeleteParams::default())
        .await
        .context("deleting the FederatedNamespace")?;
    wait_for(
        "member1's namespace deleted, the hub's kept without the managed label",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            if get_value(&hub_api, &ns).await?.is_some() {
                problems.push("the FederatedNamespace still exists".to_owned());
            }
            let [(_, hub_namespaces), (_, member1_namespaces)] = &namespaces;
            if member1_namespaces.get_opt(&ns).await?.is_some() {
                problems.push("member1: the namespace still exists".to_owned());
            }
            let Some(own) = hub_namespaces.get_opt(&ns).await? else {
                bail!("the hub's own namespace was deleted");
            };
            if own.metadata.deletion_timestamp.is_some() {
                bail!("the hub's own namespace is being deleted");
            }
            let own = serde_json::to_value(own)?;
            if own["metadata"]["labels"].get(MANAGED_LABEL).is_some() {
                problems.push(format!("hub: labels {:?}", labels(&own)));
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;

    // Never placed there.
    let member2: Api<Namespace> = Api::all(fed.client("member2").await?);
    anyhow::ensure!(
        member2.get_opt(&ns).await?.is_none(),
        "member2 holds namespace {ns} although it was never placed there"
    );
    Ok(())
}
