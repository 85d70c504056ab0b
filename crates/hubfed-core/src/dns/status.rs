//! A record's status from what the controller observed of each member (KubeFed's
//! `servicedns` and `ingressdns` controllers), and the record's conditions.

use hubfed_api::multiclusterdns::{
    ClusterDns, ClusterIngressDns, IngressDnsRecordStatus, ServiceDnsRecordSpec,
    ServiceDnsRecordStatus,
};
use k8s_openapi::api::core::v1::LoadBalancerStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::problems::{
    DnsProblem, REASON_DOMAIN_NOT_FOUND, RECORDS_COMPLETE_CONDITION, domain_not_found_message,
    records_condition,
};

/// What the controller observed of one member for one record.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemberObservation {
    /// The member's name.
    pub cluster: String,
    /// Whether the member is `Ready` (Offline or NotReady: what was seen of it is not used).
    pub ready: bool,
    /// `KubeFedCluster.status.region`, empty when unset.
    pub region: String,
    /// `KubeFedCluster.status.zones`.
    pub zones: Vec<String>,
    /// The load balancer of the member's Service (or Ingress) of the record's namespace and
    /// name; `None` when the member has none.
    pub load_balancer: Option<LoadBalancerStatus>,
    /// Whether that Service has at least one ready endpoint (ignored for Ingresses).
    pub ready_endpoints: bool,
}

impl MemberObservation {
    /// The load balancer the record's status holds for this member: empty when the member is
    /// not ready, has no object, or (unless `allow_without_endpoints`) the Service has no
    /// ready endpoint.
    fn counted_load_balancer(&self, allow_without_endpoints: bool) -> LoadBalancerStatus {
        match &self.load_balancer {
            Some(lb) if self.ready && (self.ready_endpoints || allow_without_endpoints) => {
                lb.clone()
            }
            _ => LoadBalancerStatus::default(),
        }
    }
}

/// The `domain` and `dns` of a ServiceDNSRecord's status: one entry per member, sorted by
/// cluster name, each with the member's region and zones and the load balancer that counts
/// ([`MemberObservation`]). A member that is not ready keeps its entry with an empty load
/// balancer, as KubeFed's: its names fall back to CNAMEs of the levels above. The
/// conditions are [`record_conditions`]'s.
pub fn service_record_status(
    spec: &ServiceDnsRecordSpec,
    domain: &str,
    members: &[MemberObservation],
) -> ServiceDnsRecordStatus {
    let mut dns: Vec<ClusterDns> = members
        .iter()
        .map(|member| ClusterDns {
            cluster: member.cluster.clone(),
            load_balancer: member.counted_load_balancer(spec.allow_service_without_endpoints),
            zones: member
                .zones
                .iter()
                .filter(|z| !z.is_empty())
                .cloned()
                .collect(),
            region: member.region.clone(),
        })
        .collect();
    dns.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    ServiceDnsRecordStatus {
        domain: domain.to_owned(),
        dns,
        conditions: Vec::new(),
    }
}

/// The `dns` of an IngressDNSRecord's status: one entry per member, sorted by cluster name,
/// with its Ingress's load balancer; empty when the member is not ready or has no Ingress.
pub fn ingress_record_status(members: &[MemberObservation]) -> IngressDnsRecordStatus {
    let mut dns: Vec<ClusterIngressDns> = members
        .iter()
        .map(|member| ClusterIngressDns {
            cluster: member.cluster.clone(),
            load_balancer: member.counted_load_balancer(true),
        })
        .collect();
    dns.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    IngressDnsRecordStatus {
        dns,
        conditions: Vec::new(),
    }
}

/// Why a record's records are what they are: written with `problems`, or not at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordOutcome<'a> {
    /// The records are written; `problems` kept some names out.
    Written(&'a [DnsProblem]),
    /// The ServiceDNSRecord's `domainRef` names no Domain in `namespace`.
    DomainNotFound {
        domain_ref: &'a str,
        namespace: &'a str,
    },
}

/// The record's `RecordsComplete` condition for `outcome`. A condition whose status is the
/// same as in `live` keeps its `lastTransitionTime`, so an unchanged record yields exactly
/// its live conditions. Conditions of other types in `live` are kept.
pub fn record_conditions(
    outcome: &RecordOutcome<'_>,
    live: &[Condition],
    now: &Time,
) -> Vec<Condition> {
    let (status, reason, message) = match outcome {
        RecordOutcome::Written(problems) => {
            let condition = records_condition(problems);
            let message = if condition.complete {
                "Every member's records are written.".to_owned()
            } else {
                condition.message
            };
            (condition.complete, condition.reason, message)
        }
        RecordOutcome::DomainNotFound {
            domain_ref,
            namespace,
        } => (
            false,
            REASON_DOMAIN_NOT_FOUND,
            domain_not_found_message(domain_ref, namespace),
        ),
    };
    let status = if status { "True" } else { "False" };
    let since = live
        .iter()
        .find(|c| c.type_ == RECORDS_COMPLETE_CONDITION && c.status == status)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    let mut conditions: Vec<Condition> = live
        .iter()
        .filter(|c| c.type_ != RECORDS_COMPLETE_CONDITION)
        .cloned()
        .collect();
    conditions.push(Condition {
        type_: RECORDS_COMPLETE_CONDITION.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time: since,
        observed_generation: None,
    });
    conditions
}

/// The Warning Events a record gets when its conditions go from `live` to `desired`: one
/// `(reason, message)` when `RecordsComplete` turns or stays `False` with another message,
/// none otherwise (an unchanged problem is said once).
pub fn condition_event(live: &[Condition], desired: &[Condition]) -> Option<(String, String)> {
    let find = |conditions: &[Condition]| {
        conditions
            .iter()
            .find(|c| c.type_ == RECORDS_COMPLETE_CONDITION)
            .cloned()
    };
    let now = find(desired)?;
    if now.status != "False" {
        return None;
    }
    let before = find(live);
    let unchanged = before.as_ref().is_some_and(|b| {
        b.status == now.status && b.reason == now.reason && b.message == now.message
    });
    (!unchanged).then_some((now.reason, now.message))
}
