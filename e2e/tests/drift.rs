//! Drift (issue 10): changes made to member copies behind hubfed's back are seen, reported and,
//! by field manager, reverted or kept.
//!
//! - a `kubectl edit` of a templated field and a key added by hand are reverted, and reported
//!   (`status.clusters[].lastDrift`, a `Drifted` event);
//! - a change of `spec.replicas` by a controller's field manager (as an HPA makes) is kept, and
//!   not reported;
//! - an object annotated `hubfed.io/drift: report` keeps people's changes and reports them.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use hubfed_e2e::{
    Federation, MEMBERS, TIMEOUT, Wait, cluster_status, create_federated, dynamic_api, get_value,
    modify_as, placement, target, unique_ns, wait_event, wait_for, wait_propagated,
};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

/// `Done` with the cluster's `lastDrift` once it has `action`.
fn last_drift(object: &Value, cluster: &str, action: &str) -> Wait<Value> {
    match cluster_status(object, cluster).map(|c| &c["lastDrift"]) {
        Some(drift) if drift["action"] == action => Wait::Done(drift.clone()),
        other => Wait::Pending(format!("{cluster} lastDrift {other:?}")),
    }
}

#[tokio::test]
async fn people_are_reverted_controllers_kept_and_drift_reported() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let hub = fed.hub().await?;
    let ns = unique_ns("drift");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let member1 = fed.client("member1").await?;

    // 1. A person edits a templated key and adds one: both taken back, and reported.
    let configmaps = create_federated(
        &hub,
        "ConfigMap",
        Some(&ns),
        "settings",
        json!({"template": {"data": {"k": "v"}}, "placement": placement(&MEMBERS)}),
    )
    .await?;
    wait_propagated(
        "settings propagated",
        &configmaps,
        "settings",
        &MEMBERS,
        &[],
    )
    .await?;
    let copies = dynamic_api(member1.clone(), &target("ConfigMap"), Some(&ns));
    modify_as(&copies, "settings", "kubectl-edit", |o| {
        o["data"]["k"] = json!("hijacked");
        o["data"]["added"] = json!("by hand");
    })
    .await?;
    wait_for(
        "member1's ConfigMap back to its template, the added key gone",
        TIMEOUT,
        async || {
            let copy = get_value(&copies, "settings").await?.context("gone")?;
            Ok(if copy["data"] == json!({"k": "v"}) {
                Wait::Done(())
            } else {
                Wait::Pending(format!("data {}", copy["data"]))
            })
        },
    )
    .await?;
    let drift = wait_for("lastDrift Reverted for member1", TIMEOUT, async || {
        let object = get_value(&configmaps, "settings").await?.context("gone")?;
        Ok(last_drift(&object, "member1", "Reverted"))
    })
    .await?;
    ensure!(
        drift["managers"] == json!(["kubectl-edit"]),
        "managers {}",
        drift["managers"]
    );
    for field in [".data.k", ".data.added"] {
        ensure!(
            drift["fields"]
                .as_array()
                .is_some_and(|f| f.contains(&json!(field))),
            "{field} not among {}",
            drift["fields"]
        );
    }
    wait_event(&hub, &ns, "Drifted", &["member1", "kubectl-edit"]).await?;

    // 2. A controller scales a Deployment: kept, not reported.
    let deployments = create_federated(
        &hub,
        "Deployment",
        Some(&ns),
        "web",
        json!({
            "template": {"spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx:1"}]},
                },
            }},
            "placement": placement(&["member1"]),
        }),
    )
    .await?;
    wait_propagated("web propagated", &deployments, "web", &["member1"], &[]).await?;
    let member_deployments = dynamic_api(member1.clone(), &target("Deployment"), Some(&ns));
    member_deployments
        .patch(
            "web",
            &PatchParams {
                field_manager: Some("horizontal-pod-autoscaler".to_owned()),
                ..Default::default()
            },
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .context("scaling member1's Deployment as a controller")?;
    // hubfed looks at the change at once (it is event-driven): give it time to (not) act.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let copy = get_value(&member_deployments, "web")
            .await?
            .context("gone")?;
        ensure!(
            copy["spec"]["replicas"] == 5,
            "the controller's replicas were reverted: {}",
            copy["spec"]["replicas"]
        );
    }
    let object = get_value(&deployments, "web").await?.context("gone")?;
    ensure!(
        cluster_status(&object, "member1").is_some_and(|c| c.get("lastDrift").is_none()),
        "a controller's change reported as drift: {:?}",
        cluster_status(&object, "member1")
    );

    // 3. `hubfed.io/drift: report`: a person's change is left in place and reported.
    let watched = create_federated(
        &hub,
        "ConfigMap",
        Some(&ns),
        "watched",
        json!({"template": {"data": {"k": "v"}}, "placement": placement(&["member1"])}),
    )
    .await?;
    watched
        .patch(
            "watched",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"hubfed.io/drift": "report"}}})),
        )
        .await?;
    wait_propagated("watched propagated", &watched, "watched", &["member1"], &[]).await?;
    modify_as(&copies, "watched", "kubectl-edit", |o| {
        o["data"]["k"] = json!("mine");
    })
    .await?;
    wait_for("lastDrift Reported for member1", TIMEOUT, async || {
        let object = get_value(&watched, "watched").await?.context("gone")?;
        Ok(last_drift(&object, "member1", "Reported"))
    })
    .await?;
    let copy = get_value(&copies, "watched").await?.context("gone")?;
    ensure!(
        copy["data"]["k"] == "mine",
        "the change was reverted although the object asks for report: {}",
        copy["data"]
    );

    // 4. Not drift: a field another manager co-owns with the same value (as KubeFed's
    //    controller does on copies it wrote before a migration) changes with the template.
    let migrated = create_federated(
        &hub,
        "ConfigMap",
        Some(&ns),
        "migrated",
        json!({"template": {"data": {"k": "v1"}}, "placement": placement(&["member1"])}),
    )
    .await?;
    wait_propagated(
        "migrated propagated",
        &migrated,
        "migrated",
        &["member1"],
        &[],
    )
    .await?;
    let same = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "migrated", "namespace": ns},
        "data": {"k": "v1"},
    });
    copies
        .patch(
            "migrated",
            &PatchParams::apply("controller-manager"),
            &Patch::Apply(&same),
        )
        .await
        .context("co-owning the field as KubeFed's manager")?;
    migrated
        .patch(
            "migrated",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"data": {"k": "v2"}}}})),
        )
        .await?;
    wait_for(
        "the template change in member1 despite the co-owner",
        TIMEOUT,
        async || {
            let copy = get_value(&copies, "migrated").await?.context("gone")?;
            Ok(if copy["data"]["k"] == "v2" {
                Wait::Done(())
            } else {
                Wait::Pending(format!("data {}", copy["data"]))
            })
        },
    )
    .await?;
    let object = get_value(&migrated, "migrated").await?.context("gone")?;
    ensure!(
        cluster_status(&object, "member1").is_some_and(|c| c.get("lastDrift").is_none()),
        "a template change reported as drift: {:?}",
        cluster_status(&object, "member1")
    );
    Ok(())
}
