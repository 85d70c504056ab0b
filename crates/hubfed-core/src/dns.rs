//! Multi-cluster DNS: KubeFed's ServiceDNSRecord and IngressDNSRecord turned into the records
//! of a DNSEndpoint, the region and zones of a member, and the records' validation, as data in,
//! data out.
//!
//! The API is KubeFed v0.6.1's (`hubfed_api::multiclusterdns`). For one record the controller
//! writes the status (each member's load balancer, region and zones:
//! [`service_record_status`] or [`ingress_record_status`] from a [`MemberObservation`] per
//! member; the `RecordsComplete` condition from [`record_conditions`], with an Event when it
//! changes, [`condition_event`]), then:
//!
//! 1. [`service_endpoints`] (or [`ingress_endpoints`]) turns the record into the endpoints of
//!    its DNSEndpoint, named by [`service_endpoint_name`] (`service-<name>`) or
//!    [`ingress_endpoint_name`] (`ingress-<name>`). A Service gets, per member, a global name
//!    `<svc>.<ns>.<domainRef>.svc.<domain>`, a region name `<svc>.<ns>.<domainRef>.svc.<region>.<domain>`
//!    and a zone name `<svc>.<ns>.<domainRef>.svc.<zone>.<region>.<domain>` per zone
//!    ([`ServiceNames`]). A level with load-balancer addresses is an address record; one
//!    without is a CNAME of the level above (zone → region → global), so a client of a zone
//!    without a healthy shard is sent to the nearest one that has. `dnsPrefix` adds a CNAME
//!    `<dnsPrefix>.<domain>` of the global name, `externalName` replaces `<svc>`. Endpoints of
//!    one name are merged as KubeFed's `DedupeAndMergeEndpoints` does ([`merge_endpoints`]).
//! 2. What keeps records from being written is returned beside them as [`DnsProblem`]s naming
//!    the cluster, never as an error: a member without a region keeps its global record, one
//!    without zones its region and global records, and the other members are unaffected. The
//!    controller turns them into the record's condition ([`records_condition`]) and Events.
//! 3. [`cluster_topology`] gives a member's region and zones from its nodes' labels, for
//!    `KubeFedCluster.status`.
//! 4. [`validate_domain`], [`validate_service_dns_record`] and [`validate_ingress_dns_record`]
//!    are the admission rules.
//!
//! Deliberate differences from KubeFed v0.6.1, each tested (`dns/tests/`):
//! - A member without a region or zones: KubeFed's ServiceDNS controller wrote no status at all
//!   for the record and logged it at most (kubefed #1031, #1112, #1316, #1345); given such a
//!   status, its DNSEndpoint code wrote names with empty labels (`svc..example.com`, #464).
//!   hubfed writes what can be named and reports the rest.
//! - A load-balancer host name that does not resolve: KubeFed failed the whole record; hubfed
//!   leaves that target out, reports it, and the member's levels fall back to CNAMEs when
//!   nothing else is left.
//! - IPv6 addresses are `AAAA` records beside the `A` records; KubeFed wrote them as `A`.
//!
//! For IPv4 load balancers whose host names resolve, the endpoints are KubeFed's exactly:
//! `dns/tests/golden.rs` compares them with KubeFed v0.6.1's own code, run by
//! `hack/dns-golden` over `testdata/dns/cases.json`.

mod endpoints;
mod merge;
mod names;
mod problems;
mod resolve;
mod status;
mod topology;
mod validation;

#[cfg(test)]
mod tests;

pub use endpoints::{DnsEndpoints, ingress_endpoints, record_ttl, service_endpoints};
pub use merge::merge_endpoints;
pub use names::{ServiceNames, ingress_endpoint_name, service_endpoint_name};
pub use problems::{
    DnsProblem, REASON_COMPLETE, REASON_DOMAIN_NOT_FOUND, REASON_HOSTNAME_NOT_RESOLVED,
    REASON_NO_REGION, REASON_NO_ZONES, RECORDS_COMPLETE_CONDITION, RecordsCondition,
    domain_not_found_message, records_condition,
};
pub use resolve::{HostResolver, ResolvedHosts, load_balancer_hostnames, load_balancer_targets};
pub use status::{
    MemberObservation, RecordOutcome, condition_event, ingress_record_status, record_conditions,
    service_record_status,
};
pub use topology::{
    ClusterTopology, DEPRECATED_REGION_LABEL, DEPRECATED_ZONE_LABEL, REGION_LABEL, ZONE_LABEL,
    cluster_topology,
};
pub use validation::{validate_domain, validate_ingress_dns_record, validate_service_dns_record};
