//! Staged rollouts in the sync path: for an object under a RolloutStrategy, the plan of the
//! new revision (template, overrides and placement: [`hubfed_core::rollout::revision`]) is
//! carried out only where [`hubfed_core::rollout::decide`] allows it; the other clusters are
//! left as they are and report `RolloutPending` (an abort applies the stable revision there).
//! A deletion of such an object deletes its copies stage by stage (`staged_deletion`). The
//! state and both revisions' specs are stored in a ConfigMap of the control plane's namespace
//! ([`hubfed_core::rollout::state_name`]), so a restarted (or newly elected) controller
//! continues at the same stage; it is deleted with its object. Applies of the revision that
//! fail are recorded in it right after the member writes ([`after_dispatch`]).
//!
//! Objects without a strategy (no `hubfed.io/rollout-strategy` annotation on the object or its
//! FederatedTypeConfig) are not staged, and make no rollout request at all, deletion included:
//! KubeFed's behaviour, every cluster at once.
//!
//! What is never a reason to block an object for good: a state too large for its ConfigMap
//! (the object goes unstaged, [`hubfed_core::rollout::fit`]), a state that cannot be deleted
//! (a Warning). What holds every change: a missing or invalid strategy
//! ([`hubfed_core::rollout::hold`]), a stored state that cannot be read. Warnings that would
//! repeat at every reconcile are published when their reason is news, as stored in the state.

use std::collections::BTreeMap;
use std::time::Duration;

use hubfed_api::federated::FederatedSpec;
use hubfed_api::scheduling::RolloutStrategy;
use hubfed_core::placement::ClusterInfo;
use hubfed_core::plan::{ClusterAction, Disposition, MemberObservation, Plan, is_orphaning, plan};
use hubfed_core::rollout::{
    ABORT_REVISION_ANNOTATION, CONTROL_ANNOTATION, ClusterReport, Controls, DELETED_REVISION,
    Decision, Fit, Phase, RolloutState, STATE_OBJECT_ANNOTATION, STATE_UID_ANNOTATION,
    STRATEGY_ANNOTATION, apply_failures, batches, decide, deletion_strategy, fit, held_action,
    hold, pending_message, read_state, record_failures, removals, revision, state_belongs,
    state_key, state_name, state_owned_by_object, too_large,
};
use hubfed_core::status::PropagationStatus;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt as _;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::EventType;
use serde_json::json;
use tracing::{info, warn};

use super::TypeContext;
use super::dispatch::DispatchResult;
use super::hub_writes::Error;
use super::hub_writes::{bounded, publish};
use super::observe::Observed;

/// What was stored of a rollout.
#[derive(Clone, Default)]
struct Stored {
    state: Option<RolloutState>,
    /// The spec of `state.revision`.
    current: Option<FederatedSpec>,
    /// The spec of `state.stable`.
    stable: Option<FederatedSpec>,
    exists: bool,
    /// Why the stored data cannot be read ([`read_state`]): every change is held.
    unreadable: Option<String>,
    /// The ConfigMap's resourceVersion as read (or written): a save is made only over it, so
    /// that a stale leader never overwrites a newer state (it fails, and the reconcile is
    /// retried from what is stored then).
    resource_version: Option<String>,
}

fn strategy_name(ctx: &TypeContext, obj: &DynamicObject) -> Option<String> {
    obj.annotations()
        .get(STRATEGY_ANNOTATION)
        .or_else(|| ctx.ftc.annotations().get(STRATEGY_ANNOTATION))
        .filter(|n| !n.is_empty())
        .cloned()
}

/// What [`staged`] decided.
pub struct Staged {
    /// The plan to carry out.
    pub plan: Plan,
    /// How soon to look again (a soak or deadline ending).
    pub recheck: Option<Duration>,
    /// The rollout in progress, for [`after_dispatch`].
    pub rollout: Option<Rollout>,
}

impl Staged {
    fn unstaged(plan: Plan) -> Self {
        Self {
            plan,
            recheck: None,
            rollout: None,
        }
    }
}

/// Where an object's rollout state is stored, and what identifies it there.
struct StateRef {
    /// The ConfigMap ([`state_name`]).
    name: String,
    /// [`state_key`].
    key: String,
    uid: Option<String>,
    /// The owner reference to the object, where one is possible ([`state_owned_by_object`]).
    owner: Option<serde_json::Value>,
}

impl StateRef {
    fn new(ctx: &TypeContext, obj: &DynamicObject) -> Self {
        let (kind, namespace, name) = (&ctx.federated.kind, obj.namespace(), obj.name_any());
        let owned = state_owned_by_object(namespace.as_deref(), &ctx.shared.kubefed_namespace);
        Self {
            name: state_name(kind, namespace.as_deref(), &name),
            key: state_key(kind, namespace.as_deref(), &name),
            uid: obj.uid(),
            owner: obj.uid().filter(|_| owned).map(|uid| {
                json!({
                    "apiVersion": ctx.federated.api_version,
                    "kind": kind,
                    "name": name,
                    "uid": uid,
                })
            }),
        }
    }
}

/// What this reconcile decided and stored of a rollout, for recording how its applies went.
pub struct Rollout {
    state: StateRef,
    /// The state as stored by [`staged`].
    stored: Stored,
    /// The clusters the plan applies the new revision to.
    applied: Vec<String>,
}

/// The plan to carry out: `planned` itself, or — for an object under a rollout strategy — the
/// new revision's actions where the rollout allows them and the stable revision's elsewhere.
pub async fn staged(
    ctx: &TypeContext,
    obj: &DynamicObject,
    observed: &Observed,
    planned: Plan,
) -> Result<Staged, Error> {
    if planned.disposition == Disposition::Delete {
        return staged_deletion(ctx, obj, observed, planned).await;
    }
    if planned.disposition != Disposition::Sync {
        return Ok(Staged::unstaged(planned));
    }
    let Some(strategy_name) = strategy_name(ctx, obj) else {
        return Ok(Staged::unstaged(planned));
    };
    let shared = &ctx.shared;
    let state_ref = StateRef::new(ctx, obj);
    let stored = load(ctx, &state_ref).await?;
    let placed = &planned.placement.clusters;
    let new = revision(
        &observed.template_version,
        &observed.overrides_version,
        placed,
    );
    if let Some(why) = &stored.unreadable {
        // Neither going on nor starting afresh (which sends the change everywhere at once).
        let message = format!(
            "the rollout state {}/{} cannot be read ({why}): changes are held back until it \
             is mended or deleted",
            shared.kubefed_namespace, state_ref.name
        );
        warn!(name = %observed.federated.name, "{message}");
        publish(
            ctx,
            &observed.reference,
            EventType::Warning,
            "RolloutStateUnreadable",
            &message,
        );
        let (plan, _) = hold_plan(planned, &message);
        return Ok(Staged::unstaged(plan));
    }
    let Some(strategy) = fetch_strategy(ctx, &strategy_name).await? else {
        let message = format!(
            "RolloutStrategy {}/{strategy_name} not found: changes are held back",
            shared.kubefed_namespace
        );
        let why = ("RolloutStrategyNotFound", message.as_str());
        return hold_everything(ctx, observed, planned, &state_ref, stored, &new, why).await;
    };
    // Placed clusters, and those whose copy goes: removals wait for their stage too.
    let removing = removals(&planned.clusters, placed);
    let covered: Vec<ClusterInfo> = observed
        .infos()
        .iter()
        .filter(|c| placed.contains(&c.name) || removing.contains(&c.name))
        .cloned()
        .collect();
    let batches = match batches(&strategy, &covered) {
        Ok(batches) => batches,
        Err(e) => {
            let message = format!("RolloutStrategy {strategy_name}: {e}; changes are held back");
            let why = ("InvalidRolloutStrategy", message.as_str());
            return hold_everything(ctx, observed, planned, &state_ref, stored, &new, why).await;
        }
    };
    let reports = reports(observed, &planned, &new, &removing);
    let (controls, stale_abort) = controls(obj, &new);
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let decision = decide(
        &strategy,
        &batches,
        &new,
        stored.state.as_ref(),
        &reports,
        controls,
        now,
    );
    let stable_spec = stable_spec(&stored, &decision);
    let saved = Stored {
        state: Some(decision.state.clone()),
        current: Some(observed.federated.spec.clone()),
        stable: stable_spec,
        exists: true,
        unreadable: None,
        resource_version: None,
    };
    let Some(saved) = save_fitted(ctx, observed, &state_ref, &stored, saved, &new).await? else {
        return Ok(Staged::unstaged(planned));
    };
    publish_events(ctx, observed, &decision.events);
    if decision.clear_abort || stale_abort {
        clear_abort(ctx, obj).await;
    }
    let combined = combine(
        ctx,
        observed,
        planned,
        &decision,
        &new,
        saved.stable.as_ref(),
    );
    let applied = combined
        .clusters
        .iter()
        .filter(|c| matches!(c.action, ClusterAction::Apply(_)))
        .filter(|c| decision.allowed.get(&c.cluster) == Some(&new))
        .map(|c| c.cluster.clone())
        .collect();
    let recheck = decision
        .recheck_in
        .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(1).max(1)));
    Ok(Staged {
        plan: combined,
        recheck,
        rollout: Some(Rollout {
            state: state_ref,
            stored: saved,
            applied,
        }),
    })
}

async fn fetch_strategy(
    ctx: &TypeContext,
    name: &str,
) -> Result<Option<hubfed_core::rollout::RolloutStrategy>, Error> {
    let shared = &ctx.shared;
    let strategies: Api<RolloutStrategy> =
        Api::namespaced(shared.hub.clone(), &shared.kubefed_namespace);
    Ok(bounded(strategies.get_opt(name)).await??.map(|s| s.spec))
}

/// The deletion of an object under a strategy whose rollout state is stored: its copies are
/// deleted stage by stage ([`deletion_strategy`]), the finalizer staying until the last is
/// gone; then its state goes too. An object without a strategy makes no rollout request at
/// all (KubeFed's path, whatever is stored). Not staged: an orphaning deletion (the copies
/// stay), an object with no stored state, a strategy that is missing or invalid (a deletion is
/// never held up for it).
async fn staged_deletion(
    ctx: &TypeContext,
    obj: &DynamicObject,
    observed: &Observed,
    planned: Plan,
) -> Result<Staged, Error> {
    let Some(strategy_name) = strategy_name(ctx, obj) else {
        return Ok(Staged::unstaged(planned));
    };
    let state_ref = StateRef::new(ctx, obj);
    let stored = load(ctx, &state_ref).await?;
    if !stored.exists {
        return Ok(Staged::unstaged(planned));
    }
    let removing = removals(&planned.clusters, &Default::default());
    let strategy = match stored.state {
        Some(_) if !removing.is_empty() && !is_orphaning(&observed.federated.annotations) => {
            fetch_strategy(ctx, &strategy_name).await?
        }
        _ => None,
    };
    let covered: Vec<ClusterInfo> = observed
        .infos()
        .iter()
        .filter(|c| removing.contains(&c.name))
        .cloned()
        .collect();
    let staging = strategy.and_then(|strategy| {
        let strategy = deletion_strategy(&strategy);
        batches(&strategy, &covered).ok().map(|b| (strategy, b))
    });
    let Some((strategy, batches)) = staging else {
        // The object goes: so does its rollout state, once. A state left behind is harmless
        // (a new object of the same name ignores it: `state_belongs`), so a failure here
        // never keeps the finalizer.
        delete_state(ctx, observed, &state_ref).await;
        return Ok(Staged::unstaged(planned));
    };
    let reports: BTreeMap<String, ClusterReport> = removing
        .iter()
        .map(|c| (c.clone(), ClusterReport::default()))
        .collect();
    let controls = Controls {
        paused: controls(obj, DELETED_REVISION).0.paused,
        aborted: false,
    };
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let decision = decide(
        &strategy,
        &batches,
        DELETED_REVISION,
        stored.state.as_ref(),
        &reports,
        controls,
        now,
    );
    publish_events(ctx, observed, &decision.events);
    // A deletion needs no spec: none is kept.
    let mut saved = Stored {
        state: Some(decision.state.clone()),
        current: None,
        stable: None,
        exists: true,
        unreadable: None,
        resource_version: None,
    };
    save(ctx, &state_ref, &stored, &mut saved).await?;
    let mut held = planned;
    for cluster_plan in &mut held.clusters {
        if decision
            .allowed
            .get(&cluster_plan.cluster)
            .map(String::as_str)
            == Some(DELETED_REVISION)
        {
            continue;
        }
        let action = std::mem::replace(&mut cluster_plan.action, ClusterAction::UpToDate);
        cluster_plan.action = held_action(action, |removal| {
            pending_message(&decision.state, &cluster_plan.cluster, removal)
        });
    }
    let recheck = decision
        .recheck_in
        .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(1).max(1)));
    Ok(Staged {
        plan: held,
        recheck,
        rollout: None,
    })
}

/// After the member writes: a failed apply of the revision being rolled out that the member
/// refused (a transient failure is retried, never a halt) is recorded with it in the stored state and halts the rollout ([`hubfed_core::rollout::record_failures`]);
/// only this reconcile's applies of this revision count, never an older status.
pub async fn after_dispatch(
    ctx: &TypeContext,
    observed: &Observed,
    rollout: Rollout,
    result: &DispatchResult,
) -> Result<(), Error> {
    let failures = apply_failures(&rollout.applied, &result.outcomes, &result.transient);
    let Some(mut state) = rollout
        .stored
        .state
        .clone()
        .filter(|_| !failures.is_empty())
    else {
        return Ok(());
    };
    let events = record_failures(&mut state, failures);
    let mut saved = Stored {
        state: Some(state),
        ..rollout.stored.clone()
    };
    save(ctx, &rollout.state, &rollout.stored, &mut saved).await?;
    publish_events(ctx, observed, &events);
    Ok(())
}

/// Removes the abort annotation that belonged to an earlier revision (the stored state, or the
/// revision the abort names, already says it does not abort this one, so a failure here changes
/// nothing but what is shown).
/// Only from the object as read: an abort asked for since is not removed.
async fn clear_abort(ctx: &TypeContext, obj: &DynamicObject) {
    let patch = json!({"metadata": {
        "annotations": {CONTROL_ANNOTATION: null, ABORT_REVISION_ANNOTATION: null},
        "resourceVersion": obj.resource_version(),
    }});
    let api = super::hub_writes::federated_api(ctx, obj.namespace().as_deref());
    let name = obj.name_any();
    let result = bounded(api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))).await;
    if let Err(e) = result.and_then(|r| r.map_err(Error::from)) {
        info!(name = %name, error = %e, "the abort of an earlier revision stays shown");
    }
}

/// Rollout events: on the federated object, logged, and counted.
fn publish_events(ctx: &TypeContext, observed: &Observed, events: &[(&'static str, String)]) {
    for (reason, message) in events {
        let type_ = if *reason == "RolloutHalted" {
            EventType::Warning
        } else {
            EventType::Normal
        };
        info!(name = %observed.federated.name, reason, message = %message, "rollout");
        publish(ctx, &observed.reference, type_, reason, message);
        crate::metrics::METRICS
            .rollout_events_total
            .with_label_values(&[ctx.federated.kind.to_lowercase().as_str(), reason])
            .inc();
    }
}

/// A strategy that cannot be used (`why`: the Warning's reason and message): no cluster takes
/// the change (nothing is rolled back either) — except the first revision of an object, which
/// goes out ([`hubfed_core::rollout::hold`]); the state is stored either way, and the Warning
/// published only when its message is news. Looked at again in 30 s only while a change is
/// held.
async fn hold_everything(
    ctx: &TypeContext,
    observed: &Observed,
    planned: Plan,
    state_ref: &StateRef,
    stored: Stored,
    new: &str,
    (reason, why): (&str, &str),
) -> Result<Staged, Error> {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let hold = hold(stored.state.as_ref(), new, why, now);
    let saved = Stored {
        state: Some(hold.state.clone()),
        current: if hold.goes_out {
            Some(observed.federated.spec.clone())
        } else {
            stored.current.clone()
        },
        ..stored.clone()
    };
    if save_fitted(ctx, observed, state_ref, &stored, saved, new)
        .await?
        .is_none()
    {
        return Ok(Staged::unstaged(planned));
    }
    if hold.publish {
        publish(ctx, &observed.reference, EventType::Warning, reason, why);
    }
    if hold.goes_out {
        return Ok(Staged::unstaged(planned));
    }
    let (held, pending) = hold_plan(planned, why);
    Ok(Staged {
        plan: held,
        recheck: pending.then_some(Duration::from_secs(30)),
        rollout: None,
    })
}

/// `planned` with every change held (`why`), and whether any was.
fn hold_plan(planned: Plan, why: &str) -> (Plan, bool) {
    let mut held = planned;
    let mut pending = false;
    for cluster_plan in &mut held.clusters {
        let action = std::mem::replace(&mut cluster_plan.action, ClusterAction::UpToDate);
        cluster_plan.action = held_action(action, |_| why.to_owned());
        pending |= matches!(
            cluster_plan.action,
            ClusterAction::Blocked {
                status: PropagationStatus::RolloutPending,
                ..
            }
        );
    }
    (held, pending)
}

/// The stable revision's spec after the decision: stored, or — when the decision just made
/// the previous revision stable — the spec stored for it as `current`.
fn stable_spec(stored: &Stored, decision: &Decision) -> Option<FederatedSpec> {
    let stable = decision.state.stable.as_deref()?;
    match &stored.state {
        Some(state) if state.revision == stable => stored.current.clone(),
        Some(state) if state.stable.as_deref() == Some(stable) => stored.stable.clone(),
        _ => None,
    }
}

/// What each cluster the rollout covers reports: a placed one is on the new revision when the
/// new plan has nothing to do there, Ready from its copy; one whose copy goes (`removing`) is
/// not on it while the copy is there (once gone, it is no longer covered).
fn reports(
    observed: &Observed,
    planned: &Plan,
    new: &str,
    removing: &[String],
) -> BTreeMap<String, ClusterReport> {
    let placed = planned.placement.clusters.iter().map(|cluster| {
        let action = planned
            .clusters
            .iter()
            .find(|c| &c.cluster == cluster)
            .map(|c| &c.action);
        let current = matches!(action, Some(ClusterAction::UpToDate));
        let ready = match observed.members.get(cluster) {
            Some(MemberObservation::Present(member)) => member.readiness.is_ready(),
            _ => false,
        };
        let report = ClusterReport {
            revision: current.then(|| new.to_owned()),
            ready,
        };
        (cluster.clone(), report)
    });
    let removing = removing
        .iter()
        .map(|cluster| (cluster.clone(), ClusterReport::default()));
    placed.chain(removing).collect()
}

/// What the operator asks of the rollout of `revision`, and whether an abort asked for belongs
/// to another revision ([`hubfed_core::rollout::controls`]).
fn controls(obj: &DynamicObject, revision: &str) -> (Controls, bool) {
    let annotation = |key: &str| obj.annotations().get(key).map(String::as_str);
    hubfed_core::rollout::controls(
        annotation(CONTROL_ANNOTATION),
        annotation(ABORT_REVISION_ANNOTATION),
        revision,
    )
}

/// The new plan's actions where the new revision is allowed, the stable plan's elsewhere.
fn combine(
    ctx: &TypeContext,
    observed: &Observed,
    mut planned: Plan,
    decision: &Decision,
    new: &str,
    stable_spec: Option<&FederatedSpec>,
) -> Plan {
    let held: Vec<&String> = decision
        .allowed
        .iter()
        .filter(|(_, revision)| revision.as_str() != new)
        .map(|(cluster, _)| cluster)
        .collect();
    if held.is_empty() {
        return planned;
    }
    // Clusters the rollout has not reached are left as they are: no write until the new
    // revision reaches them (a change made mid-rollout never sends a cluster back to an
    // older revision), and their status says so. Only an abort writes the stable revision back.
    let stable_plan = (decision.state.phase == Phase::Aborted)
        .then_some(stable_spec)
        .flatten()
        .map(|spec| {
            let mut object = observed.federated.clone();
            object.spec = spec.clone();
            let mut input = observed.plan_input(ctx);
            input.object = &object;
            plan(&input)
        });
    for cluster_plan in &mut planned.clusters {
        if !held.contains(&&cluster_plan.cluster) {
            continue;
        }
        let stable_action = stable_plan
            .as_ref()
            .and_then(|p| {
                p.clusters
                    .iter()
                    .find(|c| c.cluster == cluster_plan.cluster)
            })
            .map(|c| c.action.clone());
        let action = std::mem::replace(&mut cluster_plan.action, ClusterAction::UpToDate);
        cluster_plan.action = match stable_action {
            Some(action) => action,
            None => held_action(action, |removal| {
                pending_message(&decision.state, &cluster_plan.cluster, removal)
            }),
        };
    }
    // An abort also gives back the copies the rollout removed.
    if let Some(stable_plan) = stable_plan {
        for stable in stable_plan.clusters {
            let missing = !planned.clusters.iter().any(|c| c.cluster == stable.cluster);
            if missing && matches!(stable.action, ClusterAction::Apply(_)) {
                planned.clusters.push(stable);
            }
        }
        planned.clusters.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    }
    planned
}

/// The stored state of the object; none when there is none, or when it is an earlier same-named
/// object's ([`state_belongs`]: it is overwritten).
async fn load(ctx: &TypeContext, state: &StateRef) -> Result<Stored, Error> {
    let api: Api<ConfigMap> =
        Api::namespaced(ctx.shared.hub.clone(), &ctx.shared.kubefed_namespace);
    let Some(map) = bounded(api.get_opt(&state.name)).await?? else {
        return Ok(Stored::default());
    };
    let stored_uid = map.annotations().get(STATE_UID_ANNOTATION).cloned();
    let resource_version = map.resource_version();
    if !state_belongs(stored_uid.as_deref(), state.uid.as_deref()) {
        return Ok(Stored {
            exists: true,
            resource_version,
            ..Stored::default()
        });
    }
    Ok(match read_state(&map.data.unwrap_or_default()) {
        Ok(data) => Stored {
            state: data.state,
            current: data.current,
            stable: data.stable,
            exists: true,
            unreadable: None,
            resource_version,
        },
        Err(why) => Stored {
            exists: true,
            unreadable: Some(why),
            resource_version,
            ..Stored::default()
        },
    })
}

/// Deletes the object's state (known to exist). A failure is a Warning, never an error: the
/// deletion of the object goes on.
async fn delete_state(ctx: &TypeContext, observed: &Observed, state: &StateRef) {
    let api: Api<ConfigMap> =
        Api::namespaced(ctx.shared.hub.clone(), &ctx.shared.kubefed_namespace);
    let result = bounded(api.delete(&state.name, &Default::default()))
        .await
        .and_then(|r| r.map_err(Error::from));
    match result {
        Ok(_) => info!(configmap = %state.name, "rollout state deleted with its object"),
        Err(Error::Hub(kube::Error::Api(e))) if e.code == 404 => {}
        Err(e) => {
            warn!(configmap = %state.name, error = %e, "rollout state left behind");
            publish(
                ctx,
                &observed.reference,
                EventType::Warning,
                "RolloutStateNotDeleted",
                &format!(
                    "the rollout state {}/{} was not deleted ({e}); it is left behind, and a new \
                     object of the same name ignores it",
                    ctx.shared.kubefed_namespace, state.name
                ),
            );
        }
    }
}

/// Why an object is not staged when its state does not fit.
const TOO_LARGE: &str = "the rollout state of this object does not fit in a ConfigMap (1 MiB): \
                         its changes go to every cluster at once";

/// Saves `saved` as far as it fits ([`fit`]: the stable spec is dropped first). When it does
/// not fit at all, or the API server refuses it as too large, the object is not staged
/// ([`too_large`]: a small state is stored instead, and a Warning `RolloutStateTooLarge`
/// published when news): `None`, the plan goes out as it is.
async fn save_fitted(
    ctx: &TypeContext,
    observed: &Observed,
    state_ref: &StateRef,
    stored: &Stored,
    mut saved: Stored,
    new: &str,
) -> Result<Option<Stored>, Error> {
    let len = |v: Option<String>| v.map_or(0, |v| v.len());
    let state = len(saved
        .state
        .as_ref()
        .map(serde_json::to_string)
        .transpose()?);
    let current = len(saved
        .current
        .as_ref()
        .map(serde_json::to_string)
        .transpose()?);
    let stable = len(saved
        .stable
        .as_ref()
        .map(serde_json::to_string)
        .transpose()?);
    match fit(state, current, stable) {
        Fit::All => {}
        Fit::WithoutStable => saved.stable = None,
        Fit::TooLarge => {
            unstage(ctx, observed, state_ref, stored, new).await?;
            return Ok(None);
        }
    }
    match save(ctx, state_ref, stored, &mut saved).await {
        Ok(()) => Ok(Some(saved)),
        Err(Error::Hub(kube::Error::Api(e)))
            if e.code == 413
                || (e.code == 422 && e.message.contains("Too long"))
                || e.message.to_lowercase().contains("too large") =>
        {
            unstage(ctx, observed, state_ref, stored, new).await?;
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Stores that the object's revision `new` went out unstaged, its state being too large.
async fn unstage(
    ctx: &TypeContext,
    observed: &Observed,
    state_ref: &StateRef,
    stored: &Stored,
    new: &str,
) -> Result<(), Error> {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let hold = too_large(stored.state.as_ref(), new, TOO_LARGE, now);
    let mut small = Stored {
        state: Some(hold.state),
        current: None,
        stable: None,
        exists: stored.exists,
        unreadable: None,
        resource_version: None,
    };
    save(ctx, state_ref, stored, &mut small).await?;
    if hold.publish {
        warn!(name = %observed.federated.name, "{TOO_LARGE}");
        publish(
            ctx,
            &observed.reference,
            EventType::Warning,
            "RolloutStateTooLarge",
            TOO_LARGE,
        );
    }
    Ok(())
}

/// Saves `saved` over `stored` (as read: its resourceVersion is the precondition, a conflict
/// fails the reconcile, which is retried from what is stored then), and records the new
/// resourceVersion in `saved`. Nothing is written when nothing changed.
async fn save(
    ctx: &TypeContext,
    state: &StateRef,
    stored: &Stored,
    saved: &mut Stored,
) -> Result<(), Error> {
    let name = state.name.as_str();
    saved.resource_version = stored.resource_version.clone();
    let unchanged = stored.exists
        && stored.unreadable.is_none()
        && stored.state == saved.state
        && stored.current == saved.current
        && stored.stable == saved.stable;
    if unchanged {
        return Ok(());
    }
    let body = state_body(state, saved, stored.resource_version.as_deref())?;
    let api: Api<ConfigMap> =
        Api::namespaced(ctx.shared.hub.clone(), &ctx.shared.kubefed_namespace);
    let written = if stored.exists {
        let params = PatchParams::apply(hubfed_api::names::FIELD_MANAGER).force();
        bounded(api.patch(name, &params, &Patch::Apply(&body))).await??
    } else {
        // Created first: the chart's Role grants `create` (not limitable by name) and
        // `patch`, and server-side apply of a missing object needs both. A state created
        // meanwhile by another makes this fail (AlreadyExists): retried like a conflict.
        let map: ConfigMap = serde_json::from_value(body)?;
        bounded(api.create(&Default::default(), &map)).await??
    };
    saved.resource_version = written.resource_version();
    Ok(())
}

/// The state ConfigMap holding `saved`, to be written over `resource_version` (the one read;
/// none for a creation).
fn state_body(
    state: &StateRef,
    saved: &Stored,
    resource_version: Option<&str>,
) -> Result<serde_json::Value, Error> {
    let text = |v: Option<String>| v.unwrap_or_default();
    let data = json!({
        "state": text(saved.state.as_ref().map(serde_json::to_string).transpose()?),
        "current": text(saved.current.as_ref().map(serde_json::to_string).transpose()?),
        "stable": text(saved.stable.as_ref().map(serde_json::to_string).transpose()?),
    });
    let mut metadata = json!({
        "name": state.name,
        "labels": {"app.kubernetes.io/managed-by": "hubfed"},
        "annotations": {
            STATE_OBJECT_ANNOTATION: state.key,
            STATE_UID_ANNOTATION: state.uid,
        },
        "ownerReferences": state.owner.iter().collect::<Vec<_>>(),
    });
    if let Some(resource_version) = resource_version {
        metadata["resourceVersion"] = json!(resource_version);
    }
    Ok(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": data,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A save is made over the state as read: its resourceVersion is the precondition, so a
    /// stale leader's save fails instead of overwriting a newer state.
    #[test]
    fn a_save_is_made_over_the_state_as_read() {
        let state = StateRef {
            name: "hubfed-rollout.x-0123456789".into(),
            key: "FederatedDeployment/ns/x".into(),
            uid: Some("uid-1".into()),
            owner: None,
        };
        let saved = Stored {
            state: Some(RolloutState::default()),
            ..Stored::default()
        };
        let over = state_body(&state, &saved, Some("42")).expect("a body");
        assert_eq!(over["metadata"]["resourceVersion"], "42");
        assert_eq!(
            over["metadata"]["annotations"][STATE_UID_ANNOTATION],
            "uid-1"
        );
        let created = state_body(&state, &saved, None).expect("a body");
        assert!(created["metadata"].get("resourceVersion").is_none());
    }
}
