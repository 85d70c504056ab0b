//! KubeFed's record names (`pkg/controller/dnsendpoint/service.go`) and DNSEndpoint names
//! (`controller.go`).

use hubfed_api::multiclusterdns::{
    INGRESS_ENDPOINT_PREFIX, SERVICE_ENDPOINT_PREFIX, ServiceDnsRecord,
};

/// The DNSEndpoint of the ServiceDNSRecord `record_name`: `service-<name>`, in the record's
/// namespace.
pub fn service_endpoint_name(record_name: &str) -> String {
    format!("{SERVICE_ENDPOINT_PREFIX}{record_name}")
}

/// The DNSEndpoint of the IngressDNSRecord `record_name`: `ingress-<name>`, in the record's
/// namespace.
pub fn ingress_endpoint_name(record_name: &str) -> String {
    format!("{INGRESS_ENDPOINT_PREFIX}{record_name}")
}

/// The names of one ServiceDNSRecord's records.
///
/// All start with `<svc>.<ns>.<domainRef>.svc`, where `<svc>` is `externalName` when set and
/// the record's name otherwise, and end with the domain of the record's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceNames {
    prefix: String,
    domain: String,
}

impl ServiceNames {
    /// The names of `record`'s records, under its `status.domain`.
    pub fn new(record: &ServiceDnsRecord) -> Self {
        let spec = &record.spec;
        let service = if spec.external_name.is_empty() {
            record.metadata.name.as_deref().unwrap_or_default()
        } else {
            spec.external_name.as_str()
        };
        let namespace = record.metadata.namespace.as_deref().unwrap_or_default();
        let domain = record
            .status
            .as_ref()
            .map(|status| status.domain.clone())
            .unwrap_or_default();
        Self {
            prefix: format!("{service}.{namespace}.{}.svc", spec.domain_ref),
            domain,
        }
    }

    /// `<svc>.<ns>.<domainRef>.svc.<domain>`.
    pub fn global(&self) -> String {
        format!("{}.{}", self.prefix, self.domain)
    }

    /// `<svc>.<ns>.<domainRef>.svc.<region>.<domain>`.
    pub fn region(&self, region: &str) -> String {
        format!("{}.{region}.{}", self.prefix, self.domain)
    }

    /// `<svc>.<ns>.<domainRef>.svc.<zone>.<region>.<domain>`.
    pub fn zone(&self, zone: &str, region: &str) -> String {
        format!("{}.{zone}.{region}.{}", self.prefix, self.domain)
    }

    /// `<dnsPrefix>.<domain>`, the CNAME of the global name.
    pub fn prefix_alias(&self, dns_prefix: &str) -> String {
        format!("{dns_prefix}.{}", self.domain)
    }
}
