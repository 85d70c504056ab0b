//! The About API (KEP-2149): `ClusterProperty` of `about.k8s.io`, a named, cluster-scoped
//! value describing the cluster it is in, and the two well-known properties a ClusterSet
//! member holds ([`CLUSTER_ID_PROPERTY`], [`CLUSTER_SET_PROPERTY`]).
//!
//! # Provenance
//!
//! The Go module `sigs.k8s.io/about-api` has no release the Go module proxy serves (it answers
//! 403), so no test compares [`crd`] with upstream's CRD the way `e2e/tests/mcs_crds.rs` does
//! for the MCS API. [`ClusterProperty`] is written from KEP-2149's facts and checked by hand
//! against upstream's repository (`kubernetes-sigs/about-api`, `api/v1beta1` and
//! `config/crd/` at 46170c2, 2026-07): cluster-scoped, `v1alpha1` and `v1beta1` (stored)
//! served with one schema, a status subresource with an empty status, the category
//! `multicluster`, printer columns `value` and `age`, and the protected-group approval
//! annotation ([`API_APPROVED_ANNOTATION`]) upstream's kustomization adds, without which the
//! API server refuses a CRD of a `*.k8s.io` group. One deliberate difference: `spec.value` is
//! at most 128000 characters, as the KEP and upstream's own marker say; the marker is misspelt
//! (`Maxlength`), so upstream's generated CRD has no maximum.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::ClusterResourceScope;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::upstream::{
    Crd, age_column, object_meta_schema, printer_column, root_schema, upstream_resource,
};

/// The API group of ClusterProperty.
pub const GROUP: &str = "about.k8s.io";
/// The stored version, the one of the type here.
pub const VERSION: &str = "v1beta1";
/// The older version, served with the same schema.
pub const V1ALPHA1: &str = "v1alpha1";

/// The ClusterProperty holding the cluster's ID: unique within its ClusterSet, immutable
/// while the cluster is a member, a DNS subdomain (RFC 1123), preferably under 128
/// characters, usable in MCS DNS names.
pub const CLUSTER_ID_PROPERTY: &str = "cluster.clusterset.k8s.io";
/// The ClusterProperty naming the ClusterSet the cluster belongs to: present exactly as long
/// as the cluster is a member.
pub const CLUSTER_SET_PROPERTY: &str = "clusterset.k8s.io";

/// The annotation a CRD of a protected group (`*.k8s.io`, `*.kubernetes.io`) needs, naming
/// the approved API review; upstream's value.
pub const API_APPROVED_ANNOTATION: (&str, &str) = (
    "api-approved.kubernetes.io",
    "https://github.com/kubernetes/enhancements/pull/3084",
);

/// A property of the cluster it is in, named by the object's name: identification and other
/// cluster-scoped information for multi-cluster tools.
///
/// Written from KEP-2149 and checked by hand against upstream's repository, since the Go
/// module proxy does not serve `sigs.k8s.io/about-api` (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "A property of the cluster it is in, named by the object's name: identification and other cluster-scoped information for multi-cluster tools."
)]
pub struct ClusterProperty {
    #[serde(default)]
    #[schemars(schema_with = "object_meta_schema")]
    pub metadata: ObjectMeta,
    /// The property's value.
    #[serde(default)]
    pub spec: ClusterPropertySpec,
    /// Empty, reserved upstream.
    #[serde(default)]
    pub status: Option<ClusterPropertyStatus>,
}

/// The value of a ClusterProperty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPropertySpec {
    /// The property's value, 1 to 128000 characters.
    #[schemars(length(min = 1, max = 128000))]
    pub value: String,
}

/// The status of a ClusterProperty: empty, reserved upstream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterPropertyStatus {}

upstream_resource!(
    ClusterProperty,
    ClusterResourceScope,
    GROUP,
    VERSION,
    "ClusterProperty",
    "clusterproperties"
);

/// The ClusterProperty CRD: [`V1ALPHA1`] and [`VERSION`] (stored) served with one schema.
pub fn crd() -> Result<CustomResourceDefinition, Error> {
    let crd = Crd {
        group: GROUP,
        kind: "ClusterProperty",
        plural: "clusterproperties",
        scope: "Cluster",
        short_names: &[],
        categories: &["multicluster"],
        labels: &[],
        annotations: &[API_APPROVED_ANNOTATION],
        printer_columns: vec![
            printer_column("value", "string", ".spec.value", None),
            age_column("age"),
        ],
        schema: root_schema::<ClusterProperty>()?,
        versions: &[(V1ALPHA1, false), (VERSION, true)],
    };
    Ok(crd.render())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn crd_serves_both_versions_and_stores_v1beta1() {
        let crd = crd().unwrap();
        assert_eq!(crd.spec.scope, "Cluster");
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
        let schema = serde_json::to_value(&crd.spec.versions[1].schema).unwrap();
        let root = &schema["openAPIV3Schema"];
        assert_eq!(root.get("required"), None, "spec is optional upstream");
        assert_eq!(
            root["properties"]["spec"]["properties"]["value"],
            json!({"type": "string", "minLength": 1, "maxLength": 128000,
                "description": "The property's value, 1 to 128000 characters."})
        );
        assert_eq!(root["properties"]["status"]["type"], "object");
        let annotations = crd.metadata.annotations.unwrap();
        assert!(annotations.contains_key("api-approved.kubernetes.io"));
    }

    /// The cluster ID of the About API's documentation, with the empty status Go writes.
    #[test]
    fn a_cluster_id_round_trips() {
        let wire = json!({
            "apiVersion": "about.k8s.io/v1beta1",
            "kind": "ClusterProperty",
            "metadata": {"name": CLUSTER_ID_PROPERTY},
            "spec": {"value": "cluster-1"},
            "status": {},
        });
        let property: ClusterProperty = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(property.spec.value, "cluster-1");
        assert_eq!(serde_json::to_value(&property).unwrap(), wire);
    }
}
