//! Tests of the admission rules, by kind.

use hubfed_api::defaulttypes::default_federated_type_configs;
use hubfed_api::kubefedconfig::FEATURE_GATES;

use super::*;

fn strings(errors: &[FieldError]) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

#[track_caller]
fn assert_errors(errors: &[FieldError], expected: &[&str]) {
    assert_eq!(strings(errors), expected);
}

// --- field errors ---------------------------------------------------------------------

#[test]
fn field_errors_display_like_apimachinery() {
    assert_eq!(
        FieldError::required("spec.apiEndpoint", "").to_string(),
        "spec.apiEndpoint: Required value"
    );
    assert_eq!(
        FieldError::required("spec.x", "why").to_string(),
        "spec.x: Required value: why"
    );
    assert_eq!(
        FieldError::invalid(
            "spec.proxyURL",
            "ftp://x",
            "scheme must be http, https or socks5"
        )
        .to_string(),
        r#"spec.proxyURL: Invalid value: "ftp://x": scheme must be http, https or socks5"#
    );
    assert_eq!(
        FieldError::invalid_value("a", 0, "should be greater than 0").to_string(),
        "a: Invalid value: 0: should be greater than 0"
    );
    assert_eq!(
        FieldError::invalid_detail("a", "broken").to_string(),
        "a: Invalid value: broken"
    );
    assert_eq!(
        FieldError::not_supported("spec.scope", "Global", SCOPES).to_string(),
        r#"spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced""#
    );
    assert_eq!(
        FieldError::duplicate("a[1].name", "x").to_string(),
        r#"a[1].name: Duplicate value: "x""#
    );
    assert_eq!(
        FieldError::forbidden("p", "no").to_string(),
        "p: Forbidden: no"
    );
    assert_eq!(FieldError::required("", "").to_string(), "Required value");
}

#[test]
fn summary_joins_like_an_aggregate() {
    let a = FieldError::required("a", "");
    let b = FieldError::required("b", "");
    assert_eq!(summary(&[]), "");
    assert_eq!(summary(std::slice::from_ref(&a)), "a: Required value");
    assert_eq!(
        summary(&[a.clone(), b.clone()]),
        "[a: Required value, b: Required value]"
    );
    // Duplicates collapse, and a single remaining message has no brackets.
    assert_eq!(summary(&[a.clone(), a.clone()]), "a: Required value");
    assert_eq!(
        summary(&[a.clone(), b, a]),
        "[a: Required value, b: Required value]"
    );
}

#[test]
fn go_quote_escapes_like_strconv_quote() {
    assert_eq!(go_quote("plain"), r#""plain""#);
    assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
    assert_eq!(go_quote("\n\t\u{1}\u{7f}"), r#""\n\t\x01\x7f""#);
    assert_eq!(go_quote("ünï"), "\"ünï\"");
}

#[test]
fn durations_print_like_go() {
    let cases: [(i128, &str); 10] = [
        (0, "0s"),
        (7, "7ns"),
        (1_500, "1.5\u{b5}s"),
        (300_000_000, "300ms"),
        (1_000_000_000, "1s"),
        (1_500_000_000, "1.5s"),
        (60_000_000_000, "1m0s"),
        (300_000_000_000, "5m0s"),
        (3_723_000_000_000, "1h2m3s"),
        (-10_000_000_000, "-10s"),
    ];
    for (nanos, expected) in cases {
        assert_eq!(go_duration_string(nanos), expected, "{nanos}");
    }
}

// --- DNS names ------------------------------------------------------------------------

#[test]
fn dns1123_subdomain() {
    for valid in ["a", "example.com", "a-b.c9", "0", "types.kubefed.io"] {
        assert!(is_dns1123_subdomain(valid).is_empty(), "{valid}");
    }
    assert!(is_dns1123_subdomain(&"a".repeat(253)).is_empty());
    for invalid in [
        "", "Example", "-a", "a-", "a..b", "a_b", ".a", "a.", "a b", "ä",
    ] {
        assert_eq!(is_dns1123_subdomain(invalid).len(), 1, "{invalid}");
    }
    assert_eq!(
        is_dns1123_subdomain("A"),
        [
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        ]
    );
    assert_eq!(
        is_dns1123_subdomain(&"a".repeat(254)),
        ["must be no more than 253 characters"]
    );
    assert_eq!(is_dns1123_subdomain(&"A".repeat(254)).len(), 2);
}

#[test]
fn dns1035_label() {
    for valid in ["v1", "v1beta1", "deployments", "a", "a-b"] {
        assert!(is_dns1035_label(valid).is_empty(), "{valid}");
    }
    assert!(is_dns1035_label(&"a".repeat(63)).is_empty());
    for invalid in ["", "1v", "a-", "A", "a.b", "a_b", "-a"] {
        assert_eq!(is_dns1035_label(invalid).len(), 1, "{invalid}");
    }
    assert_eq!(
        is_dns1035_label("1v"),
        [
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        ]
    );
    assert_eq!(
        is_dns1035_label(&"a".repeat(64)),
        ["must be no more than 63 characters"]
    );
}

// --- FederatedTypeConfig --------------------------------------------------------------

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
    let mut object = kubefed_deployments_ftc();
    let (parent, member) = path.rsplit_once('/').unwrap();
    object
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap()
        .insert(member.to_owned(), value);
    object
}

fn ftc_without(parent: &str, member: &str) -> Value {
    let mut object = kubefed_deployments_ftc();
    object
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap()
        .remove(member);
    object
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

// --- KubeFedCluster -------------------------------------------------------------------

fn cluster(spec: Value) -> Value {
    json!({"apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedCluster", "metadata": {"name": "c1"}, "spec": spec})
}

fn cluster_spec_errors(spec: Value) -> Vec<String> {
    strings(&validate_kubefed_cluster_value(&cluster(spec), false))
}

fn endpoint_errors(endpoint: &str) -> Vec<String> {
    cluster_spec_errors(json!({"apiEndpoint": endpoint, "secretRef": {"name": "c1-token"}}))
}

#[test]
fn kubefed_cluster_manifest_validates() {
    let object = cluster(json!({
        "apiEndpoint": "https://172.18.0.2:6443",
        "caBundle": "LS0tLS1CRUdJTg==",
        "secretRef": {"name": "cluster1-shfbm"},
        "disabledTLSValidations": ["SubjectName", "ValidityPeriod"],
        "proxyURL": "",
    }));
    assert_errors(&validate_kubefed_cluster_value(&object, false), &[]);
    let spec: KubeFedClusterSpec = serde_json::from_value(object["spec"].clone()).unwrap();
    assert_errors(&validate_kubefed_cluster(&spec, None), &[]);
}

#[test]
fn pull_mode_clusters_need_no_endpoint_or_secret() {
    assert_eq!(
        cluster_spec_errors(json!({"syncMode": "Pull"})),
        Vec::<String>::new()
    );
    // Push mode (absent or explicit) still needs both.
    for spec in [json!({}), json!({"syncMode": "Push"})] {
        let errors = cluster_spec_errors(spec.clone());
        assert!(
            errors.iter().any(|e| e.contains("spec.apiEndpoint"))
                && errors.iter().any(|e| e.contains("spec.secretRef.name")),
            "{spec}: {errors:?}"
        );
    }
    // What is given is checked, in either mode.
    let errors = cluster_spec_errors(json!({"syncMode": "Pull", "apiEndpoint": "ftp://member"}));
    assert!(
        errors.iter().any(|e| e.contains("spec.apiEndpoint")),
        "{errors:?}"
    );
    let errors = cluster_spec_errors(json!({"syncMode": "Sideways"}));
    assert!(!errors.is_empty(), "an unknown sync mode is refused");
}

#[test]
fn api_endpoint_forms_accepted_by_client_go() {
    for endpoint in [
        "https://1.2.3.4:6443",
        "http://member:8080",
        "HTTPS://member",
        "https://member/",
        "https://member?x=y",
        "10.0.0.1:6443",
        "10.0.0.1",
        "localhost",
        "localhost:6443",
        "[::1]:6443",
        "https://[fd00::1]",
        "kubernetes.default.svc",
        "https://user@member:443",
        // A path prefix, as for an API server behind a path-routing proxy.
        "https://member/api",
        "http://member:8080/prefix/",
        "https://my.example.com:80/path/to/endpoint",
        "https://[fd00::1]:6443/a/b",
    ] {
        assert_eq!(
            endpoint_errors(endpoint),
            Vec::<String>::new(),
            "{endpoint}"
        );
    }
}

#[test]
fn api_endpoint_rejections() {
    let cases = [
        ("", "spec.apiEndpoint: Required value"),
        (
            "ftp://member",
            r#"spec.apiEndpoint: Unsupported value: "ftp": supported values: "http", "https""#,
        ),
        (
            "member:abc",
            r#"spec.apiEndpoint: Invalid value: "member:abc": parse "https://member:abc": invalid port ":abc" after host"#,
        ),
        (
            // Only a URL with a scheme may carry a path.
            "member/api",
            r#"spec.apiEndpoint: Invalid value: "member/api": host must be a URL or a host:port pair: "member/api""#,
        ),
        (
            "member:6443/api",
            r#"spec.apiEndpoint: Invalid value: "member:6443/api": host must be a URL or a host:port pair: "member:6443/api""#,
        ),
        (
            "member:0",
            "spec.apiEndpoint: Invalid value: 0: must be between 1 and 65535, inclusive",
        ),
        (
            "https://member:65536",
            "spec.apiEndpoint: Invalid value: 65536: must be between 1 and 65535, inclusive",
        ),
        (
            "member:99999999999999999999",
            r#"spec.apiEndpoint: Invalid value: "99999999999999999999": error converting port to integer"#,
        ),
        (
            "mem ber:6443",
            r#"spec.apiEndpoint: Invalid value: "mem ber:6443": parse "https://mem ber:6443": invalid character " " in host name"#,
        ),
        (
            // As client-go: the scheme-less retry reads "https:" as the host.
            "https://mem ber",
            r#"spec.apiEndpoint: Invalid value: "https://mem ber": host must be a URL or a host:port pair: "https://mem ber""#,
        ),
        (
            "[::1",
            r#"spec.apiEndpoint: Invalid value: "[::1": parse "https://[::1": missing ']' in host"#,
        ),
        (
            "https://member\n",
            r#"spec.apiEndpoint: Invalid value: "https://member\n": parse "https://https://member\n": net/url: invalid control character in URL"#,
        ),
        (
            "https://%zz",
            r#"spec.apiEndpoint: Invalid value: "https://%zz": parse "https://https://%zz": invalid URL escape "%zz""#,
        ),
    ];
    for (endpoint, expected) in cases {
        assert_eq!(endpoint_errors(endpoint), [expected], "{endpoint}");
    }
}

// KubeFed's own apiEndpoint cases, the authority on what is accepted and refused:
// `TestValidateAPIEndpoint` and `TestValidateKubeFedCluster` in
// `pkg/apis/core/v1beta1/validation/validation_test.go` (kubernetes-sigs/kubefed), for
// `validateAPIEndpoint` in `pkg/apis/core/v1beta1/validation/validation.go`. KubeFed
// validates with the field path `apiEndpoint` and matches by substring; hubfed's path is
// `spec.apiEndpoint`, so each KubeFed message is still a substring of hubfed's, which is
// checked in full as well.

/// KubeFed's successes: every scheme × host × port × path, except a path without a scheme.
fn kubefed_accepted_api_endpoints() -> Vec<String> {
    let mut endpoints = Vec::new();
    for scheme in ["", "http://", "https://"] {
        for host in [
            "example.com",
            "my.example.com",
            "192.0.2.219",
            "[2001:db8:25a4:8d2::1]",
        ] {
            for port in ["", ":1", ":80", ":8080", ":65535"] {
                for path in ["", "/", "/path/to/endpoint"] {
                    // "An empty protocol scheme with a URL path (e.g. /path/to/endpoint) is
                    // not supported so skip it."
                    if scheme.is_empty() && path == "/path/to/endpoint" {
                        continue;
                    }
                    endpoints.push(format!("{scheme}{host}{port}{path}"));
                }
            }
        }
    }
    endpoints
}

#[test]
fn kubefed_api_endpoint_successes() {
    let endpoints = kubefed_accepted_api_endpoints();
    assert_eq!(endpoints.len(), 160);
    for endpoint in &endpoints {
        assert_eq!(
            endpoint_errors(endpoint),
            Vec::<String>::new(),
            "{endpoint}"
        );
    }
}

#[test]
fn kubefed_api_endpoint_errors() {
    // (apiEndpoint, KubeFed's expected substring, hubfed's full message)
    let cases = [
        (
            "",
            "apiEndpoint: Required value",
            "spec.apiEndpoint: Required value",
        ),
        (
            "https://",
            r#"apiEndpoint: Invalid value: "https://": host must be a URL or a host:port pair"#,
            r#"spec.apiEndpoint: Invalid value: "https://": host must be a URL or a host:port pair: "https://""#,
        ),
        (
            "example.com/path/to/somewhere",
            r#"apiEndpoint: Invalid value: "example.com/path/to/somewhere": host must be a URL or a host:port pair"#,
            r#"spec.apiEndpoint: Invalid value: "example.com/path/to/somewhere": host must be a URL or a host:port pair: "example.com/path/to/somewhere""#,
        ),
        (
            "192.0.2.35/path/to/somewhere",
            r#"apiEndpoint: Invalid value: "192.0.2.35/path/to/somewhere": host must be a URL or a host:port pair"#,
            r#"spec.apiEndpoint: Invalid value: "192.0.2.35/path/to/somewhere": host must be a URL or a host:port pair: "192.0.2.35/path/to/somewhere""#,
        ),
        (
            "tcp://example.com",
            r#"apiEndpoint: Unsupported value: "tcp""#,
            r#"spec.apiEndpoint: Unsupported value: "tcp": supported values: "http", "https""#,
        ),
        (
            "example.com:port80",
            "invalid port",
            r#"spec.apiEndpoint: Invalid value: "example.com:port80": parse "https://example.com:port80": invalid port ":port80" after host"#,
        ),
        (
            "example.com:-80",
            "invalid port",
            r#"spec.apiEndpoint: Invalid value: "example.com:-80": parse "https://example.com:-80": invalid port ":-80" after host"#,
        ),
        (
            "example.com:0",
            "apiEndpoint: Invalid value: 0: must be between 1 and 65535, inclusive",
            "spec.apiEndpoint: Invalid value: 0: must be between 1 and 65535, inclusive",
        ),
        (
            "example.com:65536",
            "apiEndpoint: Invalid value: 65536: must be between 1 and 65535, inclusive",
            "spec.apiEndpoint: Invalid value: 65536: must be between 1 and 65535, inclusive",
        ),
    ];
    for (endpoint, kubefed, hubfed) in cases {
        let errors = endpoint_errors(endpoint);
        assert!(
            errors.iter().any(|error| error.contains(kubefed)),
            "{endpoint}: {errors:?} lacks {kubefed:?}"
        );
        assert_eq!(errors, [hubfed], "{endpoint}");
    }
}

/// KubeFed's `ValidKubeFedCluster` (`test/common/validation.go`).
fn kubefed_valid_cluster() -> Value {
    let probe = "2021-06-29T11:14:40Z";
    let condition = |type_: &str, status: &str, reason: &str, message: &str| json!({"type": type_, "status": status, "lastProbeTime": probe, "lastTransitionTime": probe, "reason": reason, "message": message});
    json!({
        "apiVersion": "core.kubefed.io/v1beta1",
        "kind": "KubeFedCluster",
        "metadata": {"name": "validation-test-cluster"},
        "spec": {
            "apiEndpoint": "https://my.example.com:80/path/to/endpoint",
            "secretRef": {"name": "validation-unit-test-cluster-pw97k"},
        },
        "status": {
            "conditions": [
                condition("Ready", "True", "ClusterReady", "/healthz responded with ok"),
                condition("Ready", "False", "ClusterNotReady", "/healthz responded without ok"),
                condition("Offline", "True", "ClusterNotReachable", "cluster is not reachable"),
                condition("Offline", "False", "ClusterReachable", "cluster is reachable"),
            ],
            "zones": ["us-west1-a", "us-west1-b"],
            "region": "us-west1",
        },
    })
}

#[test]
fn kubefed_cluster_validation_is_wired() {
    // KubeFed's TestValidateKubeFedCluster: its valid cluster passes, spec and status.
    let valid = kubefed_valid_cluster();
    for status_subresource in [false, true] {
        assert_errors(
            &validate_kubefed_cluster_value(&valid, status_subresource),
            &[],
        );
    }
    let spec: KubeFedClusterSpec = serde_json::from_value(valid["spec"].clone()).unwrap();
    let status: KubeFedClusterStatus = serde_json::from_value(valid["status"].clone()).unwrap();
    assert_errors(&validate_kubefed_cluster(&spec, Some(&status)), &[]);

    // ... and its two error cases, whose first error carries the message.
    let mut no_endpoint = kubefed_valid_cluster();
    no_endpoint["spec"]["apiEndpoint"] = json!("");
    let mut untyped_condition = kubefed_valid_cluster();
    untyped_condition["status"]["conditions"][1]["type"] = json!("");
    for (object, status_subresource, kubefed) in [
        (no_endpoint, false, "apiEndpoint: Required value"),
        (
            untyped_condition,
            true,
            "conditions[1].type: Required value",
        ),
    ] {
        let errors = strings(&validate_kubefed_cluster_value(&object, status_subresource));
        assert!(
            errors.first().is_some_and(|first| first.contains(kubefed)),
            "{errors:?} does not start with {kubefed:?}"
        );
    }
}

#[test]
fn proxy_url_rules() {
    let with_proxy = |proxy: &str| {
        cluster_spec_errors(
            json!({"apiEndpoint": "https://m", "secretRef": {"name": "s"}, "proxyURL": proxy}),
        )
    };
    for ok in [
        "",
        "http://proxy:3128",
        "https://proxy",
        "socks5://proxy:1080",
    ] {
        assert_eq!(with_proxy(ok), Vec::<String>::new(), "{ok}");
    }
    assert_eq!(
        with_proxy("ftp://x"),
        [r#"spec.proxyURL: Invalid value: "ftp://x": scheme must be http, https or socks5"#]
    );
    assert_eq!(
        with_proxy("proxy:3128"),
        [r#"spec.proxyURL: Invalid value: "proxy:3128": scheme must be http, https or socks5"#]
    );
    assert_eq!(
        with_proxy("http://"),
        [r#"spec.proxyURL: Invalid value: "http://": host must be provided"#]
    );
    // Credentials never come back in the message, however the value fails.
    for endpoint in [
        "https://user:s3cret@member:bad",
        "https://user:s3cret@mem ber",
        "https://user:s3cret@member\n",
        "user:s3cret@member:bad",
    ] {
        let errors = endpoint_errors(endpoint);
        assert_eq!(errors.len(), 1, "{endpoint}");
        assert!(!errors[0].contains("s3cret"), "{errors:?}");
        assert!(errors[0].contains("xxxxx"), "{errors:?}");
    }
    let errors = with_proxy("http://user:s3cret@proxy:bad");
    assert_eq!(
        errors,
        [
            r#"spec.proxyURL: Invalid value: "http://user:xxxxx@proxy:bad": parse "http://user:xxxxx@proxy:bad": invalid port ":bad" after host"#
        ]
    );
}

#[test]
fn secret_ref_and_tls_rules() {
    assert_eq!(
        cluster_spec_errors(json!({"apiEndpoint": "https://m", "secretRef": {}})),
        ["spec.secretRef.name: Required value"]
    );
    assert_eq!(
        cluster_spec_errors(json!({"apiEndpoint": "https://m"})),
        ["spec.secretRef.name: Required value"]
    );
    let errors = cluster_spec_errors(
        json!({"apiEndpoint": "https://m", "secretRef": {"name": "My_Secret"}}),
    );
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].starts_with(
            r#"spec.secretRef.name: Invalid value: "My_Secret": a lowercase RFC 1123 subdomain"#
        ),
        "{errors:?}"
    );
    assert_eq!(
        cluster_spec_errors(
            json!({"apiEndpoint": "https://m", "secretRef": {"name": "s"}, "disabledTLSValidations": ["*"]})
        ),
        Vec::<String>::new()
    );
    assert_eq!(
        cluster_spec_errors(
            json!({"apiEndpoint": "https://m", "secretRef": {"name": "s"}, "disabledTLSValidations": ["SubjectName", "*"]})
        ),
        [
            r#"spec.disabledTLSValidations: Invalid value: ["SubjectName", "*"]: when * is specified, it is expected to be the only option in list"#
        ]
    );
    assert_eq!(
        cluster_spec_errors(
            json!({"apiEndpoint": "https://m", "secretRef": {"name": "s"}, "disabledTLSValidations": ["Hostname", ""]})
        ),
        [
            r#"spec.disabledTLSValidations[0]: Unsupported value: "Hostname": supported values: "*", "SubjectName", "ValidityPeriod""#,
            "spec.disabledTLSValidations[1]: Required value",
        ]
    );
    assert_eq!(
        cluster_spec_errors(
            json!({"apiEndpoint": "https://m", "secretRef": {"name": "s"}, "caBundle": "not base64!"})
        ),
        ["spec.caBundle: Invalid value: must be base64-encoded bytes"]
    );
    assert_eq!(
        cluster_spec_errors(json!({"apiEndpoint": 443, "secretRef": {"name": "s"}})),
        [r#"spec.apiEndpoint: Invalid value: "number": must be of type string"#]
    );
    assert_eq!(
        strings(&validate_kubefed_cluster_value(
            &json!({"metadata": {}}),
            false
        )),
        [
            "spec.apiEndpoint: Required value",
            "spec.secretRef.name: Required value"
        ]
    );
}

#[test]
fn cluster_status_rules() {
    let status = |conditions: Value| json!({"spec": {}, "status": {"conditions": conditions}});
    let ok = status(json!([
        {"type": "Ready", "status": "True", "lastProbeTime": "2024-01-01T00:00:00Z", "lastTransitionTime": "2024-01-01T00:00:00Z", "reason": "ClusterReady", "message": "/healthz responded with ok"},
        {"type": "Offline", "status": "False", "lastProbeTime": "2024-01-01T00:00:00Z"},
        {"type": "ConfigMalformed", "status": "Unknown", "lastProbeTime": "2024-01-01T00:00:00Z"},
    ]));
    assert_errors(&validate_kubefed_cluster_value(&ok, true), &[]);
    let typed: KubeFedClusterStatus = serde_json::from_value(ok["status"].clone()).unwrap();
    assert_errors(&validate_kubefed_cluster_status(&typed), &[]);
    assert_errors(&validate_kubefed_cluster_value(&json!({}), true), &[]);

    let bad = status(json!([
        {"type": "Healthy", "status": "Yes", "lastProbeTime": "2024-01-01T00:00:00Z"},
        {"type": "", "status": ""},
        {"type": "Ready", "status": "True", "lastProbeTime": "yesterday"},
        {"type": "Ready", "status": "True", "lastProbeTime": "0001-01-01T00:00:00Z"},
    ]));
    let errors = strings(&validate_kubefed_cluster_value(&bad, true));
    assert_eq!(errors.len(), 7, "{errors:#?}");
    // Shape problems come first; the broken time's placeholder is not reported again.
    assert_eq!(
        errors[0],
        "status.conditions[1].lastProbeTime: Required value"
    );
    assert!(
        errors[1].starts_with(r#"status.conditions[2].lastProbeTime: Invalid value: "yesterday": must be an RFC 3339 date-time"#),
        "{errors:#?}"
    );
    assert_eq!(
        errors[2..],
        [
            r#"status.conditions[0].type: Unsupported value: "Healthy": supported values: "Ready", "Offline", "ConfigMalformed""#,
            r#"status.conditions[0].status: Unsupported value: "Yes": supported values: "True", "False", "Unknown""#,
            "status.conditions[1].type: Required value",
            "status.conditions[1].status: Required value",
            // Go's zero time counts as unset.
            "status.conditions[3].lastProbeTime: Required value",
        ]
    );
}

// --- KubeFedConfig --------------------------------------------------------------------

fn defaulted_config() -> Value {
    json!({
        "apiVersion": "core.kubefed.io/v1beta1",
        "kind": "KubeFedConfig",
        "metadata": {"name": "kubefed", "namespace": "kube-federation-system"},
        "spec": serde_json::to_value(KubeFedConfigSpec::with_defaults(ResourceScope::Cluster)).unwrap(),
    })
}

fn config_with(path: &str, value: Value) -> Value {
    let mut object = defaulted_config();
    let (parent, member) = path.rsplit_once('/').unwrap();
    object
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap()
        .insert(member.to_owned(), value);
    object
}

fn config_without(path: &str) -> Value {
    let mut object = defaulted_config();
    let (parent, member) = path.rsplit_once('/').unwrap();
    object
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap()
        .remove(member);
    object
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

// --- federated objects ----------------------------------------------------------------

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

// --- consistency with the API types ---------------------------------------------------

#[test]
fn shape_enums_match_the_api_types() {
    for scope in SCOPES {
        serde_json::from_value::<ResourceScope>(json!(scope)).unwrap();
    }
    for mode in ENABLED_DISABLED {
        serde_json::from_value::<hubfed_api::federatedtypeconfig::EnabledDisabled>(json!(mode))
            .unwrap();
    }
    for status in CONTROLLER_STATUSES {
        serde_json::from_value::<hubfed_api::federatedtypeconfig::ControllerStatus>(json!(status))
            .unwrap();
    }
    for lock in RESOURCE_LOCKS {
        serde_json::from_value::<hubfed_api::kubefedconfig::ResourceLockType>(json!(lock)).unwrap();
    }
    for tls in TLS_VALIDATIONS {
        let parsed: TlsValidation = serde_json::from_value(json!(tls)).unwrap();
        assert_eq!(tls_validation_str(parsed), *tls);
    }
    serde_json::from_value::<Time>(json!(PLACEHOLDER_TIME)).unwrap();
}
