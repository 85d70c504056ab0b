//! Failed applies: which ones halt a rollout, and their record in its state.

use std::collections::BTreeMap;

use super::{Phase, RolloutState};
use crate::status::{ClusterOutcome, PropagationStatus};

/// Whether a failed apply halts a rollout: the member refused the object (a transient failure
/// with the same status does not: [`apply_failures`]), or it could not be computed. A cluster not ready, a cache or client that could not be read, a request that
/// timed out are not the revision's fault; they get no halt of their own (the ready deadline
/// covers a cluster that stays unreachable).
pub fn halts_rollout(status: PropagationStatus) -> bool {
    matches!(
        status,
        PropagationStatus::CreationFailed
            | PropagationStatus::UpdateFailed
            | PropagationStatus::ApplyOverridesFailed
            | PropagationStatus::ComputeResourceFailed
            | PropagationStatus::FieldRetentionFailed
            | PropagationStatus::AlreadyExists
    )
}

/// Whether a member's answer to a write refuses the object itself: an API error of the 4xx
/// class, except 408 (timeout), 409 (a conflict, retried) and 429 (too many requests). No
/// answer at all (`None`: a connection reset, a timeout) and 5xx server errors are transient:
/// they say nothing of the revision.
pub fn is_refusal(code: Option<u16>) -> bool {
    matches!(code, Some(c) if (400..500).contains(&c) && !matches!(c, 408 | 409 | 429))
}

/// The failures, among one reconcile's `outcomes`, of the applies of the revision being rolled
/// out: clusters in `applied` (the ones the reconcile applied it to) whose outcome
/// [`halts_rollout`], as `<status>: <message>` — except those in `transient`, whose write
/// failed without the member refusing it ([`is_refusal`]): retried, never a halt.
pub fn apply_failures(
    applied: &[String],
    outcomes: &[ClusterOutcome],
    transient: &std::collections::BTreeSet<String>,
) -> BTreeMap<String, String> {
    outcomes
        .iter()
        .filter(|o| applied.contains(&o.cluster) && halts_rollout(o.status))
        .filter(|o| !transient.contains(&o.cluster))
        .map(|o| {
            let message = o.message.as_deref().unwrap_or_default();
            (o.cluster.clone(), format!("{}: {message}", o.status))
        })
        .collect()
}

/// Records the failed applies of `state.revision` ([`apply_failures`]): a progressing rollout
/// halts at once. Returns the events (`RolloutHalted`).
pub fn record_failures(
    state: &mut RolloutState,
    failures: BTreeMap<String, String>,
) -> Vec<(&'static str, String)> {
    let mut events = Vec::new();
    if failures.is_empty() {
        return events;
    }
    state.failures.extend(failures);
    if state.phase == Phase::Progressing
        && let Some(why) = first_failure(state)
    {
        events.push(halt(state, why));
    }
    events
}

/// Why the first failed apply of `state.revision` halts its rollout, if one failed.
pub(super) fn first_failure(state: &RolloutState) -> Option<String> {
    state
        .failures
        .iter()
        .next()
        .map(|(cluster, error)| format!("{cluster}: apply failed: {error}"))
}

/// Halts the rollout at its current batch for `why`; returns the event (`RolloutHalted`,
/// naming the batch).
pub(super) fn halt(state: &mut RolloutState, why: String) -> (&'static str, String) {
    let stage = state.batches.get(state.batch).map_or_else(
        || "-".to_owned(),
        |b| format!("{} ({})", b.stage, b.clusters.join(", ")),
    );
    let event = ("RolloutHalted", format!("stage {stage}: {why}"));
    state.phase = Phase::Halted;
    state.halted = Some(why);
    event
}
