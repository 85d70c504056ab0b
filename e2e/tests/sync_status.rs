//! What the sync controller reports in the hub (docs/kubefed-compatibility.md §1.6, §2.4),
//! against a real hub and two real members: bad placements, a type enabled at run time, FTC
//! statuses, PropagatedVersions, Events of member writes.
//!
//! Each test has its own namespace or uniquely named cluster-scoped objects.

use anyhow::{Context as _, ensure};
use hubfed_api::federatedtypeconfig::FederatedTypeConfig;
use hubfed_api::names::FTC_FINALIZER;
use hubfed_e2e::{
    ExampleType, Expected, Federation, KUBEFED_NAMESPACE, MEMBERS, TIMEOUT, Wait, cluster_status,
    copy_problems, dynamic_api, federated, get_value, placement, propagation_condition,
    status_is_current, unique_ns, wait_copies, wait_for,
};
use kube::Api;
use serde_json::{Value, json};

#[tokio::test]
async fn bad_placements_get_status_and_do_not_stall_others() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("badplacement");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let template = json!({ "data": { "k": "v" } });
    fed.create_federated(
        "ConfigMap",
        Some(&ns),
        "unknown-cluster",
        json!({ "template": template, "placement": placement(&["member1", "no-such-cluster"]) }),
    )
    .await?;
    fed.create_federated(
        "ConfigMap",
        Some(&ns),
        "bad-selector",
        json!({
            "template": template,
            "placement": { "clusterSelector": { "matchExpressions": [
                { "key": "region", "operator": "Sideways", "values": ["north"] },
            ] } },
        }),
    )
    .await?;
    fed.create_federated(
        "ConfigMap",
        Some(&ns),
        "valid",
        json!({ "template": template, "placement": placement(&MEMBERS) }),
    )
    .await?;
    let hub_api = dynamic_api(fed.hub().await?, &federated("ConfigMap"), Some(&ns));
    let members = fed.member_apis("ConfigMap", Some(&ns)).await?;

    let v = json!("v");
    let both = Expected::each(MEMBERS.into_iter().zip(&members), &[("/data/k", Some(&v))]);
    wait_copies("the valid ConfigMap in both members", "valid", &both).await?;

    wait_for(
        "unknown-cluster: in member1, status naming no-such-cluster or Propagation=False",
        TIMEOUT,
        async || {
            let in1 = Expected::copy("member1", &members[0]);
            let mut problems = copy_problems("unknown-cluster", &[in1]).await?;
            let object = get_value(&hub_api, "unknown-cluster")
                .await?
                .context("the federated ConfigMap unknown-cluster disappeared")?;
            let condition = propagation_condition(&object);
            let reflected = cluster_status(&object, "no-such-cluster").is_some()
                || condition.is_some_and(|c| {
                    c["status"] == "False"
                        || c["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("no-such-cluster"))
                });
            if !(status_is_current(&object) && reflected) {
                problems.push(format!("status {}", object["status"]));
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;

    wait_for(
        "bad-selector: Propagation=False with reason ComputePlacementFailed",
        TIMEOUT,
        async || {
            let object = get_value(&hub_api, "bad-selector")
                .await?
                .context("the federated ConfigMap bad-selector disappeared")?;
            Ok(match propagation_condition(&object) {
                Some(c) if c["status"] == "False" && c["reason"] == "ComputePlacementFailed" => {
                    Wait::Done(())
                }
                _ => Wait::Pending(format!("status {}", object["status"])),
            })
        },
    )
    .await?;
    // Nothing can have been placed by an invalid selector.
    for (cluster, api) in MEMBERS.iter().zip(&members) {
        ensure!(
            get_value(api, "bad-selector").await?.is_none(),
            "{cluster} holds bad-selector"
        );
    }
    // Both problems are also Warning events on their objects.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(fed.hub().await?, &ns);
    wait_for(
        "Warning events for both bad placements",
        TIMEOUT,
        async || {
            let seen: Vec<(String, String)> = events
                .list(&Default::default())
                .await?
                .items
                .into_iter()
                .filter(|e| e.type_.as_deref() == Some("Warning"))
                .filter_map(|e| Some((e.regarding?.name?, e.reason?)))
                .collect();
            let want = [
                ("unknown-cluster", "UnknownClusters"),
                ("bad-selector", "ComputePlacementFailed"),
            ];
            let missing: Vec<String> = want
                .iter()
                .filter(|(n, r)| !seen.iter().any(|(sn, sr)| sn == n && sr == r))
                .map(|(n, r)| format!("no {r} event for {n}"))
                .collect();
            Ok(Wait::all_or_pending(missing))
        },
    )
    .await
}

#[tokio::test]
async fn a_type_enabled_at_run_time_propagates() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let widget = ExampleType::new("Widget", "widgets")?;
    widget.enable(fed, &["hub", "member1", "member2"]).await?;
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(fed.hub().await?, KUBEFED_NAMESPACE);

    let ns = unique_ns("widgets");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let name = "gizmo";
    fed.create_federated(
        "Widget",
        Some(&ns),
        name,
        json!({
            "template": { "spec": { "size": 3, "color": "teal" } },
            "placement": placement(&MEMBERS),
        }),
    )
    .await?;
    let resource = widget.target.to_dynamic();
    let members = [
        dynamic_api(fed.client("member1").await?, &resource, Some(&ns)),
        dynamic_api(fed.client("member2").await?, &resource, Some(&ns)),
    ];
    let (size, color) = (json!(3), json!("teal"));
    let both = Expected::each(
        MEMBERS.into_iter().zip(&members),
        &[("/spec/size", Some(&size)), ("/spec/color", Some(&color))],
    );
    wait_copies("the Widget in both members", name, &both).await?;
    wait_for(
        "FTC widgets.example.hubfed.io: propagationController Running",
        TIMEOUT,
        async || {
            let ftc = ftcs.get("widgets.example.hubfed.io").await?;
            Ok(ftc_running(&serde_json::to_value(&ftc)?))
        },
    )
    .await
}

/// `Done` when an FTC carries the FTC finalizer and a current status with the sync controller
/// `Running`.
fn ftc_running(ftc: &Value) -> Wait<()> {
    let mut problems = Vec::new();
    let finalizers = &ftc["metadata"]["finalizers"];
    if !finalizers
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f == FTC_FINALIZER))
    {
        problems.push(format!("finalizers {finalizers}"));
    }
    if !status_is_current(ftc) || ftc["status"]["propagationController"] != "Running" {
        problems.push(format!(
            "status {} at generation {}",
            ftc["status"], ftc["metadata"]["generation"]
        ));
    }
    Wait::all_or_pending(problems)
}

#[tokio::test]
async fn default_ftcs_report_running_sync_controllers() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(fed.hub().await?, KUBEFED_NAMESPACE);
    let names: Vec<String> =
        hubfed_api::defaulttypes::default_federated_type_configs(KUBEFED_NAMESPACE)
            .into_iter()
            .filter_map(|ftc| ftc.metadata.name)
            .collect();
    wait_for(
        "the ten default FTCs: observedGeneration current, propagationController Running",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            for name in &names {
                let ftc = serde_json::to_value(ftcs.get(name).await?)?;
                if let Wait::Pending(problem) = ftc_running(&ftc) {
                    problems.push(format!("{name}: {problem}"));
                }
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await
}

#[tokio::test]
async fn propagated_versions_carry_kubefed_names_and_hashes() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("versions");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let name = "versioned";
    let template = json!({"data": {"k": "v", "html": "<a&b>"}});
    let overrides = json!([{"clusterName": "member1", "clusterOverrides": [{"path": "/data/k", "value": "one"}]}]);
    fed.create_federated(
        "ConfigMap",
        Some(&ns),
        name,
        json!({"template": template, "placement": placement(&MEMBERS), "overrides": overrides}),
    )
    .await?;
    let overrides: Vec<hubfed_api::federated::ClusterOverrides> =
        serde_json::from_value(overrides)?;
    let want_template = hubfed_core::version::template_version(Some(&template));
    let want_overrides = hubfed_core::version::overrides_version(Some(&overrides));
    let versions: Api<hubfed_api::propagatedversion::PropagatedVersion> =
        Api::namespaced(fed.hub().await?, &ns);
    wait_for(
        "PropagatedVersion configmap-versioned",
        TIMEOUT,
        async || {
            let Some(pv) = versions.get_opt(&format!("configmap-{name}")).await? else {
                return Ok(Wait::Pending("absent".into()));
            };
            let status = pv.status.clone().unwrap_or_default();
            let clusters: Vec<&str> = status
                .cluster_versions
                .iter()
                .map(|v| v.cluster_name.as_str())
                .collect();
            Ok(
                if status.template_version == want_template
                    && status.override_version == want_overrides
                    && clusters == MEMBERS
                    && status
                        .cluster_versions
                        .iter()
                        .all(|v| v.version.starts_with("rv:"))
                    && pv
                        .metadata
                        .owner_references
                        .as_ref()
                        .is_some_and(|o| o.iter().any(|o| o.name == name))
                {
                    Wait::Done(())
                } else {
                    Wait::Pending(format!(
                        "{:?} {:?}",
                        pv.metadata.owner_references, pv.status
                    ))
                },
            )
        },
    )
    .await
}

#[tokio::test]
async fn member_writes_are_recorded_as_events() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("events");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let name = "eventful";
    fed.create_federated(
        "ConfigMap",
        Some(&ns),
        name,
        json!({"template": {"data": {"k": "v"}}, "placement": placement(&MEMBERS)}),
    )
    .await?;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(fed.hub().await?, &ns);
    wait_for(
        "CreateInCluster events for both members",
        TIMEOUT,
        async || {
            let notes: Vec<String> = events
                .list(&Default::default())
                .await?
                .items
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
                .filter(|e| e.reason.as_deref() == Some("CreateInCluster"))
                .filter_map(|e| e.note)
                .collect();
            let missing: Vec<String> = MEMBERS
                .iter()
                .filter(|m| !notes.iter().any(|n| n.contains(&format!("{m:?}"))))
                .map(|m| format!("no CreateInCluster event for {m}; notes {notes:?}"))
                .collect();
            Ok(Wait::all_or_pending(missing))
        },
    )
    .await
}
