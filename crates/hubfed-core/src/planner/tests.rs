use super::*;
use crate::test_support::replica_preference;

/// A preference: weight, min, max.
fn pref(weight: i64, min: i64, max: Option<i64>) -> ClusterPreferences {
    ClusterPreferences {
        min_replicas: min,
        max_replicas: max,
        weight,
    }
}

fn w(weight: i64) -> ClusterPreferences {
    pref(weight, 0, None)
}

fn map(entries: &[(&str, i64)]) -> BTreeMap<String, i64> {
    entries.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

fn spec(
    prefs: &[(&str, ClusterPreferences)],
    total: i32,
    rebalance: bool,
) -> ReplicaSchedulingPreferenceSpec {
    replica_preference(
        total,
        rebalance,
        prefs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())),
    )
}

/// KubeFed's `doCheck`: no current replicas, no capacity; no overflow.
fn check(
    prefs: &[(&str, ClusterPreferences)],
    total: i32,
    clusters: &[&str],
    want: &[(&str, i64)],
) {
    let got = plan(
        &spec(prefs, total, false),
        clusters,
        &map(&[]),
        &map(&[]),
        "",
    );
    assert_eq!(got.replicas, map(want), "{prefs:?} {total} {clusters:?}");
    assert!(got.overflow.is_empty(), "{:?}", got.overflow);
}

/// KubeFed's `doCheckWithExisting`.
fn check_existing(
    prefs: &[(&str, ClusterPreferences)],
    total: i32,
    clusters: &[&str],
    existing: &[(&str, i64)],
    want: &[(&str, i64)],
) {
    let got = plan(
        &spec(prefs, total, false),
        clusters,
        &map(existing),
        &map(&[]),
        "",
    );
    assert_eq!(got.replicas, map(want), "{existing:?}");
    assert!(got.overflow.is_empty(), "{:?}", got.overflow);
}

/// KubeFed's `doCheckWithExistingAndCapacity`.
#[allow(clippy::too_many_arguments)]
fn check_capacity(
    rebalance: bool,
    prefs: &[(&str, ClusterPreferences)],
    total: i32,
    clusters: &[&str],
    existing: &[(&str, i64)],
    capacity: &[(&str, i64)],
    want: &[(&str, i64)],
    want_overflow: &[(&str, i64)],
) {
    let got = plan(
        &spec(prefs, total, rebalance),
        clusters,
        &map(existing),
        &map(capacity),
        "",
    );
    assert_eq!(got.replicas, map(want), "{prefs:?} capacity {capacity:?}");
    assert_eq!(got.overflow, map(want_overflow));
}

#[test]
fn kubefed_equal() {
    let any = [("*", w(1))];
    check(
        &any,
        50,
        &["A", "B", "C"],
        &[("A", 16), ("B", 17), ("C", 17)],
    );
    check(&any, 50, &["A", "B"], &[("A", 25), ("B", 25)]);
    check(&any, 1, &["A", "B"], &[("A", 0), ("B", 1)]);
    check(
        &any,
        1,
        &["A", "B", "C", "D"],
        &[("A", 0), ("B", 0), ("C", 0), ("D", 1)],
    );
    check(&any, 1, &["A"], &[("A", 1)]);
    check(&any, 1, &[], &[]);
}

#[test]
fn kubefed_equal_with_existing() {
    let any = [("*", w(1))];
    let ab = ["A", "B"];
    check_existing(
        &any,
        50,
        &["A", "B", "C"],
        &[("C", 30)],
        &[("A", 10), ("B", 10), ("C", 30)],
    );
    check_existing(&any, 50, &ab, &[("A", 30)], &[("A", 30), ("B", 20)]);
    for a in [0, 1, 4, 5, 6, 7] {
        check_existing(&any, 15, &ab, &[("A", a), ("B", 8)], &[("A", 7), ("B", 8)]);
    }
    check_existing(
        &any,
        500_000,
        &ab,
        &[("A", 300_000)],
        &[("A", 300_000), ("B", 200_000)],
    );
    check_existing(&any, 50, &ab, &[("A", 10)], &[("A", 25), ("B", 25)]);
    // KubeFed's TODO: should be 10:40 (kubernetes issue #31816).
    check_existing(
        &any,
        50,
        &ab,
        &[("A", 10), ("B", 70)],
        &[("A", 0), ("B", 50)],
    );
    check_existing(&any, 1, &ab, &[("A", 30)], &[("A", 1), ("B", 0)]);
    check_existing(
        &any,
        50,
        &ab,
        &[("A", 10), ("B", 20)],
        &[("A", 25), ("B", 25)],
    );
}

#[test]
fn kubefed_with_existing_and_capacity() {
    check_capacity(
        true,
        &[("*", w(1))],
        50,
        &["A", "B", "C"],
        &[],
        &[("C", 10)],
        &[("A", 20), ("B", 20), ("C", 10)],
        &[("C", 7)],
    );
    check_capacity(
        true,
        &[("A", w(10000)), ("B", w(1))],
        50,
        &["B", "C"],
        &[],
        &[("B", 10)],
        &[("B", 10), ("C", 0)],
        &[("B", 40)],
    );
    check_capacity(
        true,
        &[("A", w(1)), ("B", w(2))],
        60,
        &["A", "B", "C"],
        &[],
        &[("B", 10)],
        &[("A", 50), ("B", 10), ("C", 0)],
        &[("B", 30)],
    );
    check_capacity(
        true,
        &[
            ("A", pref(10000, 0, Some(10))),
            ("B", w(1)),
            ("C", pref(1, 0, Some(21))),
            ("D", pref(1, 0, Some(10))),
        ],
        71,
        &["A", "B", "C", "D"],
        &[],
        &[("C", 10)],
        &[("A", 10), ("B", 41), ("C", 10), ("D", 10)],
        &[("C", 11)],
    );
    check_capacity(
        false,
        &[("A", w(1)), ("B", w(1))],
        60,
        &["A", "B", "C"],
        &[],
        &[("A", 10), ("B", 10)],
        &[("A", 10), ("B", 10), ("C", 0)],
        &[("A", 20), ("B", 20)],
    );
    check_capacity(
        false,
        &[("A", w(1)), ("B", w(5))],
        60,
        &["A", "B", "C"],
        &[],
        &[("B", 10)],
        &[("A", 50), ("B", 10), ("C", 0)],
        &[],
    );
    check_capacity(
        false,
        &[("*", pref(0, 20, None))],
        50,
        &["A", "B", "C"],
        &[],
        &[("B", 10)],
        &[("A", 20), ("B", 10), ("C", 20)],
        &[],
    );
    check_capacity(
        true,
        &[("*", pref(1, 20, None))],
        60,
        &["A", "B"],
        &[],
        &[("B", 10)],
        &[("A", 50), ("B", 10)],
        &[("B", 15)],
    );
}

#[test]
fn kubefed_min() {
    let abc = ["A", "B", "C"];
    check(
        &[("*", pref(0, 2, None))],
        50,
        &abc,
        &[("A", 2), ("B", 2), ("C", 2)],
    );
    check(
        &[("*", pref(0, 20, None))],
        50,
        &abc,
        &[("A", 10), ("B", 20), ("C", 20)],
    );
    check(
        &[("*", pref(0, 20, None)), ("A", pref(1, 100, None))],
        50,
        &abc,
        &[("A", 50), ("B", 0), ("C", 0)],
    );
    check(
        &[("*", pref(1, 10, Some(12)))],
        50,
        &abc,
        &[("A", 12), ("B", 12), ("C", 12)],
    );
}

#[test]
fn kubefed_max() {
    let abc = ["A", "B", "C"];
    check(
        &[("*", pref(1, 0, Some(2)))],
        50,
        &abc,
        &[("A", 2), ("B", 2), ("C", 2)],
    );
    check(
        &[("*", pref(0, 0, Some(2)))],
        50,
        &abc,
        &[("A", 0), ("B", 0), ("C", 0)],
    );
}

#[test]
fn kubefed_weight() {
    let abc = ["A", "B", "C"];
    check(
        &[("A", w(1)), ("B", w(2))],
        60,
        &abc,
        &[("A", 20), ("B", 40), ("C", 0)],
    );
    check(
        &[("A", w(10000)), ("B", w(1))],
        50,
        &abc,
        &[("A", 50), ("B", 0), ("C", 0)],
    );
    check(
        &[("A", w(10000)), ("B", w(1))],
        50,
        &["B", "C"],
        &[("B", 50), ("C", 0)],
    );
    check(
        &[("A", pref(10000, 0, Some(10))), ("B", w(1)), ("C", w(1))],
        50,
        &abc,
        &[("A", 10), ("B", 20), ("C", 20)],
    );
    check(
        &[
            ("A", pref(10000, 0, Some(10))),
            ("B", w(1)),
            ("C", pref(1, 0, Some(10))),
        ],
        50,
        &abc,
        &[("A", 10), ("B", 30), ("C", 10)],
    );
    check(
        &[
            ("A", pref(10000, 0, Some(10))),
            ("B", w(1)),
            ("C", pref(1, 0, Some(21))),
            ("D", pref(1, 0, Some(10))),
        ],
        71,
        &["A", "B", "C", "D"],
        &[("A", 10), ("B", 30), ("C", 21), ("D", 10)],
    );
    check(
        &[
            ("A", pref(10000, 0, Some(10))),
            ("B", w(1)),
            ("C", pref(1, 0, Some(21))),
            ("D", pref(1, 0, Some(10))),
            ("E", w(1)),
        ],
        91,
        &["A", "B", "C", "D", "E"],
        &[("A", 10), ("B", 25), ("C", 21), ("D", 10), ("E", 25)],
    );
}

/// Runs `plan` on another thread and fails if it takes more than 10 s (a planner that
/// loops would otherwise hang the test run).
fn plan_within_10s(
    spec: &ReplicaSchedulingPreferenceSpec,
    clusters: &[&str],
    current: &BTreeMap<String, i64>,
    capacity: &BTreeMap<String, i64>,
) -> ReplicaPlan {
    let (spec, current, capacity) = (spec.clone(), current.clone(), capacity.clone());
    let clusters: Vec<String> = clusters.iter().map(|c| (*c).to_owned()).collect();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let clusters: Vec<&str> = clusters.iter().map(String::as_str).collect();
        let _ = tx.send(plan(&spec, &clusters, &current, &capacity, "ns/web"));
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("the planner ended within 10 s")
}

/// A negative weight used to make the remaining replicas grow back each round (the
/// planner never ended); negative numbers now count as 0 and never reach the result.
#[test]
fn negative_numbers_count_as_zero() {
    let none = map(&[]);
    let got = plan_within_10s(
        &spec(&[("a", w(2)), ("b", w(-1))], 10, false),
        &["a", "b"],
        &none,
        &none,
    );
    assert_eq!(got.replicas, map(&[("a", 10), ("b", 0)]));
    let got = plan_within_10s(
        &spec(
            &[("a", pref(1, -5, None)), ("b", pref(1, 0, Some(-3)))],
            4,
            true,
        ),
        &["a", "b"],
        &map(&[("a", -7)]),
        &map(&[("b", -2)]),
    );
    assert_eq!(got.replicas, map(&[("a", 4), ("b", 0)]));
    assert!(got.overflow.values().all(|n| *n > 0), "{got:?}");
    let got = plan_within_10s(&spec(&[("*", w(1))], -3, false), &["a", "b"], &none, &none);
    assert_eq!(got.replicas, map(&[("a", 0), ("b", 0)]));
}

/// `in_this_loop * weight` and the weight sum used to overflow (a panic in debug builds,
/// nonsense in release builds); shares are computed in 128 bits.
#[test]
fn huge_weights_do_not_overflow() {
    let none = map(&[]);
    let got = plan_within_10s(
        &spec(
            &[("a", w(i64::MAX)), ("b", w(i64::MAX)), ("c", w(1))],
            i32::MAX,
            true,
        ),
        &["a", "b", "c"],
        &none,
        &none,
    );
    assert_eq!(got.replicas.values().sum::<i64>(), i64::from(i32::MAX));
    assert!(
        got.replicas["a"].abs_diff(got.replicas["b"]) <= 1,
        "{got:?}"
    );
    let got = plan_within_10s(
        &spec(&[("a", pref(i64::MAX, i64::MAX, Some(i64::MAX)))], 7, true),
        &["a"],
        &none,
        &none,
    );
    assert_eq!(got.replicas, map(&[("a", 7)]));
}

/// Without rebalancing, KubeFed's loop uses up preallocated replicas one round at a time:
/// here a billion rounds with one replica left to place. They are taken at once, with
/// the same result.
#[test]
fn preallocated_replicas_are_used_up_in_bulk() {
    let billion = 1_000_000_000;
    let got = plan_within_10s(
        &spec(&[("*", w(1))], 2 * 1_000_000_000 + 1, false),
        &["a", "b"],
        &map(&[("a", billion), ("b", billion)]),
        &map(&[]),
    );
    let mut counts: Vec<i64> = got.replicas.values().copied().collect();
    counts.sort_unstable();
    assert_eq!(counts, [billion, billion + 1]);
    // The same rounds one by one (small numbers) give what the bulk path gives.
    for (a, b, total) in [(5, 5, 11), (7, 3, 12), (4, 9, 14), (6, 6, 13)] {
        let spec = spec(&[("*", w(1)), ("c", w(0))], total, false);
        let current = map(&[("a", a), ("b", b)]);
        let got = plan(&spec, &["a", "b", "c"], &current, &map(&[]), "ns/web");
        let slow = plan_one_round_at_a_time(&spec, &["a", "b", "c"], &current, "ns/web");
        assert_eq!(got, slow, "{a} {b} {total}");
    }
}

/// KubeFed's loop as it is (no rounds taken together, no capacity), for comparison.
fn plan_one_round_at_a_time(
    spec: &ReplicaSchedulingPreferenceSpec,
    available: &[&str],
    current: &BTreeMap<String, i64>,
    key: &str,
) -> ReplicaPlan {
    let mut prefs: Vec<(&str, &ClusterPreferences, u32)> = available
        .iter()
        .filter_map(|c| {
            let p = spec
                .clusters
                .get(*c)
                .or_else(|| spec.clusters.get(ANY_CLUSTER))?;
            Some((*c, p, fnv1_32(c.as_bytes(), key.as_bytes())))
        })
        .collect();
    prefs.sort_by(|a, b| b.1.weight.cmp(&a.1.weight).then(a.2.cmp(&b.2)));
    let mut plan: BTreeMap<String, i64> = BTreeMap::new();
    let mut remaining = i64::from(spec.total_replicas);
    for (c, p, _) in &prefs {
        let min = p.min_replicas.min(remaining);
        remaining -= min;
        plan.insert((*c).to_owned(), min);
    }
    let mut prealloc: BTreeMap<&str, i64> = BTreeMap::new();
    for (c, p, _) in prefs.iter().filter(|_| !spec.rebalance) {
        let planned = plan[*c];
        let Some(&count) = current.get(*c) else {
            continue;
        };
        if count <= planned {
            continue;
        }
        let target = p.max_replicas.map_or(count, |m| count.min(m));
        let extra = (target - planned).min(remaining).max(0);
        remaining -= extra;
        prealloc.insert(c, extra);
        plan.insert((*c).to_owned(), planned + extra);
    }
    let mut modified = true;
    while modified && remaining > 0 {
        modified = false;
        let sum: i64 = prefs.iter().map(|p| p.1.weight).sum();
        let in_loop = remaining;
        let mut next = Vec::new();
        for (c, p, h) in prefs {
            if sum <= 0 {
                break;
            }
            let start = plan[c];
            let mut extra = ((in_loop * p.weight + sum - 1) / sum).min(remaining);
            let have = prealloc.get(c).copied().unwrap_or(0);
            let used = extra.min(have);
            prealloc.insert(c, have - used);
            extra -= used;
            modified |= used > 0;
            let mut total = start + extra;
            let full = p.max_replicas.is_some_and(|m| total > m);
            if let Some(m) = p.max_replicas.filter(|_| full) {
                total = m;
            }
            remaining -= total - start;
            plan.insert(c.to_owned(), total);
            modified |= total > start;
            if !full {
                next.push((c, p, h));
            }
        }
        prefs = next;
    }
    ReplicaPlan {
        replicas: plan,
        overflow: BTreeMap::new(),
    }
}

/// Properties beyond KubeFed's cases, over many generated inputs — negative and huge
/// numbers, running replicas with and without rebalancing, capacities: the planner ends;
/// nothing is negative; the sum never exceeds the total and equals it whenever a cluster
/// can take any number; no cluster above its maximum or capacity, none below its
/// minimum (when the total allows); without rebalancing, running replicas stay where they
/// are when the total allows; and the result does not depend on the order the clusters
/// are listed in.
#[test]
fn properties_hold_over_generated_inputs() {
    let names = ["a", "b", "c", "d", "e"];
    let mut seed = 0x2545_f491_u64;
    let mut next = |modulo: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % modulo
    };
    let signed = |value: u64| i64::try_from(value).unwrap_or(0);
    for round in 0..3000 {
        let count = 1 + usize::try_from(next(5)).unwrap_or(0);
        let clusters: Vec<&str> = names[..count].to_vec();
        let huge = next(10) == 0;
        let mut prefs = Vec::new();
        for name in &clusters {
            let weight = match next(8) {
                0 => -1 - signed(next(3)),
                1 if huge => i64::MAX - signed(next(3)),
                n => signed(n % 4),
            };
            let min = signed(next(4)) - 1;
            let max = match next(4) {
                0 => Some(min.max(0) + signed(next(6))),
                1 if min <= 0 => Some(-signed(next(3))),
                _ => None,
            };
            prefs.push((*name, pref(weight, min, max)));
        }
        let total = match next(12) {
            0 => -1 - i32::try_from(next(5)).unwrap_or(0),
            1 if huge => i32::MAX - i32::try_from(next(3)).unwrap_or(0),
            _ => i32::try_from(next(40)).unwrap_or(0),
        };
        let rebalance = next(2) == 0;
        let mut current = BTreeMap::new();
        let mut capacity = BTreeMap::new();
        for name in &clusters {
            match next(4) {
                0 => {}
                1 if huge => {
                    current.insert((*name).to_owned(), 1_000_000_000 + signed(next(9)));
                }
                _ => {
                    current.insert((*name).to_owned(), signed(next(20)) - 2);
                }
            }
            if next(4) == 0 {
                capacity.insert((*name).to_owned(), signed(next(15)) - 2);
            }
        }
        let spec = spec(&prefs, total, rebalance);
        let got = plan_within_10s(&spec, &clusters, &current, &capacity);
        let context = format!(
            "round {round}: {prefs:?} total {total} rebalance {rebalance} current {current:?} capacity {capacity:?}: {got:?}"
        );
        let total = i64::from(total.max(0));
        let at_least_0 = |n: Option<&i64>| n.copied().unwrap_or(0).max(0);
        let clamped = |(name, p): &(&str, ClusterPreferences)| {
            let cap = capacity.get(*name).map(|c| (*c).max(0));
            let max = p.max_replicas.map(|m| m.max(0));
            (p.weight.max(0), p.min_replicas.max(0), max, cap)
        };
        assert!(got.replicas.values().all(|n| *n >= 0), "{context}");
        assert!(got.overflow.values().all(|n| *n > 0), "{context}");
        let sum: i64 = got.replicas.values().sum();
        assert!(sum <= total, "{context}");
        let unbounded = prefs.iter().any(|entry| {
            let (weight, _, max, cap) = clamped(entry);
            weight > 0 && max.is_none() && cap.is_none()
        });
        if unbounded {
            assert_eq!(sum, total, "{context}");
        }
        let min_sum: i64 = prefs.iter().map(|e| clamped(e).1).sum();
        let kept_sum: i64 = prefs
            .iter()
            .map(|entry| {
                let (_, min, max, cap) = clamped(entry);
                let min = cap.map_or(min, |c| min.min(c));
                let mut target = at_least_0(current.get(entry.0));
                target = max.map_or(target, |m| target.min(m));
                target = cap.map_or(target, |c| target.min(c));
                min.max(target)
            })
            .sum();
        for entry in &prefs {
            let (_, min, max, cap) = clamped(entry);
            let n = got.replicas[entry.0];
            if let Some(max) = max {
                assert!(n <= max, "{} above max: {context}", entry.0);
            }
            if let Some(cap) = cap {
                assert!(n <= cap, "{} above capacity: {context}", entry.0);
            }
            let min = cap.map_or(min, |c| min.min(c));
            if min_sum <= total {
                assert!(n >= min, "{} below min: {context}", entry.0);
            }
            if !rebalance && kept_sum <= total {
                let mut running = at_least_0(current.get(entry.0));
                running = max.map_or(running, |m| running.min(m));
                running = cap.map_or(running, |c| running.min(c));
                assert!(n >= running, "{} lost running replicas: {context}", entry.0);
            }
        }
        // Where KubeFed's loop ends quickly (small, non-negative numbers, no capacity), the
        // same result as KubeFed's loop taken one round at a time.
        let plain = !huge
            && total > 0
            && capacity.is_empty()
            && current.values().all(|n| *n >= 0)
            && prefs.iter().all(|(_, p)| {
                p.weight >= 0 && p.min_replicas >= 0 && p.max_replicas.is_none_or(|m| m >= 0)
            });
        if plain {
            let slow = plan_one_round_at_a_time(&spec, &clusters, &current, "ns/web");
            assert_eq!(got.replicas, slow.replicas, "not KubeFed's: {context}");
        }
        // Any order of the clusters: the same plan.
        for _ in 0..3 {
            let mut shuffled = clusters.clone();
            for i in (1..shuffled.len()).rev() {
                let j = usize::try_from(next(u64::try_from(i + 1).unwrap_or(1))).unwrap_or(0);
                shuffled.swap(i, j);
            }
            assert_eq!(
                plan_within_10s(&spec, &shuffled, &current, &capacity),
                got,
                "order-dependent ({shuffled:?}): {context}"
            );
        }
    }
}

fn overrides_of(spec: &FederatedSpec, cluster: &str) -> BTreeMap<String, serde_json::Value> {
    spec.overrides
        .iter()
        .flatten()
        .filter(|e| e.cluster_name == cluster)
        .flat_map(|e| &e.cluster_overrides)
        .map(|o| (o.path.clone(), o.value.clone().unwrap_or_default()))
        .collect()
}

fn spec_with(overrides: serde_json::Value) -> FederatedSpec {
    serde_json::from_value(serde_json::json!({"overrides": overrides})).unwrap()
}

/// KubeFed's `TestUpdateOverridesMap` cases.
#[test]
fn kubefed_update_overrides_map() {
    let existing = serde_json::json!([{"clusterName": "cluster1", "clusterOverrides": [
        {"path": "/spec/replicas", "value": 0},
        {"path": "/ultimate/answer", "value": 42},
    ]}]);
    // Retain other overrides when removing replica override for unscheduled.
    let mut spec = spec_with(existing.clone());
    update_overrides(spec.overrides.as_mut().unwrap(), &map(&[]));
    assert_eq!(
        overrides_of(&spec, "cluster1"),
        [("/ultimate/answer".to_owned(), serde_json::json!(42))].into()
    );
    // Update existing replica override.
    let mut spec = spec_with(existing);
    update_overrides(spec.overrides.as_mut().unwrap(), &map(&[("cluster1", 5)]));
    assert_eq!(
        overrides_of(&spec, "cluster1"),
        [
            ("/spec/replicas".to_owned(), serde_json::json!(5)),
            ("/ultimate/answer".to_owned(), serde_json::json!(42)),
        ]
        .into()
    );
    // Add new replica override.
    let mut spec = spec_with(
        serde_json::json!([{"clusterName": "cluster1", "clusterOverrides": [
            {"path": "/ultimate/answer", "value": 42},
        ]}]),
    );
    update_overrides(spec.overrides.as_mut().unwrap(), &map(&[("cluster1", 0)]));
    assert_eq!(
        overrides_of(&spec, "cluster1"),
        [
            ("/spec/replicas".to_owned(), serde_json::json!(0)),
            ("/ultimate/answer".to_owned(), serde_json::json!(42)),
        ]
        .into()
    );
}

/// KubeFed's user guide examples, end to end: plan, result, write-back.
#[test]
fn kubefed_user_guide_examples() {
    let clusters = ["A", "B", "C"];
    let run = |prefs: &[(&str, ClusterPreferences)], total| {
        let spec = with_default_preferences(&spec(prefs, total, false));
        let planned = plan(&spec, &clusters, &map(&[]), &map(&[]), "ns/web");
        schedule_result(&planned, &map(&[]))
    };
    assert_eq!(run(&[], 9), map(&[("A", 3), ("B", 3), ("C", 3)]));
    assert_eq!(
        run(&[("A", w(1)), ("B", w(2))], 9),
        map(&[("A", 3), ("B", 6), ("C", 0)])
    );
    assert_eq!(
        run(&[("A", pref(1, 4, Some(6))), ("B", pref(2, 4, Some(8)))], 9),
        map(&[("A", 4), ("B", 5), ("C", 0)])
    );

    let mut federated = FederatedSpec::default();
    let result = map(&[("A", 4), ("B", 5), ("C", 0)]);
    assert!(write_schedule(&mut federated, &result));
    let placed: Vec<&str> = federated
        .placement
        .as_ref()
        .unwrap()
        .clusters
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(placed, ["A", "B", "C"]);
    assert_eq!(overrides_of(&federated, "B")["/spec/replicas"], 5);
    assert_eq!(overrides_of(&federated, "C")["/spec/replicas"], 0);
    // The same result again changes nothing (KubeFed then makes no update).
    assert!(!write_schedule(&mut federated, &result));
    // A cluster dropped: placement and its replicas override go.
    assert!(write_schedule(&mut federated, &map(&[("A", 9)])));
    assert!(overrides_of(&federated, "B").is_empty());
}

#[test]
fn current_clusters_stay_in_the_result_with_overflow_added() {
    let planned = ReplicaPlan {
        replicas: map(&[("A", 5)]),
        overflow: map(&[("A", 2), ("B", 1)]),
    };
    assert_eq!(
        schedule_result(&planned, &map(&[("C", 3)])),
        map(&[("A", 7), ("B", 1), ("C", 0)])
    );
}
