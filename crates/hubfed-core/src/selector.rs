//! `metav1.LabelSelector` evaluation with apimachinery's semantics
//! (`LabelSelectorAsSelector` + `labels.Requirement.Matches`), used for `clusterSelector`.
//!
//! - absent selector ⇒ matches nothing; `{}` ⇒ matches everything;
//! - `matchLabels` entries are equality requirements; `matchExpressions` support `In`, `NotIn`,
//!   `Exists`, `DoesNotExist`. `NotIn` also matches objects without the key.
//! - Validation as in `labels.NewRequirement`: keys are qualified names, values are label
//!   values, `In`/`NotIn` need at least one value, `Exists`/`DoesNotExist` take none, any other
//!   operator is an error.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::{CoreError, Result};

/// A validated label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    kind: SelectorKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum SelectorKind {
    Nothing,
    Everything,
    Requirements(Vec<Requirement>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl Selector {
    /// Validates `selector`; `None` selects nothing, an empty selector selects everything.
    pub fn new(selector: Option<&LabelSelector>) -> Result<Self> {
        let Some(selector) = selector else {
            return Ok(Self {
                kind: SelectorKind::Nothing,
            });
        };
        let match_labels = selector.match_labels.as_ref();
        let match_expressions = selector.match_expressions.as_deref().unwrap_or_default();
        if match_labels.is_none_or(BTreeMap::is_empty) && match_expressions.is_empty() {
            return Ok(Self {
                kind: SelectorKind::Everything,
            });
        }

        let mut requirements = Vec::new();
        for (key, value) in match_labels.into_iter().flatten() {
            requirements.push(Requirement::new(key, Operator::In, vec![value.clone()])?);
        }
        for expression in match_expressions {
            let operator = match expression.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(CoreError::InvalidSelector(format!(
                        "{other:?} is not a valid label selector operator"
                    )));
                }
            };
            let values = expression.values.clone().unwrap_or_default();
            requirements.push(Requirement::new(&expression.key, operator, values)?);
        }
        Ok(Self {
            kind: SelectorKind::Requirements(requirements),
        })
    }

    /// Whether a set of labels satisfies every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match &self.kind {
            SelectorKind::Nothing => false,
            SelectorKind::Everything => true,
            SelectorKind::Requirements(requirements) => {
                requirements.iter().all(|r| r.matches(labels))
            }
        }
    }
}

impl Requirement {
    fn new(key: &str, operator: Operator, values: Vec<String>) -> Result<Self> {
        validate_label_key(key)?;
        match operator {
            Operator::In | Operator::NotIn if values.is_empty() => {
                return Err(CoreError::InvalidSelector(format!(
                    "key {key:?}: for 'In', 'NotIn' operators, values set can't be empty"
                )));
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                return Err(CoreError::InvalidSelector(format!(
                    "key {key:?}: values set must be empty for 'Exists' and 'DoesNotExist'"
                )));
            }
            _ => {}
        }
        for value in &values {
            validate_label_value(key, value)?;
        }
        Ok(Self {
            key: key.to_owned(),
            operator,
            values,
        })
    }

    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

/// `validation.IsQualifiedName`: `[prefix/]name`, prefix a DNS-1123 subdomain.
fn validate_label_key(key: &str) -> Result<()> {
    let invalid = |why: &str| {
        Err(CoreError::InvalidSelector(format!(
            "invalid label key {key:?}: {why}"
        )))
    };
    let name = match key.split_once('/') {
        None => key,
        Some((prefix, name)) => {
            if name.contains('/') {
                return invalid("a qualified name has at most one '/'");
            }
            if prefix.is_empty() {
                return invalid("prefix part must be non-empty");
            }
            if !is_dns1123_subdomain(prefix) {
                return invalid("prefix part must be a DNS-1123 subdomain");
            }
            name
        }
    };
    if name.is_empty() {
        return invalid("name part must be non-empty");
    }
    if name.len() > 63 {
        return invalid("name part must be no more than 63 characters");
    }
    if !is_label_name(name) {
        return invalid(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        );
    }
    Ok(())
}

/// `validation.IsValidLabelValue`: empty, or at most 63 characters of the label-name alphabet.
fn validate_label_value(key: &str, value: &str) -> Result<()> {
    if value.len() > 63 || !(value.is_empty() || is_label_name(value)) {
        return Err(CoreError::InvalidSelector(format!(
            "invalid label value {value:?} for key {key:?}: must be 63 characters or less, consist of alphanumeric characters, '-', '_' or '.', and start and end with an alphanumeric character"
        )));
    }
    Ok(())
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_label_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `validation.IsDNS1123Subdomain` ([`crate::validation::is_dns1123_subdomain`]).
fn is_dns1123_subdomain(s: &str) -> bool {
    crate::validation::is_dns1123_subdomain(s).is_empty()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::test_support::labels;

    fn selector(v: serde_json::Value) -> Result<Selector> {
        let parsed: LabelSelector = serde_json::from_value(v).unwrap();
        Selector::new(Some(&parsed))
    }

    #[test]
    fn absent_selects_nothing_and_empty_selects_everything() {
        assert!(!Selector::new(None).unwrap().matches(&labels(&[])));
        let all = selector(json!({})).unwrap();
        assert!(all.matches(&labels(&[])));
        assert!(all.matches(&labels(&[("a", "b")])));
        let empty_parts = selector(json!({"matchLabels": {}, "matchExpressions": []})).unwrap();
        assert!(empty_parts.matches(&labels(&[])));
    }

    #[test]
    fn match_labels_require_equal_values() {
        let s = selector(json!({"matchLabels": {"region": "eu", "tier": "gold"}})).unwrap();
        assert!(s.matches(&labels(&[("region", "eu"), ("tier", "gold"), ("x", "y")])));
        assert!(!s.matches(&labels(&[("region", "eu")])));
        assert!(!s.matches(&labels(&[("region", "us"), ("tier", "gold")])));
    }

    #[test]
    fn match_expressions_operators() {
        let s = selector(json!({"matchExpressions": [
            {"key": "region", "operator": "In", "values": ["eu", "us"]},
            {"key": "env", "operator": "NotIn", "values": ["dev"]},
            {"key": "gpu", "operator": "Exists"},
            {"key": "legacy", "operator": "DoesNotExist"},
        ]}))
        .unwrap();
        assert!(s.matches(&labels(&[("region", "us"), ("gpu", "")])));
        assert!(s.matches(&labels(&[
            ("region", "eu"),
            ("env", "prod"),
            ("gpu", "a100")
        ])));
        assert!(!s.matches(&labels(&[("region", "ap"), ("gpu", "")])));
        assert!(!s.matches(&labels(&[("region", "eu"), ("env", "dev"), ("gpu", "")])));
        assert!(!s.matches(&labels(&[("region", "eu")])));
        assert!(!s.matches(&labels(&[("region", "eu"), ("gpu", ""), ("legacy", "1")])));
    }

    #[test]
    fn match_labels_and_expressions_combine() {
        let s = selector(json!({
            "matchLabels": {"tier": "gold"},
            "matchExpressions": [{"key": "region", "operator": "NotIn", "values": ["us"]}],
        }))
        .unwrap();
        assert!(s.matches(&labels(&[("tier", "gold")])));
        assert!(!s.matches(&labels(&[("tier", "gold"), ("region", "us")])));
        assert!(!s.matches(&labels(&[("region", "eu")])));
    }

    #[test]
    fn invalid_selectors_are_rejected() {
        for bad in [
            json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "NotIn"}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "in", "values": ["x"]}]}),
            json!({"matchLabels": {"bad key": "x"}}),
            json!({"matchLabels": {"a": "bad value"}}),
            json!({"matchLabels": {"a": "-leading"}}),
            json!({"matchLabels": {"Example.com/a": "x"}}),
            json!({"matchLabels": {"/a": "x"}}),
            json!({"matchLabels": {"a/b/c": "x"}}),
            json!({"matchLabels": {"": "x"}}),
            json!({"matchLabels": {"a": "x".repeat(64)}}),
        ] {
            let result = selector(bad.clone());
            assert!(
                matches!(result, Err(CoreError::InvalidSelector(_))),
                "{bad} gave {result:?}"
            );
        }
    }

    #[test]
    fn valid_keys_and_values() {
        let s = selector(json!({"matchLabels": {
            "kubefed.io/region": "eu-west_1.a",
            "a": "",
            "A.b-c_d": "Z9",
        }}))
        .unwrap();
        assert!(s.matches(&labels(&[
            ("kubefed.io/region", "eu-west_1.a"),
            ("a", ""),
            ("A.b-c_d", "Z9"),
        ])));
    }

    #[test]
    fn unknown_operator_error_names_it() {
        let err = selector(json!({"matchExpressions": [{"key": "a", "operator": "Gt"}]}))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"Gt\" is not a valid label selector operator"),
            "{err}"
        );
    }
}
