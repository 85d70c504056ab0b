//! KubeFedCluster: endpoints (KubeFed's own cases among them), proxies, secrets and TLS, status.

use super::*;

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
