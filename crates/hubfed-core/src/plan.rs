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
mod tests {
    use hubfed_api::federated::Placement;
    use serde_json::json;

    use super::*;
    use crate::status::{StatusInput, compute_status};

    struct Fixture {
        object: FederatedObject,
        target: TargetType,
        clusters: Vec<ClusterInfo>,
        namespace_placement: Option<Option<Placement>>,
        scope: ControlPlaneScope,
        identities: BTreeMap<String, ClusterIdentity>,
        hub_namespace: HubNamespace<'static>,
        containing_namespace: ContainingNamespace<'static>,
        control_plane: Option<&'static str>,
        duplicates: BTreeMap<String, Vec<String>>,
        adopt_resources: bool,
        members: BTreeMap<String, MemberObservation>,
        recorded: BTreeMap<String, RecordedApply>,
    }

    impl Fixture {
        fn deployment(spec: Value) -> Self {
            Self {
                object: FederatedObject {
                    name: "web".into(),
                    namespace: Some("prod".into()),
                    spec: serde_json::from_value(spec).unwrap(),
                    ..FederatedObject::default()
                },
                target: TargetType {
                    kind: "Deployment".into(),
                    group: "apps".into(),
                    version: "v1".into(),
                    namespaced: true,
                },
                clusters: ["c1", "c2", "c3"]
                    .into_iter()
                    .map(|name| ClusterInfo {
                        name: name.into(),
                        labels: BTreeMap::from([("name".to_owned(), name.to_owned())]),
                        ready: true,
                    })
                    .collect(),
                namespace_placement: Some(Some(
                    serde_json::from_value(json!({"clusterSelector": {}})).unwrap(),
                )),
                scope: ControlPlaneScope::Cluster,
                identities: ["c1", "c2", "c3"]
                    .into_iter()
                    .map(|c| (c.to_owned(), ClusterIdentity::NotHub))
                    .collect(),
                hub_namespace: HubNamespace::Absent,
                containing_namespace: ContainingNamespace::Active,
                control_plane: None,
                duplicates: BTreeMap::new(),
                adopt_resources: true,
                members: BTreeMap::new(),
                recorded: BTreeMap::new(),
            }
        }

        fn namespace(name: &str, spec: Value) -> Self {
            let mut f = Self::deployment(spec);
            f.object.name = name.into();
            f.object.namespace = Some(name.into());
            f.target = TargetType {
                kind: "Namespace".into(),
                group: String::new(),
                version: "v1".into(),
                namespaced: false,
            };
            f.namespace_placement = None;
            f
        }

        fn member(mut self, cluster: &str, member: MemberObject) -> Self {
            self.members
                .insert(cluster.into(), MemberObservation::Present(member));
            self
        }

        fn plan(&self) -> Plan {
            let namespace = match &self.namespace_placement {
                None => NamespaceFederation::NotApplicable,
                Some(None) => NamespaceFederation::NotFederated,
                Some(Some(p)) => NamespaceFederation::Federated(Some(p)),
            };
            plan(&PlanInput {
                object: &self.object,
                target: &self.target,
                clusters: &self.clusters,
                namespace,
                scope: self.scope,
                kubefed_namespace: "kube-federation-system",
                control_plane: self.control_plane,
                duplicates: &self.duplicates,
                identities: &self.identities,
                hub_namespace: self.hub_namespace,
                containing_namespace: self.containing_namespace,
                adopt_resources: self.adopt_resources,
                members: &self.members,
                recorded: &self.recorded,
            })
        }
    }

    fn managed(version: &str) -> MemberObject {
        MemberObject {
            managed_label: Some("true".into()),
            version: version.into(),
            labels: BTreeMap::from([(MANAGED_LABEL.to_owned(), "true".to_owned())]),
            ..MemberObject::default()
        }
    }

    fn actions(plan: &Plan) -> Vec<(&str, &ClusterAction)> {
        plan.clusters
            .iter()
            .map(|c| (c.cluster.as_str(), &c.action))
            .collect()
    }

    fn apply(action: &ClusterAction) -> &ApplyAction {
        match action {
            ClusterAction::Apply(a) => a,
            other => panic!("expected Apply, got {other:?}"),
        }
    }

    fn blocked(action: &ClusterAction) -> (PropagationStatus, &str) {
        match action {
            ClusterAction::Blocked { status, message } => (*status, message.as_str()),
            other => panic!("expected Blocked, got {other:?}"),
        }
    }

    fn basic_spec() -> Value {
        json!({
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"replicas": 2}},
            "placement": {"clusters": [{"name": "c1"}, {"name": "c2"}, {"name": "ghost"}]},
            "overrides": [{"clusterName": "c2", "clusterOverrides": [{"path": "/spec/replicas", "value": 5}]}],
        })
    }

    #[test]
    fn creates_in_selected_clusters() {
        let f = Fixture::deployment(basic_spec());
        let p = f.plan();
        assert_eq!(p.disposition, Disposition::Sync);
        assert_eq!(p.finalizer, FinalizerAction::Ensure);
        assert_eq!(p.reason, AggregateReason::Success);
        assert_eq!(p.placement.unknown_clusters, ["ghost"]);
        let a = actions(&p);
        assert_eq!(a.len(), 2);
        let c1 = apply(a[0].1);
        assert_eq!(a[0].0, "c1");
        assert!(c1.creates && !c1.create_only && !c1.adopts);
        assert_eq!(c1.object["spec"]["replicas"], 2);
        assert_eq!(c1.object["metadata"]["namespace"], "prod");
        let mut hashed = c1.object.clone();
        // The template has no annotations: the hash annotation is the only one.
        hashed["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
        assert_eq!(c1.desired_hash, desired_hash(&hashed));
        assert_eq!(
            c1.object["metadata"]["annotations"][DESIRED_HASH_ANNOTATION],
            c1.desired_hash.as_str(),
            "the copy carries the hash of what was applied"
        );
        assert_eq!(apply(a[1].1).object["spec"]["replicas"], 5);
        assert_eq!(
            p.template_version,
            template_version(f.object.spec.template.as_ref())
        );
        assert_eq!(
            p.overrides_version,
            overrides_version(f.object.spec.overrides.as_deref())
        );
    }

    #[test]
    fn adoption_disabled_creates_only() {
        let mut f = Fixture::deployment(basic_spec());
        f.adopt_resources = false;
        let p = f.plan();
        assert!(apply(&p.clusters[0].action).create_only);

        let f = f.member(
            "c1",
            MemberObject {
                version: "gen:1".into(),
                ..MemberObject::default()
            },
        );
        let p = f.plan();
        assert_eq!(
            blocked(&p.clusters[0].action),
            (
                PropagationStatus::AlreadyExists,
                "Resource pre-exist in cluster"
            )
        );
    }

    #[test]
    fn adoption_enabled_takes_over_unmanaged_objects() {
        let f = Fixture::deployment(basic_spec()).member(
            "c1",
            MemberObject {
                version: "gen:1".into(),
                ..MemberObject::default()
            },
        );
        let a = apply(&f.plan().clusters[0].action).clone();
        assert!(a.adopts && !a.creates && !a.create_only);
    }

    #[test]
    fn managed_label_false_is_refused() {
        let f = Fixture::deployment(basic_spec()).member(
            "c1",
            MemberObject {
                managed_label: Some("false".into()),
                version: "gen:1".into(),
                ..MemberObject::default()
            },
        );
        assert_eq!(
            blocked(&f.plan().clusters[0].action),
            (
                PropagationStatus::ManagedLabelFalse,
                "Unable to manage the object which has label kubefed.io/managed: false"
            )
        );
    }

    #[test]
    fn current_members_are_left_alone_and_drift_is_corrected() {
        let f = Fixture::deployment(basic_spec());
        let created = f.plan();
        let desired = apply(&created.clusters[0].action).clone();

        let mut member = managed("gen:1");
        member.labels.insert("app".into(), "web".into());
        member
            .annotations
            .insert(DESIRED_HASH_ANNOTATION.into(), desired.desired_hash.clone());
        let mut f = f.member("c1", member);
        f.recorded.insert(
            "c1".into(),
            RecordedApply {
                version: "gen:1".into(),
                desired_hash: Some(desired.desired_hash.clone()),
            },
        );
        assert_eq!(f.plan().clusters[0].action, ClusterAction::UpToDate);

        // Issue 9 (6): after a restart only the PropagatedVersion is left (no hash recorded)
        // and a change outside template and overrides (retainReplicas) changed the desired
        // object: the hash stored on the copy says so.
        f.recorded.insert(
            "c1".into(),
            RecordedApply {
                version: "gen:1".into(),
                desired_hash: None,
            },
        );
        assert_eq!(f.plan().clusters[0].action, ClusterAction::UpToDate);
        f.object.spec.retain_replicas = Some(true);
        let a = apply(&f.plan().clusters[0].action).clone();
        assert!(a.released_fields.contains(&"/spec/replicas".to_owned()));
        f.object.spec.retain_replicas = None;

        // Someone edited the member: its generation moved past the recorded one.
        if let Some(MemberObservation::Present(m)) = f.members.get_mut("c1") {
            m.version = "gen:2".into();
        }
        let a = apply(&f.plan().clusters[0].action).clone();
        assert!(!a.creates && !a.adopts);
    }

    #[test]
    fn not_ready_selected_clusters_are_reported_others_skipped() {
        let mut f = Fixture::deployment(basic_spec());
        f.clusters[0].ready = false;
        f.clusters[2].ready = false;
        let f = f.member("c3", managed("gen:1"));
        let p = f.plan();
        let a = actions(&p);
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].0, "c1");
        assert_eq!(
            blocked(a[0].1),
            (PropagationStatus::ClusterNotReady, "Cluster not ready")
        );
        assert_eq!(a[1].0, "c2");
    }

    #[test]
    fn unselected_members_are_deleted_with_options() {
        let mut f = Fixture::deployment(basic_spec()).member("c3", managed("gen:1"));
        f.object.annotations.insert(
            DELETE_OPTION_ANNOTATION.into(),
            r#"{"propagationPolicy":"Foreground","gracePeriodSeconds":5}"#.into(),
        );
        let p = f.plan();
        let (cluster, action) = actions(&p)[2];
        assert_eq!(cluster, "c3");
        match action {
            ClusterAction::Delete(d) => {
                let o = d.options.as_ref().unwrap();
                assert_eq!(o.propagation_policy.as_deref(), Some("Foreground"));
                assert_eq!(o.grace_period_seconds, Some(5));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn invalid_delete_options_block_deletion() {
        let mut f = Fixture::deployment(basic_spec()).member("c3", managed("gen:1"));
        f.object
            .annotations
            .insert(DELETE_OPTION_ANNOTATION.into(), "{not json".into());
        let p = f.plan();
        let (status, message) = blocked(&p.clusters[2].action);
        assert_eq!(status, PropagationStatus::DeletionFailed);
        assert!(message.contains("kubefed.io/deleteoption"), "{message}");
    }

    #[test]
    fn unselected_terminating_or_unmanaged_members() {
        let mut terminating = managed("gen:1");
        terminating.terminating = true;
        let unmanaged = MemberObject {
            version: "gen:1".into(),
            ..MemberObject::default()
        };
        let mut f = Fixture::deployment(basic_spec()).member("c3", terminating);
        assert_eq!(f.plan().clusters[2].action, ClusterAction::WaitForRemoval);
        f = f.member("c3", unmanaged);
        assert_eq!(f.plan().clusters.len(), 2);
    }

    #[test]
    fn cache_failures_are_reported_where_placed_only() {
        let mut f = Fixture::deployment(basic_spec());
        for cluster in ["c2", "c3"] {
            f.members.insert(
                cluster.into(),
                MemberObservation::RetrievalFailed("informer not synced".into()),
            );
        }
        let p = f.plan();
        assert_eq!(
            actions(&p).iter().map(|(c, _)| *c).collect::<Vec<_>>(),
            ["c1", "c2"],
            "c3 is not placed: no entry"
        );
        assert_eq!(
            blocked(&p.clusters[1].action),
            (
                PropagationStatus::CachedRetrievalFailed,
                "informer not synced"
            )
        );
    }

    /// Issue 9 (3): a type not served in one cluster blocks only objects placed there, with a
    /// message that says so; deletions do not wait for it.
    #[test]
    fn an_unserved_type_blocks_only_where_placed() {
        let mut f = Fixture::deployment(basic_spec());
        f.members.insert("c2".into(), MemberObservation::NotServed);
        f.members.insert("c3".into(), MemberObservation::NotServed);
        let p = f.plan();
        assert_eq!(p.clusters.len(), 2);
        let (status, message) = blocked(&p.clusters[1].action);
        assert_eq!(status, PropagationStatus::CachedRetrievalFailed);
        assert!(message.contains("does not serve Deployment"), "{message}");

        let mut f = deleting(f).member("c1", managed("gen:1"));
        f.members.insert(
            "c3".into(),
            MemberObservation::RetrievalFailed("403".into()),
        );
        let p = f.plan();
        assert_eq!(
            actions(&p),
            [(
                "c1",
                &ClusterAction::Delete(DeleteAction {
                    options: None,
                    uid: None
                })
            )]
        );
        f.members.remove("c1");
        let p = f.plan();
        assert_eq!(p.finalizer, FinalizerAction::RemoveAfterVerification);
        assert_eq!(
            p.verify_absent_in,
            ["c1"],
            "c2 does not serve it, c3's cache fails"
        );
        // A placed cluster whose cache fails may hold a copy: wait.
        f.members.insert(
            "c2".into(),
            MemberObservation::RetrievalFailed("403".into()),
        );
        assert_eq!(f.plan().finalizer, FinalizerAction::Keep);
    }

    /// Issue 9 (5): an orphaning deletion does not release the finalizer while a placed
    /// cluster's cache has not shown whether it holds a copy to unlabel.
    #[test]
    fn orphaning_waits_for_placed_caches() {
        let mut f = deleting(Fixture::deployment(basic_spec())).member("c1", managed("gen:1"));
        f.object
            .annotations
            .insert(ORPHAN_ANNOTATION.into(), "true".into());
        f.members.insert(
            "c2".into(),
            MemberObservation::RetrievalFailed("not synced".into()),
        );
        f.members.insert(
            "c3".into(),
            MemberObservation::RetrievalFailed("not synced".into()),
        );
        let p = f.plan();
        assert_eq!(p.finalizer, FinalizerAction::Keep);
        assert_eq!(p.clusters[0].action, ClusterAction::RemoveManagedLabel);
        assert_eq!(
            blocked(&p.clusters[1].action).0,
            PropagationStatus::CachedRetrievalFailed
        );
        assert_eq!(p.clusters.len(), 2, "c3 is not placed");
        f.members.insert("c2".into(), MemberObservation::Absent);
        assert_eq!(f.plan().finalizer, FinalizerAction::Remove);
    }

    #[test]
    fn orphaning_unlabels_a_written_copy_the_cache_does_not_show_yet() {
        let mut f = deleting(Fixture::deployment(basic_spec())).member("c1", managed("gen:1"));
        f.object
            .annotations
            .insert(ORPHAN_ANNOTATION.into(), "true".into());
        f.members.insert("c2".into(), MemberObservation::Absent);
        // Never written to c2: nothing to unlabel there.
        assert_eq!(
            actions(&f.plan()),
            [("c1", &ClusterAction::RemoveManagedLabel)]
        );
        // Written to c2, whose cache has not caught up: unlabelled all the same.
        f.recorded.insert(
            "c2".into(),
            RecordedApply {
                version: "gen:1".into(),
                desired_hash: None,
            },
        );
        let p = f.plan();
        assert_eq!(
            actions(&p),
            [
                ("c1", &ClusterAction::RemoveManagedLabel),
                ("c2", &ClusterAction::RemoveManagedLabel)
            ]
        );
        assert_eq!(p.finalizer, FinalizerAction::Remove);
    }

    #[test]
    fn bad_overrides_block_only_their_cluster() {
        let f = Fixture::deployment(json!({
            "template": {"spec": {}},
            "placement": {"clusterSelector": {}},
            "overrides": [{"clusterName": "c2", "clusterOverrides": [{"path": "/kind", "value": "Pod"}]}],
        }));
        let p = f.plan();
        let a = actions(&p);
        assert!(matches!(a[0].1, ClusterAction::Apply(_)));
        let (status, message) = blocked(a[1].1);
        assert_eq!(status, PropagationStatus::ApplyOverridesFailed);
        assert!(message.contains("/kind"), "{message}");
        assert!(matches!(a[2].1, ClusterAction::Apply(_)));
    }

    #[test]
    fn invalid_template_is_compute_resource_failed() {
        let f = Fixture::deployment(json!({"template": [], "placement": {"clusterSelector": {}}}));
        let p = f.plan();
        assert_eq!(
            blocked(&p.clusters[0].action).0,
            PropagationStatus::ComputeResourceFailed
        );
    }

    #[test]
    fn invalid_placement_plans_nothing() {
        let f = Fixture::deployment(json!({
            "placement": {"clusterSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
        }))
        .member("c1", managed("gen:1"));
        let p = f.plan();
        assert_eq!(p.reason, AggregateReason::ComputePlacementFailed);
        assert!(
            p.reason_message
                .unwrap()
                .contains("invalid cluster selector")
        );
        assert!(p.clusters.is_empty());
        assert_eq!(p.finalizer, FinalizerAction::Ensure);
    }

    #[test]
    fn namespace_not_federated_removes_everything() {
        let mut f = Fixture::deployment(basic_spec()).member("c1", managed("gen:1"));
        f.namespace_placement = Some(None);
        let p = f.plan();
        assert_eq!(p.reason, AggregateReason::NamespaceNotFederated);
        assert!(p.placement.clusters.is_empty());
        assert_eq!(
            actions(&p),
            [(
                "c1",
                &ClusterAction::Delete(DeleteAction {
                    options: None,
                    uid: None
                })
            )]
        );

        f.scope = ControlPlaneScope::Namespaced;
        let p = f.plan();
        assert_eq!(p.reason, AggregateReason::Success);
        assert_eq!(p.clusters.len(), 2);
    }

    /// The hub's namespace is being deleted and its FederatedNamespace went first: the objects
    /// still in it read as "namespace not federated", but their copies are not deleted on the
    /// way — their own deletion, with `kubefed.io/orphan`, decides (an orphaned copy was once
    /// deleted this way). Until the namespace is read, or when it cannot be, nothing is deleted.
    #[test]
    fn no_copy_is_deleted_while_the_hub_namespace_is_being_deleted() {
        let mut f = Fixture::deployment(basic_spec())
            .member("c1", managed("gen:1"))
            .member("c2", managed("gen:1"));
        f.object
            .annotations
            .insert(ORPHAN_ANNOTATION.into(), "true".into());
        f.namespace_placement = Some(None);
        let deletes = |p: &Plan| {
            p.clusters
                .iter()
                .filter(|c| matches!(c.action, ClusterAction::Delete(_)))
                .count()
        };

        f.containing_namespace = ContainingNamespace::NotRead;
        let p = f.plan();
        assert!(p.needs_containing_namespace);
        assert_eq!(deletes(&p), 0);
        assert!(p.clusters.iter().all(|c| matches!(
            &c.action,
            ClusterAction::Blocked { status: PropagationStatus::RetrievalFailed, message }
                if message.contains("\"prod\" has not been read")
        )));

        f.containing_namespace = ContainingNamespace::Deleting;
        let p = f.plan();
        assert_eq!(
            p.disposition,
            Disposition::Ignore(IgnoreReason::NamespaceDeleting)
        );
        assert_eq!(p.finalizer, FinalizerAction::Untouched);
        assert!(p.clusters.is_empty());
        assert!(!p.needs_containing_namespace);

        f.containing_namespace = ContainingNamespace::Unreadable("503 Service Unavailable");
        let p = f.plan();
        assert_eq!(deletes(&p), 0);
        assert_eq!(
            p.clusters[0].action.status_on_success(),
            Some(PropagationStatus::RetrievalFailed)
        );

        f.containing_namespace = ContainingNamespace::Active;
        assert_eq!(deletes(&f.plan()), 2, "a live namespace: KubeFed's rule");

        // Its own deletion then orphans: the copies are unlabelled, not deleted.
        f.containing_namespace = ContainingNamespace::Deleting;
        let p = deleting(f).plan();
        assert_eq!(p.disposition, Disposition::Delete);
        assert_eq!(
            actions(&p),
            [
                ("c1", &ClusterAction::RemoveManagedLabel),
                ("c2", &ClusterAction::RemoveManagedLabel)
            ]
        );
    }

    /// Only deletions need the namespace: applies and a plan without deletions never read it.
    #[test]
    fn the_hub_namespace_is_read_only_for_deletions() {
        let mut f = Fixture::deployment(basic_spec()).member("c1", managed("gen:1"));
        f.containing_namespace = ContainingNamespace::NotRead;
        let p = f.plan();
        assert!(!p.needs_containing_namespace);
        assert_eq!(p.disposition, Disposition::Sync);
        assert!(
            p.clusters
                .iter()
                .all(|c| matches!(c.action, ClusterAction::Apply(_) | ClusterAction::UpToDate))
        );
        // A cluster-scoped object has no containing namespace.
        let mut f = Fixture::namespace("team", json!({"placement": {"clusters": []}}))
            .member("c1", managed("gen:1"));
        f.object.namespace = None;
        f.target.kind = "ClusterRole".into();
        f.target.group = "rbac.authorization.k8s.io".into();
        f.containing_namespace = ContainingNamespace::NotRead;
        let p = f.plan();
        assert!(!p.needs_containing_namespace);
        assert!(matches!(p.clusters[0].action, ClusterAction::Delete(_)));
    }

    #[test]
    fn federated_namespace_placement_limits_resources() {
        let mut f = Fixture::deployment(basic_spec());
        f.namespace_placement = Some(Some(
            serde_json::from_value(json!({"clusters": [{"name": "c2"}]})).unwrap(),
        ));
        let p = f.plan();
        assert_eq!(p.clusters.len(), 1);
        assert_eq!(p.clusters[0].cluster, "c2");
    }

    #[test]
    fn system_and_misnamed_namespaces_are_ignored() {
        for name in [
            "kube-system",
            "default",
            "kube-federation-system",
            "kube-node-lease",
        ] {
            let p = Fixture::namespace(name, json!({"placement": {"clusterSelector": {}}})).plan();
            assert_eq!(
                p.disposition,
                Disposition::Ignore(IgnoreReason::SystemNamespace)
            );
            assert_eq!(p.finalizer, FinalizerAction::Untouched);
            assert!(p.clusters.is_empty());
        }
        let mut f = Fixture::namespace("team", json!({"placement": {"clusterSelector": {}}}));
        f.object.namespace = Some("other".into());
        let p = f.plan();
        assert_eq!(
            p.disposition,
            Disposition::Ignore(IgnoreReason::InvalidNamespaceName)
        );
        assert_eq!(p.warnings[0].reason, "InvalidName");
    }

    #[test]
    fn hub_namespace_is_unlabelled_never_deleted() {
        let mut f =
            Fixture::namespace("team", json!({"placement": {"clusters": [{"name": "c2"}]}}))
                .member("c1", managed("rv:3"));
        f.identities.insert("c1".into(), ClusterIdentity::Hub);
        f.adopt_resources = false;
        let p = f.plan();
        assert_eq!(p.clusters[0].cluster, "c1");
        assert_eq!(p.clusters[0].action, ClusterAction::RemoveManagedLabel);
        assert_eq!(p.clusters[1].cluster, "c2");
        let c2 = apply(&p.clusters[1].action);
        assert!(c2.create_only);
        assert_eq!(c2.object["metadata"].get("namespace"), None);

        // Selected hub namespace without the label: adopted even with adoption disabled.
        f.object.spec.placement =
            Some(serde_json::from_value(json!({"clusters": [{"name": "c1"}]})).unwrap());
        f.members.insert(
            "c1".into(),
            MemberObservation::Present(MemberObject {
                version: "rv:3".into(),
                ..MemberObject::default()
            }),
        );
        let a = apply(&f.plan().clusters[0].action).clone();
        assert!(a.adopts);
        f.members.clear();
        let a = apply(&f.plan().clusters[0].action).clone();
        assert!(a.creates && !a.create_only);
    }

    #[test]
    fn retain_replicas_releases_field_for_existing_members() {
        let f = Fixture::deployment(json!({
            "template": {"spec": {"replicas": 4}},
            "placement": {"clusters": [{"name": "c1"}, {"name": "c2"}]},
            "retainReplicas": true,
        }))
        .member("c1", managed("gen:1"));
        let p = f.plan();
        let existing = apply(&p.clusters[0].action);
        assert_eq!(existing.released_fields, ["/spec/replicas"]);
        assert_eq!(existing.object["spec"].get("replicas"), None);
        let created = apply(&p.clusters[1].action);
        assert!(created.released_fields.is_empty());
        assert_eq!(created.object["spec"]["replicas"], 4);
    }

    fn deleting(mut f: Fixture) -> Fixture {
        f.object.deleting = true;
        f.object.has_sync_finalizer = true;
        f
    }

    #[test]
    fn deletion_deletes_managed_members_everywhere() {
        let mut terminating = managed("gen:1");
        terminating.terminating = true;
        let f = deleting(Fixture::deployment(basic_spec()))
            .member("c1", managed("gen:1"))
            .member("c3", terminating);
        let p = f.plan();
        assert_eq!(p.disposition, Disposition::Delete);
        assert_eq!(p.finalizer, FinalizerAction::Keep);
        assert_eq!(
            actions(&p),
            [
                (
                    "c1",
                    &ClusterAction::Delete(DeleteAction {
                        options: None,
                        uid: None
                    })
                ),
                ("c3", &ClusterAction::WaitForRemoval),
            ]
        );
    }

    #[test]
    fn deletion_finishes_when_nothing_remains() {
        let unmanaged = MemberObject {
            version: "gen:1".into(),
            ..MemberObject::default()
        };
        let p = deleting(Fixture::deployment(basic_spec()))
            .member("c2", unmanaged)
            .plan();
        assert!(p.clusters.is_empty());
        assert_eq!(p.finalizer, FinalizerAction::RemoveAfterVerification);
    }

    #[test]
    fn deletion_never_waits_on_unready_clusters_but_records_them() {
        let mut f = deleting(Fixture::deployment(basic_spec())).member("c1", managed("gen:1"));
        f.clusters[1].ready = false; // c2 is placed
        f.clusters[2].ready = false; // c3 is neither placed nor known to hold anything
        let p = f.plan();
        assert_eq!(
            actions(&p),
            [(
                "c1",
                &ClusterAction::Delete(DeleteAction {
                    options: None,
                    uid: None
                })
            )]
        );
        assert_eq!(p.leftovers, ["c2"]);
        f.members.remove("c1");
        let p = f.plan();
        assert_eq!(p.finalizer, FinalizerAction::RemoveAfterVerification);
        assert_eq!(p.leftovers, ["c2"]);
        assert_eq!(p.verify_absent_in, ["c1"]);

        // Orphaning: the same clusters are recorded, to be unlabelled later.
        f.object
            .annotations
            .insert(ORPHAN_ANNOTATION.into(), "true".into());
        assert_eq!(f.plan().leftovers, ["c2"]);
    }

    #[test]
    fn desired_objects_carry_the_proof_of_ownership() {
        let mut f = Fixture::deployment(basic_spec());
        let p = f.plan();
        let annotations = &apply(&p.clusters[0].action).object["metadata"]["annotations"];
        assert!(annotations.get(OWNER_ANNOTATION).is_none());
        f.control_plane = Some("plane");
        f.object.uid = Some("fed-uid".into());
        let p = f.plan();
        let object = &apply(&p.clusters[0].action).object;
        assert_eq!(
            object["metadata"]["annotations"][OWNER_ANNOTATION],
            "plane/fed-uid"
        );
        assert_eq!(object["metadata"]["labels"]["app"], "web", "template kept");
    }

    #[test]
    fn deletion_without_finalizer_is_ignored() {
        let mut f = deleting(Fixture::deployment(basic_spec())).member("c1", managed("gen:1"));
        f.object.has_sync_finalizer = false;
        let p = f.plan();
        assert_eq!(
            p.disposition,
            Disposition::Ignore(IgnoreReason::FinalizerAbsent)
        );
        assert!(p.clusters.is_empty());
    }

    #[test]
    fn orphaning_deletion_unlabels() {
        let mut f = deleting(Fixture::deployment(basic_spec()))
            .member("c1", managed("gen:1"))
            .member("c3", managed("gen:2"));
        f.clusters[2].ready = false;
        f.object
            .annotations
            .insert(ORPHAN_ANNOTATION.into(), "true".into());
        let p = f.plan();
        assert_eq!(p.finalizer, FinalizerAction::Remove);
        assert_eq!(actions(&p), [("c1", &ClusterAction::RemoveManagedLabel)]);
    }

    #[test]
    fn deleting_a_federated_namespace_keeps_the_hub_namespace() {
        let mut f = deleting(Fixture::namespace(
            "team",
            json!({"placement": {"clusterSelector": {}}}),
        ))
        .member("c1", managed("rv:1"))
        .member("c2", managed("rv:1"));
        f.identities.insert("c1".into(), ClusterIdentity::Hub);
        let p = f.plan();
        assert_eq!(
            actions(&p),
            [
                ("c1", &ClusterAction::RemoveManagedLabel),
                (
                    "c2",
                    &ClusterAction::Delete(DeleteAction {
                        options: None,
                        uid: None
                    })
                ),
            ]
        );

        // The hub namespace itself is terminating: nothing to wait for there.
        if let Some(MemberObservation::Present(m)) = f.members.get_mut("c1") {
            m.terminating = true;
        }
        f.members.remove("c2");
        let p = f.plan();
        assert!(p.clusters.is_empty());
        assert_eq!(p.finalizer, FinalizerAction::RemoveAfterVerification);
    }

    fn with_uid(mut member: MemberObject, uid: &str) -> MemberObject {
        member.uid = Some(uid.into());
        member
    }

    /// Issue 17: the hub joined as `c1` with a member credential that may not read
    /// `kube-system`; its namespace leaves the placement, or the FederatedNamespace is deleted.
    #[test]
    fn an_unknown_identity_never_deletes_a_namespace() {
        for deleting_object in [false, true] {
            let mut f = Fixture::namespace(
                "victim",
                json!({"placement": {"clusters": [{"name": "c2"}]}}),
            )
            .member("c1", with_uid(managed("rv:3"), "u-hub"))
            .member("c2", with_uid(managed("rv:3"), "u-c2"));
            if deleting_object {
                f = deleting(f);
            }
            f.identities.insert(
                "c1".into(),
                ClusterIdentity::Unknown("403 Forbidden".into()),
            );
            for hub_namespace in [
                HubNamespace::NotRead,
                HubNamespace::Absent,
                HubNamespace::Unreadable("500 Internal Server Error"),
                HubNamespace::Uid("u-other"),
            ] {
                f.hub_namespace = hub_namespace;
                let p = f.plan();
                let (status, message) = blocked(&p.clusters[0].action);
                assert_eq!(status, PropagationStatus::ClusterIdentityUnknown);
                assert!(!message.is_empty());
                if deleting_object {
                    assert_eq!(p.finalizer, FinalizerAction::Keep, "{hub_namespace:?}");
                }
            }
            // The same namespace object as the hub's: unlabelled, whatever the identity says.
            f.hub_namespace = HubNamespace::Uid("u-hub");
            let p = f.plan();
            assert_eq!(p.clusters[0].action, ClusterAction::RemoveManagedLabel);
            assert_eq!(p.hub_namespace_in, ["c1"]);
        }
    }

    #[test]
    fn a_namespace_is_deleted_only_after_comparing_it_with_the_hubs() {
        let mut f =
            Fixture::namespace("team", json!({"placement": {"clusters": [{"name": "c2"}]}}))
                .member("c1", with_uid(managed("rv:3"), "u-c1"));
        f.hub_namespace = HubNamespace::NotRead;
        let p = f.plan();
        assert!(p.needs_hub_namespace);
        assert_eq!(
            blocked(&p.clusters[0].action).0,
            PropagationStatus::ClusterIdentityUnknown
        );

        f.hub_namespace = HubNamespace::Uid("u-hub");
        let p = f.plan();
        assert!(!p.needs_hub_namespace);
        assert_eq!(
            p.clusters[0].action,
            ClusterAction::Delete(DeleteAction {
                options: None,
                uid: Some("u-c1".into())
            }),
            "the delete carries the observed copy's UID as precondition"
        );

        // The identity check said "not the hub" but the namespace is the hub's own object.
        f.hub_namespace = HubNamespace::Uid("u-c1");
        assert_eq!(
            f.plan().clusters[0].action,
            ClusterAction::RemoveManagedLabel
        );

        // Other targets never need the hub's namespace.
        let mut f = Fixture::deployment(basic_spec()).member("c3", managed("gen:1"));
        f.identities.clear();
        f.hub_namespace = HubNamespace::NotRead;
        let p = f.plan();
        assert!(!p.needs_hub_namespace);
        assert!(p.clusters.iter().any(|c| c.cluster == "c3"
            && c.action
                == ClusterAction::Delete(DeleteAction {
                    options: None,
                    uid: None
                })));
    }

    /// Issue 16: the hub's namespace is being deleted, which deletes the FederatedNamespace
    /// with it; its copy is neither waited for nor verified absent.
    #[test]
    fn a_terminating_hub_namespace_is_not_waited_for() {
        let mut f = deleting(Fixture::namespace(
            "team",
            json!({"placement": {"clusterSelector": {}}}),
        ))
        .member("c1", with_uid(managed("rv:1"), "u-hub"));
        if let Some(MemberObservation::Present(m)) = f.members.get_mut("c1") {
            m.terminating = true;
        }
        f.identities
            .insert("c1".into(), ClusterIdentity::Unknown("timeout".into()));
        f.hub_namespace = HubNamespace::NotRead;
        // Unknown: wait (never release a finalizer on a guess) …
        let p = f.plan();
        assert_eq!(p.finalizer, FinalizerAction::Keep);
        // … until the UIDs match.
        f.hub_namespace = HubNamespace::Uid("u-hub");
        let p = f.plan();
        assert!(p.clusters.is_empty());
        assert_eq!(p.finalizer, FinalizerAction::RemoveAfterVerification);
        assert_eq!(p.hub_namespace_in, ["c1"]);
        assert_eq!(
            p.verify_absent_in,
            ["c2", "c3"],
            "the hub's namespace is not verified"
        );
    }

    /// Issue 9 (9): a namespaced control plane propagates from its own namespace; there, on
    /// the hub joined as a member nothing is written, and in members the join's credentials
    /// are never overwritten nor deleted.
    #[test]
    fn the_control_planes_own_objects_are_protected() {
        let secret = |name: &str| {
            let mut f = Fixture::deployment(json!({
                "template": {"data": {"k": "dg=="}},
                "placement": {"clusters": [{"name": "c1"}, {"name": "c2"}, {"name": "c3"}]},
            }));
            f.target = TargetType {
                kind: "Secret".into(),
                group: String::new(),
                version: "v1".into(),
                namespaced: true,
            };
            f.scope = ControlPlaneScope::Namespaced;
            f.namespace_placement = None;
            f.object.namespace = Some("kube-federation-system".into());
            f.object.name = name.into();
            f
        };
        let mut f = secret("app-credentials");
        f.identities.insert("c1".into(), ClusterIdentity::Hub);
        f.identities
            .insert("c2".into(), ClusterIdentity::Unknown("403".into()));
        let p = f.plan();
        assert_eq!(
            blocked(&p.clusters[0].action).0,
            PropagationStatus::Protected
        );
        assert_eq!(
            blocked(&p.clusters[1].action).0,
            PropagationStatus::ClusterIdentityUnknown
        );
        assert!(matches!(p.clusters[2].action, ClusterAction::Apply(_)));

        // c3's join credentials: neither written nor, when no longer placed, deleted.
        let p = secret("c3-hub").plan();
        assert_eq!(
            blocked(&p.clusters[2].action).0,
            PropagationStatus::Protected
        );
        assert!(matches!(p.clusters[1].action, ClusterAction::Apply(_)));
        let p = deleting(secret("c3-hub").member("c3", managed("rv:1"))).plan();
        assert!(!p.clusters.iter().any(|c| c.cluster == "c3"), "{p:?}");
        assert!(!p.verify_absent_in.contains(&"c3".to_owned()));

        // Outside the control plane's namespace nothing is protected.
        let mut f = secret("c3-hub");
        f.object.namespace = Some("team".into());
        assert!(matches!(
            f.plan().clusters[2].action,
            ClusterAction::Apply(_)
        ));
    }

    /// Issue 9 (10): two names for one API server never delete what the other placed.
    #[test]
    fn clusters_joined_twice_are_neither_written_nor_deleted() {
        let mut f = Fixture::deployment(basic_spec()).member("c3", managed("gen:1"));
        f.duplicates.insert("c1".into(), vec!["c3".into()]);
        f.duplicates.insert("c3".into(), vec!["c1".into()]);
        let p = f.plan();
        let (status, message) = blocked(&p.clusters[0].action);
        assert_eq!(status, PropagationStatus::DuplicateCluster);
        assert!(message.contains("c3"), "{message}");
        assert!(
            !p.clusters.iter().any(|c| c.cluster == "c3"),
            "c3's copy (placed through c1) is not deleted: {p:?}"
        );
        let p = deleting(f).plan();
        assert!(p.clusters.iter().all(|c| c.cluster == "c2"), "{p:?}");
        assert_eq!(p.leftovers, ["c1", "c3"]);
    }

    #[test]
    fn action_statuses() {
        let create = ClusterAction::Apply(ApplyAction {
            object: json!({}),
            desired_hash: String::new(),
            creates: true,
            create_only: false,
            adopts: false,
            released_fields: Vec::new(),
        });
        assert_eq!(create.status_on_success(), Some(PropagationStatus::Ok));
        assert_eq!(
            create.status_on_failure(),
            Some(PropagationStatus::CreationFailed)
        );
        assert_eq!(
            create.status_on_timeout(),
            Some(PropagationStatus::CreationTimedOut)
        );
        let delete = ClusterAction::Delete(DeleteAction {
            options: None,
            uid: None,
        });
        assert_eq!(
            delete.status_on_success(),
            Some(PropagationStatus::WaitingForRemoval)
        );
        assert_eq!(
            delete.status_on_failure(),
            Some(PropagationStatus::DeletionFailed)
        );
        let unlabel = ClusterAction::RemoveManagedLabel;
        assert_eq!(unlabel.status_on_success(), None);
        assert_eq!(
            unlabel.status_on_timeout(),
            Some(PropagationStatus::LabelRemovalTimedOut)
        );
        assert_eq!(
            not_ready().status_on_failure(),
            Some(PropagationStatus::ClusterNotReady)
        );
    }

    #[test]
    fn plan_to_status_end_to_end() {
        let mut f = Fixture::deployment(basic_spec()).member("c3", managed("gen:1"));
        f.clusters[0].ready = false;
        let p = f.plan();
        let outcomes = p.expected_outcomes();
        let status = compute_status(
            None,
            &StatusInput {
                generation: 3,
                reason: p.reason,
                reason_message: p.reason_message.as_deref(),
                outcomes: &outcomes,
                resources_updated: true,
                unknown_clusters: &p.placement.unknown_clusters,
                now: "2024-01-01T00:00:00Z",
                ..StatusInput::default()
            },
        )
        .status;
        assert_eq!(
            serde_json::to_value(&status).unwrap(),
            json!({
                "observedGeneration": 3,
                "conditions": [{
                    "type": "Propagation",
                    "status": "False",
                    "reason": "CheckClusters",
                    "message": "2 of 3 clusters need attention: c1 (ClusterNotReady), c3 (WaitingForRemoval); placement names clusters that are not joined: ghost",
                    "lastUpdateTime": "2024-01-01T00:00:00Z",
                    "lastTransitionTime": "2024-01-01T00:00:00Z",
                }],
                "clusters": [
                    {"name": "c1", "status": "ClusterNotReady", "message": "Cluster not ready"},
                    {"name": "c2"},
                    {"name": "c3", "status": "WaitingForRemoval"},
                ],
            })
        );
    }

    #[test]
    fn orphan_and_delete_option_annotations() {
        let mut a = BTreeMap::new();
        assert!(!is_orphaning(&a));
        assert_eq!(delete_options(&a).unwrap(), None);
        a.insert(ORPHAN_ANNOTATION.to_owned(), "True".to_owned());
        assert!(!is_orphaning(&a));
        a.insert(ORPHAN_ANNOTATION.to_owned(), "true".to_owned());
        assert!(is_orphaning(&a));
        a.insert(
            DELETE_OPTION_ANNOTATION.to_owned(),
            r#"{"preconditions":{"uid":"u1"},"unknownField":1}"#.to_owned(),
        );
        let o = delete_options(&a).unwrap().unwrap();
        assert_eq!(o.preconditions.unwrap().uid.as_deref(), Some("u1"));
    }
}
