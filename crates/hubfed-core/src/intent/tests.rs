use std::collections::BTreeMap;

use hubfed_api::scheduling::{
    Failover, PlacementPolicySpec, SpreadConstraint, WeightedClusterPreference,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use super::*;
use crate::test_support;

const NOW: i64 = 1_800_000_000;
const KEY: &str = "shop/web";

fn cluster(name: &str, labels: &[(&str, &str)]) -> ClusterState {
    ClusterState {
        name: name.to_owned(),
        labels: test_support::labels(labels),
        ready: true,
        since: None,
    }
}

fn unready(mut c: ClusterState, seconds: i64) -> ClusterState {
    c.ready = false;
    c.since = Some(NOW - seconds);
    c
}

fn ready_since(mut c: ClusterState, seconds: i64) -> ClusterState {
    c.ready = true;
    c.since = Some(NOW - seconds);
    c
}

fn selector(key: &str, value: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([(key.to_owned(), value.to_owned())])),
        ..LabelSelector::default()
    }
}

fn policy() -> PlacementPolicySpec {
    PlacementPolicySpec {
        target_kind: "FederatedDeployment".into(),
        ..PlacementPolicySpec::default()
    }
}

fn with_max(max: u32) -> PlacementPolicySpec {
    PlacementPolicySpec {
        max_clusters: Some(max),
        ..policy()
    }
}

fn failover(mut spec: PlacementPolicySpec, grace: u32, move_back: bool) -> PlacementPolicySpec {
    spec.failover = Some(Failover {
        grace_period_seconds: Some(grace),
        move_back,
    });
    spec
}

fn names(choice: &Choice) -> Vec<&str> {
    choice.clusters.keys().map(String::as_str).collect()
}

fn previous_of(choice: &Choice) -> Previous {
    Previous {
        clusters: choice.clusters.clone(),
        failed_over: choice.failed_over.clone(),
    }
}

fn four() -> Vec<ClusterState> {
    ["a", "b", "c", "d"]
        .iter()
        .map(|n| cluster(n, &[]))
        .collect()
}

#[test]
fn without_limits_every_candidate_is_chosen() {
    let choice = choose(&policy(), KEY, &four(), &Previous::default(), NOW).expect("valid");
    assert_eq!(names(&choice), ["a", "b", "c", "d"]);
    assert!(
        choice
            .clusters
            .values()
            .all(|c| c.reason == Reason::Selected)
    );
    assert!(choice.changes.is_empty());
    assert_eq!(choice.recheck_in, None);
}

#[test]
fn the_selector_limits_candidates_and_absent_means_all() {
    let clusters = vec![
        cluster("a", &[("env", "prod")]),
        cluster("b", &[("env", "dev")]),
    ];
    let spec = PlacementPolicySpec {
        cluster_selector: Some(selector("env", "prod")),
        ..policy()
    };
    let choice = choose(&spec, KEY, &clusters, &Previous::default(), NOW).expect("valid");
    assert_eq!(names(&choice), ["a"]);
    assert_eq!(choice.candidates, ["a"]);
    let all = choose(&policy(), KEY, &clusters, &Previous::default(), NOW).expect("valid");
    assert_eq!(all.candidates, ["a", "b"]);
}

#[test]
fn max_clusters_picks_stably() {
    let clusters = four();
    let first = choose(&with_max(2), KEY, &clusters, &Previous::default(), NOW).expect("valid");
    assert_eq!(first.clusters.len(), 2);
    // Same inputs in another order: the same choice.
    let mut reversed = clusters.clone();
    reversed.reverse();
    let again = choose(&with_max(2), KEY, &reversed, &Previous::default(), NOW).expect("valid");
    assert_eq!(names(&again), names(&first));
    // Another object spreads differently somewhere among objects (hash of the key).
    let differs = (0..20).any(|i| {
        let other = choose(
            &with_max(2),
            &format!("shop/o{i}"),
            &clusters,
            &Previous::default(),
            NOW,
        )
        .expect("valid");
        names(&other) != names(&first)
    });
    assert!(differs, "every object got the same two clusters");
    // A cluster joining that would rank first does not reshuffle a choice made before.
    let previous = previous_of(&first);
    for newcomer in ["e", "f", "g", "h", "i"] {
        let mut more = clusters.clone();
        more.push(cluster(newcomer, &[]));
        let after = choose(&with_max(2), KEY, &more, &previous, NOW).expect("valid");
        assert_eq!(names(&after), names(&first), "{newcomer} joined");
        assert!(after.changes.is_empty(), "{:?}", after.changes);
        assert!(
            after
                .clusters
                .values()
                .all(|c| c.reason == first.clusters[&c_name(&after, c)].reason)
        );
    }
}

fn c_name(choice: &Choice, chosen: &Chosen) -> String {
    choice
        .clusters
        .iter()
        .find(|(_, c)| *c == chosen)
        .map(|(n, _)| n.clone())
        .unwrap_or_default()
}

#[test]
fn preferences_rank_by_summed_weight() {
    let clusters = vec![
        cluster("a", &[("tier", "bronze")]),
        cluster("b", &[("tier", "gold"), ("ssd", "yes")]),
        cluster("c", &[("tier", "gold")]),
        cluster("d", &[("ssd", "yes")]),
    ];
    let spec = PlacementPolicySpec {
        max_clusters: Some(2),
        preferences: vec![
            WeightedClusterPreference {
                weight: 50,
                cluster_selector: selector("tier", "gold"),
            },
            WeightedClusterPreference {
                weight: 30,
                cluster_selector: selector("ssd", "yes"),
            },
        ],
        ..policy()
    };
    let choice = choose(&spec, KEY, &clusters, &Previous::default(), NOW).expect("valid");
    assert_eq!(names(&choice), ["b", "c"]);
    assert_eq!(choice.clusters["b"].reason, Reason::Preferred);
    assert_eq!(choice.clusters["b"].message, "preference score 80");
}

fn regions() -> Vec<ClusterState> {
    vec![
        cluster("eu1", &[("region", "eu")]),
        cluster("eu2", &[("region", "eu")]),
        cluster("eu3", &[("region", "eu")]),
        cluster("us1", &[("region", "us")]),
        cluster("bare", &[]),
    ]
}

fn spread(max: Option<u32>, min: Option<u32>) -> SpreadConstraint {
    SpreadConstraint {
        topology_key: "region".into(),
        max_per_value: max,
        min_per_value: min,
    }
}

#[test]
fn spread_at_most_per_value() {
    let spec = PlacementPolicySpec {
        spread: vec![spread(Some(1), None)],
        ..policy()
    };
    let choice = choose(&spec, KEY, &regions(), &Previous::default(), NOW).expect("valid");
    // One per region; the cluster without the label is no candidate.
    assert_eq!(choice.clusters.len(), 2, "{choice:?}");
    assert!(choice.clusters.contains_key("us1"));
    assert!(!choice.clusters.contains_key("bare"));
}

#[test]
fn spread_at_least_per_value_comes_first() {
    // eu clusters are preferred, but us needs one of the two places.
    let spec = PlacementPolicySpec {
        max_clusters: Some(2),
        spread: vec![spread(None, Some(1))],
        preferences: vec![WeightedClusterPreference {
            weight: 100,
            cluster_selector: selector("region", "eu"),
        }],
        ..policy()
    };
    let choice = choose(&spec, KEY, &regions(), &Previous::default(), NOW).expect("valid");
    assert_eq!(choice.clusters.len(), 2);
    assert_eq!(choice.clusters["us1"].reason, Reason::Spread);
    assert_eq!(choice.clusters["us1"].message, "region=us needs 1");
    assert!(choice.unsatisfied.is_empty());
    // Two per value cannot be met for us: said so, the rest still chosen.
    let spec = PlacementPolicySpec {
        spread: vec![spread(None, Some(2))],
        ..policy()
    };
    let choice = choose(&spec, KEY, &regions(), &Previous::default(), NOW).expect("valid");
    assert_eq!(
        choice.unsatisfied,
        ["region=us: 1 of at least 2 clusters chosen"]
    );
    assert_eq!(names(&choice), ["eu1", "eu2", "eu3", "us1"]);
}

#[test]
fn a_stricter_policy_drops_the_lowest_ranked() {
    let all = choose(&policy(), KEY, &four(), &Previous::default(), NOW).expect("valid");
    let fresh = choose(&with_max(2), KEY, &four(), &Previous::default(), NOW).expect("valid");
    let narrowed = choose(&with_max(2), KEY, &four(), &previous_of(&all), NOW).expect("valid");
    assert_eq!(names(&narrowed), names(&fresh));
    assert_eq!(
        narrowed.changes.len(),
        2,
        "two dropped: {:?}",
        narrowed.changes
    );
}

#[test]
fn without_failover_an_unready_cluster_stays_chosen() {
    let chosen = choose(&with_max(1), KEY, &four(), &Previous::default(), NOW).expect("valid");
    let only = names(&chosen)[0].to_owned();
    let clusters: Vec<ClusterState> = four()
        .into_iter()
        .map(|c| {
            if c.name == only {
                unready(c, 86_400)
            } else {
                c
            }
        })
        .collect();
    let after = choose(&with_max(1), KEY, &clusters, &previous_of(&chosen), NOW).expect("valid");
    assert_eq!(names(&after), [only.as_str()]);
    assert_eq!(after.recheck_in, None);
}

/// Failover, the whole story: unready within grace → kept; past grace → replaced; Ready again
/// → without moveBack stays put (no flapping), with moveBack returns after the grace period.
#[test]
fn failover_replaces_then_moves_back_only_when_asked() {
    let spec = failover(with_max(1), 60, false);
    let clusters = four();
    let first = choose(&spec, KEY, &clusters, &Previous::default(), NOW).expect("valid");
    let home = names(&first)[0].to_owned();
    let with_home = |state: &dyn Fn(ClusterState) -> ClusterState| -> Vec<ClusterState> {
        four()
            .into_iter()
            .map(|c| if c.name == home { state(c) } else { c })
            .collect()
    };

    // NotReady for 30 s of a 60 s grace: kept, look again in 31 s.
    let within = choose(
        &spec,
        KEY,
        &with_home(&|c| unready(c, 30)),
        &previous_of(&first),
        NOW,
    )
    .expect("valid");
    assert_eq!(names(&within), [home.as_str()]);
    assert_eq!(within.recheck_in, Some(31));

    // NotReady for 61 s: replaced, recorded, explained.
    let moved = choose(
        &spec,
        KEY,
        &with_home(&|c| unready(c, 61)),
        &previous_of(&first),
        NOW,
    )
    .expect("valid");
    let [away] = names(&moved)[..] else {
        panic!("one cluster: {moved:?}")
    };
    assert_ne!(away, home);
    assert_eq!(moved.clusters[away].reason, Reason::Replacement);
    assert_eq!(moved.clusters[away].message, format!("replaces {home}"));
    assert_eq!(
        moved.failed_over,
        [FailedOver {
            cluster: home.clone(),
            replaced_by: Some(away.to_owned()),
            time: NOW,
        }]
    );
    assert_eq!(moved.changes[0].kind, ChangeKind::FailedOver);
    assert!(
        moved.changes[0]
            .message
            .contains("not Ready for 61s (grace 60s): replaced")
    );
    let away = away.to_owned();

    // Still down: nothing changes.
    let down = choose(
        &spec,
        KEY,
        &with_home(&|c| unready(c, 600)),
        &previous_of(&moved),
        NOW,
    )
    .expect("valid");
    assert_eq!(names(&down), [away.as_str()]);
    assert!(down.changes.is_empty(), "{:?}", down.changes);

    // Ready again for 10 s: stays away (and would even with moveBack: hysteresis).
    let back = |s: i64| with_home(&move |c| ready_since(c, s));
    for move_back in [false, true] {
        let spec = failover(with_max(1), 60, move_back);
        let early = choose(&spec, KEY, &back(10), &previous_of(&moved), NOW).expect("valid");
        assert_eq!(names(&early), [away.as_str()], "moveBack {move_back}");
        assert_eq!(early.recheck_in, Some(51));
    }
    // Ready for the grace period: without moveBack it stays away for good...
    let stay = choose(&spec, KEY, &back(61), &previous_of(&moved), NOW).expect("valid");
    assert_eq!(names(&stay), [away.as_str()]);
    assert!(stay.failed_over.is_empty());
    let later = choose(&spec, KEY, &back(6000), &previous_of(&stay), NOW).expect("valid");
    assert_eq!(names(&later), [away.as_str()]);
    // ...with moveBack it returns and gives up its replacement.
    let spec = failover(with_max(1), 60, true);
    let returned = choose(&spec, KEY, &back(61), &previous_of(&moved), NOW).expect("valid");
    assert_eq!(names(&returned), [home.as_str()]);
    assert_eq!(returned.clusters[&home].reason, Reason::MovedBack);
    assert!(returned.failed_over.is_empty());
    // Moving back is two Normal changes, the return and the replacement given up — no
    // failover (an Event reason chosen from the sentence took "…it replaced" for one).
    let kinds: Vec<(ChangeKind, &str)> = returned
        .changes
        .iter()
        .map(|c| (c.kind, c.cluster.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            (ChangeKind::MovedBack, home.as_str()),
            (ChangeKind::GivenUp, away.as_str())
        ]
    );
    assert_eq!(
        returned.changes[1].message,
        format!("{away}: given up for the cluster it replaced")
    );
    assert!(returned.changes.iter().all(|c| !c.kind.is_warning()));
    assert_eq!(ChangeKind::GivenUp.event_reason(), "Replaced");
    assert_eq!(ChangeKind::MovedBack.event_reason(), "MovedBack");
}

/// The hub cut off from every member (all unready past the grace period): nothing can replace
/// anything, so the choice stays as it is — it used to become empty, and the copies were
/// deleted when the members came back, then created again. Said once, not on every look.
#[test]
fn every_chosen_cluster_unreachable_leaves_the_choice_unchanged() {
    let spec = failover(with_max(1), 60, false);
    let clusters = vec![cluster("a", &[]), cluster("b", &[])];
    let first = choose(&spec, KEY, &clusters, &Previous::default(), NOW).expect("valid");
    let [home] = names(&first)[..] else {
        panic!("one cluster: {first:?}")
    };
    let home = home.to_owned();
    let both_down: Vec<ClusterState> = clusters.iter().cloned().map(|c| unready(c, 120)).collect();
    let after = choose(&spec, KEY, &both_down, &previous_of(&first), NOW).expect("valid");
    assert_eq!(names(&after), [home.as_str()]);
    assert_eq!(after.clusters[&home].reason, Reason::Kept);
    assert_eq!(
        after.clusters[&home].message,
        "not Ready past the grace period (60s); no Ready candidate can replace it"
    );
    assert!(after.failed_over.is_empty(), "{after:?}");
    let kinds: Vec<ChangeKind> = after.changes.iter().map(|c| c.kind).collect();
    assert_eq!(kinds, [ChangeKind::NoReplacement]);
    assert!(ChangeKind::NoReplacement.is_warning());
    // Looked at again, still down: the same choice, nothing new to say.
    let again = choose(&spec, KEY, &both_down, &previous_of(&after), NOW + 30).expect("valid");
    assert_eq!(again.clusters, after.clusters);
    assert!(again.changes.is_empty(), "{:?}", again.changes);
    // The other cluster is Ready again: now it replaces the failed one.
    let spare_back: Vec<ClusterState> = clusters
        .into_iter()
        .map(|c| if c.name == home { unready(c, 300) } else { c })
        .collect();
    let moved = choose(&spec, KEY, &spare_back, &previous_of(&again), NOW).expect("valid");
    let [away] = names(&moved)[..] else {
        panic!("one cluster: {moved:?}")
    };
    assert_ne!(away, home);
    assert_eq!(moved.clusters[away].reason, Reason::Replacement);
    assert_eq!(moved.failed_over[0].replaced_by.as_deref(), Some(away));
    // Every cluster of a larger choice unreachable: all of them stay.
    let spec = failover(policy(), 60, false);
    let all = choose(&spec, KEY, &four(), &Previous::default(), NOW).expect("valid");
    let down: Vec<ClusterState> = four().into_iter().map(|c| unready(c, 600)).collect();
    let after = choose(&spec, KEY, &down, &previous_of(&all), NOW).expect("valid");
    assert_eq!(names(&after), names(&all));
    assert_eq!(after.changes.len(), 4);
}

/// A chosen cluster unready past the grace period with no spare candidate (every candidate
/// is chosen already) stays chosen; Ready again, it is chosen for what it was chosen for.
#[test]
fn without_a_spare_a_failed_cluster_is_kept() {
    for spec in [
        failover(policy(), 60, false),
        failover(with_max(4), 60, true),
    ] {
        let first = choose(&spec, KEY, &four(), &Previous::default(), NOW).expect("valid");
        let down: Vec<ClusterState> = four()
            .into_iter()
            .map(|c| if c.name == "b" { unready(c, 90) } else { c })
            .collect();
        let kept = choose(&spec, KEY, &down, &previous_of(&first), NOW).expect("valid");
        assert_eq!(names(&kept), ["a", "b", "c", "d"]);
        assert_eq!(kept.clusters["b"].reason, Reason::Kept);
        assert!(kept.failed_over.is_empty());
        assert_eq!(kept.changes[0].kind, ChangeKind::NoReplacement);
        let up: Vec<ClusterState> = four()
            .into_iter()
            .map(|c| if c.name == "b" { ready_since(c, 5) } else { c })
            .collect();
        let back = choose(&spec, KEY, &up, &previous_of(&kept), NOW).expect("valid");
        assert_eq!(names(&back), ["a", "b", "c", "d"]);
        assert_eq!(back.clusters["b"].reason, Reason::Selected);
        assert_eq!(back.clusters["b"].message, "");
        assert_eq!(back.clusters, first.clusters);
        assert!(back.changes.is_empty(), "{:?}", back.changes);
    }
}

/// `Kept` lasts only while the cluster fails: Ready again (or failing anew but still within
/// the grace period), a kept cluster gets back the reason it was chosen for — its preference
/// score, or the spread minimum it meets — and its message.
#[test]
fn a_kept_cluster_gets_its_reason_back_when_it_recovers() {
    let kept_then_back = |spec: &PlacementPolicySpec, clusters: Vec<ClusterState>, name: &str| {
        let first = choose(spec, KEY, &clusters, &Previous::default(), NOW).expect("valid");
        let down: Vec<ClusterState> = clusters
            .iter()
            .cloned()
            .map(|c| if c.name == name { unready(c, 90) } else { c })
            .collect();
        let kept = choose(spec, KEY, &down, &previous_of(&first), NOW).expect("valid");
        assert_eq!(kept.clusters[name].reason, Reason::Kept, "{kept:?}");
        let recovered: [fn(ClusterState) -> ClusterState; 2] =
            [|c| ready_since(c, 5), |c| unready(c, 5)];
        for recover in recovered {
            let now: Vec<ClusterState> = clusters
                .iter()
                .cloned()
                .map(|c| if c.name == name { recover(c) } else { c })
                .collect();
            let after = choose(spec, KEY, &now, &previous_of(&kept), NOW).expect("valid");
            assert_eq!(after.clusters, first.clusters, "{now:?}");
            assert!(after.changes.is_empty(), "{:?}", after.changes);
        }
        first.clusters[name].clone()
    };
    // Preferred, with its score.
    let spec = failover(
        PlacementPolicySpec {
            preferences: vec![WeightedClusterPreference {
                weight: 50,
                cluster_selector: selector("tier", "gold"),
            }],
            ..policy()
        },
        60,
        false,
    );
    let clusters = vec![
        cluster("a", &[]),
        cluster("b", &[("tier", "gold")]),
        cluster("c", &[]),
    ];
    let chosen = kept_then_back(&spec, clusters, "b");
    assert_eq!(
        chosen,
        Chosen {
            reason: Reason::Preferred,
            message: "preference score 50".into()
        }
    );
    // Spread: the first of its region by rank.
    let spec = failover(
        PlacementPolicySpec {
            spread: vec![spread(None, Some(1))],
            ..policy()
        },
        60,
        false,
    );
    let first = choose(&spec, KEY, &regions(), &Previous::default(), NOW).expect("valid");
    let (spread_pick, _) = first
        .clusters
        .iter()
        .find(|(_, c)| c.reason == Reason::Spread)
        .expect("a Spread pick");
    let chosen = kept_then_back(&spec, regions(), &spread_pick.clone());
    assert_eq!(chosen.reason, Reason::Spread);
    assert!(chosen.message.ends_with(" needs 1"), "{chosen:?}");
}

/// A replacement exists whenever some Ready candidate fits in the failed cluster's place —
/// under `maxClusters`, or a spread's `maxPerValue` without it; one with the failed
/// cluster's spread value is preferred where a `minPerValue` needs it.
#[test]
fn a_spare_replaces_a_failed_cluster() {
    let regions = || {
        vec![
            cluster("eu1", &[("region", "eu")]),
            cluster("eu2", &[("region", "eu")]),
            cluster("us1", &[("region", "us")]),
            cluster("us2", &[("region", "us")]),
        ]
    };
    let down = |name: &str| -> Vec<ClusterState> {
        regions()
            .into_iter()
            .map(|c| if c.name == name { unready(c, 61) } else { c })
            .collect()
    };
    // One per region, no maxClusters.
    let spec = failover(
        PlacementPolicySpec {
            spread: vec![spread(Some(1), None)],
            ..policy()
        },
        60,
        false,
    );
    let first = choose(&spec, KEY, &regions(), &Previous::default(), NOW).expect("valid");
    let chosen_eu = names(&first)
        .into_iter()
        .find(|n| n.starts_with("eu"))
        .expect("an eu cluster")
        .to_owned();
    let other_eu = if chosen_eu == "eu1" { "eu2" } else { "eu1" };
    let after = choose(&spec, KEY, &down(&chosen_eu), &previous_of(&first), NOW).expect("valid");
    assert!(after.clusters.contains_key(other_eu), "{after:?}");
    assert_eq!(after.clusters[other_eu].reason, Reason::Replacement);
    assert_eq!(after.clusters.len(), 2);
    assert_eq!(after.changes[0].kind, ChangeKind::FailedOver);
    assert_eq!(
        after.changes[0].message,
        format!("{chosen_eu}: not Ready for 61s (grace 60s): replaced by {other_eu}")
    );
    // maxClusters 2 with at least one per region, eu preferred: the us cluster's replacement
    // is the other us cluster although eu ranks higher.
    let spec = failover(
        PlacementPolicySpec {
            max_clusters: Some(2),
            spread: vec![spread(None, Some(1))],
            preferences: vec![WeightedClusterPreference {
                weight: 100,
                cluster_selector: selector("region", "eu"),
            }],
            ..policy()
        },
        60,
        false,
    );
    let first = choose(&spec, KEY, &regions(), &Previous::default(), NOW).expect("valid");
    let chosen_us = names(&first)
        .into_iter()
        .find(|n| n.starts_with("us"))
        .expect("a us cluster")
        .to_owned();
    let other_us = if chosen_us == "us1" { "us2" } else { "us1" };
    let after = choose(&spec, KEY, &down(&chosen_us), &previous_of(&first), NOW).expect("valid");
    assert!(after.clusters.contains_key(other_us), "{after:?}");
    assert_eq!(
        after.clusters[other_us].message,
        format!("replaces {chosen_us}")
    );
    assert!(after.unsatisfied.is_empty(), "{:?}", after.unsatisfied);
}

#[test]
fn an_invalid_selector_is_an_error() {
    let spec = PlacementPolicySpec {
        cluster_selector: Some(LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "env".into(),
                operator: "Sometimes".into(),
                values: None,
            }]),
            ..LabelSelector::default()
        }),
        ..policy()
    };
    assert!(choose(&spec, KEY, &four(), &Previous::default(), NOW).is_err());
}

/// Over generated registries and policies: the choice respects every limit, picks only
/// candidates, is independent of input order, and is a fixed point (deciding again from it
/// changes nothing).
#[test]
fn properties_hold_over_generated_inputs() {
    let mut seed = 0x9e37_79b9_u64;
    let mut next = |modulo: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % modulo
    };
    for round in 0..500 {
        let count = 1 + next(8);
        let clusters: Vec<ClusterState> = (0..count)
            .map(|i| {
                let mut labels = vec![];
                let region = ["eu", "us", "ap"][usize::try_from(next(3)).unwrap_or(0)];
                if next(5) > 0 {
                    labels.push(("region", region));
                }
                if next(2) == 0 {
                    labels.push(("tier", "gold"));
                }
                let mut c = cluster(&format!("c{i}"), &labels);
                c.ready = next(4) > 0;
                c.since = Some(NOW - i64::try_from(next(200)).unwrap_or(0));
                c
            })
            .collect();
        let spec = PlacementPolicySpec {
            max_clusters: (next(2) == 0).then(|| 1 + u32::try_from(next(4)).unwrap_or(0)),
            spread: if next(2) == 0 {
                vec![spread(
                    (next(2) == 0).then_some(1 + u32::try_from(next(2)).unwrap_or(0)),
                    (next(2) == 0).then_some(1),
                )]
            } else {
                vec![]
            },
            preferences: vec![WeightedClusterPreference {
                weight: 1 + i32::try_from(next(100)).unwrap_or(0),
                cluster_selector: selector("tier", "gold"),
            }],
            failover: (next(2) == 0).then(|| Failover {
                grace_period_seconds: Some(100),
                move_back: next(2) == 0,
            }),
            ..policy()
        };
        let choice = choose(&spec, KEY, &clusters, &Previous::default(), NOW).expect("valid");
        let context = format!("round {round}: {spec:?} {clusters:?} → {choice:?}");
        if let Some(max) = spec.max_clusters {
            assert!(choice.clusters.len() <= max as usize, "{context}");
        }
        for s in &spec.spread {
            let mut per_value: BTreeMap<&str, u32> = BTreeMap::new();
            for name in choice.clusters.keys() {
                let c = clusters
                    .iter()
                    .find(|c| &c.name == name)
                    .expect("a cluster");
                let value = c
                    .labels
                    .get(&s.topology_key)
                    .expect("only labelled candidates");
                *per_value.entry(value).or_insert(0) += 1;
            }
            if let Some(max) = s.max_per_value {
                assert!(per_value.values().all(|n| *n <= max), "{context}");
            }
        }
        for name in choice.clusters.keys() {
            let c = clusters
                .iter()
                .find(|c| &c.name == name)
                .expect("a cluster");
            assert!(
                c.ready,
                "a fresh choice picks Ready clusters only: {context}"
            );
        }
        let mut reversed = clusters.clone();
        reversed.reverse();
        let again = choose(&spec, KEY, &reversed, &Previous::default(), NOW).expect("valid");
        assert_eq!(names(&again), names(&choice), "{context}");
        let fixed = choose(&spec, KEY, &clusters, &previous_of(&choice), NOW).expect("valid");
        assert_eq!(names(&fixed), names(&choice), "{context}");
        // Failures alone (readiness changes, nothing else) never make the choice smaller, a
        // new pick is Ready, and the limits hold; twice in a row.
        let mut before = choice;
        for step in 0..2 {
            let flipped: Vec<ClusterState> = clusters
                .iter()
                .map(|c| ClusterState {
                    ready: next(3) == 0,
                    since: Some(NOW - i64::try_from(next(300)).unwrap_or(0)),
                    ..c.clone()
                })
                .collect();
            let after = choose(&spec, KEY, &flipped, &previous_of(&before), NOW).expect("valid");
            let context =
                format!("round {round} step {step}: {spec:?} {flipped:?} {before:?} → {after:?}");
            assert!(after.clusters.len() >= before.clusters.len(), "{context}");
            if let Some(max) = spec.max_clusters {
                assert!(after.clusters.len() <= max as usize, "{context}");
            }
            for name in after.clusters.keys() {
                let c = flipped.iter().find(|c| &c.name == name).expect("a cluster");
                assert!(
                    c.ready || before.clusters.contains_key(name),
                    "a new pick must be Ready: {context}"
                );
            }
            before = after;
        }
    }
}
