//! A managed member object whose federated object does not exist is handled on the member's
//! watch event, not at the next garbage-collection pass: without proof of ownership it loses
//! its managed label and is kept (KubeFed's e2e spec "should have the managed label removed
//! if not managed" waits 30 s for it); with this control plane's proof it is deleted, as
//! garbage collection deletes a copy whose federated object is gone, or only unlabelled when
//! its deletion record asks to orphan. A copy whose federated object exists is left alone, and
//! nothing is written at rest.
//!
//! Its own test binary: it counts the controller's member writes, which other tests' work
//! would move. Keep it to this one test.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use hubfed_api::names::{LEFTOVERS_CONFIGMAP_PREFIX, MANAGED_LABEL, OWNER_ANNOTATION};
use hubfed_controller::metrics::METRICS;
use hubfed_e2e::{
    Federation, KUBEFED_NAMESPACE, MEMBERS, Wait, get_value, placement, report, unique_ns,
    wait_federated_ok, wait_for,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// How long a managed member object without federated object may take to be handled: well
/// under `hubfed_controller::sync::gc::GC_PERIOD` (300 s), so that only the watch event, not a
/// periodic pass, can have done it in time. This binary's controller made its first pass at
/// its start, seconds before, and makes the next one a GC period later.
const PROMPTLY: Duration = Duration::from_secs(60);

/// Member writes the controller made: requests through its member writer, and garbage
/// collection's deletions and label removals.
fn member_writes() -> u64 {
    let mut total = 0;
    for cluster in MEMBERS {
        for operation in hubfed_e2e::controller::MEMBER_WRITES {
            for result in ["success", "error"] {
                total += METRICS
                    .member_operations_total
                    .with_label_values(&[cluster, operation, result])
                    .get();
            }
        }
        for action in ["delete", "unlabel"] {
            total += gc_collected(cluster, action);
        }
    }
    total
}

fn gc_collected(cluster: &str, action: &str) -> u64 {
    METRICS
        .gc_collected_total
        .with_label_values(&["federatedconfigmap", cluster, action])
        .get()
}

/// Creates ConfigMap `name` in `api`, labelled managed, with `annotations`.
async fn create_labelled(
    api: &Api<ConfigMap>,
    name: &str,
    annotations: Value,
) -> anyhow::Result<ConfigMap> {
    let object = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": { MANAGED_LABEL: "true" },
            "annotations": annotations,
        },
        "data": { "k": "v" },
    }))?;
    api.create(&PostParams::default(), &object)
        .await
        .with_context(|| format!("creating ConfigMap {name}"))
}

fn resource_version(object: &ConfigMap) -> Option<&str> {
    object.metadata.resource_version.as_deref()
}

#[tokio::test]
async fn managed_objects_without_federated_object_are_handled_on_their_watch_event()
-> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("unmanaged-label");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let hub = fed.hub().await?;
    let member1: Api<ConfigMap> = Api::namespaced(fed.client(MEMBERS[0]).await?, &ns);

    // A copy whose federated object exists and places it.
    let placed = "placed";
    let hub_api = fed
        .create_federated(
            "ConfigMap",
            Some(&ns),
            placed,
            json!({ "template": { "data": { "k": "v" } }, "placement": placement(&MEMBERS) }),
        )
        .await?;
    wait_federated_ok(
        "the placed ConfigMap propagated",
        &hub_api,
        placed,
        &MEMBERS,
    )
    .await?;
    let placed_before = member1.get(placed).await?;

    // Without proof of ownership: unlabelled, kept.
    let by_hand = "labelled-by-hand";
    let created = create_labelled(&member1, by_hand, json!({})).await?;
    let began = Instant::now();
    wait_for(
        "the hand-labelled ConfigMap unlabelled and kept",
        PROMPTLY,
        async || {
            let Some(live) = member1.get_opt(by_hand).await? else {
                bail!("the hand-labelled ConfigMap was deleted");
            };
            ensure!(
                live.metadata.uid == created.metadata.uid,
                "the hand-labelled ConfigMap was replaced"
            );
            let labels = live.metadata.labels.unwrap_or_default();
            Ok(match labels.get(MANAGED_LABEL) {
                None => Wait::Done(()),
                Some(value) => Wait::Pending(format!("{MANAGED_LABEL}={value}")),
            })
        },
    )
    .await?;
    report(format_args!(
        "unmanaged_label: managed label removed {:.1} s after the ConfigMap was created",
        began.elapsed().as_secs_f64()
    ));
    ensure!(
        gc_collected(MEMBERS[0], "unlabel") == 1,
        "unlabels counted: {}",
        gc_collected(MEMBERS[0], "unlabel")
    );

    // Another control plane's proof: never touched.
    let foreign = "owned-elsewhere";
    let foreign_created = create_labelled(
        &member1,
        foreign,
        json!({ OWNER_ANNOTATION: "another-control-plane/0c1d2e3f" }),
    )
    .await?;

    // This control plane's proof (the UID of its namespace in the hub), no federated object:
    // deleted, as garbage collection deletes a copy whose federated object is gone.
    let plane = Api::<Namespace>::all(hub.clone())
        .get(KUBEFED_NAMESPACE)
        .await?
        .metadata
        .uid
        .context("the control plane's namespace has no UID")?;
    let owned = "owned-leftover";
    let owner = format!("{plane}/5e6f7a8b-no-such-federated-object");
    create_labelled(&member1, owned, json!({ OWNER_ANNOTATION: owner })).await?;
    let began = Instant::now();
    wait_for(
        "the ConfigMap with this control plane's proof deleted",
        PROMPTLY,
        async || {
            Ok(match member1.get_opt(owned).await? {
                None => Wait::Done(()),
                Some(_) => Wait::Pending("it still exists".into()),
            })
        },
    )
    .await?;
    report(format_args!(
        "unmanaged_label: the copy with this control plane's proof deleted {:.1} s after it was created",
        began.elapsed().as_secs_f64()
    ));
    ensure!(
        gc_collected(MEMBERS[0], "delete") == 1,
        "deletions counted: {}",
        gc_collected(MEMBERS[0], "delete")
    );

    // With this control plane's proof and a deletion record that asks to orphan: unlabelled,
    // kept, and the record forgotten.
    let orphaned = "owned-orphaned";
    let orphaned_uid = "9a0b1c2d-orphaning-deletion";
    let records: Api<ConfigMap> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let record = format!("{LEFTOVERS_CONFIGMAP_PREFIX}federatedconfigmap");
    let record_key = format!("{}.{orphaned_uid}", MEMBERS[0]);
    let leftover = json!({ "namespace": ns, "name": orphaned, "orphan": true }).to_string();
    records
        .patch(
            &record,
            &PatchParams::apply("hubfed-e2e"),
            &Patch::Apply(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": { "name": record },
                "data": { &record_key: leftover },
            })),
        )
        .await
        .context("recording an orphaning deletion")?;
    let owner = format!("{plane}/{orphaned_uid}");
    let created = create_labelled(&member1, orphaned, json!({ OWNER_ANNOTATION: owner })).await?;
    wait_for(
        "the orphaned copy unlabelled and kept, its record forgotten",
        PROMPTLY,
        async || {
            let Some(live) = member1.get_opt(orphaned).await? else {
                bail!("the orphaned copy was deleted");
            };
            ensure!(
                live.metadata.uid == created.metadata.uid,
                "the orphaned copy was replaced"
            );
            let mut problems = Vec::new();
            if let Some(value) = live.metadata.labels.unwrap_or_default().get(MANAGED_LABEL) {
                problems.push(format!("{MANAGED_LABEL}={value}"));
            }
            let data = records.get(&record).await?.data.unwrap_or_default();
            if data.contains_key(&record_key) {
                problems.push(format!("the record still holds {record_key}"));
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;
    ensure!(
        gc_collected(MEMBERS[0], "unlabel") == 2,
        "unlabels counted: {}",
        gc_collected(MEMBERS[0], "unlabel")
    );

    // At rest: no member write, the placed copy and the foreign one as they were.
    let writes = member_writes();
    tokio::time::sleep(Duration::from_secs(5)).await;
    ensure!(
        member_writes() == writes,
        "member writes at rest: {} then {}",
        writes,
        member_writes()
    );
    let placed_after = member1.get(placed).await?;
    ensure!(
        resource_version(&placed_after) == resource_version(&placed_before),
        "the placed copy changed: resourceVersion {:?} then {:?}",
        resource_version(&placed_before),
        resource_version(&placed_after)
    );
    let foreign_after = member1.get(foreign).await?;
    ensure!(
        resource_version(&foreign_after) == resource_version(&foreign_created),
        "the copy owned elsewhere changed: {:?}",
        foreign_after.metadata
    );
    ensure!(
        get_value(&hub_api, placed).await?.is_some(),
        "the placed federated ConfigMap is gone"
    );
    Ok(())
}
