use super::*;
use serde_json::{Value, json};

fn round_trip<T: serde::de::DeserializeOwned + Serialize>(wire: &Value) -> T {
    let object: T = serde_json::from_value(wire.clone()).unwrap();
    assert_eq!(&serde_json::to_value(&object).unwrap(), wire);
    object
}

/// KubeFed's `docs/servicedns-with-externaldns.md` Domain: no spec, top-level fields.
#[test]
fn kubefeds_example_domain_round_trips() {
    let domain: Domain = round_trip(&json!({
        "apiVersion": "multiclusterdns.kubefed.io/v1alpha1",
        "kind": "Domain",
        "metadata": {"name": "test-domain", "namespace": "kube-federation-system"},
        "domain": "your.domain.name",
        "nameServer": "ns1.your.domain.name",
    }));
    assert_eq!(domain.domain, "your.domain.name");
}

/// Go writes `domain` even when empty; it reads back as empty, for validation to refuse.
#[test]
fn a_domain_without_domain_reads_and_writes_it_empty() {
    let domain: Domain = serde_json::from_value(json!({
        "apiVersion": "multiclusterdns.kubefed.io/v1alpha1",
        "kind": "Domain",
        "metadata": {"name": "d"},
    }))
    .unwrap();
    assert_eq!(serde_json::to_value(&domain).unwrap()["domain"], "");
}

/// A record as KubeFed's controllers leave it: every spec field, a status with an empty load
/// balancer for an offline member (Go writes `loadBalancer: {}`), and hubfed's condition.
#[test]
fn a_service_dns_record_with_every_field_round_trips() {
    let record: ServiceDnsRecord = round_trip(&json!({
        "apiVersion": "multiclusterdns.kubefed.io/v1alpha1",
        "kind": "ServiceDNSRecord",
        "metadata": {"name": "nginx", "namespace": "test"},
        "spec": {
            "domainRef": "galactic",
            "recordTTL": 300,
            "dnsPrefix": "foo",
            "externalName": "web",
            "allowServiceWithoutEndpoints": true,
        },
        "status": {
            "domain": "example.com",
            "dns": [
                {"cluster": "c1", "region": "us", "zones": ["us1", "us2"],
                    "loadBalancer": {"ingress": [{"ip": "10.20.30.1"},
                        {"hostname": "a9.elb.example"}]}},
                {"cluster": "c2", "region": "eu", "zones": ["eu1"], "loadBalancer": {}},
            ],
            "conditions": [{"type": "RecordsComplete", "status": "False",
                "reason": "ClusterWithoutRegion", "message": "cluster c3 has no region",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        },
    }));
    let status = record.status.unwrap();
    assert_eq!(status.dns[0].zones, ["us1", "us2"]);
    assert_eq!(status.dns[1].load_balancer, LoadBalancerStatus::default());
}

/// Go always writes `spec` and `status`; a record read without them writes an empty spec
/// with its required `domainRef`.
#[test]
fn a_minimal_record_writes_an_empty_domain_ref() {
    let record: ServiceDnsRecord = serde_json::from_value(json!({
        "apiVersion": "multiclusterdns.kubefed.io/v1alpha1",
        "kind": "ServiceDNSRecord",
        "metadata": {"name": "nginx"},
    }))
    .unwrap();
    assert_eq!(
        serde_json::to_value(&record).unwrap()["spec"],
        json!({"domainRef": ""})
    );
}

#[test]
fn ingress_record_and_dns_endpoint_round_trip() {
    round_trip::<IngressDnsRecord>(&json!({
        "apiVersion": "multiclusterdns.kubefed.io/v1alpha1",
        "kind": "IngressDNSRecord",
        "metadata": {"name": "web", "namespace": "test"},
        "spec": {"hosts": ["foo.bar.test", "jane.goodall.test"], "recordTTL": 60},
        "status": {"dns": [{"cluster": "c1",
            "loadBalancer": {"ingress": [{"ip": "10.20.30.1"}]}}]},
    }));
    let endpoint: DnsEndpoint = round_trip(&json!({
        "apiVersion": "multiclusterdns.kubefed.io/v1alpha1",
        "kind": "DNSEndpoint",
        "metadata": {"name": "service-nginx", "namespace": "test"},
        "spec": {"endpoints": [
            {"dnsName": "nginx.test.galactic.svc.example.com", "recordTTL": 180,
                "recordType": "A", "targets": ["10.20.30.1"]},
            {"dnsName": "nginx.test.galactic.svc.eu.example.com", "recordTTL": 180,
                "recordType": "CNAME", "targets": ["nginx.test.galactic.svc.example.com"],
                "labels": {"serviceName": "nginx"}},
        ]},
        "status": {"observedGeneration": 3},
    }));
    assert_eq!(endpoint.spec.endpoints[1].record_type, RECORD_TYPE_CNAME);
}

#[test]
fn crds_are_kubefeds_four_with_its_subresources() {
    let crds = crds().unwrap();
    let summary: Vec<(String, bool)> = crds
        .iter()
        .map(|crd| {
            let version = &crd.spec.versions[0];
            assert_eq!((version.name.as_str(), version.storage), (VERSION, true));
            assert_eq!(version.additional_printer_columns, None);
            (
                crd.metadata.name.clone().unwrap(),
                version.subresources.is_some(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("dnsendpoints.multiclusterdns.kubefed.io".to_owned(), true),
            ("domains.multiclusterdns.kubefed.io".to_owned(), false),
            (
                "ingressdnsrecords.multiclusterdns.kubefed.io".to_owned(),
                true
            ),
            (
                "servicednsrecords.multiclusterdns.kubefed.io".to_owned(),
                true
            ),
        ]
    );
    let schema = |i: usize| {
        serde_json::to_value(&crds[i].spec.versions[0].schema).unwrap()["openAPIV3Schema"].clone()
    };
    assert_eq!(schema(1)["required"], json!(["domain"]));
    assert_eq!(schema(1)["properties"]["nameServer"]["type"], "string");
    let service = schema(3);
    assert_eq!(service.get("required"), None, "spec is optional");
    assert_eq!(
        service["properties"]["spec"]["required"],
        json!(["domainRef"])
    );
    assert_eq!(
        service["properties"]["spec"]["properties"]["recordTTL"],
        json!({"type": "integer", "format": "int64",
            "description": "The records' TTL in seconds; unset or 0: 180."})
    );
    let load_balancer = &service["properties"]["status"]["properties"]["dns"]["items"]["properties"]
        ["loadBalancer"];
    assert_eq!(load_balancer.get("default"), None);
    assert!(!service.to_string().contains("nullable"));
}
