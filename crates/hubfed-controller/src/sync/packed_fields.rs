//! The federated objects' cache keeps their `spec` and `status` as JSON text ([`pack`]);
//! [`field`] reads them back.

use kube::api::DynamicObject;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The top-level fields the sync controller's cache of federated objects keeps as JSON text.
const PACKED: [&str; 2] = ["spec", "status"];

/// Packs a federated object for the sync controller's cache: its `spec` and `status` as JSON
/// text. As a `serde_json::Value` every JSON object is a B-tree node of ~640 bytes however
/// few its keys, so a federated object with 10 clusters took ~25 KiB in the cache — its
/// placement and status one node per cluster, the template one per nested map — of which a
/// few KiB are text. Read them back with [`field`]: a reconcile decodes the spec once, as it
/// did before (from a clone of the tree), and nothing reads the fields otherwise. Only the
/// cache's copy is packed; what the controller writes to the hub never comes from it.
pub(crate) fn pack(object: &mut DynamicObject) {
    for name in PACKED {
        if let Some(value) = object.data.get_mut(name)
            && !value.is_string()
        {
            *value = Value::String(value.to_string());
        }
    }
}

/// A federated object's top-level `name` (`spec`, `status`), decoded — packed by [`pack`] or
/// not; `None` when the object has no such field.
pub(crate) fn field<T: DeserializeOwned>(
    object: &DynamicObject,
    name: &str,
) -> Option<Result<T, serde_json::Error>> {
    let value = object.data.get(name)?;
    Some(match value {
        Value::String(text) if PACKED.contains(&name) => serde_json::from_str(text),
        value => T::deserialize(value),
    })
}

#[cfg(test)]
mod tests {
    use hubfed_api::federated::{FederatedSpec, FederatedStatus};
    use serde_json::json;

    use super::*;

    fn federated() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "types.kubefed.io/v1beta1",
            "kind": "FederatedConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "labels": {"x": "y"}},
            "spec": {
                "template": {"data": {"k": "v"}},
                "placement": {"clusters": [{"name": "m1"}, {"name": "m2"}]},
                "overrides": [{"clusterName": "m2", "clusterOverrides": [
                    {"path": "/data/k", "value": "w"}]}],
            },
            "status": {
                "conditions": [{"type": "Propagation", "status": "True"}],
                "clusters": [{"name": "m1"}, {"name": "m2", "status": "CreationFailed"}],
            },
        }))
        .unwrap()
    }

    /// Packed or not, the fields read back the same; the rest of the object is untouched.
    #[test]
    fn packed_fields_read_back_as_they_were() {
        let plain = federated();
        let mut packed = plain.clone();
        pack(&mut packed);
        assert!(packed.data["spec"].is_string() && packed.data["status"].is_string());
        assert_eq!(packed.metadata, plain.metadata);
        for object in [&plain, &packed] {
            let spec: FederatedSpec = field(object, "spec").unwrap().unwrap();
            let expected: FederatedSpec =
                serde_json::from_value(plain.data["spec"].clone()).unwrap();
            assert_eq!(spec, expected);
            let status: FederatedStatus = field(object, "status").unwrap().unwrap();
            assert_eq!(status.clusters.len(), 2);
            assert_eq!(status.conditions[0].type_, "Propagation");
        }
        // Packing twice changes nothing.
        let mut twice = packed.clone();
        pack(&mut twice);
        assert_eq!(twice.data, packed.data);
    }

    /// A missing field is `None`; one that does not decode is an error, packed or not (a spec
    /// that cannot be read is refused, never taken for an empty one).
    #[test]
    fn missing_and_unreadable_fields() {
        let mut object = federated();
        object.data.as_object_mut().unwrap().remove("status");
        object.data["spec"]["placement"] = json!("not a placement");
        assert!(field::<FederatedStatus>(&object, "status").is_none());
        assert!(field::<FederatedSpec>(&object, "spec").unwrap().is_err());
        pack(&mut object);
        assert!(field::<FederatedStatus>(&object, "status").is_none());
        assert!(field::<FederatedSpec>(&object, "spec").unwrap().is_err());
    }
}
