//! The ServiceExports' conditions (`Valid`, `Conflict`, `Ready`) in each exporting member,
//! and an Event on the ServiceExport when its input is bad or in conflict. A push member's
//! are written by the hub; a pull member's travel in its import work, and its agent writes
//! them with [`write_conditions`].

use hubfed_api::mcs::{self, ServiceExport};
use hubfed_core::mcs::{Aggregate, ExportReadiness, export_conditions, refused_export_conditions};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Resource as _;
use kube::api::Api;
use kube::runtime::events::{EventType, Recorder};
use serde_json::json;

use super::index::Key;
use super::reconcile::View;
use super::write::{Write, WriteFailed, apply};
use crate::clusters::MemberCluster;

/// The conditions of the member's ServiceExport of the key, from those it has (`live`);
/// None when it exports nothing the aggregate knows of.
pub(super) fn desired(
    view: &View,
    decided: &Aggregate,
    everywhere: bool,
    live: &[Condition],
    now: &Time,
) -> Option<Vec<Condition>> {
    view.export.as_ref()?;
    let status = decided.exports.get(view.id()?)?;
    let readiness = match (status.valid.status, everywhere) {
        (false, _) => ExportReadiness::Failed,
        (true, true) => ExportReadiness::Exported,
        (true, false) => ExportReadiness::Pending,
    };
    Some(export_conditions(status, readiness, live, now))
}

/// The conditions a ServiceExport has now.
pub(super) fn live_conditions(export: &ServiceExport) -> &[Condition] {
    export
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default()
}

/// Writes each writable push exporter's conditions when they changed; `everywhere` says
/// whether the import is written in every member that gets it.
pub(super) async fn write(
    key: &Key,
    views: &[&View],
    decided: &Aggregate,
    everywhere: bool,
    now: &Time,
) -> Result<(), WriteFailed> {
    let mut result = Ok(());
    for view in views.iter().filter(|v| !v.cluster.pull) {
        let Some(export) = view.export.as_deref() else {
            continue;
        };
        let live = live_conditions(export);
        let Some(desired) = desired(view, decided, everywhere, live, now) else {
            continue;
        };
        let recorder = &view.member.recorder;
        if write_conditions(&view.cluster, recorder, key, export, &desired)
            .await
            .is_err()
        {
            result = Err(WriteFailed);
        }
    }
    result
}

/// Writes the refusal into a refused push member's ServiceExport (`Ready=False/Failed`,
/// nothing else), with a Warning Event when it is news.
pub(super) async fn refused(
    key: &Key,
    view: &View,
    reason: &str,
    refusal: &str,
    now: &Time,
) -> Result<(), WriteFailed> {
    let Some(export) = view.export.as_deref() else {
        return Ok(());
    };
    let live = live_conditions(export);
    let desired = refused_export_conditions(refusal, live, now);
    if desired.as_slice() == live {
        return Ok(());
    }
    write_one(&view.cluster, key, &desired).await?;
    if !desired.iter().all(|d| live.contains(d)) {
        crate::events::publish(
            &view.member.recorder,
            &export.object_ref(&()),
            EventType::Warning,
            reason,
            &desired[0].message,
        );
    }
    Ok(())
}

/// Writes `desired` into the member's ServiceExport `export` unless it has them all, and
/// says what is news in Events on it.
pub(super) async fn write_conditions(
    cluster: &MemberCluster,
    recorder: &Recorder,
    key: &Key,
    export: &ServiceExport,
    desired: &[Condition],
) -> Result<(), WriteFailed> {
    let live = live_conditions(export);
    if desired.iter().all(|d| live.contains(d)) {
        return Ok(());
    }
    write_one(cluster, key, desired).await?;
    announce(recorder, export, desired, live);
    Ok(())
}

async fn write_one(
    cluster: &MemberCluster,
    key: &Key,
    conditions: &[Condition],
) -> Result<(), WriteFailed> {
    let (namespace, name) = key;
    let client = cluster.client.clone().ok_or(WriteFailed)?;
    let exports: Api<ServiceExport> = Api::namespaced(client, namespace);
    let body = json!({
        "apiVersion": format!("{}/{}", mcs::GROUP, mcs::VERSION),
        "kind": "ServiceExport",
        "metadata": {"name": name, "namespace": namespace},
        "status": {"conditions": conditions},
    });
    let write = Write {
        cluster,
        kind: "ServiceExport",
        status: true,
    };
    apply(&write, &exports, name, &body).await.map(|_| ())
}

/// A Warning Event on the ServiceExport when it became invalid or conflicting (or its reason
/// changed), a Normal one when a conflict cleared.
fn announce(
    recorder: &Recorder,
    export: &ServiceExport,
    desired: &[Condition],
    live: &[Condition],
) {
    let find = |set: &'_ [Condition], type_: &str| set.iter().find(|c| c.type_ == type_).cloned();
    let reference = export.object_ref(&());
    let publish = |type_, reason: &str, message: &str| {
        crate::events::publish(recorder, &reference, type_, reason, message);
    };
    let changed = |type_: &str, reason: &str| find(live, type_).is_none_or(|c| c.reason != reason);
    if let Some(valid) = find(desired, "Valid")
        && valid.status == "False"
        && changed("Valid", &valid.reason)
    {
        publish(EventType::Warning, &valid.reason, &valid.message);
    }
    let Some(conflict) = find(desired, "Conflict") else {
        return;
    };
    if conflict.status == "True" && changed("Conflict", &conflict.reason) {
        let reason = conflict.reason.split(',').next().unwrap_or("Conflict");
        publish(EventType::Warning, reason, &conflict.message);
    } else if conflict.status != "True"
        && find(live, "Conflict").is_some_and(|c| c.status == "True")
    {
        publish(EventType::Normal, &conflict.reason, &conflict.message);
    }
}
