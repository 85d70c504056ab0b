//! Staged rollouts: which revision of a federated object each placed cluster may run now, and
//! when a rollout moves to its next stage, halts, completes or is aborted. Pure: the
//! controller (`hubfed-controller/src/sync/rollout.rs`) supplies what the members report and
//! the stored state, and stores the state this returns, so nothing is decided from memory
//! (docs/user-guide.md "Rollouts").
//!
//! The rules:
//! - **Stages**: each placed cluster belongs to the first stage whose `clusters` list or
//!   `clusterSelector` names it; a stage with neither takes every cluster left; clusters no
//!   stage takes form a last implicit stage. A stage may be cut into batches of at most
//!   `maxClustersPerBatch` clusters or `maxPercentPerBatch` % of them (by name), each gated
//!   like a stage.
//! - **Gate**: a batch is done when every one of its clusters runs the new revision and is
//!   Ready, and has stayed so for `soakSeconds`; the next batch may then take the new revision.
//! - **Halt**: a cluster given the new revision whose apply of it failed ([`halts_rollout`];
//!   recorded with the revision by [`record_failures`], so a failure of an earlier revision
//!   never halts a later one), or a cluster of the current batch that is not Ready with the new
//!   revision `readyDeadlineSeconds` after the batch started, halts the rollout: later batches
//!   keep the stable revision until a new revision (a fixed template) starts over.
//! - **Pause** freezes the rollout: no cluster is given a revision while it lasts — not the
//!   next batch, not a new revision (its rollout waits at the first batch); the clusters given
//!   the revision are kept in the state ([`RolloutState::reached`]) and only they may have it
//!   (re)applied. **Abort** sends every cluster back to the stable
//!   revision. An abort belongs to the revision it was given for: lifting it (resume) starts
//!   that revision's rollout over from the first batch, and a new revision (a fixed template)
//!   starts a fresh rollout although the abort annotation is still there — the controller then
//!   removes it ([`Decision::clear_abort`]).
//! - A new revision while a rollout runs starts over from the first batch; the stable revision
//!   stays the last one that completed every stage.
//! - **Membership is fixed** when a revision's rollout starts: its batches are stored
//!   ([`RolloutState::batches`]), so relabelling a cluster or a change of placement never moves
//!   a cluster to another batch nor shifts the batch being rolled out. A cluster placed
//!   mid-rollout joins the stage its labels say: a later stage's last batch (it waits for that
//!   stage), or — when that stage is the current one or already done — the current batch,
//!   whose gate then waits for it too (its deadline counts from the join). A cluster no longer
//!   placed leaves its batch.
//! - **Placement and deletion**: the placement is part of the revision ([`revision`]), so a
//!   placement change is rolled out like a template change; a cluster whose copy goes is
//!   covered until it is gone ([`removals`]). Deleting the object deletes its copies by the
//!   same stages ([`DELETED_REVISION`], [`deletion_strategy`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::plan::ClusterAction;
use crate::status::PropagationStatus;

pub use hubfed_api::scheduling::{RolloutStage as Stage, RolloutStrategySpec as RolloutStrategy};

/// The default of [`RolloutStrategy::ready_deadline_seconds`].
pub const DEFAULT_READY_DEADLINE_SECONDS: u32 = 600;

/// The annotation naming the RolloutStrategy (on the object, or on its FTC as the default).
pub const STRATEGY_ANNOTATION: &str = "hubfed.io/rollout-strategy";
/// `paused` or `aborted` (what `hubfedctl rollout pause|abort` writes); absent: running.
pub const CONTROL_ANNOTATION: &str = "hubfed.io/rollout";
/// The revision an abort was asked for (`hubfedctl rollout abort` writes it with
/// [`CONTROL_ANNOTATION`]): the abort belongs to that revision only ([`controls`]).
pub const ABORT_REVISION_ANNOTATION: &str = "hubfed.io/rollout-aborted-revision";

mod batches;
mod failures;
mod revision;
mod store;

pub(crate) use batches::merge_membership;
pub use batches::{Batch, batches};
pub use failures::{apply_failures, halts_rollout, is_refusal, record_failures};
use failures::{first_failure, halt};
pub use revision::{DELETED_REVISION, deletion_strategy, removals, revision};
pub use store::{
    Fit, STATE_DATA_LIMIT, STATE_OBJECT_ANNOTATION, STATE_PREFIX, STATE_UID_ANNOTATION, StoredData,
    fit, read_state, state_belongs, state_key, state_name, state_owned_by_object,
};

/// What one placed cluster reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterReport {
    /// The revision its copy was last applied from, if known.
    pub revision: Option<String>,
    pub ready: bool,
}

/// Where a rollout stands; stored by the controller and given back on the next decision.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutState {
    /// The revision being rolled out.
    pub revision: String,
    /// The last revision that reached every batch: what clusters not yet reached keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable: Option<String>,
    /// Index of the batch being rolled out.
    pub batch: usize,
    /// Unix seconds the batch started.
    pub batch_started: i64,
    /// Unix seconds since which the whole batch has been Ready on the revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_since: Option<i64>,
    pub phase: Phase,
    /// Why it halted: `<cluster>: <reason>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halted: Option<String>,
    /// Failed applies of `revision`, by cluster: `<status>: <message>` ([`record_failures`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failures: BTreeMap<String, String>,
    /// The batches of `revision`'s rollout, fixed when it started ([`decide`] adds clusters
    /// placed since and drops those no longer placed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batches: Vec<Batch>,
    /// The clusters given `revision` so far: the only ones that may have it applied, whatever
    /// happens to batches and placement meanwhile.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub reached: std::collections::BTreeSet<String>,
    /// The abort asked for when this revision came belonged to an earlier revision: it does not
    /// abort this one (until it is lifted and asked for again).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abort_consumed: bool,
    /// Why every change is held — the strategy is missing or invalid ([`hold`]) — as last
    /// published; cleared by the next [`decide`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
    /// Why the object's changes go everywhere at once although it has a strategy — its state
    /// would not fit in a ConfigMap ([`fit`], [`too_large`]) — as last published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unstaged: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    #[default]
    Progressing,
    Paused,
    Halted,
    Completed,
    Aborted,
}

/// What the operator asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Controls {
    pub paused: bool,
    pub aborted: bool,
}

/// What the operator asks of the rollout of `revision`: `control` is [`CONTROL_ANNOTATION`],
/// `aborted_revision` [`ABORT_REVISION_ANNOTATION`]. An abort naming another revision does not
/// abort this one and is stale (`true`: the controller removes it — over the object as read,
/// so an abort asked for since, naming this revision, stays). An abort naming no revision
/// (written by hand, or by an older hubfedctl) is taken as this revision's, as
/// [`RolloutState::abort_consumed`] says.
pub fn controls(
    control: Option<&str>,
    aborted_revision: Option<&str>,
    revision: &str,
) -> (Controls, bool) {
    let aborted = control == Some("aborted");
    let stale = aborted && aborted_revision.is_some_and(|r| r != revision);
    let controls = Controls {
        paused: control == Some("paused"),
        aborted: aborted && !stale,
    };
    (controls, stale)
}

/// The decision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// The revision each placed cluster may run now.
    pub allowed: BTreeMap<String, String>,
    pub state: RolloutState,
    /// `(reason, message)` for Events: `StageStarted`, `RolloutHalted`, `RolloutCompleted`, ...
    pub events: Vec<(&'static str, String)>,
    /// Seconds until a soak or deadline ends: decide again then.
    pub recheck_in: Option<i64>,
    /// The abort asked for belongs to an earlier revision: remove the request (the
    /// `hubfed.io/rollout: aborted` annotation) so that it shows what holds.
    pub clear_abort: bool,
}

/// Decides the rollout of `revision`; `batches` are the strategy's batches over the clusters
/// placed now ([`batches`]): a new rollout's membership, and the stage of a cluster placed
/// since the rollout started.
pub fn decide(
    strategy: &RolloutStrategy,
    current: &[Batch],
    revision: &str,
    previous: Option<&RolloutState>,
    reports: &BTreeMap<String, ClusterReport>,
    controls: Controls,
    now: i64,
) -> Decision {
    let mut state = starting_state(previous, revision, controls, now);
    state.held = None;
    state.unstaged = None;
    merge_membership(strategy, &mut state, current, now);
    let Some(stable) = state.stable.clone() else {
        return everywhere_at_once(current, revision, state);
    };
    let mut decision = Decision::default();
    if !controls.aborted {
        state.abort_consumed = false;
    }
    decision.clear_abort = controls.aborted && state.abort_consumed;
    if controls.aborted && !state.abort_consumed {
        return abort(state, stable, decision);
    }
    if state.phase == Phase::Aborted {
        state = restart_after_abort(strategy, current, state, now, &mut decision);
    }
    let batches = state.batches.clone();
    advance(
        strategy,
        &batches,
        reports,
        controls,
        now,
        &mut state,
        &mut decision,
    );
    for cluster in batches.iter().flat_map(|b| &b.clusters) {
        let chosen = if state.phase == Phase::Completed || state.reached.contains(cluster) {
            revision
        } else {
            stable.as_str()
        };
        decision.allowed.insert(cluster.clone(), chosen.to_owned());
    }
    decision.state = state;
    decision
}

/// The state the rollout of `revision` starts from: the stored one if it is this revision's.
fn starting_state(
    previous: Option<&RolloutState>,
    revision: &str,
    controls: Controls,
    now: i64,
) -> RolloutState {
    match previous {
        Some(state) if state.revision == revision => state.clone(),
        // A new revision starts over; the stable one is the last that completed. An abort of
        // the previous revision is not one of this.
        Some(state) => RolloutState {
            revision: revision.to_owned(),
            stable: if state.phase == Phase::Completed {
                Some(state.revision.clone())
            } else {
                state.stable.clone()
            },
            batch_started: now,
            abort_consumed: controls.aborted && state.phase == Phase::Aborted,
            ..RolloutState::default()
        },
        // First sight: whatever runs is taken as the stable revision's result; the first
        // revision has nothing to protect and goes everywhere.
        None => RolloutState {
            revision: revision.to_owned(),
            stable: None,
            batch_started: now,
            ..RolloutState::default()
        },
    }
}

/// Nothing to roll out from: every cluster takes the revision.
fn everywhere_at_once(current: &[Batch], revision: &str, mut state: RolloutState) -> Decision {
    let mut decision = Decision::default();
    for cluster in current.iter().flat_map(|b| &b.clusters) {
        decision
            .allowed
            .insert(cluster.clone(), revision.to_owned());
    }
    state.phase = Phase::Completed;
    state.batch = state.batches.len();
    decision.state = state;
    decision
}

/// Aborted: every cluster goes back to the stable revision.
fn abort(mut state: RolloutState, stable: String, mut decision: Decision) -> Decision {
    if state.phase != Phase::Aborted {
        decision
            .events
            .push(("RolloutAborted", format!("back to {stable} everywhere")));
    }
    state.phase = Phase::Aborted;
    for cluster in state.batches.iter().flat_map(|b| &b.clusters) {
        decision.allowed.insert(cluster.clone(), stable.clone());
    }
    decision.state = state;
    decision
}

/// The abort was lifted: this revision's rollout starts over.
fn restart_after_abort(
    strategy: &RolloutStrategy,
    current: &[Batch],
    state: RolloutState,
    now: i64,
    decision: &mut Decision,
) -> RolloutState {
    decision.events.push((
        "RolloutResumed",
        format!(
            "after the abort: {} starts over at stage {}",
            state.revision,
            current.first().map_or("-", |b| b.stage.as_str())
        ),
    ));
    let mut state = RolloutState {
        revision: state.revision,
        stable: state.stable,
        batch_started: now,
        ..RolloutState::default()
    };
    merge_membership(strategy, &mut state, current, now);
    state
}

/// What [`hold`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// The state to store.
    pub state: RolloutState,
    /// The revision goes to every cluster (the first revision: nothing to protect); otherwise
    /// every change is held.
    pub goes_out: bool,
    /// `why` is news: publish it (a Warning). Known from the stored state, so the same reason
    /// is said once, not at every reconcile.
    pub publish: bool,
}

/// The rollout of `revision` when its strategy cannot be used (missing, invalid: `why`):
/// every change is held — except the first revision of an object (nothing stored), which has
/// nothing to protect and goes everywhere; its state is stored all the same (completed), so
/// that the next change is held, and staged once the strategy is there.
pub fn hold(previous: Option<&RolloutState>, revision: &str, why: &str, now: i64) -> Hold {
    match previous {
        None => Hold {
            state: RolloutState {
                revision: revision.to_owned(),
                batch_started: now,
                phase: Phase::Completed,
                held: Some(why.to_owned()),
                ..RolloutState::default()
            },
            goes_out: true,
            publish: true,
        },
        Some(previous) => Hold {
            state: RolloutState {
                held: Some(why.to_owned()),
                ..previous.clone()
            },
            goes_out: false,
            publish: previous.held.as_deref() != Some(why),
        },
    }
}

/// The rollout of `revision` when its state does not fit in a ConfigMap ([`Fit::TooLarge`],
/// or the API server refused it as too large): never blocked for good, it goes to every
/// cluster at once (`goes_out`), and is stored as completed without a spec, with why
/// (published when news). A later revision that fits is staged from it again.
pub fn too_large(previous: Option<&RolloutState>, revision: &str, why: &str, now: i64) -> Hold {
    Hold {
        state: RolloutState {
            revision: revision.to_owned(),
            batch_started: now,
            phase: Phase::Completed,
            unstaged: Some(why.to_owned()),
            ..RolloutState::default()
        },
        goes_out: true,
        publish: previous.and_then(|p| p.unstaged.as_deref()) != Some(why),
    }
}

/// Moves the rollout through its batches as far as their gates let it, pausing, resuming,
/// halting or completing on the way.
fn advance(
    strategy: &RolloutStrategy,
    batches: &[Batch],
    reports: &BTreeMap<String, ClusterReport>,
    controls: Controls,
    now: i64,
    state: &mut RolloutState,
    decision: &mut Decision,
) {
    let gate = Gate::of(strategy);
    loop {
        if matches!(state.phase, Phase::Halted | Phase::Completed) {
            return;
        }
        if controls.paused {
            pause(batches.get(state.batch), reports, state);
            return;
        }
        if state.phase == Phase::Paused {
            // Resumed: the batch's deadline counts from now.
            state.batch_started = now;
            decision.events.push((
                "RolloutResumed",
                format!(
                    "at stage {}",
                    batches.get(state.batch).map_or("-", |b| b.stage.as_str())
                ),
            ));
        }
        state.phase = Phase::Progressing;
        let Some(batch) = batches.get(state.batch) else {
            state.phase = Phase::Completed;
            decision.events.push((
                "RolloutCompleted",
                format!("{} reached every cluster", state.revision),
            ));
            return;
        };
        state.reached.extend(batch.clusters.iter().cloned());
        match gate.verdict(batch, reports, now, state) {
            Verdict::Halt(why) => {
                decision.events.push(halt(state, why));
                return;
            }
            Verdict::RecheckIn(seconds) => {
                decision.recheck_in = Some(seconds);
                return;
            }
            Verdict::Passed => {
                decision
                    .events
                    .push(("StageCompleted", stage_completed(batch, &state.revision)));
                state.batch += 1;
                state.batch_started = now;
                state.ready_since = None;
            }
        }
    }
}

/// Paused: no batch starts, but the soak goes on while paused, and so does what breaks it.
fn pause(
    batch: Option<&Batch>,
    reports: &BTreeMap<String, ClusterReport>,
    state: &mut RolloutState,
) {
    if !batch.is_some_and(|b| all_on_revision(b, reports, &state.revision)) {
        state.ready_since = None;
    }
    state.phase = Phase::Paused;
}

/// A batch's gate: how long its clusters have to be Ready on the revision, and how long they
/// must then stay so.
struct Gate {
    deadline: i64,
    soak: i64,
}

/// What a batch's gate says now.
enum Verdict {
    /// The rollout halts, for this reason.
    Halt(String),
    /// Not yet: look again in this many seconds.
    RecheckIn(i64),
    /// The next batch may take the revision.
    Passed,
}

impl Gate {
    fn of(strategy: &RolloutStrategy) -> Self {
        Self {
            deadline: i64::from(
                strategy
                    .ready_deadline_seconds
                    .unwrap_or(DEFAULT_READY_DEADLINE_SECONDS),
            ),
            soak: i64::from(strategy.soak_seconds),
        }
    }

    /// The verdict on the current `batch`; keeps [`RolloutState::ready_since`] in step.
    fn verdict(
        &self,
        batch: &Batch,
        reports: &BTreeMap<String, ClusterReport>,
        now: i64,
        state: &mut RolloutState,
    ) -> Verdict {
        let deadline = self.deadline;
        let revision = state.revision.as_str();
        let late = || {
            (now - state.batch_started >= deadline)
                .then(|| {
                    batch
                        .clusters
                        .iter()
                        .find(|c| !runs_on_revision(reports, c, revision))
                })
                .flatten()
                .map(|c| format!("{c}: not Ready on {revision} within {deadline}s"))
        };
        if let Some(why) = first_failure(state).or_else(late) {
            return Verdict::Halt(why);
        }
        if !all_on_revision(batch, reports, revision) {
            state.ready_since = None;
            return Verdict::RecheckIn((deadline - (now - state.batch_started)).max(1));
        }
        // Whole seconds: it became Ready up to a second after `since`, so a full soak has
        // passed only once more than `soak` seconds have.
        let since = *state.ready_since.get_or_insert(now);
        if self.soak > 0 && now - since <= self.soak {
            return Verdict::RecheckIn(self.soak + 1 - (now - since));
        }
        Verdict::Passed
    }
}

/// Whether the cluster reports its copy Ready on `revision`.
fn runs_on_revision(
    reports: &BTreeMap<String, ClusterReport>,
    cluster: &str,
    revision: &str,
) -> bool {
    reports
        .get(cluster)
        .is_some_and(|r| r.ready && r.revision.as_deref() == Some(revision))
}

/// Whether every cluster of the batch reports its copy Ready on `revision`.
fn all_on_revision(
    batch: &Batch,
    reports: &BTreeMap<String, ClusterReport>,
    revision: &str,
) -> bool {
    batch
        .clusters
        .iter()
        .all(|c| runs_on_revision(reports, c, revision))
}

/// The `StageCompleted` event's message.
fn stage_completed(batch: &Batch, revision: &str) -> String {
    match (revision, batch.clusters.is_empty()) {
        (DELETED_REVISION, _) => format!("stage {}: its copies are deleted", batch.stage),
        (_, true) => format!("stage {} done on {revision}", batch.stage),
        (_, false) => format!(
            "stage {} ({}) Ready on {revision}",
            batch.stage,
            batch.clusters.join(", ")
        ),
    }
}

/// The action for a cluster the rollout does not give the current revision (yet), instead of
/// `action`, the plan's for that revision: nothing is written there. What the plan found
/// wrong there (not ready, a cache that could not be read, ...) is reported as it is; an
/// apply it would have made — a newly placed cluster's creation too — and the removal of a
/// copy no longer placed are reported as `RolloutPending`, with why. A cluster already up to
/// date stays so. `why(removal)` is the message ([`pending_message`]).
pub fn held_action(action: ClusterAction, why: impl FnOnce(bool) -> String) -> ClusterAction {
    let removal = match action {
        ClusterAction::Apply(_) => false,
        ClusterAction::Delete(_) | ClusterAction::RemoveManagedLabel => true,
        other => return other,
    };
    ClusterAction::Blocked {
        status: PropagationStatus::RolloutPending,
        message: why(removal),
    }
}

/// Why a cluster does not have the revision being rolled out: its change, or — `removal` —
/// the removal of its copy, waits.
pub fn pending_message(state: &RolloutState, cluster: &str, removal: bool) -> String {
    let revision = &state.revision;
    let keeps = if removal {
        "the copy here stays until then"
    } else {
        "this cluster keeps what it runs"
    };
    match state.phase {
        Phase::Paused => format!("the rollout of {revision} is paused; {keeps}"),
        Phase::Halted => format!(
            "the rollout of {revision} halted ({}); {keeps} until a new revision",
            state.halted.as_deref().unwrap_or("-")
        ),
        Phase::Aborted => format!(
            "the rollout of {revision} was aborted and the stable revision's spec is unknown; {keeps}"
        ),
        Phase::Progressing | Phase::Completed => {
            let stage = state
                .batches
                .iter()
                .find(|b| b.clusters.iter().any(|c| c == cluster))
                .map_or("-", |b| b.stage.as_str());
            format!("the rollout of {revision} has not reached stage {stage}; {keeps}")
        }
    }
}

#[cfg(test)]
mod tests;
