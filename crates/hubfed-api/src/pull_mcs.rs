//! Multi-cluster services for pull-mode members (hubfed, beyond KubeFed): what a pull
//! member's agent reports to the hub, and what the hub hands back to it.
//!
//! All three kinds live in the member's work namespace in the hub, where the agent's hub
//! credentials reach and nowhere else:
//!
//! - [`ServiceExportReport`]: one per exported name in the member, written by the agent: the
//!   ServiceExport, its Service and its source EndpointSlices, kept lean.
//! - [`ClusterReport`]: one, named [`CLUSTER_REPORT_NAME`], written by the agent: the
//!   member's namespaces, its ClusterProperties, whether it serves the MCS CRDs.
//! - [`ServiceImportWork`]: one per exported name the member imports or exports, written by
//!   the hub: the import to make (the member allocates its IPs), the endpoints of every
//!   source cluster, and the conditions of the member's own ServiceExport.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::mcs::{ServiceExport, ServiceImportProperties};

/// The name of a member's one [`ClusterReport`].
pub const CLUSTER_REPORT_NAME: &str = "cluster";
/// The label on every report and import work: the cluster it belongs to (the hub watches all
/// work namespaces by it).
pub const MCS_REPORT_LABEL: &str = "hubfed.io/mcs-cluster";

/// One exported name of a pull member, as its agent last saw it; named
/// `<namespace>.<name>`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "pull.hubfed.io",
    version = "v1alpha1",
    kind = "ServiceExportReport",
    namespaced,
    derive = "PartialEq",
    printcolumn = r#"{"name":"Namespace","type":"string","jsonPath":".spec.export.metadata.namespace"}"#,
    printcolumn = r#"{"name":"Service","type":"string","jsonPath":".spec.export.metadata.name"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "A pull member's ServiceExport, its Service and source EndpointSlices, as its agent reports them."
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExportReportSpec {
    /// The ServiceExport: identity (namespace, name, uid, creationTimestamp, generation) and
    /// spec.
    #[schemars(schema_with = "any_object")]
    pub export: ServiceExport,
    /// The Service of the same name (spec only); absent when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub service: Option<Service>,
    /// The Service's EndpointSlices (`kubernetes.io/service-name`, without an MCS label).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "any_objects")]
    pub slices: Vec<EndpointSlice>,
}

/// What a pull member's agent reports of the member as a whole.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "pull.hubfed.io",
    version = "v1alpha1",
    kind = "ClusterReport",
    namespaced,
    derive = "PartialEq",
    printcolumn = r#"{"name":"MCS","type":"boolean","jsonPath":".spec.mcsCrds"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "A pull member's namespaces, ClusterProperties and whether it serves the MCS CRDs, as its agent reports them."
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterReportSpec {
    /// The member serves the MCS CRDs (`multicluster.x-k8s.io`).
    pub mcs_crds: bool,
    /// The member serves ClusterProperties (`about.k8s.io`).
    #[serde(default)]
    pub properties_served: bool,
    /// The member's namespaces, sorted by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<ReportedNamespace>,
    /// The values of its ClusterProperties `cluster.clusterset.k8s.io` and
    /// `clusterset.k8s.io`, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
}

/// One namespace of a pull member.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportedNamespace {
    pub name: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub terminating: bool,
}

/// The hub's decision for one exported name in one pull member; named `<namespace>.<name>`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "pull.hubfed.io",
    version = "v1alpha1",
    kind = "ServiceImportWork",
    namespaced,
    status = "ServiceImportWorkStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Namespace","type":"string","jsonPath":".spec.namespace"}"#,
    printcolumn = r#"{"name":"Service","type":"string","jsonPath":".spec.name"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.result"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "What a pull member's agent makes of one exported name: its ServiceImport, derived Service and EndpointSlices, and its ServiceExport's conditions."
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportWorkSpec {
    /// The exported Service's namespace and name.
    pub namespace: String,
    pub name: String,
    /// The ServiceImport's spec (`ips` empty: the member allocates them); absent: the member
    /// gets no import (what this control plane wrote of it is withdrawn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub import: Option<ServiceImportProperties>,
    /// The ids of the clusters with a valid export (the import's `status.clusters`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
    /// The source EndpointSlices of every source cluster, by cluster id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<SourceEndpoints>,
    /// The conditions of the member's own ServiceExport, when it exports the name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "any_objects")]
    pub export_conditions: Vec<Condition>,
}

/// One source cluster's EndpointSlices.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceEndpoints {
    pub cluster: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "any_objects")]
    pub slices: Vec<EndpointSlice>,
}

/// What the agent made of the work's current generation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportWorkStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ok`, or `Failed` with `message`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub result: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `status.result` of an import work the agent carried out.
pub const IMPORT_WORK_OK: &str = "Ok";
/// `status.result` of an import work whose member writes failed.
pub const IMPORT_WORK_FAILED: &str = "Failed";

/// The name of a report or import work of `namespace/name`.
pub fn mcs_object_name(namespace: &str, name: &str) -> String {
    format!("{namespace}.{name}")
}

fn any_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

fn any_objects(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource as _;

    #[test]
    fn the_kinds_live_in_the_pull_group() {
        assert_eq!(ServiceExportReport::group(&()), crate::work::PULL_GROUP);
        assert_eq!(ClusterReport::group(&()), crate::work::PULL_GROUP);
        assert_eq!(ServiceImportWork::group(&()), crate::work::PULL_GROUP);
    }

    #[test]
    fn a_work_without_an_import_is_a_withdrawal() {
        let spec: ServiceImportWorkSpec =
            serde_json::from_value(serde_json::json!({"namespace": "a", "name": "web"})).unwrap();
        assert!(spec.import.is_none());
        assert_eq!(mcs_object_name("a", "web"), "a.web");
    }
}
