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

use hubfed_api::names::{
    DELETE_OPTION_ANNOTATION, DESIRED_HASH_ANNOTATION, MANAGED_LABEL, ORPHAN_ANNOTATION,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions;
use serde_json::Value;

use crate::desired::{DesiredObject, WarningEvent, desired_object, template_warnings};
use crate::gc::{OWNER_ANNOTATION, owner};
use crate::hub::{ClusterIdentity, NamespaceRole, namespace_role};
use crate::placement::{ClusterInfo, PlacementDecision, compute_placement, is_system_namespace};
use crate::status::{AggregateReason, PropagationStatus};
use crate::version::{desired_hash, needs_apply, overrides_version, template_version};
use crate::{CoreError, Result};

mod deletion;
mod input;
mod output;

use deletion::plan_deletion;

pub use input::{ContainingNamespace, FederatedObject, MemberObject, MemberObservation, PlanInput};
pub use output::{
    ApplyAction, ApplyBody, ClusterAction, ClusterPlan, DeleteAction, Disposition, FinalizerAction,
    IgnoreReason, Plan,
};

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
    let mut bodies = Bodies::default();
    for cluster in sorted(input.clusters) {
        let selected = plan.placement.clusters.contains(&cluster.name);
        let action = sync_action(input, &mut plan, &mut bodies, cluster, selected, &options);
        if let Some(action) = action {
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
    bodies: &mut Bodies,
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
    let body = match body_for(input, plan, bodies, &cluster.name, member.is_some()) {
        Ok(body) => body,
        Err((status, message)) => return Some(ClusterAction::Blocked { status, message }),
    };
    let hash = &body.hash;
    let apply = |creates: bool, create_only: bool, adopts: bool| {
        ClusterAction::Apply(ApplyAction {
            object: body.object.clone(),
            desired_hash: hash.clone(),
            creates,
            create_only,
            adopts,
            released_fields: body.released_fields.clone(),
        })
    };
    Some(match member {
        None => apply(true, !input.adopt_resources && !hub_namespace, false),
        Some(member) if !member.is_managed() => apply(false, false, true),
        Some(member) => {
            // The hash stored on the copy survives restarts; the recorded one may not.
            let stored_hash = member.annotations.get(DESIRED_HASH_ANNOTATION);
            if stored_hash != Some(hash)
                || needs_apply(
                    input.recorded.get(&cluster.name),
                    &member.version,
                    &body.object,
                    hash,
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

/// A desired object as the plan's applies share it.
#[derive(Clone)]
struct Body {
    object: ApplyBody,
    hash: String,
    released_fields: Vec<String>,
}

/// The desired objects of one plan's clusters without overrides of their own: the same for
/// all of them (given whether the member copy exists, which `retainReplicas` reads), so made,
/// hashed and held once per plan instead of once per cluster — with ~1 MB templates, a
/// copy, an encoding and a hash of a megabyte less per member.
#[derive(Default)]
struct Bodies {
    /// By whether the member copy exists.
    plain: [Option<Body>; 2],
}

/// The desired object for `cluster` ([`desired_for`]), shared with the other clusters that
/// get the same one.
fn body_for(
    input: &PlanInput<'_>,
    plan: &Plan,
    bodies: &mut Bodies,
    cluster: &str,
    exists: bool,
) -> std::result::Result<Body, (PropagationStatus, String)> {
    let plain = !input
        .object
        .spec
        .overrides
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|entry| entry.cluster_name == cluster);
    let slot = usize::from(exists);
    if plain && let Some(body) = &bodies.plain[slot] {
        return Ok(body.clone());
    }
    let (desired, hash) = desired_for(input, cluster, exists)?;
    let object = same_body(plan, &hash).unwrap_or_else(|| desired.object.into());
    let body = Body {
        object,
        hash,
        released_fields: desired.released_fields,
    };
    if plain {
        bodies.plain[slot] = Some(body.clone());
    }
    Ok(body)
}

/// The body of an apply already planned for another cluster with the same desired hash.
fn same_body(plan: &Plan, hash: &str) -> Option<ApplyBody> {
    plan.clusters.iter().find_map(|c| match &c.action {
        ClusterAction::Apply(apply) if apply.desired_hash == hash => Some(apply.object.clone()),
        _ => None,
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

#[cfg(test)]
mod tests;
