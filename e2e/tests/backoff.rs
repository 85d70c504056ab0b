//! A member that keeps refusing a write (issue 9): a FederatedJob whose pod template changes
//! is refused by member1 (the field is immutable). hubfed reports `UpdateFailed` once in status
//! and retries with exponential backoff (5 s, 10 s, 20 s, …) — it used to rewrite the Job, with
//! a Warning event, every 5 seconds forever — and counts the object in
//! `hubfed_objects_in_backoff`. A fix of the template ends the backoff at once.
//!
//! Also: a deletion that waits on a member shows in `hubfed_oldest_deletion_wait_seconds`.
//!
//! Its own test binary: it reads the in-process controller's member write counters.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use hubfed_controller::metrics::METRICS;
use hubfed_e2e::{
    Federation, TIMEOUT, Wait, cluster_status, dynamic_api, federated, federated_object, get_value,
    modify, placement, propagated_ok, report, show, unique_ns, wait_for,
};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

fn refused_updates() -> u64 {
    METRICS
        .member_operations_total
        .with_label_values(&["member1", "update", "error"])
        .get()
}

fn in_backoff() -> i64 {
    METRICS
        .objects_in_backoff
        .with_label_values(&["federatedjob"])
        .get()
}

#[tokio::test]
async fn a_refused_update_is_retried_with_backoff() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("backoff");
    fed.create_federated_namespace(&ns, &["member1"]).await?;
    let template = |image: &str| {
        json!({"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": image}],
        }}}})
    };
    let resource = federated("Job");
    let hub_api = dynamic_api(fed.hub().await?, &resource, Some(&ns));
    let spec = json!({"template": template("busybox:1"), "placement": placement(&["member1"])});
    hub_api
        .create(
            &PostParams::default(),
            &federated_object(&resource, Some(&ns), "batch", spec),
        )
        .await?;
    wait_for("the Job propagated", TIMEOUT, async || {
        Ok(match get_value(&hub_api, "batch").await? {
            Some(object) => propagated_ok(&object, &["member1"]),
            None => Wait::Pending("federated Job absent".into()),
        })
    })
    .await?;

    let before = refused_updates();
    modify(&hub_api, "batch", |o| {
        o["spec"]["template"] = template("busybox:2")
    })
    .await?;
    wait_for("UpdateFailed in status", TIMEOUT, async || {
        let object = get_value(&hub_api, "batch")
            .await?
            .context("federated Job")?;
        let entry = cluster_status(&object, "member1");
        Ok(if entry.is_some_and(|e| e["status"] == "UpdateFailed") {
            Wait::Done(())
        } else {
            Wait::Pending(format!("member1 status {}", show(entry)))
        })
    })
    .await?;
    ensure!(
        in_backoff() >= 1,
        "hubfed_objects_in_backoff is {}",
        in_backoff()
    );

    // Without backoff: an attempt every 5 s, 8 in 40 s. With it: at 0, 5, 15 and 35 s.
    tokio::time::sleep(Duration::from_secs(40)).await;
    let attempts = refused_updates() - before;
    report(format_args!(
        "backoff: {attempts} refused updates of one object in 40 s"
    ));
    ensure!(
        (2..=5).contains(&attempts),
        "{attempts} refused updates in 40 s: expected a few attempts with growing delays"
    );

    // Fixing the template ends the backoff at once.
    modify(&hub_api, "batch", |o| {
        o["spec"]["template"] = template("busybox:1")
    })
    .await?;
    wait_for("propagated again, out of backoff", TIMEOUT, async || {
        let object = get_value(&hub_api, "batch")
            .await?
            .context("federated Job")?;
        Ok(match propagated_ok(&object, &["member1"]) {
            Wait::Done(()) if in_backoff() == 0 => Wait::Done(()),
            Wait::Done(()) => Wait::Pending(format!("hubfed_objects_in_backoff {}", in_backoff())),
            pending => pending,
        })
    })
    .await
}

/// A deletion that waits on a Ready member (its copy held there by a finalizer of the
/// member's own) shows in `hubfed_oldest_deletion_wait_seconds` — the gauge of alert
/// `HubfedDeletionsStuck` — and stops counting once it completes.
#[tokio::test]
async fn a_waiting_deletion_shows_in_the_oldest_deletion_gauge() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("held");
    fed.create_federated_namespace(&ns, &["member1"]).await?;
    let name = "held";
    let hub = hubfed_e2e::create_federated(
        &fed.hub().await?,
        "ConfigMap",
        Some(&ns),
        name,
        json!({"template": {"data": {"k": "v"}}, "placement": placement(&["member1"])}),
    )
    .await?;
    wait_for("held propagated", TIMEOUT, async || {
        let object = get_value(&hub, name).await?.context("held is gone")?;
        Ok(propagated_ok(&object, &["member1"]))
    })
    .await?;
    let member1 = dynamic_api(
        fed.client("member1").await?,
        &hubfed_e2e::target("ConfigMap"),
        Some(&ns),
    );
    let hold = json!({"metadata": {"finalizers": ["e2e.hubfed.io/hold"]}});
    member1
        .patch(name, &Default::default(), &kube::api::Patch::Merge(&hold))
        .await?;
    hub.delete(name, &Default::default()).await?;
    let gauge = || {
        METRICS
            .oldest_deletion_wait
            .with_label_values(&["federatedconfigmap"])
            .get()
    };
    let seconds = wait_for("the waiting deletion in the gauge", TIMEOUT, async || {
        Ok(match gauge() {
            0 => Wait::Pending("hubfed_oldest_deletion_wait_seconds 0".to_owned()),
            seconds => Wait::Done(seconds),
        })
    })
    .await?;
    report(format_args!(
        "a deletion held in member1: gauge at {seconds} s"
    ));
    // The wait is explained once, as a Warning event on the federated object.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(fed.hub().await?, &ns);
    wait_for(
        "a DeletionWaiting event naming member1",
        TIMEOUT,
        async || {
            let listed = events
                .list(
                    &kube::api::ListParams::default()
                        .fields(&format!("involvedObject.name={name}")),
                )
                .await?;
            Ok(
                match listed
                    .items
                    .iter()
                    .find(|e| e.reason.as_deref() == Some("DeletionWaiting"))
                {
                    Some(e) if e.message.as_deref().is_some_and(|m| m.contains("member1")) => {
                        Wait::Done(())
                    }
                    other => Wait::Pending(format!("{:?}", other.map(|e| e.message.clone()))),
                },
            )
        },
    )
    .await?;
    let release = json!({"metadata": {"finalizers": null}});
    member1
        .patch(
            name,
            &Default::default(),
            &kube::api::Patch::Merge(&release),
        )
        .await?;
    wait_for("the deletion completed", TIMEOUT, async || {
        Ok(match get_value(&hub, name).await? {
            None => Wait::Done(()),
            Some(o) => Wait::Pending(format!("status {}", show(o.get("status")))),
        })
    })
    .await?;
    wait_for("the gauge back to 0", TIMEOUT, async || {
        Ok(match gauge() {
            0 => Wait::Done(()),
            seconds => Wait::Pending(format!("hubfed_oldest_deletion_wait_seconds {seconds}")),
        })
    })
    .await
}
