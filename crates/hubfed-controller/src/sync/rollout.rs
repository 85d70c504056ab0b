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
use hubfed_core::rollout::RolloutStrategy as CoreStrategy;
use hubfed_core::rollout::{
    ABORT_REVISION_ANNOTATION, Batch, CONTROL_ANNOTATION, ClusterReport, Controls,
    DELETED_REVISION, Decision, Phase, STRATEGY_ANNOTATION, apply_failures, batches, decide,
    deletion_strategy, held_action, hold, pending_message, record_failures, removals, revision,
};
use hubfed_core::status::PropagationStatus;
use kube::ResourceExt as _;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::EventType;
use serde_json::json;
use tracing::{info, warn};

use super::TypeContext;
use super::dispatch::DispatchResult;
use super::hub_writes::HubError;
use super::hub_writes::{bounded, publish};
use super::observe::Observed;
use state::{StateRef, Stored, delete_state, load, save, save_fitted};

mod state;

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
) -> Result<Staged, HubError> {
    if planned.disposition == Disposition::Delete {
        return staged_deletion(ctx, obj, observed, planned).await;
    }
    if planned.disposition != Disposition::Sync {
        return Ok(Staged::unstaged(planned));
    }
    let Some(strategy_name) = strategy_name(ctx, obj) else {
        return Ok(Staged::unstaged(planned));
    };
    let state_ref = StateRef::new(ctx, obj);
    let stored = load(ctx, &state_ref).await?;
    let placed = &planned.placement.clusters;
    let new = revision(
        &observed.template_version,
        &observed.overrides_version,
        placed,
    );
    if let Some(why) = &stored.unreadable {
        return Ok(hold_unreadable(ctx, observed, planned, &state_ref, why));
    }
    // Placed clusters, and those whose copy goes: removals wait for their stage too.
    let removing = removals(&planned.clusters, placed);
    let covered = covered(observed, |c| placed.contains(c) || removing.contains(c));
    let (strategy, batches) = match usable_strategy(ctx, &strategy_name, &covered).await? {
        Ok(usable) => usable,
        Err((reason, message)) => {
            let why = (reason, message.as_str());
            return hold_everything(ctx, observed, planned, &state_ref, stored, &new, why).await;
        }
    };
    let reports = reports(observed, &planned, &new, &removing);
    let (controls, stale_abort) = controls(obj, &new);
    let decision = decide_now(&strategy, &batches, &new, &stored, &reports, controls);
    let saved = Stored {
        state: Some(decision.state.clone()),
        current: Some(observed.federated.spec.clone()),
        stable: stable_spec(&stored, &decision),
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
    let stable = saved.stable.as_ref();
    let combined = combine(ctx, observed, planned, &decision, &new, stable);
    let applied = applied_clusters(&combined, &decision, &new);
    Ok(Staged {
        plan: combined,
        recheck: recheck(&decision),
        rollout: Some(Rollout {
            state: state_ref,
            stored: saved,
            applied,
        }),
    })
}

/// A stored state that cannot be read: neither going on nor starting afresh (which sends the
/// change everywhere at once); every change is held, with a Warning.
fn hold_unreadable(
    ctx: &TypeContext,
    observed: &Observed,
    planned: Plan,
    state_ref: &StateRef,
    why: &str,
) -> Staged {
    let message = format!(
        "the rollout state {}/{} cannot be read ({why}): changes are held back until it \
         is mended or deleted",
        ctx.shared.kubefed_namespace, state_ref.name
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
    Staged::unstaged(plan)
}

/// The strategy named `strategy_name` and its batches over the `covered` clusters, or why it
/// cannot be used (a Warning's reason and message).
async fn usable_strategy(
    ctx: &TypeContext,
    strategy_name: &str,
    covered: &[ClusterInfo],
) -> Result<Result<(CoreStrategy, Vec<Batch>), (&'static str, String)>, HubError> {
    let strategy = match fetch_strategy(ctx, strategy_name).await? {
        Fetched::Found(strategy) => strategy,
        Fetched::NotFound => {
            let message = format!(
                "RolloutStrategy {}/{strategy_name} not found: changes are held back",
                ctx.shared.kubefed_namespace
            );
            return Ok(Err(("RolloutStrategyNotFound", message)));
        }
        Fetched::CrdMissing => {
            let message = format!(
                "RolloutStrategy {}/{strategy_name} cannot be read: the CRD {} is not \
                 installed (apply crds/core.yaml); changes are held back",
                ctx.shared.kubefed_namespace,
                crate::hub_crds::HubCrd::RolloutStrategy.name()
            );
            return Ok(Err(("RolloutStrategyNotInstalled", message)));
        }
    };
    Ok(match batches(&strategy, covered) {
        Ok(batches) => Ok((strategy, batches)),
        Err(e) => {
            let message = format!("RolloutStrategy {strategy_name}: {e}; changes are held back");
            Err(("InvalidRolloutStrategy", message))
        }
    })
}

/// The clusters the rollout covers: the observed ones `covers` names.
fn covered(observed: &Observed, covers: impl Fn(&String) -> bool) -> Vec<ClusterInfo> {
    observed
        .infos()
        .iter()
        .filter(|c| covers(&c.name))
        .cloned()
        .collect()
}

/// [`decide`] as of now, over the stored state.
fn decide_now(
    strategy: &CoreStrategy,
    batches: &[Batch],
    revision: &str,
    stored: &Stored,
    reports: &BTreeMap<String, ClusterReport>,
    controls: Controls,
) -> Decision {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let previous = stored.state.as_ref();
    decide(
        strategy, batches, revision, previous, reports, controls, now,
    )
}

/// When the decision wants the object looked at again (a soak or deadline ending).
fn recheck(decision: &Decision) -> Option<Duration> {
    decision
        .recheck_in
        .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(1).max(1)))
}

/// The clusters `plan` applies the new revision to.
fn applied_clusters(plan: &Plan, decision: &Decision, new: &str) -> Vec<String> {
    plan.clusters
        .iter()
        .filter(|c| matches!(c.action, ClusterAction::Apply(_)))
        .filter(|c| decision.allowed.get(&c.cluster).map(String::as_str) == Some(new))
        .map(|c| c.cluster.clone())
        .collect()
}

/// What the hub holds of a rollout strategy.
enum Fetched {
    Found(CoreStrategy),
    NotFound,
    /// The hub does not serve RolloutStrategies: their CRD is not installed.
    CrdMissing,
}

impl Fetched {
    fn found(self) -> Option<CoreStrategy> {
        match self {
            Self::Found(strategy) => Some(strategy),
            Self::NotFound | Self::CrdMissing => None,
        }
    }
}

async fn fetch_strategy(ctx: &TypeContext, name: &str) -> Result<Fetched, HubError> {
    let shared = &ctx.shared;
    let strategies: Api<RolloutStrategy> =
        Api::namespaced(shared.hub.clone(), &shared.kubefed_namespace);
    match bounded(strategies.get(name)).await? {
        Ok(strategy) => Ok(Fetched::Found(strategy.spec)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(if names_object(&status) {
            Fetched::NotFound
        } else {
            Fetched::CrdMissing
        }),
        Err(e) => Err(e.into()),
    }
}

/// Whether a 404 answer names the object that was not found: the API server's answer for a
/// missing object does, its answer for a resource it does not serve (no CRD) does not.
fn names_object(status: &kube::core::Status) -> bool {
    status
        .details
        .as_ref()
        .is_some_and(|details| !details.name.is_empty())
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
) -> Result<Staged, HubError> {
    let Some(strategy_name) = strategy_name(ctx, obj) else {
        return Ok(Staged::unstaged(planned));
    };
    let state_ref = StateRef::new(ctx, obj);
    let stored = load(ctx, &state_ref).await?;
    if !stored.exists {
        return Ok(Staged::unstaged(planned));
    }
    let removing = removals(&planned.clusters, &Default::default());
    let staging = deletion_staging(ctx, observed, &stored, &removing, &strategy_name).await?;
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
    let decision = decide_now(
        &strategy,
        &batches,
        DELETED_REVISION,
        &stored,
        &reports,
        controls,
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
    Ok(Staged {
        plan: hold_deletions(planned, &decision),
        recheck: recheck(&decision),
        rollout: None,
    })
}

/// The deletion strategy and its batches over the clusters whose copy goes (`removing`), or
/// none when the deletion is not staged: nothing stored to go on from, nothing to remove, an
/// orphaning deletion, a strategy missing or invalid.
async fn deletion_staging(
    ctx: &TypeContext,
    observed: &Observed,
    stored: &Stored,
    removing: &[String],
    strategy_name: &str,
) -> Result<Option<(CoreStrategy, Vec<Batch>)>, HubError> {
    let strategy = match stored.state {
        Some(_) if !removing.is_empty() && !is_orphaning(&observed.federated.annotations) => {
            fetch_strategy(ctx, strategy_name).await?.found()
        }
        _ => None,
    };
    let covered = covered(observed, |c| removing.contains(c));
    Ok(strategy.and_then(|strategy| {
        let strategy = deletion_strategy(&strategy);
        batches(&strategy, &covered).ok().map(|b| (strategy, b))
    }))
}

/// `planned` with the removals the deletion's rollout does not allow yet held.
fn hold_deletions(planned: Plan, decision: &Decision) -> Plan {
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
    held
}

/// After the member writes: a failed apply of the revision being rolled out that the member
/// refused (a transient failure is retried, never a halt) is recorded with it in the stored state and halts the rollout ([`hubfed_core::rollout::record_failures`]);
/// only this reconcile's applies of this revision count, never an older status.
pub async fn after_dispatch(
    ctx: &TypeContext,
    observed: &Observed,
    rollout: Rollout,
    result: &DispatchResult,
) -> Result<(), HubError> {
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
    if let Err(e) = result.and_then(|r| r.map_err(HubError::from)) {
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
) -> Result<Staged, HubError> {
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
            let object = hubfed_core::plan::FederatedObject {
                spec: spec.clone(),
                ..observed.federated.without_spec()
            };
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
