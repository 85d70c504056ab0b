//! A record's endpoints: KubeFed's `getServiceDNSEndpoints` (`service.go`) and
//! `getIngressDNSEndpoints` (`ingress.go`), never failing.

use std::collections::BTreeMap;

use hubfed_api::multiclusterdns::{
    ClusterDns, DEFAULT_RECORD_TTL, Endpoint, IngressDnsRecord, RECORD_TYPE_A, RECORD_TYPE_AAAA,
    RECORD_TYPE_CNAME, SERVICE_NAME_LABEL, ServiceDnsRecord,
};
use k8s_openapi::api::core::v1::LoadBalancerStatus;

use super::merge::merge_endpoints;
use super::names::ServiceNames;
use super::problems::DnsProblem;
use super::resolve::{Addresses, HostResolver, load_balancer_targets, resolve_targets};

/// The endpoints of a record's DNSEndpoint, and what kept some from being written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DnsEndpoints {
    /// Merged and sorted ([`super::merge_endpoints`]).
    pub endpoints: Vec<Endpoint>,
    /// In the order of the record's clusters.
    pub problems: Vec<DnsProblem>,
}

/// A record's `recordTTL`, or [`DEFAULT_RECORD_TTL`] when it is unset or 0.
pub fn record_ttl(record_ttl: i64) -> i64 {
    if record_ttl == 0 {
        DEFAULT_RECORD_TTL
    } else {
        record_ttl
    }
}

/// The endpoints of a ServiceDNSRecord, from its spec, name, namespace and status.
///
/// Per entry of `status.dns`: the zone names (one per non-empty zone), the region name and
/// the global name, each an address record of the member's load balancer, or a CNAME of the
/// level above when it has none. A member without a region writes its global record only, one
/// without zones no zone records; each is a [`DnsProblem`]. Then the `dnsPrefix` CNAME, and
/// [`merge_endpoints`].
pub fn service_endpoints(record: &ServiceDnsRecord, resolver: &dyn HostResolver) -> DnsEndpoints {
    let names = ServiceNames::new(record);
    let spec = &record.spec;
    let template = Endpoint {
        record_ttl: record_ttl(spec.record_ttl),
        labels: if spec.external_name.is_empty() {
            BTreeMap::new()
        } else {
            let name = record.metadata.name.clone().unwrap_or_default();
            BTreeMap::from([(SERVICE_NAME_LABEL.to_owned(), name)])
        },
        ..Endpoint::default()
    };
    let mut out = DnsEndpoints::default();
    let mut endpoints = Vec::new();
    let dns = record.status.as_ref().map_or(&[][..], |s| &s.dns[..]);
    for cluster in dns {
        let addresses = cluster_addresses(
            &cluster.cluster,
            &cluster.load_balancer,
            resolver,
            &mut out.problems,
        );
        for (name, up) in cluster_levels(&names, cluster, &mut out.problems) {
            endpoints.extend(level_endpoints(&template, name, &addresses, up));
        }
        endpoints.extend(level_endpoints(&template, names.global(), &addresses, None));
    }
    if !spec.dns_prefix.is_empty() {
        // KubeFed's alias carries no labels, even with an `externalName`.
        endpoints.push(Endpoint {
            dns_name: names.prefix_alias(&spec.dns_prefix),
            targets: vec![names.global()],
            record_type: RECORD_TYPE_CNAME.to_owned(),
            record_ttl: template.record_ttl,
            labels: BTreeMap::new(),
        });
    }
    out.endpoints = merge_endpoints(endpoints);
    out
}

/// The endpoints of an IngressDNSRecord: each host an address record of every member's load
/// balancer; no record for a host while no member has one. Empty hosts are skipped
/// (validation refuses them).
pub fn ingress_endpoints(record: &IngressDnsRecord, resolver: &dyn HostResolver) -> DnsEndpoints {
    let mut out = DnsEndpoints::default();
    let mut addresses = Addresses::default();
    for cluster in record.status.iter().flat_map(|s| &s.dns) {
        addresses.extend(&cluster_addresses(
            &cluster.cluster,
            &cluster.load_balancer,
            resolver,
            &mut out.problems,
        ));
    }
    let template = Endpoint {
        record_ttl: record_ttl(record.spec.record_ttl),
        ..Endpoint::default()
    };
    let endpoints = record
        .spec
        .hosts
        .iter()
        .filter(|host| !host.is_empty())
        .flat_map(|host| address_endpoints(&template, host, &addresses))
        .collect();
    out.endpoints = merge_endpoints(endpoints);
    out
}

/// A member's load-balancer addresses; its host names that do not resolve become problems.
fn cluster_addresses(
    cluster: &str,
    load_balancer: &LoadBalancerStatus,
    resolver: &dyn HostResolver,
    problems: &mut Vec<DnsProblem>,
) -> Addresses {
    let (addresses, unresolved) = resolve_targets(&load_balancer_targets(load_balancer), resolver);
    problems.extend(
        unresolved
            .into_iter()
            .map(|u| DnsProblem::HostnameNotResolved {
                cluster: cluster.to_owned(),
                hostname: u.hostname,
                error: u.error,
            }),
    );
    addresses
}

/// A member's zone and region names below the global one, each with the name a CNAME of it
/// points to; what cannot be named is a problem.
fn cluster_levels(
    names: &ServiceNames,
    cluster: &ClusterDns,
    problems: &mut Vec<DnsProblem>,
) -> Vec<(String, Option<String>)> {
    let zones: Vec<&String> = cluster.zones.iter().filter(|z| !z.is_empty()).collect();
    let region = cluster.region.as_str();
    if region.is_empty() {
        problems.push(DnsProblem::NoRegion {
            cluster: cluster.cluster.clone(),
            has_zones: !zones.is_empty(),
        });
        return Vec::new();
    }
    if zones.is_empty() {
        problems.push(DnsProblem::NoZones {
            cluster: cluster.cluster.clone(),
        });
    }
    let region_name = names.region(region);
    let mut levels: Vec<(String, Option<String>)> = zones
        .iter()
        .map(|zone| (names.zone(zone, region), Some(region_name.clone())))
        .collect();
    levels.push((region_name, Some(names.global())));
    levels
}

/// One level's endpoints: its address records, or a CNAME of `up` when there are no addresses
/// (none at the global level, which has no level above).
fn level_endpoints(
    template: &Endpoint,
    name: String,
    addresses: &Addresses,
    up: Option<String>,
) -> Vec<Endpoint> {
    if !addresses.is_empty() {
        return address_endpoints(template, &name, addresses);
    }
    up.map(|up| Endpoint {
        dns_name: name,
        targets: vec![up],
        record_type: RECORD_TYPE_CNAME.to_owned(),
        ..template.clone()
    })
    .into_iter()
    .collect()
}

/// `name`'s `A` record of the IPv4 addresses and `AAAA` record of the IPv6 ones, each only
/// when it has targets.
fn address_endpoints(template: &Endpoint, name: &str, addresses: &Addresses) -> Vec<Endpoint> {
    [
        (RECORD_TYPE_A, &addresses.v4),
        (RECORD_TYPE_AAAA, &addresses.v6),
    ]
    .into_iter()
    .filter(|(_, targets)| !targets.is_empty())
    .map(|(record_type, targets)| Endpoint {
        dns_name: name.to_owned(),
        targets: targets.iter().cloned().collect(),
        record_type: record_type.to_owned(),
        ..template.clone()
    })
    .collect()
}
