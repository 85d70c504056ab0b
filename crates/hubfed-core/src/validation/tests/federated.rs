//! Federated objects: shape, placement, cluster selectors, overrides.

use super::*;

fn federated(spec: Value) -> Value {
    json!({
        "apiVersion": "types.kubefed.io/v1beta1",
        "kind": "FederatedDeployment",
        "metadata": {"name": "web", "namespace": "demo"},
        "spec": spec,
    })
}

fn federated_errors(spec: Value) -> Vec<String> {
    strings(&validate_federated_object(&federated(spec)))
}

#[test]
fn kubefed_federated_objects_validate() {
    let spec = json!({
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
        },
        "placement": {
            "clusters": [{"name": "cluster1"}, {"name": "cluster2"}],
            "clusterSelector": {
                "matchLabels": {"region": "eu"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}],
            },
        },
        "overrides": [
            {"clusterName": "cluster2", "clusterOverrides": [
                {"path": "/spec/replicas", "value": 5},
                {"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}},
                {"op": "remove", "path": "/metadata/labels/app"},
                {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "nginx:2"},
                {"op": "replace", "path": "/apiVersion", "value": "apps/v1"},
                {"path": "/metadata/labels/a~1b", "value": null},
            ]},
            {"clusterName": "cluster1"},
        ],
        "retainReplicas": true,
    });
    assert_eq!(federated_errors(spec), Vec::<String>::new());
    for spec in [
        json!({}),
        json!({"placement": {}}),
        json!({"placement": {"clusters": []}}),
        json!({"placement": {"clusterSelector": {}}}),
        json!({"template": null, "overrides": []}),
    ] {
        assert_eq!(
            federated_errors(spec.clone()),
            Vec::<String>::new(),
            "{spec}"
        );
    }
}

#[test]
fn federated_spec_shape() {
    assert_errors(
        &validate_federated_object(&json!({"metadata": {"name": "x"}})),
        &["spec: Required value"],
    );
    assert_errors(
        &validate_federated_object(&json!({"spec": null})),
        &["spec: Required value"],
    );
    assert_errors(
        &validate_federated_object(&json!({"spec": []})),
        &[r#"spec: Invalid value: "array": must be of type object"#],
    );
    // A spec of the wrong type is one error, not one per missing member.
    assert_errors(
        &validate_federated_type_config_value(
            &json!({"metadata": {"name": "configmaps"}, "spec": "x"}),
            false,
        ),
        &[r#"spec: Invalid value: "string": must be of type object"#],
    );
    assert_errors(
        &validate_kubefed_config_value(&json!({"spec": ["Cluster"]}), None),
        &[r#"spec: Invalid value: "array": must be of type object"#],
    );
    assert_eq!(
        federated_errors(json!({"template": "x", "retainReplicas": "yes"})),
        [
            r#"spec.template: Invalid value: "string": must be of type object"#,
            r#"spec.retainReplicas: Invalid value: "string": must be of type boolean"#,
        ]
    );
}

#[test]
fn federated_placement_rules() {
    assert_eq!(
        federated_errors(json!({"placement": []})),
        [r#"spec.placement: Invalid value: "array": must be of type object"#]
    );
    assert_eq!(
        federated_errors(json!({"placement": {"clusters": {"name": "a"}}})),
        [r#"spec.placement.clusters: Invalid value: "object": must be of type array"#]
    );
    let errors = federated_errors(json!({"placement": {"clusters": [
        {"name": "ok"}, {}, {"name": ""}, {"name": "Bad_Name"}, "c1", {"name": 7},
    ]}}));
    assert_eq!(errors.len(), 5, "{errors:#?}");
    assert_eq!(errors[0], "spec.placement.clusters[1].name: Required value");
    assert_eq!(errors[1], "spec.placement.clusters[2].name: Required value");
    assert!(
        errors[2].starts_with(r#"spec.placement.clusters[3].name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain"#),
        "{errors:#?}"
    );
    assert_eq!(
        errors[3..],
        [
            r#"spec.placement.clusters[4]: Invalid value: "string": must be of type object"#,
            r#"spec.placement.clusters[5].name: Invalid value: "number": must be of type string"#,
        ]
    );
}

#[test]
fn federated_cluster_selector_rules() {
    let selector =
        |selector: Value| federated_errors(json!({"placement": {"clusterSelector": selector}}));
    assert_eq!(
        selector(json!("region=eu")),
        [r#"spec.placement.clusterSelector: Invalid value: "string": must be of type object"#]
    );
    assert_eq!(
        selector(json!({"matchLabels": {"region": "eu west", "tier": 1}})),
        [
            r#"spec.placement.clusterSelector.matchLabels[region]: Invalid value: invalid label value "eu west" for key "region": must be 63 characters or less, consist of alphanumeric characters, '-', '_' or '.', and start and end with an alphanumeric character"#,
            r#"spec.placement.clusterSelector.matchLabels[tier]: Invalid value: "number": must be of type string"#,
        ]
    );
    assert_eq!(
        selector(json!({"matchExpressions": [
            {"key": "region", "operator": "In", "values": ["eu"]},
            {"key": "region", "operator": "Gt", "values": ["1"]},
            {"key": "region", "operator": "In", "values": []},
            {"operator": "Exists"},
            {"key": "a", "operator": "In", "values": [1]},
            "region",
        ]})),
        [
            r#"spec.placement.clusterSelector.matchExpressions[1]: Invalid value: "Gt" is not a valid label selector operator"#,
            r#"spec.placement.clusterSelector.matchExpressions[2]: Invalid value: key "region": for 'In', 'NotIn' operators, values set can't be empty"#,
            "spec.placement.clusterSelector.matchExpressions[3].key: Required value",
            r#"spec.placement.clusterSelector.matchExpressions[4].values[0]: Invalid value: "number": must be of type string"#,
            r#"spec.placement.clusterSelector.matchExpressions[5]: Invalid value: "string": must be of type object"#,
        ]
    );
}

#[test]
fn federated_override_rules() {
    let overrides = |overrides: Value| federated_errors(json!({"overrides": overrides}));
    assert_eq!(
        overrides(json!({"clusterName": "c1"})),
        [r#"spec.overrides: Invalid value: "object": must be of type array"#]
    );
    assert_eq!(
        overrides(json!([
            {"clusterName": "c1", "clusterOverrides": [{"path": "/metadata/labels/a", "value": "x"}]},
            {"clusterOverrides": []},
            {"clusterName": "c1"},
            {"clusterName": "c2", "clusterOverrides": {"path": "/x"}},
        ])),
        [
            "spec.overrides[1].clusterName: Required value",
            r#"spec.overrides[2].clusterName: Duplicate value: "c1""#,
            r#"spec.overrides[3].clusterOverrides: Invalid value: "object": must be of type array"#,
        ]
    );
    assert_eq!(
        overrides(json!([{"clusterName": "c1", "clusterOverrides": [
            {"path": "/spec/replicas", "value": 1},
            {"path": "/metadata/name", "value": "other"},
            {"op": "copy", "path": "/spec/a", "value": 1},
            {"op": "add", "path": "specb", "value": 1},
            {"op": "replace", "path": ""},
            {"path": "", "value": null},
            {"op": "remove"},
            {"op": "remove", "path": "/spec/replicas"},
            {"op": "remove", "path": ""},
            {"op": 1, "path": "/kind", "value": "Other"},
            "remove",
        ]}])),
        [
            r#"spec.overrides[0].clusterOverrides[1].path: Forbidden: "/metadata/name" cannot be overridden"#,
            r#"spec.overrides[0].clusterOverrides[2].op: Unsupported value: "copy": supported values: "", "add", "remove", "replace""#,
            r#"spec.overrides[0].clusterOverrides[3].path: Invalid value: "specb": must be a JSON pointer starting with "/" (a path without "/" never applies)"#,
            r#"spec.overrides[0].clusterOverrides[4].path: Invalid value: "": replacing the whole object (empty path) needs a value"#,
            r#"spec.overrides[0].clusterOverrides[5].path: Duplicate value: """#,
            "spec.overrides[0].clusterOverrides[6].path: Required value",
            r#"spec.overrides[0].clusterOverrides[7].path: Duplicate value: "/spec/replicas""#,
            r#"spec.overrides[0].clusterOverrides[8].path: Duplicate value: """#,
            r#"spec.overrides[0].clusterOverrides[9].op: Invalid value: "number": must be of type string"#,
            r#"spec.overrides[0].clusterOverrides[9].path: Forbidden: "/kind" cannot be overridden"#,
            r#"spec.overrides[0].clusterOverrides[10]: Invalid value: "string": must be of type object"#,
        ]
    );
    for path in FORBIDDEN_PATHS {
        let errors = overrides(
            json!([{"clusterName": "c1", "clusterOverrides": [{"op": "remove", "path": path}]}]),
        );
        assert_eq!(
            errors,
            [format!(
                r#"spec.overrides[0].clusterOverrides[0].path: Forbidden: "{path}" cannot be overridden"#
            )]
        );
    }
    // Duplicate paths are per cluster.
    assert_eq!(
        overrides(json!([
            {"clusterName": "c1", "clusterOverrides": [{"path": "/spec/replicas", "value": 1}]},
            {"clusterName": "c2", "clusterOverrides": [{"path": "/spec/replicas", "value": 2}]},
        ])),
        Vec::<String>::new()
    );
}

#[test]
fn accepted_overrides_are_accepted_by_the_controller() {
    let spec = json!({"overrides": [{"clusterName": "c1", "clusterOverrides": [
        {"path": "/spec/replicas", "value": 5},
        {"op": "add", "path": "/metadata/labels/a~1b", "value": "x"},
        {"op": "remove", "path": "/metadata/labels/app"},
        // KubeFed's JSON patch library accepts these, so KubeFed manifests may hold them.
        {"path": "spec/paused", "value": true},
        {"op": "add", "path": "/metadata/labels/a~2b", "value": "y"},
        {"op": "replace", "path": "/spec/template"},
        {"op": "add", "path": "/spec/minReadySeconds"},
        {"path": "", "value": {"kind": "Deployment"}},
    ]}]});
    assert_eq!(federated_errors(spec.clone()), Vec::<String>::new());
    let parsed: hubfed_api::federated::FederatedSpec = serde_json::from_value(spec).unwrap();
    let patch = crate::overrides::patch_for_cluster(parsed.overrides.as_deref(), "c1").unwrap();
    assert_eq!(patch.unwrap().len(), 8);
}

#[test]
fn only_updates_of_what_the_validation_looks_into_are_judged_again() {
    let placement = json!({"clusters": [{"name": "cluster1"}]});
    let old = federated(json!({"template": {"data": {"a": "b"}}, "placement": placement}));
    let needs = |new: &Value| federated_update_needs_validation(&old, new);

    // The template's contents alone, labels, nothing at all: not judged.
    assert!(!needs(&old));
    assert!(!needs(&federated(
        json!({"template": {"data": {"a": "c"}, "metadata": {"labels": {"x": "y"}}}, "placement": placement})
    )));
    let mut labelled = old.clone();
    labelled["metadata"]["labels"] = json!({"team": "a"});
    assert!(!needs(&labelled));
    // The template dropped, or set to null: still nothing the validation refuses.
    assert!(!needs(&federated(json!({"placement": placement}))));
    assert!(!needs(&federated(
        json!({"template": null, "placement": placement})
    )));

    // Anything else in spec: judged.
    assert!(needs(&federated(
        json!({"template": {"data": {"a": "b"}}, "placement": {"clusters": [{"name": "Bad_Name"}]}})
    )));
    assert!(needs(&federated(json!({"template": {"data": {"a": "b"}}}))));
    assert!(needs(&federated(json!({
        "template": {"data": {"a": "b"}}, "placement": placement,
        "overrides": [{"clusterName": "cluster1", "clusterOverrides": [{"path": "x"}]}],
    }))));
    assert!(needs(&federated(
        json!({"template": {"data": {"a": "b"}}, "placement": placement, "retainReplicas": "yes"})
    )));
    assert!(needs(&federated(
        json!({"template": {"data": {"a": "b"}}, "placement": placement, "unknown": 1})
    )));
    // A template that is no object, a spec that is none, a spec added or dropped: judged.
    assert!(needs(&federated(
        json!({"template": "text", "placement": placement})
    )));
    assert!(needs(&federated(json!([]))));
    assert!(needs(&json!({"metadata": {"name": "web"}})));
    let bare = json!({"metadata": {"name": "web"}});
    assert!(federated_update_needs_validation(&bare, &old));
    // Neither has a spec, or the same non-object one: nothing changed.
    assert!(!federated_update_needs_validation(&bare, &bare));
    let listed = federated(json!([1]));
    assert!(!federated_update_needs_validation(&listed, &listed));
}

#[test]
fn an_update_the_webhook_lets_pass_unjudged_has_nothing_the_validation_refuses_that_was_not_there()
{
    // Whatever `federated_update_needs_validation` lets pass, the validation would have
    // given the same verdict as on the old object: the skip never admits a new problem.
    let olds = [
        json!({"template": {"data": {"a": "b"}}, "placement": {"clusters": [{"name": "c1"}]}}),
        json!({"template": {"data": {"a": "b"}}, "placement": {"clusters": [{"name": "Bad_"}]}}),
        json!({"placement": {"clusterSelector": {"matchLabels": {"a": "b"}}}}),
    ];
    let templates = [
        json!({"data": {"a": "c"}}),
        json!({}),
        Value::Null,
        json!("text"),
        json!(7),
    ];
    for old in &olds {
        for template in &templates {
            let mut spec = old.clone();
            spec["template"] = template.clone();
            let (old, new) = (federated(old.clone()), federated(spec));
            if !federated_update_needs_validation(&old, &new) {
                assert_eq!(
                    strings(&validate_federated_object(&new)),
                    strings(&validate_federated_object(&old)),
                    "{new}"
                );
            }
        }
    }
}
