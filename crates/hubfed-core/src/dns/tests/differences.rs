//! Where hubfed deliberately differs from KubeFed, and the rules KubeFed's cases do not reach.

use std::collections::BTreeMap;

use hubfed_api::multiclusterdns::Endpoint;
use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus};

use super::*;

#[test]
fn a_cluster_without_region_keeps_its_global_record_and_is_reported() {
    let record = service_record(
        json!({}),
        json!([
            cluster("c1", &["us1"], "us", &[LB1]),
            cluster("c3", &["x1"], "", &[LB3])
        ]),
    );
    let (endpoints, problems) = service(&record);
    assert_eq!(
        endpoints,
        json!([
            ep(GLOBAL, &[LB1, LB3], "A"),
            ep(C1_REGION, &[LB1], "A"),
            ep(C1_ZONE, &[LB1], "A"),
        ])
    );
    assert_eq!(
        problems,
        [DnsProblem::NoRegion {
            cluster: "c3".to_owned(),
            has_zones: true
        }]
    );
    assert_eq!(
        problems[0].to_string(),
        "cluster \"c3\" has zones but no region: only its global record is written"
    );
}

#[test]
fn a_cluster_without_zones_keeps_region_and_global_and_is_reported() {
    let record = service_record(
        json!({}),
        json!([
            cluster("c1", &[], "us", &[LB1]),
            cluster("c2", &[""], "eu", &[])
        ]),
    );
    let (endpoints, problems) = service(&record);
    assert_eq!(
        endpoints,
        sorted(vec![
            ep(GLOBAL, &[LB1], "A"),
            ep(C2_REGION, &[GLOBAL], "CNAME"),
            ep(C1_REGION, &[LB1], "A"),
        ])
    );
    let clusters: Vec<(&str, &str)> = problems.iter().map(|p| (p.cluster(), p.reason())).collect();
    assert_eq!(clusters, [("c1", REASON_NO_ZONES), ("c2", REASON_NO_ZONES)]);
}

#[test]
fn a_cluster_with_neither_writes_only_global_and_says_both() {
    let record = service_record(json!({}), json!([cluster("c9", &[], "", &[])]));
    let (endpoints, problems) = service(&record);
    assert_eq!(endpoints, json!([]));
    assert_eq!(
        problems[0].to_string(),
        "cluster \"c9\" has no region and no zones: only its global record is written"
    );
}

#[test]
fn an_unresolved_hostname_is_left_out_and_its_levels_point_up() {
    let mut c1 = cluster("c1", &["us1"], "us", &[]);
    c1["loadBalancer"] = json!({"ingress": [{"hostname": "gone.elb.test"}]});
    let record = service_record(
        json!({}),
        json!([c1, cluster("c2", &["eu1"], "eu", &[LB2])]),
    );
    let (endpoints, problems) = service(&record);
    assert_eq!(
        endpoints,
        sorted(vec![
            ep(GLOBAL, &[LB2], "A"),
            ep(C2_REGION, &[LB2], "A"),
            ep(C2_ZONE, &[LB2], "A"),
            ep(C1_REGION, &[GLOBAL], "CNAME"),
            ep(C1_ZONE, &[C1_REGION], "CNAME"),
        ])
    );
    assert_eq!(
        problems,
        [DnsProblem::HostnameNotResolved {
            cluster: "c1".to_owned(),
            hostname: "gone.elb.test".to_owned(),
            error: "Mock error response".to_owned(),
        }]
    );
}

#[test]
fn ipv6_addresses_are_aaaa_records_beside_a() {
    let record = service_record(
        json!({}),
        json!([
            cluster("c1", &["us1"], "us", &["2001:db8::1", LB1]),
            cluster("c2", &["eu1"], "eu", &["2001:db8::2"])
        ]),
    );
    let (endpoints, _) = service(&record);
    let summary: Vec<(&str, &str, &Value)> = endpoints
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["dnsName"].as_str().unwrap(),
                e["recordType"].as_str().unwrap(),
                &e["targets"],
            )
        })
        .collect();
    let global: Vec<_> = summary
        .iter()
        .filter(|(name, ..)| *name == GLOBAL)
        .collect();
    assert_eq!(
        global,
        [
            &(GLOBAL, "A", &json!([LB1])),
            &(GLOBAL, "AAAA", &json!(["2001:db8::1", "2001:db8::2"])),
        ]
    );
    assert!(summary.contains(&(C2_ZONE, "AAAA", &json!(["2001:db8::2"]))));
    assert_eq!(summary.len(), 8, "{summary:?}");
}

/// Two members in one zone, one with a load balancer and one without: the address wins over
/// the CNAME, as KubeFed's merge has it.
#[test]
fn clusters_sharing_a_zone_merge_and_the_address_wins() {
    let record = service_record(
        json!({}),
        json!([
            cluster("c1", &["us1"], "us", &[LB1]),
            cluster("c2", &["us1"], "us", &[]),
            cluster("c3", &["us1"], "us", &[LB3])
        ]),
    );
    let (endpoints, problems) = service(&record);
    assert_eq!(
        endpoints,
        json!([
            ep(GLOBAL, &[LB1, LB3], "A"),
            ep(C1_REGION, &[LB1, LB3], "A"),
            ep(C1_ZONE, &[LB1, LB3], "A"),
        ])
    );
    assert!(problems.is_empty());
}

#[test]
fn merge_drops_empty_targets_and_sorts_by_name_then_type() {
    let endpoint = |name: &str, targets: &[&str], record_type: &str| Endpoint {
        dns_name: name.to_owned(),
        targets: targets.iter().map(|t| (*t).to_owned()).collect(),
        record_type: record_type.to_owned(),
        record_ttl: 180,
        labels: BTreeMap::new(),
    };
    let merged = merge_endpoints(vec![
        endpoint("b", &["2", "1", "2"], "A"),
        endpoint("a", &[""], "CNAME"),
        endpoint("b", &["x"], "CNAME"),
        endpoint("b", &["::1"], "AAAA"),
        endpoint("c", &["z"], "CNAME"),
        endpoint("c", &["y", "z"], "CNAME"),
    ]);
    assert_eq!(
        merged,
        [
            endpoint("b", &["1", "2"], "A"),
            endpoint("b", &["::1"], "AAAA"),
            endpoint("c", &["y", "z"], "CNAME"),
        ]
    );
}

#[test]
fn hostnames_to_resolve_and_a_table_resolver() {
    let load_balancer = LoadBalancerStatus {
        ingress: Some(vec![
            LoadBalancerIngress {
                ip: Some(LB1.to_owned()),
                hostname: Some(ELB.to_owned()),
                ..LoadBalancerIngress::default()
            },
            LoadBalancerIngress {
                hostname: Some("b.elb.test".to_owned()),
                ..LoadBalancerIngress::default()
            },
        ]),
    };
    assert_eq!(
        load_balancer_targets(&load_balancer),
        [LB1, ELB, "b.elb.test"]
    );
    let hostnames = load_balancer_hostnames([&load_balancer]);
    assert_eq!(
        hostnames.iter().collect::<Vec<_>>(),
        ["a9.us-west-2.elb.amazonaws.test", "b.elb.test"]
    );
    let resolved = ResolvedHosts(BTreeMap::from([(ELB.to_owned(), Ok(vec![LB3.to_owned()]))]));
    assert_eq!(resolved.lookup_host(ELB), Ok(vec![LB3.to_owned()]));
    assert!(resolved.lookup_host("b.elb.test").is_err());
}

#[test]
fn the_condition_lists_every_problem_in_cluster_order() {
    assert_eq!(
        records_condition(&[]),
        RecordsCondition {
            complete: true,
            reason: REASON_COMPLETE,
            message: String::new()
        }
    );
    let condition = records_condition(&[
        DnsProblem::NoZones {
            cluster: "c2".to_owned(),
        },
        DnsProblem::NoRegion {
            cluster: "c1".to_owned(),
            has_zones: false,
        },
    ]);
    assert!(!condition.complete);
    assert_eq!(condition.reason, REASON_NO_REGION);
    assert_eq!(
        condition.message,
        "cluster \"c1\" has no region and no zones: only its global record is written; \
         cluster \"c2\" has no zones: its region and global records are written, no zone records"
    );
    assert_eq!(
        domain_not_found_message("galactic", "kube-federation-system"),
        "Domain \"galactic\" not found in namespace \"kube-federation-system\": no records are written"
    );
}

#[test]
fn an_ingress_skips_empty_hosts_and_reports_unresolved_names() {
    let record = ingress_record(
        &["", "web.test"],
        0,
        &[
            ("c1", json!([{"hostname": "gone.elb.test"}])),
            ("c2", json!([{"ip": LB2}])),
        ],
    );
    let out = ingress_endpoints(&record, &kubefed_resolver);
    assert_eq!(
        serde_json::to_value(&out.endpoints).unwrap(),
        json!([ep("web.test", &[LB2], "A")])
    );
    assert_eq!(out.problems[0].cluster(), "c1");
    assert_eq!(out.problems[0].reason(), REASON_HOSTNAME_NOT_RESOLVED);
}
