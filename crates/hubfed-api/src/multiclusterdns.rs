//! KubeFed's multi-cluster DNS API: `Domain`, `ServiceDNSRecord`, `IngressDNSRecord` and
//! `DNSEndpoint` of `multiclusterdns.kubefed.io/v1alpha1`, as KubeFed [`KUBEFED_RELEASE`] (the
//! last release that had them) has them.
//!
//! Field names, wire forms and schemas are KubeFed's, so a KubeFed user's manifests and
//! KubeFed-era external-dns deployments read and write through these types, and the CRDs
//! rendered from them ([`crds`], `crds/multiclusterdns.yaml`) are KubeFed's:
//! `e2e/tests/dns_crds.rs` compares them field by field and lists the deliberate differences.
//! The one addition hubfed needs is `status.conditions` on both records, so that a record
//! says which cluster lacks a region or zones instead of failing silently.
//!
//! The roots are written out rather than derived with `kube`'s `CustomResource`: KubeFed's
//! `spec` is optional (Go always writes one, but the schema does not require it) and a
//! `Domain` has no spec at all, its `domain` and `nameServer` being top-level fields
//! (`crate::upstream`).
//!
//! Current external-dns reads its own group only; the same records in that group are
//! [`crate::externaldns`]'s.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::LoadBalancerStatus;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::core::NamespaceResourceScope;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::upstream::{
    Crd, object_meta_schema, root_schema, upstream_resource, upstream_resource_meta,
};

/// The API group of KubeFed's multi-cluster DNS kinds.
pub const GROUP: &str = "multiclusterdns.kubefed.io";
/// Their one version.
pub const VERSION: &str = "v1alpha1";
/// The KubeFed release these types and CRDs are: the last one with multi-cluster DNS
/// (v0.7.0 removed it).
pub const KUBEFED_RELEASE: &str = "v0.6.1";

/// The TTL of a record whose `recordTTL` is unset or 0, in seconds (KubeFed's
/// `defaultDNSTTL`).
pub const DEFAULT_RECORD_TTL: i64 = 180;
/// The prefix of the DNSEndpoint written for the ServiceDNSRecord `<name>`: `service-<name>`.
pub const SERVICE_ENDPOINT_PREFIX: &str = "service-";
/// The prefix of the DNSEndpoint written for the IngressDNSRecord `<name>`: `ingress-<name>`.
pub const INGRESS_ENDPOINT_PREFIX: &str = "ingress-";
/// The endpoint label naming the Service when `externalName` replaced its name in the records.
pub const SERVICE_NAME_LABEL: &str = "serviceName";

/// A record of one or more IPv4 addresses.
pub const RECORD_TYPE_A: &str = "A";
/// A record of one or more IPv6 addresses (hubfed's; KubeFed wrote IPv6 addresses as `A`).
pub const RECORD_TYPE_AAAA: &str = "AAAA";
/// An alias of another name.
pub const RECORD_TYPE_CNAME: &str = "CNAME";

/// The DNS zone of the federation, named by the `domainRef` of ServiceDNSRecords: records are
/// written under `domain`.
///
/// KubeFed keeps `domain` and `nameServer` at the top level, beside `metadata`, not under a
/// spec.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    extend("required" = ["domain"]),
    description = "The DNS zone of the federation, named by the domainRef of ServiceDNSRecords: records are written under domain."
)]
pub struct Domain {
    #[serde(default)]
    #[schemars(schema_with = "object_meta_schema")]
    pub metadata: ObjectMeta,
    /// The DNS zone of the federation, e.g. `example.com` (required; Go writes it even when
    /// empty, which validation refuses).
    #[serde(default)]
    pub domain: String,
    /// The authoritative name server of the zone (informational).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name_server: String,
}

/// DNS records for the Service of the same namespace and name in every member: global,
/// per-region and per-zone names under the Domain `domainRef` names.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "DNS records for the Service of the same namespace and name in every member cluster: <service>.<namespace>.<domainRef>.svc.<domain>, with .<region> and .<zone>.<region> levels."
)]
pub struct ServiceDnsRecord {
    #[serde(default)]
    #[schemars(schema_with = "object_meta_schema")]
    pub metadata: ObjectMeta,
    /// Which Domain, and how the records are written.
    #[serde(default)]
    pub spec: ServiceDnsRecordSpec,
    /// Each member's load balancer, region and zones, written by the controller.
    #[serde(default)]
    pub status: Option<ServiceDnsRecordStatus>,
}

/// How a ServiceDNSRecord's records are written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["domainRef"]))]
pub struct ServiceDnsRecordSpec {
    /// The name of the Domain, in the KubeFed namespace, the records belong to; also the
    /// federation's label in the names (`<svc>.<ns>.<domainRef>.svc.<domain>`).
    #[serde(default)]
    #[schemars(transform = no_default)]
    pub domain_ref: String,
    /// The records' TTL in seconds; unset or 0: 180.
    #[serde(rename = "recordTTL", default, skip_serializing_if = "is_zero")]
    pub record_ttl: i64,
    /// When set, an additional CNAME `<dnsPrefix>.<domain>` of the global name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dns_prefix: String,
    /// When set, replaces the Service's name in the records.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub external_name: String,
    /// Write the load balancer of a member whose Service has no endpoints too.
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_service_without_endpoints: bool,
}

/// What the controller observed of a ServiceDNSRecord's Service in the members.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceDnsRecordStatus {
    /// The Domain's `domain`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    /// One entry per member, sorted by cluster name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<ClusterDns>,
    /// hubfed, beyond KubeFed: what keeps records from being written, naming the cluster
    /// (e.g. one without a region).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One member's part of a ServiceDNSRecord.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDns {
    /// The member's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster: String,
    /// The member Service's load balancer (empty when the Service has no endpoints, or the
    /// member is offline).
    #[serde(default)]
    #[schemars(transform = no_default)]
    pub load_balancer: LoadBalancerStatus,
    /// The member's zones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// The member's region.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub region: String,
}

/// DNS records for the Ingress of the same namespace and name in every member: each host an
/// `A` record of every member's load balancer.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressDnsRecord {
    #[serde(default)]
    #[schemars(schema_with = "object_meta_schema")]
    pub metadata: ObjectMeta,
    /// The host names and their TTL.
    #[serde(default)]
    pub spec: IngressDnsRecordSpec,
    /// Each member's load balancer, written by the controller.
    #[serde(default)]
    pub status: Option<IngressDnsRecordStatus>,
}

/// The host names of an IngressDNSRecord.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressDnsRecordSpec {
    /// The host names to write, as in the Ingress's rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// The records' TTL in seconds; unset or 0: 180.
    #[serde(rename = "recordTTL", default, skip_serializing_if = "is_zero")]
    pub record_ttl: i64,
}

/// What the controller observed of an IngressDNSRecord's Ingress in the members.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressDnsRecordStatus {
    /// One entry per member.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<ClusterIngressDns>,
    /// hubfed, beyond KubeFed: what keeps records from being written, naming the cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One member's part of an IngressDNSRecord.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterIngressDns {
    /// The member's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster: String,
    /// The member Ingress's load balancer.
    #[serde(default)]
    #[schemars(transform = no_default)]
    pub load_balancer: LoadBalancerStatus,
}

/// DNS records for external-dns to publish (`--source=crd`), one object per ServiceDNSRecord
/// (`service-<name>`) or IngressDNSRecord (`ingress-<name>`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DnsEndpoint {
    #[serde(default)]
    #[schemars(schema_with = "object_meta_schema")]
    pub metadata: ObjectMeta,
    /// The records.
    #[serde(default)]
    pub spec: DnsEndpointSpec,
    /// Written by the consumer (external-dns).
    #[serde(default)]
    pub status: Option<DnsEndpointStatus>,
}

/// The records of a DNSEndpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DnsEndpointSpec {
    /// One entry per name (and record type).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<Endpoint>,
}

/// One DNS record: a name, its type, TTL and targets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// The fully qualified name of the record.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dns_name: String,
    /// The addresses (A, AAAA) or the name (CNAME) the record points to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    /// `A`, `AAAA` or `CNAME` here; external-dns knows more.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub record_type: String,
    /// The TTL in seconds.
    #[serde(rename = "recordTTL", default, skip_serializing_if = "is_zero")]
    pub record_ttl: i64,
    /// Labels of the record (`serviceName` when `externalName` is set).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// What the consumer of a DNSEndpoint observed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DnsEndpointStatus {
    /// The generation the consumer last acted on.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_generation: i64,
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// Drops the `default` schemars takes from `#[serde(default)]`: Go writes the field always,
/// and KubeFed's schema has no default.
fn no_default(schema: &mut schemars::Schema) {
    schema.remove("default");
}

impl serde::Serialize for Domain {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire<'a> {
            api_version: &'a str,
            kind: &'a str,
            metadata: &'a ObjectMeta,
            domain: &'a str,
            #[serde(skip_serializing_if = "str::is_empty")]
            name_server: &'a str,
        }
        Wire {
            api_version: &format!("{GROUP}/{VERSION}"),
            kind: "Domain",
            metadata: &self.metadata,
            domain: &self.domain,
            name_server: &self.name_server,
        }
        .serialize(serializer)
    }
}

upstream_resource_meta!(
    Domain,
    NamespaceResourceScope,
    GROUP,
    VERSION,
    "Domain",
    "domains"
);
upstream_resource!(
    ServiceDnsRecord,
    NamespaceResourceScope,
    GROUP,
    VERSION,
    "ServiceDNSRecord",
    "servicednsrecords"
);
upstream_resource!(
    IngressDnsRecord,
    NamespaceResourceScope,
    GROUP,
    VERSION,
    "IngressDNSRecord",
    "ingressdnsrecords"
);
upstream_resource!(
    DnsEndpoint,
    NamespaceResourceScope,
    GROUP,
    VERSION,
    "DNSEndpoint",
    "dnsendpoints"
);

/// The four CRDs, sorted by name: a status subresource on all but Domain, which has no status,
/// as KubeFed's.
pub fn crds() -> Result<Vec<CustomResourceDefinition>, Error> {
    let crd = |kind, plural, schema| {
        let mut crd = Crd {
            group: GROUP,
            kind,
            plural,
            scope: "Namespaced",
            short_names: &[],
            categories: &[],
            labels: &[],
            annotations: &[],
            printer_columns: Vec::new(),
            schema,
            versions: &[(VERSION, true)],
        }
        .render();
        // KubeFed's CRDs have no printer columns; an empty list would be written out.
        for version in &mut crd.spec.versions {
            version.additional_printer_columns = None;
        }
        crd
    };
    let mut domain = crd("Domain", "domains", root_schema::<Domain>()?);
    for version in &mut domain.spec.versions {
        version.subresources = None;
    }
    Ok(vec![
        crd("DNSEndpoint", "dnsendpoints", root_schema::<DnsEndpoint>()?),
        domain,
        crd(
            "IngressDNSRecord",
            "ingressdnsrecords",
            root_schema::<IngressDnsRecord>()?,
        ),
        crd(
            "ServiceDNSRecord",
            "servicednsrecords",
            root_schema::<ServiceDnsRecord>()?,
        ),
    ])
}

#[cfg(test)]
mod tests;
