use hubfed_api::federatedcrd::{FederatedTypeDescription, federated_crd, target_has_replicas};
use hubfed_api::federatedtypeconfig::{ApiResource, ResourceScope};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;

use super::*;

/// A group/version document in the API server's style: `allOf`-wrapped references with
/// defaults, IntOrString and Quantity as alternatives, a self-referencing type.
fn document() -> Value {
    json!({
        "openapi": "3.0.0",
        "components": { "schemas": {
            "io.example.v1.Widget": {
                "description": "A widget.",
                "type": "object",
                "x-kubernetes-group-version-kind": [
                    { "group": "example.io", "kind": "Widget", "version": "v1" },
                ],
                "properties": {
                    "apiVersion": { "description": "APIVersion.", "type": "string" },
                    "kind": { "type": "string" },
                    "metadata": {
                        "allOf": [{ "$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" }],
                        "default": {},
                    },
                    "spec": {
                        "allOf": [{ "$ref": "#/components/schemas/io.example.v1.WidgetSpec" }],
                        "default": {},
                        "description": "The desired state.",
                    },
                    "status": { "$ref": "#/components/schemas/io.example.v1.WidgetStatus" },
                },
            },
            "io.example.v1.WidgetSpec": {
                "type": "object",
                "required": ["selector"],
                "properties": {
                    "replicas": { "type": "integer", "format": "int32", "default": 1 },
                    "maxSurge": {
                        "allOf": [{ "$ref": "#/components/schemas/io.k8s.apimachinery.pkg.util.intstr.IntOrString" }],
                    },
                    "port": { "type": "string", "format": "int-or-string" },
                    "memory": { "$ref": "#/components/schemas/io.k8s.apimachinery.pkg.api.resource.Quantity" },
                    "selector": { "$ref": "#/components/schemas/io.example.v1.Selector" },
                    "policy": { "type": "string", "enum": ["Always", "Never"], "default": "Always" },
                    "labels": {
                        "type": "object",
                        "additionalProperties": { "type": "string", "default": "" },
                    },
                    "raw": { "$ref": "#/components/schemas/io.k8s.apimachinery.pkg.runtime.RawExtension" },
                    "tree": { "$ref": "#/components/schemas/io.example.v1.Node" },
                    "template": {
                        "type": "object",
                        "properties": {
                            "metadata": {
                                "allOf": [{ "$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" }],
                                "default": {},
                            },
                        },
                    },
                    "containers": {
                        "type": "array",
                        "items": {
                            "allOf": [{ "$ref": "#/components/schemas/io.example.v1.Container" }],
                            "default": {},
                        },
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "x-kubernetes-patch-merge-key": "name",
                    },
                    "data": { "type": "string", "format": "byte" },
                    "window": { "allOf": [{ "type": "integer", "format": "int64" }], "default": 0 },
                    "missing": { "$ref": "#/components/schemas/io.example.v1.Missing" },
                },
            },
            "io.example.v1.Container": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": { "type": "string", "default": "" },
                    "args": {
                        "type": "array",
                        "items": { "type": "string", "default": "" },
                        "x-kubernetes-list-type": "atomic",
                    },
                    "ports": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["containerPort"],
                            "properties": {
                                "containerPort": { "type": "integer", "format": "int32" },
                                "protocol": { "type": "string", "default": "TCP" },
                            },
                        },
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                    },
                },
            },
            "io.example.v1.Selector": {
                "type": "object",
                "properties": { "matchLabels": {
                    "type": "object",
                    "additionalProperties": { "type": "string" },
                } },
                "x-kubernetes-map-type": "atomic",
            },
            "io.example.v1.Node": {
                "type": "object",
                "properties": {
                    "value": { "type": "string" },
                    "children": {
                        "type": "array",
                        "items": { "allOf": [{ "$ref": "#/components/schemas/io.example.v1.Node" }] },
                    },
                },
            },
            "io.example.v1.WidgetStatus": {
                "type": "object",
                "properties": { "ready": { "type": "boolean" } },
            },
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {
                "type": "object",
                "properties": {
                    "name": { "type": "string" },
                    "creationTimestamp": { "$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Time" },
                },
            },
            "io.k8s.apimachinery.pkg.apis.meta.v1.Time": { "type": "string", "format": "date-time" },
            "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {
                "description": "IntOrString is a type that can hold an int32 or a string.",
                "format": "int-or-string",
                "oneOf": [{ "type": "integer" }, { "type": "string" }],
            },
            "io.k8s.apimachinery.pkg.api.resource.Quantity": {
                "description": "Quantity is a fixed-point representation of a number.",
                "oneOf": [{ "type": "string" }, { "type": "number" }],
            },
            "io.k8s.apimachinery.pkg.runtime.RawExtension": {
                "description": "RawExtension is used to hold extensions.",
                "type": "object",
            },
        } },
    })
}

fn widget_schema() -> Value {
    kind_schema(&document(), "example.io", "v1", "Widget").unwrap()
}

#[test]
fn references_are_inlined_into_a_structural_schema() {
    let any = json!({ "x-kubernetes-preserve-unknown-fields": true });
    let free_object = json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true });
    let expected = json!({
        "type": "object",
        "properties": {
            "apiVersion": { "type": "string" },
            "kind": { "type": "string" },
            "metadata": { "type": "object" },
            "spec": {
                "type": "object",
                "required": ["selector"],
                "properties": {
                    "replicas": { "type": "integer", "format": "int32" },
                    "maxSurge": { "x-kubernetes-int-or-string": true },
                    "port": { "x-kubernetes-int-or-string": true },
                    "memory": any,
                    "selector": {
                        "type": "object",
                        "x-kubernetes-map-type": "atomic",
                        "properties": { "matchLabels": {
                            "type": "object",
                            "additionalProperties": { "type": "string" },
                        } },
                    },
                    "policy": { "type": "string" },
                    "labels": {
                        "type": "object",
                        "additionalProperties": { "type": "string" },
                    },
                    "raw": free_object,
                    "tree": {
                        "type": "object",
                        "properties": {
                            "value": { "type": "string" },
                            "children": { "type": "array", "items": free_object },
                        },
                    },
                    "template": {
                        "type": "object",
                        "properties": { "metadata": free_object },
                    },
                    "containers": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {
                                "name": { "type": "string" },
                                "args": {
                                    "type": "array",
                                    "x-kubernetes-list-type": "atomic",
                                    "items": { "type": "string" },
                                },
                                // protocol was a map key only through its default.
                                "ports": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "required": ["containerPort"],
                                        "properties": {
                                            "containerPort": { "type": "integer", "format": "int32" },
                                            "protocol": { "type": "string" },
                                        },
                                    },
                                },
                            },
                        },
                    },
                    "data": { "type": "string", "format": "byte" },
                    "window": { "type": "integer", "format": "int64" },
                    "missing": any,
                },
            },
        },
    });
    assert_eq!(widget_schema(), expected);
}

#[test]
fn the_kind_is_found_by_group_version_and_kind() {
    let document = document();
    assert!(kind_schema(&document, "example.io", "v1", "Widget").is_some());
    assert!(kind_schema(&document, "", "v1", "Widget").is_none());
    assert!(kind_schema(&document, "example.io", "v2", "Widget").is_none());
    assert!(kind_schema(&document, "example.io", "v1", "Gadget").is_none());
    assert!(kind_schema(&json!({ "paths": {} }), "example.io", "v1", "Widget").is_none());

    let core = json!({ "components": { "schemas": { "io.k8s.api.core.v1.ConfigMap": {
        "type": "object",
        "x-kubernetes-group-version-kind": [{ "group": "", "kind": "ConfigMap", "version": "v1" }],
        "properties": { "data": { "type": "object", "additionalProperties": { "type": "string" } } },
    } } } });
    assert_eq!(
        kind_schema(&core, "", "v1", "ConfigMap").unwrap()["properties"]["data"]["type"],
        "object"
    );
}

#[test]
fn mutually_recursive_references_end_free_form() {
    let document = json!({ "components": { "schemas": {
        "a.Root": {
            "type": "object",
            "x-kubernetes-group-version-kind": [{ "group": "g.io", "kind": "Root", "version": "v1" }],
            "properties": { "a": { "$ref": "#/components/schemas/a.A" } },
        },
        "a.A": { "$ref": "#/components/schemas/a.B" },
        "a.B": { "allOf": [{ "$ref": "#/components/schemas/a.A" }] },
    } } });
    assert_eq!(
        kind_schema(&document, "g.io", "v1", "Root").unwrap()["properties"]["a"],
        json!({ "x-kubernetes-preserve-unknown-fields": true })
    );
}

#[test]
fn the_result_is_a_valid_crd_schema_for_a_federated_template() {
    let schema = widget_schema();
    assert!(target_has_replicas(&schema));
    serde_json::from_value::<JSONSchemaProps>(schema.clone()).unwrap();
    let description = FederatedTypeDescription {
        federated_type: ApiResource {
            group: "types.kubefed.io".into(),
            version: "v1beta1".into(),
            kind: "FederatedWidget".into(),
            plural_name: "federatedwidgets".into(),
            scope: ResourceScope::Namespaced,
        },
        target_short_names: Vec::new(),
        retain_replicas: true,
    };
    let crd = federated_crd(&description, Some(schema)).unwrap();
    let root = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
    let template = &root["openAPIV3Schema"]["properties"]["spec"]["properties"]["template"];
    assert_eq!(
        template["properties"]["spec"]["properties"]["maxSurge"],
        json!({ "x-kubernetes-int-or-string": true })
    );
    assert!(template["properties"].get("status").is_none());
}
