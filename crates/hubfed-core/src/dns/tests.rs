//! KubeFed v0.6.1's own cases (`pkg/controller/dnsendpoint/service_test.go`, `ingress_test.go`),
//! ported; hubfed's differences, the golden comparison, topology and validation by subject.

use hubfed_api::multiclusterdns::{IngressDnsRecord, ServiceDnsRecord};
use serde_json::{Value, json};

use super::*;

mod differences;
mod golden;
mod status;
mod topology;
mod validation;

const LB1: &str = "10.20.30.1";
const LB2: &str = "10.20.30.2";
const LB3: &str = "10.20.30.3";
/// KubeFed's mocked ELB host name, resolving to [`LB3`].
const ELB: &str = "a9.us-west-2.elb.amazonaws.test";

const GLOBAL: &str = "nginx.test.galactic.svc.example.com";
const C1_REGION: &str = "nginx.test.galactic.svc.us.example.com";
const C1_ZONE: &str = "nginx.test.galactic.svc.us1.us.example.com";
const C2_REGION: &str = "nginx.test.galactic.svc.eu.example.com";
const C2_ZONE: &str = "nginx.test.galactic.svc.eu1.eu.example.com";
const C3_ZONE: &str = "nginx.test.galactic.svc.us2.us.example.com";

/// KubeFed's `NetWrapperMock`: [`ELB`] resolves, nothing else does.
fn kubefed_resolver(host: &str) -> Result<Vec<String>, String> {
    match host {
        ELB => Ok(vec![LB3.to_owned()]),
        _ => Err("Mock error response".to_owned()),
    }
}

/// The ServiceDNSRecord `test/nginx` of Domain `galactic` (`example.com`) with `spec` fields
/// and status entries `dns`.
fn service_record(spec: Value, dns: Value) -> ServiceDnsRecord {
    let mut spec = spec;
    spec["domainRef"] = json!("galactic");
    serde_json::from_value(json!({
        "metadata": {"name": "nginx", "namespace": "test"},
        "spec": spec,
        "status": {"domain": "example.com", "dns": dns},
    }))
    .unwrap()
}

/// `{cluster, zones, region, loadBalancer}` with one ingress point per IP.
fn cluster(name: &str, zones: &[&str], region: &str, ips: &[&str]) -> Value {
    let ingress: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip})).collect();
    json!({"cluster": name, "zones": zones, "region": region,
        "loadBalancer": if ingress.is_empty() { json!({}) } else { json!({"ingress": ingress}) }})
}

/// An endpoint as KubeFed's tests write them: `(name, targets, type)`, TTL 180.
fn ep(name: &str, targets: &[&str], record_type: &str) -> Value {
    json!({"dnsName": name, "targets": targets, "recordType": record_type, "recordTTL": 180})
}

fn service(record: &ServiceDnsRecord) -> (Value, Vec<DnsProblem>) {
    let out = service_endpoints(record, &kubefed_resolver);
    (serde_json::to_value(&out.endpoints).unwrap(), out.problems)
}

/// `expected` sorted by name, as KubeFed's test sorts its expectation.
fn sorted(mut expected: Vec<Value>) -> Value {
    expected.sort_by(|a, b| a["dnsName"].as_str().cmp(&b["dnsName"].as_str()));
    Value::Array(expected)
}

fn assert_service(record: ServiceDnsRecord, expected: Vec<Value>) {
    let (endpoints, problems) = service(&record);
    assert_eq!(endpoints, sorted(expected));
    assert_eq!(problems, []);
}

#[test]
fn no_clusters() {
    assert_service(service_record(json!({}), json!([])), vec![]);
}

#[test]
fn single_lb_in_single_cluster() {
    assert_service(
        service_record(json!({}), json!([cluster("c1", &["us1"], "us", &[LB1])])),
        vec![
            ep(GLOBAL, &[LB1], "A"),
            ep(C1_REGION, &[LB1], "A"),
            ep(C1_ZONE, &[LB1], "A"),
        ],
    );
}

#[test]
fn lbs_in_both_clusters() {
    assert_service(
        service_record(
            json!({}),
            json!([
                cluster("c1", &["us1"], "us", &[LB1]),
                cluster("c2", &["eu1"], "eu", &[LB2])
            ]),
        ),
        vec![
            ep(GLOBAL, &[LB1, LB2], "A"),
            ep(C1_REGION, &[LB1], "A"),
            ep(C1_ZONE, &[LB1], "A"),
            ep(C2_REGION, &[LB2], "A"),
            ep(C2_ZONE, &[LB2], "A"),
        ],
    );
}

#[test]
fn no_lb_in_one_cluster() {
    assert_service(
        service_record(
            json!({}),
            json!([
                cluster("c1", &["us1"], "us", &[LB1]),
                cluster("c2", &["eu1"], "eu", &[])
            ]),
        ),
        vec![
            ep(GLOBAL, &[LB1], "A"),
            ep(C1_REGION, &[LB1], "A"),
            ep(C1_ZONE, &[LB1], "A"),
            ep(C2_REGION, &[GLOBAL], "CNAME"),
            ep(C2_ZONE, &[C2_REGION], "CNAME"),
        ],
    );
}

#[test]
fn no_lb_in_both_clusters() {
    assert_service(
        service_record(
            json!({}),
            json!([
                cluster("c1", &["us1"], "us", &[]),
                cluster("c2", &["eu1"], "eu", &[])
            ]),
        ),
        vec![
            ep(C1_REGION, &[GLOBAL], "CNAME"),
            ep(C1_ZONE, &[C1_REGION], "CNAME"),
            ep(C2_REGION, &[GLOBAL], "CNAME"),
            ep(C2_ZONE, &[C2_REGION], "CNAME"),
        ],
    );
}

#[test]
fn multiple_lbs_in_clusters() {
    assert_service(
        service_record(
            json!({}),
            json!([
                cluster("c1", &["us1"], "us", &[LB1, LB3]),
                cluster("c2", &["eu1"], "eu", &[LB2])
            ]),
        ),
        vec![
            ep(GLOBAL, &[LB1, LB2, LB3], "A"),
            ep(C1_REGION, &[LB1, LB3], "A"),
            ep(C1_ZONE, &[LB1, LB3], "A"),
            ep(C2_REGION, &[LB2], "A"),
            ep(C2_ZONE, &[LB2], "A"),
        ],
    );
}

#[test]
fn hostname_in_lb() {
    let mut c1 = cluster("c1", &["us1"], "us", &[]);
    c1["loadBalancer"] = json!({"ingress": [{"hostname": ELB}]});
    assert_service(
        service_record(
            json!({}),
            json!([c1, cluster("c2", &["eu1"], "eu", &[LB2])]),
        ),
        vec![
            ep(GLOBAL, &[LB2, LB3], "A"),
            ep(C1_REGION, &[LB3], "A"),
            ep(C1_ZONE, &[LB3], "A"),
            ep(C2_REGION, &[LB2], "A"),
            ep(C2_ZONE, &[LB2], "A"),
        ],
    );
}

#[test]
fn user_configured_dns_record_ttl() {
    let with_ttl = |name, targets: &[&str]| {
        let mut endpoint = ep(name, targets, "A");
        endpoint["recordTTL"] = json!(300);
        endpoint
    };
    assert_service(
        service_record(
            json!({"recordTTL": 300}),
            json!([cluster("c1", &["us1"], "us", &[LB1])]),
        ),
        vec![
            with_ttl(GLOBAL, &[LB1]),
            with_ttl(C1_REGION, &[LB1]),
            with_ttl(C1_ZONE, &[LB1]),
        ],
    );
}

#[test]
fn user_configured_dns_prefix() {
    assert_service(
        service_record(
            json!({"dnsPrefix": "foo"}),
            json!([
                cluster("c1", &["us1"], "us", &[LB1]),
                cluster("c2", &["eu1"], "eu", &[LB2])
            ]),
        ),
        vec![
            ep(GLOBAL, &[LB1, LB2], "A"),
            ep(C1_REGION, &[LB1], "A"),
            ep(C1_ZONE, &[LB1], "A"),
            ep(C2_REGION, &[LB2], "A"),
            ep(C2_ZONE, &[LB2], "A"),
            ep("foo.example.com", &[GLOBAL], "CNAME"),
        ],
    );
}

#[test]
fn user_configured_external_name() {
    let labelled = |name: &str, targets: &[&str]| {
        let mut endpoint = ep(&name.replacen("nginx", "foo", 1), targets, "A");
        endpoint["labels"] = json!({"serviceName": "nginx"});
        endpoint
    };
    assert_service(
        service_record(
            json!({"externalName": "foo"}),
            json!([
                cluster("c1", &["us1"], "us", &[LB1]),
                cluster("c2", &["eu1"], "eu", &[LB2])
            ]),
        ),
        vec![
            labelled(GLOBAL, &[LB1, LB2]),
            labelled(C1_REGION, &[LB1]),
            labelled(C1_ZONE, &[LB1]),
            labelled(C2_REGION, &[LB2]),
            labelled(C2_ZONE, &[LB2]),
        ],
    );
}

#[test]
fn multi_zone_cluster() {
    assert_service(
        service_record(
            json!({}),
            json!([
                cluster("c1", &["us1", "us2"], "us", &[LB1]),
                cluster("c2", &["eu1"], "eu", &[LB2])
            ]),
        ),
        vec![
            ep(GLOBAL, &[LB1, LB2], "A"),
            ep(C1_REGION, &[LB1], "A"),
            ep(C1_ZONE, &[LB1], "A"),
            ep(C3_ZONE, &[LB1], "A"),
            ep(C2_REGION, &[LB2], "A"),
            ep(C2_ZONE, &[LB2], "A"),
        ],
    );
}

/// An IngressDNSRecord `test/nginx` of `hosts`, TTL `ttl`, with per-cluster ingress points.
fn ingress_record(hosts: &[&str], ttl: i64, clusters: &[(&str, Value)]) -> IngressDnsRecord {
    let dns: Vec<Value> = clusters
        .iter()
        .map(|(name, ingress)| json!({"cluster": name, "loadBalancer": {"ingress": ingress}}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "nginx", "namespace": "test"},
        "spec": {"hosts": hosts, "recordTTL": ttl},
        "status": {"dns": dns},
    }))
    .unwrap()
}

fn assert_ingress(record: IngressDnsRecord, expected: Value) {
    let out = ingress_endpoints(&record, &kubefed_resolver);
    assert_eq!(serde_json::to_value(&out.endpoints).unwrap(), expected);
    assert_eq!(out.problems, []);
}

/// `ingress_test.go`: NoClusters, SingleLBInSingleCluster, LBsInBothClusters, HostnameInLB,
/// MultipleHosts, UserConfiguredDNSRecordTTL.
#[test]
fn kubefeds_ingress_cases() {
    let host = "foo.bar.test";
    assert_ingress(ingress_record(&[host], 0, &[]), json!([]));
    let c1 = ("c1", json!([{"ip": LB1}]));
    let c2 = ("c2", json!([{"ip": LB2}]));
    assert_ingress(
        ingress_record(&[host], 0, std::slice::from_ref(&c1)),
        json!([ep(host, &[LB1], "A")]),
    );
    assert_ingress(
        ingress_record(&[host], 0, &[c1.clone(), c2.clone()]),
        json!([ep(host, &[LB1, LB2], "A")]),
    );
    assert_ingress(
        ingress_record(
            &[host],
            0,
            &[("c1", json!([{"hostname": ELB}])), c2.clone()],
        ),
        json!([ep(host, &[LB2, LB3], "A")]),
    );
    assert_ingress(
        ingress_record(&[host, "jane.goodall.test"], 0, &[c1.clone(), c2]),
        json!([
            ep(host, &[LB1, LB2], "A"),
            ep("jane.goodall.test", &[LB1, LB2], "A")
        ]),
    );
    let mut with_ttl = ep(host, &[LB1], "A");
    with_ttl["recordTTL"] = json!(300);
    assert_ingress(ingress_record(&[host], 300, &[c1]), json!([with_ttl]));
}

#[test]
fn dns_endpoints_are_named_by_kind_and_record() {
    assert_eq!(service_endpoint_name("nginx"), "service-nginx");
    assert_eq!(ingress_endpoint_name("nginx"), "ingress-nginx");
    assert_eq!(record_ttl(0), 180);
    assert_eq!(record_ttl(30), 30);
}
