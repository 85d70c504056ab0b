//! Whether a member object needs a write, and the ServiceExport conditions to write.

use hubfed_api::mcs::{ServiceExportConditionReason as Reason, ServiceExportConditionType};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::Value;

use super::aggregate::{ExportCondition, ExportStatus};

/// Whether `desired` (an apply body) would change `live` (the cached member object).
///
/// Every field of `desired` must be in `live` with the same value; fields only `live` has
/// (defaults, other managers' fields, server-populated metadata) are ignored. Lists are
/// compared item by item and must have the same length, so an item removed is a change.
/// Without a live object, every body is a write.
pub fn needs_write(live: Option<&Value>, desired: &Value) -> bool {
    live.is_none_or(|live| !contains(live, desired))
}

fn contains(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (Value::Object(live), Value::Object(desired)) => desired.iter().all(|(key, value)| {
            live.get(key).map_or_else(
                || value.is_null() || is_empty(value),
                |l| contains(l, value),
            )
        }),
        (Value::Array(live), Value::Array(desired)) => {
            live.len() == desired.len() && live.iter().zip(desired).all(|(l, d)| contains(l, d))
        }
        (live, desired) => live == desired,
    }
}

/// An empty map or list in a body: the API server drops it, so its absence is no change.
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.is_empty(),
        Value::Array(list) => list.is_empty(),
        _ => false,
    }
}

/// Whether an export's import has been written in every member that gets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportReadiness {
    /// Written everywhere: `Ready=True`, reason `Exported`.
    Exported,
    /// Not yet everywhere (a write failed, a member is not read yet): `Ready=False/Pending`.
    Pending,
    /// The export is not valid and contributes nothing: `Ready=False/Failed`.
    Failed,
}

/// The conditions `Valid`, `Conflict` and `Ready` of one ServiceExport, in that order.
///
/// A condition whose status is unchanged from `live` keeps its `lastTransitionTime`, so that
/// an unchanged export yields exactly its live conditions and [`needs_write`] says no.
pub fn export_conditions(
    status: &ExportStatus,
    readiness: ExportReadiness,
    live: &[Condition],
    now: &Time,
) -> Vec<Condition> {
    let ready = match readiness {
        ExportReadiness::Exported => ExportCondition {
            status: true,
            reason: Reason::Exported.as_str().to_owned(),
            message: "The ServiceImport is written in every member where the namespace exists."
                .to_owned(),
        },
        ExportReadiness::Pending => ExportCondition {
            status: false,
            reason: Reason::Pending.as_str().to_owned(),
            message: "The ServiceImport is not yet written in every member where the namespace \
                      exists."
                .to_owned(),
        },
        ExportReadiness::Failed => ExportCondition {
            status: false,
            reason: Reason::Failed.as_str().to_owned(),
            message: "The export is not valid: see the Valid condition.".to_owned(),
        },
    };
    [
        (ServiceExportConditionType::Valid, &status.valid),
        (ServiceExportConditionType::Conflict, &status.conflict),
        (ServiceExportConditionType::Ready, &ready),
    ]
    .into_iter()
    .map(|(type_, condition)| {
        let status = if condition.status { "True" } else { "False" };
        let since = live
            .iter()
            .find(|c| c.type_ == type_.as_str() && c.status == status)
            .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
        Condition {
            type_: type_.as_str().to_owned(),
            status: status.to_owned(),
            reason: condition.reason.clone(),
            message: condition.message.clone(),
            last_transition_time: since,
            observed_generation: None,
        }
    })
    .collect()
}

/// The conditions of a ServiceExport in a member refused a part in the ClusterSet (its
/// cluster id is invalid or another member's): `Ready=False/Failed` with the refusal, and
/// nothing else, since the export was not evaluated. An unchanged refusal keeps its
/// `lastTransitionTime`.
pub fn refused_export_conditions(refusal: &str, live: &[Condition], now: &Time) -> Vec<Condition> {
    let type_ = ServiceExportConditionType::Ready.as_str();
    let since = live
        .iter()
        .find(|c| c.type_ == type_ && c.status == "False")
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    vec![Condition {
        type_: type_.to_owned(),
        status: "False".to_owned(),
        reason: Reason::Failed.as_str().to_owned(),
        message: format!("This cluster takes no part in multi-cluster services: {refusal}"),
        last_transition_time: since,
        observed_generation: None,
    }]
}

/// What to do about a member's ClusterProperty `clusterset.k8s.io`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterSetProperty {
    /// It says this ClusterSet.
    Held,
    /// Absent: hubfed creates it.
    Write,
    /// It names another ClusterSet: the member takes no part, with this message.
    Refused(String),
}

/// Decides about a member's `clusterset.k8s.io` from its value `live` and this ClusterSet's
/// name `wanted`.
///
/// KEP-2149: a cluster is a member of one ClusterSet at a time. hubfed never rewrites the
/// property of a member another ClusterSet claims.
pub fn cluster_set_property(live: Option<&str>, wanted: &str) -> ClusterSetProperty {
    match live {
        None => ClusterSetProperty::Write,
        Some(value) if value == wanted => ClusterSetProperty::Held,
        Some(value) => ClusterSetProperty::Refused(format!(
            "The member's ClusterProperty \"clusterset.k8s.io\" says it is in the ClusterSet \
             {value:?}, not {wanted:?}: a cluster is in one ClusterSet at a time. Delete the \
             property or unjoin the member."
        )),
    }
}
