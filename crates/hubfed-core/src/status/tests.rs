use super::*;

const T0: &str = "2024-01-01T00:00:00Z";
const T1: &str = "2024-01-01T00:01:00Z";
const T2: &str = "2024-01-01T00:02:00Z";

fn input<'a>(outcomes: &'a [ClusterOutcome], now: &'a str) -> StatusInput<'a> {
    StatusInput {
        generation: 1,
        outcomes,
        now,
        ..StatusInput::default()
    }
}

fn propagation(status: &FederatedStatus) -> &FederatedCondition {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == PROPAGATION_CONDITION)
        .unwrap()
}

#[test]
fn status_strings_round_trip() {
    for status in PropagationStatus::ALL {
        assert_eq!(PropagationStatus::parse(status.as_str()), Some(*status));
    }
    assert_eq!(PropagationStatus::Ok.as_str(), "");
    assert_eq!(
        PropagationStatus::ManagedLabelFalse.as_str(),
        "ManagedLabelFalse"
    );
    assert_eq!(PropagationStatus::parse("Bogus"), None);
    assert_eq!(AggregateReason::CheckClusters.as_str(), "CheckClusters");
    assert_eq!(AggregateReason::Success.as_str(), "");
}

#[test]
fn all_ok_is_true_with_sorted_clusters() {
    let outcomes = [ClusterOutcome::ok("b"), ClusterOutcome::ok("a")];
    let update = compute_status(None, &input(&outcomes, T0));
    assert!(update.changed);
    let s = &update.status;
    assert_eq!(s.observed_generation, Some(1));
    let names: Vec<&str> = s.clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert!(s.clusters.iter().all(|c| c.status.is_none()));
    let c = propagation(s);
    assert_eq!(c.status, "True");
    assert_eq!(c.reason, None);
    assert_eq!(c.message, None);
    assert_eq!(c.last_transition_time.as_deref(), Some(T0));
    assert_eq!(c.last_update_time.as_deref(), Some(T0));
    assert_eq!(
        serde_json::to_value(s).unwrap(),
        serde_json::json!({
            "observedGeneration": 1,
            "conditions": [{"type": "Propagation", "status": "True",
                            "lastUpdateTime": T0, "lastTransitionTime": T0}],
            "clusters": [{"name": "a"}, {"name": "b"}],
        })
    );
}

#[test]
fn unchanged_status_is_not_rewritten_and_keeps_times() {
    let outcomes = [ClusterOutcome::ok("a")];
    let first = compute_status(None, &input(&outcomes, T0)).status;
    let second = compute_status(Some(&first), &input(&outcomes, T1));
    assert!(!second.changed);
    assert_eq!(second.status, first);
}

#[test]
fn failures_make_check_clusters_and_transition() {
    let ok = [ClusterOutcome::ok("a"), ClusterOutcome::ok("b")];
    let first = compute_status(None, &input(&ok, T0)).status;

    let failing = [
        ClusterOutcome::ok("a"),
        ClusterOutcome::failed("b", PropagationStatus::UpdateFailed, "conflict"),
    ];
    let second = compute_status(Some(&first), &input(&failing, T1));
    assert!(second.changed);
    let c = propagation(&second.status);
    assert_eq!(c.status, "False");
    assert_eq!(c.reason.as_deref(), Some("CheckClusters"));
    assert_eq!(
        c.message.as_deref(),
        Some("1 of 2 clusters need attention: b (UpdateFailed)")
    );
    assert_eq!(c.last_transition_time.as_deref(), Some(T1));
    let b = &second.status.clusters[1];
    assert_eq!(b.status.as_deref(), Some("UpdateFailed"));
    assert_eq!(b.message.as_deref(), Some("conflict"));

    // Same failure again: no write.
    let third = compute_status(Some(&second.status), &input(&failing, T2));
    assert!(!third.changed);

    // A different failing cluster set: clusters change, transition time stays.
    let other = [
        ClusterOutcome::failed("a", PropagationStatus::ClusterNotReady, "Cluster not ready"),
        ClusterOutcome::ok("b"),
    ];
    let fourth = compute_status(Some(&second.status), &input(&other, T2));
    assert!(fourth.changed);
    let c = propagation(&fourth.status);
    assert_eq!(c.last_transition_time.as_deref(), Some(T1));
    assert_eq!(c.last_update_time.as_deref(), Some(T2));
}

#[test]
fn resource_updates_move_last_update_time_only() {
    let outcomes = [ClusterOutcome::ok("a")];
    let first = compute_status(None, &input(&outcomes, T0)).status;
    let second = compute_status(
        Some(&first),
        &StatusInput {
            resources_updated: true,
            ..input(&outcomes, T1)
        },
    );
    assert!(second.changed);
    let c = propagation(&second.status);
    assert_eq!(c.last_transition_time.as_deref(), Some(T0));
    assert_eq!(c.last_update_time.as_deref(), Some(T1));
}

#[test]
fn generation_change_is_a_change() {
    let outcomes = [ClusterOutcome::ok("a")];
    let first = compute_status(None, &input(&outcomes, T0)).status;
    let second = compute_status(
        Some(&first),
        &StatusInput {
            generation: 2,
            ..input(&outcomes, T1)
        },
    );
    assert!(second.changed);
    assert_eq!(second.status.observed_generation, Some(2));
    assert_eq!(
        propagation(&second.status).last_update_time.as_deref(),
        Some(T0)
    );
}

#[test]
fn pre_dispatch_reasons_win() {
    let failing = [ClusterOutcome::failed(
        "a",
        PropagationStatus::DeletionFailed,
        "x",
    )];
    let s = compute_status(
        None,
        &StatusInput {
            reason: AggregateReason::NamespaceNotFederated,
            ..input(&failing, T0)
        },
    )
    .status;
    let c = propagation(&s);
    assert_eq!(c.status, "False");
    assert_eq!(c.reason.as_deref(), Some("NamespaceNotFederated"));

    let s = compute_status(
        None,
        &StatusInput {
            reason: AggregateReason::ComputePlacementFailed,
            reason_message: Some("invalid cluster selector: bad"),
            ..input(&[], T0)
        },
    )
    .status;
    let c = propagation(&s);
    assert_eq!(c.reason.as_deref(), Some("ComputePlacementFailed"));
    assert_eq!(c.message.as_deref(), Some("invalid cluster selector: bad"));
    assert!(s.clusters.is_empty());
}

#[test]
fn remote_status_collection_requires_remote_status() {
    let mut with = ClusterOutcome::ok("a");
    with.remote_status = Some(serde_json::json!({"readyReplicas": 1}));
    let without = ClusterOutcome::ok("b");
    let outcomes = [with, without];
    let s = compute_status(
        None,
        &StatusInput {
            remote_status_collection: true,
            ..input(&outcomes, T0)
        },
    )
    .status;
    let c = propagation(&s);
    assert_eq!(c.reason.as_deref(), Some("CheckClusters"));
    assert_eq!(
        c.message.as_deref(),
        Some("1 of 2 clusters need attention: b (no remote status)")
    );
    assert_eq!(
        s.clusters[0].remote_status,
        Some(serde_json::json!({"readyReplicas": 1}))
    );
}

#[test]
fn unknown_clusters_are_mentioned_without_failing() {
    let unknown = vec!["ghost".to_owned()];
    let outcomes = [ClusterOutcome::ok("a")];
    let s = compute_status(
        None,
        &StatusInput {
            unknown_clusters: &unknown,
            ..input(&outcomes, T0)
        },
    )
    .status;
    let c = propagation(&s);
    assert_eq!(c.status, "True");
    assert_eq!(
        c.message.as_deref(),
        Some("placement names clusters that are not joined: ghost")
    );
}

#[test]
fn long_failure_lists_are_summarised() {
    let outcomes: Vec<ClusterOutcome> = (0..12)
        .map(|i| {
            ClusterOutcome::failed(format!("c{i:02}"), PropagationStatus::ClusterNotReady, "x")
        })
        .collect();
    let s = compute_status(None, &input(&outcomes, T0)).status;
    let message = propagation(&s).message.clone().unwrap();
    assert!(message.starts_with("12 of 12 clusters need attention: c00 (ClusterNotReady)"));
    assert!(
        message.ends_with("c09 (ClusterNotReady), and 2 more"),
        "{message}"
    );
}

#[test]
fn other_conditions_are_kept() {
    let previous = FederatedStatus {
        conditions: vec![FederatedCondition {
            type_: "Custom".into(),
            status: "True".into(),
            ..FederatedCondition::default()
        }],
        ..FederatedStatus::default()
    };
    let s = compute_status(Some(&previous), &input(&[], T0)).status;
    assert_eq!(s.conditions.len(), 2);
    assert_eq!(s.conditions[0].type_, "Custom");
    assert_eq!(s.conditions[1].type_, PROPAGATION_CONDITION);
}

#[test]
fn the_ready_condition_names_what_is_not_ready_and_counts_the_ready() {
    let outcomes = [ClusterOutcome::ok("a"), ClusterOutcome::ok("b")];
    let waiting = [
        ("a".to_owned(), Readiness::Ready),
        (
            "b".to_owned(),
            Readiness::NotReady("1 of 2 replicas available".into()),
        ),
    ];
    let first = compute_status(
        None,
        &StatusInput {
            readiness: Some(&waiting),
            ..input(&outcomes, T0)
        },
    );
    let ready = |status: &FederatedStatus| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == READY_CONDITION_TYPE)
            .cloned()
            .expect("a Ready condition")
    };
    let condition = ready(&first.status);
    assert_eq!(first.status.ready.as_deref(), Some("1/2"));
    assert_eq!(condition.status, "False");
    assert_eq!(condition.reason.as_deref(), Some("ClustersNotReady"));
    assert_eq!(
        condition.message.as_deref(),
        Some("1 of 2 placed clusters not ready: b (1 of 2 replicas available)")
    );
    let per_cluster: Vec<(Option<bool>, Option<&str>)> = first
        .status
        .clusters
        .iter()
        .map(|c| (c.ready, c.ready_message.as_deref()))
        .collect();
    assert_eq!(
        per_cluster,
        [
            (Some(true), None),
            (Some(false), Some("1 of 2 replicas available"))
        ]
    );

    // Same verdict later: nothing changes, no write.
    let again = compute_status(
        Some(&first.status),
        &StatusInput {
            readiness: Some(&waiting),
            ..input(&outcomes, T1)
        },
    );
    assert!(!again.changed);

    let all = [
        ("a".to_owned(), Readiness::Ready),
        ("b".to_owned(), Readiness::Ready),
    ];
    let up = compute_status(
        Some(&first.status),
        &StatusInput {
            readiness: Some(&all),
            ..input(&outcomes, T2)
        },
    );
    let condition = ready(&up.status);
    assert!(up.changed);
    assert_eq!(up.status.ready.as_deref(), Some("2/2"));
    assert_eq!(
        (condition.status.as_str(), condition.message.as_deref()),
        ("True", None)
    );
    assert_eq!(condition.last_transition_time.as_deref(), Some(T2));

    // A status written without readiness (a deletion) keeps what was there.
    let kept = compute_status(Some(&up.status), &input(&outcomes, T2));
    assert_eq!(ready(&kept.status), condition);
    assert_eq!(kept.status.ready.as_deref(), Some("2/2"));
}

#[test]
fn remote_status_alone_can_be_coalesced() {
    let with = |replicas: i64, status: Option<PropagationStatus>| {
        let mut outcome = ClusterOutcome::ok("a");
        outcome.remote_status = Some(serde_json::json!({"replicas": replicas}));
        if let Some(status) = status {
            outcome.status = status;
        }
        compute_status(
            None,
            &StatusInput {
                remote_status_collection: true,
                ..input(std::slice::from_ref(&outcome), T0)
            },
        )
        .status
    };
    let one = with(1, None);
    let mut two = with(2, None);
    two.conditions[0].last_update_time = Some(T1.to_owned());
    assert!(only_remote_status_changed(Some(&one), &two));
    assert!(!only_remote_status_changed(Some(&one), &one));
    assert!(!only_remote_status_changed(None, &two));
    let failed = with(2, Some(PropagationStatus::UpdateFailed));
    assert!(!only_remote_status_changed(Some(&one), &failed));
}

#[test]
fn the_same_drift_seen_again_keeps_its_time() {
    let drift = |time: &str, fields: &[&str]| DriftRecord {
        time: time.into(),
        action: "Reported".into(),
        managers: vec!["kubectl-edit".into()],
        fields: fields.iter().map(|f| (*f).to_owned()).collect(),
    };
    let first = drift("2026-11-25T01:00:00Z", &[".data.k"]);
    let again = drift("2026-11-25T01:00:07Z", &[".data.k"]);
    assert_eq!(last_drift(Some(&again), Some(&first)), Some(first.clone()));
    let other = drift("2026-11-25T01:00:07Z", &[".data.x"]);
    assert_eq!(last_drift(Some(&other), Some(&first)), Some(other.clone()));
    assert_eq!(last_drift(None, Some(&first)), Some(first.clone()));
    assert_eq!(last_drift(None, None), None);
}
