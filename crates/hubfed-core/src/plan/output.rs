//! What a plan says: the object's disposition and finalizer, and one action per cluster.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions;
use serde_json::Value;

use crate::desired::WarningEvent;
use crate::placement::PlacementDecision;
use crate::status::{AggregateReason, ClusterOutcome, PropagationStatus};

/// What the controller does with the object as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Propagate to the placed clusters.
    Sync,
    /// The object is being deleted: clean up members.
    Delete,
    /// Do nothing at all: no finalizer, no status, no events except [`Plan::warnings`].
    Ignore(IgnoreReason),
}

/// Why an object is ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IgnoreReason {
    /// A FederatedNamespace for a namespace that is never propagated
    /// ([`is_system_namespace`](crate::placement::is_system_namespace)).
    SystemNamespace,
    /// A FederatedNamespace not named like its containing namespace (KubeFed event
    /// `InvalidName`).
    InvalidNamespaceName,
    /// Being deleted without the sync finalizer: cleanup already finished.
    FinalizerAbsent,
    /// Not being deleted yet, but the hub's namespace that holds it is: its own deletion is
    /// on its way and decides the copies' fate ([`ContainingNamespace::Deleting`](super::ContainingNamespace::Deleting)).
    NamespaceDeleting,
}

/// What to do with the `kubefed.io/sync-controller` finalizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalizerAction {
    /// Leave it alone (ignored objects).
    Untouched,
    /// Add it if missing, before dispatching (merge patch).
    Ensure,
    /// Deletion in progress: keep it and check again later.
    Keep,
    /// Orphaning deletion: remove it once the managed labels are off every copy. (KubeFed
    /// removed it first: a crash in between left managed copies of a federated object that
    /// no longer exists — garbage that a collector would delete.)
    Remove,
    /// No managed member object is left according to the caches: confirm with live reads
    /// that no object in a ready cluster still carries the managed label, then remove it.
    RemoveAfterVerification,
}

/// The plan for one federated object.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub disposition: Disposition,
    pub finalizer: FinalizerAction,
    pub placement: PlacementDecision,
    /// `Success`, `ComputePlacementFailed` or `NamespaceNotFederated`; input to status.
    pub reason: AggregateReason,
    /// Explanation for a `ComputePlacementFailed` reason.
    pub reason_message: Option<String>,
    /// Clusters needing an action or a status entry, sorted by name.
    pub clusters: Vec<ClusterPlan>,
    /// KubeFed `templateVersion` of this object.
    pub template_version: String,
    /// KubeFed `overridesVersion` of this object.
    pub overrides_version: String,
    /// Warning events to record on the federated object.
    pub warnings: Vec<WarningEvent>,
    /// A namespace would be deleted in a member but [`PlanInput::hub_namespace`](super::PlanInput::hub_namespace) was not read:
    /// read the hub's namespace and plan again before carrying anything out.
    pub needs_hub_namespace: bool,
    /// A copy of a namespaced object would be deleted but [`PlanInput::containing_namespace`](super::PlanInput::containing_namespace)
    /// was not read: read it and plan again (the deletions are held until then).
    pub needs_containing_namespace: bool,
    /// Clusters whose copy is the hub's own namespace: kept (unlabelled) and, on deletion,
    /// never waited for nor verified absent.
    pub hub_namespace_in: Vec<String>,
    /// With [`FinalizerAction::RemoveAfterVerification`]: the ready clusters whose caches were
    /// read, where live reads must confirm that no managed copy is left (a cluster that does
    /// not serve the type, or whose cache fails while the object is not placed there, holds
    /// nothing up; leftovers there are garbage collected).
    pub verify_absent_in: Vec<String>,
    /// Deletion: clusters that are not ready where a copy may remain once the finalizer goes
    /// (placed there, not observed). The controller records them before it removes the
    /// finalizer; garbage collection removes (or, orphaning, unlabels) such copies later.
    pub leftovers: Vec<String>,
}

impl Plan {
    /// The outcome of every cluster assuming each action succeeds; the controller replaces
    /// the entries of failed actions ([`ClusterAction::status_on_failure`]) and drops those
    /// that become `None`.
    pub fn expected_outcomes(&self) -> Vec<ClusterOutcome> {
        self.clusters
            .iter()
            .filter_map(|c| {
                c.action.status_on_success().map(|status| ClusterOutcome {
                    cluster: c.cluster.clone(),
                    status,
                    message: match &c.action {
                        ClusterAction::Blocked { message, .. } => Some(message.clone()),
                        _ => None,
                    },
                    remote_status: None,
                    drift: None,
                })
            })
            .collect()
    }
}

/// One cluster's part of a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterPlan {
    pub cluster: String,
    pub action: ClusterAction,
}

/// What to do in one cluster.
#[derive(Clone, Debug, PartialEq)]
pub enum ClusterAction {
    /// Server-side apply the desired object.
    Apply(ApplyAction),
    /// Delete the member object.
    Delete(DeleteAction),
    /// Remove the `kubefed.io/managed` label from the member object.
    RemoveManagedLabel,
    /// Selected and already current.
    UpToDate,
    /// The member object is being deleted; wait for it to go.
    WaitForRemoval,
    /// Nothing can be done; report `status` with `message`.
    Blocked {
        status: PropagationStatus,
        message: String,
    },
}

impl ClusterAction {
    /// The cluster's status when the action succeeds; `None` means no `status.clusters` entry
    /// (a successful label removal leaves the object unmanaged).
    pub fn status_on_success(&self) -> Option<PropagationStatus> {
        match self {
            Self::Apply(_) | Self::UpToDate => Some(PropagationStatus::Ok),
            // Deleted objects may linger until garbage collection; the member watch triggers
            // the next reconcile, which drops the entry.
            Self::Delete(_) | Self::WaitForRemoval => Some(PropagationStatus::WaitingForRemoval),
            Self::RemoveManagedLabel => None,
            Self::Blocked { status, .. } => Some(*status),
        }
    }

    /// The cluster's status when the action's request fails.
    pub fn status_on_failure(&self) -> Option<PropagationStatus> {
        match self {
            Self::Apply(a) if a.creates => Some(PropagationStatus::CreationFailed),
            Self::Apply(_) => Some(PropagationStatus::UpdateFailed),
            Self::Delete(_) => Some(PropagationStatus::DeletionFailed),
            Self::RemoveManagedLabel => Some(PropagationStatus::LabelRemovalFailed),
            other => other.status_on_success(),
        }
    }

    /// The cluster's status when the reconcile's dispatch deadline passes first.
    pub fn status_on_timeout(&self) -> Option<PropagationStatus> {
        match self {
            Self::Apply(a) if a.creates => Some(PropagationStatus::CreationTimedOut),
            Self::Apply(_) => Some(PropagationStatus::UpdateTimedOut),
            Self::Delete(_) => Some(PropagationStatus::DeletionTimedOut),
            Self::RemoveManagedLabel => Some(PropagationStatus::LabelRemovalTimedOut),
            other => other.status_on_success(),
        }
    }
}

/// An apply body: one desired object, shared by the clusters that get the same one and by
/// the writes that carry it out, with its JSON encoding made once for all of them (with
/// ~1 MB objects, one encoding per member request in flight was the largest share of the
/// controller's peak memory). Reads as the object ([`std::ops::Deref`]).
#[derive(Clone, Debug)]
pub struct ApplyBody(std::sync::Arc<BodyInner>);

#[derive(Debug)]
struct BodyInner {
    object: Value,
    json: std::sync::OnceLock<std::sync::Arc<[u8]>>,
}

impl ApplyBody {
    /// The body's JSON, encoded on first use.
    pub fn json(&self) -> std::sync::Arc<[u8]> {
        let json = self
            .0
            .json
            .get_or_init(|| self.0.object.to_string().into_bytes().into());
        std::sync::Arc::clone(json)
    }

    /// Whether `self` and `other` are the same body (not merely equal ones).
    pub fn same(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl From<Value> for ApplyBody {
    fn from(object: Value) -> Self {
        Self(std::sync::Arc::new(BodyInner {
            object,
            json: std::sync::OnceLock::new(),
        }))
    }
}

impl std::ops::Deref for ApplyBody {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.0.object
    }
}

impl PartialEq for ApplyBody {
    fn eq(&self, other: &Self) -> bool {
        self.same(other) || self.0.object == other.0.object
    }
}

impl serde::Serialize for ApplyBody {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.object.serialize(serializer)
    }
}

/// A server-side apply of the desired object.
#[derive(Clone, Debug, PartialEq)]
pub struct ApplyAction {
    /// The apply body; shared, not copied, by the writes that carry it out (with ~1 MB
    /// objects one copy per member per reconcile in flight was a large share of the
    /// controller's peak memory).
    pub object: ApplyBody,
    /// [`crate::version::desired_hash`] of `object`, to record after success.
    pub desired_hash: String,
    /// The member object was not observed: this creates it.
    pub creates: bool,
    /// Adoption is disabled and the object was not observed: the dispatcher must create it
    /// (e.g. POST, or apply with a create-only precondition) rather than take over an existing
    /// unmanaged object. On AlreadyExists it reads the object and plans again with it observed,
    /// which yields `AlreadyExists`.
    pub create_only: bool,
    /// An existing unmanaged object is taken over (KubeFed event: "An update will be attempted
    /// instead of a creation due to an existing resource").
    pub adopts: bool,
    /// Fields left to the member; see [`crate::desired::DesiredObject::released_fields`].
    pub released_fields: Vec<String>,
}

/// Deletion of a member object.
#[derive(Clone, Debug, PartialEq)]
pub struct DeleteAction {
    /// From the `kubefed.io/deleteoption` annotation.
    pub options: Option<DeleteOptions>,
    /// The UID of the copy that was observed, as a delete precondition: a copy replaced since
    /// (e.g. by someone else's object of the same name) is not deleted on a stale decision.
    pub uid: Option<String>,
}
