//! Filling the choice (rules 3 to 5 of the module doc): the previous choice kept, spread
//! minimums, new picks by rank; and what the choice leaves unmet or waits for.

use std::collections::{BTreeMap, BTreeSet};

use super::failover::recovered;
use super::picks::{Context, Picks, Ranked};
use super::{
    Change, ChangeKind, Choice, Chosen, ClusterState, FailedOver, Previous, Reason, by_score,
};

/// The previous choice, by rank, as far as it still fits: chosen clusters unready past the
/// grace period hold their place until the search for replacements (returned): a failure
/// alone never makes the choice smaller.
pub(super) fn keep_previous<'r, 'c>(
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
pub(super) fn pick_new(
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
        let (reason, message) = by_score(r);
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

/// Each spread value's `minPerValue` first, by rank among the pickable clusters that fit.
pub(super) fn fill_spread_minimums(
    ctx: &Context<'_>,
    ranked: &[Ranked<'_>],
    pickable: &dyn Fn(&ClusterState) -> bool,
    picks: &mut Picks<'_>,
    choice: &mut Choice,
    announce: bool,
) {
    for (i, spread, min, value) in ctx.spread_minimums(ranked) {
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

/// The spread minimums the choice does not meet, per value among the candidates.
pub(super) fn unsatisfied(
    ctx: &Context<'_>,
    ranked: &[Ranked<'_>],
    picks: &Picks<'_>,
) -> Vec<String> {
    let mut unmet = Vec::new();
    for (i, spread, min, value) in ctx.spread_minimums(ranked) {
        let have = picks.counts[i].get(value).copied().unwrap_or(0);
        if have < min {
            unmet.push(format!(
                "{}={value}: {have} of at least {min} clusters chosen",
                spread.topology_key
            ));
        }
    }
    unmet
}

/// Seconds until a grace period ends that may change the choice.
pub(super) fn recheck_in(
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
