//! Failover (rules 6 and 7 of the module doc): failovers recorded before, clusters moving
//! back, replacements for failing clusters, and what a cluster kept through a failure is
//! chosen for once it recovers.

use std::collections::{BTreeMap, BTreeSet};

use super::picks::{Context, Picks, Ranked};
use super::{Change, ChangeKind, Choice, ClusterState, FailedOver, Previous, Reason, by_score};

/// The recorded failovers: those still tracked (not Ready for the grace period yet), and
/// those whose cluster is back and may take its place again (`moveBack`). A cluster back
/// without `moveBack` is an ordinary candidate again; one no longer a candidate is forgotten.
pub(super) fn sort_failed_over<'c>(
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
pub(super) fn move_back<'r>(
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

/// A replacement for a chosen cluster unready past the grace period: the best Ready
/// candidate that fits in its place (one with the same value of a spread key whose minimum it
/// would leave unmet first), returned as the failover to record. None: the failing cluster
/// stays, reason Kept.
pub(super) fn replace(
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
pub(super) fn recovered(
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
    by_score(r)
}
