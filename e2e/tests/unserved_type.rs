//! A federated type whose CRD exists in the hub and member1 but not in member2 (issue 9):
//! objects placed on member1 only propagate, report no problem for member2 and are deleted
//! without waiting for it; an object placed on member2 too says in its status that member2
//! does not serve the type, and its deletion does not wait for member2 either.
//!
//! Its own test binary: the type is enabled for the whole federation.

use anyhow::Context as _;
use hubfed_e2e::{
    ExampleType, Federation, MEMBERS, TIMEOUT, Wait, cluster_status, dynamic_api, federated,
    federated_object, get_value, member_mismatch, placement, propagated_ok, show, unique_ns,
    wait_for,
};
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn a_type_missing_in_one_member_holds_up_only_what_is_placed_there() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let gadget = ExampleType::new("Gadget", "gadgets")?;
    // Not in member2.
    gadget.enable(fed, &["hub", "member1"]).await?;
    let hub = fed.hub().await?;

    let ns = unique_ns("gadgets");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let federated_gadget = federated("Gadget");
    let hub_api = dynamic_api(hub.clone(), &federated_gadget, Some(&ns));
    for (name, clusters) in [("here", &["member1"][..]), ("there", &MEMBERS[..])] {
        let spec = json!({
            "template": { "spec": { "size": 3 } },
            "placement": placement(clusters),
        });
        hub_api
            .create(
                &PostParams::default(),
                &federated_object(&federated_gadget, Some(&ns), name, spec),
            )
            .await
            .with_context(|| format!("creating FederatedGadget {name}"))?;
    }
    let member1 = dynamic_api(
        fed.client("member1").await?,
        &gadget.target.to_dynamic(),
        Some(&ns),
    );

    wait_for(
        "`here` propagated with no word of member2; `there` saying member2 does not serve Gadget",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            for name in ["here", "there"] {
                let copy = get_value(&member1, name).await?;
                problems.extend(member_mismatch(name, copy.as_ref(), &[]));
            }
            let here = get_value(&hub_api, "here")
                .await?
                .context("`here` is gone")?;
            if let Wait::Pending(problem) = propagated_ok(&here, &["member1"]) {
                problems.push(format!("here: {problem}"));
            }
            if let Some(entry) = cluster_status(&here, "member2") {
                problems.push(format!("here: member2 in status: {entry}"));
            }
            let there = get_value(&hub_api, "there")
                .await?
                .context("`there` is gone")?;
            let member2 = cluster_status(&there, "member2");
            let says_unserved = member2.is_some_and(|e| {
                e["status"] == "CachedRetrievalFailed"
                    && e["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("does not serve Gadget"))
            });
            if !says_unserved {
                problems.push(format!("there: member2 status {}", show(member2)));
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;

    for name in ["here", "there"] {
        hub_api.delete(name, &DeleteParams::default()).await?;
    }
    wait_for("both deleted, member1's copies gone", TIMEOUT, async || {
        let mut problems = Vec::new();
        for name in ["here", "there"] {
            if let Some(left) = get_value(&hub_api, name).await? {
                problems.push(format!(
                    "{name} still on the hub: finalizers {}, status {}",
                    left["metadata"]["finalizers"], left["status"]["clusters"]
                ));
            }
            if get_value(&member1, name).await?.is_some() {
                problems.push(format!("member1 still holds {name}"));
            }
        }
        Ok(Wait::all_or_pending(problems))
    })
    .await
}
