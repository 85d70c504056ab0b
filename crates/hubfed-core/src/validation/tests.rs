//! Tests of the admission rules, by kind.

use super::*;

mod cluster;
mod config;
mod dns;
mod federated;
mod ftc;

fn strings(errors: &[FieldError]) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

/// `object` with `member` of the object at the JSON pointer `parent` set to `value`.
fn with_member(mut object: Value, parent: &str, member: &str, value: Value) -> Value {
    object
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap()
        .insert(member.to_owned(), value);
    object
}

/// `object` without `member` of the object at the JSON pointer `parent`.
fn without_member(mut object: Value, parent: &str, member: &str) -> Value {
    object
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap()
        .remove(member);
    object
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
