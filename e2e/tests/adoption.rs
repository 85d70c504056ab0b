//! Adoption of pre-existing member objects, switched at run time by KubeFedConfig
//! `spec.syncController.adoptResources` (docs/kubefed-compatibility.md §1.4, §2.4).
//!
//! Its own test binary: it changes the federation-wide KubeFedConfig, which would disturb tests
//! running beside it. Keep it to this one test.

use anyhow::{Context as _, ensure};
use hubfed_api::kubefedconfig::KubeFedConfig;
use hubfed_api::names::{FIELD_MANAGER, KUBEFED_CONFIG_NAME};
use hubfed_e2e::{
    Expected, Federation, KUBEFED_NAMESPACE, MEMBERS, TIMEOUT, Wait, cluster_status, dynamic_api,
    federated, federated_object, get_value, is_managed, member_mismatch, placement,
    propagation_condition, show, target, unique_name, unique_ns, wait_for, wait_propagated,
};
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

async fn set_adopt_resources(fed: &Federation, value: &str) -> anyhow::Result<()> {
    let configs: Api<KubeFedConfig> = Api::namespaced(fed.hub().await?, KUBEFED_NAMESPACE);
    configs
        .patch(
            KUBEFED_CONFIG_NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "syncController": { "adoptResources": value } } })),
        )
        .await
        .with_context(|| format!("setting adoptResources {value}"))?;
    Ok(())
}

/// Creates an unmanaged ConfigMap directly in member1, then a FederatedConfigMap of the same
/// name with `template` placed on `clusters`. Returns the member1 ConfigMap as created.
async fn pre_existing_then_federated(
    fed: &Federation,
    namespace: &str,
    name: &str,
    local_data: Value,
    template: Value,
    clusters: &[&str],
) -> anyhow::Result<Value> {
    let member1 = dynamic_api(
        fed.client("member1").await?,
        &target("ConfigMap"),
        Some(namespace),
    );
    let local = DynamicObject::new(name, &target("ConfigMap")).data(json!({ "data": local_data }));
    let created = member1
        .create(&PostParams::default(), &local)
        .await
        .with_context(|| format!("creating {name} directly in member1"))?;
    let resource = federated("ConfigMap");
    let hub = dynamic_api(fed.hub().await?, &resource, Some(namespace));
    hub.create(
        &PostParams::default(),
        &federated_object(
            &resource,
            Some(namespace),
            name,
            json!({ "template": template, "placement": placement(clusters) }),
        ),
    )
    .await
    .with_context(|| format!("creating the FederatedConfigMap {name}"))?;
    Ok(serde_json::to_value(created)?)
}

#[tokio::test]
async fn adoption_follows_kubefed_config_at_run_time() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("adoption");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let hub = dynamic_api(fed.hub().await?, &federated("ConfigMap"), Some(&ns));
    let member1 = dynamic_api(
        fed.client("member1").await?,
        &target("ConfigMap"),
        Some(&ns),
    );
    let member2 = dynamic_api(
        fed.client("member2").await?,
        &target("ConfigMap"),
        Some(&ns),
    );

    set_adopt_resources(fed, "Disabled").await?;
    // The controller learns of the change from a watch, and nothing on the hub says when it
    // has. Throwaway probes until one is refused, so the object checked below is not racing
    // that watch (a controller that never honours Disabled fails here).
    wait_for(
        "the controller to honour adoptResources=Disabled",
        TIMEOUT,
        async || {
            let probe = unique_name("probe");
            pre_existing_then_federated(
                fed,
                &ns,
                &probe,
                json!({ "owner": "member1" }),
                json!({ "data": { "owner": "federation" } }),
                &["member1"],
            )
            .await?;
            let refused = wait_for(&format!("a verdict on {probe}"), TIMEOUT, async || {
                let object = get_value(&hub, &probe).await?;
                if object
                    .as_ref()
                    .and_then(|o| cluster_status(o, "member1"))
                    .is_some_and(|entry| entry["status"] == "AlreadyExists")
                {
                    return Ok(Wait::Done(true));
                }
                let local = get_value(&member1, &probe).await?;
                if local.as_ref().is_some_and(is_managed) {
                    return Ok(Wait::Done(false));
                }
                Ok(Wait::Pending(format!(
                    "status {}",
                    object.map(|o| o["status"].clone()).unwrap_or_default()
                )))
            })
            .await?;
            Ok(if refused {
                Wait::Done(())
            } else {
                Wait::Pending(format!("{probe} was adopted"))
            })
        },
    )
    .await?;

    // Disabled: member1's own ConfigMap is reported and left alone; member2 gets the object.
    let name = "adopt-me";
    let original = pre_existing_then_federated(
        fed,
        &ns,
        name,
        json!({ "owner": "member1" }),
        json!({ "data": { "owner": "federation" } }),
        &MEMBERS,
    )
    .await?;
    let federation = json!("federation");
    wait_for(
        "member1 AlreadyExists, member2 propagated",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            let object = get_value(&hub, name)
                .await?
                .context("the FederatedConfigMap disappeared")?;
            match cluster_status(&object, "member1") {
                Some(entry) if entry["status"] == "AlreadyExists" => {}
                other => problems.push(format!("status.clusters[member1] {}", show(other))),
            }
            match propagation_condition(&object) {
                Some(c) if c["status"] == "False" && c["reason"] == "CheckClusters" => {}
                other => problems.push(format!("Propagation condition {}", show(other))),
            }
            let in2 = get_value(&member2, name).await?;
            problems.extend(member_mismatch(
                "member2",
                in2.as_ref(),
                &[("/data/owner", Some(&federation))],
            ));
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;
    let untouched = get_value(&member1, name)
        .await?
        .context("member1's own ConfigMap was deleted")?;
    anyhow::ensure!(
        untouched["metadata"]["resourceVersion"] == original["metadata"]["resourceVersion"]
            && untouched["data"] == original["data"]
            && !is_managed(&untouched),
        "member1's own ConfigMap was changed although adoptResources is Disabled: {untouched}"
    );

    // Still Disabled: once the object in the way is deleted, the federation creates its own
    // at once, woken by the member watch (an AlreadyExists verdict is otherwise only
    // revisited by the 10-minute resync).
    let blocked = "in-the-way";
    pre_existing_then_federated(
        fed,
        &ns,
        blocked,
        json!({ "owner": "member1" }),
        json!({ "data": { "owner": "federation" } }),
        &["member1"],
    )
    .await?;
    wait_for(
        "member1 AlreadyExists for in-the-way",
        TIMEOUT,
        async || {
            let object = get_value(&hub, blocked).await?;
            Ok(
                match object.as_ref().and_then(|o| cluster_status(o, "member1")) {
                    Some(entry) if entry["status"] == "AlreadyExists" => Wait::Done(()),
                    other => Wait::Pending(format!("status.clusters[member1] {}", show(other))),
                },
            )
        },
    )
    .await?;
    member1
        .delete(blocked, &Default::default())
        .await
        .context("deleting member1's own in-the-way")?;
    let owned_in1 =
        [Expected::copy("member1", &member1).with(&[("/data/owner", Some(&federation))])];
    wait_propagated(
        "in-the-way created by the federation once member1's own was deleted",
        &hub,
        blocked,
        &["member1"],
        &owned_in1,
    )
    .await?;

    // That creation was create-only (a POST, which fails if anything took the name after
    // the GET): hubfed's field manager still owns the copy through its Apply entry only, so
    // a key dropped from the template is dropped in the member.
    let fields =
        get_value(&member1, blocked).await?.unwrap_or_default()["metadata"]["managedFields"]
            .clone();
    let ours: Vec<&Value> = fields
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["manager"] == FIELD_MANAGER && e["subresource"].is_null())
        .collect();
    ensure!(
        ours.len() == 1 && ours[0]["operation"] == "Apply",
        "hubfed's managedFields entries of a create-only copy: {ours:?}"
    );
    hub.patch(
        blocked,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": {"data": {"owner": null, "next": "yes"}}}})),
    )
    .await?;
    wait_for(
        "the key dropped from the template dropped in member1",
        TIMEOUT,
        async || {
            let data = get_value(&member1, blocked).await?.unwrap_or_default()["data"].clone();
            Ok(if data == json!({"next": "yes"}) {
                Wait::Done(())
            } else {
                Wait::Pending(format!("data {data}"))
            })
        },
    )
    .await?;

    // Enabled (the default, so this also restores it): the same object is adopted.
    set_adopt_resources(fed, "Enabled").await?;
    wait_propagated(
        "member1's ConfigMap adopted: managed, template data, status OK",
        &hub,
        name,
        &MEMBERS,
        &owned_in1,
    )
    .await
}
