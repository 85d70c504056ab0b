//! A member that keeps refusing a write (issue 9): a FederatedJob whose pod template changes
//! is refused by member1 (the field is immutable). hubfed reports `UpdateFailed` once in status
//! and retries with exponential backoff (5 s, 10 s, 20 s, …) — it used to rewrite the Job, with
//! a Warning event, every 5 seconds forever — and counts the object in
//! `hubfed_objects_in_backoff`. A fix of the template ends the backoff at once.
//!
//! Its own test binary: it reads the in-process controller's member write counters.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use hubfed_controller::metrics::METRICS;
use hubfed_e2e::{
    Federation, TIMEOUT, Wait, cluster_status, dynamic_api, federated, federated_object, get_value,
    modify, placement, propagated_ok, report, show, unique_ns, wait_for,
};
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
