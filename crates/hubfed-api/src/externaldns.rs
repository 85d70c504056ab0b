//! external-dns's own `DNSEndpoint` (`externaldns.k8s.io/v1alpha1`), as external-dns
//! [`EXTERNAL_DNS_RELEASE`] has it (`endpoint/endpoint.go`, `apis/v1alpha1/dnsendpoint.go`).
//!
//! Since v0.21.0 external-dns's CRD source reads this group only, so KubeFed's
//! `multiclusterdns.kubefed.io` DNSEndpoints ([`crate::multiclusterdns::DnsEndpoint`]) are no
//! longer published by a current external-dns. The shapes are the same but for two endpoint
//! fields KubeFed's lacks, `setIdentifier` and `providerSpecific`; hubfed writes neither, and
//! [`From`] turns KubeFed's endpoint into this one losing nothing.
//!
//! No CRD is generated for this group: external-dns ships its own
//! (`config/crd/standard/dnsendpoints.externaldns.k8s.io.yaml`), and the cluster that runs
//! external-dns installs it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::NamespaceResourceScope;
use serde::{Deserialize, Serialize};

use crate::multiclusterdns;
use crate::upstream::upstream_resource;

/// external-dns's API group.
pub const GROUP: &str = "externaldns.k8s.io";
/// The version of its DNSEndpoint.
pub const VERSION: &str = "v1alpha1";
/// The external-dns release these types are.
pub const EXTERNAL_DNS_RELEASE: &str = "v0.23.0";

/// DNS records for external-dns's CRD source to publish.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DnsEndpoint {
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The records.
    #[serde(default)]
    pub spec: DnsEndpointSpec,
    /// Written by external-dns.
    #[serde(default)]
    pub status: Option<DnsEndpointStatus>,
}

/// The records of a DNSEndpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DnsEndpointSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<Endpoint>,
}

/// One DNS record, as external-dns's `endpoint.Endpoint`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// The host name of the record.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dns_name: String,
    /// What the record points to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    /// `A`, `AAAA`, `CNAME`, `SRV`, `TXT`, ...
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub record_type: String,
    /// Tells apart records of one name and type (e.g. Route 53 routing policies).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub set_identifier: String,
    /// The TTL in seconds; 0: the provider's default.
    #[serde(rename = "recordTTL", default, skip_serializing_if = "is_zero")]
    pub record_ttl: i64,
    /// Labels of the record.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Settings of one DNS provider.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provider_specific: Vec<ProviderSpecificProperty>,
}

/// A provider's setting on one record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderSpecificProperty {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
}

/// What external-dns observed of a DNSEndpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DnsEndpointStatus {
    /// The generation external-dns last published.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_generation: i64,
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}

upstream_resource!(
    DnsEndpoint,
    NamespaceResourceScope,
    GROUP,
    VERSION,
    "DNSEndpoint",
    "dnsendpoints"
);

impl From<multiclusterdns::Endpoint> for Endpoint {
    fn from(endpoint: multiclusterdns::Endpoint) -> Self {
        Self {
            dns_name: endpoint.dns_name,
            targets: endpoint.targets,
            record_type: endpoint.record_type,
            set_identifier: String::new(),
            record_ttl: endpoint.record_ttl,
            labels: endpoint.labels,
            provider_specific: Vec::new(),
        }
    }
}

impl From<multiclusterdns::DnsEndpointSpec> for DnsEndpointSpec {
    fn from(spec: multiclusterdns::DnsEndpointSpec) -> Self {
        Self {
            endpoints: spec.endpoints.into_iter().map(Endpoint::from).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// external-dns's `docs/sources/crd.md` example, with every endpoint field.
    #[test]
    fn an_external_dns_endpoint_round_trips() {
        let wire = json!({
            "apiVersion": "externaldns.k8s.io/v1alpha1",
            "kind": "DNSEndpoint",
            "metadata": {"name": "examplednsrecord", "namespace": "default"},
            "spec": {"endpoints": [{
                "dnsName": "foo.bar.com",
                "recordTTL": 180,
                "recordType": "A",
                "setIdentifier": "eu",
                "targets": ["192.168.99.216"],
                "labels": {"owner": "hubfed"},
                "providerSpecific": [{"name": "alias", "value": "true"}],
            }]},
            "status": {"observedGeneration": 2},
        });
        let object: DnsEndpoint = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(object.spec.endpoints[0].provider_specific[0].name, "alias");
        assert_eq!(serde_json::to_value(&object).unwrap(), wire);
    }

    #[test]
    fn a_kubefed_endpoint_converts_losing_nothing() {
        let kubefed = multiclusterdns::Endpoint {
            dns_name: "web.ns.fed.svc.example.com".to_owned(),
            targets: vec!["10.0.0.1".to_owned()],
            record_type: "A".to_owned(),
            record_ttl: 180,
            labels: BTreeMap::from([("serviceName".to_owned(), "web".to_owned())]),
        };
        let ours = Endpoint::from(kubefed.clone());
        assert_eq!(
            serde_json::to_value(&ours).unwrap(),
            serde_json::to_value(&kubefed).unwrap()
        );
    }
}
