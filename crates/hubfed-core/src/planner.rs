//! The replica planner of a ReplicaSchedulingPreference: how many of `totalReplicas` each
//! cluster runs, by weight, `minReplicas`, `maxReplicas`, the replicas clusters run now
//! (`rebalance: false` keeps them where they are) and capacity estimated from pods that could
//! not be scheduled (docs/kubefed-compatibility.md §2.7).
//!
//! A port of KubeFed's `pkg/controller/util/planner/planner.go`, rule for rule, so KubeFed
//! users' preferences give the same member replica counts; its test cases are the table tests
//! below, "hash dependent" ones included (ties are broken by an FNV-1 hash of the cluster name
//! and the workload key, as in KubeFed, so one-replica workloads do not all land in the
//! alphabetically first cluster).

use std::collections::BTreeMap;

use hubfed_api::federated::{
    ClusterOverrides, ClusterReference, FederatedSpec, Override, Placement,
};
use hubfed_api::scheduling::{ClusterPreferences, ReplicaSchedulingPreferenceSpec};

/// The preference entry that applies to every cluster not named.
pub const ANY_CLUSTER: &str = "*";

/// What the planner decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaPlan {
    /// Replicas per available cluster (0 for clusters without a preference).
    pub replicas: BTreeMap<String, i64>,
    /// Replicas it would be good to add in a cluster beyond its estimated capacity, in case
    /// they fit after all (KubeFed's "overflow").
    pub overflow: BTreeMap<String, i64>,
}

struct Named<'a> {
    cluster: &'a str,
    hash: u32,
    /// The preference's numbers, never negative (see [`plan`]).
    min: i64,
    max: Option<i64>,
    weight: i64,
}

/// Distributes `spec.total_replicas` over `available` clusters (KubeFed `Planner.Plan`).
/// `current` holds the replicas each cluster runs now, `capacity` the estimated capacity of
/// clusters where pods could not be scheduled, `key` a workload key mixed into tie-breaking.
///
/// Total over any input: a negative total, minimum, maximum, weight, current count or
/// capacity counts as 0 (the controller refuses such preferences before planning, see
/// [`crate::schedule::validate`]); shares are computed in 128 bits, so no weight overflows;
/// and rounds in which only replicas running already are accounted for (`rebalance: false`)
/// are taken together, so the loop ends after at most about `n·√total` rounds for `n`
/// clusters whatever the numbers — KubeFed's loop can take one round per replica there.
pub fn plan(
    spec: &ReplicaSchedulingPreferenceSpec,
    available: &[&str],
    current: &BTreeMap<String, i64>,
    capacity: &BTreeMap<String, i64>,
    key: &str,
) -> ReplicaPlan {
    let mut placing = Placing {
        result: ReplicaPlan::default(),
        capacity,
        remaining: i64::from(spec.total_replicas.max(0)),
        preallocated: BTreeMap::new(),
    };
    let preferences = preferences(spec, available, key, &mut placing.result.replicas);
    placing.minimums(&preferences);
    if !spec.rebalance {
        placing.keep_current(&preferences, current);
    }
    placing.by_weight(preferences);
    placing.finish(spec.rebalance)
}

/// The preferences of the `available` clusters, by decreasing weight, then increasing hash (Go's
/// sort.Sort is not stable, but the order is total unless two clusters hash alike: then by
/// name, so that the order the clusters are listed in never matters). A cluster without a
/// preference gets 0 replicas in `plan`.
fn preferences<'a>(
    spec: &ReplicaSchedulingPreferenceSpec,
    available: &[&'a str],
    key: &str,
    plan: &mut BTreeMap<String, i64>,
) -> Vec<Named<'a>> {
    let mut preferences: Vec<Named<'a>> = Vec::with_capacity(available.len());
    for cluster in available {
        let preference = spec
            .clusters
            .get(*cluster)
            .or_else(|| spec.clusters.get(ANY_CLUSTER));
        match preference {
            Some(preference) => preferences.push(Named {
                cluster,
                hash: fnv1_32(cluster.as_bytes(), key.as_bytes()),
                min: preference.min_replicas.max(0),
                max: preference.max_replicas.map(|max| max.max(0)),
                weight: preference.weight.max(0),
            }),
            None => {
                plan.insert((*cluster).to_owned(), 0);
            }
        }
    }
    preferences.sort_by(|a, b| {
        b.weight
            .cmp(&a.weight)
            .then(a.hash.cmp(&b.hash))
            .then(a.cluster.cmp(b.cluster))
    });
    preferences
}

/// A plan being made: what is placed so far, and what is left to place.
struct Placing<'a, 'c> {
    result: ReplicaPlan,
    capacity: &'c BTreeMap<String, i64>,
    remaining: i64,
    /// Without rebalancing: the replicas a cluster keeps beyond its minimum, not yet accounted
    /// for by its weight.
    preallocated: BTreeMap<&'a str, i64>,
}

/// One round of placing by weight.
#[derive(Default)]
struct Round<'a> {
    /// Whether a cluster got more, or used up some of its preallocated replicas.
    modified: bool,
    /// Whether a cluster's count changed.
    moved: bool,
    /// The preallocated replicas each cluster used up.
    used: Vec<(&'a str, i64)>,
    /// The clusters not full yet: the next round's.
    next: Vec<Named<'a>>,
}

impl<'a> Placing<'a, '_> {
    fn capacity_of(&self, cluster: &str) -> Option<i64> {
        self.capacity.get(cluster).map(|cap| (*cap).max(0))
    }

    /// Each cluster's minimum first.
    fn minimums(&mut self, preferences: &[Named<'a>]) {
        for p in preferences {
            let mut min = p.min.min(self.remaining);
            if let Some(cap) = self.capacity_of(p.cluster) {
                min = min.min(cap);
            }
            self.remaining -= min;
            self.result.replicas.insert(p.cluster.to_owned(), min);
        }
    }

    /// Without rebalancing, clusters keep what they run (up to max and capacity).
    fn keep_current(&mut self, preferences: &[Named<'a>], current: &BTreeMap<String, i64>) {
        for p in preferences {
            let planned = self.result.replicas[p.cluster];
            let Some(&count) = current.get(p.cluster) else {
                continue;
            };
            if count <= planned {
                continue;
            }
            let mut target = count;
            if let Some(max) = p.max {
                target = target.min(max);
            }
            if let Some(cap) = self.capacity_of(p.cluster) {
                target = target.min(cap);
            }
            let extra = (target - planned).min(self.remaining).max(0);
            self.remaining -= extra;
            self.preallocated.insert(p.cluster, extra);
            self.result
                .replicas
                .insert(p.cluster.to_owned(), extra + planned);
        }
    }

    /// The rest by weight, rounding up, until nothing is left or nothing moves.
    fn by_weight(&mut self, mut preferences: Vec<Named<'a>>) {
        let mut modified = true;
        while modified && self.remaining > 0 {
            let before = preferences.len();
            let round = self.weight_round(preferences);
            modified = round.modified;
            preferences = round.next;
            if round.modified && !round.moved && preferences.len() == before {
                self.skip_preallocated_rounds(round.used);
            }
        }
    }

    fn weight_round(&mut self, preferences: Vec<Named<'a>>) -> Round<'a> {
        let mut round = Round {
            next: Vec::with_capacity(preferences.len()),
            ..Round::default()
        };
        let weight_sum: i128 = preferences.iter().map(|p| i128::from(p.weight)).sum();
        let in_this_loop = i128::from(self.remaining);
        for p in preferences {
            if weight_sum <= 0 {
                break;
            }
            // At most `remaining`, so it fits an i64.
            let share = (in_this_loop * i128::from(p.weight) + weight_sum - 1) / weight_sum;
            let extra =
                i64::try_from(share.min(i128::from(self.remaining))).unwrap_or(self.remaining);
            if !self.add_share(&p, extra, &mut round) {
                round.next.push(p);
            }
        }
        round
    }

    /// Gives `p` its share of this round, preallocated replicas first; returns whether the
    /// cluster is full (its maximum or capacity reached).
    fn add_share(&mut self, p: &Named<'a>, mut extra: i64, round: &mut Round<'a>) -> bool {
        let start = self.result.replicas[p.cluster];
        let prealloc = self.preallocated.get(p.cluster).copied().unwrap_or(0);
        let used = extra.min(prealloc);
        self.preallocated.insert(p.cluster, prealloc - used);
        extra -= used;
        if used > 0 {
            round.modified = true;
            round.used.push((p.cluster, used));
        }
        let mut total = start + extra;
        let mut full = false;
        if let Some(max) = p.max
            && total > max
        {
            total = max;
            full = true;
        }
        if let Some(cap) = self.capacity_of(p.cluster)
            && total > cap
        {
            self.result
                .overflow
                .insert(p.cluster.to_owned(), total - cap);
            total = cap;
            full = true;
        }
        self.remaining -= total - start;
        self.result.replicas.insert(p.cluster.to_owned(), total);
        round.moved |= total != start;
        round.modified |= total > start;
        full
    }

    /// Only preallocated replicas were used up; every next round would do the same until some
    /// cluster has fewer preallocated than its share: take those rounds at once.
    fn skip_preallocated_rounds(&mut self, used_this_round: Vec<(&'a str, i64)>) {
        let rounds = used_this_round
            .iter()
            .map(|(cluster, used)| self.preallocated[cluster] / used)
            .min()
            .unwrap_or(0);
        for (cluster, used) in used_this_round {
            if let Some(left) = self.preallocated.get_mut(cluster) {
                *left -= rounds * used;
            }
        }
    }

    fn finish(mut self, rebalance: bool) -> ReplicaPlan {
        if !rebalance {
            // Without rebalancing, overflow is only what could not be placed anywhere.
            let remaining = self.remaining;
            self.result.overflow = self
                .result
                .overflow
                .into_iter()
                .map(|(cluster, value)| (cluster, value.min(remaining)))
                .filter(|(_, value)| *value > 0)
                .collect();
        }
        self.result
    }
}

/// The replicas per cluster to write (KubeFed `schedule`): 0 for every cluster that runs the
/// workload now, then the plan, plus its overflow.
pub fn schedule_result(
    planned: &ReplicaPlan,
    current: &BTreeMap<String, i64>,
) -> BTreeMap<String, i64> {
    let mut result: BTreeMap<String, i64> = current.keys().map(|c| (c.clone(), 0)).collect();
    result.extend(planned.replicas.iter().map(|(c, n)| (c.clone(), *n)));
    for (cluster, extra) in &planned.overflow {
        *result.entry(cluster.clone()).or_insert(0) += extra;
    }
    result
}

/// The preferences of a spec, `{"*": {weight: 1}}` when it names none (KubeFed defaults so).
pub fn with_default_preferences(
    spec: &ReplicaSchedulingPreferenceSpec,
) -> ReplicaSchedulingPreferenceSpec {
    let mut spec = spec.clone();
    if spec.clusters.is_empty() {
        spec.clusters.insert(
            ANY_CLUSTER.to_owned(),
            ClusterPreferences {
                weight: 1,
                ..ClusterPreferences::default()
            },
        );
    }
    spec
}

/// The override path the scheduler owns.
pub const REPLICAS_PATH: &str = "/spec/replicas";

/// Writes a schedule `result` into a federated object's spec as KubeFed's plugin does: the
/// placement becomes exactly the scheduled clusters (overwriting any placement), and each
/// scheduled cluster gets a `/spec/replicas` override with its count (other overrides kept;
/// unscheduled clusters lose theirs). Whether the spec changed (KubeFed updates only then).
pub fn write_schedule(spec: &mut FederatedSpec, result: &BTreeMap<String, i64>) -> bool {
    let mut dirty = false;
    let mut current: Vec<&str> = spec
        .placement
        .as_ref()
        .and_then(|p| p.clusters.as_ref())
        .map(|c| c.iter().map(|r| r.name.as_str()).collect())
        .unwrap_or_default();
    current.sort_unstable();
    let wanted: Vec<&str> = result.keys().map(String::as_str).collect();
    if current != wanted {
        let placement = spec.placement.get_or_insert_with(Placement::default);
        placement.clusters = Some(
            wanted
                .iter()
                .map(|name| ClusterReference {
                    name: (*name).to_owned(),
                })
                .collect(),
        );
        dirty = true;
    }
    if override_update_needed(spec.overrides.as_deref().unwrap_or_default(), result) {
        update_overrides(spec.overrides.get_or_insert_with(Vec::new), result);
        dirty = true;
    }
    dirty
}

/// KubeFed `OverrideUpdateNeeded`: a replicas override differs, is missing, or is extra.
fn override_update_needed(overrides: &[ClusterOverrides], result: &BTreeMap<String, i64>) -> bool {
    let mut matched = 0;
    for entry in overrides {
        for item in entry
            .cluster_overrides
            .iter()
            .filter(|o| o.path == REPLICAS_PATH)
        {
            let value = item.value.as_ref().and_then(serde_json::Value::as_f64);
            #[allow(clippy::cast_possible_truncation)]
            let value = value.map(|v| v as i64);
            if value.is_none() || result.get(&entry.cluster_name) != value.as_ref() {
                return true;
            }
            matched += 1;
        }
    }
    matched != result.len()
}

/// KubeFed `updateOverridesMap`.
fn update_overrides(overrides: &mut Vec<ClusterOverrides>, result: &BTreeMap<String, i64>) {
    for entry in overrides.iter_mut() {
        if !result.contains_key(&entry.cluster_name)
            && let Some(at) = entry
                .cluster_overrides
                .iter()
                .position(|o| o.path == REPLICAS_PATH)
        {
            entry.cluster_overrides.remove(at);
        }
    }
    for (cluster, replicas) in result {
        let value = serde_json::Value::from(*replicas);
        match overrides.iter_mut().find(|e| &e.cluster_name == cluster) {
            Some(entry) => match entry
                .cluster_overrides
                .iter_mut()
                .find(|o| o.path == REPLICAS_PATH)
            {
                Some(item) => item.value = Some(value),
                None => entry.cluster_overrides.push(replicas_override(value)),
            },
            None => overrides.push(ClusterOverrides {
                cluster_name: cluster.clone(),
                cluster_overrides: vec![replicas_override(value)],
            }),
        }
    }
}

fn replicas_override(value: serde_json::Value) -> Override {
    Override {
        op: String::new(),
        path: REPLICAS_PATH.to_owned(),
        value: Some(value),
    }
}

/// Go's `hash/fnv` `New32` (FNV-1, 32 bits) over `a` then `b`.
pub(crate) fn fnv1_32(a: &[u8], b: &[u8]) -> u32 {
    a.iter().chain(b).fold(0x811c_9dc5_u32, |hash, byte| {
        hash.wrapping_mul(0x0100_0193) ^ u32::from(*byte)
    })
}

#[cfg(test)]
mod tests;
