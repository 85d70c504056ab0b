//! KubeFedConfig: durations, leader election, feature gates, health checks, defaulting.

use hubfed_api::kubefedconfig::FEATURE_GATES;

use super::*;

fn defaulted_config() -> Value {
    json!({
        "apiVersion": "core.kubefed.io/v1beta1",
        "kind": "KubeFedConfig",
        "metadata": {"name": "kubefed", "namespace": "kube-federation-system"},
        "spec": serde_json::to_value(KubeFedConfigSpec::with_defaults(ResourceScope::Cluster)).unwrap(),
    })
}

fn config_with(path: &str, value: Value) -> Value {
    let (parent, member) = path.rsplit_once('/').unwrap();
    with_member(defaulted_config(), parent, member, value)
}

fn config_without(path: &str) -> Value {
    let (parent, member) = path.rsplit_once('/').unwrap();
    without_member(defaulted_config(), parent, member)
}

fn config_errors(object: &Value) -> Vec<String> {
    strings(&validate_kubefed_config_value(object, None))
}

#[test]
fn defaulted_configs_validate() {
    for scope in [ResourceScope::Cluster, ResourceScope::Namespaced] {
        let spec = KubeFedConfigSpec::with_defaults(scope);
        assert_errors(&validate_kubefed_config(&spec, None), &[]);
        assert_errors(&validate_kubefed_config(&spec, Some(&spec)), &[]);
    }
    assert_eq!(config_errors(&defaulted_config()), Vec::<String>::new());
}

#[test]
fn kubefed_chart_config_validates() {
    let object = json!({
        "apiVersion": "core.kubefed.io/v1beta1",
        "kind": "KubeFedConfig",
        "metadata": {"name": "kubefed", "namespace": "kube-federation-system"},
        "spec": {
            "scope": "Cluster",
            "controllerDuration": {"availableDelay": "20s", "unavailableDelay": "60s", "cacheSyncTimeout": "5m"},
            "leaderElect": {"leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "5s", "resourceLock": "configmaps"},
            "clusterHealthCheck": {"period": "10s", "failureThreshold": 3, "successThreshold": 1, "timeout": "3s"},
            "syncController": {"maxConcurrentReconciles": 1, "adoptResources": "Enabled"},
            "statusController": {"maxConcurrentReconciles": 1},
            "featureGates": [
                {"name": "PushReconciler", "configuration": "Enabled"},
                {"name": "SchedulerPreferences", "configuration": "Enabled"},
                {"name": "RawResourceStatusCollection", "configuration": "Disabled"},
                {"name": "FederatedIngress", "configuration": "Disabled"},
            ],
        },
    });
    assert_eq!(config_errors(&object), Vec::<String>::new());
}

#[test]
fn config_duration_rules() {
    let cases = [
        (
            config_with("/spec/controllerDuration/availableDelay", json!("0s")),
            "spec.controllerDuration.availableDelay: Invalid value: 0: should be greater than 0",
        ),
        (
            config_with("/spec/controllerDuration/unavailableDelay", json!("-1s")),
            "spec.controllerDuration.unavailableDelay: Invalid value: -1000000000: should be greater than 0",
        ),
        (
            config_with("/spec/controllerDuration/cacheSyncTimeout", json!("0")),
            "spec.controllerDuration.cacheSyncTimeout: Invalid value: 0: should be greater than 0",
        ),
        (
            config_without("/spec/controllerDuration/availableDelay"),
            "spec.controllerDuration.availableDelay: Required value",
        ),
        (
            config_with("/spec/clusterHealthCheck/period", json!("10")),
            r#"spec.clusterHealthCheck.period: Invalid value: "10": must be a Go duration such as "20s" or "1m30s": missing unit"#,
        ),
        (
            config_with("/spec/clusterHealthCheck/timeout", json!("3 s")),
            r#"spec.clusterHealthCheck.timeout: Invalid value: "3 s": must be a Go duration such as "20s" or "1m30s": unknown unit"#,
        ),
        (
            config_with("/spec/clusterHealthCheck/timeout", json!(3)),
            r#"spec.clusterHealthCheck.timeout: Invalid value: "number": must be of type string"#,
        ),
        (
            config_without("/spec/controllerDuration"),
            "spec.controllerDuration: Required value",
        ),
    ];
    for (object, expected) in cases {
        assert_eq!(config_errors(&object), [expected]);
    }
    // A missing cacheSyncTimeout is fine: KubeFed never required it.
    assert_eq!(
        config_errors(&config_without("/spec/controllerDuration/cacheSyncTimeout")),
        Vec::<String>::new()
    );
}

#[test]
fn config_leader_election_rules() {
    let election = |lease: &str, renew: &str, retry: &str| {
        config_with(
            "/spec/leaderElect",
            json!({"leaseDuration": lease, "renewDeadline": renew, "retryPeriod": retry, "resourceLock": "endpoints"}),
        )
    };
    assert_eq!(
        config_errors(&election("15s", "10s", "5s")),
        Vec::<String>::new()
    );
    assert_eq!(
        config_errors(&election("10s", "10s", "5s")),
        [
            "spec.leaderElect.leaseDuration: Invalid value: 10s: leaseDuration must be greater than renewDeadline"
        ]
    );
    assert_eq!(
        config_errors(&election("1m", "6s", "5s")),
        [
            "spec.leaderElect.renewDeadline: Invalid value: 6s: renewDeadline must be greater than retryPeriod*JitterFactor(1.2)"
        ]
    );
    assert_eq!(
        config_errors(&election("1m", "6001ms", "5s")),
        Vec::<String>::new()
    );
    assert_eq!(
        config_errors(&election("1m", "90s", "5s")),
        [
            "spec.leaderElect.leaseDuration: Invalid value: 1m0s: leaseDuration must be greater than renewDeadline"
        ]
    );
    assert_eq!(
        config_errors(&config_without("/spec/leaderElect/resourceLock")),
        ["spec.leaderElect.resourceLock: Required value"]
    );
    assert_eq!(
        config_errors(&config_with(
            "/spec/leaderElect/resourceLock",
            json!("leases")
        )),
        [
            r#"spec.leaderElect.resourceLock: Unsupported value: "leases": supported values: "configmaps", "endpoints""#
        ]
    );
    assert_eq!(
        config_errors(&config_without("/spec/leaderElect/retryPeriod")),
        ["spec.leaderElect.retryPeriod: Required value"]
    );
    assert_eq!(
        config_errors(&config_without("/spec/leaderElect")),
        ["spec.leaderElect: Required value"]
    );
}

#[test]
fn config_feature_gate_rules() {
    let gates = |gates: Value| config_with("/spec/featureGates", gates);
    assert_eq!(
        config_errors(&gates(json!([
            {"name": "PushReconciler", "configuration": "Enabled"},
            {"name": "PushReconciler", "configuration": "Disabled"},
            {"name": "Teleport", "configuration": "Enabled"},
            {"name": "", "configuration": "Enabled"},
            {"name": "SchedulerPreferences", "configuration": "On"},
            {"name": "RawResourceStatusCollection"},
        ]))),
        [
            r#"spec.featureGates[4].configuration: Unsupported value: "On": supported values: "Enabled", "Disabled""#,
            "spec.featureGates[5].configuration: Required value",
            r#"spec.featureGates[1].name: Duplicate value: "PushReconciler""#,
            r#"spec.featureGates[2].name: Unsupported value: "Teleport": supported values: "PushReconciler", "RawResourceStatusCollection", "SchedulerPreferences", "FederatedIngress""#,
            "spec.featureGates[3].name: Required value",
        ]
    );
    assert_eq!(
        config_errors(&config_without("/spec/featureGates")),
        ["spec.featureGates: Required value"]
    );
    for (name, _) in FEATURE_GATES {
        assert!(ACCEPTED_FEATURE_GATES.contains(name), "{name}");
    }
}

#[test]
fn config_health_and_controller_rules() {
    let cases = [
        (
            config_with("/spec/clusterHealthCheck/failureThreshold", json!(0)),
            "spec.clusterHealthCheck.failureThreshold: Invalid value: 0: should be greater than 0",
        ),
        (
            config_with("/spec/clusterHealthCheck/successThreshold", json!(-2)),
            "spec.clusterHealthCheck.successThreshold: Invalid value: -2: should be greater than 0",
        ),
        (
            config_without("/spec/clusterHealthCheck/failureThreshold"),
            "spec.clusterHealthCheck.failureThreshold: Required value",
        ),
        (
            config_with("/spec/clusterHealthCheck/failureThreshold", json!(1.5)),
            r#"spec.clusterHealthCheck.failureThreshold: Invalid value: "number": must be of type integer"#,
        ),
        (
            config_without("/spec/clusterHealthCheck"),
            "spec.clusterHealthCheck: Required value",
        ),
        (
            config_with("/spec/syncController/maxConcurrentReconciles", json!(0)),
            "spec.syncController.maxConcurrentReconciles: Invalid value: 0: should be greater than 0",
        ),
        (
            config_with("/spec/statusController/maxConcurrentReconciles", json!(-1)),
            "spec.statusController.maxConcurrentReconciles: Invalid value: -1: should be greater than 0",
        ),
        (
            config_without("/spec/syncController/adoptResources"),
            "spec.syncController.adoptResources: Required value",
        ),
        (
            config_with("/spec/syncController/adoptResources", json!("Sometimes")),
            r#"spec.syncController.adoptResources: Unsupported value: "Sometimes": supported values: "Enabled", "Disabled""#,
        ),
        (
            config_without("/spec/syncController"),
            "spec.syncController: Required value",
        ),
        (
            config_with("/spec/scope", json!("Global")),
            r#"spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced""#,
        ),
        (config_without("/spec/scope"), "spec.scope: Required value"),
    ];
    for (object, expected) in cases {
        assert_eq!(config_errors(&object), [expected]);
    }
    // Optional sections KubeFed never required.
    assert_eq!(
        config_errors(&config_without("/spec/statusController")),
        Vec::<String>::new()
    );
    assert_eq!(
        config_errors(&config_without(
            "/spec/syncController/maxConcurrentReconciles"
        )),
        Vec::<String>::new()
    );
}

#[test]
fn config_scope_is_immutable() {
    let old = KubeFedConfigSpec::with_defaults(ResourceScope::Cluster);
    let new = KubeFedConfigSpec::with_defaults(ResourceScope::Namespaced);
    assert_errors(
        &validate_kubefed_config(&new, Some(&old)),
        &[r#"spec.scope: Invalid value: "Namespaced": field is immutable"#],
    );
    let old_object = defaulted_config();
    let new_object = config_with("/spec/scope", json!("Namespaced"));
    assert_errors(
        &validate_kubefed_config_value(&new_object, Some(&old_object)),
        &[r#"spec.scope: Invalid value: "Namespaced": field is immutable"#],
    );
    assert_errors(
        &validate_kubefed_config_value(&old_object, Some(&old_object)),
        &[],
    );
    // An unsupported new scope is reported once, not also as a change.
    let bad_object = config_with("/spec/scope", json!("Global"));
    assert_eq!(
        strings(&validate_kubefed_config_value(
            &bad_object,
            Some(&new_object)
        ))
        .len(),
        1
    );
}

#[test]
fn undefaulted_config_reports_what_defaulting_would_fill() {
    let object = json!({"spec": {"scope": "Cluster"}});
    assert_eq!(
        config_errors(&object),
        [
            "spec.controllerDuration: Required value",
            "spec.leaderElect: Required value",
            "spec.featureGates: Required value",
            "spec.clusterHealthCheck: Required value",
            "spec.syncController: Required value",
        ]
    );
}

#[test]
fn defaulting_matches_with_defaults_and_builds_a_patch() {
    let minimal: KubeFedConfigSpec =
        serde_json::from_value(json!({"scope": "Namespaced"})).unwrap();
    let defaulted = default_kubefed_config(&minimal);
    assert_eq!(
        defaulted,
        KubeFedConfigSpec::with_defaults(ResourceScope::Namespaced)
    );
    assert_errors(&validate_kubefed_config(&defaulted, None), &[]);

    let object = json!({"metadata": {"name": "kubefed"}, "spec": {"scope": "Namespaced"}});
    let patch = default_kubefed_config_patch(&object).unwrap().unwrap();
    assert_eq!(
        patch,
        json!([{"op": "replace", "path": "/spec", "value": serde_json::to_value(&defaulted).unwrap()}])
    );
    let mut patched = object.clone();
    let patch: json_patch::Patch = serde_json::from_value(patch).unwrap();
    json_patch::patch(&mut patched, &patch).unwrap();
    assert_eq!(config_errors(&patched), Vec::<String>::new());

    // Already defaulted: nothing to patch.
    assert_eq!(
        default_kubefed_config_patch(&defaulted_config()).unwrap(),
        None
    );
    // Set values survive defaulting.
    let custom =
        json!({"spec": {"scope": "Cluster", "leaderElect": {"resourceLock": "endpoints"}}});
    let patch = default_kubefed_config_patch(&custom).unwrap().unwrap();
    assert_eq!(
        patch[0]["value"]["leaderElect"]["resourceLock"],
        "endpoints"
    );
    assert_eq!(patch[0]["value"]["leaderElect"]["leaseDuration"], "15s");
    // Unreadable specs are refused with field errors.
    let errors = default_kubefed_config_patch(&json!({"spec": {"scope": "Global"}})).unwrap_err();
    assert_errors(
        &errors,
        &[r#"spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced""#],
    );
    assert_errors(
        &default_kubefed_config_patch(&json!({})).unwrap_err(),
        &["spec.scope: Required value"],
    );
}
