//! Field ownership of hubfed's field manager in a member object's `managedFields`.
//!
//! hubfed writes copies with server-side apply, so its manager owns fields through an
//! `Apply` entry: a field the template stops setting is removed by the next apply. A copy
//! created with a plain POST (the create-only path with adoption Disabled: a POST fails if the
//! object exists, an apply would take it over) records the same manager with an `Update`
//! entry, which later applies never clear: a field removed from the template would stay in
//! the member for ever. Once an apply has made the `Apply` entry co-own those fields, the
//! `Update` entry is dropped — what client-go's `csaupgrade` does for `kubectl`, with a merge
//! patch conditional on the object's resourceVersion.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use serde_json::{Value, json};

/// A merge patch dropping `manager`'s `Update` entries (main resource only) from an object's
/// `managedFields`. It carries the object's `resource_version`, which the API server checks:
/// it applies to exactly the object it was computed from. `None` when there is no such
/// entry, or when `manager` has no `Apply` entry (dropping the `Update` entry would then
/// leave its fields unowned).
pub fn drop_update_entries(
    managed_fields: &[ManagedFieldsEntry],
    manager: &str,
    resource_version: &str,
) -> Option<Value> {
    let ours = |entry: &ManagedFieldsEntry, operation: &str| {
        entry.manager.as_deref() == Some(manager)
            && entry.operation.as_deref() == Some(operation)
            && entry.subresource.as_deref().unwrap_or_default().is_empty()
    };
    if resource_version.is_empty()
        || !managed_fields.iter().any(|e| ours(e, "Apply"))
        || !managed_fields.iter().any(|e| ours(e, "Update"))
    {
        return None;
    }
    let kept: Vec<&ManagedFieldsEntry> = managed_fields
        .iter()
        .filter(|e| !ours(e, "Update"))
        .collect();
    Some(json!({
        "metadata": {"resourceVersion": resource_version, "managedFields": kept},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(manager: &str, operation: &str, subresource: Option<&str>) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.to_owned()),
            operation: Some(operation.to_owned()),
            subresource: subresource.map(str::to_owned),
            ..Default::default()
        }
    }

    fn apply_patch(object: &Value, patch: &Value) -> Value {
        let mut patched = object.clone();
        json_patch::merge(&mut patched, patch);
        patched
    }

    #[test]
    fn drops_our_update_entries_only() {
        let fields = vec![
            entry("kube-controller-manager", "Update", None),
            entry("hubfed", "Update", None),
            entry("hubfed", "Apply", None),
            entry("hubfed", "Update", Some("status")),
            entry("hubfed", "Update", None),
        ];
        let patch = drop_update_entries(&fields, "hubfed", "42").expect("a patch");
        let object = json!({"metadata": {"resourceVersion": "42", "managedFields": fields}});
        let patched = apply_patch(&object, &patch);
        let left: Vec<(String, String)> = patched["metadata"]["managedFields"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| {
                (
                    e["manager"].as_str().unwrap_or_default().to_owned(),
                    e["operation"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            left,
            [
                ("kube-controller-manager", "Update"),
                ("hubfed", "Apply"),
                ("hubfed", "Update"),
            ]
            .map(|(m, o)| (m.to_owned(), o.to_owned()))
        );
        assert_eq!(
            patched["metadata"]["managedFields"][2]["subresource"],
            "status"
        );
    }

    #[test]
    fn carries_the_resource_version_it_was_computed_from() {
        let fields = vec![
            entry("hubfed", "Apply", None),
            entry("hubfed", "Update", None),
        ];
        let patch = drop_update_entries(&fields, "hubfed", "42").expect("a patch");
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(drop_update_entries(&fields, "hubfed", ""), None);
    }

    #[test]
    fn nothing_to_do_or_nothing_safe_to_do() {
        let applied_only = vec![entry("hubfed", "Apply", None)];
        assert_eq!(drop_update_entries(&applied_only, "hubfed", "1"), None);
        // Without an Apply entry the Update entry is the only owner of those fields.
        let updated_only = vec![entry("hubfed", "Update", None)];
        assert_eq!(drop_update_entries(&updated_only, "hubfed", "1"), None);
        let others = vec![
            entry("hubfed", "Apply", None),
            entry("kubectl", "Update", None),
        ];
        assert_eq!(drop_update_entries(&others, "hubfed", "1"), None);
    }
}
