//! What a rollout carries: an object's revision, and the deletion of its copies as one.

use super::RolloutStrategy;
use crate::plan::{ClusterAction, ClusterPlan};

/// The revision of a federated object under a strategy — what a rollout carries, stage by
/// stage: its template and overrides (KubeFed's versions) and the clusters it is placed in,
/// each shortened: `<template>-<overrides>-<placement>`. A placement change is a new revision
/// like a template change: the clusters it adds get their copy, and those it drops lose theirs,
/// when their stage comes.
pub fn revision(
    template_version: &str,
    overrides_version: &str,
    placed: &std::collections::BTreeSet<String>,
) -> String {
    use md5::{Digest, Md5};
    let short = |v: &str| v.chars().take(10).collect::<String>();
    let clusters = placed.iter().cloned().collect::<Vec<_>>().join(",");
    let placement = hex::encode(Md5::digest(clusters.as_bytes()));
    format!(
        "{}-{}-{}",
        short(template_version),
        short(overrides_version),
        &placement[..8]
    )
}

/// The revision of a federated object being deleted: its copies go stage by stage.
pub const DELETED_REVISION: &str = "deleted";

/// The strategy a deletion is staged by (revision [`DELETED_REVISION`], covering the clusters
/// that hold a copy, [`removals`]): the object's, without a ready deadline — a deletion never
/// halts, since a halted deletion would keep the object and its finalizer for good; a copy
/// slow to go holds up the next stage until it is gone (a cluster that is not ready holds up
/// nothing: its copy is left to garbage collection, as without a strategy). Pause holds a
/// deletion like any rollout; abort does not apply (nothing to go back to).
pub fn deletion_strategy(strategy: &RolloutStrategy) -> RolloutStrategy {
    RolloutStrategy {
        ready_deadline_seconds: Some(u32::MAX),
        ..strategy.clone()
    }
}

/// The clusters, besides the placed ones, that a rollout covers: those no longer placed whose
/// copy the plan removes (deletes, unlabels, or waits to see gone), so that a removal waits for
/// its stage too. Such a cluster has the revision once its copy is gone. `clusters` and
/// `placed` are a plan's.
pub fn removals(
    clusters: &[ClusterPlan],
    placed: &std::collections::BTreeSet<String>,
) -> Vec<String> {
    clusters
        .iter()
        .filter(|c| !placed.contains(&c.cluster))
        .filter(|c| {
            matches!(
                c.action,
                ClusterAction::Delete(_)
                    | ClusterAction::RemoveManagedLabel
                    | ClusterAction::WaitForRemoval
            )
        })
        .map(|c| c.cluster.clone())
        .collect()
}
