use std::collections::BTreeMap;

use hubfed_api::federated::{ClusterReference, Placement};
use hubfed_api::scheduling::{ClusterPreferences, ReplicaSchedulingPreferenceSpec};
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::test_support;

const NOW: i64 = 1_800_000_000;

fn pod(phase: &str, conditions: Vec<PodCondition>) -> Pod {
    Pod {
        status: Some(PodStatus {
            phase: Some(phase.to_owned()),
            conditions: Some(conditions),
            ..PodStatus::default()
        }),
        ..Pod::default()
    }
}

fn running() -> Pod {
    pod(
        "Running",
        vec![PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..PodCondition::default()
        }],
    )
}

fn unschedulable_since(seconds_ago: i64) -> Pod {
    pod(
        "Pending",
        vec![PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            last_transition_time: Some(Time(
                Timestamp::from_second(NOW - seconds_ago).expect("valid time"),
            )),
            ..PodCondition::default()
        }],
    )
}

/// KubeFed `TestAnalyze`, first list: 3 running, 2 unschedulable for 10 minutes, 1 just now.
#[test]
fn analyze_pods_as_kubefed() {
    let pods = [
        running(),
        running(),
        running(),
        unschedulable_since(600),
        unschedulable_since(600),
        unschedulable_since(0),
    ];
    let result = analyze_pods(&pods, NOW, UNSCHEDULABLE_THRESHOLD_SECONDS);
    assert_eq!(result.total, 6);
    assert_eq!(result.running_and_ready, 3);
    assert_eq!(result.unschedulable, 2);
    assert_eq!(result.unschedulable_now, 3);
    // KubeFed's StatusNeedsRecheck: the recent one counts after the threshold.
    assert_eq!(result.recheck_in, Some(61));
}

/// KubeFed `TestAnalyze`, second list: a pending pod without conditions is nothing.
#[test]
fn analyze_pods_other_pending_pod() {
    let result = analyze_pods(
        &[pod("Pending", vec![])],
        NOW,
        UNSCHEDULABLE_THRESHOLD_SECONDS,
    );
    assert_eq!(
        result,
        PodAnalysis {
            total: 1,
            ..PodAnalysis::default()
        }
    );
}

#[test]
fn analyze_pods_threshold_edges() {
    // Exactly at the threshold: not yet (KubeFed: LastTransitionTime+60s Before now).
    let at = analyze_pods(&[unschedulable_since(60)], NOW, 60);
    assert_eq!((at.unschedulable, at.recheck_in), (0, Some(1)));
    let past = analyze_pods(&[unschedulable_since(61)], NOW, 60);
    assert_eq!((past.unschedulable, past.recheck_in), (1, None));
    // A shorter threshold counts sooner; the earliest recheck wins.
    let two = analyze_pods(&[unschedulable_since(5), unschedulable_since(8)], NOW, 10);
    assert_eq!((two.unschedulable, two.recheck_in), (0, Some(3)));
    // A pod without status, or scheduled-but-pending, is counted in total only.
    let bare = analyze_pods(&[Pod::default()], NOW, 60);
    assert_eq!(bare.total, 1);
    assert_eq!(bare.unschedulable_now, 0);
}

#[test]
fn running_pod_with_unready_condition_counts_as_kubefed_does() {
    let mut p = running();
    if let Some(status) = p.status.as_mut() {
        status.conditions = Some(vec![PodCondition {
            type_: "Ready".into(),
            status: "False".into(),
            ..PodCondition::default()
        }]);
    }
    assert_eq!(analyze_pods(&[p], NOW, 60).running_and_ready, 1);
}

fn workload(replicas: i64, ready: i64, pods: Option<PodAnalysis>) -> MemberWorkload {
    MemberWorkload {
        replicas,
        ready_replicas: ready,
        pods,
    }
}

#[test]
fn replica_state_from_members() {
    let members = BTreeMap::from([
        // All ready: current is readyReplicas, pods not needed.
        ("a".to_owned(), workload(4, 4, None)),
        // Not all ready: running pods count, unschedulable ones lower the capacity.
        (
            "b".to_owned(),
            workload(
                6,
                2,
                Some(PodAnalysis {
                    total: 6,
                    running_and_ready: 2,
                    unschedulable: 3,
                    unschedulable_now: 4,
                    recheck_in: Some(20),
                }),
            ),
        ),
        // Not all ready, no unschedulable pods: no capacity estimate; the 2 on their way count.
        (
            "c".to_owned(),
            workload(
                3,
                1,
                Some(PodAnalysis {
                    total: 3,
                    running_and_ready: 1,
                    ..PodAnalysis::default()
                }),
            ),
        ),
        // Scaling down: 5 still running for 2 asked, the running ones count.
        (
            "d".to_owned(),
            workload(
                2,
                1,
                Some(PodAnalysis {
                    total: 5,
                    running_and_ready: 5,
                    ..PodAnalysis::default()
                }),
            ),
        ),
    ]);
    assert!(!members["a"].needs_pods());
    assert!(members["b"].needs_pods());
    let state = replica_state(&members);
    assert_eq!(
        state.current,
        BTreeMap::from([
            ("a".into(), 4),
            ("b".into(), 2),
            ("c".into(), 3),
            ("d".into(), 5)
        ])
    );
    assert_eq!(state.capacity, BTreeMap::from([("b".into(), 3)]));
    assert_eq!(state.recheck_in, Some(20));
    assert!(state.unsettled);
    let settled = replica_state(&BTreeMap::from([("a".to_owned(), workload(4, 4, None))]));
    assert!(!settled.unsettled);
    assert_eq!(settled.recheck_in, None);
}

fn rsp(
    total: i32,
    rebalance: bool,
    clusters: &[(&str, i64, i64, Option<i64>)],
) -> ReplicaSchedulingPreferenceSpec {
    test_support::replica_preference(
        total,
        rebalance,
        clusters.iter().map(|(name, weight, min, max)| {
            (
                (*name).to_owned(),
                ClusterPreferences {
                    weight: *weight,
                    min_replicas: *min,
                    max_replicas: *max,
                },
            )
        }),
    )
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn decide_spreads_by_weight() {
    let spec = rsp(
        10,
        false,
        &[("member1", 3, 0, None), ("member2", 2, 0, None)],
    );
    let result = decide(
        &spec,
        &names(&["member1", "member2"]),
        &ReplicaState::default(),
        "ns/web",
    );
    assert_eq!(
        result,
        BTreeMap::from([("member1".into(), 6), ("member2".into(), 4)])
    );
    assert_eq!(describe(&result), "member1: 6, member2: 4");
}

/// A look in the middle of the rollout of 6/4 (3 of member1's 6 running, none of member2's
/// 4 yet) decides 6/4 again. Counting only running pods, as KubeFed does, member1 keeps its 3
/// and the other 7 are spread by weight again: 7/3, kept for good without `rebalance`
/// (seen in the end-to-end test `rsp_spreads_replicas_by_weight`).
#[test]
fn decide_mid_rollout_keeps_the_schedule() {
    let spec = rsp(
        10,
        false,
        &[("member1", 3, 0, None), ("member2", 2, 0, None)],
    );
    let clusters = names(&["member1", "member2"]);
    let starting = |replicas, running| {
        workload(
            replicas,
            running,
            Some(PodAnalysis {
                total: replicas,
                running_and_ready: running,
                ..PodAnalysis::default()
            }),
        )
    };
    let rollout = BTreeMap::from([
        ("member1".to_owned(), starting(6, 3)),
        ("member2".to_owned(), starting(4, 0)),
    ]);
    let six_four = BTreeMap::from([("member1".into(), 6), ("member2".into(), 4)]);
    assert_eq!(
        decide(&spec, &clusters, &replica_state(&rollout), "ns/web"),
        six_four
    );
    // KubeFed's current counts give the skew this avoids.
    let running_only = ReplicaState {
        current: BTreeMap::from([("member1".into(), 3), ("member2".into(), 0)]),
        ..ReplicaState::default()
    };
    assert_eq!(
        decide(&spec, &clusters, &running_only, "ns/web"),
        BTreeMap::from([("member1".into(), 7), ("member2".into(), 3)])
    );
}

#[test]
fn decide_without_preferences_spreads_evenly() {
    let spec = rsp(4, false, &[]);
    let result = decide(
        &spec,
        &names(&["a", "b"]),
        &ReplicaState::default(),
        "ns/web",
    );
    assert_eq!(result, BTreeMap::from([("a".into(), 2), ("b".into(), 2)]));
}

/// A full cluster: with `rebalance`, what does not fit moves to the other cluster, and the
/// full one keeps its capacity plus an overflow of what might fit after all.
#[test]
fn decide_moves_unschedulable_replicas_when_rebalancing() {
    let spec = rsp(
        10,
        true,
        &[("member1", 3, 0, None), ("member2", 2, 0, None)],
    );
    let members = BTreeMap::from([
        (
            "member1".to_owned(),
            workload(
                6,
                2,
                Some(PodAnalysis {
                    total: 6,
                    running_and_ready: 2,
                    unschedulable: 4,
                    unschedulable_now: 4,
                    recheck_in: None,
                }),
            ),
        ),
        ("member2".to_owned(), workload(4, 4, None)),
    ]);
    let state = replica_state(&members);
    let result = decide(&spec, &names(&["member1", "member2"]), &state, "ns/web");
    // member1 can hold 2 (6 − 4 unschedulable): the 4 that did not fit go to member2, and
    // member1 keeps them as overflow in case they fit after all — KubeFed's outcome.
    assert_eq!(
        result,
        BTreeMap::from([("member1".into(), 6), ("member2".into(), 8)])
    );
}

/// A cluster that runs the workload but is no longer a candidate gets 0 (KubeFed `schedule`).
#[test]
fn decide_zeroes_clusters_that_are_no_longer_candidates() {
    let spec = rsp(4, false, &[("a", 1, 0, None)]);
    let state = replica_state(&BTreeMap::from([("b".to_owned(), workload(2, 2, None))]));
    let result = decide(&spec, &names(&["a", "b"]), &state, "ns/web");
    assert_eq!(result, BTreeMap::from([("a".into(), 4), ("b".into(), 0)]));
}

fn cluster(name: &str, ready: bool, labels: &[(&str, &str)]) -> ClusterInfo {
    ClusterInfo {
        ready,
        ..test_support::cluster(name, labels)
    }
}

fn selector(key: &str, value: &str) -> Placement {
    Placement {
        clusters: Some(vec![ClusterReference {
            name: "ignored".into(),
        }]),
        cluster_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(key.to_owned(), value.to_owned())])),
            ..LabelSelector::default()
        }),
    }
}

#[test]
fn candidates_are_ready_clusters() {
    let clusters = [
        cluster("a", true, &[]),
        cluster("b", false, &[]),
        cluster("c", true, &[]),
    ];
    let spec = rsp(1, false, &[]);
    let got = candidate_clusters(
        &spec,
        None,
        NamespaceFederation::NotFederated,
        ControlPlaneScope::Cluster,
        &clusters,
    )
    .expect("valid");
    assert_eq!(got, names(&["a", "c"]));
}

#[test]
fn candidates_intersect_with_the_cluster_selector_only() {
    let clusters = [
        cluster("a", true, &[("env", "prod"), ("zone", "x")]),
        cluster("b", true, &[("env", "prod"), ("zone", "y")]),
        cluster("c", true, &[("env", "dev"), ("zone", "x")]),
        cluster("d", false, &[("env", "prod"), ("zone", "x")]),
    ];
    let mut spec = rsp(1, false, &[]);
    spec.intersect_with_cluster_selector = true;
    let own = selector("env", "prod");
    // The clusters list ("ignored") does not count: the selector does.
    let got = candidate_clusters(
        &spec,
        Some(&own),
        NamespaceFederation::NotApplicable,
        ControlPlaneScope::Cluster,
        &clusters,
    )
    .expect("valid");
    assert_eq!(got, names(&["a", "b"]));
    // The FederatedNamespace's selector narrows further.
    let namespace = selector("zone", "x");
    let got = candidate_clusters(
        &spec,
        Some(&own),
        NamespaceFederation::Federated(Some(&namespace)),
        ControlPlaneScope::Cluster,
        &clusters,
    )
    .expect("valid");
    assert_eq!(got, names(&["a"]));
    // No selector on the object: no cluster (KubeFed: absent selector selects nothing).
    let got = candidate_clusters(
        &spec,
        None,
        NamespaceFederation::NotApplicable,
        ControlPlaneScope::Cluster,
        &clusters,
    )
    .expect("valid");
    assert!(got.is_empty());
}

fn planned(spec: &ReplicaSchedulingPreferenceSpec, clusters: &[&str]) -> BTreeMap<String, i64> {
    decide(
        spec,
        &names(clusters),
        &ReplicaState::default(),
        "test-ns/test-deployment",
    )
}

fn counts(list: &[(&str, i64)]) -> BTreeMap<String, i64> {
    list.iter().map(|(c, n)| ((*c).to_owned(), *n)).collect()
}

/// The examples of KubeFed's user guide (clusters A, B and C), with the layouts it states.
#[test]
fn kubefed_user_guide_examples() {
    let abc = ["A", "B", "C"];
    // "Distribute total replicas evenly": A, B and C get 3 replicas each.
    assert_eq!(
        planned(&rsp(9, false, &[]), &abc),
        counts(&[("A", 3), ("B", 3), ("C", 3)])
    );
    assert_eq!(
        planned(&rsp(9, false, &[("*", 1, 0, None)]), &abc),
        counts(&[("A", 3), ("B", 3), ("C", 3)])
    );
    // "Weighted proportions": A gets 3 and B gets 6; C none (missing weight is 0).
    assert_eq!(
        planned(
            &rsp(9, false, &[("A", 1, 0, None), ("B", 2, 0, None)]),
            &abc
        ),
        counts(&[("A", 3), ("B", 6), ("C", 0)])
    );
    // "Also enforcing replica limits": A gets 4 and B gets 5.
    let limits = rsp(9, false, &[("A", 1, 4, Some(6)), ("B", 2, 4, Some(8))]);
    assert_eq!(
        planned(&limits, &abc),
        counts(&[("A", 4), ("B", 5), ("C", 0)])
    );
    // "Not more than 20 in C": A=16 B=17 C=17; B offline: A=30 C=20; A and B offline: C=20.
    let capped = rsp(50, false, &[("*", 1, 0, None), ("C", 1, 0, Some(20))]);
    let all = planned(&capped, &abc);
    assert_eq!(all.values().sum::<i64>(), 50);
    let mut layout: Vec<i64> = all.values().copied().collect();
    layout.sort_unstable();
    // Which of the three gets 16 depends on the hash of the names (KubeFed's tie-break).
    assert_eq!(layout, vec![16, 17, 17], "{all:?}");
    assert!(all["C"] <= 20);
    assert_eq!(
        planned(&capped, &["A", "C"]),
        counts(&[("A", 30), ("C", 20)])
    );
    assert_eq!(planned(&capped, &["C"]), counts(&[("C", 20)]));
}

/// The e2e's full member: 9 of 10 asked of member1, whose node holds 8.
#[test]
fn full_member_with_rebalance_gives_the_rest_to_the_other() {
    let spec = rsp(
        10,
        true,
        &[("member1", 9, 0, None), ("member2", 1, 0, None)],
    );
    let clusters = names(&["member1", "member2"]);
    let first = decide(&spec, &clusters, &ReplicaState::default(), "ns/heavy");
    assert_eq!(first, counts(&[("member1", 9), ("member2", 1)]));
    let members = BTreeMap::from([
        (
            "member1".to_owned(),
            workload(
                9,
                8,
                Some(PodAnalysis {
                    total: 9,
                    running_and_ready: 8,
                    unschedulable: 1,
                    unschedulable_now: 1,
                    recheck_in: None,
                }),
            ),
        ),
        ("member2".to_owned(), workload(1, 1, None)),
    ]);
    let state = replica_state(&members);
    let second = decide(&spec, &clusters, &state, "ns/heavy");
    assert_eq!(second, counts(&[("member1", 9), ("member2", 2)]));
    // Stable: the same observation again decides the same (member1 still 8 of 9 ready).
    let members = BTreeMap::from([
        ("member1".to_owned(), members["member1"].clone()),
        ("member2".to_owned(), workload(2, 2, None)),
    ]);
    assert_eq!(
        decide(&spec, &clusters, &replica_state(&members), "ns/heavy"),
        second
    );
}

#[test]
fn negative_numbers_and_other_kinds_are_refused_with_every_field_named() {
    assert_eq!(validate(&rsp(10, false, &[("a", 2, 0, Some(5))])), Ok(()));
    // Large numbers, and a minimum above the maximum (the minimum wins, as in KubeFed).
    assert_eq!(
        validate(&rsp(i32::MAX, true, &[("a", i64::MAX, 9, Some(3))])),
        Ok(())
    );
    assert_eq!(validate(&rsp(0, false, &[])), Ok(()));
    let refusal = validate(&rsp(
        -1,
        false,
        &[("a", -2, -3, Some(-4)), ("*", 1, 0, None)],
    ))
    .expect_err("refused");
    assert_eq!(refusal.reason, INVALID_PREFERENCE);
    assert_eq!(
        refusal.message,
        "not scheduled: spec.totalReplicas: -1 is negative; \
         spec.clusters[\"a\"].minReplicas: -3 is negative; \
         spec.clusters[\"a\"].maxReplicas: -4 is negative; \
         spec.clusters[\"a\"].weight: -2 is negative"
    );
    let mut other = rsp(1, false, &[]);
    other.target_kind = "FederatedStatefulSet".into();
    let refusal = validate(&other).expect_err("refused");
    assert_eq!(refusal.reason, INVALID_TARGET_KIND);
    assert_eq!(
        refusal.message,
        "spec.targetKind \"FederatedStatefulSet\" is not one of FederatedDeployment, FederatedReplicaSet"
    );
}

/// A PlacementPolicy leaves the placement to an RSP of the same name only when that RSP
/// scheduler runs, targets the same kind and is acted on.
#[test]
fn an_rsp_writes_the_placement_only_when_it_schedules_that_object() {
    let deployment = rsp(6, false, &[]);
    let kind = "FederatedDeployment";
    assert!(rsp_writes_placement(kind, Some(&deployment), true));
    // The SchedulerPreferences gate is off: no RSP scheduler.
    assert!(!rsp_writes_placement(kind, Some(&deployment), false));
    // No RSP.
    assert!(!rsp_writes_placement(kind, None, true));
    // The RSP targets another kind (a FederatedReplicaSet of the same name).
    assert!(!rsp_writes_placement(
        "FederatedReplicaSet",
        Some(&deployment),
        true
    ));
    let mut replica_set = deployment.clone();
    replica_set.target_kind = "FederatedReplicaSet".into();
    assert!(!rsp_writes_placement(kind, Some(&replica_set), true));
    // The policy targets a kind no RSP can schedule.
    let mut config_map = deployment.clone();
    config_map.target_kind = "FederatedConfigMap".into();
    assert!(!rsp_writes_placement(
        "FederatedConfigMap",
        Some(&config_map),
        true
    ));
    // The scheduler refuses the RSP.
    let negative = rsp(-1, false, &[]);
    assert!(!rsp_writes_placement(kind, Some(&negative), true));
}

fn labelled(labels: &[(&str, &str)]) -> Pod {
    let mut pod = running();
    pod.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    pod
}

/// A Deployment selected by `matchExpressions` (only or with `matchLabels`): its pods are
/// found — the selector used to be read as `matchLabels` only, an error every time.
#[test]
fn pods_are_selected_by_match_labels_and_match_expressions() {
    let selector: LabelSelector = serde_json::from_value(serde_json::json!({
        "matchExpressions": [
            {"key": "app", "operator": "In", "values": ["web", "web-canary"]},
            {"key": "debug", "operator": "DoesNotExist"},
        ],
    }))
    .expect("a selector");
    let pods = PodSelector::new(&selector).expect("valid");
    assert_eq!(pods.query(), "app in (web,web-canary),!debug");
    assert!(pods.matches(&labelled(&[("app", "web")])));
    assert!(pods.matches(&labelled(&[("app", "web-canary"), ("tier", "front")])));
    assert!(!pods.matches(&labelled(&[("app", "web"), ("debug", "1")])));
    assert!(!pods.matches(&labelled(&[("app", "db")])));
    assert!(!pods.matches(&running()));

    let both: LabelSelector = serde_json::from_value(serde_json::json!({
        "matchLabels": {"tier": "front", "app": "web"},
        "matchExpressions": [{"key": "track", "operator": "NotIn", "values": ["canary"]}],
    }))
    .expect("a selector");
    let pods = PodSelector::new(&both).expect("valid");
    assert_eq!(pods.query(), "app=web,tier=front,track notin (canary)");
    assert!(pods.matches(&labelled(&[("app", "web"), ("tier", "front")])));
    assert!(!pods.matches(&labelled(&[
        ("app", "web"),
        ("tier", "front"),
        ("track", "canary")
    ])));

    // Every operator, a prefixed key, an empty value; an empty selector lists every pod.
    let all: LabelSelector = serde_json::from_value(serde_json::json!({
        "matchExpressions": [
            {"key": "example.com/tier", "operator": "Exists"},
            {"key": "track", "operator": "NotIn", "values": ["canary", "beta"]},
            {"key": "zone", "operator": "In", "values": ["", "a"]},
            {"key": "debug", "operator": "DoesNotExist", "values": []},
        ],
    }))
    .expect("a selector");
    let pods = PodSelector::new(&all).expect("valid");
    assert_eq!(
        pods.query(),
        "example.com/tier,track notin (canary,beta),zone in (,a),!debug"
    );
    assert!(pods.matches(&labelled(&[("example.com/tier", "x"), ("zone", "")])));
    assert!(!pods.matches(&labelled(&[("example.com/tier", "x"), ("zone", "b")])));
    let empty = PodSelector::new(&LabelSelector::default()).expect("valid");
    assert_eq!(empty.query(), "");
    assert!(empty.matches(&running()));

    let invalid: LabelSelector = serde_json::from_value(serde_json::json!({
        "matchExpressions": [{"key": "app", "operator": "In"}],
    }))
    .expect("a selector");
    assert!(PodSelector::new(&invalid).is_err());
}

/// The user guide's RSP example (docs/user-guide.md, Scheduling): 6 and 4 over member1 and
/// member2; with a third cluster its minimum first, then 5, 3 and 2. A cluster back from
/// NotReady gets its share again only with `rebalance`.
#[test]
fn the_user_guide_example_gives_what_the_guide_says() {
    let mut spec = rsp(
        10,
        true,
        &[
            ("member1", 3, 0, None),
            ("member2", 2, 0, Some(8)),
            ("*", 1, 1, None),
        ],
    );
    let two = names(&["member1", "member2"]);
    let three = names(&["member1", "member2", "member3"]);
    let none = ReplicaState::default();
    assert_eq!(
        decide(&spec, &two, &none, "shop/web"),
        counts(&[("member1", 6), ("member2", 4)])
    );
    assert_eq!(
        decide(&spec, &three, &none, "shop/web"),
        counts(&[("member1", 5), ("member2", 3), ("member3", 2)])
    );
    // member2 was NotReady: member1 took all 10. Back, with rebalance: 6/4 again.
    let running = ReplicaState {
        current: counts(&[("member1", 10)]),
        ..ReplicaState::default()
    };
    assert_eq!(
        decide(&spec, &two, &running, "shop/web"),
        counts(&[("member1", 6), ("member2", 4)])
    );
    // Without rebalance the replicas stay in member1.
    spec.rebalance = false;
    assert_eq!(
        decide(&spec, &two, &running, "shop/web"),
        counts(&[("member1", 10), ("member2", 0)])
    );
}
