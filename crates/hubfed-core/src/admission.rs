//! The sync finalizer at admission: a federated object created while its type's sync
//! controller runs gets `kubefed.io/sync-controller` in the same write that creates it, so the
//! controller's first reconcile need not write it — one hub write less per object (the
//! controller still adds it to objects created without it: webhook down, type enabled later).
//!
//! The finalizer is only given to an object some controller will release it from, or its
//! deletion would hang: the type's FederatedTypeConfig must say its propagation controller
//! runs (status for its current generation, not being deleted), and a namespace-scoped
//! control plane only syncs the objects in its own namespace. Anything unknown (the webhook's
//! caches not filled yet, no KubeFedConfig) means no finalizer.

use std::sync::Arc;

use hubfed_api::federatedtypeconfig::{ControllerStatus, FederatedTypeConfig, ResourceScope};
use hubfed_api::names::SYNC_CONTROLLER_FINALIZER;
use serde_json::{Value, json};

/// What the webhook knows of the hub when a federated object is created.
#[derive(Clone, Copy, Debug)]
pub struct Plane<'a> {
    /// The control plane's scope (the KubeFedConfig's `spec.scope`); `None` when unknown.
    pub scope: Option<ResourceScope>,
    /// The control plane's namespace.
    pub namespace: &'a str,
    /// The FederatedTypeConfigs in that namespace.
    pub ftcs: &'a [Arc<FederatedTypeConfig>],
}

/// Whether `ftc`'s sync controller runs for `Federated<Kind>` objects of `group`/`kind`, by
/// the FTC's own status.
pub fn syncs(ftc: &FederatedTypeConfig, group: &str, kind: &str) -> bool {
    let mut defaulted = ftc.clone();
    defaulted.set_defaults();
    let federated = &defaulted.spec.federated_type;
    let running = ftc.status.as_ref().is_some_and(|s| {
        s.propagation_controller == ControllerStatus::Running
            && Some(s.observed_generation) == ftc.metadata.generation
    });
    federated.group == group
        && federated.kind == kind
        && ftc.metadata.deletion_timestamp.is_none()
        && defaulted.propagation_enabled()
        && running
}

/// The JSON patch (RFC 6902) that adds the sync finalizer to `object`, a `group`/`kind`
/// federated object being created; `None` when it has it already, is being deleted, or no
/// sync controller would release it (module documentation).
pub fn sync_finalizer_patch(
    object: &Value,
    group: &str,
    kind: &str,
    plane: &Plane<'_>,
) -> Option<Value> {
    let scope = plane.scope?;
    let metadata = object.get("metadata")?;
    if metadata
        .get("deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        return None;
    }
    if scope == ResourceScope::Namespaced
        && metadata.get("namespace").and_then(Value::as_str) != Some(plane.namespace)
    {
        return None;
    }
    if !plane.ftcs.iter().any(|ftc| syncs(ftc, group, kind)) {
        return None;
    }
    match metadata.get("finalizers") {
        Some(Value::Array(finalizers)) => {
            if finalizers
                .iter()
                .any(|f| f.as_str() == Some(SYNC_CONTROLLER_FINALIZER))
            {
                None
            } else {
                Some(json!([{
                    "op": "add",
                    "path": "/metadata/finalizers/-",
                    "value": SYNC_CONTROLLER_FINALIZER,
                }]))
            }
        }
        // Absent or null (anything else the API server refuses on its own).
        None | Some(Value::Null) => Some(json!([{
            "op": "add",
            "path": "/metadata/finalizers",
            "value": [SYNC_CONTROLLER_FINALIZER],
        }])),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use hubfed_api::federatedtypeconfig::{
        ApiResource, FederatedTypeConfigStatus, PropagationMode,
    };

    use super::*;

    fn ftc(generation: i64, observed: i64, running: bool) -> FederatedTypeConfig {
        let target = ApiResource {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            plural_name: "configmaps".into(),
            scope: ResourceScope::Namespaced,
        };
        let mut ftc = FederatedTypeConfig::for_target(target, "kube-federation-system");
        ftc.metadata.generation = Some(generation);
        ftc.status = Some(FederatedTypeConfigStatus {
            observed_generation: observed,
            propagation_controller: if running {
                ControllerStatus::Running
            } else {
                ControllerStatus::NotRunning
            },
            status_controller: None,
        });
        ftc
    }

    fn object(namespace: &str, finalizers: Option<Value>) -> Value {
        let mut object = json!({
            "apiVersion": "types.kubefed.io/v1beta1",
            "kind": "FederatedConfigMap",
            "metadata": {"name": "a", "namespace": namespace},
            "spec": {},
        });
        if let Some(finalizers) = finalizers {
            object["metadata"]["finalizers"] = finalizers;
        }
        object
    }

    const NS: &str = "kube-federation-system";

    fn patch(object: &Value, ftcs: &[FederatedTypeConfig], scope: ResourceScope) -> Option<Value> {
        let ftcs: Vec<Arc<FederatedTypeConfig>> = ftcs.iter().cloned().map(Arc::new).collect();
        let ftcs = ftcs.as_slice();
        let plane = Plane {
            scope: Some(scope),
            namespace: NS,
            ftcs,
        };
        sync_finalizer_patch(object, "types.kubefed.io", "FederatedConfigMap", &plane)
    }

    #[test]
    fn a_running_type_gets_the_finalizer_once() {
        let ftcs = [ftc(2, 2, true)];
        assert_eq!(
            patch(&object("default", None), &ftcs, ResourceScope::Cluster),
            Some(
                json!([{"op": "add", "path": "/metadata/finalizers", "value": ["kubefed.io/sync-controller"]}])
            )
        );
        assert_eq!(
            patch(
                &object("default", Some(json!(["example.com/keep"]))),
                &ftcs,
                ResourceScope::Cluster
            ),
            Some(
                json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "kubefed.io/sync-controller"}])
            )
        );
        assert_eq!(
            patch(
                &object("default", Some(json!(["kubefed.io/sync-controller"]))),
                &ftcs,
                ResourceScope::Cluster
            ),
            None
        );
        assert!(
            patch(
                &object("default", Some(Value::Null)),
                &ftcs,
                ResourceScope::Cluster
            )
            .is_some()
        );
    }

    #[test]
    fn no_finalizer_nobody_would_release() {
        let plain = object("default", None);
        // No FTC for the kind, a stopped controller, a status of an older generation.
        assert_eq!(patch(&plain, &[], ResourceScope::Cluster), None);
        assert_eq!(
            patch(&plain, &[ftc(1, 1, false)], ResourceScope::Cluster),
            None
        );
        assert_eq!(
            patch(&plain, &[ftc(3, 2, true)], ResourceScope::Cluster),
            None
        );
        // Propagation disabled, status not updated yet.
        let mut disabled = ftc(2, 2, true);
        disabled.spec.propagation = PropagationMode::Disabled;
        assert_eq!(patch(&plain, &[disabled], ResourceScope::Cluster), None);
        // An FTC being deleted.
        let mut deleting = ftc(2, 2, true);
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        );
        assert_eq!(patch(&plain, &[deleting], ResourceScope::Cluster), None);
        // Another kind.
        let ftcs = [Arc::new(ftc(2, 2, true))];
        let plane = Plane {
            scope: Some(ResourceScope::Cluster),
            namespace: NS,
            ftcs: &ftcs,
        };
        assert_eq!(
            sync_finalizer_patch(&plain, "types.kubefed.io", "FederatedSecret", &plane),
            None
        );
        assert_eq!(
            sync_finalizer_patch(&plain, "example.com", "FederatedConfigMap", &plane),
            None
        );
        // The scope unknown.
        let plane = Plane {
            scope: None,
            ..plane
        };
        assert_eq!(
            sync_finalizer_patch(&plain, "types.kubefed.io", "FederatedConfigMap", &plane),
            None
        );
    }

    #[test]
    fn a_namespaced_plane_only_syncs_its_namespace() {
        let ftcs = [ftc(2, 2, true)];
        assert_eq!(
            patch(&object("default", None), &ftcs, ResourceScope::Namespaced),
            None
        );
        assert!(patch(&object(NS, None), &ftcs, ResourceScope::Namespaced).is_some());
    }

    #[test]
    fn an_object_being_deleted_is_left_alone() {
        let ftcs = [ftc(2, 2, true)];
        let mut deleting = object("default", None);
        deleting["metadata"]["deletionTimestamp"] = json!("2026-11-27T07:00:00Z");
        assert_eq!(patch(&deleting, &ftcs, ResourceScope::Cluster), None);
    }
}
