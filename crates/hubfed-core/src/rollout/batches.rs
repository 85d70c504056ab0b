//! A rollout's batches: the strategy's stages over the placed clusters, cut into batches, and
//! the stored membership kept in step with placement.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Phase, RolloutState, RolloutStrategy};
use crate::Result;
use crate::placement::ClusterInfo;
use crate::selector::Selector;

/// A batch of clusters gated together, with the stage it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    pub stage: String,
    pub clusters: Vec<String>,
}

/// The batches of `strategy` over the placed `clusters`, in order.
pub fn batches(strategy: &RolloutStrategy, clusters: &[ClusterInfo]) -> Result<Vec<Batch>> {
    let mut left: Vec<&ClusterInfo> = clusters.iter().collect();
    left.sort_by(|a, b| a.name.cmp(&b.name));
    let mut stages: Vec<(String, Vec<String>)> = Vec::new();
    for stage in &strategy.stages {
        let selector = match &stage.cluster_selector {
            Some(selector) => Some(Selector::new(Some(selector))?),
            None => None,
        };
        let takes_rest = stage.clusters.is_empty() && selector.is_none();
        let (taken, rest): (Vec<&ClusterInfo>, Vec<&ClusterInfo>) =
            left.into_iter().partition(|c| {
                takes_rest
                    || stage.clusters.contains(&c.name)
                    || selector.as_ref().is_some_and(|s| s.matches(&c.labels))
            });
        left = rest;
        stages.push((
            stage.name.clone(),
            taken.into_iter().map(|c| c.name.clone()).collect(),
        ));
    }
    if !left.is_empty() {
        stages.push((
            "remaining".to_owned(),
            left.into_iter().map(|c| c.name.clone()).collect(),
        ));
    }
    let by_count = strategy
        .max_clusters_per_batch
        .filter(|n| *n > 0)
        .map_or(usize::MAX, |n| n as usize);
    Ok(stages
        .into_iter()
        .filter(|(_, clusters)| !clusters.is_empty())
        .flat_map(|(stage, clusters)| {
            let by_percent = strategy
                .max_percent_per_batch
                .filter(|p| *p > 0)
                .map_or(usize::MAX, |p| {
                    (clusters.len() * p.min(100) as usize).div_ceil(100).max(1)
                });
            clusters
                .chunks(by_count.min(by_percent))
                .map(|chunk| Batch {
                    stage: stage.clone(),
                    clusters: chunk.to_vec(),
                })
                .collect::<Vec<_>>()
        })
        .collect())
}

/// Keeps the stored membership in step with placement: a new rollout takes `current`; a
/// cluster no longer placed leaves its batch (and what it was given: its copy is gone); a
/// cluster placed since joins by its stage (module doc).
pub(crate) fn merge_membership(
    strategy: &RolloutStrategy,
    state: &mut RolloutState,
    current: &[Batch],
    now: i64,
) {
    if state.batches.is_empty() {
        state.batches = current.to_vec();
        return;
    }
    let placed: BTreeMap<&str, &str> = current
        .iter()
        .flat_map(|b| b.clusters.iter().map(|c| (c.as_str(), b.stage.as_str())))
        .collect();
    for batch in &mut state.batches {
        batch.clusters.retain(|c| placed.contains_key(c.as_str()));
    }
    state.reached.retain(|c| placed.contains_key(c.as_str()));
    let order = |stage: &str| {
        strategy
            .stages
            .iter()
            .position(|s| s.name == stage)
            .unwrap_or(strategy.stages.len())
    };
    let known: std::collections::BTreeSet<String> = state
        .batches
        .iter()
        .flat_map(|b| b.clusters.iter().cloned())
        .collect();
    for (cluster, stage) in placed {
        if known.contains(cluster) {
            continue;
        }
        let at = state.batch.min(state.batches.len() - 1);
        let later = state.batch < state.batches.len()
            && order(stage) > order(&state.batches[state.batch].stage);
        let index = if later {
            match (at + 1..state.batches.len())
                .rev()
                .find(|&i| state.batches[i].stage == stage)
            {
                Some(i) => i,
                None => {
                    let i = (at + 1..state.batches.len())
                        .find(|&i| order(&state.batches[i].stage) > order(stage))
                        .unwrap_or(state.batches.len());
                    state.batches.insert(
                        i,
                        Batch {
                            stage: stage.to_owned(),
                            clusters: Vec::new(),
                        },
                    );
                    i
                }
            }
        } else {
            // Its stage is under way or done: gated with the current batch.
            if state.batch == at && state.phase == Phase::Progressing {
                state.batch_started = now;
                state.ready_since = None;
            }
            at
        };
        let clusters = &mut state.batches[index].clusters;
        clusters.push(cluster.to_owned());
        clusters.sort();
    }
}
