//! The per-cluster plan for one federated object (docs/kubefed-compatibility.md §2.4, KubeFed
//! `sync/controller.go:syncToClusters` / `ensureDeletion` and `dispatch/managed.go`), as data in,
//! data out: the controller observes, calls [`plan`], carries out each [`ClusterAction`] with
//! server-side apply / delete / label removal, then reports outcomes to
//! [`crate::status::compute_status`] (starting from [`Plan::expected_outcomes`]).
//!
//! Sync (object not being deleted), for every joined cluster in name order:
//! - not ready: `ClusterNotReady` if selected, else skipped;
//! - the member cache failed (or the type is not served there): `CachedRetrievalFailed` if
//!   selected, else nothing — a cluster the object is not placed on never holds it up, and a
//!   copy left there is garbage collected once the cache lists;
//! - not selected: a managed member object is deleted (with the `kubefed.io/deleteoption`
//!   options); one being deleted is waited for; the hub's own namespace only loses its managed
//!   label (deleting it would delete the FederatedNamespace with it), and a namespace is deleted
//!   only where the cluster is provably not the hub ([`crate::hub`]);
//! - selected: `kubefed.io/managed: "false"` ⇒ `ManagedLabelFalse`; an unmanaged existing
//!   object ⇒ `AlreadyExists` unless adoption is enabled (or it is the hub's namespace); else the
//!   desired object is applied when [`crate::version::needs_apply`] says so.
//!
//! Deletion (deletion timestamp set and the `kubefed.io/sync-controller` finalizer present) is
//! the same with an empty placement: managed member objects in every cluster are deleted
//! (or, with `kubefed.io/orphan: "true"`, unlabelled). Unlike KubeFed, a placed cluster that is
//! not ready does not hold the deletion up: it is listed in [`Plan::leftovers`], the controller
//! records that a copy may remain there, and garbage collection ([`crate::gc`]) removes it
//! when the cluster is back.
//!
//! Every desired object carries the control plane's proof of ownership
//! ([`crate::gc::OWNER_ANNOTATION`]) when the control plane and the object's UID are known.
//!
//! Objects without the managed label are never deleted or unlabelled.

use std::collections::BTreeMap;

use hubfed_api::federated::FederatedSpec;
use hubfed_api::names::{
    DELETE_OPTION_ANNOTATION, DESIRED_HASH_ANNOTATION, MANAGED_LABEL, ORPHAN_ANNOTATION,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions;
use serde_json::Value;

use crate::desired::{DesiredObject, TargetType, WarningEvent, desired_object, template_warnings};
use crate::gc::{OWNER_ANNOTATION, owner};
use crate::hub::{ClusterIdentity, HubNamespace, NamespaceRole, namespace_role};
use crate::placement::{
    ClusterInfo, ControlPlaneScope, NamespaceFederation, PlacementDecision, compute_placement,
    is_system_namespace,
};
use crate::status::{AggregateReason, ClusterOutcome, PropagationStatus};
use crate::version::{
    RecordedApply, desired_hash, needs_apply, overrides_version, template_version,
};
use crate::{CoreError, Result};

/// The federated object, as far as planning cares.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FederatedObject {
    pub name: String,
    /// `None` only for cluster-scoped federated types.
    pub namespace: Option<String>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    pub spec: FederatedSpec,
    pub annotations: BTreeMap<String, String>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `metadata.finalizers` contains `kubefed.io/sync-controller`.
    pub has_sync_finalizer: bool,
}

/// A member object as the member cache shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberObject {
    /// Value of the `kubefed.io/managed` label, if any.
    pub managed_label: Option<String>,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// [`crate::version::object_version`] of the object.
    pub version: String,
    /// `metadata.uid`.
    pub uid: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Whether its workload is up ([`crate::readiness`]).
    pub readiness: crate::readiness::Readiness,
    /// Its `.status`, when the type's status is collected.
    pub remote_status: Option<serde_json::Value>,
}

impl MemberObject {
    /// Carries `kubefed.io/managed: "true"`.
    pub fn is_managed(&self) -> bool {
        self.managed_label.as_deref() == Some("true")
    }
}

/// What is known about the member object in one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum MemberObservation {
    /// Not in the cache (the cache may hold only managed objects).
    #[default]
    Absent,
    Present(MemberObject),
    /// The cache could not be read; the message says why.
    RetrievalFailed(String),
    /// The cluster does not serve the type (its CRD is missing there): it holds no copy.
    NotServed,
}

/// Everything [`plan`] needs.
#[derive(Clone, Debug)]
pub struct PlanInput<'a> {
    pub object: &'a FederatedObject,
    pub target: &'a TargetType,
    /// Every joined cluster.
    pub clusters: &'a [ClusterInfo],
    /// The containing namespace's FederatedNamespace, for namespaced targets.
    pub namespace: NamespaceFederation<'a>,
    pub scope: ControlPlaneScope,
    /// The control plane's namespace (a system namespace for `Namespace` targets).
    pub kubefed_namespace: &'a str,
    /// The control plane's identity for [`crate::gc::OWNER_ANNOTATION`], if known.
    pub control_plane: Option<&'a str>,
    /// For `Namespace` targets: whether each joined cluster is the hub itself (a missing
    /// entry is unknown). Not read for other targets.
    pub identities: &'a BTreeMap<String, ClusterIdentity>,
    /// For `Namespace` targets: the hub's own namespace of the object's name, read only when a
    /// plan asks for it ([`Plan::needs_hub_namespace`]).
    pub hub_namespace: HubNamespace<'a>,
    /// For namespaced objects: the hub's namespace that holds the object, read only when a
    /// sync plan would delete a copy ([`Plan::needs_containing_namespace`]).
    pub containing_namespace: ContainingNamespace<'a>,
    /// Clusters that reach the same API server as other joined clusters
    /// ([`crate::hub::duplicate_clusters`]): nothing is written or deleted there.
    pub duplicates: &'a BTreeMap<String, Vec<String>>,
    /// KubeFedConfig `spec.syncController.adoptResources == Enabled`.
    pub adopt_resources: bool,
    /// Member observations by cluster name; a missing entry means [`MemberObservation::Absent`].
    pub members: &'a BTreeMap<String, MemberObservation>,
    /// The last successful applies by cluster name (only entries still valid for the current
    /// template and overrides versions, see [`crate::version::recorded_cluster_versions`]).
    pub recorded: &'a BTreeMap<String, RecordedApply>,
}

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
    /// ([`is_system_namespace`]).
    SystemNamespace,
    /// A FederatedNamespace not named like its containing namespace (KubeFed event
    /// `InvalidName`).
    InvalidNamespaceName,
    /// Being deleted without the sync finalizer: cleanup already finished.
    FinalizerAbsent,
    /// Not being deleted yet, but the hub's namespace that holds it is: its own deletion is
    /// on its way and decides the copies' fate ([`ContainingNamespace::Deleting`]).
    NamespaceDeleting,
}

/// The hub's namespace that holds a namespaced federated object (for a FederatedNamespace,
/// the namespace it federates).
///
/// When it is deleted, the API server's namespace controller deletes the federated objects in
/// it in no set order: a FederatedNamespace that goes first leaves the other objects "not
/// federated" for a moment, and a sync plan would then delete their copies — also those whose
/// `kubefed.io/orphan: "true"` asks to keep them. While the namespace is being deleted, no
/// sync plan deletes a copy: each object's own deletion, which follows, decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ContainingNamespace<'a> {
    /// Not read: read only when a sync plan would delete a copy.
    #[default]
    NotRead,
    Active,
    /// Being deleted, or already gone.
    Deleting,
    /// It could not be read; the message says why.
    Unreadable(&'a str),
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
    /// A namespace would be deleted in a member but [`PlanInput::hub_namespace`] was not read:
    /// read the hub's namespace and plan again before carrying anything out.
    pub needs_hub_namespace: bool,
    /// A copy of a namespaced object would be deleted but [`PlanInput::containing_namespace`]
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

/// A server-side apply of the desired object.
#[derive(Clone, Debug, PartialEq)]
pub struct ApplyAction {
    /// The apply body.
    pub object: Value,
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

/// Whether the federated object asks to keep member objects on deletion
/// (`kubefed.io/orphan: "true"`).
pub fn is_orphaning(annotations: &BTreeMap<String, String>) -> bool {
    annotations.get(ORPHAN_ANNOTATION).map(String::as_str) == Some("true")
}

/// The `metav1.DeleteOptions` in the `kubefed.io/deleteoption` annotation, if any.
///
/// hubfed uses them for every member deletion, including clusters dropped from placement
/// (KubeFed used them only when the federated object itself was deleted).
pub fn delete_options(annotations: &BTreeMap<String, String>) -> Result<Option<DeleteOptions>> {
    annotations
        .get(DELETE_OPTION_ANNOTATION)
        .map(|raw| {
            serde_json::from_str(raw).map_err(|source| CoreError::InvalidDeleteOptions { source })
        })
        .transpose()
}

/// Plans one reconcile of a federated object.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let spec = &input.object.spec;
    let mut plan = Plan {
        disposition: Disposition::Sync,
        finalizer: FinalizerAction::Ensure,
        placement: PlacementDecision::default(),
        reason: AggregateReason::Success,
        reason_message: None,
        clusters: Vec::new(),
        template_version: template_version(spec.template.as_ref()),
        overrides_version: overrides_version(spec.overrides.as_deref()),
        warnings: template_warnings(spec),
        needs_hub_namespace: false,
        needs_containing_namespace: false,
        hub_namespace_in: Vec::new(),
        verify_absent_in: Vec::new(),
        leftovers: Vec::new(),
    };

    if let Some(reason) = ignore_reason(input) {
        plan.disposition = Disposition::Ignore(reason);
        plan.finalizer = FinalizerAction::Untouched;
        if reason == IgnoreReason::InvalidNamespaceName {
            plan.warnings.push(WarningEvent {
                reason: "InvalidName",
                message: "The name of a federated namespace must match the name of its \
                          containing namespace."
                    .to_owned(),
            });
        }
        return plan;
    }

    let placement = compute_placement(
        spec.placement.as_ref(),
        input.namespace,
        input.scope,
        input.clusters,
    );
    if input.object.deleting {
        return plan_deletion(input, plan, placement.ok());
    }

    match placement {
        Ok(decision) => plan.placement = decision,
        Err(err) => {
            plan.reason = AggregateReason::ComputePlacementFailed;
            plan.reason_message = Some(err.to_string());
            return plan;
        }
    }
    if plan.placement.namespace_not_federated {
        plan.reason = AggregateReason::NamespaceNotFederated;
    }

    let options = delete_options(&input.object.annotations);
    for cluster in sorted(input.clusters) {
        let selected = plan.placement.clusters.contains(&cluster.name);
        if let Some(action) = sync_action(input, &mut plan, cluster, selected, &options) {
            plan.clusters.push(ClusterPlan {
                cluster: cluster.name.clone(),
                action,
            });
        }
    }
    hold_deletions_in_deleting_namespace(input, plan)
}

/// A sync plan deletes no copy of a namespaced object while the hub's namespace holding it
/// is being deleted ([`ContainingNamespace`]): the object is left alone until its own deletion
/// starts. Until the namespace has been read, or when it cannot be, the deletions are held.
fn hold_deletions_in_deleting_namespace(input: &PlanInput<'_>, mut plan: Plan) -> Plan {
    let Some(namespace) = input.object.namespace.as_deref() else {
        return plan;
    };
    let deletes = |p: &Plan| {
        p.clusters
            .iter()
            .any(|c| matches!(c.action, ClusterAction::Delete(_)))
    };
    if !deletes(&plan) {
        return plan;
    }
    let message = match input.containing_namespace {
        ContainingNamespace::Active => return plan,
        ContainingNamespace::Deleting => {
            plan.disposition = Disposition::Ignore(IgnoreReason::NamespaceDeleting);
            plan.finalizer = FinalizerAction::Untouched;
            plan.clusters.clear();
            return plan;
        }
        ContainingNamespace::NotRead => {
            plan.needs_containing_namespace = true;
            format!(
                "the hub's namespace {namespace:?} has not been read yet; the copy stays until it has"
            )
        }
        ContainingNamespace::Unreadable(why) => format!(
            "the hub's namespace {namespace:?} could not be read ({why}); the copy stays until it can"
        ),
    };
    for cluster in &mut plan.clusters {
        if matches!(cluster.action, ClusterAction::Delete(_)) {
            cluster.action = ClusterAction::Blocked {
                status: PropagationStatus::RetrievalFailed,
                message: message.clone(),
            };
        }
    }
    plan
}

fn ignore_reason(input: &PlanInput<'_>) -> Option<IgnoreReason> {
    let object = input.object;
    if input.target.is_namespace() {
        if object.namespace.as_deref() != Some(object.name.as_str()) {
            return Some(IgnoreReason::InvalidNamespaceName);
        }
        if is_system_namespace(&object.name, input.kubefed_namespace) {
            return Some(IgnoreReason::SystemNamespace);
        }
    }
    if object.deleting && !object.has_sync_finalizer {
        return Some(IgnoreReason::FinalizerAbsent);
    }
    None
}

fn sorted(clusters: &[ClusterInfo]) -> Vec<&ClusterInfo> {
    let mut sorted: Vec<&ClusterInfo> = clusters.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    sorted
}

fn observation<'a>(input: &PlanInput<'a>, cluster: &str) -> &'a MemberObservation {
    const ABSENT: &MemberObservation = &MemberObservation::Absent;
    input.members.get(cluster).unwrap_or(ABSENT)
}

/// What the member copy is, for a decision to delete it: always [`NamespaceRole::Member`]
/// unless the target is `Namespace` (KubeFed `IsNamespaceInHostCluster`, made fail-safe).
fn member_role(input: &PlanInput<'_>, cluster: &str, member: &MemberObject) -> NamespaceRole {
    if !input.target.is_namespace() {
        return NamespaceRole::Member;
    }
    namespace_role(
        input.identities.get(cluster),
        member.uid.as_deref(),
        input.hub_namespace,
    )
}

/// The member is known to be the hub's own namespace (for adoption: it always exists).
fn is_hub_namespace(input: &PlanInput<'_>, cluster: &str, member: Option<&MemberObject>) -> bool {
    match member {
        Some(member) => member_role(input, cluster, member) == NamespaceRole::Hub,
        None => {
            input.target.is_namespace()
                && input.identities.get(cluster) == Some(&ClusterIdentity::Hub)
        }
    }
}

/// Removes a managed copy that is no longer wanted: delete it, or only unlabel the hub's own
/// namespace; block while that cannot be told apart. Records the hub's namespace in the plan.
fn removal(
    input: &PlanInput<'_>,
    plan: &mut Plan,
    cluster: &str,
    member: &MemberObject,
    options: &Result<Option<DeleteOptions>>,
) -> ClusterAction {
    match member_role(input, cluster, member) {
        NamespaceRole::Member => delete_action(options, member.uid.as_deref()),
        NamespaceRole::Hub => {
            plan.hub_namespace_in.push(cluster.to_owned());
            ClusterAction::RemoveManagedLabel
        }
        NamespaceRole::NeedsHubNamespace => {
            plan.needs_hub_namespace = true;
            identity_unknown("the hub's namespace has not been read yet".to_owned())
        }
        NamespaceRole::Unknown(message) => identity_unknown(message),
    }
}

fn identity_unknown(message: String) -> ClusterAction {
    ClusterAction::Blocked {
        status: PropagationStatus::ClusterIdentityUnknown,
        message,
    }
}

fn cache_failed(message: String) -> ClusterAction {
    ClusterAction::Blocked {
        status: PropagationStatus::CachedRetrievalFailed,
        message,
    }
}

fn not_served(input: &PlanInput<'_>) -> ClusterAction {
    let target = input.target;
    cache_failed(format!(
        "the cluster does not serve {} ({}/{}): install its CustomResourceDefinition there, \
         or leave the cluster out of the placement",
        target.kind, target.group, target.version
    ))
}

fn not_ready() -> ClusterAction {
    ClusterAction::Blocked {
        status: PropagationStatus::ClusterNotReady,
        message: "Cluster not ready".to_owned(),
    }
}

fn delete_action(options: &Result<Option<DeleteOptions>>, uid: Option<&str>) -> ClusterAction {
    match options {
        Ok(options) => ClusterAction::Delete(DeleteAction {
            options: options.clone(),
            uid: uid.map(str::to_owned),
        }),
        Err(err) => ClusterAction::Blocked {
            status: PropagationStatus::DeletionFailed,
            message: err.to_string(),
        },
    }
}

/// Why the object must never be written or deleted in `cluster`, if it must not. Only a
/// namespaced control plane propagates into its own namespace, where the members keep the
/// control plane's credentials and the hub keeps the whole control plane:
/// - on the hub joined as a member (or a cluster that may be the hub), nothing;
/// - in a member, the join's ServiceAccount and its token Secret, named `<cluster>-<hub>` by
///   `hubfedctl join` and `kubefedctl join` (the control plane's own RBAC is named
///   `kubefed-controller-manager:…`, which no federated object can be named).
fn protection(input: &PlanInput<'_>, cluster: &str) -> Option<ClusterAction> {
    let target = input.target;
    let in_control_plane_namespace =
        target.namespaced && input.object.namespace.as_deref() == Some(input.kubefed_namespace);
    if !in_control_plane_namespace {
        return None;
    }
    let namespace = input.kubefed_namespace;
    match input.identities.get(cluster) {
        Some(ClusterIdentity::NotHub) => {}
        Some(ClusterIdentity::Hub) => {
            return Some(protected(format!(
                "the cluster is the hub, and namespace {namespace} there holds the control plane"
            )));
        }
        Some(ClusterIdentity::Unknown(why)) => {
            return Some(identity_unknown(format!(
                "cannot tell whether this cluster is the hub, whose namespace {namespace} holds \
                 the control plane: {why}"
            )));
        }
        None => {
            return Some(identity_unknown(
                "whether this cluster is the hub is not known yet".to_owned(),
            ));
        }
    }
    let credential = target.group.is_empty()
        && matches!(target.kind.as_str(), "ServiceAccount" | "Secret")
        && input.object.name.starts_with(&format!("{cluster}-"));
    credential.then(|| {
        protected(format!(
            "{} {namespace}/{} is named like the control plane's credentials in this cluster \
             (hubfedctl join's <cluster>-<hub>)",
            target.kind, input.object.name
        ))
    })
}

/// Two joined names for one API server would undo each other's work (a copy placed through
/// one is not placed through the other, which deletes it): neither is used.
fn duplicate(input: &PlanInput<'_>, cluster: &str) -> Option<ClusterAction> {
    let others = input.duplicates.get(cluster)?;
    Some(ClusterAction::Blocked {
        status: PropagationStatus::DuplicateCluster,
        message: format!(
            "the cluster reaches the same API server as {} (same kube-system UID): nothing is \
             written or deleted there until one of them is unjoined",
            others.join(", ")
        ),
    })
}

fn protected(message: String) -> ClusterAction {
    ClusterAction::Blocked {
        status: PropagationStatus::Protected,
        message,
    }
}

fn sync_action(
    input: &PlanInput<'_>,
    plan: &mut Plan,
    cluster: &ClusterInfo,
    selected: bool,
    options: &Result<Option<DeleteOptions>>,
) -> Option<ClusterAction> {
    if !cluster.ready {
        return selected.then(not_ready);
    }
    if let Some(refusal) = duplicate(input, &cluster.name) {
        return selected.then_some(refusal);
    }
    if let Some(refusal) = protection(input, &cluster.name) {
        return selected.then_some(refusal);
    }
    let member = match observation(input, &cluster.name) {
        MemberObservation::RetrievalFailed(message) => {
            return selected.then(|| cache_failed(message.clone()));
        }
        MemberObservation::NotServed => return selected.then(|| not_served(input)),
        MemberObservation::Absent => None,
        MemberObservation::Present(member) => Some(member),
    };
    if !selected {
        let member = member.filter(|m| m.is_managed())?;
        return Some(if member.terminating {
            ClusterAction::WaitForRemoval
        } else {
            removal(input, plan, &cluster.name, member, options)
        });
    }
    let hub_namespace = is_hub_namespace(input, &cluster.name, member);
    if let Some(refusal) = member.and_then(|m| refusal_to_take(input, m, hub_namespace)) {
        return Some(refusal);
    }
    let (desired, hash) = match desired_for(input, &cluster.name, member.is_some()) {
        Ok(desired) => desired,
        Err((status, message)) => return Some(ClusterAction::Blocked { status, message }),
    };
    let apply = |creates: bool, create_only: bool, adopts: bool| {
        ClusterAction::Apply(ApplyAction {
            object: desired.object.clone(),
            desired_hash: hash.clone(),
            creates,
            create_only,
            adopts,
            released_fields: desired.released_fields.clone(),
        })
    };
    Some(match member {
        None => apply(true, !input.adopt_resources && !hub_namespace, false),
        Some(member) if !member.is_managed() => apply(false, false, true),
        Some(member) => {
            // The hash stored on the copy survives restarts; the recorded one may not.
            let stored_hash = member.annotations.get(DESIRED_HASH_ANNOTATION);
            if stored_hash != Some(&hash)
                || needs_apply(
                    input.recorded.get(&cluster.name),
                    &member.version,
                    &desired.object,
                    &hash,
                    &member.labels,
                    &member.annotations,
                )
            {
                apply(false, false, false)
            } else {
                ClusterAction::UpToDate
            }
        }
    })
}

/// Why an existing object in a selected cluster cannot be taken or updated now, if so: a
/// managed label `false`, an unmanaged object without adoption (the hub's own namespace
/// excepted), or a copy on its way out.
fn refusal_to_take(
    input: &PlanInput<'_>,
    member: &MemberObject,
    hub_namespace: bool,
) -> Option<ClusterAction> {
    if member.managed_label.as_deref() == Some("false") {
        return Some(ClusterAction::Blocked {
            status: PropagationStatus::ManagedLabelFalse,
            message: format!("Unable to manage the object which has label {MANAGED_LABEL}: false"),
        });
    }
    if !member.is_managed() && !input.adopt_resources && !hub_namespace {
        return Some(ClusterAction::Blocked {
            status: PropagationStatus::AlreadyExists,
            message: "Resource pre-exist in cluster".to_owned(),
        });
    }
    member.terminating.then_some(ClusterAction::WaitForRemoval)
}

/// The object to apply to `cluster` with this control plane's proof of ownership and its
/// desired hash, or the status and message that say why it cannot be computed.
fn desired_for(
    input: &PlanInput<'_>,
    cluster: &str,
    exists: bool,
) -> std::result::Result<(DesiredObject, String), (PropagationStatus, String)> {
    let object = input.object;
    let mut desired = desired_object(
        input.target,
        &object.name,
        object.namespace.as_deref(),
        &object.spec,
        cluster,
        exists,
    )
    .map_err(|err| {
        let status = match err {
            CoreError::InvalidTemplate { .. } => PropagationStatus::ComputeResourceFailed,
            _ => PropagationStatus::ApplyOverridesFailed,
        };
        (status, err.to_string())
    })?;
    if let (Some(plane), Some(uid)) = (input.control_plane, object.uid.as_deref()) {
        set_annotation(&mut desired.object, OWNER_ANNOTATION, owner(plane, uid));
    }
    let hash = desired_hash(&desired.object);
    set_annotation(&mut desired.object, DESIRED_HASH_ANNOTATION, hash.clone());
    Ok((desired, hash))
}

fn set_annotation(object: &mut Value, key: &str, value: String) {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if !annotations.is_object() {
            *annotations = Value::Object(serde_json::Map::new());
        }
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(key.to_owned(), Value::String(value));
        }
    }
}

fn plan_deletion(
    input: &PlanInput<'_>,
    mut plan: Plan,
    placement: Option<PlacementDecision>,
) -> Plan {
    plan.disposition = Disposition::Delete;
    plan.placement = placement.unwrap_or_default();
    if is_orphaning(&input.object.annotations) {
        return plan_orphaning(input, plan);
    }
    let options = delete_options(&input.object.annotations);
    let mut blocked = false;
    let mut remaining = false;
    for cluster in sorted(input.clusters) {
        let Some((action, copy_remains)) = removal_action(input, &mut plan, cluster, &options)
        else {
            continue;
        };
        remaining |= copy_remains;
        blocked |= matches!(action, ClusterAction::Blocked { .. });
        plan.clusters.push(ClusterPlan {
            cluster: cluster.name.clone(),
            action,
        });
    }
    plan.finalizer = if blocked || remaining {
        FinalizerAction::Keep
    } else {
        FinalizerAction::RemoveAfterVerification
    };
    plan.verify_absent_in = verify_absent_in(input, &plan);
    plan
}

/// An orphaning deletion: the managed label comes off every copy a ready cluster holds; the
/// finalizer goes unless a placed copy has not been seen yet.
fn plan_orphaning(input: &PlanInput<'_>, mut plan: Plan) -> Plan {
    plan.finalizer = FinalizerAction::Remove;
    for cluster in sorted(input.clusters) {
        let placed = plan.placement.clusters.contains(&cluster.name);
        if !cluster.ready {
            if placed {
                plan.leftovers.push(cluster.name.clone());
            }
            continue;
        }
        if protection(input, &cluster.name).is_some()
            || input.duplicates.contains_key(&cluster.name)
        {
            continue;
        }
        let action = match observation(input, &cluster.name) {
            MemberObservation::Present(member) if member.is_managed() && !member.terminating => {
                ClusterAction::RemoveManagedLabel
            }
            // A placed copy not seen yet would keep its managed label: wait for the cache.
            MemberObservation::RetrievalFailed(message) if placed => {
                plan.finalizer = FinalizerAction::Keep;
                cache_failed(message.clone())
            }
            // A copy this controller wrote that its cache does not show yet (a watch event
            // still on its way) would keep its managed label — and garbage collection would
            // then delete it: remove the label all the same (a copy really gone is a 404).
            // Placed or not: a namespaced object whose FederatedNamespace went first is
            // placed nowhere any more, its copies are still there.
            MemberObservation::Absent if input.recorded.contains_key(&cluster.name) => {
                ClusterAction::RemoveManagedLabel
            }
            _ => continue,
        };
        plan.clusters.push(ClusterPlan {
            cluster: cluster.name.clone(),
            action,
        });
    }
    plan
}

/// What a deletion does in one cluster, and whether a copy remains there to wait for; `None`
/// when the cluster has nothing to do with it (not placed and no managed copy, protected,
/// unreachable — then recorded as a leftover —, or the copy already gone).
fn removal_action(
    input: &PlanInput<'_>,
    plan: &mut Plan,
    cluster: &ClusterInfo,
    options: &Result<Option<DeleteOptions>>,
) -> Option<(ClusterAction, bool)> {
    let observed = observation(input, &cluster.name);
    let placed = plan.placement.clusters.contains(&cluster.name);
    // A cluster whose cache cannot be read blocks only if the object is placed there.
    let holds_managed = match observed {
        MemberObservation::Absent
        | MemberObservation::NotServed
        | MemberObservation::RetrievalFailed(_) => false,
        MemberObservation::Present(member) => member.is_managed(),
    };
    if !placed && !holds_managed {
        return None;
    }
    if cluster.ready && protection(input, &cluster.name).is_some() {
        // Never deleted; nothing to wait for.
        return None;
    }
    if !cluster.ready || input.duplicates.contains_key(&cluster.name) {
        // Never wait on an unreachable cluster (nor one joined twice): record it, collect
        // the copy later.
        plan.leftovers.push(cluster.name.clone());
        return None;
    }
    match observed {
        MemberObservation::Absent | MemberObservation::NotServed => None,
        MemberObservation::RetrievalFailed(message) => Some((cache_failed(message.clone()), false)),
        MemberObservation::Present(member) if !member.is_managed() => None,
        MemberObservation::Present(member) if member.terminating => {
            match member_role(input, &cluster.name, member) {
                NamespaceRole::Hub => {
                    // The hub namespace itself is going away; it takes the federated object
                    // with it, so nothing can be waited for.
                    plan.hub_namespace_in.push(cluster.name.clone());
                    return None;
                }
                NamespaceRole::NeedsHubNamespace => plan.needs_hub_namespace = true,
                NamespaceRole::Member | NamespaceRole::Unknown(_) => {}
            }
            Some((ClusterAction::WaitForRemoval, true))
        }
        MemberObservation::Present(member) => {
            Some((removal(input, plan, &cluster.name, member, options), true))
        }
    }
}

/// Where the copy's absence is verified before the finalizer goes: only where a copy was
/// expected — a cluster the object is not placed on and whose cache shows no copy is not
/// asked (a slow cluster would hold up unrelated deletions).
fn verify_absent_in(input: &PlanInput<'_>, plan: &Plan) -> Vec<String> {
    sorted(input.clusters)
        .into_iter()
        .filter(|c| c.ready && !plan.hub_namespace_in.contains(&c.name))
        .filter(|c| protection(input, &c.name).is_none())
        .filter(|c| !input.duplicates.contains_key(&c.name))
        .filter(|c| match observation(input, &c.name) {
            MemberObservation::Absent => plan.placement.clusters.contains(&c.name),
            MemberObservation::Present(_) => true,
            MemberObservation::RetrievalFailed(_) | MemberObservation::NotServed => false,
        })
        .map(|c| c.name.clone())
        .collect()
}

#[cfg(test)]
mod tests;
