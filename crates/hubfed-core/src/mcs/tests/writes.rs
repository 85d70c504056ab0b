//! Tests of `needs_write`, `export_conditions` and `cluster_set_property`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::json;

use super::super::*;
use super::at;

#[test]
fn a_body_already_in_the_live_object_needs_no_write() {
    let live = json!({
        "metadata": {"name": "a", "uid": "u", "labels": {"x": "1", "y": "2"}},
        "spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}],
            "clusterIP": "10.0.0.1"},
    });
    let desired = json!({
        "metadata": {"name": "a", "labels": {"x": "1"}},
        "spec": {"ports": [{"port": 80, "protocol": "TCP"}]},
    });
    assert!(!needs_write(Some(&live), &desired));
    assert!(needs_write(None, &desired), "an absent object is written");
}

#[test]
fn a_changed_value_or_a_removed_list_item_needs_a_write() {
    let live = json!({"spec": {"ports": [{"port": 80}, {"port": 81}]}});
    assert!(needs_write(
        Some(&live),
        &json!({"spec": {"ports": [{"port": 80}]}})
    ));
    assert!(needs_write(
        Some(&live),
        &json!({"spec": {"ports": [{"port": 80}, {"port": 82}]}})
    ));
    assert!(needs_write(Some(&live), &json!({"spec": {"type": "x"}})));
    assert!(
        !needs_write(Some(&live), &json!({"spec": {"ips": [], "labels": {}}})),
        "empty lists and maps are what the API server keeps of them: nothing"
    );
}

fn status(valid: bool, conflict: bool) -> ExportStatus {
    let condition = |status, reason: &str| ExportCondition {
        status,
        reason: reason.to_owned(),
        message: format!("{reason} message"),
    };
    ExportStatus {
        valid: condition(valid, if valid { "Valid" } else { "NoService" }),
        conflict: condition(
            conflict,
            if conflict {
                "PortConflict"
            } else {
                "NoConflicts"
            },
        ),
    }
}

#[test]
fn unchanged_conditions_keep_their_transition_times() {
    let first = export_conditions(
        &status(true, false),
        ExportReadiness::Exported,
        &[],
        &at(10),
    );
    let types: Vec<(&str, &str, &str)> = first
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
        .collect();
    assert_eq!(
        types,
        [
            ("Valid", "True", "Valid"),
            ("Conflict", "False", "NoConflicts"),
            ("Ready", "True", "Exported"),
        ]
    );
    let again = export_conditions(
        &status(true, false),
        ExportReadiness::Exported,
        &first,
        &at(20),
    );
    assert_eq!(
        again, first,
        "nothing changed: the same conditions, the same times"
    );

    let conflicted = export_conditions(
        &status(true, true),
        ExportReadiness::Exported,
        &first,
        &at(30),
    );
    let times: Vec<_> = conflicted
        .iter()
        .map(|c| c.last_transition_time.clone())
        .collect();
    assert_eq!(
        times,
        [at(10), at(30), at(10)],
        "only Conflict transitioned"
    );
}

#[test]
fn an_invalid_export_is_not_ready() {
    let conditions: Vec<Condition> =
        export_conditions(&status(false, false), ExportReadiness::Failed, &[], &at(1));
    assert_eq!(conditions[0].status, "False");
    assert_eq!(conditions[2].reason, "Failed");
}

#[test]
fn another_cluster_sets_property_is_never_rewritten() {
    assert_eq!(cluster_set_property(None, "set"), ClusterSetProperty::Write);
    assert_eq!(
        cluster_set_property(Some("set"), "set"),
        ClusterSetProperty::Held
    );
    let ClusterSetProperty::Refused(message) = cluster_set_property(Some("other"), "set") else {
        panic!("another ClusterSet's member is refused");
    };
    assert!(message.contains("\"other\""), "{message}");
}

#[test]
fn a_refused_members_export_says_why_and_only_that() {
    let refusal = "The cluster id \"Bad_ID\" (its ClusterProperty) is not valid.";
    let live = export_conditions(
        &status(true, false),
        ExportReadiness::Exported,
        &[],
        &at(10),
    );
    let first = refused_export_conditions(refusal, &live, &at(20));
    assert_eq!(
        first.len(),
        1,
        "Valid and Conflict are not evaluated: {first:?}"
    );
    let ready = &first[0];
    assert_eq!(
        (
            ready.type_.as_str(),
            ready.status.as_str(),
            ready.reason.as_str()
        ),
        ("Ready", "False", "Failed")
    );
    assert!(ready.message.contains("takes no part") && ready.message.contains("Bad_ID"));
    assert_eq!(ready.last_transition_time, at(20), "True became False now");
    let again = refused_export_conditions(refusal, &first, &at(30));
    assert_eq!(again, first, "an unchanged refusal is no change");
}
