//! Per-cluster overrides: `spec.overrides[].clusterOverrides`, JSON patches applied exactly as
//! KubeFed applies them (docs/kubefed-compatibility.md §1.6 "Overrides", KubeFed
//! `pkg/controller/util/overrides.go`, on `github.com/evanphx/json-patch` v4 — see
//! [`crate::gopatch`] for its lenient rules, e.g. `replace` of a missing member adds it).
//!
//! - an empty `op` means `replace`; only `add`, `remove` and `replace` are allowed;
//! - the paths `/metadata/namespace`, `/metadata/name`, `/metadata/generateName` and `/kind`
//!   (compared as written) are refused: identity is not overridable; `apiVersion` is;
//! - two entries for the same `clusterName`, or the same path twice for one cluster, are errors;
//! - a value is normalised as KubeFed's Go types leave it: numbers pass through `float64` and
//!   come back as integers when whole (`4.0` is sent as `4`);
//! - the result must still have a `kind` (apimachinery's `Unstructured` refuses it otherwise).
//!
//! Unlike KubeFed, where any invalid override blocked every cluster, errors are per cluster:
//! [`patch_for_cluster`] only looks at the entries for the cluster it is asked about. The
//! differential test `tests/overrides_golden.rs` holds this module to KubeFed's results.

use hubfed_api::federated::{ClusterOverrides, Override};
use serde_json::{Number, Value};

use crate::gopatch::{self, Op, Operation};
use crate::{CoreError, Result};

/// Override paths KubeFed refuses (`invalidPaths` in `overrides.go`).
pub const FORBIDDEN_PATHS: [&str; 4] = [
    "/metadata/namespace",
    "/metadata/name",
    "/metadata/generateName",
    "/kind",
];

/// The validated operations for `cluster`, or `None` when no overrides name it.
pub fn patch_for_cluster(
    overrides: Option<&[ClusterOverrides]>,
    cluster: &str,
) -> Result<Option<Vec<Operation>>> {
    let mut entries = overrides
        .unwrap_or_default()
        .iter()
        .filter(|entry| entry.cluster_name == cluster);
    let Some(entry) = entries.next() else {
        return Ok(None);
    };
    if entries.next().is_some() {
        return Err(CoreError::DuplicateClusterOverrides {
            cluster: cluster.to_owned(),
        });
    }

    let mut seen_paths: Vec<&str> = Vec::with_capacity(entry.cluster_overrides.len());
    let mut operations = Vec::with_capacity(entry.cluster_overrides.len());
    for (index, item) in entry.cluster_overrides.iter().enumerate() {
        let path = item.path.as_str();
        if FORBIDDEN_PATHS.contains(&path) {
            return Err(CoreError::ForbiddenOverridePath {
                cluster: cluster.to_owned(),
                index,
                path: path.to_owned(),
            });
        }
        if seen_paths.contains(&path) {
            return Err(CoreError::DuplicateOverridePath {
                cluster: cluster.to_owned(),
                path: path.to_owned(),
            });
        }
        seen_paths.push(path);
        operations.push(operation(cluster, index, item)?);
    }
    Ok(Some(operations))
}

fn operation(cluster: &str, index: usize, item: &Override) -> Result<Operation> {
    let op = match item.op.as_str() {
        "" | "replace" => Op::Replace,
        "add" => Op::Add,
        "remove" => Op::Remove,
        other => {
            return Err(CoreError::UnsupportedOverrideOp {
                cluster: cluster.to_owned(),
                index,
                op: other.to_owned(),
            });
        }
    };
    Ok(Operation {
        op,
        path: item.path.clone(),
        value: item.value.as_ref().map(go_value),
    })
}

/// A value as it comes out of KubeFed's `interface{}` round trip and apimachinery's decoding:
/// every number a `float64`, read back as an integer when Go prints it as one.
fn go_value(value: &Value) -> Value {
    match value {
        Value::Number(n) => Value::Number(go_number(n)),
        Value::Array(items) => Value::Array(items.iter().map(go_value).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| (key.clone(), go_value(value)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn go_number(n: &Number) -> Number {
    let Some(float) = n.as_f64() else {
        return n.clone();
    };
    // Go prints a whole float64 below 1e21 without a fraction or exponent; apimachinery then
    // parses it as an int64 when it fits.
    if float.fract() == 0.0 && float.abs() < 9.223_372_036_854_776e18 {
        #[allow(clippy::cast_possible_truncation)]
        return Number::from(float as i64);
    }
    Number::from_f64(float).unwrap_or_else(|| n.clone())
}

/// Applies `operations` to `object` atomically: on error `object` is left unchanged.
pub fn apply_patch(object: &mut Value, operations: &[Operation], cluster: &str) -> Result<()> {
    let mut patched = object.clone();
    let failed = |source| CoreError::ApplyOverrides {
        cluster: cluster.to_owned(),
        source,
    };
    gopatch::apply(&mut patched, operations).map_err(failed)?;
    match patched.get("kind") {
        Some(Value::String(kind)) if !kind.is_empty() => {}
        _ => return Err(failed(gopatch::PatchError::KindMissing)),
    }
    *object = patched;
    Ok(())
}

/// Validates and applies the overrides for `cluster` to `object`. Returns the paths written by
/// `add`/`replace` operations, so retention can tell which fields the user set explicitly.
pub fn apply_overrides(
    object: &mut Value,
    overrides: Option<&[ClusterOverrides]>,
    cluster: &str,
) -> Result<Vec<String>> {
    let Some(operations) = patch_for_cluster(overrides, cluster)? else {
        return Ok(Vec::new());
    };
    apply_patch(object, &operations, cluster)?;
    Ok(operations
        .into_iter()
        .filter(|operation| operation.op != Op::Remove)
        .map(|operation| operation.path)
        .collect())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn overrides(v: Value) -> Vec<ClusterOverrides> {
        serde_json::from_value(v).unwrap()
    }

    fn deployment() -> Value {
        json!({
            "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"image": "nginx:1"}]}}},
        })
    }

    #[test]
    fn empty_op_means_replace_and_ops_apply_in_order() {
        let ov = overrides(json!([{"clusterName": "c1", "clusterOverrides": [
            {"path": "/spec/replicas", "value": 5},
            {"op": "add", "path": "/metadata/labels/zone", "value": "z1"},
            {"op": "remove", "path": "/metadata/labels/app"},
            {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "nginx:2"},
            {"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}},
        ]}]));
        let mut obj = deployment();
        let written = apply_overrides(&mut obj, Some(&ov), "c1").unwrap();
        assert_eq!(
            obj,
            json!({
                "kind": "Deployment",
                "metadata": {"name": "web", "labels": {"zone": "z1"}, "annotations": {"a": "b"}},
                "spec": {"replicas": 5, "template": {"spec": {"containers": [{"image": "nginx:2"}]}}},
            })
        );
        assert_eq!(
            written,
            [
                "/spec/replicas",
                "/metadata/labels/zone",
                "/spec/template/spec/containers/0/image",
                "/metadata/annotations"
            ]
        );
    }

    #[test]
    fn other_clusters_are_untouched() {
        let ov = overrides(json!([{"clusterName": "c1", "clusterOverrides": [
            {"path": "/spec/replicas", "value": 5},
        ]}]));
        let mut obj = deployment();
        assert!(
            apply_overrides(&mut obj, Some(&ov), "c2")
                .unwrap()
                .is_empty()
        );
        assert_eq!(obj, deployment());
        assert!(apply_overrides(&mut obj, None, "c1").unwrap().is_empty());
        assert_eq!(obj, deployment());
    }

    #[test]
    fn missing_value_is_null() {
        let ov = overrides(json!([{"clusterName": "c1", "clusterOverrides": [
            {"op": "add", "path": "/spec/paused"},
        ]}]));
        let mut obj = deployment();
        apply_overrides(&mut obj, Some(&ov), "c1").unwrap();
        assert_eq!(obj["spec"]["paused"], Value::Null);
    }

    #[test]
    fn forbidden_paths_are_rejected() {
        for path in FORBIDDEN_PATHS {
            let ov = overrides(json!([{"clusterName": "c1", "clusterOverrides": [
                {"path": "/spec/replicas", "value": 1},
                {"path": path, "value": "x"},
            ]}]));
            let err = patch_for_cluster(Some(&ov), "c1").unwrap_err();
            assert!(
                matches!(&err, CoreError::ForbiddenOverridePath { index: 1, path: p, .. } if p == path),
                "{path}: {err:?}"
            );
            assert!(err.to_string().contains("\"c1\""));
        }
        // apiVersion may be overridden.
        let ov = overrides(json!([{"clusterName": "c1", "clusterOverrides": [
            {"op": "add", "path": "/apiVersion", "value": "apps/v1beta2"},
        ]}]));
        let mut obj = deployment();
        apply_overrides(&mut obj, Some(&ov), "c1").unwrap();
        assert_eq!(obj["apiVersion"], "apps/v1beta2");
    }

    #[test]
    fn unsupported_ops_are_rejected() {
        for op in ["move", "copy", "test", "Replace", "merge"] {
            let ov = overrides(json!([{"clusterName": "c1", "clusterOverrides": [
                {"op": op, "path": "/spec/replicas", "value": 1},
            ]}]));
            let err = patch_for_cluster(Some(&ov), "c1").unwrap_err();
            assert!(
                matches!(&err, CoreError::UnsupportedOverrideOp { op: o, index: 0, .. } if o == op),
                "{op}: {err:?}"
            );
        }
    }

    #[test]
    fn duplicate_cluster_is_an_error_for_that_cluster_only() {
        let ov = overrides(json!([
            {"clusterName": "c1", "clusterOverrides": [{"path": "/spec/replicas", "value": 1}]},
            {"clusterName": "c2", "clusterOverrides": [{"path": "/spec/replicas", "value": 2}]},
            {"clusterName": "c1", "clusterOverrides": [{"path": "/spec/replicas", "value": 3}]},
        ]));
        let err = patch_for_cluster(Some(&ov), "c1").unwrap_err();
        assert!(
            matches!(&err, CoreError::DuplicateClusterOverrides { cluster } if cluster == "c1")
        );
        assert!(err.to_string().contains("\"c1\""));

        let mut obj = deployment();
        apply_overrides(&mut obj, Some(&ov), "c2").unwrap();
        assert_eq!(obj["spec"]["replicas"], 2);
    }

    #[test]
    fn duplicate_path_is_an_error_naming_it() {
        let ov = overrides(json!([{"clusterName": "c1", "clusterOverrides": [
            {"path": "/spec/replicas", "value": 1},
            {"op": "remove", "path": "/spec/replicas"},
        ]}]));
        let err = patch_for_cluster(Some(&ov), "c1").unwrap_err();
        assert!(
            matches!(&err, CoreError::DuplicateOverridePath { path, cluster } if path == "/spec/replicas" && cluster == "c1")
        );
        assert!(err.to_string().contains("/spec/replicas"));
    }

    #[test]
    fn a_path_without_leading_slash_acts_on_its_last_segment_at_the_root() {
        let ov = overrides(json!([{"clusterName": "c1", "clusterOverrides": [
            {"path": "spec/replicas", "value": 1},
        ]}]));
        let mut obj = deployment();
        apply_overrides(&mut obj, Some(&ov), "c1").unwrap();
        assert_eq!(obj["replicas"], 1);
        assert_eq!(obj["spec"]["replicas"], 3);
    }

    #[test]
    fn values_pass_through_go_numbers() {
        let ov = overrides(json!([{"clusterName": "c1", "clusterOverrides": [
            {"path": "/spec/replicas", "value": 4.0},
            {"path": "/spec/ratio", "value": [2.5, 1e300, 7]},
        ]}]));
        let mut obj = deployment();
        apply_overrides(&mut obj, Some(&ov), "c1").unwrap();
        assert_eq!(obj["spec"]["replicas"].as_i64(), Some(4));
        assert_eq!(obj["spec"]["ratio"], json!([2.5, 1e300, 7]));
    }

    #[test]
    fn a_result_without_kind_is_refused() {
        let ov = overrides(json!([{"clusterName": "c1", "clusterOverrides": [
            {"op": "remove", "path": "x/kind"},
        ]}]));
        let mut obj = deployment();
        let err = apply_overrides(&mut obj, Some(&ov), "c1").unwrap_err();
        assert!(err.to_string().contains("no kind"), "{err}");
        assert_eq!(obj["kind"], "Deployment");
    }

    #[test]
    fn failed_patch_leaves_object_unchanged() {
        let ov = overrides(json!([{"clusterName": "c1", "clusterOverrides": [
            {"path": "/spec/replicas", "value": 9},
            {"path": "/spec/missing/deep", "value": 1},
        ]}]));
        let mut obj = deployment();
        let err = apply_overrides(&mut obj, Some(&ov), "c1").unwrap_err();
        assert!(matches!(&err, CoreError::ApplyOverrides { cluster, .. } if cluster == "c1"));
        assert_eq!(obj, deployment());
    }

    #[test]
    fn replace_of_a_missing_member_adds_it_remove_fails() {
        let ov = overrides(json!([{"clusterName": "c1", "clusterOverrides": [
            {"path": "/metadata/annotations", "value": {"a": "b"}},
        ]}]));
        let mut obj = deployment();
        apply_overrides(&mut obj, Some(&ov), "c1").unwrap();
        assert_eq!(obj["metadata"]["annotations"], json!({"a": "b"}));

        let ov = overrides(json!([{"clusterName": "c1", "clusterOverrides": [
            {"op": "remove", "path": "/spec/nothing"},
        ]}]));
        assert!(apply_overrides(&mut obj, Some(&ov), "c1").is_err());
    }
}
