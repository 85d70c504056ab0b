//! The hub's side of a pull-mode member, as pure decisions: what a plan's action for the
//! cluster becomes in its [`Work`], what the agent's report says to the plan (the member
//! observation and the last apply) and to status (the cluster's outcome), and what becomes of
//! a work the plan no longer needs.
//!
//! The plan itself is [`crate::plan::plan`], the same for push and pull members: the agent
//! reports what its cluster holds, the hub plans, the agent carries the action out with the
//! push dispatcher's own code and reports the result.

use std::collections::BTreeMap;

use hubfed_api::names::RECREATE_ON_IMMUTABLE_ANNOTATION;
use hubfed_api::work::{
    WORK_RESULT_DONE, WORK_RESULT_OK, Work, WorkAction, WorkCopy, WorkSource, WorkSpec, WorkTarget,
};

use crate::drift::DRIFT_ANNOTATION;
use crate::plan::{ClusterAction, MemberObject, MemberObservation};
use crate::readiness::Readiness;
use crate::status::PropagationStatus;
use crate::version::RecordedApply;

/// The object a work is for, as the hub names it.
#[derive(Clone, Debug)]
pub struct WorkSubject<'a> {
    pub target: &'a WorkTarget,
    pub source: &'a WorkSource,
    pub name: &'a str,
    pub namespace: Option<&'a str>,
    /// The federated object's annotations (only those that shape the apply are carried).
    pub annotations: &'a BTreeMap<String, String>,
    pub collect_status: bool,
}

/// The work spec that carries `action` out, or `None` for an action without a request
/// (up to date, waiting, blocked): the work stays as it is. `basis` is the version of the
/// copy the plan saw (empty when it saw none).
pub fn work_spec(
    subject: &WorkSubject<'_>,
    action: &ClusterAction,
    basis: &str,
) -> Option<WorkSpec> {
    let mut spec = WorkSpec {
        target: subject.target.clone(),
        source: subject.source.clone(),
        name: subject.name.to_owned(),
        namespace: subject.namespace.map(str::to_owned),
        basis: basis.to_owned(),
        annotations: subject
            .annotations
            .iter()
            .filter(|(k, _)| *k == DRIFT_ANNOTATION || *k == RECREATE_ON_IMMUTABLE_ANNOTATION)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        collect_status: subject.collect_status,
        // The request's fields are filled in below, by the action.
        ..WorkSpec::default()
    };
    match action {
        ClusterAction::Apply(apply) => {
            spec.action = WorkAction::Apply.as_str().to_owned();
            spec.object = Some((*apply.object).clone());
            spec.desired_hash.clone_from(&apply.desired_hash);
            spec.creates = apply.creates;
            spec.create_only = apply.create_only;
            spec.adopts = apply.adopts;
            spec.released_fields.clone_from(&apply.released_fields);
        }
        ClusterAction::Delete(delete) => {
            spec.action = WorkAction::Delete.as_str().to_owned();
            spec.delete_options = delete
                .options
                .as_ref()
                .and_then(|o| serde_json::to_value(o).ok());
            spec.uid.clone_from(&delete.uid);
        }
        ClusterAction::RemoveManagedLabel => {
            spec.action = WorkAction::RemoveManagedLabel.as_str().to_owned();
        }
        ClusterAction::UpToDate | ClusterAction::WaitForRemoval | ClusterAction::Blocked { .. } => {
            return None;
        }
    }
    Some(spec)
}

/// The action a work asks the agent for, as the executor takes it; `None` when the work
/// cannot be read (an unknown action, an apply without an object): the agent reports that.
pub fn work_action(spec: &WorkSpec) -> Result<ClusterAction, String> {
    match WorkAction::parse(&spec.action) {
        Some(WorkAction::Apply) => {
            let Some(object) = spec.object.clone() else {
                return Err("an Apply work without an object".to_owned());
            };
            Ok(ClusterAction::Apply(crate::plan::ApplyAction {
                object: object.into(),
                desired_hash: spec.desired_hash.clone(),
                creates: spec.creates,
                create_only: spec.create_only,
                adopts: spec.adopts,
                released_fields: spec.released_fields.clone(),
            }))
        }
        Some(WorkAction::Delete) => {
            let options = match &spec.delete_options {
                None => None,
                Some(value) => Some(
                    serde_json::from_value(value.clone())
                        .map_err(|e| format!("the delete options cannot be read: {e}"))?,
                ),
            };
            Ok(ClusterAction::Delete(crate::plan::DeleteAction {
                options,
                uid: spec.uid.clone(),
            }))
        }
        Some(WorkAction::RemoveManagedLabel) => Ok(ClusterAction::RemoveManagedLabel),
        None => Err(format!("unknown work action {:?}", spec.action)),
    }
}

/// What the plan sees of the copy in a pull member: nothing without a work (the agent
/// removes managed copies without one, as push garbage collection does), else what the
/// agent last reported (nothing reported yet reads as absent: the plan asks for the apply
/// the work already holds, which is no new request).
pub fn observation(work: Option<&Work>) -> MemberObservation {
    let Some(copy) = work
        .and_then(|w| w.status.as_ref())
        .and_then(|s| s.copy.as_ref())
    else {
        return MemberObservation::Absent;
    };
    if !copy.exists {
        return MemberObservation::Absent;
    }
    MemberObservation::Present(MemberObject {
        managed_label: copy.managed_label.clone(),
        terminating: copy.terminating,
        version: copy.version.clone(),
        uid: copy.uid.clone(),
        labels: copy.labels.clone(),
        annotations: copy.annotations.clone(),
        readiness: match copy.readiness.as_deref() {
            Some("NotReady") => {
                Readiness::NotReady(copy.readiness_message.clone().unwrap_or_default())
            }
            _ => Readiness::Ready,
        },
        remote_status: copy.remote_status.clone(),
    })
}

/// The copy a [`MemberObject`] describes, as the agent reports it.
pub fn copy_of(member: Option<&MemberObject>) -> WorkCopy {
    let Some(member) = member else {
        return WorkCopy::default();
    };
    let (readiness, readiness_message) = match &member.readiness {
        Readiness::Ready => (None, None),
        Readiness::NotReady(why) => (Some("NotReady".to_owned()), Some(why.clone())),
    };
    WorkCopy {
        exists: true,
        managed_label: member.managed_label.clone(),
        terminating: member.terminating,
        version: member.version.clone(),
        uid: member.uid.clone(),
        labels: member.labels.clone(),
        annotations: member.annotations.clone(),
        readiness,
        readiness_message,
        remote_status: member.remote_status.clone(),
    }
}

/// A member copy as the plan sees it, from the whole object (`group`/`kind`: its type, for
/// its readiness; `collect_status`: keep its `.status`).
pub fn member_object(
    object: &serde_json::Value,
    group: &str,
    kind: &str,
    collect_status: bool,
) -> MemberObject {
    let meta = |field: &str| object.pointer(&format!("/metadata/{field}"));
    let strings = |field: &str| -> BTreeMap<String, String> {
        meta(field)
            .and_then(serde_json::Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default()
    };
    let labels = strings("labels");
    let mut annotations = strings("annotations");
    annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    MemberObject {
        managed_label: labels.get(hubfed_api::names::MANAGED_LABEL).cloned(),
        terminating: meta("deletionTimestamp").is_some_and(|t| !t.is_null()),
        version: crate::version::object_version_of(object),
        uid: meta("uid")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned),
        labels,
        annotations,
        readiness: crate::readiness::readiness(group, kind, object),
        remote_status: collect_status
            .then(|| object.get("status").cloned())
            .flatten(),
    }
}

/// The agent's last successful apply, as the plan's record of what was applied there.
pub fn recorded(work: &Work) -> Option<RecordedApply> {
    let status = work.status.as_ref()?;
    Some(RecordedApply {
        version: status.applied_version.clone()?,
        desired_hash: status.applied_hash.clone(),
    })
}

/// Whether the agent has reported on the work's current generation.
pub fn reported(work: &Work) -> bool {
    let generation = work.metadata.generation;
    generation.is_some() && work.status.as_ref().and_then(|s| s.observed_generation) == generation
}

/// A pull member's part of a dispatch, read from its work.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PullOutcome {
    /// The cluster's status entry (`None`: no entry, e.g. after a label removal).
    pub status: Option<PropagationStatus>,
    pub message: Option<String>,
    /// The copy's version after the reported apply, to record.
    pub version: Option<String>,
    /// The agent has not reported on the current request yet.
    pub pending: bool,
    /// The reported failure was no refusal by the member.
    pub transient: bool,
    /// The reported drift (`status.clusters[].lastDrift`).
    pub drift: Option<hubfed_api::federated::DriftRecord>,
}

/// The outcome of `action` in a pull member whose work is `work` (as just written or as it
/// stood): the agent's report when it is for the current generation, else pending — with the
/// last reported status meanwhile (as a push member shows its last status while a write is in
/// flight), or the action's own status for a removal, which is a wait.
pub fn outcome(action: &ClusterAction, work: &Work) -> PullOutcome {
    let status = work.status.clone().unwrap_or_default();
    if !reported(work) {
        let previous = match action {
            ClusterAction::Delete(_) => action.status_on_success(),
            _ if status.result.is_empty() || status.result == WORK_RESULT_DONE => None,
            _ => PropagationStatus::parse(result_status(&status.result)),
        };
        return PullOutcome {
            status: previous,
            message: status.message.clone(),
            pending: true,
            ..PullOutcome::default()
        };
    }
    if status.result == WORK_RESULT_DONE {
        return PullOutcome {
            status: action.status_on_success(),
            ..PullOutcome::default()
        };
    }
    let parsed = PropagationStatus::parse(result_status(&status.result));
    let ok = parsed == Some(PropagationStatus::Ok);
    PullOutcome {
        status: Some(parsed.unwrap_or(PropagationStatus::UpdateFailed)),
        message: match parsed {
            Some(_) => status.message.clone(),
            None => Some(format!(
                "the agent reported an unknown result {:?}",
                status.result
            )),
        },
        version: if ok {
            status.applied_version.clone()
        } else {
            None
        },
        pending: false,
        transient: status.transient,
        drift: status.drift.clone(),
    }
}

/// A work's `status.result` as a `status.clusters[].status` value (`Ok` is KubeFed's empty
/// string).
fn result_status(result: &str) -> &str {
    if result == WORK_RESULT_OK { "" } else { result }
}

/// What becomes of a pull member's work that this reconcile's plan asked nothing of.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkFate {
    Keep,
    /// Delete the work: nothing of it is left to do.
    Delete,
    /// Replace its request (a tombstone: the deletion or label removal of the copy, carried
    /// out when the agent is back; the work stays until it reports it done).
    Rewrite(Box<WorkSpec>),
}

fn is_removal(work: &Work) -> bool {
    work.spec.action == WorkAction::Delete.as_str()
        || work.spec.action == WorkAction::RemoveManagedLabel.as_str()
}

fn done(work: &Work) -> bool {
    reported(work)
        && work
            .status
            .as_ref()
            .is_some_and(|s| s.result == WORK_RESULT_DONE)
}

/// The fate of `work` when this reconcile's plan has no request for its cluster.
///
/// - `planned`: the plan's passive action there (up to date, waiting, blocked), `None` when
///   the plan does not list the cluster (not placed there, and no copy seen — or the cluster
///   is not ready);
/// - `orphaning`: the federated object is being deleted with `kubefed.io/orphan`.
///
/// Nothing is ever deleted in a member because its work is gone: a copy that must go while
/// the agent cannot be reached gets a tombstone — the work turned into the deletion of the
/// copy the agent last reported (by UID), or into a label removal when orphaning. A deletion
/// not carried out yet is withdrawn when the object is placed there again (the copy stays,
/// and the plan applies to it when the agent is back).
pub fn work_fate(work: &Work, planned: Option<&ClusterAction>, orphaning: bool) -> WorkFate {
    if is_removal(work) {
        if done(work) {
            return if planned.is_some() {
                WorkFate::Keep
            } else {
                WorkFate::Delete
            };
        }
        let placed_again = matches!(
            planned,
            Some(ClusterAction::Blocked {
                status: PropagationStatus::ClusterNotReady,
                ..
            })
        );
        return if placed_again && work.spec.action == WorkAction::Delete.as_str() {
            WorkFate::Delete
        } else {
            WorkFate::Keep
        };
    }
    if planned.is_some() {
        return WorkFate::Keep;
    }
    // The agent reported on the current request, and no managed copy: nothing to undo.
    let no_copy = reported(work)
        && work
            .status
            .as_ref()
            .and_then(|s| s.copy.as_ref())
            .is_some_and(|c| !c.exists || c.managed_label.as_deref() != Some("true"));
    if no_copy {
        WorkFate::Delete
    } else {
        WorkFate::Rewrite(Box::new(tombstone(work, orphaning)))
    }
}

/// The fate of a work whose federated object is gone (the object's last reconcile could not
/// settle it): a removal stays until the agent has carried it out, anything else becomes a
/// tombstone.
pub fn orphaned_work_fate(work: &Work) -> WorkFate {
    match (is_removal(work), done(work)) {
        (true, true) => WorkFate::Delete,
        (true, false) => WorkFate::Keep,
        (false, _) => WorkFate::Rewrite(Box::new(tombstone(work, false))),
    }
}

/// The request that removes the work's copy: its label only when `orphaning`, else the copy
/// itself — the one the agent last reported (its UID as precondition), or, when it reported
/// none, whatever managed copy of this control plane the agent finds
/// ([`delete_guard`]).
pub fn tombstone(work: &Work, orphaning: bool) -> WorkSpec {
    if orphaning {
        return orphan_spec(&work.spec);
    }
    let reported_uid = work
        .status
        .as_ref()
        .and_then(|s| s.copy.as_ref())
        .filter(|c| c.exists && c.managed_label.as_deref() == Some("true"))
        .and_then(|c| c.uid.clone());
    WorkSpec {
        action: WorkAction::Delete.as_str().to_owned(),
        uid: reported_uid,
        ..orphan_spec(&work.spec)
    }
}

/// The agent's check before a deletion that names no UID (a tombstone for a copy it never
/// reported): what to do with the live copy — delete exactly it when it is managed and
/// carries this control plane's proof of ownership, only remove its label when it is
/// managed without such proof (KubeFed's rule), leave it otherwise. Unknown is never a yes:
/// without the control plane's identity nothing is deleted.
pub fn delete_guard(
    copy: Option<&MemberObject>,
    control_plane: Option<&str>,
) -> Option<ClusterAction> {
    let copy = copy.filter(|c| c.is_managed() && !c.terminating)?;
    let owner = copy
        .annotations
        .get(crate::gc::OWNER_ANNOTATION)
        .map(String::as_str);
    let ours = control_plane.is_some_and(|plane| crate::gc::owned_by(plane, owner).is_some());
    if ours {
        return Some(ClusterAction::Delete(crate::plan::DeleteAction {
            options: None,
            uid: copy.uid.clone(),
        }));
    }
    // Another control plane's proof: not ours to touch.
    owner.is_none().then_some(ClusterAction::RemoveManagedLabel)
}

/// The label removal that replaces a work's request ([`WorkFate::Orphan`]).
pub fn orphan_spec(spec: &WorkSpec) -> WorkSpec {
    WorkSpec {
        action: WorkAction::RemoveManagedLabel.as_str().to_owned(),
        object: None,
        desired_hash: String::new(),
        creates: false,
        create_only: false,
        adopts: false,
        released_fields: Vec::new(),
        delete_options: None,
        uid: None,
        ..spec.clone()
    }
}

/// `unjoin --remove-managed-resources` of a pull member, through its agent: the request
/// that deletes the managed copy the agent last reported — exactly that copy (its UID as the
/// precondition) — or `None` when it reported none (the work can go at once).
pub fn removal_request(work: &Work) -> Option<WorkSpec> {
    let copy = work.status.as_ref()?.copy.as_ref()?;
    if !copy.exists || copy.managed_label.as_deref() != Some("true") || copy.uid.is_none() {
        return None;
    }
    Some(WorkSpec {
        action: WorkAction::Delete.as_str().to_owned(),
        uid: copy.uid.clone(),
        ..orphan_spec(&work.spec)
    })
}

/// Whether the agent has carried out a removal request: reported on it, and done (or the
/// copy already gone).
pub fn removal_done(work: &Work) -> bool {
    let Some(status) = work.status.as_ref().filter(|_| reported(work)) else {
        return false;
    };
    status.result == WORK_RESULT_DONE || status.copy.as_ref().is_some_and(|c| !c.exists)
}

#[cfg(test)]
mod tests;
