//! The object hubfed applies to one member cluster (docs/kubefed-compatibility.md §1.6 "Template
//! rules", KubeFed `sync/resource.go:ObjectForCluster` + `ApplyOverrides`), built from the template
//! alone.
//!
//! Steps, in order:
//! 1. start from `spec.template` (`{}` when absent, e.g. a FederatedNamespace);
//! 2. drop server-populated metadata, `status`, `metadata.finalizers` (owned by member
//!    controllers; KubeFed stripped them with a `FinalizersNotSupported` warning, see
//!    [`template_warnings`]) and `metadata.generateName`;
//! 3. identity: `metadata.name` from the federated object, `metadata.namespace` from it for
//!    namespaced targets only (never for `Namespace` or other cluster-scoped kinds), `kind`
//!    from the target type, `apiVersion` from the template if set, else from the target type
//!    (`v1` for the core group; KubeFed wrote `/v1`);
//! 4. per-type retention ([`crate::retention`]), so overrides can still set those fields;
//! 5. the cluster's overrides ([`crate::overrides`]);
//! 6. `retainReplicas` ([`crate::retention::release_replicas`]);
//! 7. identity again (an override replacing `/metadata` wholesale cannot move the object) and
//!    the managed label `kubefed.io/managed: "true"` last, so no override can remove it.
//!
//! Template labels are kept. Template annotations are kept too: a hubfed improvement, since
//! KubeFed dropped them (issues #1215, #1391) because its PUTs would have erased annotations
//! added by member controllers; server-side apply only owns the keys hubfed sends.

use hubfed_api::federated::FederatedSpec;
use hubfed_api::names::MANAGED_LABEL;
use serde_json::{Map, Value};

use crate::overrides::apply_overrides;
use crate::retention::{
    REPLICAS_PATH, release_replicas, strip_member_allocated_service_fields,
    strip_server_populated_fields,
};
use crate::validation::json_type_name;
use crate::{CoreError, Result};

/// The member-cluster type a FederatedTypeConfig propagates (its `spec.targetType`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetType {
    pub kind: String,
    /// API group; empty for the core group.
    pub group: String,
    pub version: String,
    /// Whether objects of the type live in a namespace (`false` for `Namespace` itself).
    pub namespaced: bool,
}

impl TargetType {
    /// `<group>/<version>`, or `<version>` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether this is the core `Namespace` type.
    pub fn is_namespace(&self) -> bool {
        self.group.is_empty() && self.kind == "Namespace"
    }

    fn is_service(&self) -> bool {
        self.group.is_empty() && self.kind == "Service"
    }
}

/// The object to apply to one cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredObject {
    /// The complete apply body.
    pub object: Value,
    /// JSON pointers of fields deliberately left out so the member keeps its own value; the
    /// controller must make sure hubfed's field manager no longer owns them before applying
    /// (see [`release_replicas`]).
    pub released_fields: Vec<String>,
}

/// Something KubeFed reported as a Warning event on the federated object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WarningEvent {
    /// Event reason, e.g. `FinalizersNotSupported`.
    pub reason: &'static str,
    pub message: String,
}

/// Warnings about template content hubfed ignores (KubeFed's event texts).
pub fn template_warnings(spec: &FederatedSpec) -> Vec<WarningEvent> {
    let has_finalizers = spec
        .template
        .as_ref()
        .and_then(|t| t.pointer("/metadata/finalizers"))
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty());
    if has_finalizers {
        vec![WarningEvent {
            reason: "FinalizersNotSupported",
            message: "metadata.finalizers cannot be set via template to avoid conflicting with \
                      controllers in member clusters. Consider using an override to add or \
                      remove elements from this collection."
                .to_owned(),
        }]
    } else {
        Vec::new()
    }
}

/// Builds the desired object for `cluster`.
///
/// `namespace` is the federated object's namespace; `member_exists` says whether the member
/// object was observed (it decides `retainReplicas`). Errors: [`CoreError::InvalidTemplate`]
/// (KubeFed status `ComputeResourceFailed`) or an override error (`ApplyOverridesFailed`).
pub fn desired_object(
    target: &TargetType,
    name: &str,
    namespace: Option<&str>,
    spec: &FederatedSpec,
    cluster: &str,
    member_exists: bool,
) -> Result<DesiredObject> {
    let mut object = match &spec.template {
        None => Map::new(),
        Some(Value::Object(template)) => template.clone(),
        Some(other) => {
            return Err(CoreError::InvalidTemplate {
                found: json_type_name(other),
            });
        }
    };

    strip_server_populated_fields(&mut object);
    edit_metadata(&mut object, |metadata| {
        for field in ["finalizers", "generateName", "namespace"] {
            metadata.remove(field);
        }
    });
    let api_version = match object.get("apiVersion") {
        Some(Value::String(v)) if !v.is_empty() => v.clone(),
        _ => target.api_version(),
    };
    object.insert("apiVersion".to_owned(), Value::String(api_version));
    set_identity(&mut object, target, name, namespace);

    if target.is_service() {
        strip_member_allocated_service_fields(&mut object);
    }

    let mut document = Value::Object(object);
    let overridden = apply_overrides(&mut document, spec.overrides.as_deref(), cluster)?;
    let mut object = match document {
        Value::Object(map) => map,
        // `replace` of the whole object with an array (KubeFed then failed too).
        other => {
            return Err(CoreError::InvalidTemplate {
                found: json_type_name(&other),
            });
        }
    };

    let mut released_fields = Vec::new();
    if spec.retain_replicas == Some(true)
        && release_replicas(&mut object, member_exists, &overridden)
    {
        released_fields.push(REPLICAS_PATH.to_owned());
    }

    set_identity(&mut object, target, name, namespace);
    edit_metadata(&mut object, |metadata| {
        let mut labels = match metadata.remove("labels") {
            Some(Value::Object(labels)) => labels,
            _ => Map::new(),
        };
        labels.insert(MANAGED_LABEL.to_owned(), Value::String("true".to_owned()));
        metadata.insert("labels".to_owned(), Value::Object(labels));
    });

    Ok(DesiredObject {
        object: Value::Object(object),
        released_fields,
    })
}

fn set_identity(
    object: &mut Map<String, Value>,
    target: &TargetType,
    name: &str,
    namespace: Option<&str>,
) {
    object.insert("kind".to_owned(), Value::String(target.kind.clone()));
    edit_metadata(object, |metadata| {
        metadata.insert("name".to_owned(), Value::String(name.to_owned()));
        match namespace {
            Some(ns) if target.namespaced => {
                metadata.insert("namespace".to_owned(), Value::String(ns.to_owned()));
            }
            _ => {
                metadata.remove("namespace");
            }
        }
    });
}

/// Edits `metadata`, replacing anything that is not an object with an empty one.
fn edit_metadata(object: &mut Map<String, Value>, edit: impl FnOnce(&mut Map<String, Value>)) {
    let mut metadata = match object.remove("metadata") {
        Some(Value::Object(metadata)) => metadata,
        _ => Map::new(),
    };
    edit(&mut metadata);
    object.insert("metadata".to_owned(), Value::Object(metadata));
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment_type() -> TargetType {
        TargetType {
            kind: "Deployment".into(),
            group: "apps".into(),
            version: "v1".into(),
            namespaced: true,
        }
    }

    fn core_type(kind: &str, namespaced: bool) -> TargetType {
        TargetType {
            kind: kind.into(),
            group: String::new(),
            version: "v1".into(),
            namespaced,
        }
    }

    fn spec(v: Value) -> FederatedSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn api_version_of_target_types() {
        assert_eq!(deployment_type().api_version(), "apps/v1");
        assert_eq!(core_type("ConfigMap", true).api_version(), "v1");
        assert!(core_type("Namespace", false).is_namespace());
        assert!(!deployment_type().is_namespace());
    }

    #[test]
    fn deployment_from_template() {
        let s = spec(json!({
            "template": {
                "metadata": {
                    "name": "ignored", "namespace": "ignored", "generateName": "x-",
                    "labels": {"app": "web"},
                    "annotations": {"team": "a"},
                    "finalizers": ["example.com/keep"],
                    "resourceVersion": "77", "uid": "abc", "creationTimestamp": null,
                    "managedFields": [{"manager": "kubectl"}],
                    "ownerReferences": [{"kind": "X"}],
                },
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}},
                "status": {"replicas": 3},
            },
            "placement": {"clusters": [{"name": "c1"}]},
        }));
        let d = desired_object(&deployment_type(), "web", Some("prod"), &s, "c1", false).unwrap();
        assert_eq!(
            d.object,
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {
                    "name": "web",
                    "namespace": "prod",
                    "labels": {"app": "web", "kubefed.io/managed": "true"},
                    "annotations": {"team": "a"},
                },
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}},
            })
        );
        assert!(d.released_fields.is_empty());
        assert_eq!(template_warnings(&s)[0].reason, "FinalizersNotSupported");
    }

    #[test]
    fn template_api_version_wins_and_kind_does_not() {
        let s = spec(json!({"template": {"apiVersion": "apps/v1beta2", "kind": "Other"}}));
        let d = desired_object(&deployment_type(), "web", Some("ns"), &s, "c1", false).unwrap();
        assert_eq!(d.object["apiVersion"], "apps/v1beta2");
        assert_eq!(d.object["kind"], "Deployment");
    }

    #[test]
    fn namespace_from_empty_template_has_no_namespace() {
        let s = spec(json!({"placement": {"clusterSelector": {}}}));
        let d = desired_object(
            &core_type("Namespace", false),
            "team-a",
            Some("team-a"),
            &s,
            "c1",
            true,
        )
        .unwrap();
        assert_eq!(
            d.object,
            json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "team-a", "labels": {"kubefed.io/managed": "true"}},
            })
        );
        assert!(template_warnings(&s).is_empty());
    }

    #[test]
    fn cluster_scoped_targets_drop_template_namespace() {
        let s = spec(json!({"template": {"metadata": {"namespace": "x"}, "rules": []}}));
        let target = TargetType {
            kind: "ClusterRole".into(),
            group: "rbac.authorization.k8s.io".into(),
            version: "v1".into(),
            namespaced: false,
        };
        let d = desired_object(&target, "reader", None, &s, "c1", false).unwrap();
        assert_eq!(d.object["metadata"].get("namespace"), None);
        assert_eq!(d.object["apiVersion"], "rbac.authorization.k8s.io/v1");
    }

    #[test]
    fn overrides_apply_after_template_and_managed_label_comes_last() {
        let s = spec(json!({
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"replicas": 3}},
            "overrides": [{"clusterName": "c1", "clusterOverrides": [
                {"path": "/spec/replicas", "value": 7},
                {"op": "remove", "path": "/metadata/labels"},
            ]}, {"clusterName": "c2", "clusterOverrides": [
                {"op": "add", "path": "/metadata/labels/kubefed.io~1managed", "value": "false"},
            ]}],
        }));
        let d1 = desired_object(&deployment_type(), "web", Some("ns"), &s, "c1", true).unwrap();
        assert_eq!(d1.object["spec"]["replicas"], 7);
        assert_eq!(
            d1.object["metadata"]["labels"],
            json!({"kubefed.io/managed": "true"})
        );

        let d2 = desired_object(&deployment_type(), "web", Some("ns"), &s, "c2", true).unwrap();
        assert_eq!(
            d2.object["metadata"]["labels"]["kubefed.io/managed"],
            "true"
        );
        assert_eq!(d2.object["spec"]["replicas"], 3);
    }

    #[test]
    fn replacing_metadata_cannot_move_the_object() {
        let s = spec(json!({
            "template": {"metadata": {"labels": {"a": "b"}}},
            "overrides": [{"clusterName": "c1", "clusterOverrides": [
                {"path": "/metadata", "value": {"name": "other", "namespace": "elsewhere", "labels": {"x": "y"}}},
            ]}],
        }));
        let d = desired_object(&deployment_type(), "web", Some("ns"), &s, "c1", false).unwrap();
        assert_eq!(d.object["metadata"]["name"], "web");
        assert_eq!(d.object["metadata"]["namespace"], "ns");
        assert_eq!(
            d.object["metadata"]["labels"],
            json!({"x": "y", "kubefed.io/managed": "true"})
        );
    }

    #[test]
    fn override_errors_are_reported() {
        let s = spec(json!({
            "template": {"spec": {}},
            "overrides": [{"clusterName": "c1", "clusterOverrides": [{"path": "/metadata/name", "value": "x"}]}],
        }));
        assert!(matches!(
            desired_object(&deployment_type(), "web", Some("ns"), &s, "c1", false),
            Err(CoreError::ForbiddenOverridePath { .. })
        ));
        assert!(desired_object(&deployment_type(), "web", Some("ns"), &s, "c2", false).is_ok());
    }

    #[test]
    fn non_object_template_is_invalid() {
        let s = spec(json!({"template": "nope"}));
        assert!(matches!(
            desired_object(&deployment_type(), "web", Some("ns"), &s, "c1", false),
            Err(CoreError::InvalidTemplate { found: "string" })
        ));
    }

    #[test]
    fn retain_replicas_releases_replicas_of_existing_members() {
        let s = spec(json!({"template": {"spec": {"replicas": 3}}, "retainReplicas": true}));
        let created =
            desired_object(&deployment_type(), "web", Some("ns"), &s, "c1", false).unwrap();
        assert_eq!(created.object["spec"]["replicas"], 3);
        assert!(created.released_fields.is_empty());

        let updated =
            desired_object(&deployment_type(), "web", Some("ns"), &s, "c1", true).unwrap();
        assert_eq!(updated.object["spec"].get("replicas"), None);
        assert_eq!(updated.released_fields, ["/spec/replicas"]);

        let with_override = spec(json!({
            "template": {"spec": {"replicas": 3}},
            "retainReplicas": true,
            "overrides": [{"clusterName": "c1", "clusterOverrides": [{"path": "/spec/replicas", "value": 5}]}],
        }));
        let d = desired_object(
            &deployment_type(),
            "web",
            Some("ns"),
            &with_override,
            "c1",
            true,
        )
        .unwrap();
        assert_eq!(d.object["spec"]["replicas"], 5);
        assert!(d.released_fields.is_empty());

        let not_retained =
            spec(json!({"template": {"spec": {"replicas": 3}}, "retainReplicas": false}));
        let d = desired_object(
            &deployment_type(),
            "web",
            Some("ns"),
            &not_retained,
            "c1",
            true,
        )
        .unwrap();
        assert_eq!(d.object["spec"]["replicas"], 3);
    }

    #[test]
    fn services_do_not_carry_hub_allocations_but_overrides_can_set_them() {
        let s = spec(json!({
            "template": {"spec": {
                "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                "ports": [{"port": 53, "nodePort": 0}],
            }},
            "overrides": [{"clusterName": "c2", "clusterOverrides": [
                {"op": "add", "path": "/spec/clusterIP", "value": "10.0.0.10"},
            ]}],
        }));
        let svc = core_type("Service", true);
        let d1 = desired_object(&svc, "dns", Some("ns"), &s, "c1", true).unwrap();
        assert_eq!(d1.object["spec"], json!({"ports": [{"port": 53}]}));
        let d2 = desired_object(&svc, "dns", Some("ns"), &s, "c2", true).unwrap();
        assert_eq!(d2.object["spec"]["clusterIP"], "10.0.0.10");

        // Only core Services are treated this way.
        let other = TargetType {
            kind: "Service".into(),
            group: "serving.knative.dev".into(),
            version: "v1".into(),
            namespaced: true,
        };
        let d = desired_object(&other, "dns", Some("ns"), &s, "c1", true).unwrap();
        assert_eq!(d.object["spec"]["clusterIP"], "10.96.0.10");
    }

    #[test]
    fn non_object_metadata_in_template_is_replaced() {
        let s = spec(json!({"template": {"metadata": "junk", "data": {"k": "v"}}}));
        let d = desired_object(
            &core_type("ConfigMap", true),
            "cm",
            Some("ns"),
            &s,
            "c1",
            false,
        )
        .unwrap();
        assert_eq!(
            d.object,
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm", "namespace": "ns", "labels": {"kubefed.io/managed": "true"}},
                "data": {"k": "v"},
            })
        );
    }
}
