//! FederatedTypeConfig: the API resource, the status types, defaulting.

use hubfed_api::defaulttypes::default_federated_type_configs;

use super::*;

fn kubefed_deployments_ftc() -> Value {
    // As KubeFed's chart / `kubefedctl enable deployments.apps` writes it.
    json!({
        "apiVersion": "core.kubefed.io/v1beta1",
        "kind": "FederatedTypeConfig",
        "metadata": {"name": "deployments.apps", "namespace": "kube-federation-system"},
        "spec": {
            "federatedType": {
                "group": "types.kubefed.io",
                "kind": "FederatedDeployment",
                "pluralName": "federateddeployments",
                "scope": "Namespaced",
                "version": "v1beta1",
            },
            "propagation": "Enabled",
            "targetType": {
                "group": "apps",
                "kind": "Deployment",
                "pluralName": "deployments",
                "scope": "Namespaced",
                "version": "v1",
            },
        },
    })
}

fn ftc_with(path: &str, value: Value) -> Value {
    let (parent, member) = path.rsplit_once('/').unwrap();
    with_member(kubefed_deployments_ftc(), parent, member, value)
}

fn ftc_without(parent: &str, member: &str) -> Value {
    without_member(kubefed_deployments_ftc(), parent, member)
}

#[test]
fn default_ftcs_validate() {
    let ftcs = default_federated_type_configs("kube-federation-system");
    assert!(!ftcs.is_empty());
    for ftc in ftcs {
        let name = ftc.metadata.name.clone().unwrap();
        assert_errors(&validate_federated_type_config(&name, &ftc.spec), &[]);
        let raw = serde_json::to_value(&ftc).unwrap();
        assert_errors(&validate_federated_type_config_value(&raw, false), &[]);
    }
}

#[test]
fn kubefed_ftc_manifests_validate() {
    assert_errors(
        &validate_federated_type_config_value(&kubefed_deployments_ftc(), false),
        &[],
    );
    let namespaces = json!({
        "metadata": {"name": "namespaces"},
        "spec": {
            "targetType": {"version": "v1", "kind": "Namespace", "pluralName": "namespaces", "scope": "Cluster"},
            "propagation": "Enabled",
            "federatedType": {"group": "types.kubefed.io", "version": "v1beta1", "kind": "FederatedNamespace", "pluralName": "federatednamespaces", "scope": "Namespaced"},
            "statusType": {"kind": "FederatedNamespaceStatus", "scope": "Namespaced"},
            "statusCollection": "Disabled",
        },
    });
    assert_errors(
        &validate_federated_type_config_value(&namespaces, false),
        &[],
    );
}

#[test]
fn ftc_name_must_match_target() {
    let object = ftc_with("/metadata/name", json!("deployments"));
    assert_errors(
        &validate_federated_type_config_value(&object, false),
        &[
            r#"metadata.name: Invalid value: "deployments": name must be 'TARGET_PLURAL_NAME(.TARGET_GROUP_NAME)', i.e. "deployments.apps""#,
        ],
    );
    let object = ftc_with("/spec/targetType/group", json!("extensions"));
    assert_eq!(
        validate_federated_type_config_value(&object, false).len(),
        1
    );
}

#[test]
fn ftc_is_validated_after_kubefed_defaulting() {
    // Target plural and group come from the name, federated plural from the kind.
    let mut object = ftc_without("/spec/targetType", "pluralName");
    object["spec"]["targetType"]
        .as_object_mut()
        .unwrap()
        .remove("group");
    object["spec"]["federatedType"]
        .as_object_mut()
        .unwrap()
        .remove("pluralName");
    assert_errors(&validate_federated_type_config_value(&object, false), &[]);
}

#[test]
fn ftc_api_resource_rules() {
    let cases = [
        (
            ftc_with("/spec/targetType/group", json!("Apps")),
            r#"spec.targetType.group: Invalid value: "Apps": a lowercase RFC 1123 subdomain"#,
        ),
        (
            ftc_with("/spec/targetType/version", json!("")),
            "spec.targetType.version: Required value",
        ),
        (
            ftc_without("/spec/targetType", "version"),
            "spec.targetType.version: Required value",
        ),
        (
            ftc_with("/spec/targetType/version", json!("V1")),
            r#"spec.targetType.version: Invalid value: "V1": a DNS-1035 label"#,
        ),
        (
            ftc_with("/spec/targetType/kind", json!("")),
            "spec.targetType.kind: Required value",
        ),
        (
            ftc_with("/spec/targetType/kind", json!("Deploy_ment")),
            r#"spec.targetType.kind: Invalid value: "Deploy_ment": a DNS-1035 label"#,
        ),
        (
            ftc_with(
                "/spec/federatedType/pluralName",
                json!("federated.deployments"),
            ),
            r#"spec.federatedType.pluralName: Invalid value: "federated.deployments": a DNS-1035 label"#,
        ),
        (
            ftc_with("/spec/federatedType/group", json!("")),
            "spec.federatedType.group: Required value",
        ),
        (
            ftc_with("/spec/federatedType/group", json!("types")),
            r#"spec.federatedType.group: Invalid value: "types": should be a domain with at least one dot"#,
        ),
        (
            ftc_with("/spec/targetType/scope", json!("Global")),
            r#"spec.targetType.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced""#,
        ),
        (
            ftc_with("/spec/targetType/scope", json!("")),
            "spec.targetType.scope: Required value",
        ),
        (
            ftc_without("/spec/federatedType", "scope"),
            "spec.federatedType.scope: Required value",
        ),
        (
            ftc_with("/spec/propagation", json!("On")),
            r#"spec.propagation: Unsupported value: "On": supported values: "Enabled", "Disabled""#,
        ),
        (
            ftc_without("/spec", "propagation"),
            "spec.propagation: Required value",
        ),
        (
            ftc_with("/spec/statusCollection", json!("")),
            "spec.statusCollection: Required value",
        ),
        (
            ftc_with("/spec/statusCollection", json!("Yes")),
            r#"spec.statusCollection: Unsupported value: "Yes": supported values: "Enabled", "Disabled""#,
        ),
        (
            ftc_with("/spec/targetType/version", json!(1)),
            r#"spec.targetType.version: Invalid value: "number": must be of type string"#,
        ),
        (
            ftc_with("/spec/targetType", json!("apps/v1")),
            r#"spec.targetType: Invalid value: "string": must be of type object"#,
        ),
    ];
    for (object, expected) in cases {
        let errors = strings(&validate_federated_type_config_value(&object, false));
        assert!(
            errors.iter().any(|e| e.starts_with(expected)),
            "{expected:?} not in {errors:#?}"
        );
    }
}

#[test]
fn ftc_status_type_rules() {
    let object = ftc_with(
        "/spec/statusType",
        json!({"kind": "DeploymentStatus", "scope": "Namespaced", "group": "status"}),
    );
    assert_errors(
        &validate_federated_type_config_value(&object, false),
        &[
            r#"spec.statusType.group: Invalid value: "status": should be a domain with at least one dot"#,
        ],
    );
    // Group and version default to the federated type's.
    let object = ftc_with(
        "/spec/statusType",
        json!({"kind": "DeploymentStatus", "scope": "Namespaced"}),
    );
    assert_errors(&validate_federated_type_config_value(&object, false), &[]);
}

#[test]
fn ftc_missing_target_reports_every_field() {
    let object = ftc_without("/spec", "targetType");
    assert_errors(
        &validate_federated_type_config_value(&object, false),
        &[
            // Plural and group are defaulted from the name.
            "spec.targetType.scope: Required value",
            "spec.targetType.version: Required value",
            "spec.targetType.kind: Required value",
        ],
    );
}

#[test]
fn ftc_status_rules() {
    let ok = json!({"status": {"observedGeneration": 3, "propagationController": "Running", "statusController": "NotRunning"}});
    assert_errors(&validate_federated_type_config_value(&ok, true), &[]);
    let negative =
        json!({"status": {"observedGeneration": -1, "propagationController": "Running"}});
    assert_errors(
        &validate_federated_type_config_value(&negative, true),
        &["status.observedGeneration: Invalid value: -1: must be greater than or equal to 0"],
    );
    assert_errors(
        &validate_federated_type_config_value(&json!({}), true),
        &["status.propagationController: Required value"],
    );
    let bad = json!({"status": {"propagationController": "Stopped", "statusController": ""}});
    assert_errors(
        &validate_federated_type_config_value(&bad, true),
        &[
            r#"status.propagationController: Unsupported value: "Stopped": supported values: "Running", "NotRunning""#,
            "status.statusController: Required value",
        ],
    );
    // The status subresource does not look at the spec.
    let mut with_bad_spec = ftc_with("/metadata/name", json!("wrong"));
    with_bad_spec["status"] = ok["status"].clone();
    assert_errors(
        &validate_federated_type_config_value(&with_bad_spec, true),
        &[],
    );
}
