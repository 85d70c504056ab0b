//! The ServiceExports' conditions (`Valid`, `Conflict`, `Ready`) in each exporting member,
//! and an Event on the ServiceExport when its input is bad or in conflict.

use hubfed_api::mcs::{self, ServiceExport};
use hubfed_core::mcs::{
    Aggregate, ExportReadiness, ExportStatus, export_conditions, refused_export_conditions,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Resource as _;
use kube::api::Api;
use kube::runtime::events::EventType;
use serde_json::json;

use super::index::Key;
use super::reconcile::View;
use super::write::{Write, WriteFailed, apply};

/// Writes each writable exporter's conditions when they changed; `everywhere` says whether
/// the import is written in every member that gets it.
pub(super) async fn write(
    key: &Key,
    views: &[&View],
    decided: &Aggregate,
    everywhere: bool,
    now: &Time,
) -> Result<(), WriteFailed> {
    let mut result = Ok(());
    for view in views {
        let (Some(export), Some(id)) = (view.export.as_deref(), view.id()) else {
            continue;
        };
        let Some(status) = decided.exports.get(id) else {
            continue;
        };
        let readiness = match (status.valid.status, everywhere) {
            (false, _) => ExportReadiness::Failed,
            (true, true) => ExportReadiness::Exported,
            (true, false) => ExportReadiness::Pending,
        };
        let live: &[Condition] = export
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let desired = export_conditions(status, readiness, live, now);
        if desired.iter().all(|d| live.contains(d)) {
            continue;
        }
        if write_one(key, view, &desired).await.is_err() {
            result = Err(WriteFailed);
            continue;
        }
        announce(view, export, status, live);
    }
    result
}

/// Writes the refusal into a refused member's ServiceExport (`Ready=False/Failed`, nothing
/// else), with a Warning Event when it is news.
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
    let live: &[Condition] = export
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let desired = refused_export_conditions(refusal, live, now);
    if desired.as_slice() == live {
        return Ok(());
    }
    write_one(key, view, &desired).await?;
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

async fn write_one(key: &Key, view: &View, conditions: &[Condition]) -> Result<(), WriteFailed> {
    let (namespace, name) = key;
    let client = view.cluster.client.clone().ok_or(WriteFailed)?;
    let exports: Api<ServiceExport> = Api::namespaced(client, namespace);
    let body = json!({
        "apiVersion": format!("{}/{}", mcs::GROUP, mcs::VERSION),
        "kind": "ServiceExport",
        "metadata": {"name": name, "namespace": namespace},
        "status": {"conditions": conditions},
    });
    let write = Write {
        cluster: &view.cluster,
        kind: "ServiceExport",
        status: true,
    };
    apply(&write, &exports, name, &body).await.map(|_| ())
}

/// A Warning Event on the ServiceExport when it became invalid or conflicting (or its reason
/// changed), a Normal one when a conflict cleared.
fn announce(view: &View, export: &ServiceExport, status: &ExportStatus, live: &[Condition]) {
    let was = |type_: &str| live.iter().find(|c| c.type_ == type_);
    let reference = export.object_ref(&());
    let valid = &status.valid;
    let changed = |type_: &str, reason: &str| was(type_).is_none_or(|c| c.reason != reason);
    if !valid.status && changed("Valid", &valid.reason) {
        let publish = crate::events::publish;
        publish(
            &view.member.recorder,
            &reference,
            EventType::Warning,
            &valid.reason,
            &valid.message,
        );
    }
    let conflict = &status.conflict;
    if conflict.status && changed("Conflict", &conflict.reason) {
        let reason = conflict.reason.split(',').next().unwrap_or("Conflict");
        crate::events::publish(
            &view.member.recorder,
            &reference,
            EventType::Warning,
            reason,
            &conflict.message,
        );
    } else if !conflict.status && was("Conflict").is_some_and(|c| c.status == "True") {
        crate::events::publish(
            &view.member.recorder,
            &reference,
            EventType::Normal,
            &conflict.reason,
            &conflict.message,
        );
    }
}
