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

mod failover;
mod fill;
mod picks;

use failover::{move_back, replace, sort_failed_over};
use fill::{fill_spread_minimums, keep_previous, pick_new, recheck_in, unsatisfied};
use picks::{Context, Picks, Ranked};

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

/// What a cluster chosen by rank alone is chosen for: `Preferred` with its preference score,
/// `Selected` without one.
fn by_score(r: &Ranked<'_>) -> (Reason, String) {
    if r.score > 0 {
        (Reason::Preferred, format!("preference score {}", r.score))
    } else {
        (Reason::Selected, String::new())
    }
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

#[cfg(test)]
mod tests;
