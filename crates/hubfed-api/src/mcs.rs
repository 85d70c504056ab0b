//! The Multi-Cluster Services API (KEP-1645): `ServiceExport` and `ServiceImport` of
//! `multicluster.x-k8s.io`, as the Go module `sigs.k8s.io/mcs-api` [`MCS_API_RELEASE`] has them.
//!
//! Fields, wire names, schemas, versions and well-known names are upstream's unchanged, so
//! every MCS implementation's objects read and write through these types, and the CRDs
//! rendered from them ([`crds`], `crds/mcs.yaml`) are upstream's: `e2e/tests/mcs_crds.rs`
//! compares them field by field. Both versions, [`VERSION`] (stored) and [`V1ALPHA1`], are
//! served with one schema; the types here are those of [`VERSION`].
//!
//! The root objects are written out rather than derived with `kube`'s `CustomResource`:
//! upstream's `spec` is optional (a `ServiceExport` rarely has one) and the derive requires it
//! (`crate::upstream`).
//!
//! Upstream may move a ServiceImport's properties from `spec` to `status`
//! (kubernetes-sigs/mcs-api#48, #85): they are one struct, [`ServiceImportProperties`], read and
//! written through [`ServiceImport::properties`] and [`ServiceImport::properties_mut`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::SessionAffinityConfig;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::core::NamespaceResourceScope;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::condition::string_enum;
use crate::upstream::{
    Crd, age_column, object_meta_schema, printer_column, root_schema, upstream_resource,
};

/// The API group of ServiceExport and ServiceImport.
pub const GROUP: &str = "multicluster.x-k8s.io";
/// The stored version, the one of the types here.
pub const VERSION: &str = "v1beta1";
/// The older version, served with the same schema.
pub const V1ALPHA1: &str = "v1alpha1";
/// The release of `sigs.k8s.io/mcs-api` these types and CRDs are.
pub const MCS_API_RELEASE: &str = "v0.5.2";

/// The label on upstream's CRDs naming their release ([`MCS_API_RELEASE`]).
pub const RELEASE_VERSION_LABEL: &str = "multicluster.x-k8s.io/release-version";
/// The label on upstream's CRDs counting schema changes within a release.
pub const CRD_SCHEMA_REVISION_LABEL: &str = "multicluster.x-k8s.io/crd-schema-revision";
/// The schema revision of [`MCS_API_RELEASE`]'s CRDs.
pub const CRD_SCHEMA_REVISION: &str = "0";

/// The label on an imported EndpointSlice naming the multi-cluster service it belongs to.
pub const SERVICE_NAME_LABEL: &str = "multicluster.kubernetes.io/service-name";
/// The label on an imported EndpointSlice (or another exported resource) naming the cluster
/// it comes from.
pub const SOURCE_CLUSTER_LABEL: &str = "multicluster.kubernetes.io/source-cluster";
/// The annotation on a ServiceImport naming the Service derived from it in its cluster, as
/// upstream's reference controller (`sigs.k8s.io/mcs-api/controllers`) writes it.
pub const DERIVED_SERVICE_ANNOTATION: &str = "multicluster.kubernetes.io/derived-service";

/// Declares that the Service of the same namespace and name may be consumed from the other
/// clusters of the ClusterSet.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExport {
    #[serde(default)]
    #[schemars(schema_with = "object_meta_schema")]
    pub metadata: ObjectMeta,
    /// What the export carries beyond the Service.
    #[serde(default)]
    pub spec: ServiceExportSpec,
    /// The export's state, written by the MCS controller. The exported configuration is
    /// that of the Service with the export's namespace and name.
    #[serde(default)]
    pub status: Option<ServiceExportStatus>,
}

/// What a ServiceExport carries beyond its Service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExportSpec {
    /// Labels to export (optional for an implementation).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_labels: BTreeMap<String, String>,
    /// Annotations to export (optional for an implementation).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_annotations: BTreeMap<String, String>,
}

/// The state of a ServiceExport.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExportStatus {
    /// The `Valid`, `Ready` and `Conflict` conditions, one of each type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// A service imported from the clusters of a ClusterSet that export it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImport {
    #[serde(default)]
    #[schemars(schema_with = "object_meta_schema")]
    pub metadata: ObjectMeta,
    /// The imported service: what a client in this cluster needs to reach it.
    #[serde(default)]
    pub spec: ServiceImportProperties,
    /// The exporting clusters the service is derived from.
    #[serde(default)]
    pub status: Option<ServiceImportStatus>,
}

impl ServiceImport {
    /// The imported service's properties, wherever this version of the API keeps them.
    pub fn properties(&self) -> &ServiceImportProperties {
        &self.spec
    }

    /// The imported service's properties, to change.
    pub fn properties_mut(&mut self) -> &mut ServiceImportProperties {
        &mut self.spec
    }
}

/// An imported service's ports, addresses, type and traffic settings (`ServiceImportSpec`
/// upstream, which may move them into the status).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportProperties {
    /// The ports of the service, replaced as a whole.
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ports: Vec<ServicePort>,
    /// The virtual IPs of the service when its type is `ClusterSetIP` (at most one per IP
    /// family).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    pub ips: Vec<String>,
    /// `ClusterSetIP` or `Headless`.
    #[serde(rename = "type")]
    #[schemars(schema_with = "service_import_type_schema")]
    pub type_: String,
    /// `ClientIP` or `None` (absent: `None`); ignored when the type is `Headless`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session_affinity: String,
    /// The session affinity's settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_config: Option<SessionAffinityConfig>,
    /// The IP families of the service (`IPv4`, `IPv6`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    pub ip_families: Vec<String>,
    /// `Cluster` or `Local`, as a Service's `internalTrafficPolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_traffic_policy: Option<String>,
    /// A hint how to distribute traffic over the endpoints (e.g. `PreferClose`), as a
    /// Service's `trafficDistribution`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_distribution: Option<String>,
}

/// A port on which an imported service is exposed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    /// The port's name (a DNS label), matching the `name` of the EndpointSlices' ports;
    /// optional when the service has one port.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `TCP` (absent), `UDP` or `SCTP`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol: String,
    /// The application protocol, a hint such as `kubernetes.io/h2c`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    /// The port number.
    pub port: i32,
}

/// The derived state of a ServiceImport.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportStatus {
    /// Whether imported EndpointSlices exist for the import: `Present` or `Absent`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(schema_with = "endpoint_slice_objects_schema")]
    pub endpoint_slice_objects: String,
    /// The exporting clusters the service is derived from, one entry each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["cluster"]
    ))]
    pub clusters: Vec<ClusterStatus>,
    /// The `Ready` condition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// One exporting cluster of an imported service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// The exporting cluster's name, a DNS label (RFC 1123).
    pub cluster: String,
}

string_enum! {
    /// The `type` of a ServiceImport.
    pub enum ServiceImportType {
        /// Reached through its ClusterSet IPs.
        ClusterSetIp => "ClusterSetIP",
        /// No virtual IP: clients reach the endpoints directly.
        Headless => "Headless",
    }
}

string_enum! {
    /// A ServiceImport's `status.endpointSliceObjects`.
    pub enum EndpointSliceObjects {
        Present => "Present",
        Absent => "Absent",
    }
}

string_enum! {
    /// The condition types of a ServiceExport.
    pub enum ServiceExportConditionType {
        /// Whether the export is valid (says nothing about it being exported yet). True:
        /// `Valid`; false: `NoService`, `InvalidServiceType`.
        Valid => "Valid",
        /// Whether the service is exported, or ready to be pulled. True: `Exported`, `Ready`;
        /// false: `Pending`, `Failed`; unknown: `Pending`.
        Ready => "Ready",
        /// Whether a property of the service has conflicting values among its exports. True:
        /// the conflict reasons, joined by commas when several; false: `NoConflicts`.
        Conflict => "Conflict",
    }
}

string_enum! {
    /// The reasons of a ServiceExport's conditions. Controllers may use others but should
    /// prefer these.
    pub enum ServiceExportConditionReason {
        /// `Valid` is true.
        Valid => "Valid",
        /// `Valid` is false: the Service does not exist.
        NoService => "NoService",
        /// `Valid` is false: the Service's type cannot be exported (ExternalName).
        InvalidServiceType => "InvalidServiceType",
        /// `Ready` is true: exported to a control or data plane.
        Exported => "Exported",
        /// `Ready` is true: ready to be pulled.
        Ready => "Ready",
        /// `Ready` is false or unknown: being exported.
        Pending => "Pending",
        /// `Ready` is false: the export failed, the message says why.
        Failed => "Failed",
        /// `Conflict`: the ports differ among the exporting Services.
        PortConflict => "PortConflict",
        /// `Conflict`: the types differ (headless or not).
        TypeConflict => "TypeConflict",
        /// `Conflict`: the session affinities differ.
        SessionAffinityConflict => "SessionAffinityConflict",
        /// `Conflict`: the session affinity settings differ.
        SessionAffinityConfigConflict => "SessionAffinityConfigConflict",
        /// `Conflict`: the exported annotations differ.
        AnnotationsConflict => "AnnotationsConflict",
        /// `Conflict`: the exported labels differ.
        LabelsConflict => "LabelsConflict",
        /// `Conflict`: the internal traffic policies differ.
        InternalTrafficPolicyConflict => "InternalTrafficPolicyConflict",
        /// `Conflict`: the traffic distributions differ.
        TrafficDistributionConflict => "TrafficDistributionConflict",
        /// `Conflict`: the IP families differ so that some backends would be unreachable
        /// over some IP protocol.
        IpFamilyConflict => "IPFamilyConflict",
        /// `Conflict` is false.
        NoConflicts => "NoConflicts",
    }
}

string_enum! {
    /// The condition types of a ServiceImport.
    pub enum ServiceImportConditionType {
        /// Whether the import is ready. True: `Ready`; false: `Pending`,
        /// `IPFamilyNotSupported`; unknown: `Pending`.
        Ready => "Ready",
    }
}

string_enum! {
    /// The reasons of a ServiceImport's conditions.
    pub enum ServiceImportConditionReason {
        /// `Ready` is true.
        Ready => "Ready",
        /// `Ready` is false or unknown: being created or updated.
        Pending => "Pending",
        /// `Ready` is false: the IP families do not fit the cluster.
        IpFamilyNotSupported => "IPFamilyNotSupported",
    }
}

upstream_resource!(
    ServiceExport,
    NamespaceResourceScope,
    GROUP,
    VERSION,
    "ServiceExport",
    "serviceexports"
);
upstream_resource!(
    ServiceImport,
    NamespaceResourceScope,
    GROUP,
    VERSION,
    "ServiceImport",
    "serviceimports"
);

/// The CRDs of ServiceExport and ServiceImport, each serving [`V1ALPHA1`] and [`VERSION`]
/// (stored) with one schema, as upstream's.
pub fn crds() -> Result<Vec<CustomResourceDefinition>, Error> {
    let crd = |kind, plural, short_names, printer_columns, schema| Crd {
        group: GROUP,
        kind,
        plural,
        scope: "Namespaced",
        short_names,
        categories: &[],
        labels: &[
            (RELEASE_VERSION_LABEL, MCS_API_RELEASE),
            (CRD_SCHEMA_REVISION_LABEL, CRD_SCHEMA_REVISION),
        ],
        annotations: &[],
        printer_columns,
        schema,
        versions: &[(V1ALPHA1, false), (VERSION, true)],
    };
    let export = crd(
        "ServiceExport",
        "serviceexports",
        &["svcex", "svcexport"],
        vec![age_column("Age")],
        root_schema::<ServiceExport>()?,
    );
    let import = crd(
        "ServiceImport",
        "serviceimports",
        &["svcim", "svcimport"],
        vec![
            printer_column(
                "Type",
                "string",
                ".spec.type",
                Some("The type of this ServiceImport"),
            ),
            printer_column(
                "IP",
                "string",
                ".spec.ips",
                Some("The VIP for this ServiceImport"),
            ),
            age_column("Age"),
        ],
        root_schema::<ServiceImport>()?,
    );
    Ok(vec![export.render(), import.render()])
}

fn service_import_type_schema(_: &mut SchemaGenerator) -> Schema {
    let values: Vec<&str> = ServiceImportType::ALL.iter().map(|t| t.as_str()).collect();
    json_schema!({ "type": "string", "enum": values })
}

fn endpoint_slice_objects_schema(_: &mut SchemaGenerator) -> Schema {
    let values: Vec<&str> = EndpointSliceObjects::ALL
        .iter()
        .map(|v| v.as_str())
        .collect();
    json_schema!({ "type": "string", "enum": values })
}

/// A list of `metav1.Condition`s, one per type, with the validation Kubernetes' own types
/// carry (`k8s-openapi`'s schema has none of it).
fn conditions_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "description": "Condition contains details for one aspect of the current state of this API Resource.",
            "type": "object",
            "required": ["lastTransitionTime", "message", "reason", "status", "type"],
            "properties": {
                "lastTransitionTime": {
                    "description": "lastTransitionTime is the last time the condition transitioned from one status to another.",
                    "type": "string",
                    "format": "date-time",
                },
                "message": {
                    "description": "message is a human readable message indicating details about the transition. This may be an empty string.",
                    "type": "string",
                    "maxLength": 32768,
                },
                "observedGeneration": {
                    "description": "observedGeneration represents the .metadata.generation that the condition was set based upon.",
                    "type": "integer",
                    "format": "int64",
                    "minimum": 0,
                },
                "reason": {
                    "description": "reason contains a programmatic identifier indicating the reason for the condition's last transition.",
                    "type": "string",
                    "maxLength": 1024,
                    "minLength": 1,
                    "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
                },
                "status": {
                    "description": "status of the condition, one of True, False, Unknown.",
                    "type": "string",
                    "enum": ["True", "False", "Unknown"],
                },
                "type": {
                    "description": "type of condition in CamelCase or in foo.example.com/CamelCase.",
                    "type": "string",
                    "maxLength": 316,
                    "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
                },
            },
        },
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn round_trip<T: serde::de::DeserializeOwned + Serialize>(wire: &Value) -> T {
        let object: T = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(&serde_json::to_value(&object).unwrap(), wire);
        object
    }

    /// `demo/yaml/serviceimport-with-vip.yaml` of sigs.k8s.io/mcs-api v0.5.2.
    #[test]
    fn upstreams_example_service_import_round_trips() {
        let import: ServiceImport = round_trip(&json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1",
            "kind": "ServiceImport",
            "metadata": {"name": "serve-with-vip", "namespace": "demo"},
            "spec": {
                "type": "ClusterSetIP",
                "ips": ["1.2.3.4"],
                "ports": [{"port": 80, "protocol": "TCP"}],
            },
        }));
        let properties = import.properties();
        assert_eq!(
            ServiceImportType::parse(&properties.type_),
            Some(ServiceImportType::ClusterSetIp)
        );
        assert_eq!(properties.ips, ["1.2.3.4"]);
        assert_eq!(
            properties.ports,
            [ServicePort {
                port: 80,
                protocol: "TCP".to_owned(),
                ..ServicePort::default()
            }]
        );
    }

    /// Every field of a v1beta1 ServiceImport, upstream's example filled in with the rest of
    /// upstream's `ServiceImportSpec` and `ServiceImportStatus`.
    #[test]
    fn a_service_import_with_every_field_round_trips() {
        let import: ServiceImport = round_trip(&json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1",
            "kind": "ServiceImport",
            "metadata": {
                "name": "serve",
                "namespace": "demo",
                "annotations": {DERIVED_SERVICE_ANNOTATION: "derived-abc123"},
            },
            "spec": {
                "type": "Headless",
                "ports": [
                    {"name": "http", "protocol": "TCP", "appProtocol": "kubernetes.io/h2c",
                        "port": 80},
                    {"name": "dns", "protocol": "UDP", "port": 53},
                ],
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}},
                "ipFamilies": ["IPv4", "IPv6"],
                "internalTrafficPolicy": "Local",
                "trafficDistribution": "PreferClose",
            },
            "status": {
                "endpointSliceObjects": "Present",
                "clusters": [{"cluster": "member1"}, {"cluster": "member2"}],
                "conditions": [{
                    "type": "Ready",
                    "status": "True",
                    "reason": "Ready",
                    "message": "",
                    "lastTransitionTime": "2025-03-01T10:00:00Z",
                    "observedGeneration": 2,
                }],
            },
        }));
        let status = import.status.unwrap();
        assert_eq!(status.clusters[1].cluster, "member2");
        assert_eq!(
            ServiceImportConditionReason::parse(&status.conditions[0].reason),
            Some(ServiceImportConditionReason::Ready)
        );
        assert_eq!(
            import
                .spec
                .session_affinity_config
                .unwrap()
                .client_ip
                .unwrap()
                .timeout_seconds,
            Some(10800)
        );
    }

    /// The usual ServiceExport has neither spec nor status; Go writes an empty spec.
    #[test]
    fn a_service_export_without_spec_reads() {
        let export: ServiceExport = serde_json::from_value(json!({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1",
            "kind": "ServiceExport",
            "metadata": {"name": "serve", "namespace": "demo"},
        }))
        .unwrap();
        assert_eq!(export.spec, ServiceExportSpec::default());
        assert_eq!(
            serde_json::to_value(&export).unwrap(),
            json!({
                "apiVersion": "multicluster.x-k8s.io/v1beta1",
                "kind": "ServiceExport",
                "metadata": {"name": "serve", "namespace": "demo"},
                "spec": {},
            })
        );
    }

    #[test]
    fn a_conflicting_service_export_round_trips() {
        let export: ServiceExport = round_trip(&json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1",
            "kind": "ServiceExport",
            "metadata": {"name": "serve", "namespace": "demo"},
            "spec": {"exportedLabels": {"tier": "web"}, "exportedAnnotations": {"a": "b"}},
            "status": {"conditions": [
                {"type": "Valid", "status": "True", "reason": "Valid", "message": "",
                    "lastTransitionTime": "2025-03-01T10:00:00Z"},
                {"type": "Conflict", "status": "True", "reason": "PortConflict,TypeConflict",
                    "message": "2/3 clusters disagree", "lastTransitionTime": "2025-03-01T10:00:00Z"},
            ]},
        }));
        let conditions = export.status.unwrap().conditions;
        assert_eq!(
            ServiceExportConditionType::parse(&conditions[1].type_),
            Some(ServiceExportConditionType::Conflict)
        );
        let reasons: Vec<Option<ServiceExportConditionReason>> = conditions[1]
            .reason
            .split(',')
            .map(ServiceExportConditionReason::parse)
            .collect();
        assert_eq!(
            reasons,
            [
                Some(ServiceExportConditionReason::PortConflict),
                Some(ServiceExportConditionReason::TypeConflict)
            ]
        );
    }

    #[test]
    fn reasons_keep_upstreams_spelling() {
        assert_eq!(
            ServiceExportConditionReason::IpFamilyConflict.as_str(),
            "IPFamilyConflict"
        );
        assert_eq!(ServiceExportConditionReason::ALL.len(), 17);
        assert_eq!(
            ServiceImportConditionReason::IpFamilyNotSupported.as_str(),
            "IPFamilyNotSupported"
        );
    }

    #[test]
    fn crds_serve_v1alpha1_and_store_v1beta1_with_one_schema() {
        let crds = crds().unwrap();
        let names: Vec<&str> = crds
            .iter()
            .filter_map(|crd| crd.metadata.name.as_deref())
            .collect();
        assert_eq!(
            names,
            [
                "serviceexports.multicluster.x-k8s.io",
                "serviceimports.multicluster.x-k8s.io"
            ]
        );
        for crd in &crds {
            let versions: Vec<(&str, bool, bool)> = crd
                .spec
                .versions
                .iter()
                .map(|v| (v.name.as_str(), v.served, v.storage))
                .collect();
            assert_eq!(
                versions,
                [("v1alpha1", true, false), ("v1beta1", true, true)]
            );
            assert_eq!(crd.spec.versions[0].schema, crd.spec.versions[1].schema);
            let labels = crd.metadata.labels.as_ref().unwrap();
            assert_eq!(labels[RELEASE_VERSION_LABEL], MCS_API_RELEASE);
        }
        let schema = serde_json::to_value(&crds[1].spec.versions[1].schema).unwrap();
        let root = &schema["openAPIV3Schema"];
        assert_eq!(root.get("required"), None, "spec is optional upstream");
        assert_eq!(
            root["properties"]["spec"]["required"],
            json!(["ports", "type"])
        );
        assert_eq!(
            root["properties"]["spec"]["properties"]["type"]["enum"],
            json!(["ClusterSetIP", "Headless"])
        );
        assert!(!schema.to_string().contains("nullable"));
    }
}
