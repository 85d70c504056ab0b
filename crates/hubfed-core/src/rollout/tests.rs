use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::*;
use crate::placement::ClusterInfo;
use crate::status::ClusterOutcome;
use crate::test_support::cluster;

const NOW: i64 = 1_800_000_000;

fn fleet() -> Vec<ClusterInfo> {
    vec![
        cluster("c1", &[("canary", "true")]),
        cluster("eu1", &[("region", "eu")]),
        cluster("eu2", &[("region", "eu")]),
        cluster("us1", &[("region", "us")]),
    ]
}

fn canary_then_eu_then_rest() -> RolloutStrategy {
    RolloutStrategy {
        stages: vec![
            Stage {
                name: "canary".into(),
                clusters: vec!["c1".into()],
                ..Stage::default()
            },
            Stage {
                name: "eu".into(),
                cluster_selector: Some(LabelSelector {
                    match_labels: Some(BTreeMap::from([("region".into(), "eu".into())])),
                    ..LabelSelector::default()
                }),
                ..Stage::default()
            },
            Stage {
                name: "rest".into(),
                ..Stage::default()
            },
        ],
        soak_seconds: 30,
        ready_deadline_seconds: Some(300),
        ..RolloutStrategy::default()
    }
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn stages_by_list_selector_and_rest() {
    let staged = batches(&canary_then_eu_then_rest(), &fleet()).expect("valid");
    assert_eq!(
        staged,
        [
            Batch {
                stage: "canary".into(),
                clusters: names(&["c1"])
            },
            Batch {
                stage: "eu".into(),
                clusters: names(&["eu1", "eu2"])
            },
            Batch {
                stage: "rest".into(),
                clusters: names(&["us1"])
            },
        ]
    );
    // Batches of one; clusters no stage takes form a last stage.
    let strategy = RolloutStrategy {
        stages: canary_then_eu_then_rest().stages[..2].to_vec(),
        max_clusters_per_batch: Some(1),
        ..RolloutStrategy::default()
    };
    let batches = batches(&strategy, &fleet()).expect("valid");
    let shape: Vec<(&str, Vec<String>)> = batches
        .iter()
        .map(|b| (b.stage.as_str(), b.clusters.clone()))
        .collect();
    assert_eq!(
        shape,
        [
            ("canary", names(&["c1"])),
            ("eu", names(&["eu1"])),
            ("eu", names(&["eu2"])),
            ("remaining", names(&["us1"])),
        ]
    );
}

#[test]
fn batches_by_percent() {
    let ten: Vec<ClusterInfo> = (0..10).map(|i| cluster(&format!("c{i:02}"), &[])).collect();
    let sizes = |strategy: &RolloutStrategy| -> Vec<usize> {
        batches(strategy, &ten)
            .expect("valid")
            .iter()
            .map(|b| b.clusters.len())
            .collect()
    };
    let all = RolloutStrategy {
        stages: vec![Stage {
            name: "all".into(),
            ..Stage::default()
        }],
        ..RolloutStrategy::default()
    };
    // 25 % of 10, rounded up: 3.
    let quarter = RolloutStrategy {
        max_percent_per_batch: Some(25),
        ..all.clone()
    };
    assert_eq!(sizes(&quarter), [3, 3, 3, 1]);
    // 1 % still moves one cluster at a time.
    let tiny = RolloutStrategy {
        max_percent_per_batch: Some(1),
        ..all.clone()
    };
    assert_eq!(sizes(&tiny), [1; 10]);
    // With a count too, the smaller batch wins.
    let both = RolloutStrategy {
        max_percent_per_batch: Some(50),
        max_clusters_per_batch: Some(2),
        ..all
    };
    assert_eq!(sizes(&both), [2, 2, 2, 2, 2]);
}

fn report(revision: &str, ready: bool) -> ClusterReport {
    ClusterReport {
        revision: Some(revision.to_owned()),
        ready,
    }
}

fn reports(list: &[(&str, &str, bool)]) -> BTreeMap<String, ClusterReport> {
    list.iter()
        .map(|(c, r, ready)| ((*c).to_owned(), report(r, *ready)))
        .collect()
}

fn completed(revision: &str) -> RolloutState {
    RolloutState {
        revision: revision.to_owned(),
        phase: Phase::Completed,
        batch: 3,
        ..RolloutState::default()
    }
}

fn allowed(decision: &Decision) -> Vec<(&str, &str)> {
    decision
        .allowed
        .iter()
        .map(|(c, r)| (c.as_str(), r.as_str()))
        .collect()
}

/// The whole good path: canary, soak, eu, soak, rest, completed; the stable revision moves.
#[test]
fn a_good_revision_goes_stage_by_stage() {
    let strategy = canary_then_eu_then_rest();
    let batches = batches(&strategy, &fleet()).expect("valid");
    let go = |state: &RolloutState, reports: &BTreeMap<String, ClusterReport>, now: i64| {
        decide(
            &strategy,
            &batches,
            "v2",
            Some(state),
            reports,
            Controls::default(),
            now,
        )
    };
    let start = go(&completed("v1"), &BTreeMap::new(), NOW);
    assert_eq!(
        allowed(&start),
        [("c1", "v2"), ("eu1", "v1"), ("eu2", "v1"), ("us1", "v1")]
    );
    assert_eq!(start.state.stable.as_deref(), Some("v1"));
    // Canary Ready: soak 30 s before eu starts.
    let ready = reports(&[("c1", "v2", true)]);
    let soaking = go(&start.state, &ready, NOW + 5);
    assert_eq!(soaking.state.batch, 0);
    // Seconds are whole: Ready at NOW + 5.9 has soaked 30 s only at NOW + 36.
    assert_eq!(soaking.recheck_in, Some(31));
    assert_eq!(go(&soaking.state, &ready, NOW + 35).state.batch, 0);
    let eu = go(&soaking.state, &ready, NOW + 36);
    assert_eq!(eu.state.batch, 1);
    assert_eq!(eu.events[0].0, "StageCompleted");
    assert_eq!(
        allowed(&eu),
        [("c1", "v2"), ("eu1", "v2"), ("eu2", "v2"), ("us1", "v1")]
    );
    let ready = reports(&[("c1", "v2", true), ("eu1", "v2", true), ("eu2", "v2", true)]);
    let rest = go(&go(&eu.state, &ready, NOW + 40).state, &ready, NOW + 71);
    assert_eq!(rest.state.batch, 2);
    let ready = reports(&[
        ("c1", "v2", true),
        ("eu1", "v2", true),
        ("eu2", "v2", true),
        ("us1", "v2", true),
    ]);
    let done = go(&go(&rest.state, &ready, NOW + 75).state, &ready, NOW + 106);
    assert_eq!(done.state.phase, Phase::Completed);
    assert!(done.events.iter().any(|(r, _)| *r == "RolloutCompleted"));
    assert!(done.allowed.values().all(|r| r == "v2"));
    // The next revision protects v2.
    let next = decide(
        &strategy,
        &batches,
        "v3",
        Some(&done.state),
        &ready,
        Controls::default(),
        NOW + 200,
    );
    assert_eq!(next.state.stable.as_deref(), Some("v2"));
    assert_eq!(next.allowed["eu1"], "v2");
    assert_eq!(next.allowed["c1"], "v3");
}

/// A bad revision: the canary never becomes Ready; past the deadline the rollout halts, the
/// rest keeps v1; a fixed revision starts over from the canary.
#[test]
fn a_bad_revision_halts_after_the_first_stage() {
    let strategy = canary_then_eu_then_rest();
    let batches = batches(&strategy, &fleet()).expect("valid");
    let start = decide(
        &strategy,
        &batches,
        "bad",
        Some(&completed("v1")),
        &BTreeMap::new(),
        Controls::default(),
        NOW,
    );
    let not_ready = reports(&[("c1", "bad", false)]);
    let waiting = decide(
        &strategy,
        &batches,
        "bad",
        Some(&start.state),
        &not_ready,
        Controls::default(),
        NOW + 100,
    );
    assert_eq!(waiting.state.phase, Phase::Progressing);
    assert_eq!(waiting.recheck_in, Some(200));
    let halted = decide(
        &strategy,
        &batches,
        "bad",
        Some(&waiting.state),
        &not_ready,
        Controls::default(),
        NOW + 300,
    );
    assert_eq!(halted.state.phase, Phase::Halted);
    assert_eq!(
        halted.state.halted.as_deref(),
        Some("c1: not Ready on bad within 300s")
    );
    assert_eq!(halted.events[0].0, "RolloutHalted");
    assert!(halted.events[0].1.contains("stage canary (c1)"));
    assert_eq!(
        allowed(&halted),
        [("c1", "bad"), ("eu1", "v1"), ("eu2", "v1"), ("us1", "v1")]
    );
    // Halted stays halted, even once Ready.
    let later = decide(
        &strategy,
        &batches,
        "bad",
        Some(&halted.state),
        &reports(&[("c1", "bad", true)]),
        Controls::default(),
        NOW + 900,
    );
    assert_eq!(later.state.phase, Phase::Halted);
    assert_eq!(later.allowed["eu1"], "v1");
    // The fix starts over at the canary; v1 is still what the rest keeps.
    let fixed = decide(
        &strategy,
        &batches,
        "fixed",
        Some(&later.state),
        &BTreeMap::new(),
        Controls::default(),
        NOW + 1000,
    );
    assert_eq!(fixed.state.phase, Phase::Progressing);
    assert_eq!(fixed.state.stable.as_deref(), Some("v1"));
    assert_eq!(
        allowed(&fixed),
        [("c1", "fixed"), ("eu1", "v1"), ("eu2", "v1"), ("us1", "v1")]
    );
}

/// A failed apply of the revision halts at once; what the reconcile could not read, or a
/// cluster that was not applied the revision, does not; and the failure belongs to its
/// revision: the fix starts clean, even before any cluster reports again.
#[test]
fn a_failed_apply_halts_at_once_and_only_its_revision() {
    let strategy = canary_then_eu_then_rest();
    let batches = batches(&strategy, &fleet()).expect("valid");
    let start = decide(
        &strategy,
        &batches,
        "v2",
        Some(&completed("v1")),
        &BTreeMap::new(),
        Controls::default(),
        NOW,
    );
    let outcomes = [
        ClusterOutcome::failed(
            "c1",
            PropagationStatus::UpdateFailed,
            "admission webhook denied",
        ),
        ClusterOutcome::failed("eu1", PropagationStatus::UpdateFailed, "not applied: held"),
        ClusterOutcome::failed("us1", PropagationStatus::CachedRetrievalFailed, "cache"),
    ];
    // Only the canary was applied v2; transient failures never halt.
    let none = std::collections::BTreeSet::new();
    let transient = apply_failures(
        &names(&["us1"]),
        &[ClusterOutcome::failed(
            "us1",
            PropagationStatus::CachedRetrievalFailed,
            "x",
        )],
        &none,
    );
    assert!(transient.is_empty());
    let timeout = apply_failures(
        &names(&["c1"]),
        &[ClusterOutcome::failed(
            "c1",
            PropagationStatus::UpdateTimedOut,
            "x",
        )],
        &none,
    );
    assert!(timeout.is_empty());
    let failures = apply_failures(&names(&["c1", "us1"]), &outcomes, &none);
    assert_eq!(
        failures,
        BTreeMap::from([(
            "c1".to_owned(),
            "UpdateFailed: admission webhook denied".to_owned()
        )])
    );
    let mut state = start.state.clone();
    let events = record_failures(&mut state, failures);
    assert_eq!(state.phase, Phase::Halted);
    assert_eq!(
        state.halted.as_deref(),
        Some("c1: apply failed: UpdateFailed: admission webhook denied")
    );
    assert_eq!(events[0].0, "RolloutHalted");
    assert!(events[0].1.starts_with("stage canary (c1): "), "{events:?}");
    // Halted holds, even when the canary later looks fine.
    let later = decide(
        &strategy,
        &batches,
        "v2",
        Some(&state),
        &reports(&[("c1", "v2", true)]),
        Controls::default(),
        NOW + 10,
    );
    assert_eq!(later.state.phase, Phase::Halted);
    // The fixed template: a new revision, nothing of v2's failure carried over.
    let fixed = decide(
        &strategy,
        &batches,
        "fixed",
        Some(&later.state),
        &BTreeMap::new(),
        Controls::default(),
        NOW + 20,
    );
    assert_eq!(fixed.state.phase, Phase::Progressing);
    assert!(fixed.state.failures.is_empty());
    assert!(fixed.events.is_empty(), "{:?}", fixed.events);
    // The stored state of a halted revision reads back the same.
    let json = serde_json::to_string(&state).expect("serializes");
    assert_eq!(
        serde_json::from_str::<RolloutState>(&json).expect("parses"),
        state
    );
}

#[test]
fn pause_holds_resume_restarts_the_deadline_abort_goes_back() {
    let strategy = canary_then_eu_then_rest();
    let batches = batches(&strategy, &fleet()).expect("valid");
    let ready = reports(&[("c1", "v2", true)]);
    let start = decide(
        &strategy,
        &batches,
        "v2",
        Some(&completed("v1")),
        &BTreeMap::new(),
        Controls::default(),
        NOW,
    );
    let paused = Controls {
        paused: true,
        aborted: false,
    };
    let held = decide(
        &strategy,
        &batches,
        "v2",
        Some(&start.state),
        &ready,
        paused,
        NOW + 1000,
    );
    assert_eq!(held.state.phase, Phase::Paused);
    assert_eq!(held.state.batch, 0, "no progress while paused");
    let resumed = decide(
        &strategy,
        &batches,
        "v2",
        Some(&held.state),
        &BTreeMap::new(),
        Controls::default(),
        NOW + 2000,
    );
    assert_eq!(
        resumed.state.phase,
        Phase::Progressing,
        "the deadline counts from the resume"
    );
    assert!(resumed.events.iter().any(|(r, _)| *r == "RolloutResumed"));
    let aborted = decide(
        &strategy,
        &batches,
        "v2",
        Some(&resumed.state),
        &ready,
        Controls {
            paused: false,
            aborted: true,
        },
        NOW + 2001,
    );
    assert_eq!(aborted.state.phase, Phase::Aborted);
    assert!(
        aborted.allowed.values().all(|r| r == "v1"),
        "{:?}",
        aborted.allowed
    );
}

/// Abort belongs to the revision it was asked for: resume starts that revision over at the
/// first stage; a new revision (the fix) rolls out although the annotation is still there
/// (the controller is told to remove it), and a later abort aborts the new one.
#[test]
fn abort_belongs_to_its_revision_and_resume_starts_over() {
    let strategy = canary_then_eu_then_rest();
    let batches = batches(&strategy, &fleet()).expect("valid");
    let abort = Controls {
        paused: false,
        aborted: true,
    };
    let go = |state: &RolloutState, revision: &str, controls: Controls, now: i64| {
        decide(
            &strategy,
            &batches,
            revision,
            Some(state),
            &reports(&[("c1", revision, true), ("eu1", revision, true)]),
            controls,
            now,
        )
    };
    let start = go(&completed("v1"), "v2", Controls::default(), NOW);
    let eu = go(
        &go(&start.state, "v2", Controls::default(), NOW + 1).state,
        "v2",
        Controls::default(),
        NOW + 40,
    );
    assert_eq!(eu.state.batch, 1);
    let aborted = go(&eu.state, "v2", abort, NOW + 41);
    assert_eq!(aborted.state.phase, Phase::Aborted);
    assert!(aborted.allowed.values().all(|r| r == "v1"));
    assert!(!aborted.clear_abort);
    // Still aborted while asked for.
    let still = go(&aborted.state, "v2", abort, NOW + 100);
    assert_eq!(still.state.phase, Phase::Aborted);
    assert!(still.events.is_empty());
    // Resume: v2 starts over at the canary, its soak and deadline from now.
    let resumed = go(&still.state, "v2", Controls::default(), NOW + 200);
    assert_eq!(resumed.state.phase, Phase::Progressing);
    assert_eq!(resumed.state.batch, 0);
    assert_eq!(resumed.state.batch_started, NOW + 200);
    assert_eq!(resumed.state.stable.as_deref(), Some("v1"));
    assert_eq!(resumed.events[0].0, "RolloutResumed");
    assert!(resumed.events[0].1.contains("starts over at stage canary"));
    assert_eq!(
        allowed(&resumed),
        [("c1", "v2"), ("eu1", "v1"), ("eu2", "v1"), ("us1", "v1")]
    );

    // Aborted again; then the fix comes while the annotation is still there.
    let aborted = go(&resumed.state, "v2", abort, NOW + 300);
    assert_eq!(aborted.state.phase, Phase::Aborted);
    let fixed = go(&aborted.state, "v3", abort, NOW + 400);
    assert_eq!(fixed.state.phase, Phase::Progressing);
    assert_eq!(fixed.state.stable.as_deref(), Some("v1"));
    assert_eq!(fixed.allowed["c1"], "v3");
    assert!(fixed.clear_abort, "the stale annotation is to be removed");
    // An older copy of the object, annotation and all: still not aborted.
    let stale = go(&fixed.state, "v3", abort, NOW + 401);
    assert_eq!(stale.state.phase, Phase::Progressing);
    assert!(stale.clear_abort);
    // Once the annotation is gone, a new abort aborts v3.
    let cleared = go(&stale.state, "v3", Controls::default(), NOW + 402);
    assert!(!cleared.clear_abort && !cleared.state.abort_consumed);
    let again = go(&cleared.state, "v3", abort, NOW + 403);
    assert_eq!(again.state.phase, Phase::Aborted);
    assert!(again.allowed.values().all(|r| r == "v1"));
}

/// Pause freezes: no batch starts and a new revision reaches no cluster while paused; the
/// clusters given a revision before keep it; resume starts the new revision at the canary.
#[test]
fn pause_freezes_even_a_new_revision() {
    let strategy = canary_then_eu_then_rest();
    let batches = batches(&strategy, &fleet()).expect("valid");
    let paused = Controls {
        paused: true,
        aborted: false,
    };
    let start = decide(
        &strategy,
        &batches,
        "v2",
        Some(&completed("v1")),
        &BTreeMap::new(),
        Controls::default(),
        NOW,
    );
    assert_eq!(start.state.reached, ["c1".to_owned()].into());
    // Paused in the canary's soak: eu never starts.
    let ready = reports(&[("c1", "v2", true)]);
    let held = decide(
        &strategy,
        &batches,
        "v2",
        Some(&start.state),
        &ready,
        paused,
        NOW + 1000,
    );
    assert_eq!(held.state.phase, Phase::Paused);
    assert_eq!(held.allowed["eu1"], "v1");
    // v3 while paused: nobody is given v3, not even the canary.
    let v3 = decide(
        &strategy,
        &batches,
        "v3",
        Some(&held.state),
        &ready,
        paused,
        NOW + 1001,
    );
    assert_eq!(v3.state.phase, Phase::Paused);
    assert!(v3.state.reached.is_empty());
    assert!(v3.allowed.values().all(|r| r != "v3"), "{:?}", v3.allowed);
    let still = decide(
        &strategy,
        &batches,
        "v3",
        Some(&v3.state),
        &ready,
        paused,
        NOW + 5000,
    );
    assert!(
        still.allowed.values().all(|r| r != "v3"),
        "{:?}",
        still.allowed
    );
    assert!(still.events.is_empty());
    // Resumed: v3 goes to the canary first, its deadline from now.
    let resumed = decide(
        &strategy,
        &batches,
        "v3",
        Some(&still.state),
        &ready,
        Controls::default(),
        NOW + 6000,
    );
    assert_eq!(resumed.state.phase, Phase::Progressing);
    assert_eq!(resumed.state.batch_started, NOW + 6000);
    assert_eq!(
        allowed(&resumed),
        [("c1", "v3"), ("eu1", "v1"), ("eu2", "v1"), ("us1", "v1")]
    );
}

/// Membership is fixed when the rollout starts: a relabelled cluster stays in its batch, a
/// cluster placed mid-rollout never shifts the batch index nor skips a gate — it joins its
/// stage (a later one: waits for it; the current or a done one: the current batch, whose gate
/// then waits for it) — and a cluster no longer placed is no longer waited for.
#[test]
fn membership_is_stored_and_joiners_never_skip_a_gate() {
    let strategy = RolloutStrategy {
        max_clusters_per_batch: Some(1),
        ..canary_then_eu_then_rest()
    };
    let go = |fleet: &[ClusterInfo],
              state: &RolloutState,
              reports: &BTreeMap<String, ClusterReport>,
              now: i64| {
        decide(
            &strategy,
            &batches(&strategy, fleet).expect("valid"),
            "v2",
            Some(state),
            reports,
            Controls::default(),
            now,
        )
    };
    let fleet = fleet();
    // Batches: [c1] [eu1] [eu2] [us1]; at eu1 (batch 1).
    let start = go(&fleet, &completed("v1"), &BTreeMap::new(), NOW);
    let ready = reports(&[("c1", "v2", true)]);
    let eu1 = go(
        &fleet,
        &go(&fleet, &start.state, &ready, NOW + 1).state,
        &ready,
        NOW + 40,
    );
    assert_eq!(eu1.state.batch, 1);
    assert_eq!(eu1.allowed["eu1"], "v2");

    // "eu0" is placed (sorted before eu1: recomputed batches would put it at index 1, and the
    // stored index would then skip eu1's gate), "us0" too, and eu2 is relabelled to us.
    let mut changed = fleet.clone();
    changed.push(cluster("eu0", &[("region", "eu")]));
    changed.push(cluster("us0", &[("region", "us")]));
    changed[2] = cluster("eu2", &[("region", "us")]);
    let joined = go(&changed, &eu1.state, &ready, NOW + 50);
    assert_eq!(joined.state.batch, 1);
    assert_eq!(joined.state.batches[1].clusters, names(&["eu0", "eu1"]));
    assert_eq!(
        joined.state.batches[2].clusters,
        names(&["eu2"]),
        "stays in eu"
    );
    assert_eq!(joined.state.batches[3].clusters, names(&["us0", "us1"]));
    assert_eq!(
        joined.state.batch_started,
        NOW + 50,
        "the joiner's deadline"
    );
    assert_eq!(
        allowed(&joined),
        [
            ("c1", "v2"),
            ("eu0", "v2"),
            ("eu1", "v2"),
            ("eu2", "v1"),
            ("us0", "v1"),
            ("us1", "v1")
        ]
    );
    // eu1 Ready and soaked, eu0 not: the gate waits for eu0.
    let eu1_ready = reports(&[
        ("c1", "v2", true),
        ("eu1", "v2", true),
        ("eu0", "v2", false),
    ]);
    let waiting = go(
        &changed,
        &go(&changed, &joined.state, &eu1_ready, NOW + 51).state,
        &eu1_ready,
        NOW + 90,
    );
    assert_eq!(waiting.state.batch, 1);
    assert_eq!(waiting.allowed["eu2"], "v1");
    // eu0 is no longer placed: no longer waited for; eu2 (relabelled) is next, in eu.
    let mut without = changed.clone();
    without.retain(|c| c.name != "eu0");
    let on = go(&without, &waiting.state, &eu1_ready, NOW + 91);
    let next = go(&without, &on.state, &eu1_ready, NOW + 125);
    assert_eq!(next.state.batch, 2);
    assert_eq!(next.allowed["eu2"], "v2");
    assert!(!next.allowed.contains_key("eu0"));
    // A canary placed now (its stage is done) joins the current batch, not the rest.
    let mut canaries = without.clone();
    canaries.push(cluster("c1-b", &[]));
    let canary_b = RolloutStrategy {
        stages: vec![
            Stage {
                name: "canary".into(),
                clusters: names(&["c1", "c1-b"]),
                ..Stage::default()
            },
            strategy.stages[1].clone(),
            strategy.stages[2].clone(),
        ],
        ..strategy.clone()
    };
    let late = decide(
        &canary_b,
        &batches(&canary_b, &canaries).expect("valid"),
        "v2",
        Some(&next.state),
        &eu1_ready,
        Controls::default(),
        NOW + 130,
    );
    assert_eq!(late.state.batches[2].clusters, names(&["c1-b", "eu2"]));
    assert_eq!(late.allowed["c1-b"], "v2");
    // The membership survives a restart: it is in the stored state.
    let json = serde_json::to_string(&late.state).expect("serializes");
    assert_eq!(
        serde_json::from_str::<RolloutState>(&json).expect("parses"),
        late.state
    );
}

/// A held cluster reports honestly: what the plan found wrong there stays, an apply it would
/// have made (a newly placed cluster's creation too) is `RolloutPending` with why, and a
/// cluster already up to date stays `Ok`.
#[test]
fn held_clusters_report_what_holds_them() {
    let strategy = canary_then_eu_then_rest();
    let batches = batches(&strategy, &fleet()).expect("valid");
    let start = decide(
        &strategy,
        &batches,
        "v2",
        Some(&completed("v1")),
        &BTreeMap::new(),
        Controls::default(),
        NOW,
    );
    let apply = ClusterAction::Apply(crate::plan::ApplyAction {
        object: serde_json::json!({}).into(),
        desired_hash: String::new(),
        creates: true,
        create_only: false,
        adopts: false,
        released_fields: Vec::new(),
    });
    let why = |state: &RolloutState, cluster: &str| {
        let (state, cluster) = (state.clone(), cluster.to_owned());
        move |removal| pending_message(&state, &cluster, removal)
    };
    match held_action(apply.clone(), why(&start.state, "eu1")) {
        ClusterAction::Blocked { status, message } => {
            assert_eq!(status, PropagationStatus::RolloutPending);
            assert_eq!(
                message,
                "the rollout of v2 has not reached stage eu; this cluster keeps what it runs"
            );
        }
        other => panic!("{other:?}"),
    }
    let not_ready = ClusterAction::Blocked {
        status: PropagationStatus::ClusterNotReady,
        message: "cluster not ready".into(),
    };
    assert_eq!(
        held_action(not_ready.clone(), why(&start.state, "eu1")),
        not_ready
    );
    assert_eq!(
        held_action(ClusterAction::UpToDate, why(&start.state, "eu1")),
        ClusterAction::UpToDate
    );
    let paused = RolloutState {
        phase: Phase::Paused,
        ..start.state.clone()
    };
    match held_action(apply, why(&paused, "c1")) {
        ClusterAction::Blocked { message, .. } => {
            assert_eq!(
                message,
                "the rollout of v2 is paused; this cluster keeps what it runs"
            );
        }
        other => panic!("{other:?}"),
    }
    // The removal of a copy no longer placed waits too.
    let delete = ClusterAction::Delete(crate::plan::DeleteAction {
        options: None,
        uid: None,
    });
    match held_action(delete, why(&start.state, "us1")) {
        ClusterAction::Blocked { status, message } => {
            assert_eq!(status, PropagationStatus::RolloutPending);
            assert_eq!(
                message,
                "the rollout of v2 has not reached stage rest; the copy here stays until then"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// The revision covers template, overrides and placement: a placement change is rolled out
/// like a template change.
#[test]
fn placement_is_part_of_the_revision() {
    let placed = |names: &[&str]| -> std::collections::BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    };
    let (template, overrides) = ("0123456789abcdef", "fedcba9876543210");
    let both = revision(template, overrides, &placed(&["m1", "m2"]));
    assert!(both.starts_with("0123456789-fedcba9876-"), "{both}");
    assert_eq!(both.len(), 10 + 1 + 10 + 1 + 8);
    assert_eq!(both, revision(template, overrides, &placed(&["m2", "m1"])));
    assert_ne!(both, revision(template, overrides, &placed(&["m1"])));
    assert_ne!(both, revision("abc", overrides, &placed(&["m1", "m2"])));
    // Removals: the clusters no longer placed whose copy goes.
    let plan = |cluster: &str, action: ClusterAction| crate::plan::ClusterPlan {
        cluster: cluster.to_owned(),
        action,
    };
    let delete = ClusterAction::Delete(crate::plan::DeleteAction {
        options: None,
        uid: None,
    });
    let clusters = [
        plan("m1", ClusterAction::UpToDate),
        plan("m3", delete),
        plan("m4", ClusterAction::RemoveManagedLabel),
        plan("m5", ClusterAction::WaitForRemoval),
        plan(
            "m6",
            ClusterAction::Blocked {
                status: PropagationStatus::ClusterNotReady,
                message: String::new(),
            },
        ),
    ];
    assert_eq!(
        removals(&clusters, &placed(&["m1"])),
        names(&["m3", "m4", "m5"])
    );
}

#[test]
fn the_first_revision_goes_everywhere() {
    let strategy = canary_then_eu_then_rest();
    let batches = batches(&strategy, &fleet()).expect("valid");
    let first = decide(
        &strategy,
        &batches,
        "v1",
        None,
        &BTreeMap::new(),
        Controls::default(),
        NOW,
    );
    assert!(first.allowed.values().all(|r| r == "v1"));
    assert_eq!(first.state.phase, Phase::Completed);
}

/// Over generated histories (reports, pauses, time), checked against the reports themselves
/// rather than the decision's own state: a batch gets the revision only after every cluster of
/// the batch before it was reported Ready on it in every decision for more than `soakSeconds`;
/// no cluster is given the revision while paused; a cluster given it keeps it; a batch not
/// Ready by its deadline halts the rollout for good.
#[test]
fn gates_hold_over_generated_histories() {
    let strategy = RolloutStrategy {
        max_clusters_per_batch: Some(1),
        soak_seconds: 3,
        ready_deadline_seconds: Some(40),
        ..canary_then_eu_then_rest()
    };
    let soak = i64::from(strategy.soak_seconds);
    let batches = batches(&strategy, &fleet()).expect("valid");
    let mut seed = 0x51ed_2701_u64;
    let mut next = |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    };
    let (mut completed_runs, mut halted_runs) = (0, 0);
    for _ in 0..300 {
        let mut state = completed("v1");
        let mut given: std::collections::BTreeSet<String> = Default::default();
        // Per batch: since when all its clusters have been reported Ready on v2, unbroken.
        let mut ready_run: BTreeMap<usize, i64> = BTreeMap::new();
        let mut now = NOW;
        for step in 0..80 {
            now += i64::try_from(next(4)).unwrap_or(1);
            let reports: BTreeMap<String, ClusterReport> = batches
                .iter()
                .flat_map(|b| &b.clusters)
                .map(|c| {
                    let on = given.contains(c) && next(4) > 0;
                    let ready = next(6) > 0;
                    (c.clone(), report(if on { "v2" } else { "v1" }, ready))
                })
                .collect();
            for (i, batch) in batches.iter().enumerate() {
                let ready = batch
                    .clusters
                    .iter()
                    .all(|c| reports[c] == report("v2", true));
                if ready {
                    ready_run.entry(i).or_insert(now);
                } else {
                    ready_run.remove(&i);
                }
            }
            let paused = step > 0 && next(8) == 0;
            let controls = Controls {
                paused,
                aborted: false,
            };
            let decision = decide(
                &strategy,
                &batches,
                "v2",
                Some(&state),
                &reports,
                controls,
                now,
            );
            let now_given: std::collections::BTreeSet<String> = decision
                .allowed
                .iter()
                .filter(|(_, r)| r.as_str() == "v2")
                .map(|(c, _)| c.clone())
                .collect();
            assert!(
                given.is_subset(&now_given),
                "a cluster lost v2: {decision:?}"
            );
            for cluster in now_given.difference(&given) {
                assert!(!paused, "{cluster} given v2 while paused");
                let k = batches
                    .iter()
                    .position(|b| b.clusters.contains(cluster))
                    .expect("in a batch");
                if k > 0 {
                    let since = ready_run.get(&(k - 1)).copied();
                    assert!(
                        since.is_some_and(|since| now - since > soak),
                        "batch {k} ({cluster}) at {now}: batch {} Ready since {since:?}",
                        k - 1
                    );
                }
            }
            if state.phase == Phase::Halted {
                assert_eq!(decision.state.phase, Phase::Halted);
                assert_eq!(now_given, given, "nothing more after a halt");
            }
            given = now_given;
            state = decision.state;
        }
        match state.phase {
            Phase::Completed => completed_runs += 1,
            Phase::Halted => halted_runs += 1,
            _ => {}
        }
    }
    // The histories reach both ends.
    assert!(
        completed_runs > 0 && halted_runs > 0,
        "{completed_runs} {halted_runs}"
    );
}

/// A deletion goes stage by stage and never halts, however long a copy takes to go.
#[test]
fn a_deletion_goes_by_stages_and_never_halts() {
    let strategy = deletion_strategy(&canary_then_eu_then_rest());
    let batches = batches(&strategy, &fleet()).expect("valid");
    let start = decide(
        &strategy,
        &batches,
        DELETED_REVISION,
        Some(&completed("v1")),
        &BTreeMap::new(),
        Controls::default(),
        NOW,
    );
    assert_eq!(
        allowed(&start),
        [
            ("c1", DELETED_REVISION),
            ("eu1", "v1"),
            ("eu2", "v1"),
            ("us1", "v1")
        ]
    );
    // The canary's copy stays for a year: no halt, nothing else deleted.
    let stuck = decide(
        &strategy,
        &batches,
        DELETED_REVISION,
        Some(&start.state),
        &BTreeMap::new(),
        Controls::default(),
        NOW + 365 * 24 * 3600,
    );
    assert_eq!(stuck.state.phase, Phase::Progressing);
    assert_eq!(stuck.allowed["eu1"], "v1");
    // Gone (no longer covered): after the soak, eu.
    let mut rest = fleet();
    rest.retain(|c| c.name != "c1");
    let rest_batches = super::batches(&strategy, &rest).expect("valid");
    let gone = decide(
        &strategy,
        &rest_batches,
        DELETED_REVISION,
        Some(&stuck.state),
        &BTreeMap::new(),
        Controls::default(),
        NOW + 365 * 24 * 3600 + 1,
    );
    let eu = decide(
        &strategy,
        &rest_batches,
        DELETED_REVISION,
        Some(&gone.state),
        &BTreeMap::new(),
        Controls::default(),
        NOW + 365 * 24 * 3600 + 40,
    );
    assert_eq!(eu.allowed["eu1"], DELETED_REVISION);
    assert_eq!(eu.allowed["us1"], "v1");
    assert_eq!(
        eu.events,
        [(
            "StageCompleted",
            "stage canary: its copies are deleted".to_owned()
        )]
    );
}

/// Only an apply the member refuses halts: a write that got no answer, a server error, a
/// conflict or throttling — reported `UpdateFailed` all the same — is retried instead.
#[test]
fn a_transient_write_failure_never_halts() {
    for code in [400, 403, 404, 413, 422] {
        assert!(is_refusal(Some(code)), "{code}");
    }
    for code in [
        None,
        Some(408),
        Some(409),
        Some(429),
        Some(500),
        Some(503),
        Some(504),
    ] {
        assert!(!is_refusal(code), "{code:?}");
    }
    let outcomes = [
        ClusterOutcome::failed("c1", PropagationStatus::UpdateFailed, "connection reset"),
        ClusterOutcome::failed("eu1", PropagationStatus::CreationFailed, "denied"),
    ];
    let transient = std::collections::BTreeSet::from(["c1".to_owned()]);
    let failures = apply_failures(&names(&["c1", "eu1"]), &outcomes, &transient);
    assert_eq!(
        failures,
        BTreeMap::from([("eu1".to_owned(), "CreationFailed: denied".to_owned())])
    );
    let only_transient = apply_failures(&names(&["c1"]), &outcomes[..1], &transient);
    assert!(only_transient.is_empty());
}

/// A strategy that cannot be used holds every change; the first revision of an object goes
/// out but is stored, so the next change is held, and once the strategy is there it is
/// staged from it. The reason is news once: stored, not remembered.
#[test]
fn a_missing_strategy_holds_and_says_so_once() {
    let first = hold(None, "v1", "not found", NOW);
    assert!(first.goes_out && first.publish);
    assert_eq!(first.state.phase, Phase::Completed);
    let again = hold(Some(&first.state), "v1", "not found", NOW + 30);
    assert!(!again.publish);
    assert_eq!(again.state, first.state);
    let changed = hold(Some(&again.state), "v2", "not found", NOW + 60);
    assert!(!changed.goes_out && !changed.publish);
    assert_eq!(changed.state.revision, "v1");
    let other = hold(Some(&changed.state), "v2", "invalid", NOW + 90);
    assert!(other.publish);
    // The strategy is there: v2 is staged from v1, and the hold is over.
    let strategy = canary_then_eu_then_rest();
    let batches = batches(&strategy, &fleet()).expect("valid");
    let staged = decide(
        &strategy,
        &batches,
        "v2",
        Some(&other.state),
        &BTreeMap::new(),
        Controls::default(),
        NOW + 120,
    );
    assert_eq!(staged.state.stable.as_deref(), Some("v1"));
    assert_eq!(staged.state.held, None);
    assert_eq!(
        allowed(&staged),
        [("c1", "v2"), ("eu1", "v1"), ("eu2", "v1"), ("us1", "v1")]
    );
    // Missing again: said again.
    assert!(hold(Some(&staged.state), "v2", "not found", NOW + 150).publish);
}

/// A state ConfigMap holds at most 1 MiB: the stable spec is dropped first; when not even the
/// current spec fits, the object goes unstaged (never blocked), said once, and a later revision
/// that fits is staged from it.
#[test]
fn a_state_too_large_drops_the_stable_spec_then_goes_unstaged() {
    assert_eq!(fit(1_000, 400_000, 400_000), Fit::All);
    assert_eq!(fit(1_000, 600_000, 600_000), Fit::WithoutStable);
    assert_eq!(fit(1_000, STATE_DATA_LIMIT - 1_000, 1), Fit::WithoutStable);
    assert_eq!(fit(1_000, STATE_DATA_LIMIT, 0), Fit::TooLarge);
    assert_eq!(fit(0, 1_100_000, 0), Fit::TooLarge);
    let big = too_large(Some(&completed("v1")), "v2", "too large", NOW);
    assert!(big.goes_out && big.publish);
    assert_eq!(big.state.phase, Phase::Completed);
    assert!(!too_large(Some(&big.state), "v3", "too large", NOW + 1).publish);
    let strategy = canary_then_eu_then_rest();
    let batches = batches(&strategy, &fleet()).expect("valid");
    let staged = decide(
        &strategy,
        &batches,
        "v3",
        Some(&big.state),
        &BTreeMap::new(),
        Controls::default(),
        NOW + 2,
    );
    assert_eq!(staged.state.stable.as_deref(), Some("v2"));
    assert_eq!(staged.state.unstaged, None);
    assert_eq!(allowed(&staged)[1], ("eu1", "v2"));
}

/// Stored data that cannot be read is an error, not "no state" (which would send the next
/// revision everywhere at once); absent or empty values are none.
#[test]
fn unreadable_state_is_an_error_not_no_state() {
    let data = crate::test_support::labels;
    assert_eq!(read_state(&data(&[])), Ok(StoredData::default()));
    assert_eq!(
        read_state(&data(&[("state", ""), ("current", ""), ("stable", "")])),
        Ok(StoredData::default())
    );
    let state = serde_json::to_string(&completed("v1")).expect("json");
    let read = read_state(&data(&[("state", &state), ("current", "{}")])).expect("readable");
    assert_eq!(read.state, Some(completed("v1")));
    assert!(read.current.is_some() && read.stable.is_none());
    let broken = read_state(&data(&[("state", "{\"revision\": 1")]));
    assert!(broken.is_err_and(|e| e.starts_with("state: ")));
    let broken_spec = read_state(&data(&[("state", &state), ("stable", "[")]));
    assert!(broken_spec.is_err_and(|e| e.starts_with("stable: ")));
}

/// An abort belongs to the revision it names: another revision is neither aborted nor kept
/// from rolling out, and the stale request is removed; a request naming no revision is the
/// current one's (the controller's own bookkeeping then decides).
#[test]
fn an_abort_belongs_to_the_revision_it_names() {
    let aborting = Controls {
        paused: false,
        aborted: true,
    };
    assert_eq!(
        controls(Some("aborted"), Some("v3"), "v3"),
        (aborting, false)
    );
    assert_eq!(controls(Some("aborted"), None, "v3"), (aborting, false));
    assert_eq!(
        controls(Some("aborted"), Some("v3"), "v4"),
        (Controls::default(), true)
    );
    assert_eq!(
        controls(Some("paused"), Some("v3"), "v4"),
        (
            Controls {
                paused: true,
                aborted: false
            },
            false
        )
    );
    assert_eq!(controls(None, None, "v4"), (Controls::default(), false));
}
