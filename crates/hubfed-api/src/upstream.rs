//! What the hand-written root objects of upstream APIs share (the MCS API's ServiceExport and
//! ServiceImport, the About API's ClusterProperty, KubeFed's multi-cluster DNS kinds):
//! `kube::Resource` and the wire form ([`upstream_resource!`]), the structural schema
//! ([`root_schema`]) and the CRD ([`Crd`]).
//!
//! They are written out rather than derived with `kube`'s `CustomResource`, because their
//! `spec` is optional upstream (a ServiceExport rarely has one) or absent (KubeFed's Domain
//! keeps its fields at the top level), and the derive requires one.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceSubresourceStatus,
    CustomResourceSubresources, CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Serialize;

use crate::Error;

/// Implements `kube::Resource` and `Serialize` (with `apiVersion` and `kind`) for a root
/// object with `metadata`, `spec` and an optional `status`.
macro_rules! upstream_resource {
    ($type:ident, $scope:ty, $group:expr, $version:expr, $kind:literal, $plural:literal) => {
        crate::upstream::upstream_resource_meta!($type, $scope, $group, $version, $kind, $plural);

        impl serde::Serialize for $type {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                crate::upstream::WireObject {
                    api_version: &format!("{}/{}", $group, $version),
                    kind: $kind,
                    metadata: &self.metadata,
                    spec: &self.spec,
                    status: self.status.as_ref(),
                }
                .serialize(serializer)
            }
        }
    };
}

/// Implements `kube::Resource` alone, for a root object with `metadata` whose other fields
/// are not `spec` and `status` (KubeFed's `Domain`): its `Serialize` is written by hand.
macro_rules! upstream_resource_meta {
    ($type:ident, $scope:ty, $group:expr, $version:expr, $kind:literal, $plural:literal) => {
        impl kube::Resource for $type {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }

            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                $group.into()
            }

            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                $version.into()
            }

            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }

            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }

            fn meta_mut(
                &mut self,
            ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

pub(crate) use upstream_resource;
pub(crate) use upstream_resource_meta;

/// A root object as it goes on the wire.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireObject<'a, Spec, Status> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub metadata: &'a ObjectMeta,
    pub spec: &'a Spec,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'a Status>,
}

/// An upstream CRD: one schema served at every version, a status subresource.
pub(crate) struct Crd {
    pub group: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    /// `Namespaced` or `Cluster`.
    pub scope: &'static str,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub labels: &'static [(&'static str, &'static str)],
    pub annotations: &'static [(&'static str, &'static str)],
    pub printer_columns: Vec<CustomResourceColumnDefinition>,
    pub schema: JSONSchemaProps,
    /// The versions served, as `(name, stored)`.
    pub versions: &'static [(&'static str, bool)],
}

impl Crd {
    pub fn render(self) -> CustomResourceDefinition {
        let version = |&(name, storage): &(&str, bool)| CustomResourceDefinitionVersion {
            name: name.to_owned(),
            served: true,
            storage,
            subresources: Some(CustomResourceSubresources {
                status: Some(CustomResourceSubresourceStatus(serde_json::json!({}))),
                scale: None,
            }),
            additional_printer_columns: Some(self.printer_columns.clone()),
            schema: Some(CustomResourceValidation {
                open_api_v3_schema: Some(self.schema.clone()),
            }),
            ..CustomResourceDefinitionVersion::default()
        };
        let strings = |list: &[&str]| -> Option<Vec<String>> {
            (!list.is_empty()).then(|| list.iter().map(|&s| s.to_owned()).collect())
        };
        let map = |pairs: &[(&str, &str)]| -> Option<BTreeMap<String, String>> {
            (!pairs.is_empty()).then(|| {
                pairs
                    .iter()
                    .map(|&(k, v)| (k.to_owned(), v.to_owned()))
                    .collect()
            })
        };
        CustomResourceDefinition {
            metadata: ObjectMeta {
                name: Some(format!("{}.{}", self.plural, self.group)),
                labels: map(self.labels),
                annotations: map(self.annotations),
                ..ObjectMeta::default()
            },
            spec: CustomResourceDefinitionSpec {
                group: self.group.to_owned(),
                names: CustomResourceDefinitionNames {
                    kind: self.kind.to_owned(),
                    plural: self.plural.to_owned(),
                    singular: Some(self.kind.to_ascii_lowercase()),
                    short_names: strings(self.short_names),
                    categories: strings(self.categories),
                    ..CustomResourceDefinitionNames::default()
                },
                scope: self.scope.to_owned(),
                versions: self.versions.iter().map(version).collect(),
                ..CustomResourceDefinitionSpec::default()
            },
            status: None,
        }
    }
}

/// A printer column.
pub(crate) fn printer_column(
    name: &str,
    type_: &str,
    json_path: &str,
    description: Option<&str>,
) -> CustomResourceColumnDefinition {
    CustomResourceColumnDefinition {
        name: name.to_owned(),
        type_: type_.to_owned(),
        json_path: json_path.to_owned(),
        description: description.map(str::to_owned),
        ..CustomResourceColumnDefinition::default()
    }
}

/// The `Age` printer column.
pub(crate) fn age_column(name: &str) -> CustomResourceColumnDefinition {
    printer_column(name, "date", ".metadata.creationTimestamp", None)
}

/// The structural schema of root object `T`, with `apiVersion` and `kind`, as `kube`'s derive
/// writes one but without `nullable` (upstream's schemas have none: an optional field is
/// absent, and a `null` sent for one is pruned).
pub(crate) fn root_schema<T: JsonSchema>() -> Result<JSONSchemaProps, Error> {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|settings| {
            settings.inline_subschemas = true;
            settings.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(kube::core::schema::StructuralSchemaRewriter)
        .with_transform(kube::core::schema::OptionalEnum)
        .with_transform(kube::core::schema::OptionalIntOrString)
        .with_transform(schemars::transform::RecursiveTransform(
            |schema: &mut Schema| {
                schema.remove("nullable");
            },
        ))
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>();
    schema.remove("title");
    if let Some(properties) = schema
        .get_mut("properties")
        .and_then(serde_json::Value::as_object_mut)
    {
        // `#[serde(default)]` on the root's fields is for reading objects, not a default the
        // API server should fill in.
        for property in properties.values_mut() {
            if let Some(property) = property.as_object_mut() {
                property.remove("default");
            }
        }
        for field in ["apiVersion", "kind"] {
            properties.insert(field.to_owned(), serde_json::json!({ "type": "string" }));
        }
    }
    serde_json::from_value(schema.to_value()).map_err(|source| Error::InvalidSchema {
        kind: T::schema_name().into_owned(),
        source,
    })
}

/// `metadata` at the root: the API server knows its schema.
pub(crate) fn object_meta_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object" })
}
