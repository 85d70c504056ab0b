//! A record's status from the members' observations, and its condition and Events.

use hubfed_api::multiclusterdns::ServiceDnsRecordSpec;
use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::*;

fn lb(ip: &str) -> LoadBalancerStatus {
    LoadBalancerStatus {
        ingress: Some(vec![LoadBalancerIngress {
            ip: Some(ip.to_owned()),
            ..LoadBalancerIngress::default()
        }]),
    }
}

fn member(
    cluster: &str,
    region: &str,
    zones: &[&str],
    ip: Option<&str>,
    ready_endpoints: bool,
) -> MemberObservation {
    MemberObservation {
        cluster: cluster.to_owned(),
        ready: true,
        region: region.to_owned(),
        zones: zones.iter().map(|z| (*z).to_owned()).collect(),
        load_balancer: ip.map(lb),
        ready_endpoints,
    }
}

fn spec(allow: bool) -> ServiceDnsRecordSpec {
    ServiceDnsRecordSpec {
        domain_ref: "galactic".to_owned(),
        allow_service_without_endpoints: allow,
        ..ServiceDnsRecordSpec::default()
    }
}

fn time(seconds: i64) -> Time {
    Time(Timestamp::from_second(seconds).unwrap())
}

fn load_balancers(
    status: &hubfed_api::multiclusterdns::ServiceDnsRecordStatus,
) -> Vec<(String, LoadBalancerStatus)> {
    status
        .dns
        .iter()
        .map(|c| (c.cluster.clone(), c.load_balancer.clone()))
        .collect()
}

#[test]
fn every_member_is_listed_by_name_with_its_region_zones_and_load_balancer() {
    let members = [
        member("c2", "eu", &["eu1"], Some(LB2), true),
        member("c1", "us", &["us1", ""], Some(LB1), true),
    ];
    let status = service_record_status(&spec(false), "example.com", &members);
    assert_eq!(status.domain, "example.com");
    let clusters: Vec<(&str, &str, Vec<String>)> = status
        .dns
        .iter()
        .map(|c| (c.cluster.as_str(), c.region.as_str(), c.zones.clone()))
        .collect();
    assert_eq!(
        clusters,
        [
            ("c1", "us", vec!["us1".to_owned()]),
            ("c2", "eu", vec!["eu1".to_owned()])
        ]
    );
    assert_eq!(
        load_balancers(&status),
        [("c1".to_owned(), lb(LB1)), ("c2".to_owned(), lb(LB2))]
    );
}

#[test]
fn a_service_without_ready_endpoints_counts_only_when_allowed() {
    let members = [
        member("c1", "us", &["us1"], Some(LB1), false),
        member("c2", "eu", &["eu1"], Some(LB2), true),
    ];
    let without = service_record_status(&spec(false), "example.com", &members);
    assert_eq!(
        load_balancers(&without),
        [
            ("c1".to_owned(), LoadBalancerStatus::default()),
            ("c2".to_owned(), lb(LB2))
        ]
    );
    let allowed = service_record_status(&spec(true), "example.com", &members);
    assert_eq!(
        load_balancers(&allowed),
        [("c1".to_owned(), lb(LB1)), ("c2".to_owned(), lb(LB2))]
    );
}

#[test]
fn a_member_not_ready_or_without_the_service_keeps_an_entry_with_no_load_balancer() {
    let mut offline = member("c1", "us", &["us1"], Some(LB1), true);
    offline.ready = false;
    let members = [offline, member("c2", "eu", &["eu1"], None, false)];
    let status = service_record_status(&spec(true), "example.com", &members);
    assert_eq!(
        load_balancers(&status),
        [
            ("c1".to_owned(), LoadBalancerStatus::default()),
            ("c2".to_owned(), LoadBalancerStatus::default())
        ]
    );
    assert_eq!(status.dns[0].region, "us", "its region and zones stay");
    assert_eq!(status.dns[0].zones, ["us1"]);
}

/// The status feeds the endpoints: the member without ready endpoints has CNAMEs up.
#[test]
fn a_member_without_ready_endpoints_falls_back_to_cnames() {
    let members = [
        member("c1", "us", &["us1"], Some(LB1), false),
        member("c2", "eu", &["eu1"], Some(LB2), true),
    ];
    let mut record = service_record(json!({}), json!([]));
    record.status = Some(service_record_status(&record.spec, "example.com", &members));
    let (endpoints, problems) = service(&record);
    assert_eq!(problems, []);
    assert_eq!(
        endpoints,
        sorted(vec![
            ep(GLOBAL, &[LB2], "A"),
            ep(C1_REGION, &[GLOBAL], "CNAME"),
            ep(C1_ZONE, &[C1_REGION], "CNAME"),
            ep(C2_REGION, &[LB2], "A"),
            ep(C2_ZONE, &[LB2], "A"),
        ])
    );
}

#[test]
fn ingress_entries_hold_each_members_load_balancer_sorted_by_cluster() {
    let mut offline = member("c3", "", &[], Some(LB3), false);
    offline.ready = false;
    let members = [
        member("c2", "", &[], Some(LB2), false),
        member("c1", "", &[], Some(LB1), false),
        offline,
    ];
    let status = ingress_record_status(&members);
    let got: Vec<(String, LoadBalancerStatus)> = status
        .dns
        .iter()
        .map(|c| (c.cluster.clone(), c.load_balancer.clone()))
        .collect();
    assert_eq!(
        got,
        [
            ("c1".to_owned(), lb(LB1)),
            ("c2".to_owned(), lb(LB2)),
            ("c3".to_owned(), LoadBalancerStatus::default())
        ]
    );
}

#[test]
fn the_condition_names_the_cluster_and_keeps_its_transition_time_while_unchanged() {
    let problems = [DnsProblem::NoRegion {
        cluster: "c3".to_owned(),
        has_zones: false,
    }];
    let first = record_conditions(&RecordOutcome::Written(&problems), &[], &time(100));
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].type_, RECORDS_COMPLETE_CONDITION);
    assert_eq!(first[0].status, "False");
    assert_eq!(first[0].reason, REASON_NO_REGION);
    assert!(first[0].message.contains("\"c3\""), "{}", first[0].message);
    assert_eq!(
        condition_event(&[], &first),
        Some((REASON_NO_REGION.to_owned(), first[0].message.clone()))
    );

    let again = record_conditions(&RecordOutcome::Written(&problems), &first, &time(200));
    assert_eq!(again, first, "unchanged: the live condition exactly");
    assert_eq!(condition_event(&first, &again), None, "said once");

    let complete = record_conditions(&RecordOutcome::Written(&[]), &again, &time(300));
    assert_eq!(complete[0].status, "True");
    assert_eq!(complete[0].reason, REASON_COMPLETE);
    assert_eq!(complete[0].last_transition_time, time(300));
    assert_eq!(condition_event(&again, &complete), None);
}

#[test]
fn a_missing_domain_is_a_false_condition_and_an_event() {
    let outcome = RecordOutcome::DomainNotFound {
        domain_ref: "nowhere",
        namespace: "kube-federation-system",
    };
    let conditions = record_conditions(&outcome, &[], &time(5));
    assert_eq!(conditions[0].status, "False");
    assert_eq!(conditions[0].reason, REASON_DOMAIN_NOT_FOUND);
    assert!(conditions[0].message.contains("\"nowhere\""));
    let (reason, _) = condition_event(&[], &conditions).unwrap();
    assert_eq!(reason, REASON_DOMAIN_NOT_FOUND);
}
