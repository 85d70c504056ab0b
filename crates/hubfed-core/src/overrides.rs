//! Per-cluster overrides: `spec.overrides[].clusterOverrides` as RFC 6902 JSON patches
//! (docs/kubefed-compatibility.md §1.6 "Overrides", KubeFed `pkg/controller/util/overrides.go`).
//!
//! - an empty `op` means `replace`; only `add`, `remove` and `replace` are allowed;
//! - paths `/metadata/namespace`, `/metadata/name`, `/metadata/generateName` and `/kind` are
//!   forbidden (identity is not overridable; `apiVersion` is); hubfed also rejects the empty
//!   path, which would replace the whole object;
//! - two entries for the same `clusterName`, or the same path twice for one cluster, are errors.
//!
//! Unlike KubeFed, where any invalid override blocked every cluster, errors are per cluster:
//! [`patch_for_cluster`] only looks at the entries for the cluster it is asked about.

use hubfed_api::federated::{ClusterOverrides, Override};
use json_patch::{Patch, PatchOperation};
use serde_json::{Value, json};

use crate::{CoreError, Result};

/// Override paths KubeFed refuses (`invalidPaths` in `overrides.go`).
pub const FORBIDDEN_PATHS: [&str; 4] = [
    "/metadata/namespace",
    "/metadata/name",
    "/metadata/generateName",
    "/kind",
];

/// The validated patch for `cluster`, or `None` when no overrides name it.
pub fn patch_for_cluster(
    overrides: Option<&[ClusterOverrides]>,
    cluster: &str,
) -> Result<Option<Patch>> {
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
        if path.is_empty() || FORBIDDEN_PATHS.contains(&path) {
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
    Ok(Some(Patch(operations)))
}

fn operation(cluster: &str, index: usize, item: &Override) -> Result<PatchOperation> {
    let op = if item.op.is_empty() {
        "replace"
    } else {
        item.op.as_str()
    };
    // KubeFed serialises the override with `value,omitempty`, so a missing value reaches the
    // patch library as an absent member, which evanphx/json-patch treats as null.
    let value = item.value.clone().unwrap_or(Value::Null);
    let raw = match op {
        "add" | "replace" => json!({"op": op, "path": item.path, "value": value}),
        "remove" => json!({"op": op, "path": item.path}),
        other => {
            return Err(CoreError::UnsupportedOverrideOp {
                cluster: cluster.to_owned(),
                index,
                op: other.to_owned(),
            });
        }
    };
    serde_json::from_value(raw).map_err(|source| CoreError::InvalidOverride {
        cluster: cluster.to_owned(),
        index,
        source,
    })
}

/// Applies `patch` to `object` atomically: on error `object` is left unchanged.
pub fn apply_patch(object: &mut Value, patch: &Patch, cluster: &str) -> Result<()> {
    json_patch::patch(object, patch).map_err(|source| CoreError::ApplyOverrides {
        cluster: cluster.to_owned(),
        source,
    })
}

/// Validates and applies the overrides for `cluster` to `object`. Returns the paths written by
/// `add`/`replace` operations, so retention can tell which fields the user set explicitly.
pub fn apply_overrides(
    object: &mut Value,
    overrides: Option<&[ClusterOverrides]>,
    cluster: &str,
) -> Result<Vec<String>> {
    let Some(patch) = patch_for_cluster(overrides, cluster)? else {
        return Ok(Vec::new());
    };
    apply_patch(object, &patch, cluster)?;
    Ok(patch
        .iter()
        .filter(|op| matches!(op, PatchOperation::Add(_) | PatchOperation::Replace(_)))
        .map(|op| op.path().as_str().to_owned())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overrides(v: Value) -> Vec<ClusterOverrides> {
        serde_json::from_value(v).unwrap()
    }

    fn deployment() -> Value {
        json!({
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
        for path in FORBIDDEN_PATHS.into_iter().chain([""]) {
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
    fn malformed_pointer_is_invalid() {
        let ov = overrides(json!([{"clusterName": "c1", "clusterOverrides": [
            {"path": "spec/replicas", "value": 1},
        ]}]));
        assert!(matches!(
            patch_for_cluster(Some(&ov), "c1"),
            Err(CoreError::InvalidOverride { index: 0, .. })
        ));
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
    fn replace_and_remove_of_missing_paths_fail() {
        for item in [
            json!({"path": "/spec/nothing", "value": 1}),
            json!({"op": "remove", "path": "/spec/nothing"}),
        ] {
            let ov = overrides(json!([{"clusterName": "c1", "clusterOverrides": [item]}]));
            let mut obj = deployment();
            assert!(apply_overrides(&mut obj, Some(&ov), "c1").is_err());
        }
    }
}
