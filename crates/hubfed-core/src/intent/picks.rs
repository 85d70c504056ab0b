//! The machinery of a choice: ranked candidates, the policy and the time, and the chosen set
//! with its counts per spread value.

use std::collections::{BTreeMap, BTreeSet};

use hubfed_api::scheduling::{PlacementPolicySpec, SpreadConstraint};

use super::{Chosen, ClusterState, Reason};

pub(super) struct Ranked<'a> {
    pub(super) cluster: &'a ClusterState,
    pub(super) score: i64,
    pub(super) hash: u32,
}

pub(super) struct Context<'a> {
    pub(super) spec: &'a PlacementPolicySpec,
    pub(super) grace: Option<i64>,
    pub(super) now: i64,
}

impl<'a> Context<'a> {
    pub(super) fn unready_for(&self, c: &ClusterState) -> i64 {
        if c.ready {
            0
        } else {
            self.now - c.since.unwrap_or(i64::MIN / 2)
        }
    }

    pub(super) fn ready_for(&self, c: &ClusterState) -> i64 {
        if c.ready {
            self.now - c.since.unwrap_or(i64::MIN / 2)
        } else {
            -1
        }
    }

    /// A chosen cluster may stay: Ready, or unready for less than the grace period (or no
    /// failover at all).
    pub(super) fn keepable(&self, c: &ClusterState) -> bool {
        match self.grace {
            None => true,
            Some(grace) => c.ready || self.unready_for(c) < grace,
        }
    }

    /// Every spread value among the `ranked` candidates, for each spread with a minimum:
    /// the spread's index, the spread, its minimum and the value, in that order.
    pub(super) fn spread_minimums<'r>(
        &self,
        ranked: &'r [Ranked<'_>],
    ) -> Vec<(usize, &'a SpreadConstraint, u32, &'r String)> {
        let mut minimums = Vec::new();
        for (i, spread) in self.spec.spread.iter().enumerate() {
            let Some(min) = spread.min_per_value.filter(|m| *m > 0) else {
                continue;
            };
            let values: BTreeSet<&String> = ranked
                .iter()
                .filter_map(|r| r.cluster.labels.get(&spread.topology_key))
                .collect();
            minimums.extend(values.into_iter().map(|value| (i, spread, min, value)));
        }
        minimums
    }

    pub(super) fn values(&self, c: &ClusterState) -> Vec<Option<String>> {
        self.spec
            .spread
            .iter()
            .map(|s| c.labels.get(&s.topology_key).cloned())
            .collect()
    }
}

/// Tracks the chosen set and the per-spread-value counts.
pub(super) struct Picks<'a> {
    pub(super) ctx: &'a Context<'a>,
    pub(super) chosen: BTreeMap<String, Chosen>,
    pub(super) counts: Vec<BTreeMap<String, u32>>,
}

impl<'a> Picks<'a> {
    pub(super) fn new(ctx: &'a Context<'a>) -> Self {
        Self {
            ctx,
            chosen: BTreeMap::new(),
            counts: vec![BTreeMap::new(); ctx.spec.spread.len()],
        }
    }

    pub(super) fn full(&self) -> bool {
        self.ctx
            .spec
            .max_clusters
            .is_some_and(|max| self.chosen.len() >= max as usize)
    }

    pub(super) fn fits(&self, c: &ClusterState) -> bool {
        if self.full() || self.chosen.contains_key(&c.name) {
            return false;
        }
        self.ctx
            .values(c)
            .iter()
            .zip(&self.ctx.spec.spread)
            .zip(&self.counts)
            .all(
                |((value, spread), counts)| match (value, spread.max_per_value) {
                    (Some(value), Some(max)) => counts.get(value).copied().unwrap_or(0) < max,
                    _ => true,
                },
            )
    }

    /// Takes `c` out of the choice (it must be in it): what it was chosen as.
    pub(super) fn remove(&mut self, c: &ClusterState) -> Chosen {
        for (i, value) in self.ctx.values(c).into_iter().enumerate() {
            if let Some(count) = value.and_then(|value| self.counts[i].get_mut(&value)) {
                *count = count.saturating_sub(1);
            }
        }
        self.chosen.remove(&c.name).unwrap_or(Chosen {
            reason: Reason::Kept,
            message: String::new(),
        })
    }

    pub(super) fn add(&mut self, c: &ClusterState, reason: Reason, message: String) {
        for (i, value) in self.ctx.values(c).into_iter().enumerate() {
            if let Some(value) = value {
                *self.counts[i].entry(value).or_insert(0) += 1;
            }
        }
        self.chosen
            .insert(c.name.clone(), Chosen { reason, message });
    }
}
