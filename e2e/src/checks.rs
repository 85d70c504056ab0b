//! Checks of objects as JSON: a member's copy ([`member_mismatch`]), a federated object's
//! status ([`propagated_ok`] and its parts).

use std::collections::BTreeMap;

use hubfed_api::names::{MANAGED_LABEL, SYNC_CONTROLLER_FINALIZER};
use serde_json::Value;

use crate::Wait;

/// The object's labels.
pub fn labels(object: &Value) -> BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the object carries `kubefed.io/managed=true`.
pub fn is_managed(object: &Value) -> bool {
    object["metadata"]["labels"][MANAGED_LABEL] == "true"
}

/// Why `object` (a copy in `cluster`) is not yet as wanted: it must exist, be managed and hold
/// each `(JSON pointer, value)` of `fields` (`None`: the field must be absent). `None` when all
/// holds.
pub fn member_mismatch(
    cluster: &str,
    object: Option<&Value>,
    fields: &[(&str, Option<&Value>)],
) -> Option<String> {
    let Some(object) = object else {
        return Some(format!("{cluster}: no object"));
    };
    let mut problems = Vec::new();
    if !is_managed(object) {
        problems.push(format!("not managed (labels {:?})", labels(object)));
    }
    if object["metadata"]["deletionTimestamp"].is_string() {
        problems.push("terminating".to_owned());
    }
    for (pointer, wanted) in fields {
        let actual = object.pointer(pointer);
        if actual != *wanted {
            problems.push(format!(
                "{pointer} is {}, want {}",
                show(actual),
                show(*wanted)
            ));
        }
    }
    (!problems.is_empty()).then(|| format!("{cluster}: {}", problems.join(", ")))
}

/// `Done` when the federated object has the sync finalizer, a current status with
/// `Propagation=True`, and an OK `status.clusters` entry for each of `clusters`.
pub fn propagated_ok(object: &Value, clusters: &[&str]) -> Wait<()> {
    let mut problems = Vec::new();
    let finalizers = &object["metadata"]["finalizers"];
    if !finalizers
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f == SYNC_CONTROLLER_FINALIZER))
    {
        problems.push(format!("finalizers {finalizers}"));
    }
    if !status_is_current(object) {
        problems.push(format!(
            "observedGeneration {} for generation {}",
            object["status"]["observedGeneration"], object["metadata"]["generation"]
        ));
    }
    match propagation_condition(object) {
        Some(condition) if condition["status"] == "True" => {}
        other => problems.push(format!("Propagation condition {}", show(other))),
    }
    for cluster in clusters {
        match cluster_status(object, cluster) {
            Some(entry) if entry.get("status").is_none_or(|s| s == "") => {}
            other => problems.push(format!("status.clusters[{cluster}] {}", show(other))),
        }
    }
    Wait::all_or_pending(problems)
}

/// A JSON value for a message; `absent` for `None`.
pub fn show(value: Option<&Value>) -> String {
    value.map_or_else(|| "absent".to_owned(), Value::to_string)
}

/// The `Propagation` condition of a federated object.
pub fn propagation_condition(object: &Value) -> Option<&Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|condition| condition["type"] == "Propagation")
}

/// The `status.clusters[]` entry of `cluster`.
pub fn cluster_status<'a>(object: &'a Value, cluster: &str) -> Option<&'a Value> {
    object["status"]["clusters"]
        .as_array()?
        .iter()
        .find(|entry| entry["name"] == cluster)
}

/// Whether the status was written for the object's current generation.
pub fn status_is_current(object: &Value) -> bool {
    object["status"]["observedGeneration"].as_i64().is_some()
        && object["status"]["observedGeneration"] == object["metadata"]["generation"]
}
