//! From a live (or hand-written) object to its federated form (docs/kubefed-compatibility.md §3
//! `federate`): `spec.template` is the object without what belongs to one live copy — status,
//! identity and server-set metadata, allocated addresses and ports, generated selectors — and the
//! placement selects every cluster (`clusterSelector: {}`).
//!
//! Unlike kubefedctl, labels *and* annotations are kept (hubfed propagates template
//! annotations), except annotations written by tools and controllers, which would otherwise
//! be fought over in every member.

use serde_json::{Map, Value, json};

/// Annotations that describe one live object, never the desired state.
const DROPPED_ANNOTATIONS: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    "deployment.kubernetes.io/revision",
    "deployment.kubernetes.io/desired-replicas",
    "deployment.kubernetes.io/max-replicas",
    "kubernetes.io/service-account.uid",
    "control-plane.alpha.kubernetes.io/leader",
];

/// Labels the API server or a controller sets on its own.
const DROPPED_LABELS: &[(&str, &str)] = &[
    ("Namespace", "kubernetes.io/metadata.name"),
    ("Job", "controller-uid"),
    ("Job", "batch.kubernetes.io/controller-uid"),
    ("Job", "job-name"),
    ("Job", "batch.kubernetes.io/job-name"),
];

/// The federated type of a target kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FederatedKind {
    /// `apiVersion` of the federated type, e.g. `types.kubefed.io/v1beta1`.
    pub api_version: String,
    /// e.g. `FederatedDeployment`.
    pub kind: String,
}

/// The federated object for `target`. A FederatedNamespace lives in the namespace it
/// federates; other federated objects share the target's name and namespace.
pub fn federated_object(target: &Value, federated: &FederatedKind) -> Value {
    let kind = target["kind"].as_str().unwrap_or_default();
    let name = target["metadata"]["name"].clone();
    let namespace = if kind == "Namespace" {
        name.clone()
    } else {
        target["metadata"]["namespace"].clone()
    };
    let mut metadata = Map::new();
    metadata.insert("name".to_owned(), name);
    if !namespace.is_null() {
        metadata.insert("namespace".to_owned(), namespace);
    }
    json!({
        "apiVersion": federated.api_version,
        "kind": federated.kind,
        "metadata": metadata,
        "spec": {
            "template": template(target),
            "placement": { "clusterSelector": { "matchLabels": {} } },
        },
    })
}

/// `spec.template` for `target`.
pub fn template(target: &Value) -> Value {
    let kind = target["kind"].as_str().unwrap_or_default().to_owned();
    let mut template = target.clone();
    let Some(object) = template.as_object_mut() else {
        return json!({});
    };
    for field in ["apiVersion", "kind", "status"] {
        object.remove(field);
    }
    let metadata = object.remove("metadata").unwrap_or(Value::Null);
    let kept = kept_metadata(&kind, &metadata);
    if !kept.is_empty() {
        object.insert("metadata".to_owned(), Value::Object(kept));
    }
    match kind.as_str() {
        "Namespace" => {
            remove_path(object, &["spec", "finalizers"]);
            remove_if_empty(object, "spec");
        }
        "ServiceAccount" => {
            object.remove("secrets");
        }
        "Service" => clean_service(object),
        "Job" => clean_job(object),
        _ => {}
    }
    if let Some(pod_metadata) = object
        .get_mut("spec")
        .and_then(|s| s.get_mut("template"))
        .and_then(|t| t.get_mut("metadata"))
        .and_then(Value::as_object_mut)
        && pod_metadata.get("creationTimestamp") == Some(&Value::Null)
    {
        pod_metadata.remove("creationTimestamp");
    }
    template
}

/// Labels and annotations, minus those of [`DROPPED_ANNOTATIONS`] and [`DROPPED_LABELS`].
fn kept_metadata(kind: &str, metadata: &Value) -> Map<String, Value> {
    let mut kept = Map::new();
    if let Some(labels) = metadata["labels"].as_object() {
        let labels: Map<String, Value> = labels
            .iter()
            .filter(|(key, _)| !DROPPED_LABELS.contains(&(kind, key.as_str())))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !labels.is_empty() {
            kept.insert("labels".to_owned(), Value::Object(labels));
        }
    }
    if let Some(annotations) = metadata["annotations"].as_object() {
        let annotations: Map<String, Value> = annotations
            .iter()
            .filter(|(key, _)| !DROPPED_ANNOTATIONS.contains(&key.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !annotations.is_empty() {
            kept.insert("annotations".to_owned(), Value::Object(annotations));
        }
    }
    kept
}

/// Addresses and ports each member allocates for itself.
fn clean_service(object: &mut Map<String, Value>) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for field in ["clusterIP", "clusterIPs", "healthCheckNodePort"] {
        spec.remove(field);
    }
    // Single-stack is the default; the family then follows each member's configuration.
    if spec
        .get("ipFamilyPolicy")
        .is_none_or(|p| p == "SingleStack")
    {
        spec.remove("ipFamilyPolicy");
        spec.remove("ipFamilies");
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            port.remove("nodePort");
        }
    }
}

/// A Job's selector and pod labels are generated from its UID unless the user chose them
/// (`manualSelector: true`); a member refuses them.
fn clean_job(object: &mut Map<String, Value>) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec.get("manualSelector") == Some(&Value::Bool(true)) {
        return;
    }
    spec.remove("selector");
    if let Some(labels) = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("metadata"))
        .and_then(|m| m.get_mut("labels"))
        .and_then(Value::as_object_mut)
    {
        for (kind, label) in DROPPED_LABELS {
            if *kind == "Job" {
                labels.remove(*label);
            }
        }
    }
}

fn remove_path(object: &mut Map<String, Value>, path: &[&str]) {
    match path {
        [] => {}
        [last] => {
            object.remove(*last);
        }
        [first, rest @ ..] => {
            if let Some(inner) = object.get_mut(*first).and_then(Value::as_object_mut) {
                remove_path(inner, rest);
            }
        }
    }
}

fn remove_if_empty(object: &mut Map<String, Value>, key: &str) {
    if object
        .get(key)
        .and_then(Value::as_object)
        .is_some_and(Map::is_empty)
    {
        object.remove(key);
    }
}

/// Built-in cluster-scoped kinds, for offline conversion (`federate -f`), where discovery
/// cannot say: `-n` must not put these in a namespace.
pub fn builtin_cluster_scoped(kind: &str) -> bool {
    matches!(
        kind,
        "Namespace"
            | "ClusterRole"
            | "ClusterRoleBinding"
            | "CustomResourceDefinition"
            | "PersistentVolume"
            | "StorageClass"
            | "PriorityClass"
            | "IngressClass"
            | "RuntimeClass"
            | "Node"
            | "ValidatingWebhookConfiguration"
            | "MutatingWebhookConfiguration"
            | "APIService"
            | "CSIDriver"
    )
}

/// Objects every namespace gets from Kubernetes itself; `federate --contents` leaves them,
/// and anything owned by another object (pods of a ReplicaSet, ReplicaSets of a Deployment).
pub fn skip_reason(target: &Value) -> Option<&'static str> {
    let kind = target["kind"].as_str().unwrap_or_default();
    let name = target["metadata"]["name"].as_str().unwrap_or_default();
    if target["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|owners| !owners.is_empty())
    {
        return Some("owned by another object");
    }
    match (kind, name) {
        ("ConfigMap", "kube-root-ca.crt") => Some("published by Kubernetes in every namespace"),
        ("ServiceAccount", "default") => Some("created by Kubernetes in every namespace"),
        ("Secret", _) if target["type"] == "kubernetes.io/service-account-token" => {
            Some("a service account token, issued per cluster")
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn federated(kind: &str) -> FederatedKind {
        FederatedKind {
            api_version: "types.kubefed.io/v1beta1".into(),
            kind: format!("Federated{kind}"),
        }
    }

    #[test]
    fn live_metadata_and_status_are_dropped_labels_and_annotations_kept() {
        let live = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "shop", "uid": "u", "resourceVersion": "7",
                "generation": 3, "creationTimestamp": "2024-01-01T00:00:00Z",
                "managedFields": [{}],
                "labels": {"app": "web"},
                "annotations": {
                    "team": "a",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}",
                    "deployment.kubernetes.io/revision": "3",
                },
            },
            "spec": {
                "replicas": 2,
                "template": {"metadata": {"creationTimestamp": null, "labels": {"app": "web"}}},
            },
            "status": {"replicas": 2},
        });
        let object = federated_object(&live, &federated("Deployment"));
        assert_eq!(
            object,
            json!({
                "apiVersion": "types.kubefed.io/v1beta1",
                "kind": "FederatedDeployment",
                "metadata": {"name": "web", "namespace": "shop"},
                "spec": {
                    "template": {
                        "metadata": {"labels": {"app": "web"}, "annotations": {"team": "a"}},
                        "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app": "web"}}}},
                    },
                    "placement": {"clusterSelector": {"matchLabels": {}}},
                },
            })
        );
    }

    #[test]
    fn services_lose_allocated_addresses_and_ports() {
        let live = json!({
            "kind": "Service",
            "metadata": {"name": "s", "namespace": "n"},
            "spec": {
                "type": "NodePort", "clusterIP": "10.0.0.5", "clusterIPs": ["10.0.0.5"],
                "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}],
            },
        });
        assert_eq!(
            template(&live),
            json!({"spec": {"type": "NodePort", "ports": [{"port": 80, "protocol": "TCP"}]}})
        );
    }

    #[test]
    fn namespaces_federate_into_themselves_without_finalizers() {
        let live = json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "shop", "labels": {"kubernetes.io/metadata.name": "shop", "tier": "1"}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        });
        let object = federated_object(&live, &federated("Namespace"));
        assert_eq!(
            object["metadata"],
            json!({"name": "shop", "namespace": "shop"})
        );
        assert_eq!(
            object["spec"]["template"],
            json!({"metadata": {"labels": {"tier": "1"}}})
        );
    }

    #[test]
    fn service_accounts_lose_token_secrets_and_jobs_their_generated_selector() {
        let account = json!({"kind": "ServiceAccount", "metadata": {"name": "a"}, "secrets": [{"name": "t"}]});
        assert_eq!(template(&account), json!({}));
        let job = json!({
            "kind": "Job", "metadata": {"name": "j", "labels": {"job-name": "j", "x": "y"}},
            "spec": {
                "selector": {"matchLabels": {"controller-uid": "u"}},
                "template": {"metadata": {"labels": {"controller-uid": "u", "job-name": "j", "app": "a"}}},
            },
        });
        assert_eq!(
            template(&job),
            json!({
                "metadata": {"labels": {"x": "y"}},
                "spec": {"template": {"metadata": {"labels": {"app": "a"}}}},
            })
        );
        let manual = json!({"kind": "Job", "spec": {"manualSelector": true, "selector": {"matchLabels": {"a": "b"}}}});
        assert_eq!(
            template(&manual)["spec"]["selector"],
            json!({"matchLabels": {"a": "b"}})
        );
    }

    #[test]
    fn system_and_owned_objects_are_skipped_by_contents() {
        let root_ca = json!({"kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt"}});
        assert!(skip_reason(&root_ca).is_some());
        let owned = json!({"kind": "ReplicaSet", "metadata": {"name": "r", "ownerReferences": [{"uid": "x"}]}});
        assert!(skip_reason(&owned).is_some());
        let token = json!({"kind": "Secret", "metadata": {"name": "t"}, "type": "kubernetes.io/service-account-token"});
        assert!(skip_reason(&token).is_some());
        let mine = json!({"kind": "ConfigMap", "metadata": {"name": "settings"}});
        assert!(skip_reason(&mine).is_none());
    }
}
