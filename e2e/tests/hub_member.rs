//! The hub joined as a member of itself (KubeFed's "host namespace"): its own namespaces are
//! labelled when federated and only unlabelled, never deleted, when the FederatedNamespace
//! goes or its placement drops the hub; and deleting such a namespace on the hub completes
//! (issue 16: the FederatedNamespace inside it must not wait for the namespace's removal).
//!
//! Its own test binary: joining the hub changes the cluster registry that every placement
//! reads. Keep it to this one test, which unjoins the hub at the end.

use anyhow::{Context as _, bail};
use hubfed_api::names::{MANAGED_LABEL, ORPHAN_ANNOTATION};
use hubfed_e2e::{
    Federation, TIMEOUT, Wait, dynamic_api, federated, federated_object, get_value, labels,
    member_mismatch, placement, propagated_ok, unique_ns, wait_for,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};

#[tokio::test]
async fn hub_as_member_keeps_its_own_namespace() -> anyhow::Result<()> {
    let fed = Federation::shared();
    fed.join("hub", fed.env().hub()).await?;
    let mut result = federate_a_hub_namespace(fed).await;
    if result.is_ok() {
        result = delete_a_federated_hub_namespace(fed, false).await;
    }
    if result.is_ok() {
        result = delete_a_federated_hub_namespace(fed, true).await;
    }
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

/// `kubectl delete namespace` on the hub of a namespace federated to the hub and member1, with
/// a FederatedConfigMap in it: everything is gone within the deadline, in the hub and in
/// member1 (or, orphaning, member1 keeps its namespace and ConfigMap, unlabelled).
async fn delete_a_federated_hub_namespace(fed: &Federation, orphan: bool) -> anyhow::Result<()> {
    let ns = unique_ns(if orphan { "hostdel-orphan" } else { "hostdel" });
    fed.create_hub_namespace(&ns).await?;
    let hub = fed.hub().await?;
    let fns_api = dynamic_api(hub.clone(), &federated("Namespace"), Some(&ns));
    let mut fns = federated_object(
        &federated("Namespace"),
        Some(&ns),
        &ns,
        serde_json::json!({ "placement": placement(&["hub", "member1"]) }),
    );
    if orphan {
        fns.metadata.annotations = Some([(ORPHAN_ANNOTATION.to_owned(), "true".to_owned())].into());
    }
    fns_api
        .create(&PostParams::default(), &fns)
        .await
        .context("creating the FederatedNamespace")?;
    let fcm_api = dynamic_api(hub.clone(), &federated("ConfigMap"), Some(&ns));
    let mut fcm = federated_object(
        &federated("ConfigMap"),
        Some(&ns),
        "settings",
        serde_json::json!({
            "template": {"data": {"key": "value"}},
            "placement": placement(&["hub", "member1"]),
        }),
    );
    if orphan {
        fcm.metadata.annotations = Some([(ORPHAN_ANNOTATION.to_owned(), "true".to_owned())].into());
    }
    fcm_api
        .create(&PostParams::default(), &fcm)
        .await
        .context("creating the FederatedConfigMap")?;

    let hub_namespaces: Api<Namespace> = Api::all(hub.clone());
    let member1_namespaces: Api<Namespace> = Api::all(fed.client("member1").await?);
    let member1_configmaps: Api<ConfigMap> = Api::namespaced(fed.client("member1").await?, &ns);
    wait_for(
        "the namespace and the ConfigMap managed in member1",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            let found = member1_namespaces.get_opt(&ns).await?;
            problems.extend(member_mismatch(
                "member1 namespace",
                found.map(serde_json::to_value).transpose()?.as_ref(),
                &[],
            ));
            let found = member1_configmaps.get_opt("settings").await?;
            problems.extend(member_mismatch(
                "member1 configmap",
                found.map(serde_json::to_value).transpose()?.as_ref(),
                &[],
            ));
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;

    hub_namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .context("deleting the namespace on the hub")?;
    let started = std::time::Instant::now();
    wait_for(
        "the namespace gone from the hub, member1 cleaned up",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            if let Some(left) = hub_namespaces.get_opt(&ns).await? {
                problems.push(format!(
                    "hub: the namespace is still there (finalizers of the federated objects: {})",
                    federated_finalizers(&fns_api, &fcm_api, &ns).await?
                ));
                drop(left);
            }
            let member_ns = member1_namespaces.get_opt(&ns).await?;
            let member_cm = member1_configmaps.get_opt("settings").await?;
            if orphan {
                match (&member_ns, &member_cm) {
                    (Some(n), Some(c)) => {
                        for (what, labels) in [("namespace", n.labels()), ("configmap", c.labels())]
                        {
                            if labels.contains_key(MANAGED_LABEL) {
                                problems.push(format!("member1: orphaned {what} still labelled"));
                            }
                        }
                        if n.metadata.deletion_timestamp.is_some() {
                            bail!("member1: the orphaned namespace is being deleted");
                        }
                    }
                    _ => bail!("member1: an orphaned copy was deleted"),
                }
            } else if member_ns.is_some() {
                problems.push("member1: the namespace still exists".to_owned());
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;
    hubfed_e2e::report(format_args!(
        "hub namespace deletion (orphan: {orphan}) completed in {:.1}s",
        started.elapsed().as_secs_f64()
    ));
    if orphan {
        member1_namespaces
            .delete(&ns, &DeleteParams::default())
            .await
            .context("cleaning up member1's orphaned namespace")?;
    }
    Ok(())
}

/// The finalizers of the two federated objects, for a failure message.
async fn federated_finalizers(
    fns_api: &Api<kube::api::DynamicObject>,
    fcm_api: &Api<kube::api::DynamicObject>,
    ns: &str,
) -> anyhow::Result<String> {
    let mut found = Vec::new();
    for (api, name) in [(fns_api, ns), (fcm_api, "settings")] {
        if let Some(object) = api.get_opt(name).await? {
            found.push(format!("{name}: {:?}", object.finalizers()));
        }
    }
    Ok(found.join("; "))
}
