//! Applying the desired object to one member cluster, in steps: look at what is there when
//! needed (adoption, create-only, retained fields), hand retained fields over, write (apply,
//! or create-only POST), recreate after an immutable-field refusal when asked, and report.

use hubfed_api::names::{FIELD_MANAGER, MANAGED_LABEL, RECREATE_ON_IMMUTABLE_ANNOTATION};
use hubfed_core::plan::{ApplyAction, ClusterPlan, FederatedObject};
use hubfed_core::readiness::{needs_status, readiness};
use hubfed_core::status::PropagationStatus;
use hubfed_core::version::{RecordedApply, object_version};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PropagationPolicy};
use kube::runtime::events::EventType;
use serde_json::{Value, json};
use std::time::Duration;
use tracing::{debug, info};

use hubfed_core::drift::{
    DRIFT_ANNOTATION, DriftAction, DriftMode, DriftRecord, FieldChange, conflict_manager,
    drift_mode, drift_record, fields_v1_contains, member_fields, people_fields, remove_field,
    resolve_conflicts, take_over_patch,
};

use crate::metrics::METRICS;

use super::create_only::{self, Created};
use super::exec_env::ExecEnv;
use super::member_io::{
    ClusterResult, MemberCall, RETAINED_FIELD_MANAGER, apply_encoded, error_message,
    is_immutable_refusal, is_not_found, is_refusal, outcome, patch_answer,
};
use super::members::Unmanaged;

/// One apply of `apply` to `cp.cluster` through `api`.
struct ApplyStep<'a> {
    env: &'a ExecEnv<'a>,
    object: &'a FederatedObject,
    cp: &'a ClusterPlan,
    api: &'a Api<DynamicObject>,
    apply: &'a ApplyAction,
    /// "Kind namespace/name", for messages.
    what: String,
}

/// Why a write did not happen.
enum WriteError {
    /// Create-only (adoption Disabled) and an object of that name exists: nothing written.
    Exists,
    Api(kube::Error),
}

pub(super) async fn apply_to_cluster(
    env: &ExecEnv<'_>,
    object: &FederatedObject,
    cp: &ClusterPlan,
    api: &Api<DynamicObject>,
    apply: &ApplyAction,
) -> ClusterResult {
    let step = ApplyStep {
        env,
        object,
        cp,
        api,
        apply,
        what: env.what(object),
    };
    let live = match step.look().await {
        Ok(live) => live,
        Err(refused) => return refused,
    };
    if let Err(refused) = step.hand_over_retained(live.as_ref()).await {
        return refused;
    }
    let creating = apply.creates && live.is_none();
    match step.write(creating).await {
        Ok((applied, drift)) => step.applied(&applied, creating, &drift),
        Err(WriteError::Exists) => step.already_exists(),
        Err(WriteError::Api(e)) => step.failed(&e, creating),
    }
}

/// Changes found made to a copy behind hubfed's back, by what was done about them.
#[derive(Default)]
struct Drift {
    reverted: Vec<FieldChange>,
    reported: Vec<FieldChange>,
}

impl ApplyStep<'_> {
    fn cluster(&self) -> &str {
        &self.cp.cluster
    }

    /// Whether a write's answer must be the whole object (its status shows the copy's
    /// readiness), not its metadata only ([`patch_answer`]).
    fn whole(&self) -> bool {
        needs_status(self.env.target_group, self.env.target_kind)
    }

    fn fail(&self, status: Option<PropagationStatus>, message: String) -> ClusterResult {
        ClusterResult::unwritten(outcome(self.cluster(), status, Some(message)))
    }

    fn already_exists(&self) -> ClusterResult {
        self.fail(
            Some(PropagationStatus::AlreadyExists),
            format!(
                "{} already exists in the cluster and adoptResources is Disabled",
                self.what
            ),
        )
    }

    /// The member cache holds managed objects only. Before creating, an unmanaged object of
    /// the same name must be looked at (adoption, AlreadyExists, managed=false). With
    /// adoption enabled, the cache of unmanaged names says whether there is one, so most
    /// creates need no GET; with adoption disabled, a GET rules out even an object created a
    /// moment ago whose watch event is still on its way. Handing retained fields over needs
    /// the live managedFields. Returns the live object if it was looked at and exists.
    async fn look(&self) -> Result<Option<DynamicObject>, ClusterResult> {
        let (object, apply, cluster) = (self.object, self.apply, self.cluster());
        let look = !apply.released_fields.is_empty()
            || (apply.creates
                && (apply.create_only
                    || (self.env.unmanaged)(cluster, &object.name, object.namespace.as_deref())
                        != Unmanaged::Absent));
        if !look {
            return Ok(None);
        }
        let call = MemberCall::start(cluster, "get");
        let found = self.api.get_opt(&object.name).await;
        call.end(found.is_ok());
        let live = match found {
            Ok(found) => found,
            Err(e) => {
                return Err(self.fail(Some(PropagationStatus::RetrievalFailed), error_message(&e)));
            }
        };
        if let (true, Some(existing)) = (apply.creates, &live) {
            match existing.labels().get(MANAGED_LABEL).map(String::as_str) {
                Some("true") => {}
                Some("false") => {
                    return Err(self.fail(
                        Some(PropagationStatus::ManagedLabelFalse),
                        format!(
                            "{} is labeled {MANAGED_LABEL}=false in the cluster",
                            self.what
                        ),
                    ));
                }
                _ if apply.create_only => return Err(self.already_exists()),
                _ => self.env.events.publish(
                    EventType::Normal,
                    "AdoptInCluster",
                    &format!(
                        "Adopting existing {} in cluster {cluster:?}: an update will be attempted instead of a creation",
                        self.what
                    ),
                ),
            }
        }
        Ok(live)
    }

    /// Fields left to the member (retainReplicas): if hubfed still owns them, hand them to a
    /// separate manager at their current value first, or the apply would delete them.
    ///
    /// The handover carries the copy's resourceVersion as its precondition: a copy changed
    /// since it was read — an HPA or `kubectl scale` setting the replicas in between — is read
    /// again, instead of having the value it replaced written back over it.
    async fn hand_over_retained(&self, live: Option<&DynamicObject>) -> Result<(), ClusterResult> {
        let fields = &self.apply.released_fields;
        let mut reread: Option<DynamicObject> = None;
        for attempt in 1..=HANDOVER_ATTEMPTS {
            let existing = if attempt == 1 { live } else { reread.as_ref() };
            let Some(handover) = existing
                .filter(|_| !fields.is_empty())
                .and_then(|existing| ownership_handover(existing, fields))
            else {
                return Ok(());
            };
            let handed = patch_answer(
                self.api,
                &self.object.name,
                &PatchParams::apply(RETAINED_FIELD_MANAGER).force(),
                &Patch::Apply(&handover),
                false,
            )
            .await;
            match handed {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 && attempt < HANDOVER_ATTEMPTS => {
                    let call = MemberCall::start(self.cluster(), "get");
                    let found = self.api.get_opt(&self.object.name).await;
                    call.end(found.is_ok());
                    reread = found.map_err(|e| {
                        self.fail(Some(PropagationStatus::RetrievalFailed), error_message(&e))
                    })?;
                }
                Err(e) => {
                    return Err(ClusterResult {
                        transient: !is_refusal(&e),
                        ..self.fail(
                            Some(PropagationStatus::FieldRetentionFailed),
                            error_message(&e),
                        )
                    });
                }
            }
        }
        Ok(())
    }

    /// The write: a create-only POST when creating with adoption Disabled, else a
    /// server-side apply — of a copy hubfed already manages, with its drift handled
    /// ([`Self::update_copy`]); a refusal of an immutable field recreates the object when its
    /// federated object asks for that.
    async fn write(&self, creating: bool) -> Result<(DynamicObject, Drift), WriteError> {
        let (api, name, body) = (self.api, &self.object.name, &*self.apply.object);
        let whole = self.whole();
        let params = apply_params(true);
        // A copy hubfed manages (observed in its cache). An object taken over — adopted, or
        // found by the look before a create — is overwritten as KubeFed did: forced.
        if !self.apply.creates && !self.apply.adopts {
            let call = MemberCall::start(self.cluster(), "update");
            let result = self.update_copy().await;
            call.end(result.is_ok());
            return match result {
                Err(e) if is_immutable_refusal(&e) && self.recreate_on_immutable() => self
                    .recreate(&e, &params)
                    .await
                    .map(|o| (o, Drift::default())),
                result => result.map_err(WriteError::Api),
            };
        }
        let call = MemberCall::start(self.cluster(), if creating { "create" } else { "update" });
        let result = if creating && self.apply.create_only {
            match create_only::create(api, name, &params, body, whole).await {
                Ok(Created::Created(created)) => Ok(*created),
                Ok(Created::Exists) => {
                    call.end(false);
                    return Err(WriteError::Exists);
                }
                Err(e) => Err(e),
            }
        } else {
            match apply_encoded(api, name, &params, &self.apply.object, whole).await {
                // A copy a create-only POST left half done (see create_only).
                Ok(applied) => Ok(create_only::settle_ownership(api, name, applied, whole).await),
                Err(e) => Err(e),
            }
        };
        call.end(result.is_ok());
        match result {
            Err(e) if is_immutable_refusal(&e) && self.recreate_on_immutable() => {
                self.recreate(&e, &params).await
            }
            result => result.map_err(WriteError::Api),
        }
        .map(|applied| (applied, Drift::default()))
    }

    async fn recreate(
        &self,
        refusal: &kube::Error,
        params: &PatchParams,
    ) -> Result<DynamicObject, WriteError> {
        info!(cluster = self.cluster(), object = %self.what, "recreating after an immutable-field refusal");
        self.env.events.publish(
            EventType::Normal,
            "RecreateInCluster",
            &format!(
                "Recreating {} in cluster {:?}: {}",
                self.what,
                self.cluster(),
                error_message(refusal)
            ),
        );
        recreate(
            self.api,
            &self.object.name,
            params,
            &self.apply.object,
            self.whole(),
        )
        .await
        .map_err(WriteError::Api)
    }

    /// Applies to a copy hubfed manages, sorting out what others changed in it
    /// ([`hubfed_core::drift`]): the apply is not forced, so a field another manager changed
    /// comes back as a conflict naming it — people's changes are forced back, controllers'
    /// fields left out ([`Self::resolve_conflict`]); fields people added that hubfed does not
    /// send are taken over and so removed by a second apply ([`Self::take_over_added`]).
    async fn update_copy(&self) -> Result<(DynamicObject, Drift), kube::Error> {
        let (api, name, whole) = (self.api, &self.object.name, self.whole());
        let mode = drift_mode(
            self.object
                .annotations
                .get(DRIFT_ANNOTATION)
                .map(String::as_str),
        )
        .unwrap_or_default();
        let mut drift = Drift::default();
        // Copied only when a conflict makes hubfed leave fields out.
        let mut body = std::borrow::Cow::Borrowed(&*self.apply.object);
        let mut force = mode == DriftMode::RevertAll;
        // The first attempt sends the body every cluster shares, as encoded once for all.
        let params = apply_params(force);
        let applied = match apply_encoded(api, name, &params, &self.apply.object, whole).await {
            Err(e) if !apply_conflicts(&e).is_empty() => {
                force = self
                    .resolve_conflict(apply_conflicts(&e), mode, body.to_mut(), &mut drift)
                    .await?;
                apply(api, name, force, &body, whole).await?
            }
            result => result?,
        };
        // A copy a create-only POST left half done (see create_only).
        let applied = create_only::settle_ownership(api, name, applied, whole).await;
        let applied = self
            .take_over_added(applied, mode, &body, force, &mut drift)
            .await?;
        Ok((applied, drift))
    }

    /// Sorts out a refused apply's conflicts: fields left to a controller (or reported only)
    /// are taken out of `body`, people's and stale co-owners' are to be forced; records the
    /// drift. Whether the next apply must be forced.
    async fn resolve_conflict(
        &self,
        conflicts: Vec<FieldChange>,
        mode: DriftMode,
        body: &mut Value,
        drift: &mut Drift,
    ) -> Result<bool, kube::Error> {
        // hubfed's own managers (an Update entry of its name, the retained-fields manager)
        // are never "others": their fields are always taken back.
        let (own, others): (Vec<FieldChange>, Vec<FieldChange>) = conflicts
            .into_iter()
            .partition(|c| c.manager == FIELD_MANAGER || c.manager == RETAINED_FIELD_MANAGER);
        // Which fields hubfed still co-owns: those are the template's changes.
        let live = self.api.get_metadata(&self.object.name).await?;
        let ours: Vec<Value> = live
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|e| {
                e.manager.as_deref() == Some(FIELD_MANAGER)
                    && e.operation.as_deref() == Some("Apply")
                    && e.subresource.as_deref().unwrap_or_default().is_empty()
            })
            .filter_map(|e| e.fields_v1.as_ref().map(|f| f.0.clone()))
            .collect();
        let hubfed_owns = |field: &str| ours.iter().any(|f| fields_v1_contains(f, field));
        let people = self.env.drift_people;
        let mut decision = resolve_conflicts(others, mode, people, hubfed_owns);
        let unremovable: Vec<FieldChange> = decision
            .left_out()
            .filter(|change| !remove_field(body, &change.field))
            .cloned()
            .collect();
        if !unremovable.is_empty() {
            // Better to take a field back than to stay refused for ever.
            info!(cluster = self.cluster(), object = %self.what, fields = ?unremovable,
                "drift: fields not found in the apply body are taken back");
            decision.keep.retain(|c| !unremovable.contains(c));
            decision.reported.retain(|c| !unremovable.contains(c));
            decision.revert.extend(unremovable);
        }
        let force = !decision.revert.is_empty() || !decision.stale.is_empty() || !own.is_empty();
        drift.reverted = decision.revert;
        drift.reported = decision.reported;
        Ok(force)
    }

    /// Fields people added that hubfed does not send (read from the applied object's
    /// managedFields): handed to hubfed's manager and removed by applying `body` again — or,
    /// under `hubfed.io/drift: report`, only recorded.
    async fn take_over_added(
        &self,
        applied: DynamicObject,
        mode: DriftMode,
        body: &Value,
        force: bool,
        drift: &mut Drift,
    ) -> Result<DynamicObject, kube::Error> {
        let people = self.env.drift_people;
        let managed = applied
            .metadata
            .managed_fields
            .as_deref()
            .unwrap_or_default();
        let member = member_fields(&self.apply.released_fields);
        let added = people_fields(managed, FIELD_MANAGER, people, &member);
        if added.is_empty() {
            return Ok(applied);
        }
        if mode == DriftMode::Report {
            drift.reported.extend(added);
            return Ok(applied);
        }
        let rv = applied
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default();
        let Some(take_over) = take_over_patch(managed, FIELD_MANAGER, people, &member, rv) else {
            return Ok(applied);
        };
        let (api, name, whole) = (self.api, &self.object.name, self.whole());
        patch_answer(
            api,
            name,
            &PatchParams::default(),
            &Patch::Merge(&take_over),
            false,
        )
        .await?;
        let applied = apply(api, name, force, body, whole).await?;
        drift.reverted.extend(added);
        Ok(applied)
    }

    fn recreate_on_immutable(&self) -> bool {
        self.object
            .annotations
            .get(RECREATE_ON_IMMUTABLE_ANNOTATION)
            .map(String::as_str)
            == Some("true")
    }

    /// Records what was applied (its version and desired hash) and reports success, and any
    /// drift found on the way.
    fn applied(&self, applied: &DynamicObject, creating: bool, drift: &Drift) -> ClusterResult {
        let version = object_version(
            applied.metadata.generation.unwrap_or(0),
            applied.metadata.resource_version.as_deref().unwrap_or(""),
        );
        if let Some(applied) = self.env.applied {
            applied.insert(
                self.object.namespace.as_deref(),
                &self.object.name,
                self.cluster(),
                RecordedApply {
                    version: version.clone(),
                    desired_hash: Some(self.apply.desired_hash.clone()),
                },
            );
        }
        debug!(cluster = self.cluster(), object = %self.what, version = %version, "applied");
        let mut outcome = outcome(self.cluster(), Some(PropagationStatus::Ok), None);
        if let Some(outcome) = &mut outcome {
            outcome.drift = self.report_drift(drift);
        }
        let readiness = needs_status(self.env.target_group, self.env.target_kind).then(|| {
            let answer = serde_json::to_value(applied).unwrap_or_default();
            readiness(self.env.target_group, self.env.target_kind, &answer)
        });
        ClusterResult {
            readiness,
            outcome,
            version: Some(version),
            wrote: true,
            done: Some(if creating {
                ("CreateInCluster", "Creating")
            } else {
                ("UpdateInCluster", "Updating")
            }),
            transient: false,
        }
    }

    /// A `Drifted` Warning Event per kind of action, `hubfed_drift_total`, and the record for
    /// `status.clusters[].lastDrift` (the reverted changes win over reported ones).
    fn report_drift(&self, drift: &Drift) -> Option<DriftRecord> {
        let now = super::hub_writes::now_rfc3339();
        let mut record = None;
        for (changes, action) in [
            (&drift.reported, DriftAction::Reported),
            (&drift.reverted, DriftAction::Reverted),
        ] {
            if changes.is_empty() {
                continue;
            }
            let drifted = drift_record(changes, action.as_str(), &now);
            record = Some(drifted.clone());
            let what = format!("{action:?} {:?} {:?}", drifted.managers, drifted.fields);
            if !self
                .env
                .drift_reported
                .report(self.object, self.cluster(), &what)
            {
                continue;
            }
            let what = match action {
                DriftAction::Reverted => "reverted",
                DriftAction::Reported => "left in place (drift: report)",
            };
            info!(cluster = self.cluster(), object = %self.what, fields = ?drifted.fields,
                managers = ?drifted.managers, action = action.as_str(), "drift");
            self.env.events.publish(
                EventType::Warning,
                "Drifted",
                &format!(
                    "{} in cluster {:?} was changed by {}: {}; {what}",
                    self.what,
                    self.cluster(),
                    drifted.managers.join(", "),
                    drifted.fields.join(", ")
                ),
            );
            METRICS
                .drift_total
                .with_label_values(&[&self.env.type_label, self.cluster(), action.as_str()])
                .inc();
        }
        record
    }

    /// A refused write: a Warning Event, and the cluster's failure status.
    fn failed(&self, error: &kube::Error, creating: bool) -> ClusterResult {
        let reason = if creating {
            "CreateInClusterFailed"
        } else {
            "UpdateInClusterFailed"
        };
        let message = error_message(error);
        self.env.events.publish(
            EventType::Warning,
            reason,
            &format!(
                "Failed to apply {} in cluster {:?}: {message}",
                self.what,
                self.cluster()
            ),
        );
        ClusterResult {
            transient: !is_refusal(error),
            ..self.fail(self.cp.action.status_on_failure(), message)
        }
    }
}

/// Deletes the member object, waits until it is gone, and applies it again (the answer is
/// the whole object only when `whole`: [`patch_answer`]).
async fn recreate(
    api: &Api<DynamicObject>,
    name: &str,
    params: &PatchParams,
    body: &Value,
    whole: bool,
) -> Result<DynamicObject, kube::Error> {
    let background = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    match api.delete(name, &background).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(e),
    }
    for _ in 0..100 {
        match api.get_metadata_opt(name).await? {
            None => break,
            Some(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    patch_answer(api, name, params, &Patch::Apply(body), whole).await
}

/// Handovers tried before the write gives up for this reconcile (each after the copy changed
/// under the one before).
const HANDOVER_ATTEMPTS: usize = 3;

/// An apply body, for the retained-fields manager, holding `fields` (JSON pointers) at their
/// current member values, on the condition that the copy is still at `existing`'s
/// resourceVersion — `None` when hubfed's manager does not own any of them.
fn ownership_handover(existing: &DynamicObject, fields: &[String]) -> Option<Value> {
    let owned_by_hubfed = existing
        .metadata
        .managed_fields
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|m| {
            m.manager.as_deref() == Some(FIELD_MANAGER) && m.operation.as_deref() == Some("Apply")
        })
        .filter_map(|m| m.fields_v1.as_ref().map(|f| &f.0))
        .any(|set| fields.iter().any(|pointer| owns(set, pointer)));
    if !owned_by_hubfed {
        return None;
    }
    let live = serde_json::to_value(existing).ok()?;
    let mut body = json!({
        "apiVersion": live.get("apiVersion")?,
        "kind": live.get("kind")?,
        "metadata": {"name": existing.metadata.name},
    });
    if let Some(version) = &existing.metadata.resource_version {
        body["metadata"]["resourceVersion"] = json!(version);
    }
    if let Some(ns) = &existing.metadata.namespace {
        body["metadata"]["namespace"] = json!(ns);
    }
    for pointer in fields {
        if let Some(value) = live.pointer(pointer) {
            set_pointer(&mut body, pointer, value.clone());
        }
    }
    Some(body)
}

/// Whether a managedFields `fieldsV1` set contains the field at `pointer` (object keys only).
fn owns(set: &Value, pointer: &str) -> bool {
    let mut node = set;
    for segment in pointer.trim_start_matches('/').split('/') {
        match node.get(format!("f:{segment}")) {
            Some(next) => node = next,
            None => return false,
        }
    }
    true
}

fn set_pointer(target: &mut Value, pointer: &str, value: Value) {
    let segments: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    let mut node = target;
    for (i, segment) in segments.iter().enumerate() {
        if i + 1 == segments.len() {
            node[*segment] = value;
            return;
        }
        if node.get(*segment).is_none() {
            node[*segment] = json!({});
        }
        node = &mut node[*segment];
    }
}

/// The field-manager conflicts a refused server-side apply names (none for other errors).
fn apply_conflicts(error: &kube::Error) -> Vec<FieldChange> {
    let kube::Error::Api(status) = error else {
        return Vec::new();
    };
    if status.code != 409 {
        return Vec::new();
    }
    status
        .details
        .iter()
        .flat_map(|details| &details.causes)
        .filter(|cause| cause.reason == "FieldManagerConflict")
        .filter_map(|cause| {
            Some(FieldChange {
                manager: conflict_manager(&cause.message)?.to_owned(),
                field: cause.field.clone(),
            })
        })
        .collect()
}

/// A server-side apply of `body` as hubfed's field manager, forced or not ([`patch_answer`]).
async fn apply(
    api: &Api<DynamicObject>,
    name: &str,
    force: bool,
    body: &Value,
    whole: bool,
) -> Result<DynamicObject, kube::Error> {
    patch_answer(api, name, &apply_params(force), &Patch::Apply(body), whole).await
}

/// Server-side apply as hubfed's field manager, forced or not, without the member's check
/// for unknown fields (`fieldValidation=Ignore`): by default (`Warn`) the member drops them
/// all the same and only says so in a warning header, which nothing here reads — the check
/// cost the members 6–7 % of their apply throughput (docs/benchmarks.md).
fn apply_params(force: bool) -> PatchParams {
    let params = PatchParams::apply(FIELD_MANAGER).validation_ignore();
    if force { params.force() } else { params }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applies_skip_the_members_unknown_field_check() {
        for force in [false, true] {
            let params = apply_params(force);
            assert_eq!(params.field_manager.as_deref(), Some(FIELD_MANAGER));
            assert_eq!(params.force, force);
            assert!(matches!(
                params.field_validation,
                Some(kube::api::ValidationDirective::Ignore)
            ));
        }
    }

    fn copy(manager: &str, operation: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "api",
                "namespace": "ns",
                "resourceVersion": "41",
                "managedFields": [{
                    "manager": manager,
                    "operation": operation,
                    "apiVersion": "apps/v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:replicas": {}}},
                }],
            },
            "spec": {"replicas": 2},
        }))
        .unwrap()
    }

    /// The handover holds the member's value on the condition that the copy is unchanged
    /// since it was read; there is none once another manager has taken the field.
    #[test]
    fn a_handover_is_conditional_on_the_copy_read() {
        let fields = ["/spec/replicas".to_owned()];
        let handover = ownership_handover(&copy(FIELD_MANAGER, "Apply"), &fields).unwrap();
        assert_eq!(
            handover,
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "api", "namespace": "ns", "resourceVersion": "41"},
                "spec": {"replicas": 2},
            })
        );
        assert_eq!(
            ownership_handover(&copy("kubectl-scale", "Update"), &fields),
            None
        );
    }
}
