use super::*;

fn people() -> Vec<String> {
    DEFAULT_PEOPLE.iter().map(|p| (*p).to_owned()).collect()
}

fn change(manager: &str, field: &str) -> FieldChange {
    FieldChange {
        manager: manager.into(),
        field: field.into(),
    }
}

fn entry(manager: &str, operation: &str, fields: Value) -> ManagedFieldsEntry {
    ManagedFieldsEntry {
        manager: Some(manager.into()),
        operation: Some(operation.into()),
        api_version: Some("v1".into()),
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(fields)),
        ..Default::default()
    }
}

#[test]
fn kubectl_and_its_subcommands_are_people() {
    let people = people();
    for manager in [
        "kubectl",
        "kubectl-edit",
        "kubectl-patch",
        "kubectl-client-side-apply",
        "kubectl-label",
    ] {
        assert!(is_person(manager, &people), "{manager}");
    }
    for manager in [
        "before-first-apply",
        "kube-controller-manager",
        "hubfed",
        "istio-sidecar-injector",
        "kubectlx",
    ] {
        assert!(!is_person(manager, &people), "{manager}");
    }
}

#[test]
fn annotation_modes() {
    assert_eq!(drift_mode(None), Ok(DriftMode::Revert));
    assert_eq!(drift_mode(Some("report")), Ok(DriftMode::Report));
    assert_eq!(drift_mode(Some("revert-all")), Ok(DriftMode::RevertAll));
    assert!(
        drift_mode(Some("never"))
            .unwrap_err()
            .contains("revert-all")
    );
}

#[test]
fn conflicts_name_their_manager() {
    assert_eq!(
        conflict_manager("conflict with \"kubectl-edit\" using v1"),
        Some("kubectl-edit")
    );
    assert_eq!(conflict_manager("conflict with \"hpa\""), Some("hpa"));
    assert_eq!(conflict_manager("something else"), None);
}

#[test]
fn people_reverted_controllers_kept_by_mode() {
    let conflicts = vec![
        change("kubectl-edit", ".data.k"),
        change("kube-controller-manager", ".spec.replicas"),
    ];
    let nobody = |_: &str| false;
    let d = resolve_conflicts(conflicts.clone(), DriftMode::Revert, &people(), nobody);
    assert_eq!(d.revert, [conflicts[0].clone()]);
    assert_eq!(d.keep, [conflicts[1].clone()]);
    let d = resolve_conflicts(conflicts.clone(), DriftMode::Report, &people(), nobody);
    assert_eq!(d.reported, [conflicts[0].clone()]);
    assert_eq!(d.keep, [conflicts[1].clone()]);
    assert_eq!(d.left_out().count(), 2);
    let d = resolve_conflicts(conflicts.clone(), DriftMode::RevertAll, &people(), nobody);
    assert_eq!(d.revert, conflicts);
    assert!(d.keep.is_empty());
    // A field hubfed still co-owns: the template changed it, whoever else owns it.
    let d = resolve_conflicts(conflicts.clone(), DriftMode::Revert, &people(), |f| {
        f == ".spec.replicas"
    });
    assert_eq!(d.stale, [conflicts[1].clone()]);
    assert!(d.keep.is_empty());
}

#[test]
fn fields_are_removed_by_their_api_server_names() {
    let mut body = json!({
        "spec": {
            "replicas": 3,
            "template": {"spec": {"containers": [
                {"name": "app", "image": "a:1"},
                {"name": "side", "image": "s:1"},
            ]}},
            "ports": [{"port": 80, "protocol": "TCP"}, {"port": 81, "protocol": "TCP"}],
        },
        "data": {"a.b": "x"},
    });
    assert!(remove_field(&mut body, ".spec.replicas"));
    assert!(remove_field(
        &mut body,
        ".spec.template.spec.containers[name=\"side\"].image"
    ));
    assert!(remove_field(
        &mut body,
        ".spec.ports[port=81,protocol=\"TCP\"]"
    ));
    assert!(!remove_field(&mut body, ".spec.missing"));
    assert!(!remove_field(&mut body, "not a path"));
    // Names with dots are matched against the body's keys.
    let mut dotted = json!({
        "data": {"app.properties": "x", "app": {"properties": "nested"}},
        "metadata": {"labels": {"app.kubernetes.io/name": "web"}},
        "spec": {"finalizers": ["a", "b"]},
    });
    assert!(remove_field(&mut dotted, ".data.app.properties"));
    assert!(remove_field(
        &mut dotted,
        ".metadata.labels.app.kubernetes.io/name"
    ));
    assert!(remove_field(&mut dotted, ".spec.finalizers[=\"b\"]"));
    assert_eq!(
        dotted,
        json!({
            "data": {"app": {"properties": "nested"}},
            "metadata": {"labels": {}},
            "spec": {"finalizers": ["a"]},
        })
    );
    assert_eq!(
        body,
        json!({
            "spec": {
                "template": {"spec": {"containers": [
                    {"name": "app", "image": "a:1"},
                    {"name": "side"},
                ]}},
                "ports": [{"port": 80, "protocol": "TCP"}],
            },
            "data": {"a.b": "x"},
        })
    );
}

#[test]
fn people_fields_are_read_from_managed_fields() {
    let managed = [
        entry("hubfed", "Apply", json!({"f:data": {"f:k": {}}})),
        entry(
            "kubectl-edit",
            "Update",
            json!({"f:data": {"f:added": {}}, "f:metadata": {"f:labels": {"f:x": {}}}}),
        ),
        entry(
            "kube-controller-manager",
            "Update",
            json!({"f:spec": {"f:replicas": {}}}),
        ),
        entry(
            "kubectl-patch",
            "Update",
            json!({"f:spec": {"f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:name": {}}}}}),
        ),
    ];
    assert_eq!(
        people_fields(&managed, "hubfed", &people(), &member_fields(&[])),
        [
            change("kubectl-edit", ".data.added"),
            change("kubectl-edit", ".metadata.labels.x"),
            change("kubectl-patch", ".spec.ports[port=80,protocol=\"TCP\"]"),
            change(
                "kubectl-patch",
                ".spec.ports[port=80,protocol=\"TCP\"].name"
            ),
        ]
    );
}

#[test]
fn take_over_moves_people_fields_into_hubfeds_apply_entry() {
    let managed = [
        entry("hubfed", "Apply", json!({"f:data": {"f:k": {}}})),
        entry("kubectl-edit", "Update", json!({"f:data": {"f:added": {}}})),
        entry(
            "kube-controller-manager",
            "Update",
            json!({"f:metadata": {"f:annotations": {"f:x": {}}}}),
        ),
    ];
    let member = member_fields(&[]);
    let patch = take_over_patch(&managed, "hubfed", &people(), &member, "42").unwrap();
    assert_eq!(patch["metadata"]["resourceVersion"], "42");
    let entries = patch["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0]["manager"], "hubfed");
    assert_eq!(
        entries[0]["fieldsV1"],
        json!({"f:data": {"f:k": {}, "f:added": {}}})
    );
    assert_eq!(entries[1]["manager"], "kube-controller-manager");
    // Nothing of people's, or no entry of hubfed's: nothing to do.
    assert_eq!(
        take_over_patch(&managed[..1], "hubfed", &people(), &member, "42"),
        None
    );
    assert_eq!(
        take_over_patch(&managed[1..], "hubfed", &people(), &member, "42"),
        None
    );
}

#[test]
fn records_list_at_most_ten_fields() {
    let changes: Vec<FieldChange> = (0..12)
        .map(|i| change("kubectl-edit", &format!(".data.k{i:02}")))
        .collect();
    let record = drift_record(&changes, "Reverted", "2026-11-25T00:00:00Z");
    assert_eq!(record.fields.len(), 11);
    assert_eq!(record.fields[10], "… and 2 more");
    assert_eq!(record.managers, ["kubectl-edit"]);
    assert_eq!(record.action, "Reverted");
}

#[test]
fn the_members_fields_stay_the_members() {
    let managed = [
        entry("hubfed", "Apply", json!({"f:spec": {"f:template": {}}})),
        entry(
            "kubectl-annotate",
            "Update",
            json!({"f:metadata": {"f:annotations": {"f:note": {}}}}),
        ),
        entry(
            "kubectl-scale",
            "Update",
            json!({"f:spec": {"f:replicas": {}, "f:paused": {}}}),
        ),
    ];
    let member = member_fields(&["/spec/replicas".to_owned()]);
    assert_eq!(member[3], ".spec.replicas");
    assert_eq!(
        people_fields(&managed, "hubfed", &people(), &member),
        [change("kubectl-scale", ".spec.paused")]
    );
    let patch = take_over_patch(&managed, "hubfed", &people(), &member, "7").unwrap();
    let entries = patch["metadata"]["managedFields"].as_array().unwrap();
    let by = |m: &str| entries.iter().find(|e| e["manager"] == m).cloned();
    assert_eq!(
        by("hubfed").unwrap()["fieldsV1"],
        json!({"f:spec": {"f:template": {}, "f:paused": {}}})
    );
    assert_eq!(
        by("kubectl-scale").unwrap()["fieldsV1"],
        json!({"f:spec": {"f:replicas": {}}})
    );
    assert_eq!(
        by("kubectl-annotate").unwrap()["fieldsV1"],
        json!({"f:metadata": {"f:annotations": {"f:note": {}}}})
    );
    // Only the member's fields touched by people: nothing to hand over.
    assert_eq!(
        take_over_patch(&managed[..2], "hubfed", &people(), &member, "7"),
        None
    );
}

#[test]
fn fields_v1_holds_api_server_field_names() {
    let fields = json!({
        "f:data": {"f:app.properties": {}, "f:k": {}},
        "f:metadata": {"f:labels": {"f:app.kubernetes.io/name": {}}},
        "f:spec": {
            "f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}}},
            "f:finalizers": {"v:\"a\"": {}},
        },
    });
    for field in [
        ".data.app.properties",
        ".data.k",
        ".metadata.labels.app.kubernetes.io/name",
        ".spec.containers[name=\"app\"].image",
        ".spec.containers[name=\"app\"]",
        ".spec.finalizers[=\"a\"]",
        ".spec",
    ] {
        assert!(fields_v1_contains(&fields, field), "{field}");
    }
    for field in [
        ".data.app",
        ".data.other",
        ".spec.containers[name=\"side\"].image",
        ".spec.finalizers[=\"b\"]",
    ] {
        assert!(!fields_v1_contains(&fields, field), "{field}");
    }
}
