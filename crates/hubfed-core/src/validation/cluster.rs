//! KubeFedCluster.

use super::*;

/// Go's zero `time.Time` (`0001-01-01T00:00:00Z`) as Unix seconds; `IsZero` in KubeFed's check.
pub(super) const GO_ZERO_TIME_UNIX_SECONDS: i64 = -62_135_596_800;

/// [`validate_kubefed_cluster_spec`] plus, when given, [`validate_kubefed_cluster_status`].
pub fn validate_kubefed_cluster(
    spec: &KubeFedClusterSpec,
    status: Option<&KubeFedClusterStatus>,
) -> Vec<FieldError> {
    let mut errors = validate_kubefed_cluster_spec(spec);
    if let Some(status) = status {
        errors.extend(validate_kubefed_cluster_status(status));
    }
    errors
}

/// KubeFed's `validateKubeFedClusterSpec`: `apiEndpoint` required and parsable as client-go
/// parses it (a URL may carry a path prefix, a bare `host[:port]` may not), scheme http or
/// https, port 1–65535; `secretRef.name` a DNS-1123 subdomain;
/// `*` alone in `disabledTLSValidations`. hubfed adds: `proxyURL`, when set, is a URL with
/// scheme http, https or socks5 and a host.
///
/// `syncMode: Pull` (hubfed): the hub never connects to the member, so `apiEndpoint` and
/// `secretRef` may be left out; when given they are checked all the same.
pub fn validate_kubefed_cluster_spec(spec: &KubeFedClusterSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let pull = spec.sync_mode == SyncMode::Pull;
    if !(pull && spec.api_endpoint.is_empty()) {
        validate_api_endpoint(&spec.api_endpoint, "spec.apiEndpoint", &mut errors);
    }

    let name_path = "spec.secretRef.name";
    if spec.secret_ref.name.is_empty() {
        if !pull {
            errors.push(FieldError::required(name_path, ""));
        }
    } else {
        let problems = is_dns1123_subdomain(&spec.secret_ref.name);
        if !problems.is_empty() {
            errors.push(FieldError::invalid(
                name_path,
                &spec.secret_ref.name,
                &problems.join(","),
            ));
        }
    }

    let tls = &spec.disabled_tls_validations;
    if tls.len() > 1 && tls.contains(&TlsValidation::All) {
        let values: Vec<String> = tls
            .iter()
            .map(|value| go_quote(tls_validation_str(*value)))
            .collect();
        errors.push(FieldError::invalid_value(
            "spec.disabledTLSValidations",
            format!("[{}]", values.join(", ")),
            "when * is specified, it is expected to be the only option in list",
        ));
    }

    if !spec.proxy_url.is_empty() {
        validate_proxy_url(&spec.proxy_url, "spec.proxyURL", &mut errors);
    }
    errors
}

/// KubeFed's `validateKubeFedClusterStatus`: each condition's type is `Ready`, `Offline` or
/// `ConfigMalformed`, its status `True`, `False` or `Unknown`, and `lastProbeTime` is set.
pub fn validate_kubefed_cluster_status(status: &KubeFedClusterStatus) -> Vec<FieldError> {
    let condition_types: Vec<&str> = ClusterConditionType::ALL
        .iter()
        .map(|t| t.as_str())
        .collect();
    let condition_statuses: Vec<&str> = ConditionStatus::ALL.iter().map(|s| s.as_str()).collect();
    let mut errors = Vec::new();
    for (i, condition) in status.conditions.iter().enumerate() {
        let path = index("status.conditions", i);
        validate_enum_string(
            &child(&path, "type"),
            &condition.type_,
            &condition_types,
            &mut errors,
        );
        validate_enum_string(
            &child(&path, "status"),
            &condition.status,
            &condition_statuses,
            &mut errors,
        );
        let probed = &condition.last_probe_time.0;
        if probed.as_second() == GO_ZERO_TIME_UNIX_SECONDS && probed.subsec_nanosecond() == 0 {
            errors.push(FieldError::required(child(&path, "lastProbeTime"), ""));
        }
    }
    errors
}

/// [`validate_kubefed_cluster_spec`] (or, for the `status` subresource,
/// [`validate_kubefed_cluster_status`]) over a raw KubeFedCluster object.
pub fn validate_kubefed_cluster_value(object: &Value, status_subresource: bool) -> Vec<FieldError> {
    let mut shape_errors = Vec::new();
    let typed = if status_subresource {
        conform_member::<KubeFedClusterStatus>(object, "status", CLUSTER_STATUS, &mut shape_errors)
            .map(|status| validate_kubefed_cluster_status(&status))
    } else {
        conform_member::<KubeFedClusterSpec>(object, "spec", CLUSTER_SPEC, &mut shape_errors)
            .map(|spec| validate_kubefed_cluster_spec(&spec))
    };
    merge(shape_errors, typed.unwrap_or_default())
}

pub(super) fn tls_validation_str(value: TlsValidation) -> &'static str {
    match value {
        TlsValidation::All => "*",
        TlsValidation::SubjectName => "SubjectName",
        TlsValidation::ValidityPeriod => "ValidityPeriod",
    }
}

pub(super) fn validate_api_endpoint(endpoint: &str, path: &str, errors: &mut Vec<FieldError>) {
    if endpoint.is_empty() {
        errors.push(FieldError::required(path, ""));
        return;
    }
    let url = match default_server_url(endpoint) {
        Ok(url) => url,
        Err(reason) => {
            errors.push(FieldError::invalid(
                path,
                &redact_passwords(endpoint, endpoint),
                &redact_passwords(&reason, endpoint),
            ));
            return;
        }
    };
    validate_enum_string(path, &url.scheme, &["http", "https"], errors);
    let port = url.port();
    if !port.is_empty() {
        // Go's strconv.Atoi: the digits can only fail by overflowing.
        match port.parse::<i64>() {
            Err(_) => errors.push(FieldError::invalid(
                path,
                port,
                "error converting port to integer",
            )),
            Ok(number) if !(1..=65535).contains(&number) => errors.push(FieldError::invalid_value(
                path,
                number,
                "must be between 1 and 65535, inclusive",
            )),
            Ok(_) => {}
        }
    }
}

pub(super) fn validate_proxy_url(proxy: &str, path: &str, errors: &mut Vec<FieldError>) {
    let shown = redact_passwords(proxy, proxy);
    match go_url_parse(proxy) {
        Err(reason) => errors.push(FieldError::invalid(
            path,
            &shown,
            &redact_passwords(&reason, proxy),
        )),
        Ok(url) if !matches!(url.scheme.as_str(), "http" | "https" | "socks5") => errors.push(
            FieldError::invalid(path, &shown, "scheme must be http, https or socks5"),
        ),
        Ok(url) if url.host.is_empty() => {
            errors.push(FieldError::invalid(path, &shown, "host must be provided"));
        }
        Ok(_) => {}
    }
}

/// KubeFed's `validateEnumStrings`: empty ⇒ required, unknown ⇒ unsupported.
pub(super) fn validate_enum_string(
    path: &str,
    value: &str,
    accepted: &[&str],
    errors: &mut Vec<FieldError>,
) {
    if value.is_empty() {
        errors.push(FieldError::required(path, ""));
    } else if !accepted.contains(&value) {
        errors.push(FieldError::not_supported(path, value, accepted));
    }
}
