//! A federation at rest makes no member writes, and creating member objects needs no reads
//! (its own binary: the controller's counters must not see other tests' work).

use std::time::Duration;

use hubfed_controller::metrics::METRICS;
use hubfed_e2e::{
    Federation, MEMBERS, TIMEOUT, Wait, get_value, placement, propagated_ok, unique_ns,
    wait_federated_ok, wait_for,
};
use kube::api::PostParams;
use serde_json::json;

fn member_operations(operations: &[&str]) -> u64 {
    let mut total = 0;
    for cluster in MEMBERS {
        for operation in operations {
            for result in ["success", "error"] {
                total += METRICS
                    .member_operations_total
                    .with_label_values(&[cluster, operation, result])
                    .get();
            }
        }
    }
    total
}

fn member_writes() -> u64 {
    member_operations(&["create", "update", "delete", "remove_label"])
}

#[tokio::test]
async fn a_converged_federation_makes_no_member_writes() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("quiet");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let resource = hubfed_e2e::federated("ConfigMap");
    let api = hubfed_e2e::dynamic_api(fed.hub().await?, &resource, Some(&ns));
    // A first object propagated warms the member caches up: before their first list
    // completes, whether an unmanaged object is in the way is unknown, and a create rightly
    // reads the member first. The claim is about creates with the caches loaded.
    let create = |name: String, i: usize| {
        let api = api.clone();
        let ns = ns.clone();
        let resource = resource.clone();
        async move {
            api.create(
                &PostParams::default(),
                &hubfed_e2e::federated_object(
                    &resource,
                    Some(&ns),
                    &name,
                    json!({"template": {"data": {"i": i.to_string()}}, "placement": placement(&MEMBERS)}),
                ),
            )
            .await
        }
    };
    create("warm-up".to_owned(), 0).await?;
    wait_federated_ok("the warm-up object propagated", &api, "warm-up", &MEMBERS).await?;
    let gets_before = member_operations(&["get"]);
    let creates_before = member_operations(&["create"]);
    for i in 0..5 {
        create(format!("quiet-{i}"), i).await?;
    }
    wait_for("all five propagated", TIMEOUT, async || {
        let mut pending = Vec::new();
        for i in 0..5 {
            match get_value(&api, &format!("quiet-{i}")).await? {
                Some(object) => {
                    if let Wait::Pending(p) = propagated_ok(&object, &MEMBERS) {
                        pending.push(format!("quiet-{i}: {p}"));
                    }
                }
                None => pending.push(format!("quiet-{i} absent")),
            }
        }
        Ok(Wait::all_or_pending(pending))
    })
    .await?;
    assert!(member_writes() > 0, "the propagation itself was counted");
    // No unmanaged object stood in the way: the cache of unmanaged names said so, and no
    // member GET preceded the creates.
    assert_eq!(
        member_operations(&["get"]) - gets_before,
        0,
        "member GETs for {} creates",
        member_operations(&["create"]) - creates_before
    );

    // Settle (status writes, member watch echoes of our own writes), then watch the counters.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = member_writes();
    tokio::time::sleep(Duration::from_secs(15)).await;
    let after = member_writes();
    assert_eq!(after, before, "member writes while nothing changed");
    Ok(())
}
