//! The pure decisions of pull mode's hub side, case by case.

use super::*;
use crate::plan::{ApplyAction, DeleteAction};
use hubfed_api::work::WorkStatus;

fn subject<'a>(
    target: &'a WorkTarget,
    source: &'a WorkSource,
    annotations: &'a BTreeMap<String, String>,
) -> WorkSubject<'a> {
    WorkSubject {
        target,
        source,
        name: "web",
        namespace: Some("default"),
        annotations,
        collect_status: false,
    }
}

fn apply(creates: bool) -> ClusterAction {
    ClusterAction::Apply(ApplyAction {
        object: serde_json::json!({"kind": "ConfigMap", "metadata": {"name": "web"}}).into(),
        desired_hash: "h1".into(),
        creates,
        create_only: false,
        adopts: false,
        released_fields: vec!["/spec/replicas".into()],
    })
}

fn work(spec: WorkSpec, generation: i64, status: Option<WorkStatus>) -> Work {
    let mut work = Work::new("w", spec);
    work.metadata.generation = Some(generation);
    work.status = status;
    work
}

#[test]
fn actions_round_trip_through_a_work() {
    let (target, source) = (WorkTarget::default(), WorkSource::default());
    let annotations = BTreeMap::from([
        (DRIFT_ANNOTATION.to_owned(), "report".to_owned()),
        ("unrelated".to_owned(), "x".to_owned()),
    ]);
    let subject = subject(&target, &source, &annotations);
    let delete = ClusterAction::Delete(DeleteAction {
        options: Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions {
                propagation_policy: Some("Orphan".into()),
                ..Default::default()
            },
        ),
        uid: Some("u1".into()),
    });
    for action in [
        apply(true),
        apply(false),
        delete,
        ClusterAction::RemoveManagedLabel,
    ] {
        let spec = work_spec(&subject, &action, "gen:1").expect("a request");
        assert_eq!(work_action(&spec).as_ref(), Ok(&action));
        assert_eq!(spec.basis, "gen:1");
        assert_eq!(
            spec.annotations.len(),
            1,
            "only the annotations that shape the apply"
        );
    }
    for passive in [
        ClusterAction::UpToDate,
        ClusterAction::WaitForRemoval,
        ClusterAction::Blocked {
            status: PropagationStatus::ClusterNotReady,
            message: String::new(),
        },
    ] {
        assert_eq!(work_spec(&subject, &passive, ""), None);
    }
}

#[test]
fn an_unreadable_work_is_refused_not_guessed() {
    let (target, source, annotations) = (
        WorkTarget::default(),
        WorkSource::default(),
        BTreeMap::new(),
    );
    let mut spec = work_spec(&subject(&target, &source, &annotations), &apply(true), "").unwrap();
    spec.object = None;
    assert!(work_action(&spec).is_err());
    spec.action = "Explode".into();
    assert!(work_action(&spec).is_err());
}

#[test]
fn the_plan_sees_the_reported_copy_or_nothing() {
    let (target, source, annotations) = (
        WorkTarget::default(),
        WorkSource::default(),
        BTreeMap::new(),
    );
    let spec = work_spec(&subject(&target, &source, &annotations), &apply(true), "").unwrap();
    assert_eq!(observation(None), MemberObservation::Absent);
    assert_eq!(
        observation(Some(&work(spec.clone(), 1, None))),
        MemberObservation::Absent
    );
    let member = MemberObject {
        managed_label: Some("true".into()),
        version: "rv:7".into(),
        uid: Some("u".into()),
        readiness: Readiness::NotReady("0 of 1 replicas available".into()),
        ..MemberObject::default()
    };
    let reported = WorkStatus {
        copy: Some(copy_of(Some(&member))),
        ..WorkStatus::default()
    };
    assert_eq!(
        observation(Some(&work(spec.clone(), 1, Some(reported)))),
        MemberObservation::Present(member)
    );
    let gone = WorkStatus {
        copy: Some(copy_of(None)),
        ..WorkStatus::default()
    };
    assert_eq!(
        observation(Some(&work(spec, 1, Some(gone)))),
        MemberObservation::Absent
    );
}

#[test]
fn outcomes_follow_the_report_for_the_current_generation_only() {
    let (target, source, annotations) = (
        WorkTarget::default(),
        WorkSource::default(),
        BTreeMap::new(),
    );
    let action = apply(false);
    let spec = work_spec(&subject(&target, &source, &annotations), &action, "").unwrap();
    // Never reported: pending, no entry yet.
    let fresh = outcome(&action, &work(spec.clone(), 1, None));
    assert!(fresh.pending);
    assert_eq!(
        fresh.status, None,
        "no status before the agent's first report"
    );
    assert_eq!(fresh.version, None);
    // Reported Ok on generation 1, now at 2: pending, the last status meanwhile.
    let ok = WorkStatus {
        observed_generation: Some(1),
        result: WORK_RESULT_OK.into(),
        applied_version: Some("rv:9".into()),
        applied_hash: Some("h1".into()),
        ..WorkStatus::default()
    };
    let stale = outcome(&action, &work(spec.clone(), 2, Some(ok.clone())));
    assert!(stale.pending);
    assert_eq!(stale.status, Some(PropagationStatus::Ok));
    assert_eq!(
        stale.version, None,
        "no version before the agent applied this request"
    );
    // Reported on the current generation: the agent's result and version.
    let current = outcome(&action, &work(spec.clone(), 1, Some(ok)));
    assert!(!current.pending);
    assert_eq!(current.status, Some(PropagationStatus::Ok));
    assert_eq!(current.version.as_deref(), Some("rv:9"));
    // A failure keeps its status, message and transience; no version.
    let failed = WorkStatus {
        observed_generation: Some(1),
        result: "UpdateFailed".into(),
        message: Some("admission webhook denied".into()),
        transient: true,
        applied_version: Some("rv:9".into()),
        ..WorkStatus::default()
    };
    let failed = outcome(&action, &work(spec.clone(), 1, Some(failed)));
    assert_eq!(failed.status, Some(PropagationStatus::UpdateFailed));
    assert!(failed.transient);
    assert_eq!(failed.version, None);
    // An unknown result is a failure that says so, never Ok.
    let odd = WorkStatus {
        observed_generation: Some(1),
        result: "Splendid".into(),
        ..WorkStatus::default()
    };
    let odd = outcome(&action, &work(spec, 1, Some(odd)));
    assert_eq!(odd.status, Some(PropagationStatus::UpdateFailed));
    assert!(odd.message.unwrap().contains("Splendid"));
}

#[test]
fn removals_wait_until_done_and_then_leave_no_entry_for_a_label_removal() {
    let (target, source, annotations) = (
        WorkTarget::default(),
        WorkSource::default(),
        BTreeMap::new(),
    );
    let subject = subject(&target, &source, &annotations);
    let unlabel = ClusterAction::RemoveManagedLabel;
    let spec = work_spec(&subject, &unlabel, "").unwrap();
    let pending = work(spec.clone(), 1, None);
    assert!(outcome(&unlabel, &pending).pending);
    assert_eq!(
        work_fate(&pending, None, true),
        WorkFate::Keep,
        "an unlabel not done stays"
    );
    assert_eq!(orphaned_work_fate(&pending), WorkFate::Keep);
    let done = WorkStatus {
        observed_generation: Some(1),
        result: WORK_RESULT_DONE.into(),
        ..WorkStatus::default()
    };
    let done = work(spec, 1, Some(done));
    assert_eq!(outcome(&unlabel, &done).status, None);
    assert_eq!(work_fate(&done, None, true), WorkFate::Delete);
    assert_eq!(orphaned_work_fate(&done), WorkFate::Delete);

    let delete = ClusterAction::Delete(DeleteAction {
        options: None,
        uid: None,
    });
    let spec = work_spec(&subject, &delete, "").unwrap();
    let pending = work(spec, 1, None);
    assert_eq!(
        outcome(&delete, &pending).status,
        Some(PropagationStatus::WaitingForRemoval)
    );
    // Placed there again while the agent is away: the deletion is withdrawn.
    let not_ready = ClusterAction::Blocked {
        status: PropagationStatus::ClusterNotReady,
        message: String::new(),
    };
    assert_eq!(
        work_fate(&pending, Some(&not_ready), false),
        WorkFate::Delete
    );
    assert_eq!(work_fate(&pending, None, false), WorkFate::Keep);
    assert_eq!(orphaned_work_fate(&pending), WorkFate::Keep);
}

#[test]
fn a_copy_reads_as_the_push_cache_shows_it() {
    let object = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "uid": "u1", "generation": 3, "resourceVersion": "77",
            "labels": {"kubefed.io/managed": "true"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "a": "b"}},
        "spec": {"replicas": 2},
        "status": {"replicas": 2, "availableReplicas": 1, "updatedReplicas": 2, "observedGeneration": 3}
    });
    let copy = member_object(&object, "apps", "Deployment", true);
    assert!(copy.is_managed());
    assert_eq!(copy.version, "gen:3");
    assert_eq!(copy.uid.as_deref(), Some("u1"));
    assert_eq!(
        copy.annotations.len(),
        1,
        "kubectl's copy of the object is not kept"
    );
    assert!(!copy.readiness.is_ready(), "1 of 2 available");
    assert!(copy.remote_status.is_some());
    assert!(
        member_object(&object, "apps", "Deployment", false)
            .remote_status
            .is_none()
    );
}

#[test]
fn unjoin_deletes_exactly_the_reported_managed_copy() {
    let (target, source, annotations) = (
        WorkTarget::default(),
        WorkSource::default(),
        BTreeMap::new(),
    );
    let spec = work_spec(&subject(&target, &source, &annotations), &apply(false), "").unwrap();
    assert_eq!(
        removal_request(&work(spec.clone(), 1, None)),
        None,
        "nothing reported"
    );
    let managed = MemberObject {
        managed_label: Some("true".into()),
        uid: Some("u7".into()),
        ..MemberObject::default()
    };
    let reported = WorkStatus {
        observed_generation: Some(1),
        result: WORK_RESULT_OK.into(),
        copy: Some(copy_of(Some(&managed))),
        ..WorkStatus::default()
    };
    let request = removal_request(&work(spec.clone(), 1, Some(reported.clone()))).unwrap();
    assert_eq!(
        work_action(&request),
        Ok(ClusterAction::Delete(DeleteAction {
            options: None,
            uid: Some("u7".into())
        }))
    );
    let unmanaged = WorkStatus {
        copy: Some(copy_of(Some(&MemberObject {
            uid: Some("u8".into()),
            ..MemberObject::default()
        }))),
        ..reported.clone()
    };
    assert_eq!(
        removal_request(&work(spec.clone(), 1, Some(unmanaged))),
        None
    );
    // Done only once the agent reported on the request's generation.
    assert!(!removal_done(&work(request.clone(), 2, Some(reported))));
    let done = WorkStatus {
        observed_generation: Some(2),
        result: WORK_RESULT_DONE.into(),
        ..WorkStatus::default()
    };
    assert!(removal_done(&work(request, 2, Some(done))));
}

#[test]
fn works_the_plan_no_longer_needs_become_tombstones_unless_nothing_is_left() {
    let (target, source, annotations) = (
        WorkTarget::default(),
        WorkSource::default(),
        BTreeMap::new(),
    );
    let spec = work_spec(&subject(&target, &source, &annotations), &apply(true), "").unwrap();
    let up_to_date = ClusterAction::UpToDate;
    let never_reported = work(spec.clone(), 1, None);
    assert_eq!(
        work_fate(&never_reported, Some(&up_to_date), false),
        WorkFate::Keep
    );
    // Not reported yet: the agent may have written the copy: a tombstone, no UID (the
    // agent's guard decides on the live copy).
    let WorkFate::Rewrite(tombstone) = work_fate(&never_reported, None, false) else {
        panic!("a work whose copy may exist is not simply dropped");
    };
    assert_eq!(
        work_action(&tombstone),
        Ok(ClusterAction::Delete(DeleteAction {
            options: None,
            uid: None
        }))
    );
    let WorkFate::Rewrite(orphan) = work_fate(&never_reported, None, true) else {
        panic!("an orphaning deletion keeps a label removal");
    };
    assert_eq!(work_action(&orphan), Ok(ClusterAction::RemoveManagedLabel));
    assert_eq!(orphan.object, None, "nothing of the object is kept");
    // Reported with a managed copy: the tombstone names it.
    let managed = MemberObject {
        managed_label: Some("true".into()),
        uid: Some("u3".into()),
        ..MemberObject::default()
    };
    let reported = WorkStatus {
        observed_generation: Some(1),
        result: WORK_RESULT_OK.into(),
        copy: Some(copy_of(Some(&managed))),
        ..WorkStatus::default()
    };
    let with_copy = work(spec.clone(), 1, Some(reported.clone()));
    let WorkFate::Rewrite(tombstone) = orphaned_work_fate(&with_copy) else {
        panic!("a work of a deleted object with a copy becomes a tombstone");
    };
    assert_eq!(tombstone.uid.as_deref(), Some("u3"));
    // Reported, no copy left: the work goes.
    let gone = WorkStatus {
        copy: Some(copy_of(None)),
        ..reported
    };
    assert_eq!(
        work_fate(&work(spec, 1, Some(gone)), None, false),
        WorkFate::Delete
    );
}

#[test]
fn a_deletion_without_uid_touches_only_this_control_planes_managed_copy() {
    let owned = MemberObject {
        managed_label: Some("true".into()),
        uid: Some("u1".into()),
        annotations: BTreeMap::from([(
            crate::gc::OWNER_ANNOTATION.to_owned(),
            crate::gc::owner("plane", "obj"),
        )]),
        ..MemberObject::default()
    };
    assert_eq!(
        delete_guard(Some(&owned), Some("plane")),
        Some(ClusterAction::Delete(DeleteAction {
            options: None,
            uid: Some("u1".into())
        }))
    );
    assert_eq!(
        delete_guard(Some(&owned), Some("other")),
        None,
        "another plane's"
    );
    assert_eq!(
        delete_guard(Some(&owned), None),
        None,
        "unknown is never a yes"
    );
    let unproven = MemberObject {
        managed_label: Some("true".into()),
        ..MemberObject::default()
    };
    assert_eq!(
        delete_guard(Some(&unproven), Some("plane")),
        Some(ClusterAction::RemoveManagedLabel)
    );
    assert_eq!(
        delete_guard(Some(&MemberObject::default()), Some("plane")),
        None,
        "unmanaged"
    );
    assert_eq!(delete_guard(None, Some("plane")), None);
}
