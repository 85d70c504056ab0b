//! The PlacementPolicy controller (placement by intent, beyond KubeFed).
//!
//! For each PlacementPolicy it reads the federated object of the same namespace and name (its
//! kind resolved through the FederatedTypeConfigs), the registry and the policy's own status
//! (the previous choice); [`hubfed_core::intent::choose`] decides; the choice goes into the
//! object's `spec.placement.clusters` (unless a ReplicaSchedulingPreference of the same name
//! schedules it — the RSP controller runs, the RSP targets that kind and is valid,
//! [`rsp_writes_placement`]: the RSP then spreads replicas over the chosen clusters and writes
//! the placement) and into the policy's status, with an Event for every change.
//!
//! Triggers: the policy, the registry (clusters joining, leaving, turning Ready or not), the
//! ReplicaSchedulingPreference of the same name when the RSP scheduler runs (created, fixed,
//! broken or deleted, it takes the placement over or hands it back), the end of a grace
//! period ([`Choice::recheck_in`]), and a resync every [`RESYNC`] (the target object is not
//! watched: one created after its policy is placed within [`TARGET_WAIT`]).

use std::sync::Arc;
use std::time::Duration;

use hubfed_api::federatedtypeconfig::FederatedTypeConfig;
use hubfed_api::scheduling::{
    ChosenCluster, FailedOver as FailedOverStatus, PlacementPolicy, PlacementPolicyStatus,
    PolicyCondition, ReplicaSchedulingPreference, ReplicaSchedulingPreferenceSpec,
};
use hubfed_core::intent::{Choice, Chosen, ClusterState, FailedOver, Previous, Reason, choose};
use hubfed_core::placement::ControlPlaneScope;
use hubfed_core::schedule::{TARGET_KINDS, rsp_writes_placement};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource as _, ResourceExt as _};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::clusters::MemberClientPool;
use crate::events::reporter;
use crate::watch::{Served, drive, registry_controller_of, scope_namespace, scoped};

/// How often a policy is looked at again when nothing else wakes it.
pub const RESYNC: Duration = Duration::from_secs(30);
/// How often a policy whose target does not exist yet looks for it.
pub const TARGET_WAIT: Duration = Duration::from_secs(5);
/// The field manager of the policy controller's writes.
pub const FIELD_MANAGER: &str = "hubfed-placement";
/// Every field of a policy's status (see [`patch_status`]).
const STATUS_FIELDS: [&str; 6] = [
    "observedGeneration",
    "clusters",
    "failedOver",
    "summary",
    "candidates",
    "conditions",
];
/// The condition type of a policy's status.
pub const PLACED: &str = "Placed";

/// What the policy controller needs.
pub struct PolicyController {
    pub hub: Client,
    pub pool: Arc<MemberClientPool>,
    pub scope: ControlPlaneScope,
    pub kubefed_namespace: String,
    /// Whether the RSP controller runs (feature gate `SchedulerPreferences`): only then does
    /// an RSP of the same name write the placement instead of the policy.
    pub rsp_scheduler: bool,
}

struct Context {
    controller: PolicyController,
    recorder: Recorder,
}

#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
struct PolicyError {
    what: String,
    #[source]
    source: kube::Error,
}

fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> PolicyError {
    let what = what.into();
    move |source| PolicyError { what, source }
}

impl PolicyController {
    /// Runs the controller until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let hub = self.hub.clone();
        let namespace = scope_namespace(self.scope, &self.kubefed_namespace);
        // The PlacementPolicy CRD may not be installed (a hub taken over from KubeFed): the
        // watch waits for it quietly, and policies are placed once it is (`crate::hub_crds`).
        let mut controller = registry_controller_of::<PlacementPolicy>(
            &hub,
            namespace,
            &self.pool,
            &shutdown,
            Served::MaybeNot,
        );
        if self.rsp_scheduler {
            // Whether an RSP of the same name writes the placement changes with the RSP: one
            // created, fixed, broken or deleted wakes the policy of its namespace and name (a
            // policy that does not exist is not reconciled). Only when the RSP scheduler runs:
            // otherwise RSPs never matter. Backoff: the RSP CRD may not be installed.
            let rsps: Api<ReplicaSchedulingPreference> = scoped(&hub, namespace);
            let stream = watcher(rsps, watcher::Config::default())
                .default_backoff()
                .touched_objects();
            controller = controller.watches_stream(stream, |rsp: ReplicaSchedulingPreference| {
                let namespace = rsp.namespace()?;
                Some(ObjectRef::<PlacementPolicy>::new(&rsp.name_any()).within(&namespace))
            });
        }
        let reporter = reporter("placementpolicy-controller");
        let ctx = Arc::new(Context {
            recorder: Recorder::new(hub, reporter),
            controller: self,
        });
        info!("PlacementPolicy controller started");
        let results = controller.run(reconcile, error_policy, ctx);
        drive(results, "PlacementPolicy controller").await;
    }
}

fn error_policy(policy: Arc<PlacementPolicy>, error: &PolicyError, _ctx: Arc<Context>) -> Action {
    warn!(policy = %policy.name_any(), error = %error, "placement failed; retrying in 15s");
    Action::requeue(Duration::from_secs(15))
}

fn publish(ctx: &Context, policy: &PlacementPolicy, type_: EventType, reason: &str, note: String) {
    crate::events::publish(&ctx.recorder, &policy.object_ref(&()), type_, reason, &note);
}

/// The federated type named `kind` by an FTC, if one is enabled.
async fn federated_type(ctx: &Context, kind: &str) -> Result<Option<ApiResource>, PolicyError> {
    let c = &ctx.controller;
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(c.hub.clone(), &c.kubefed_namespace);
    let list = ftcs
        .list(&Default::default())
        .await
        .map_err(kube_err("listing FederatedTypeConfigs"))?;
    Ok(list
        .items
        .into_iter()
        .find(|ftc| ftc.spec.federated_type.kind == kind && ftc.spec.federated_type.namespaced())
        .map(|ftc| ftc.spec.federated_type.to_dynamic()))
}

async fn reconcile(policy: Arc<PlacementPolicy>, ctx: Arc<Context>) -> Result<Action, PolicyError> {
    let namespace = policy.namespace().unwrap_or_default();
    let name = policy.name_any();
    let kind = policy.spec.target_kind.clone();
    let Some(resource) = federated_type(&ctx, &kind).await? else {
        let message = format!("no enabled namespaced federated type of kind {kind:?}");
        set_condition(&ctx, &policy, None, false, "UnknownTargetKind", &message).await?;
        return Ok(Action::requeue(RESYNC));
    };
    let hub = ctx.controller.hub.clone();
    let targets: Api<DynamicObject> = Api::namespaced_with(hub.clone(), &namespace, &resource);
    let Some(target) = targets
        .get_opt(&name)
        .await
        .map_err(kube_err(format!("reading {kind} {namespace}/{name}")))?
    else {
        let message = format!("{kind} {namespace}/{name} does not exist (yet)");
        set_condition(&ctx, &policy, None, false, "TargetNotFound", &message).await?;
        return Ok(Action::requeue(TARGET_WAIT));
    };
    let now = Timestamp::now().as_second();
    let clusters: Vec<ClusterState> = ctx
        .controller
        .pool
        .clusters()
        .iter()
        .map(|c| ClusterState {
            name: c.name.clone(),
            labels: c.labels.clone(),
            ready: c.ready,
            since: c.ready_since,
        })
        .collect();
    let previous = previous(policy.status.as_ref());
    let key = format!("{namespace}/{name}");
    let choice = match choose(&policy.spec, &key, &clusters, &previous, now) {
        Ok(choice) => choice,
        Err(e) => {
            let message = format!("spec: {e}");
            publish(
                &ctx,
                &policy,
                EventType::Warning,
                "InvalidSpec",
                message.clone(),
            );
            set_condition(&ctx, &policy, None, false, "InvalidSpec", &message).await?;
            return Ok(Action::await_change());
        }
    };
    let rsp = if ctx.controller.rsp_scheduler && TARGET_KINDS.contains(&kind.as_str()) {
        rsp_of(&ctx, &namespace, &name).await?
    } else {
        None
    };
    let scheduled_by_rsp = rsp_writes_placement(&kind, rsp.as_ref(), ctx.controller.rsp_scheduler);
    if !scheduled_by_rsp {
        write_placement(&targets, &target, &choice).await?;
    }
    report_changes(&ctx, &policy, &previous, &choice, &kind, &key);
    let status = status_of(&policy, &choice, now);
    if unsatisfied_is_news(policy.status.as_ref(), &status, &choice) {
        for unsatisfied in &choice.unsatisfied {
            publish(
                &ctx,
                &policy,
                EventType::Warning,
                "ConstraintUnsatisfied",
                unsatisfied.clone(),
            );
        }
    }
    if policy.status.as_ref() != Some(&status) {
        patch_status(&ctx, &policy, &status).await?;
    }
    Ok(Action::requeue(match choice.recheck_in {
        Some(seconds) => Duration::from_secs(u64::try_from(seconds).unwrap_or(1)).min(RESYNC),
        None => RESYNC,
    }))
}

/// The spec of the ReplicaSchedulingPreference `namespace/name`, if there is one.
async fn rsp_of(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<Option<ReplicaSchedulingPreferenceSpec>, PolicyError> {
    let rsps: Api<ReplicaSchedulingPreference> =
        Api::namespaced(ctx.controller.hub.clone(), namespace);
    match rsps.get_opt(name).await {
        Ok(found) => Ok(found.map(|rsp| rsp.spec)),
        // The RSP CRD is not installed: no RSP.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(kube_err(format!(
            "reading ReplicaSchedulingPreference {namespace}/{name}"
        ))(e)),
    }
}

/// Writes `spec.placement.clusters` when it differs from the choice (merge patch carrying the
/// resourceVersion read; the `clusterSelector` is left as it is).
async fn write_placement(
    targets: &Api<DynamicObject>,
    target: &DynamicObject,
    choice: &Choice,
) -> Result<(), PolicyError> {
    let mut current: Vec<&str> = target.data["spec"]["placement"]["clusters"]
        .as_array()
        .map(|list| list.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    current.sort_unstable();
    let wanted: Vec<&str> = choice.clusters.keys().map(String::as_str).collect();
    let present = target.data["spec"]["placement"]["clusters"].is_array();
    if present && current == wanted {
        return Ok(());
    }
    let clusters: Vec<serde_json::Value> = wanted
        .iter()
        .map(|name| serde_json::json!({"name": name}))
        .collect();
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": target.resource_version()},
        "spec": {"placement": {"clusters": clusters}},
    });
    let name = target.name_any();
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    targets
        .patch(&name, &params, &Patch::Merge(&patch))
        .await
        .map_err(kube_err(format!("writing the placement of {name}")))?;
    Ok(())
}

fn report_changes(
    ctx: &Context,
    policy: &PlacementPolicy,
    previous: &Previous,
    choice: &Choice,
    kind: &str,
    key: &str,
) {
    let summary = summary(choice);
    if previous.clusters.is_empty() && !choice.clusters.is_empty() {
        info!(policy = %key, clusters = %summary, "placed");
        publish(
            ctx,
            policy,
            EventType::Normal,
            "Placed",
            format!("{kind} {key}: {}", describe(choice)),
        );
    }
    for change in &choice.changes {
        let type_ = if change.kind.is_warning() {
            EventType::Warning
        } else {
            EventType::Normal
        };
        info!(policy = %key, change = %change.message, "placement changed");
        publish(
            ctx,
            policy,
            type_,
            change.kind.event_reason(),
            format!("{kind} {key}: {}; now {summary}", change.message),
        );
    }
}

/// Whether the choice's unmet constraints are news: the `Placed` condition that states them
/// changed. A constraint that stays unmet is reported once, not on every look.
fn unsatisfied_is_news(
    previous: Option<&PlacementPolicyStatus>,
    status: &PlacementPolicyStatus,
    choice: &Choice,
) -> bool {
    let placed = |s: &PlacementPolicyStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == PLACED)
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    !choice.unsatisfied.is_empty() && previous.and_then(placed) != placed(status)
}

fn summary(choice: &Choice) -> String {
    if choice.clusters.is_empty() {
        "none".to_owned()
    } else {
        choice
            .clusters
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `member1 (Preferred: preference score 50), member2 (Selected)`.
fn describe(choice: &Choice) -> String {
    choice
        .clusters
        .iter()
        .map(|(name, chosen)| {
            if chosen.message.is_empty() {
                format!("{name} ({})", chosen.reason.as_str())
            } else {
                format!("{name} ({}: {})", chosen.reason.as_str(), chosen.message)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn previous(status: Option<&PlacementPolicyStatus>) -> Previous {
    let Some(status) = status else {
        return Previous::default();
    };
    Previous {
        clusters: status
            .clusters
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    Chosen {
                        reason: Reason::parse(&c.reason).unwrap_or(Reason::Kept),
                        message: c.message.clone(),
                    },
                )
            })
            .collect(),
        failed_over: status
            .failed_over
            .iter()
            .map(|f| FailedOver {
                cluster: f.cluster.clone(),
                replaced_by: f.replaced_by.clone(),
                time: f.time.parse::<Timestamp>().map_or(0, |t| t.as_second()),
            })
            .collect(),
    }
}

fn rfc3339(seconds: i64) -> String {
    Timestamp::from_second(seconds)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn status_of(policy: &PlacementPolicy, choice: &Choice, now: i64) -> PlacementPolicyStatus {
    let (placed, reason, message) = if choice.clusters.is_empty() {
        let mut message = "no Ready candidate cluster".to_owned();
        for unsatisfied in &choice.unsatisfied {
            message.push_str("; ");
            message.push_str(unsatisfied);
        }
        (false, "NoClusters", message)
    } else if !choice.unsatisfied.is_empty() {
        (
            false,
            "ConstraintUnsatisfied",
            choice.unsatisfied.join("; "),
        )
    } else {
        (true, "Placed", describe(choice))
    };
    PlacementPolicyStatus {
        observed_generation: policy.metadata.generation,
        clusters: choice
            .clusters
            .iter()
            .map(|(name, chosen)| ChosenCluster {
                name: name.clone(),
                reason: chosen.reason.as_str().to_owned(),
                message: chosen.message.clone(),
            })
            .collect(),
        failed_over: choice
            .failed_over
            .iter()
            .map(|f| FailedOverStatus {
                cluster: f.cluster.clone(),
                replaced_by: f.replaced_by.clone(),
                time: rfc3339(f.time),
            })
            .collect(),
        summary: Some(summary(choice)),
        candidates: choice.candidates.clone(),
        conditions: vec![condition(
            policy.status.as_ref(),
            placed,
            reason,
            &message,
            now,
        )],
    }
}

/// The `Placed` condition, keeping `lastTransitionTime` while the status is unchanged.
fn condition(
    previous: Option<&PlacementPolicyStatus>,
    placed: bool,
    reason: &str,
    message: &str,
    now: i64,
) -> PolicyCondition {
    let status = if placed { "True" } else { "False" };
    let since = previous
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == PLACED))
        .filter(|c| c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| rfc3339(now));
    PolicyCondition {
        type_: PLACED.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: Some(since),
    }
}

/// A status with only the `Placed` condition changed (nothing chosen).
async fn set_condition(
    ctx: &Context,
    policy: &PlacementPolicy,
    choice: Option<&Choice>,
    placed: bool,
    reason: &str,
    message: &str,
) -> Result<(), PolicyError> {
    let now = Timestamp::now().as_second();
    let mut status = match choice {
        Some(choice) => status_of(policy, choice, now),
        None => policy.status.clone().unwrap_or_default(),
    };
    status.observed_generation = policy.metadata.generation;
    status.conditions = vec![condition(
        policy.status.as_ref(),
        placed,
        reason,
        message,
        now,
    )];
    if policy.status.as_ref() != Some(&status) {
        patch_status(ctx, policy, &status).await?;
    }
    Ok(())
}

async fn patch_status(
    ctx: &Context,
    policy: &PlacementPolicy,
    status: &PlacementPolicyStatus,
) -> Result<(), PolicyError> {
    let namespace = policy.namespace().unwrap_or_default();
    let api: Api<PlacementPolicy> = Api::namespaced(ctx.controller.hub.clone(), &namespace);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    // A merge patch replaces lists as a whole, but a field left out (an empty list is not
    // serialized) would be kept: send every field, absent ones as null (removed).
    let mut value = serde_json::to_value(status).unwrap_or_default();
    if let Some(fields) = value.as_object_mut() {
        for key in STATUS_FIELDS {
            fields.entry(key).or_insert(serde_json::Value::Null);
        }
    }
    let patch = serde_json::json!({ "status": value });
    api.patch_status(&policy.name_any(), &params, &Patch::Merge(&patch))
        .await
        .map_err(kube_err(format!(
            "writing the status of PlacementPolicy {namespace}/{}",
            policy.name_any()
        )))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hubfed_api::scheduling::PlacementPolicySpec;

    fn chosen(reason: Reason, message: &str) -> Chosen {
        Chosen {
            reason,
            message: message.to_owned(),
        }
    }

    /// Every status field is named in STATUS_FIELDS, so that a cleared one is sent as null.
    #[test]
    fn status_fields_are_all_known() {
        let choice = Choice {
            clusters: [("a".to_owned(), chosen(Reason::Replacement, "replaces b"))].into(),
            failed_over: vec![FailedOver {
                cluster: "b".into(),
                replaced_by: Some("a".into()),
                time: 1_800_000_000,
            }],
            candidates: vec!["a".into(), "b".into()],
            ..Choice::default()
        };
        let mut policy = PlacementPolicy::new("web", PlacementPolicySpec::default());
        policy.metadata.generation = Some(2);
        let status = status_of(&policy, &choice, 1_800_000_100);
        let value = serde_json::to_value(&status).expect("serializable");
        let mut keys: Vec<&str> = value
            .as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        let mut known = STATUS_FIELDS.to_vec();
        known.sort_unstable();
        assert_eq!(keys, known);
    }

    /// An unmet constraint is reported when it first shows and when it changes, not on every
    /// reconcile.
    #[test]
    fn unmet_constraints_are_reported_once() {
        let policy = PlacementPolicy::new("web", PlacementPolicySpec::default());
        let unmet = |clusters: &[&str], unsatisfied: &[&str]| Choice {
            clusters: clusters
                .iter()
                .map(|c| ((*c).to_owned(), chosen(Reason::Selected, "")))
                .collect(),
            unsatisfied: unsatisfied.iter().map(|u| (*u).to_owned()).collect(),
            ..Choice::default()
        };
        let mut current = policy.clone();
        let mut reported = Vec::new();
        for (step, choice) in [
            unmet(&["a"], &["region=us: 0 of at least 1 clusters chosen"]),
            unmet(&["a"], &["region=us: 0 of at least 1 clusters chosen"]),
            unmet(&["a", "b"], &["region=us: 0 of at least 1 clusters chosen"]),
            unmet(&[], &["region=us: 0 of at least 1 clusters chosen"]),
            unmet(&[], &["region=us: 0 of at least 1 clusters chosen"]),
            unmet(&["a"], &[]),
            unmet(&["a"], &["region=us: 0 of at least 1 clusters chosen"]),
        ]
        .into_iter()
        .enumerate()
        {
            let status = status_of(&current, &choice, 1_800_000_000);
            if unsatisfied_is_news(current.status.as_ref(), &status, &choice) {
                reported.push(step);
            }
            current.status = Some(status);
        }
        // Step 2 only adds a cluster; step 3 has none left (NoClusters), step 6 is unmet again.
        assert_eq!(reported, [0, 3, 6]);
    }

    /// What is written is read back as the same previous choice.
    #[test]
    fn the_status_round_trips_into_the_previous_choice() {
        let choice = Choice {
            clusters: [
                ("a".to_owned(), chosen(Reason::Replacement, "replaces b")),
                (
                    "c".to_owned(),
                    chosen(Reason::Preferred, "preference score 5"),
                ),
            ]
            .into(),
            failed_over: vec![FailedOver {
                cluster: "b".into(),
                replaced_by: Some("a".into()),
                time: 1_800_000_000,
            }],
            ..Choice::default()
        };
        let policy = PlacementPolicy::new("web", PlacementPolicySpec::default());
        let status = status_of(&policy, &choice, 1_800_000_100);
        assert_eq!(status.summary.as_deref(), Some("a, c"));
        assert_eq!(status.conditions[0].status, "True");
        let previous = previous(Some(&status));
        assert_eq!(previous.clusters, choice.clusters);
        assert_eq!(previous.failed_over, choice.failed_over);
        // The condition keeps its transition time while its status is unchanged.
        let mut again = policy.clone();
        again.status = Some(status.clone());
        let later = status_of(&again, &choice, 1_800_000_999);
        assert_eq!(later.conditions, status.conditions);
    }
}
