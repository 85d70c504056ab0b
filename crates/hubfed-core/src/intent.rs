//! Placement by intent: which clusters a [`PlacementPolicySpec`] chooses, from the registry,
//! the previous choice and the time. Pure; the policy controller writes the result.
//!
//! The rules, in order:
//!
//! 1. **Candidates**: joined clusters matching `clusterSelector` (absent: all) that carry
//!    every `spread` topology key.
//! 2. **Rank**: the sum of the weights of the matching `preferences`, higher first; ties by an
//!    FNV hash of the object key and the cluster name (different objects spread differently,
//!    the same object always ranks the same way), then by name.
//! 3. **Stability**: previously chosen clusters stay chosen while they are candidates — a
//!    cluster joining or leaving elsewhere never reshuffles a choice.
//! 4. **Limits**: kept clusters beyond `maxClusters` or a spread's `maxPerValue` (a stricter
//!    policy) are dropped, lowest rank first.
//! 5. **Fill**: first each spread value's `minPerValue`, then by rank up to `maxClusters`
//!    (absent: every candidate), never above a `maxPerValue`. Only Ready clusters are picked.
//! 6. **Failover**: with `failover`, a chosen cluster that has been NotReady (or Offline) for
//!    the grace period is replaced by the best Ready candidate that fits in its place (one
//!    with its value of a spread key whose `minPerValue` would go unmet first) and recorded in
//!    `failedOver`. When none fits — every candidate chosen already, or none Ready, as when
//!    the hub is cut off from its members — it stays chosen (reason `Kept`, until it recovers):
//!    failures alone never make the choice smaller, so a member that comes back never loses
//!    its copy.
//! 7. **Hysteresis**: a replaced cluster is picked again only after it has been Ready for the
//!    grace period. It takes its place back (giving up its replacement) only when
//!    `failover.moveBack` is true; otherwise it is an ordinary candidate again.

use std::collections::{BTreeMap, BTreeSet};

use hubfed_api::scheduling::{DEFAULT_FAILOVER_GRACE_SECONDS, PlacementPolicySpec};

use crate::Result;
use crate::planner::fnv1_32;
use crate::selector::Selector;

/// Why a cluster is in the choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    /// A candidate, no limit applies.
    Selected,
    /// Kept through a failure: unready past the grace period with no Ready candidate to
    /// replace it. Only while that lasts: no longer failing, it is chosen for what a fresh
    /// choice would choose it for again (`Selected`, `Preferred`, `Spread`, `Replacement`).
    Kept,
    /// Chosen by rank (a preference matched).
    Preferred,
    /// Chosen to meet a spread's `minPerValue`.
    Spread,
    /// Chosen in place of a failed-over cluster.
    Replacement,
    /// A failed-over cluster, Ready again for the grace period.
    MovedBack,
}

impl Reason {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Selected => "Selected",
            Self::Kept => "Kept",
            Self::Preferred => "Preferred",
            Self::Spread => "Spread",
            Self::Replacement => "Replacement",
            Self::MovedBack => "MovedBack",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Selected,
            Self::Kept,
            Self::Preferred,
            Self::Spread,
            Self::Replacement,
            Self::MovedBack,
        ]
        .into_iter()
        .find(|r| r.as_str() == text)
    }
}

/// A joined cluster as the policy sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterState {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub ready: bool,
    /// Unix seconds of the last change of its readiness (the KubeFedCluster's `Ready`
    /// condition `lastTransitionTime`); `None`: long ago.
    pub since: Option<i64>,
}

/// A cluster replaced by failover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedOver {
    pub cluster: String,
    pub replaced_by: Option<String>,
    /// Unix seconds.
    pub time: i64,
}

/// One chosen cluster and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chosen {
    pub reason: Reason,
    pub message: String,
}

/// The previous choice (the policy's status).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Previous {
    pub clusters: BTreeMap<String, Chosen>,
    pub failed_over: Vec<FailedOver>,
}

/// What happened to a cluster of the choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    /// Not Ready past the grace period: replaced.
    FailedOver,
    /// A replaced cluster Ready again for the grace period: chosen again.
    MovedBack,
    /// A replacement given up for the cluster it replaced, which moved back.
    GivenUp,
    /// Dropped: over `maxClusters` or a spread limit (a stricter policy).
    Dropped,
    /// No longer a candidate (left, or no longer selected).
    NoLongerCandidate,
    /// Newly chosen into an existing choice.
    Chosen,
    /// Not Ready past the grace period, and no Ready candidate can take its place: kept.
    NoReplacement,
}

impl ChangeKind {
    /// The reason of the Event that reports it.
    pub const fn event_reason(self) -> &'static str {
        match self {
            Self::FailedOver => "FailedOver",
            Self::MovedBack => "MovedBack",
            Self::NoReplacement => "NoReplacement",
            Self::GivenUp | Self::Dropped | Self::NoLongerCandidate | Self::Chosen => "Replaced",
        }
    }

    /// Whether its Event is a Warning (something failed) rather than Normal.
    pub const fn is_warning(self) -> bool {
        matches!(self, Self::FailedOver | Self::NoReplacement)
    }
}

/// One change of the choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub kind: ChangeKind,
    pub cluster: String,
    /// What changed and why, one sentence starting with the cluster's name.
    pub message: String,
}

impl Change {
    fn new(kind: ChangeKind, cluster: &str, what: impl std::fmt::Display) -> Self {
        Self {
            kind,
            cluster: cluster.to_owned(),
            message: format!("{cluster}: {what}"),
        }
    }
}

/// What [`choose`] decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Choice {
    pub clusters: BTreeMap<String, Chosen>,
    /// Every candidate, sorted by name (whether chosen or not).
    pub candidates: Vec<String>,
    pub failed_over: Vec<FailedOver>,
    /// What changed and why (for Events).
    pub changes: Vec<Change>,
    /// Constraints that could not be met (`minPerValue` without enough Ready candidates).
    pub unsatisfied: Vec<String>,
    /// Seconds until a grace period ends that may change the choice: decide again then.
    pub recheck_in: Option<i64>,
}

struct Ranked<'a> {
    cluster: &'a ClusterState,
    score: i64,
    hash: u32,
}

struct Context<'a> {
    spec: &'a PlacementPolicySpec,
    grace: Option<i64>,
    now: i64,
}

impl Context<'_> {
    fn unready_for(&self, c: &ClusterState) -> i64 {
        if c.ready {
            0
        } else {
            self.now - c.since.unwrap_or(i64::MIN / 2)
        }
    }

    fn ready_for(&self, c: &ClusterState) -> i64 {
        if c.ready {
            self.now - c.since.unwrap_or(i64::MIN / 2)
        } else {
            -1
        }
    }

    /// A chosen cluster may stay: Ready, or unready for less than the grace period (or no
    /// failover at all).
    fn keepable(&self, c: &ClusterState) -> bool {
        match self.grace {
            None => true,
            Some(grace) => c.ready || self.unready_for(c) < grace,
        }
    }

    fn values(&self, c: &ClusterState) -> Vec<Option<String>> {
        self.spec
            .spread
            .iter()
            .map(|s| c.labels.get(&s.topology_key).cloned())
            .collect()
    }
}

/// Tracks the chosen set and the per-spread-value counts.
struct Picks<'a> {
    ctx: &'a Context<'a>,
    chosen: BTreeMap<String, Chosen>,
    counts: Vec<BTreeMap<String, u32>>,
}

impl<'a> Picks<'a> {
    fn new(ctx: &'a Context<'a>) -> Self {
        Self {
            ctx,
            chosen: BTreeMap::new(),
            counts: vec![BTreeMap::new(); ctx.spec.spread.len()],
        }
    }

    fn full(&self) -> bool {
        self.ctx
            .spec
            .max_clusters
            .is_some_and(|max| self.chosen.len() >= max as usize)
    }

    fn fits(&self, c: &ClusterState) -> bool {
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
    fn remove(&mut self, c: &ClusterState) -> Chosen {
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

    fn add(&mut self, c: &ClusterState, reason: Reason, message: String) {
        for (i, value) in self.ctx.values(c).into_iter().enumerate() {
            if let Some(value) = value {
                *self.counts[i].entry(value).or_insert(0) += 1;
            }
        }
        self.chosen
            .insert(c.name.clone(), Chosen { reason, message });
    }
}

fn rank<'a>(
    spec: &PlacementPolicySpec,
    key: &str,
    candidates: Vec<&'a ClusterState>,
) -> Result<Vec<Ranked<'a>>> {
    let selectors = spec
        .preferences
        .iter()
        .map(|p| {
            Ok((
                i64::from(p.weight),
                Selector::new(Some(&p.cluster_selector))?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut ranked: Vec<Ranked<'a>> = candidates
        .into_iter()
        .map(|cluster| Ranked {
            cluster,
            score: selectors
                .iter()
                .filter(|(_, s)| s.matches(&cluster.labels))
                .map(|(w, _)| w)
                .sum(),
            hash: fnv1_32(key.as_bytes(), cluster.name.as_bytes()),
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.score
            .cmp(&a.score)
            .then(a.hash.cmp(&b.hash))
            .then(a.cluster.name.cmp(&b.cluster.name))
    });
    Ok(ranked)
}

fn candidates<'a>(
    spec: &PlacementPolicySpec,
    clusters: &'a [ClusterState],
) -> Result<Vec<&'a ClusterState>> {
    let selector = match &spec.cluster_selector {
        Some(selector) => Some(Selector::new(Some(selector))?),
        None => None,
    };
    Ok(clusters
        .iter()
        .filter(|c| selector.as_ref().is_none_or(|s| s.matches(&c.labels)))
        .filter(|c| {
            spec.spread
                .iter()
                .all(|s| c.labels.contains_key(&s.topology_key))
        })
        .collect())
}

/// Chooses the clusters for the object `key` (`namespace/name`). Errors only when a selector
/// is invalid.
pub fn choose(
    spec: &PlacementPolicySpec,
    key: &str,
    clusters: &[ClusterState],
    previous: &Previous,
    now: i64,
) -> Result<Choice> {
    let ctx = Context {
        spec,
        grace: spec.failover.as_ref().map(|f| {
            i64::from(
                f.grace_period_seconds
                    .unwrap_or(DEFAULT_FAILOVER_GRACE_SECONDS),
            )
        }),
        now,
    };
    let ranked = rank(spec, key, candidates(spec, clusters)?)?;
    let by_name: BTreeMap<&str, &ClusterState> = ranked
        .iter()
        .map(|r| (r.cluster.name.as_str(), r.cluster))
        .collect();
    let mut choice = Choice {
        candidates: by_name.keys().map(|name| (*name).to_owned()).collect(),
        ..Choice::default()
    };
    let mut picks = Picks::new(&ctx);

    let (mut failed_over, returning) = sort_failed_over(&ctx, previous, &by_name);
    let recorded: BTreeSet<String> = failed_over.iter().map(|e| e.cluster.clone()).collect();
    // Returning clusters first, then those kept, by rank.
    let given_up = move_back(&ctx, &returning, &mut picks, &mut choice);
    let failing = keep_previous(
        &ctx,
        &ranked,
        previous,
        (&given_up, &failed_over),
        &mut picks,
        &mut choice,
    );
    for name in previous.clusters.keys() {
        if !by_name.contains_key(name.as_str()) {
            choice.changes.push(Change::new(
                ChangeKind::NoLongerCandidate,
                name,
                "no longer a candidate",
            ));
        }
    }

    // New picks: Ready, not a failed-over cluster still in its grace period.
    let pickable = |c: &ClusterState| c.ready && !recorded.contains(&c.name);
    let announce = !previous.clusters.is_empty();
    fill_spread_minimums(&ctx, &ranked, &pickable, &mut picks, &mut choice, announce);
    pick_new(&ranked, &pickable, announce, &mut picks, &mut choice);
    for failed in failing {
        if let Some(entry) = replace(&ctx, &ranked, failed, &pickable, &mut picks, &mut choice) {
            failed_over.push(entry);
        }
    }
    failed_over.sort_by(|a, b| a.cluster.cmp(&b.cluster));

    choice.unsatisfied = unsatisfied(&ctx, &ranked, &picks);
    choice.recheck_in = recheck_in(&ctx, &ranked, &picks.chosen, &failed_over);
    choice.clusters = picks.chosen;
    choice.failed_over = failed_over;
    Ok(choice)
}

/// The recorded failovers: those still tracked (not Ready for the grace period yet), and
/// those whose cluster is back and may take its place again (`moveBack`). A cluster back
/// without `moveBack` is an ordinary candidate again; one no longer a candidate is forgotten.
fn sort_failed_over<'c>(
    ctx: &Context<'_>,
    previous: &Previous,
    by_name: &BTreeMap<&str, &'c ClusterState>,
) -> (Vec<FailedOver>, Vec<(&'c ClusterState, FailedOver)>) {
    let move_back = ctx.spec.failover.as_ref().is_some_and(|f| f.move_back);
    let grace = ctx.grace.unwrap_or(0);
    let mut failed_over = Vec::new();
    let mut returning = Vec::new();
    for entry in &previous.failed_over {
        let Some(cluster) = by_name.get(entry.cluster.as_str()) else {
            continue;
        };
        let stable = ctx.ready_for(cluster) >= grace;
        if stable && move_back {
            returning.push((*cluster, entry.clone()));
        } else if !stable {
            failed_over.push(entry.clone());
        }
    }
    (failed_over, returning)
}

/// Returning clusters take their place back where they fit; returns the replacements given
/// up for them.
fn move_back<'r>(
    ctx: &Context<'_>,
    returning: &'r [(&ClusterState, FailedOver)],
    picks: &mut Picks<'_>,
    choice: &mut Choice,
) -> BTreeSet<&'r str> {
    let mut given_up = BTreeSet::new();
    for (cluster, entry) in returning {
        if picks.fits(cluster) {
            let message = match &entry.replaced_by {
                Some(r) => format!("Ready again for {}s; replaces {r}", ctx.ready_for(cluster)),
                None => format!("Ready again for {}s", ctx.ready_for(cluster)),
            };
            choice.changes.push(Change::new(
                ChangeKind::MovedBack,
                &cluster.name,
                format_args!("moved back ({message})"),
            ));
            picks.add(cluster, Reason::MovedBack, message);
            given_up.extend(entry.replaced_by.as_deref());
        }
    }
    given_up
}

/// The previous choice, by rank, as far as it still fits: chosen clusters unready past the
/// grace period hold their place until the search for replacements (returned): a failure
/// alone never makes the choice smaller.
fn keep_previous<'r, 'c>(
    ctx: &Context<'_>,
    ranked: &'r [Ranked<'c>],
    previous: &Previous,
    (given_up, failed_over): (&BTreeSet<&str>, &[FailedOver]),
    picks: &mut Picks<'_>,
    choice: &mut Choice,
) -> Vec<&'r Ranked<'c>> {
    let mut failing = Vec::new();
    for r in ranked {
        let name = r.cluster.name.as_str();
        let Some(before) = previous.clusters.get(name) else {
            continue;
        };
        if given_up.contains(name) && !picks.chosen.contains_key(name) {
            choice.changes.push(Change::new(
                ChangeKind::GivenUp,
                name,
                "given up for the cluster it replaced",
            ));
            continue;
        }
        if !picks.fits(r.cluster) {
            if !picks.chosen.contains_key(name) {
                choice.changes.push(Change::new(
                    ChangeKind::Dropped,
                    name,
                    "dropped (over maxClusters or a spread limit)",
                ));
            }
            continue;
        }
        if ctx.keepable(r.cluster) {
            // A cluster kept through a failure says so only while it lasts: healthy again, it
            // is chosen for what a fresh choice would choose it for.
            let (reason, message) = if before.reason == Reason::Kept {
                recovered(ctx, ranked, r, failed_over)
            } else {
                (before.reason, before.message.clone())
            };
            picks.add(r.cluster, reason, message);
        } else {
            picks.add(r.cluster, before.reason, before.message.clone());
            failing.push(r);
        }
    }
    failing
}

/// New picks by rank among the pickable clusters that still fit.
fn pick_new(
    ranked: &[Ranked<'_>],
    pickable: &dyn Fn(&ClusterState) -> bool,
    announce: bool,
    picks: &mut Picks<'_>,
    choice: &mut Choice,
) {
    for r in ranked {
        if !pickable(r.cluster) || !picks.fits(r.cluster) {
            continue;
        }
        let (reason, message) = if r.score > 0 {
            (Reason::Preferred, format!("preference score {}", r.score))
        } else {
            (Reason::Selected, String::new())
        };
        if announce {
            choice.changes.push(Change::new(
                ChangeKind::Chosen,
                &r.cluster.name,
                format_args!("chosen ({})", reason.as_str()),
            ));
        }
        picks.add(r.cluster, reason, message);
    }
}

/// A replacement for a chosen cluster unready past the grace period: the best Ready
/// candidate that fits in its place (one with the same value of a spread key whose minimum it
/// would leave unmet first), returned as the failover to record. None: the failing cluster
/// stays, reason Kept.
fn replace(
    ctx: &Context<'_>,
    ranked: &[Ranked<'_>],
    failed: &Ranked<'_>,
    pickable: &dyn Fn(&ClusterState) -> bool,
    picks: &mut Picks<'_>,
    choice: &mut Choice,
) -> Option<FailedOver> {
    let grace = ctx.grace.unwrap_or(0);
    let name = failed.cluster.name.as_str();
    let held = picks.remove(failed.cluster);
    let short: Vec<(&str, &String)> = ctx
        .spec
        .spread
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let min = s.min_per_value?;
            let value = failed.cluster.labels.get(&s.topology_key)?;
            (picks.counts[i].get(value).copied().unwrap_or(0) < min)
                .then_some((s.topology_key.as_str(), value))
        })
        .collect();
    let same_values = |c: &ClusterState| {
        short
            .iter()
            .all(|(key, value)| c.labels.get(*key) == Some(*value))
    };
    let usable = |r: &&Ranked<'_>| pickable(r.cluster) && picks.fits(r.cluster);
    let replacement = ranked
        .iter()
        .filter(usable)
        .find(|r| same_values(r.cluster))
        .or_else(|| ranked.iter().find(usable));
    let Some(r) = replacement else {
        let message = format!(
            "not Ready past the grace period ({grace}s); no Ready candidate can replace it"
        );
        let reported = held.reason == Reason::Kept && held.message == message;
        if !reported {
            choice.changes.push(Change::new(
                ChangeKind::NoReplacement,
                name,
                format_args!(
                    "not Ready for {}s (grace {grace}s), no Ready candidate can replace it: kept",
                    ctx.unready_for(failed.cluster)
                ),
            ));
        }
        picks.add(failed.cluster, Reason::Kept, message);
        return None;
    };
    choice.changes.push(Change::new(
        ChangeKind::FailedOver,
        name,
        format_args!(
            "not Ready for {}s (grace {grace}s): replaced by {}",
            ctx.unready_for(failed.cluster),
            r.cluster.name
        ),
    ));
    picks.add(r.cluster, Reason::Replacement, format!("replaces {name}"));
    Some(FailedOver {
        cluster: name.to_owned(),
        replaced_by: Some(r.cluster.name.clone()),
        time: ctx.now,
    })
}

/// The reason (and message) of a cluster kept through a failure (`Kept`) once it is no
/// longer failing: what it was chosen for is not remembered past `Kept`, so it is what a
/// fresh choice would say — `Replacement` while the cluster it replaced is still recorded as
/// failed over, `Spread` when it is among the first `minPerValue` of its value by rank,
/// `Preferred` with a preference score, `Selected` otherwise.
fn recovered(
    ctx: &Context<'_>,
    ranked: &[Ranked<'_>],
    r: &Ranked<'_>,
    failed_over: &[FailedOver],
) -> (Reason, String) {
    let name = r.cluster.name.as_str();
    if let Some(entry) = failed_over
        .iter()
        .find(|f| f.replaced_by.as_deref() == Some(name))
    {
        return (Reason::Replacement, format!("replaces {}", entry.cluster));
    }
    for spread in &ctx.spec.spread {
        let Some(min) = spread.min_per_value.filter(|m| *m > 0) else {
            continue;
        };
        let Some(value) = r.cluster.labels.get(&spread.topology_key) else {
            continue;
        };
        let ahead = ranked
            .iter()
            .filter(|o| o.cluster.labels.get(&spread.topology_key) == Some(value))
            .take_while(|o| o.cluster.name != name)
            .count();
        if ahead < min as usize {
            let message = format!("{}={value} needs {min}", spread.topology_key);
            return (Reason::Spread, message);
        }
    }
    if r.score > 0 {
        (Reason::Preferred, format!("preference score {}", r.score))
    } else {
        (Reason::Selected, String::new())
    }
}

fn fill_spread_minimums(
    ctx: &Context<'_>,
    ranked: &[Ranked<'_>],
    pickable: &dyn Fn(&ClusterState) -> bool,
    picks: &mut Picks<'_>,
    choice: &mut Choice,
    announce: bool,
) {
    for (i, spread) in ctx.spec.spread.iter().enumerate() {
        let Some(min) = spread.min_per_value.filter(|m| *m > 0) else {
            continue;
        };
        let values: BTreeSet<&String> = ranked
            .iter()
            .filter_map(|r| r.cluster.labels.get(&spread.topology_key))
            .collect();
        for value in values {
            for r in ranked {
                if picks.counts[i].get(value).copied().unwrap_or(0) >= min {
                    break;
                }
                if r.cluster.labels.get(&spread.topology_key) == Some(value)
                    && pickable(r.cluster)
                    && picks.fits(r.cluster)
                {
                    if announce {
                        choice.changes.push(Change::new(
                            ChangeKind::Chosen,
                            &r.cluster.name,
                            format_args!("chosen ({})", Reason::Spread.as_str()),
                        ));
                    }
                    let message = format!("{}={value} needs {min}", spread.topology_key);
                    picks.add(r.cluster, Reason::Spread, message);
                }
            }
        }
    }
}

/// The spread minimums the choice does not meet, per value among the candidates.
fn unsatisfied(ctx: &Context<'_>, ranked: &[Ranked<'_>], picks: &Picks<'_>) -> Vec<String> {
    let mut unmet = Vec::new();
    for (i, spread) in ctx.spec.spread.iter().enumerate() {
        let Some(min) = spread.min_per_value.filter(|m| *m > 0) else {
            continue;
        };
        let values: BTreeSet<&String> = ranked
            .iter()
            .filter_map(|r| r.cluster.labels.get(&spread.topology_key))
            .collect();
        for value in values {
            let have = picks.counts[i].get(value).copied().unwrap_or(0);
            if have < min {
                unmet.push(format!(
                    "{}={value}: {have} of at least {min} clusters chosen",
                    spread.topology_key
                ));
            }
        }
    }
    unmet
}

fn recheck_in(
    ctx: &Context<'_>,
    ranked: &[Ranked<'_>],
    chosen: &BTreeMap<String, Chosen>,
    failed_over: &[FailedOver],
) -> Option<i64> {
    let grace = ctx.grace?;
    let mut soonest: Option<i64> = None;
    let mut consider = |wait: i64| {
        if wait > 0 {
            soonest = Some(soonest.map_or(wait, |s| s.min(wait)));
        }
    };
    for r in ranked {
        if chosen.contains_key(&r.cluster.name) && !r.cluster.ready {
            consider(grace - ctx.unready_for(r.cluster) + 1);
        }
        // A failed-over cluster Ready again: it moves back (or, without moveBack, its record
        // is dropped) once stable.
        if failed_over.iter().any(|f| f.cluster == r.cluster.name) && r.cluster.ready {
            consider(grace - ctx.ready_for(r.cluster) + 1);
        }
    }
    soonest
}

#[cfg(test)]
mod tests;
