//! The generated `Federated<Kind>` CRDs (docs/kubefed-compatibility.md §1.6): KubeFed's
//! `CrdForAPIResource` + `federatedTypeValidationSchema`, plus hubfed's category and printer
//! columns.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceSubresourceStatus,
    CustomResourceSubresources, CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use crate::Error;
use crate::federatedtypeconfig::{ApiResource, FederatedTypeConfig, ResourceScope};
use crate::names::FEDERATED_CATEGORY;

/// What the `Federated<Kind>` CRD of one FTC needs beyond the FTC itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FederatedTypeDescription {
    /// Group, version, kind, plural and scope of the federated type.
    pub federated_type: ApiResource,
    /// Short names of the target type; the federated type gets each with an `f` prefix.
    pub target_short_names: Vec<String>,
    /// Whether the target has an integer `spec.replicas` (see [`target_has_replicas`]);
    /// adds `spec.retainReplicas` so an in-cluster HPA can own replicas.
    pub retain_replicas: bool,
}

impl FederatedTypeDescription {
    /// The description of `ftc`'s federated type; the scope follows
    /// [`FederatedTypeConfig::federated_namespaced`] so FederatedNamespace is namespaced.
    pub fn for_ftc(
        ftc: &FederatedTypeConfig,
        target_short_names: &[&str],
        retain_replicas: bool,
    ) -> Self {
        let mut federated_type = ftc.spec.federated_type.clone();
        federated_type.scope = if ftc.federated_namespaced() {
            ResourceScope::Namespaced
        } else {
            ResourceScope::Cluster
        };
        Self {
            federated_type,
            target_short_names: target_short_names.iter().map(|s| (*s).to_owned()).collect(),
            retain_replicas,
        }
    }
}

/// KubeFed's test for `retainReplicas`: the target schema's `spec.replicas` is an int32.
pub fn target_has_replicas(target_schema: &Value) -> bool {
    let replicas = &target_schema["properties"]["spec"]["properties"]["replicas"];
    replicas["type"] == "integer" && replicas["format"] == "int32"
}

/// Builds the CRD of a `Federated<Kind>` type.
///
/// `spec.template` always keeps unknown fields, as in KubeFed, so nothing a KubeFed user wrote
/// is pruned. With `target_schema` (the target's structural OpenAPI v3 schema, no `$ref`) the
/// template also gets the target's properties, for `kubectl explain` and type checks, with
/// unknown fields kept at every level and requirements and defaults dropped: templates are
/// partial objects (name and namespace come from the federated object) and are propagated as
/// written.
pub fn federated_crd(
    description: &FederatedTypeDescription,
    target_schema: Option<Value>,
) -> Result<CustomResourceDefinition, Error> {
    let federated = &description.federated_type;
    let invalid_schema = |source| Error::InvalidTargetSchema {
        kind: federated.kind.clone(),
        source,
    };
    let template = match target_schema {
        Some(schema) if !schema.is_object() => {
            return Err(invalid_schema(serde::de::Error::custom(
                "the schema is not a JSON object",
            )));
        }
        Some(schema) => template_from_target(schema),
        None => json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true }),
    };
    let schema = federated_type_schema(template, description.retain_replicas);
    let schema: JSONSchemaProps = serde_json::from_value(schema).map_err(invalid_schema)?;
    let short_names: Vec<String> = description
        .target_short_names
        .iter()
        .map(|short| format!("f{short}"))
        .collect();

    Ok(CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(federated.group_qualified_name()),
            ..ObjectMeta::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: federated.group.clone(),
            names: CustomResourceDefinitionNames {
                categories: Some(vec![FEDERATED_CATEGORY.to_owned()]),
                kind: federated.kind.clone(),
                plural: federated.plural_name.clone(),
                short_names: (!short_names.is_empty()).then_some(short_names),
                ..CustomResourceDefinitionNames::default()
            },
            scope: federated.scope.as_str().to_owned(),
            versions: vec![CustomResourceDefinitionVersion {
                additional_printer_columns: Some(printer_columns()),
                name: federated.version.clone(),
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(schema),
                }),
                served: true,
                storage: true,
                subresources: Some(CustomResourceSubresources {
                    status: Some(CustomResourceSubresourceStatus(json!({}))),
                    ..CustomResourceSubresources::default()
                }),
                ..CustomResourceDefinitionVersion::default()
            }],
            ..CustomResourceDefinitionSpec::default()
        },
        status: None,
    })
}

const PROPAGATION_CONDITION_PATH: &str = ".status.conditions[?(@.type=='Propagation')]";

/// Columns for `kubectl get federated<plural>`: whether propagation succeeded and why not,
/// and how many placed clusters run a ready copy (`status.ready`, a scalar: the server-side
/// printer shows only the first match of a JSONPath).
fn printer_columns() -> Vec<CustomResourceColumnDefinition> {
    let column = |name: &str, type_: &str, json_path: String, description: &str| {
        CustomResourceColumnDefinition {
            name: name.to_owned(),
            type_: type_.to_owned(),
            json_path,
            description: Some(description.to_owned()),
            ..CustomResourceColumnDefinition::default()
        }
    };
    vec![
        column(
            "Propagation",
            "string",
            format!("{PROPAGATION_CONDITION_PATH}.status"),
            "Whether the object reached every placed cluster",
        ),
        column(
            "Reason",
            "string",
            format!("{PROPAGATION_CONDITION_PATH}.reason"),
            "Why propagation is not complete",
        ),
        column(
            "Ready",
            "string",
            ".status.ready".to_owned(),
            "Placed clusters whose copy is ready, of all placed clusters",
        ),
        CustomResourceColumnDefinition {
            priority: Some(1),
            ..column(
                "Message",
                "string",
                format!("{PROPAGATION_CONDITION_PATH}.message"),
                "Details of the propagation condition",
            )
        },
        column(
            "Age",
            "date",
            ".metadata.creationTimestamp".to_owned(),
            "Time since creation",
        ),
    ]
}

/// KubeFed's `federatedTypeValidationSchema`, with hubfed's `message` fields and `ready`
/// count in the status (declared so the API server does not prune them).
fn federated_type_schema(template: Value, retain_replicas: bool) -> Value {
    let mut spec_properties = json!({
        "template": template,
        "placement": placement_schema(),
        "overrides": overrides_schema(),
    });
    if retain_replicas {
        spec_properties["retainReplicas"] = json!({ "type": "boolean" });
    }
    json!({
        "type": "object",
        "properties": {
            "apiVersion": { "type": "string" },
            "kind": { "type": "string" },
            "metadata": { "type": "object" },
            "spec": { "type": "object", "properties": spec_properties },
            "status": status_schema(),
        },
        // A spec, even empty, is required: its absence likely means a malformed object.
        "required": ["spec"],
    })
}

/// `spec.placement`: cluster names and a cluster selector.
fn placement_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "clusters": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": { "name": { "type": "string" } },
                    "required": ["name"],
                },
            },
            "clusterSelector": {
                "type": "object",
                "properties": {
                    "matchExpressions": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "key": { "type": "string" },
                                "operator": { "type": "string" },
                                "values": string_list(),
                            },
                            "required": ["key", "operator"],
                        },
                    },
                    "matchLabels": {
                        "type": "object",
                        "additionalProperties": { "type": "string" },
                    },
                },
            },
        },
    })
}

/// `spec.overrides`: per cluster, JSON patch operations.
fn overrides_schema() -> Value {
    json!({
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "clusterName": { "type": "string" },
                "clusterOverrides": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "op": { "type": "string", "pattern": "^(add|remove|replace)?$" },
                            "path": { "type": "string" },
                            // Any JSON value; errors surface during propagation.
                            "value": { "x-kubernetes-preserve-unknown-fields": true },
                        },
                        "required": ["path"],
                    },
                },
            },
        },
    })
}

/// `status`: conditions and per-cluster propagation status.
fn status_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "observedGeneration": { "type": "integer", "format": "int64" },
            "ready": { "type": "string" },
            "conditions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "type": { "type": "string" },
                        "status": { "type": "string" },
                        "reason": { "type": "string" },
                        "message": { "type": "string" },
                        "lastUpdateTime": date_time(),
                        "lastTransitionTime": date_time(),
                    },
                    "required": ["type", "status"],
                },
            },
            "clusters": {
                "type": "array",
                "items": cluster_status_schema(),
            },
        },
    })
}

/// One item of `status.clusters`.
fn cluster_status_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": { "type": "string" },
            "status": { "type": "string" },
            "message": { "type": "string" },
            "ready": { "type": "boolean" },
            "readyMessage": { "type": "string" },
            "lastDrift": {
                "type": "object",
                "properties": {
                    "time": date_time(),
                    "action": { "type": "string" },
                    "managers": string_list(),
                    "fields": string_list(),
                },
                "required": ["time", "action"],
            },
            "remoteStatus": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
            },
        },
        "required": ["name"],
    })
}

fn string_list() -> Value {
    json!({ "type": "array", "items": { "type": "string" } })
}

fn date_time() -> Value {
    json!({ "type": "string", "format": "date-time" })
}

/// Keywords that would make the API server change or reject a partial template that KubeFed
/// accepted: requirements, defaults (they would alter the template and its hash), CEL rules,
/// list-map keys (they must be required or defaulted) and embedded-resource checks.
const TEMPLATE_DROPPED_KEYWORDS: &[&str] = &[
    "required",
    "default",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-embedded-resource",
];

/// The target schema (a JSON object) made fit for a template: unknown fields kept at every
/// level, and none of [`TEMPLATE_DROPPED_KEYWORDS`].
fn template_from_target(mut schema: Value) -> Value {
    relax(&mut schema);
    schema["type"] = json!("object");
    schema["x-kubernetes-preserve-unknown-fields"] = json!(true);
    schema
}

fn relax(schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    for keyword in TEMPLATE_DROPPED_KEYWORDS {
        object.remove(*keyword);
    }
    if object.get("type").and_then(Value::as_str) == Some("object") {
        object.insert(
            "x-kubernetes-preserve-unknown-fields".to_owned(),
            json!(true),
        );
    }
    if let Some(properties) = object.get_mut("properties").and_then(Value::as_object_mut) {
        properties.values_mut().for_each(relax);
    }
    for key in ["items", "additionalProperties"] {
        if let Some(nested) = object.get_mut(key) {
            relax(nested);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(nested) = object.get_mut(key).and_then(Value::as_array_mut) {
            nested.iter_mut().for_each(relax);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment_description() -> FederatedTypeDescription {
        FederatedTypeDescription {
            federated_type: ApiResource {
                group: "types.kubefed.io".into(),
                version: "v1beta1".into(),
                kind: "FederatedDeployment".into(),
                plural_name: "federateddeployments".into(),
                scope: ResourceScope::Namespaced,
            },
            target_short_names: vec!["deploy".into()],
            retain_replicas: true,
        }
    }

    fn schema_of(crd: &CustomResourceDefinition) -> Value {
        let schema = crd.spec.versions[0].schema.as_ref().unwrap();
        serde_json::to_value(schema.open_api_v3_schema.as_ref().unwrap()).unwrap()
    }

    #[test]
    fn federated_deployment_crd_matches_kubefed() {
        let crd = federated_crd(&deployment_description(), None).unwrap();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("federateddeployments.types.kubefed.io")
        );
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.short_names, Some(vec!["fdeploy".to_owned()]));
        assert_eq!(
            crd.spec.names.categories,
            Some(vec!["federated".to_owned()])
        );
        let version = &crd.spec.versions[0];
        assert!(version.served && version.storage);
        assert!(version.subresources.as_ref().unwrap().status.is_some());

        let schema = schema_of(&crd);
        assert_eq!(schema["required"], json!(["spec"]));
        let spec = &schema["properties"]["spec"]["properties"];
        assert_eq!(
            spec["template"],
            json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
        );
        assert_eq!(spec["retainReplicas"], json!({ "type": "boolean" }));
        assert_eq!(
            spec["overrides"]["items"]["properties"]["clusterOverrides"]["items"]["properties"]["op"]
                ["pattern"],
            "^(add|remove|replace)?$"
        );
    }

    #[test]
    fn retain_replicas_only_when_asked() {
        let description = FederatedTypeDescription {
            retain_replicas: false,
            ..deployment_description()
        };
        let schema = schema_of(&federated_crd(&description, None).unwrap());
        assert!(
            schema["properties"]["spec"]["properties"]
                .get("retainReplicas")
                .is_none()
        );
    }

    #[test]
    fn target_schema_is_embedded_without_pruning_or_requirements() {
        let target = json!({
            "type": "object",
            "required": ["spec"],
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["selector"],
                    "properties": {
                        "replicas": { "type": "integer", "format": "int32" },
                        "selector": { "type": "object" },
                        "ports": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["port"],
                            "items": {
                                "type": "object",
                                "required": ["port"],
                                "properties": {
                                    "port": { "type": "integer" },
                                    "protocol": { "type": "string", "default": "TCP" },
                                },
                            },
                        },
                    },
                },
            },
        });
        assert!(target_has_replicas(&target));
        let crd = federated_crd(&deployment_description(), Some(target)).unwrap();
        let template = &schema_of(&crd)["properties"]["spec"]["properties"]["template"];
        assert_eq!(template["x-kubernetes-preserve-unknown-fields"], true);
        assert!(template.get("required").is_none());
        let spec = &template["properties"]["spec"];
        assert!(spec.get("required").is_none());
        assert_eq!(spec["x-kubernetes-preserve-unknown-fields"], true);
        assert_eq!(spec["properties"]["replicas"]["format"], "int32");
        let ports = &spec["properties"]["ports"];
        assert!(ports.get("x-kubernetes-list-type").is_none());
        assert!(ports.get("x-kubernetes-list-map-keys").is_none());
        assert_eq!(ports["items"]["x-kubernetes-preserve-unknown-fields"], true);
        assert!(ports["items"].get("required").is_none());
        assert!(
            ports["items"]["properties"]["protocol"]
                .get("default")
                .is_none()
        );
    }

    #[test]
    fn invalid_target_schema_is_an_error() {
        for target in [
            json!({ "type": "object", "properties": "not-a-map" }),
            json!([1]),
        ] {
            assert!(matches!(
                federated_crd(&deployment_description(), Some(target)),
                Err(Error::InvalidTargetSchema { .. })
            ));
        }
    }

    #[test]
    fn replicas_detection_needs_int32() {
        assert!(!target_has_replicas(&json!({})));
        let int64 = json!({ "properties": { "spec": { "properties": {
            "replicas": { "type": "integer", "format": "int64" } } } } });
        assert!(!target_has_replicas(&int64));
    }
}
