//! The warm restart: the controller restarted on the converged federation. A restart should
//! cost nothing but reads; this phase counts what it writes anyway, and records what explains
//! it (PropagatedVersions that no longer describe the members, statuses rewritten or flapping).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use hubfed_api::kubefedcluster::KubeFedCluster;
use hubfed_api::propagatedversion::PropagatedVersion;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use tokio_util::sync::CancellationToken;

use super::agents::Agents;
use super::controller::{
    ControllerProcess, ControllerSettings, Metrics, apiserver_writes, operations_delta,
};
use super::procstat::{CpuSnapshot, CpuUsage};
use super::report::Restart;
use super::setup::{Federation, QUIET};
use super::tracker::Tracker;
use super::workload::KINDS;
use super::{Args, progress};

/// Restarts the controller on the converged federation and waits until it has reconciled
/// everything and gone quiet.
pub async fn run(
    args: &Args,
    fed: &Federation,
    settings: &ControllerSettings,
    agents: &Agents,
    tracker: &Arc<Tracker>,
    timeout: Duration,
) -> anyhow::Result<Restart> {
    progress(format_args!("warm restart: starting a new controller"));
    let namespaces: Vec<String> = (0..args.namespaces)
        .map(|n| format!("{}{n}", super::workload::NAMESPACE_PREFIX))
        .collect();
    let statuses_before = federated_statuses(&fed.hub, &namespaces).await?;
    let versions = check_propagated_versions(fed, &namespaces).await?;
    if let Some(example) = &versions.example {
        progress(format_args!(
            "warm restart: PropagatedVersions before the restart: {} incomplete, {} with another template hash, {} cluster versions behind the member; e.g. {example}",
            versions.incomplete, versions.template_mismatch, versions.stale_entries
        ));
    }
    let (events_before, regressions_before, generations_before, deletions_before) = {
        let state = tracker.state();
        (
            state.events,
            state.regressions,
            state.generation_changes,
            state.deletions,
        )
    };
    let hub_writes_before = apiserver_writes(&fed.hub).await?;
    // Pull mode: the agents keep running; their member requests count from here.
    let agent_metrics_before = if agents.is_empty() {
        Metrics::default()
    } else {
        agents.metrics().await?
    };
    let stop_flaps = CancellationToken::new();
    let _stop_flaps = stop_flaps.clone().drop_guard();
    let flaps = watch_propagation_flaps(&fed.hub, &stop_flaps).await?;
    let cpu_before = CpuSnapshot::take(&fed.groups(None));
    // Conditions carry whole seconds: a transition in this second or later is the restart's.
    let began =
        k8s_openapi::jiff::Timestamp::from_second(k8s_openapi::jiff::Timestamp::now().as_second())?;
    let controller = ControllerProcess::start(&fed.env, settings, "restart")?;
    let groups = fed.groups(Some(&controller));
    controller.wait_ready(timeout).await?;
    // Every federated object and FederatedNamespace is reconciled at least once.
    let objects = (args.objects + args.namespaces) as f64;
    controller.wait_reconciles(objects, timeout).await?;
    let settle_began = controller.started.elapsed();
    let mut settled = controller.wait_settled(QUIET, timeout).await?;
    if !agents.is_empty() {
        settled += agents.wait_quiet(QUIET, timeout).await?;
        settled += controller.wait_settled(QUIET, timeout).await?;
    }
    let cpu = CpuUsage::between(&cpu_before, &CpuSnapshot::take(&groups));
    let metrics = controller.metrics().await?;
    let (member_writes, member_operations) = if agents.is_empty() {
        (metrics.member_writes(), metrics.member_operations())
    } else {
        let after = agents.metrics().await?;
        (
            after.member_writes() - agent_metrics_before.member_writes(),
            operations_delta(
                &agent_metrics_before.member_operations(),
                &after.member_operations(),
            ),
        )
    };
    let hub_writes = operations_delta(&hub_writes_before, &apiserver_writes(&fed.hub).await?);
    let (member_watch_events, member_regressions, member_generation_changes, member_deletions) = {
        let state = tracker.state();
        (
            state.events - events_before,
            state.regressions - regressions_before,
            state.generation_changes - generations_before,
            state.deletions - deletions_before,
        )
    };
    let clusters_flapped = clusters_ready_changed_since(&fed.hub, began).await?;
    if !clusters_flapped.is_empty() {
        progress(format_args!(
            "warm restart: members whose Ready condition changed during it (their probes \
             failed, then passed again): {}",
            clusters_flapped.join(", ")
        ));
    }
    let statuses_after = federated_statuses(&fed.hub, &namespaces).await?;
    let changed: Vec<&String> = statuses_after
        .iter()
        .filter(|(key, status)| statuses_before.get(*key) != Some(*status))
        .map(|(key, _)| key)
        .collect();
    let status_change_example = changed.first().map(|key| {
        serde_json::json!({
            "object": key,
            "before": statuses_before.get(*key),
            "after": statuses_after.get(*key),
        })
    });
    if let Some(example) = &status_change_example {
        progress(format_args!(
            "warm restart: {} federated object statuses rewritten, e.g. {example}",
            changed.len()
        ));
    }
    stop_flaps.cancel();
    let (propagation_flaps, propagation_flap_example) = {
        let flaps = flaps.lock().unwrap_or_else(|e| e.into_inner());
        (flaps.0, flaps.1.clone())
    };
    if let Some(example) = &propagation_flap_example {
        progress(format_args!(
            "warm restart: {propagation_flaps} status writes without Propagation=True, e.g. {example}"
        ));
    }
    let restart = Restart {
        propagation_flaps,
        propagation_flap_example,
        incomplete_versions: versions.incomplete,
        template_mismatched_versions: versions.template_mismatch,
        stale_cluster_versions: versions.stale_entries,
        version_example: versions.example,
        status_changes: changed.len(),
        status_change_example,
        clusters_flapped,
        settled_seconds: (settle_began + settled).as_secs_f64(),
        member_writes,
        member_operations,
        member_watch_events,
        member_regressions,
        member_generation_changes,
        member_deletions,
        hub_writes,
        reconciles: metrics.sum("controller_runtime_reconcile_total", &[]),
        rss_bytes: controller.rss(),
        heap: metrics.heap(),
        bytes_per_pair: 0.0,
        marginal_bytes_per_pair: 0.0,
        cpu,
    };
    progress(format_args!(
        "warm restart: settled after {:.1}s; {:.0} member writes, {} member watch events; RSS {:.1} MiB",
        restart.settled_seconds,
        restart.member_writes,
        restart.member_watch_events,
        restart.rss_bytes as f64 / 1048576.0
    ));
    controller.stop();
    Ok(restart)
}

/// Status writes seen on the hub whose `Propagation` condition is not `True`, and one of them.
type Flaps = Arc<std::sync::Mutex<(usize, Option<serde_json::Value>)>>;

/// Watches the federated objects of the benchmark kinds and FederatedNamespaces on the hub and
/// counts status writes whose `Propagation` condition is not a plain `True` (on a converged
/// federation: a flap). Returns
/// once every watch has listed, so later events are new writes.
async fn watch_propagation_flaps(hub: &Client, stop: &CancellationToken) -> anyhow::Result<Flaps> {
    use futures::StreamExt as _;
    use kube::runtime::watcher;

    let flaps: Flaps = Arc::default();
    let mut listed = Vec::new();
    let mut resources: Vec<_> = KINDS.iter().map(|k| k.federated()).collect();
    resources.push(hubfed_e2e::federated("Namespace"));
    for resource in resources {
        let api: Api<DynamicObject> = Api::all_with(hub.clone(), &resource);
        let (ready, done) = tokio::sync::oneshot::channel::<()>();
        listed.push(done);
        let flaps = Arc::clone(&flaps);
        let stop = stop.clone();
        tokio::spawn(async move {
            let stream = watcher::watcher(api, watcher::Config::default());
            let mut stream = std::pin::pin!(stream);
            let mut ready = Some(ready);
            loop {
                let event = tokio::select! {
                    () = stop.cancelled() => break,
                    event = stream.next() => event,
                };
                match event {
                    Some(Ok(watcher::Event::InitDone)) => {
                        if let Some(ready) = ready.take() {
                            let _ = ready.send(());
                        }
                    }
                    Some(Ok(watcher::Event::Apply(object))) => {
                        let propagation = object
                            .data
                            .pointer("/status/conditions")
                            .and_then(serde_json::Value::as_array)
                            .and_then(|c| c.iter().find(|c| c["type"] == "Propagation"))
                            .cloned();
                        // Converged is `True` with no reason; anything else is a flap.
                        let flapped = propagation.as_ref().is_some_and(|c| {
                            c["status"] != "True"
                                || c["reason"].as_str().is_some_and(|r| !r.is_empty())
                        });
                        if flapped {
                            let mut flaps = flaps.lock().unwrap_or_else(|e| e.into_inner());
                            flaps.0 += 1;
                            flaps.1.get_or_insert_with(|| {
                                serde_json::json!({
                                    "object": format!(
                                        "{}/{}",
                                        object.metadata.namespace.clone().unwrap_or_default(),
                                        object.metadata.name.clone().unwrap_or_default()
                                    ),
                                    "status": object.data.get("status"),
                                })
                            });
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) => tokio::time::sleep(Duration::from_secs(1)).await,
                    None => break,
                }
            }
        });
    }
    for done in listed {
        done.await
            .context("a hub watch of federated objects ended")?;
    }
    Ok(flaps)
}

/// What the PropagatedVersions say against what the hub and members hold: the versions a
/// restarted controller trusts (it has no memory of its own writes).
#[derive(Debug, Default)]
struct VersionCheck {
    /// PropagatedVersions recording fewer clusters than the object is placed on.
    incomplete: usize,
    /// PropagatedVersions whose templateVersion is not the template's current hash.
    template_mismatch: usize,
    /// Recorded cluster versions that differ from the member object's current version.
    stale_entries: usize,
    example: Option<serde_json::Value>,
}

async fn check_propagated_versions(
    fed: &Federation,
    namespaces: &[String],
) -> anyhow::Result<VersionCheck> {
    use hubfed_core::version::{object_version, template_version};
    use kube::api::PartialObjectMeta;

    let mut check = VersionCheck::default();
    // (kind, namespace, name) → the member object's version, per member.
    let selector =
        ListParams::default().labels(&format!("{}=true", hubfed_api::names::MANAGED_LABEL));
    let mut member_versions: Vec<BTreeMap<(String, String, String), String>> = Vec::new();
    for member in &fed.members {
        let mut versions = BTreeMap::new();
        for kind in KINDS {
            let api: Api<PartialObjectMeta<DynamicObject>> =
                Api::all_with(member.clone(), &kind.target());
            for item in api.list(&selector).await?.items {
                let m = item.metadata;
                versions.insert(
                    (
                        kind.name().to_owned(),
                        m.namespace.unwrap_or_default(),
                        m.name.unwrap_or_default(),
                    ),
                    object_version(
                        m.generation.unwrap_or(0),
                        m.resource_version.as_deref().unwrap_or(""),
                    ),
                );
            }
        }
        member_versions.push(versions);
    }
    for ns in namespaces {
        let pvs: BTreeMap<String, PropagatedVersion> =
            Api::<PropagatedVersion>::namespaced(fed.hub.clone(), ns)
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .map(|pv| (pv.metadata.name.clone().unwrap_or_default(), pv))
                .collect();
        for kind in KINDS {
            let api: Api<DynamicObject> =
                Api::namespaced_with(fed.hub.clone(), ns, &kind.federated());
            for object in api.list(&ListParams::default()).await?.items {
                let name = object.metadata.name.clone().unwrap_or_default();
                let pv_name =
                    hubfed_api::propagatedversion::propagated_version_name(kind.name(), &name);
                let status = pvs.get(&pv_name).and_then(|pv| pv.status.clone());
                let template = object.data.pointer("/spec/template");
                let mut problems = Vec::new();
                let recorded = status.as_ref().map_or(0, |s| s.cluster_versions.len());
                if recorded < fed.members.len() {
                    check.incomplete += 1;
                    problems.push(format!("{recorded} clusters recorded"));
                }
                if status
                    .as_ref()
                    .is_some_and(|s| s.template_version != template_version(template))
                {
                    check.template_mismatch += 1;
                    problems.push("templateVersion is not the template's hash".to_owned());
                }
                for (cluster, versions) in fed.names.iter().zip(&member_versions) {
                    let recorded = status.as_ref().and_then(|s| {
                        s.cluster_versions
                            .iter()
                            .find(|v| &v.cluster_name == cluster)
                            .map(|v| v.version.clone())
                    });
                    let current = versions.get(&(kind.name().to_owned(), ns.clone(), name.clone()));
                    if let (Some(recorded), Some(current)) = (&recorded, current)
                        && recorded != current
                    {
                        check.stale_entries += 1;
                        problems.push(format!(
                            "{cluster}: recorded {recorded}, member at {current}"
                        ));
                    }
                }
                if !problems.is_empty() && check.example.is_none() {
                    check.example = Some(serde_json::json!({
                        "object": format!("Federated{}/{ns}/{name}", kind.name()),
                        "problems": problems,
                        "propagatedVersion": status,
                    }));
                }
            }
        }
    }
    Ok(check)
}

/// `status` of every federated object and FederatedNamespace in the benchmark namespaces.
async fn federated_statuses(
    hub: &Client,
    namespaces: &[String],
) -> anyhow::Result<BTreeMap<String, serde_json::Value>> {
    let mut statuses = BTreeMap::new();
    let mut resources: Vec<_> = KINDS.iter().map(|k| k.federated()).collect();
    resources.push(hubfed_e2e::federated("Namespace"));
    for ns in namespaces {
        for resource in &resources {
            let api: Api<DynamicObject> = Api::namespaced_with(hub.clone(), ns, resource);
            for item in api.list(&ListParams::default()).await?.items {
                statuses.insert(
                    format!(
                        "{}/{ns}/{}",
                        resource.kind,
                        item.metadata.name.unwrap_or_default()
                    ),
                    item.data.get("status").cloned().unwrap_or_default(),
                );
            }
        }
    }
    Ok(statuses)
}

/// The member clusters whose `Ready` condition changed at or after `since` (whole seconds):
/// during the restart, their health probes failed and, by the time it settled, passed again.
async fn clusters_ready_changed_since(
    hub: &Client,
    since: k8s_openapi::jiff::Timestamp,
) -> anyhow::Result<Vec<String>> {
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), hubfed_e2e::KUBEFED_NAMESPACE);
    let mut changed: Vec<String> = clusters
        .list(&ListParams::default())
        .await
        .context("listing the KubeFedClusters")?
        .items
        .into_iter()
        .filter(|cluster| {
            cluster
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
                .and_then(|c| c.last_transition_time.as_ref())
                .is_some_and(|t| t.0 >= since)
        })
        .filter_map(|cluster| cluster.metadata.name)
        .collect();
    changed.sort();
    Ok(changed)
}
