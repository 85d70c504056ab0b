//! KubeFedConfig: defaulting and validation.

use hubfed_api::kubefedconfig::{
    ClusterHealthCheckConfig, DurationConfig, FeatureGatesConfig, LeaderElectConfig,
    SyncControllerConfig,
};

use super::*;

/// Feature gate names KubeFed v0.10's validation accepts: the known gates plus the retired
/// `FederatedIngress`, so that existing configs keep validating.
pub(super) const ACCEPTED_FEATURE_GATES: &[&str] = &[
    "PushReconciler",
    "RawResourceStatusCollection",
    "SchedulerPreferences",
    "FederatedIngress",
];

/// client-go `leaderelection.JitterFactor`.
pub(super) const LEADER_ELECTION_JITTER_FACTOR: f64 = 1.2;

/// KubeFed's `SetDefaultKubeFedConfig` (via [`KubeFedConfigSpec::apply_defaults`]).
pub fn default_kubefed_config(spec: &KubeFedConfigSpec) -> KubeFedConfigSpec {
    let mut defaulted = spec.clone();
    defaulted.apply_defaults();
    defaulted
}

/// The mutating webhook's answer for a raw KubeFedConfig: `Ok(None)` when defaulting changes
/// nothing, `Ok(Some(patch))` with the JSON patch `[{"op":"replace","path":"/spec",...}]`
/// otherwise, `Err` when the spec cannot be read.
pub fn default_kubefed_config_patch(object: &Value) -> Result<Option<Value>, Vec<FieldError>> {
    let mut errors = Vec::new();
    let spec =
        conform_member::<KubeFedConfigSpec>(object, "spec", KUBEFED_CONFIG_SPEC, &mut errors);
    let spec = match spec {
        Some(spec) if errors.is_empty() => spec,
        _ => return Err(errors),
    };
    let defaulted = default_kubefed_config(&spec);
    if defaulted == spec {
        return Ok(None);
    }
    let value = serde_json::to_value(&defaulted)
        .map_err(|error| vec![FieldError::invalid_detail("spec", &error.to_string())])?;
    Ok(Some(
        json!([{"op": "replace", "path": "/spec", "value": value}]),
    ))
}

/// KubeFed's `ValidateKubeFedConfig` on a (defaulted) spec: every duration set, parseable and
/// positive; `leaseDuration` > `renewDeadline` > `retryPeriod` × 1.2; `resourceLock` set;
/// feature gates known and unique; health thresholds positive; `adoptResources` set; `scope`
/// unchanged when `old` (the spec before an update) is given. `cacheSyncTimeout` and
/// `maxConcurrentReconciles` must be positive when set.
pub fn validate_kubefed_config(
    spec: &KubeFedConfigSpec,
    old: Option<&KubeFedConfigSpec>,
) -> Vec<FieldError> {
    validate_kubefed_config_with_old_scope(spec, old.map(|old| old.scope))
}

/// [`validate_kubefed_config`] over raw KubeFedConfig objects; `old_object` is the object
/// before an update.
pub fn validate_kubefed_config_value(
    object: &Value,
    old_object: Option<&Value>,
) -> Vec<FieldError> {
    let mut shape_errors = Vec::new();
    let spec =
        conform_member::<KubeFedConfigSpec>(object, "spec", KUBEFED_CONFIG_SPEC, &mut shape_errors);
    let old_scope = old_object
        .and_then(|old| present(old.pointer("/spec/scope")))
        .and_then(|scope| serde_json::from_value::<ResourceScope>(scope.clone()).ok());
    let typed = spec
        .map(|spec| validate_kubefed_config_with_old_scope(&spec, old_scope))
        .unwrap_or_default();
    merge(shape_errors, typed)
}

pub(super) fn validate_kubefed_config_with_old_scope(
    spec: &KubeFedConfigSpec,
    old_scope: Option<ResourceScope>,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(old_scope) = old_scope
        && old_scope != spec.scope
    {
        errors.push(FieldError::invalid(
            "spec.scope",
            spec.scope.as_str(),
            "field is immutable",
        ));
    }
    required_section(
        "spec.controllerDuration",
        spec.controller_duration.as_ref(),
        &mut errors,
        durations,
    );
    required_section(
        "spec.leaderElect",
        spec.leader_elect.as_ref(),
        &mut errors,
        leader_elect,
    );
    feature_gates(&spec.feature_gates, &mut errors);
    required_section(
        "spec.clusterHealthCheck",
        spec.cluster_health_check.as_ref(),
        &mut errors,
        cluster_health_check,
    );
    required_section(
        "spec.syncController",
        spec.sync_controller.as_ref(),
        &mut errors,
        sync_controller,
    );
    if let Some(status) = &spec.status_controller {
        positive_int(
            "spec.statusController.maxConcurrentReconciles",
            status.max_concurrent_reconciles,
            false,
            &mut errors,
        );
    }
    errors
}

/// A required section of the spec: absent is an error, present is checked by `check`.
fn required_section<T>(
    path: &str,
    section: Option<&T>,
    errors: &mut Vec<FieldError>,
    check: fn(&str, &T, &mut Vec<FieldError>),
) {
    match section {
        None => errors.push(FieldError::required(path, "")),
        Some(section) => check(path, section, errors),
    }
}

fn durations(path: &str, durations: &DurationConfig, errors: &mut Vec<FieldError>) {
    let fields = [
        ("availableDelay", &durations.available_delay, true),
        ("unavailableDelay", &durations.unavailable_delay, true),
        ("cacheSyncTimeout", &durations.cache_sync_timeout, false),
    ];
    for (name, value, required) in fields {
        positive_duration(&child(path, name), value.as_deref(), required, errors);
    }
}

/// `leaseDuration` > `renewDeadline` > `retryPeriod` × 1.2, all positive; `resourceLock` set.
fn leader_elect(path: &str, election: &LeaderElectConfig, errors: &mut Vec<FieldError>) {
    let lease_path = child(path, "leaseDuration");
    let renew_path = child(path, "renewDeadline");
    let lease = positive_duration(
        &lease_path,
        election.lease_duration.as_deref(),
        true,
        errors,
    );
    let renew = positive_duration(
        &renew_path,
        election.renew_deadline.as_deref(),
        true,
        errors,
    );
    let retry = positive_duration(
        &child(path, "retryPeriod"),
        election.retry_period.as_deref(),
        true,
        errors,
    );
    if let (Some(lease), Some(renew)) = (lease, renew)
        && lease <= renew
    {
        errors.push(FieldError::invalid_value(
            lease_path,
            go_duration_string(lease),
            "leaseDuration must be greater than renewDeadline",
        ));
    }
    if let (Some(renew), Some(retry)) = (renew, retry) {
        // Go: time.Duration(float64(retry) * JitterFactor), truncated toward zero.
        let jittered = (retry as f64 * LEADER_ELECTION_JITTER_FACTOR) as i128;
        if renew <= jittered {
            errors.push(FieldError::invalid_value(
                renew_path,
                go_duration_string(renew),
                &format!(
                    "renewDeadline must be greater than retryPeriod*JitterFactor({LEADER_ELECTION_JITTER_FACTOR:.1})"
                ),
            ));
        }
    }
    if election.resource_lock.is_none() {
        errors.push(FieldError::required(child(path, "resourceLock"), ""));
    }
}

/// At least one; each known and named once.
fn feature_gates(gates: &[FeatureGatesConfig], errors: &mut Vec<FieldError>) {
    if gates.is_empty() {
        errors.push(FieldError::required("spec.featureGates", ""));
    }
    let mut seen_gates = HashSet::new();
    for (i, gate) in gates.iter().enumerate() {
        let name_path = child(&index("spec.featureGates", i), "name");
        if !seen_gates.insert(gate.name.as_str()) {
            errors.push(FieldError::duplicate(name_path, &gate.name));
            continue;
        }
        validate_enum_string(&name_path, &gate.name, ACCEPTED_FEATURE_GATES, errors);
    }
}

fn cluster_health_check(
    path: &str,
    health: &ClusterHealthCheckConfig,
    errors: &mut Vec<FieldError>,
) {
    positive_duration(
        &child(path, "period"),
        health.period.as_deref(),
        true,
        errors,
    );
    positive_int(
        &child(path, "failureThreshold"),
        health.failure_threshold,
        true,
        errors,
    );
    positive_int(
        &child(path, "successThreshold"),
        health.success_threshold,
        true,
        errors,
    );
    positive_duration(
        &child(path, "timeout"),
        health.timeout.as_deref(),
        true,
        errors,
    );
}

fn sync_controller(path: &str, sync: &SyncControllerConfig, errors: &mut Vec<FieldError>) {
    positive_int(
        &child(path, "maxConcurrentReconciles"),
        sync.max_concurrent_reconciles,
        false,
        errors,
    );
    if sync.adopt_resources.is_none() {
        errors.push(FieldError::required(child(path, "adoptResources"), ""));
    }
}

/// Checks a duration string is set (when `required`), parses as a Go duration and is > 0.
/// Returns its signed length in nanoseconds when it parses.
pub(super) fn positive_duration(
    path: &str,
    value: Option<&str>,
    required: bool,
    errors: &mut Vec<FieldError>,
) -> Option<i128> {
    let Some(value) = value else {
        if required {
            errors.push(FieldError::required(path, ""));
        }
        return None;
    };
    match parse_signed_go_duration(value) {
        Ok(nanos) => {
            if nanos <= 0 {
                // Go reports the duration as its int64 nanosecond count.
                errors.push(FieldError::invalid_value(
                    path,
                    nanos,
                    "should be greater than 0",
                ));
            }
            Some(nanos)
        }
        Err(reason) => {
            errors.push(FieldError::invalid(
                path,
                value,
                &format!("must be a Go duration such as \"20s\" or \"1m30s\": {reason}"),
            ));
            None
        }
    }
}

/// Go's `time.ParseDuration`, negative values included, as nanoseconds within `int64`.
pub(super) fn parse_signed_go_duration(value: &str) -> Result<i128, String> {
    let (negative, magnitude) = match value.strip_prefix('-') {
        Some(rest) if !rest.starts_with(['+', '-']) => (true, rest),
        _ => (false, value),
    };
    let duration = parse_go_duration(magnitude).map_err(|error| match error {
        hubfed_api::Error::InvalidDuration { reason, .. } => reason.to_owned(),
        other => other.to_string(),
    })?;
    let nanos = i128::try_from(duration.as_nanos()).unwrap_or(i128::MAX);
    if nanos > i128::from(i64::MAX) {
        return Err("number out of range".to_owned());
    }
    Ok(if negative { -nanos } else { nanos })
}

pub(super) fn positive_int(
    path: &str,
    value: Option<i64>,
    required: bool,
    errors: &mut Vec<FieldError>,
) {
    match value {
        None if required => errors.push(FieldError::required(path, "")),
        Some(value) if value <= 0 => {
            errors.push(FieldError::invalid_value(
                path,
                value,
                "should be greater than 0",
            ));
        }
        _ => {}
    }
}
