//! PlacementPolicy (hubfed's `scheduling.hubfed.io/v1alpha1`): what admission refuses, so that
//! a policy that can never choose is rejected with a field path instead of only reported on
//! its status.

use hubfed_api::scheduling::{PlacementPolicySpec, SpreadConstraint};

use super::*;

/// The rules over a parsed spec.
pub fn validate_placement_policy(spec: &PlacementPolicySpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    check_target_kind(&spec.target_kind, &mut errors);
    if let Some(selector) = &spec.cluster_selector {
        check_selector(selector, "spec.clusterSelector", &mut errors);
    }
    if spec.max_clusters == Some(0) {
        errors.push(FieldError::invalid_value(
            "spec.maxClusters",
            0,
            "must be at least 1 (leave it out for every candidate)",
        ));
    }
    check_spread(&spec.spread, &mut errors);
    for (i, preference) in spec.preferences.iter().enumerate() {
        let path = index("spec.preferences", i);
        if !(1..=100).contains(&preference.weight) {
            errors.push(FieldError::invalid_value(
                child(&path, "weight"),
                preference.weight,
                "must be between 1 and 100",
            ));
        }
        check_selector(
            &preference.cluster_selector,
            &child(&path, "clusterSelector"),
            &mut errors,
        );
    }
    errors
}

/// `spec.targetKind` names a federated kind.
fn check_target_kind(kind: &str, errors: &mut Vec<FieldError>) {
    if kind.is_empty() {
        errors.push(FieldError::required(
            "spec.targetKind",
            "a federated kind, e.g. FederatedDeployment",
        ));
    } else if !kind.starts_with(|c: char| c.is_ascii_uppercase())
        || !kind.chars().all(|c| c.is_ascii_alphanumeric())
    {
        errors.push(FieldError::invalid(
            "spec.targetKind",
            kind,
            "must be a kind, e.g. FederatedDeployment",
        ));
    }
}

/// `spec.spread`: each a distinct label key, with bounds that can be met.
fn check_spread(spread: &[SpreadConstraint], errors: &mut Vec<FieldError>) {
    let mut keys = HashSet::new();
    for (i, spread) in spread.iter().enumerate() {
        let path = index("spec.spread", i);
        let key_path = child(&path, "topologyKey");
        if spread.topology_key.is_empty() {
            errors.push(FieldError::required(key_path, "a KubeFedCluster label key"));
        } else {
            let probe = LabelSelector {
                match_expressions: None,
                match_labels: Some(BTreeMap::from([(
                    spread.topology_key.clone(),
                    String::new(),
                )])),
            };
            check_selector(&probe, &key_path, errors);
            if !keys.insert(spread.topology_key.as_str()) {
                errors.push(FieldError::duplicate(key_path, &spread.topology_key));
            }
        }
        if spread.max_per_value == Some(0) {
            errors.push(FieldError::invalid_value(
                child(&path, "maxPerValue"),
                0,
                "must be at least 1",
            ));
        }
        if let (Some(min), Some(max)) = (spread.min_per_value, spread.max_per_value)
            && min > max
        {
            errors.push(FieldError::invalid_value(
                child(&path, "minPerValue"),
                min,
                &format!("must not exceed maxPerValue ({max})"),
            ));
        }
    }
}

/// [`validate_placement_policy`] over a raw admission object: a spec that does not even parse
/// is reported as such.
pub fn validate_placement_policy_value(object: &Value) -> Vec<FieldError> {
    let Some(spec) = object.get("spec") else {
        return vec![FieldError::required("spec", "")];
    };
    match serde_json::from_value::<PlacementPolicySpec>(spec.clone()) {
        Ok(spec) => validate_placement_policy(&spec),
        Err(e) => vec![FieldError::invalid_detail("spec", &e.to_string())],
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn errors(spec: Value) -> String {
        summary(&validate_placement_policy_value(&json!({ "spec": spec })))
    }

    #[test]
    fn a_good_policy_passes() {
        let spec = json!({
            "targetKind": "FederatedDeployment",
            "clusterSelector": {"matchLabels": {"env": "prod"}},
            "maxClusters": 2,
            "spread": [{"topologyKey": "topology.kubernetes.io/region", "maxPerValue": 1, "minPerValue": 1}],
            "preferences": [{"weight": 100, "clusterSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}}],
            "failover": {"gracePeriodSeconds": 60, "moveBack": true},
        });
        assert_eq!(errors(spec), "");
    }

    #[test]
    fn readable_refusals() {
        assert_eq!(
            errors(json!({"targetKind": ""})),
            "spec.targetKind: Required value: a federated kind, e.g. FederatedDeployment"
        );
        assert_eq!(
            errors(json!({"targetKind": "federated deployment"})),
            "spec.targetKind: Invalid value: \"federated deployment\": must be a kind, e.g. FederatedDeployment"
        );
        assert_eq!(
            errors(json!({"targetKind": "FederatedDeployment", "maxClusters": 0})),
            "spec.maxClusters: Invalid value: 0: must be at least 1 (leave it out for every candidate)"
        );
        let spread = errors(json!({"targetKind": "FederatedDeployment", "spread": [
            {"topologyKey": "region", "maxPerValue": 1, "minPerValue": 2},
            {"topologyKey": "region"},
            {"topologyKey": "bad key!"},
        ]}));
        assert!(
            spread.contains(
                "spec.spread[0].minPerValue: Invalid value: 2: must not exceed maxPerValue (1)"
            ),
            "{spread}"
        );
        assert!(
            spread.contains("spec.spread[1].topologyKey: Duplicate value: \"region\""),
            "{spread}"
        );
        assert!(
            spread.contains("spec.spread[2].topologyKey: Invalid value"),
            "{spread}"
        );
        let preference = errors(json!({"targetKind": "FederatedDeployment", "preferences": [
            {"weight": 0, "clusterSelector": {}},
            {"weight": 5, "clusterSelector": {"matchExpressions": [{"key": "tier", "operator": "Sometimes"}]}},
        ]}));
        assert!(
            preference.contains(
                "spec.preferences[0].weight: Invalid value: 0: must be between 1 and 100"
            ),
            "{preference}"
        );
        assert!(
            preference.contains("spec.preferences[1].clusterSelector: Invalid value"),
            "{preference}"
        );
        let shape = errors(json!({"targetKind": "FederatedDeployment", "maxClusters": "two"}));
        assert!(shape.starts_with("spec: Invalid value"), "{shape}");
        assert_eq!(
            summary(&validate_placement_policy_value(&json!({}))),
            "spec: Required value"
        );
    }
}
