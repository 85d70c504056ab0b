//! Federated object status: per-cluster propagation status values, the `Propagation`
//! condition and its reasons (docs/kubefed-compatibility.md §1.6 and §2.4, KubeFed
//! `sync/status/status.go`).
//!
//! [`compute_status`] turns per-cluster outcomes into the new `status` and says whether it
//! differs from the previous one, so the controller writes only on change. Time is an input.
//!
//! Differences from KubeFed, all additive: `status.clusters` is sorted by name (KubeFed used Go
//! map order), entries and the condition carry a `message`, and `lastUpdateTime` also moves
//! when member objects were updated without any status change (the intent of KubeFed's code,
//! which only did so with raw status collection enabled).

use std::collections::BTreeMap;

use hubfed_api::federated::{
    ClusterPropagationStatus, DriftRecord, FederatedCondition, FederatedStatus,
    READY_CONDITION_TYPE,
};
use serde_json::Value;

use crate::readiness::Readiness;

/// Type of the only condition KubeFed sets on federated objects.
pub const PROPAGATION_CONDITION: &str = "Propagation";

/// How many failing clusters the condition message names before summarising.
const MESSAGE_CLUSTER_LIMIT: usize = 10;

/// `status.clusters[].status` values: the API type, KubeFed's `PropagationStatus`.
pub use hubfed_api::federated::PropagationStatus;

/// Reasons of the `Propagation` condition (KubeFed `AggregateReason`); `Success` is `""`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AggregateReason {
    #[default]
    Success,
    ClusterRetrievalFailed,
    ComputePlacementFailed,
    CheckClusters,
    NamespaceNotFederated,
}

impl AggregateReason {
    /// The wire value; `""` for `Success`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "",
            Self::ClusterRetrievalFailed => "ClusterRetrievalFailed",
            Self::ComputePlacementFailed => "ComputePlacementFailed",
            Self::CheckClusters => "CheckClusters",
            Self::NamespaceNotFederated => "NamespaceNotFederated",
        }
    }
}

/// What happened in one cluster during a reconcile.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterOutcome {
    pub cluster: String,
    pub status: PropagationStatus,
    /// Why, when `status` is not `Ok` (e.g. the member API's error message).
    pub message: Option<String>,
    /// The member object's `.status`, when remote status collection is on.
    pub remote_status: Option<Value>,
    /// A change made behind hubfed's back, seen in this reconcile.
    pub drift: Option<DriftRecord>,
}

impl ClusterOutcome {
    /// A successful outcome without message or remote status.
    pub fn ok(cluster: impl Into<String>) -> Self {
        Self {
            cluster: cluster.into(),
            status: PropagationStatus::Ok,
            message: None,
            remote_status: None,
            drift: None,
        }
    }

    /// A failed outcome with a message.
    pub fn failed(
        cluster: impl Into<String>,
        status: PropagationStatus,
        message: impl Into<String>,
    ) -> Self {
        Self {
            cluster: cluster.into(),
            status,
            message: Some(message.into()),
            remote_status: None,
            drift: None,
        }
    }
}

/// Everything [`compute_status`] needs besides the previous status.
#[derive(Clone, Debug, Default)]
pub struct StatusInput<'a> {
    /// `metadata.generation` of the federated object; becomes `observedGeneration`.
    pub generation: i64,
    /// The reason decided before dispatch: `Success`, `ClusterRetrievalFailed`,
    /// `ComputePlacementFailed` or `NamespaceNotFederated`. `CheckClusters` is derived here.
    pub reason: AggregateReason,
    /// Explanation for a pre-dispatch failure (e.g. the invalid selector).
    pub reason_message: Option<&'a str>,
    /// One entry per cluster that belongs in `status.clusters`.
    pub outcomes: &'a [ClusterOutcome],
    /// Whether any member object was created, updated or deleted in this reconcile.
    pub resources_updated: bool,
    /// Remote status collection is on: a cluster without `remote_status` needs checking.
    pub remote_status_collection: bool,
    /// Placement names that are not joined clusters; mentioned in the condition message.
    pub unknown_clusters: &'a [String],
    /// RFC 3339 time of this reconcile.
    pub now: &'a str,
    /// Readiness of each placed cluster's copy (hubfed's `Ready` condition and `status.ready`);
    /// `None` leaves both as they were (a status written during deletion).
    pub readiness: Option<&'a [(String, Readiness)]>,
}

/// The new status and whether it differs from the previous one.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusUpdate {
    pub status: FederatedStatus,
    pub changed: bool,
}

/// Computes `status` from this reconcile's outcomes (KubeFed `SetFederatedStatus`).
///
/// The condition is `True` when the reason stays `Success`, `False` otherwise. A pre-dispatch
/// reason wins; else any cluster not `Ok` (or without remote status when collected) makes it
/// `CheckClusters`. `lastTransitionTime` changes only when status or reason change;
/// `lastUpdateTime` also when `status.clusters` changed or members were updated. Conditions of
/// other types are kept as they are.
pub fn compute_status(previous: Option<&FederatedStatus>, input: &StatusInput<'_>) -> StatusUpdate {
    let previous_status = previous.cloned().unwrap_or_default();

    let mut by_cluster: BTreeMap<&str, &ClusterOutcome> = BTreeMap::new();
    for outcome in input.outcomes {
        by_cluster.insert(&outcome.cluster, outcome);
    }
    let failing: Vec<&ClusterOutcome> = by_cluster
        .values()
        .copied()
        .filter(|o| {
            o.status != PropagationStatus::Ok
                || (input.remote_status_collection && o.remote_status.is_none())
        })
        .collect();

    let reason = if input.reason == AggregateReason::Success && !failing.is_empty() {
        AggregateReason::CheckClusters
    } else {
        input.reason
    };

    let clusters = cluster_entries(&by_cluster, input, &previous_status.clusters);
    let clusters_changed = clusters != previous_status.clusters;
    let message = condition_message(reason, input, &failing, by_cluster.len());
    let condition = propagation_condition(
        &previous_status.conditions,
        reason,
        message,
        input,
        clusters_changed,
    );

    let mut conditions = previous_status.conditions.clone();
    replace_condition(&mut conditions, condition);
    let mut ready = previous_status.ready.clone();
    if let Some(readiness) = input.readiness {
        let (condition, count) = ready_condition(&conditions, readiness, input.now);
        replace_condition(&mut conditions, condition);
        ready = Some(count);
    }

    let status = FederatedStatus {
        observed_generation: Some(input.generation),
        conditions,
        clusters,
        ready,
    };
    let changed = previous != Some(&status);
    StatusUpdate { status, changed }
}

/// `status.clusters[]`: one entry per outcome, with its readiness and its last drift.
fn cluster_entries(
    by_cluster: &BTreeMap<&str, &ClusterOutcome>,
    input: &StatusInput<'_>,
    previous: &[ClusterPropagationStatus],
) -> Vec<ClusterPropagationStatus> {
    let readiness_of = |cluster: &str| {
        input
            .readiness
            .and_then(|all| all.iter().find(|(name, _)| name == cluster))
            .map(|(_, readiness)| readiness)
    };
    by_cluster
        .values()
        .map(|o| ClusterPropagationStatus {
            name: o.cluster.clone(),
            status: (o.status != PropagationStatus::Ok).then(|| o.status.as_str().to_owned()),
            message: o.message.clone(),
            remote_status: o.remote_status.clone(),
            ready: readiness_of(&o.cluster).map(Readiness::is_ready),
            ready_message: match readiness_of(&o.cluster) {
                Some(Readiness::NotReady(why)) => Some(why.clone()),
                _ => None,
            },
            last_drift: last_drift(
                o.drift.as_ref(),
                previous
                    .iter()
                    .find(|c| c.name == o.cluster)
                    .and_then(|c| c.last_drift.as_ref()),
            ),
        })
        .collect()
}

/// The `Propagation` condition: `True` for `Success`; `lastTransitionTime` moves when status
/// or reason change, `lastUpdateTime` also when the clusters' entries changed or members were
/// written.
fn propagation_condition(
    conditions: &[FederatedCondition],
    reason: AggregateReason,
    message: Option<String>,
    input: &StatusInput<'_>,
    clusters_changed: bool,
) -> FederatedCondition {
    let condition_status = if reason == AggregateReason::Success {
        "True"
    } else {
        "False"
    };
    let reason_str = reason.as_str();
    let previous = conditions.iter().find(|c| c.type_ == PROPAGATION_CONDITION);
    let transition = previous.is_none_or(|c| {
        c.status != condition_status || c.reason.as_deref().unwrap_or_default() != reason_str
    });
    let last_transition_time = match previous {
        Some(c) if !transition => c.last_transition_time.clone(),
        _ => Some(input.now.to_owned()),
    };
    let last_update_time = match previous {
        Some(c) if !(transition || clusters_changed || input.resources_updated) => {
            c.last_update_time.clone()
        }
        _ => Some(input.now.to_owned()),
    };
    FederatedCondition {
        type_: PROPAGATION_CONDITION.to_owned(),
        status: condition_status.to_owned(),
        reason: (!reason_str.is_empty()).then(|| reason_str.to_owned()),
        message,
        last_update_time,
        last_transition_time,
    }
}

/// Puts `condition` in place of the one of its type, or adds it.
fn replace_condition(conditions: &mut Vec<FederatedCondition>, condition: FederatedCondition) {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing) => *existing = condition,
        None => conditions.push(condition),
    }
}

/// The last drift stays until a different one replaces it: the same drift seen again (its
/// managers, fields and action; e.g. a change left in place under `hubfed.io/drift: report`,
/// seen at every write) keeps its first time, so it causes no status write.
fn last_drift(new: Option<&DriftRecord>, previous: Option<&DriftRecord>) -> Option<DriftRecord> {
    match (new, previous) {
        (Some(new), Some(old))
            if new.action == old.action
                && new.managers == old.managers
                && new.fields == old.fields =>
        {
            Some(old.clone())
        }
        (Some(new), _) => Some(new.clone()),
        (None, old) => old.cloned(),
    }
}

/// Whether `new` differs from `previous` only in what remote status collection brings —
/// `status.clusters[].remoteStatus` and the `lastUpdateTime` that moves with it: such a write
/// may be coalesced with the next ones (a member status that changes every second must not
/// become a hub write every second).
pub fn only_remote_status_changed(
    previous: Option<&FederatedStatus>,
    new: &FederatedStatus,
) -> bool {
    let Some(previous) = previous else {
        return false;
    };
    let strip = |status: &FederatedStatus| {
        let mut status = status.clone();
        for cluster in &mut status.clusters {
            cluster.remote_status = None;
        }
        for condition in &mut status.conditions {
            condition.last_update_time = None;
        }
        status
    };
    previous != new && strip(previous) == strip(new)
}

/// The `Ready` condition — `True` when every placed cluster's copy is ready (also when none
/// is placed), else `False` naming the clusters that are not and why — and the count for
/// `status.ready`. `lastTransitionTime` moves only when the status flips; `lastUpdateTime`
/// when the message changes too.
fn ready_condition(
    conditions: &[FederatedCondition],
    readiness: &[(String, Readiness)],
    now: &str,
) -> (FederatedCondition, String) {
    let not_ready: Vec<String> = readiness
        .iter()
        .filter_map(|(cluster, r)| match r {
            Readiness::Ready => None,
            Readiness::NotReady(why) => Some(format!("{cluster} ({why})")),
        })
        .collect();
    let count = format!("{}/{}", readiness.len() - not_ready.len(), readiness.len());
    let (status, reason, message) = if not_ready.is_empty() {
        ("True", "AllClustersReady", None)
    } else {
        let mut listed: Vec<String> = not_ready
            .iter()
            .take(MESSAGE_CLUSTER_LIMIT)
            .cloned()
            .collect();
        if not_ready.len() > MESSAGE_CLUSTER_LIMIT {
            listed.push(format!(
                "and {} more",
                not_ready.len() - MESSAGE_CLUSTER_LIMIT
            ));
        }
        let message = format!(
            "{} of {} placed clusters not ready: {}",
            not_ready.len(),
            readiness.len(),
            listed.join(", ")
        );
        ("False", "ClustersNotReady", Some(message))
    };
    let previous = conditions.iter().find(|c| c.type_ == READY_CONDITION_TYPE);
    let flipped = previous.is_none_or(|c| c.status != status);
    let updated = flipped || previous.is_none_or(|c| c.message != message);
    let condition = FederatedCondition {
        type_: READY_CONDITION_TYPE.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message,
        last_update_time: match previous {
            Some(c) if !updated => c.last_update_time.clone(),
            _ => Some(now.to_owned()),
        },
        last_transition_time: match previous {
            Some(c) if !flipped => c.last_transition_time.clone(),
            _ => Some(now.to_owned()),
        },
    };
    (condition, count)
}

fn condition_message(
    reason: AggregateReason,
    input: &StatusInput<'_>,
    failing: &[&ClusterOutcome],
    total: usize,
) -> Option<String> {
    let main = match reason {
        AggregateReason::Success => None,
        AggregateReason::CheckClusters => {
            let mut listed: Vec<String> = failing
                .iter()
                .take(MESSAGE_CLUSTER_LIMIT)
                .map(|o| match o.status {
                    PropagationStatus::Ok => format!("{} (no remote status)", o.cluster),
                    status => format!("{} ({})", o.cluster, status.as_str()),
                })
                .collect();
            if failing.len() > MESSAGE_CLUSTER_LIMIT {
                listed.push(format!(
                    "and {} more",
                    failing.len() - MESSAGE_CLUSTER_LIMIT
                ));
            }
            Some(format!(
                "{} of {total} clusters need attention: {}",
                failing.len(),
                listed.join(", ")
            ))
        }
        AggregateReason::NamespaceNotFederated => Some(
            input
                .reason_message
                .unwrap_or(
                    "the containing namespace has no FederatedNamespace; nothing is propagated",
                )
                .to_owned(),
        ),
        AggregateReason::ClusterRetrievalFailed | AggregateReason::ComputePlacementFailed => {
            input.reason_message.map(str::to_owned)
        }
    };
    let unknown = (!input.unknown_clusters.is_empty()).then(|| {
        format!(
            "placement names clusters that are not joined: {}",
            input.unknown_clusters.join(", ")
        )
    });
    match (main, unknown) {
        (Some(main), Some(unknown)) => Some(format!("{main}; {unknown}")),
        (main, unknown) => main.or(unknown),
    }
}

#[cfg(test)]
mod tests;
