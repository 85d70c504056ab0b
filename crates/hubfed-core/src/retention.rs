//! Fields hubfed leaves to member clusters (KubeFed "Local Value Retention",
//! `dispatch/retain.go`, docs/kubefed-compatibility.md §2.4).
//!
//! KubeFed updated members with a full PUT, which clears every field missing from the body.
//! It therefore copied member-owned values into each body: `resourceVersion`, `finalizers`,
//! `annotations`, a Service's `clusterIP`/`clusterIPs`/`nodePort`s/`healthCheckNodePort`, a
//! ServiceAccount's `secrets`, and `spec.replicas` with `retainReplicas`.
//!
//! hubfed writes with server-side apply, which only changes fields owned by hubfed's field
//! manager: a field hubfed never sends is left as the member has it, whoever set it (the API
//! server allocating a clusterIP or nodePort, the token controller adding SA secrets, member
//! controllers adding annotations or finalizers). No member value ever has to be copied into
//! the desired object, which is why the desired object is built from the template alone.
//! What remains is:
//!
//! - never send values a template carries but does not mean: server-populated metadata and
//!   `status` ([`strip_server_populated_fields`]), and a Service's unset or hub-allocated
//!   addresses ([`strip_member_allocated_service_fields`]);
//! - `retainReplicas`: stop sending `spec.replicas` once the member object exists
//!   ([`release_replicas`]); see there for the ownership hand-over this requires.

use serde_json::{Map, Value};

/// JSON pointer of the replica count that `retainReplicas` leaves to the member.
pub const REPLICAS_PATH: &str = "/spec/replicas";

/// Metadata the API server populates; a template copied from a live object carries them, and
/// sending them would be refused or would pin member values to the hub's.
pub const SERVER_POPULATED_METADATA: [&str; 9] = [
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
    "ownerReferences",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Removes server-populated metadata and `status` from a template-derived object.
///
/// `ownerReferences` are removed too: owner UIDs are cluster-local and cannot point across
/// clusters.
pub fn strip_server_populated_fields(object: &mut Map<String, Value>) {
    object.remove("status");
    if let Some(Value::Object(metadata)) = object.get_mut("metadata") {
        for field in SERVER_POPULATED_METADATA {
            metadata.remove(field);
        }
    }
}

/// Removes Service fields each member allocates for itself, unless the template sets them to
/// something that has to be the same everywhere.
///
/// A FederatedService template typically comes from `kubefedctl federate` of a hub Service,
/// so it carries the hub's allocated `clusterIP`, `clusterIPs` and sometimes `nodePort: 0`
/// placeholders from hand-written manifests. Sending them would make every member fight its
/// own allocator: `clusterIP` is immutable, so a value that differs from the member's fails
/// every apply, and hub addresses are usually outside the member's service range.
///
/// - `clusterIP` is kept only when it is `"None"` (headless, must be set at creation);
///   `clusterIPs` only when it is `["None"]`. A specific address for one cluster can still be
///   set with an override, which is applied after this step.
/// - `nodePort` entries and `healthCheckNodePort` are kept when non-zero (a fixed node port is
///   a deliberate choice KubeFed also honoured at creation) and removed when `0` or `null`.
pub fn strip_member_allocated_service_fields(object: &mut Map<String, Value>) {
    let Some(Value::Object(spec)) = object.get_mut("spec") else {
        return;
    };
    if spec.get("clusterIP").is_some_and(|ip| ip != "None") {
        spec.remove("clusterIP");
    }
    if spec.get("clusterIPs").is_some_and(|ips| {
        ips.as_array()
            .is_none_or(|ips| ips.len() != 1 || ips[0] != "None")
    }) {
        spec.remove("clusterIPs");
    }
    if spec.get("healthCheckNodePort").is_some_and(is_unset_port) {
        spec.remove("healthCheckNodePort");
    }
    if let Some(Value::Array(ports)) = spec.get_mut("ports") {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            if port.get("nodePort").is_some_and(is_unset_port) {
                port.remove("nodePort");
            }
        }
    }
}

fn is_unset_port(port: &Value) -> bool {
    port.is_null() || port.as_i64() == Some(0)
}

/// `retainReplicas`: removes `spec.replicas` from the desired object when the member object
/// already exists and no override sets it. Returns whether it was removed.
///
/// On creation the template's (or override's) value is sent, as KubeFed did. An override of
/// `/spec/replicas` wins over retention, as in KubeFed, where retention ran before overrides.
///
/// Ownership hand-over (the controller's job): server-side apply *deletes* a field that the
/// applying manager owned in its previous apply and omits now. If hubfed's field manager still
/// owns `spec.replicas` on the member (it sent it at creation, or before `retainReplicas` was
/// turned on), the controller must first move ownership away, e.g. apply only
/// `spec.replicas` with the member's current value under a separate field manager, and only
/// then apply the desired object. Otherwise the member's replicas are reset to the default.
/// Fields set by an HPA through the scale subresource are already co-owned by the HPA's
/// manager and are unaffected.
pub fn release_replicas(
    object: &mut Map<String, Value>,
    member_exists: bool,
    overridden_paths: &[String],
) -> bool {
    if !member_exists || overridden_paths.iter().any(|p| p == REPLICAS_PATH) {
        return false;
    }
    match object.get_mut("spec") {
        Some(Value::Object(spec)) => spec.remove("replicas").is_some(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(map) => map,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn server_populated_metadata_and_status_are_removed() {
        let mut obj = object(json!({
            "metadata": {
                "name": "x", "labels": {"a": "b"}, "annotations": {"c": "d"},
                "resourceVersion": "12", "uid": "u", "creationTimestamp": "t", "generation": 3,
                "managedFields": [], "selfLink": "/x", "ownerReferences": [{"uid": "o"}],
                "deletionTimestamp": "t", "deletionGracePeriodSeconds": 30,
            },
            "spec": {"replicas": 1},
            "status": {"readyReplicas": 1},
        }));
        strip_server_populated_fields(&mut obj);
        assert_eq!(
            Value::Object(obj),
            json!({
                "metadata": {"name": "x", "labels": {"a": "b"}, "annotations": {"c": "d"}},
                "spec": {"replicas": 1},
            })
        );
    }

    #[test]
    fn hub_allocated_service_addresses_are_removed() {
        let mut obj = object(json!({"spec": {
            "type": "NodePort",
            "clusterIP": "10.96.12.7",
            "clusterIPs": ["10.96.12.7"],
            "healthCheckNodePort": 0,
            "ports": [
                {"name": "http", "port": 80, "nodePort": 0},
                {"name": "https", "port": 443, "nodePort": 30443},
                {"name": "metrics", "port": 9090, "nodePort": null},
            ],
            "sessionAffinity": "None",
        }}));
        strip_member_allocated_service_fields(&mut obj);
        assert_eq!(
            Value::Object(obj),
            json!({"spec": {
                "type": "NodePort",
                "ports": [
                    {"name": "http", "port": 80},
                    {"name": "https", "port": 443, "nodePort": 30443},
                    {"name": "metrics", "port": 9090},
                ],
                "sessionAffinity": "None",
            }})
        );
    }

    #[test]
    fn empty_cluster_ip_is_removed() {
        let mut obj = object(json!({"spec": {"clusterIP": "", "clusterIPs": []}}));
        strip_member_allocated_service_fields(&mut obj);
        assert_eq!(Value::Object(obj), json!({"spec": {}}));
    }

    #[test]
    fn headless_services_keep_none() {
        let headless = json!({"spec": {"clusterIP": "None", "clusterIPs": ["None"], "healthCheckNodePort": 31000}});
        let mut obj = object(headless.clone());
        strip_member_allocated_service_fields(&mut obj);
        assert_eq!(Value::Object(obj), headless);
    }

    #[test]
    fn service_without_spec_is_left_alone() {
        let mut obj = object(json!({"metadata": {"name": "s"}}));
        strip_member_allocated_service_fields(&mut obj);
        assert_eq!(Value::Object(obj), json!({"metadata": {"name": "s"}}));
    }

    #[test]
    fn replicas_are_released_only_for_existing_members_without_override() {
        let mut obj = object(json!({"spec": {"replicas": 3, "paused": false}}));
        assert!(!release_replicas(&mut obj, false, &[]));
        assert_eq!(obj["spec"]["replicas"], 3);

        assert!(!release_replicas(
            &mut obj,
            true,
            &[REPLICAS_PATH.to_owned()]
        ));
        assert_eq!(obj["spec"]["replicas"], 3);

        assert!(release_replicas(
            &mut obj,
            true,
            &["/spec/paused".to_owned()]
        ));
        assert_eq!(Value::Object(obj), json!({"spec": {"paused": false}}));

        let mut no_replicas = object(json!({"spec": {}}));
        assert!(!release_replicas(&mut no_replicas, true, &[]));
    }
}
