//! Domains, ServiceDNSRecords and IngressDNSRecords as the webhook receives them.

use super::*;

fn domain(domain: Value) -> Value {
    json!({"apiVersion": "multiclusterdns.kubefed.io/v1alpha1", "kind": "Domain", "metadata": {"name": "zone", "namespace": "kube-federation-system"}, "domain": domain})
}

fn record(kind: &str, spec: Value) -> Value {
    json!({"apiVersion": "multiclusterdns.kubefed.io/v1alpha1", "kind": kind, "metadata": {"name": "web", "namespace": "ns"}, "spec": spec})
}

fn service_errors(spec: Value) -> Vec<String> {
    strings(&validate_service_dns_record_value(&record(
        "ServiceDNSRecord",
        spec,
    )))
}

fn ingress_errors(spec: Value) -> Vec<String> {
    strings(&validate_ingress_dns_record_value(&record(
        "IngressDNSRecord",
        spec,
    )))
}

#[test]
fn kubefed_manifests_validate() {
    let object = with_member(
        domain(json!("example.com")),
        "",
        "nameServer",
        json!("ns1.example.com"),
    );
    assert_errors(&validate_domain_value(&object), &[]);
    assert_eq!(
        service_errors(
            json!({"domainRef": "zone", "recordTTL": 300, "dnsPrefix": "shop", "externalName": "shop.example.com", "allowServiceWithoutEndpoints": true})
        ),
        Vec::<String>::new()
    );
    assert_eq!(
        service_errors(json!({"domainRef": "zone"})),
        Vec::<String>::new()
    );
    assert_eq!(
        ingress_errors(
            json!({"hosts": ["www.example.com", "*.apps.example.com"], "recordTTL": 60})
        ),
        Vec::<String>::new()
    );
    assert_eq!(ingress_errors(json!({})), Vec::<String>::new());
}

#[test]
fn a_domain_needs_a_dns_name() {
    for missing in [
        without_member(domain(json!("")), "", "domain"),
        domain(json!("")),
    ] {
        assert_errors(
            &validate_domain_value(&missing),
            &[
                "domain: Required value: the DNS zone the records are written under, e.g. example.com",
            ],
        );
    }
    let errors = strings(&validate_domain_value(&domain(json!("Example_com"))));
    assert!(
        errors.len() == 1 && errors[0].starts_with("domain: Invalid value: \"Example_com\": "),
        "{errors:?}"
    );
    assert_errors(
        &validate_domain_value(&domain(json!(7))),
        &["domain: Invalid value: must be a string, not number"],
    );
}

#[test]
fn a_service_record_names_a_domain_under_a_dns_label() {
    assert_eq!(
        service_errors(json!({})),
        ["spec.domainRef: Required value: the name of a Domain in the KubeFed namespace"]
    );
    assert_eq!(
        strings(&validate_service_dns_record_value(&without_member(
            record("ServiceDNSRecord", json!({})),
            "",
            "spec"
        ))),
        ["spec.domainRef: Required value: the name of a Domain in the KubeFed namespace"]
    );
    let errors = service_errors(json!({"domainRef": "zone", "dnsPrefix": "shop.eu"}));
    assert!(
        errors.len() == 1
            && errors[0]
                .starts_with("spec.dnsPrefix: Invalid value: \"shop.eu\": must be one DNS label"),
        "{errors:?}"
    );
    assert_eq!(
        service_errors(json!({"domainRef": "zone", "recordTTL": -1})),
        ["spec.recordTTL: Invalid value: -1: must be 0 (the default of 180 seconds) or more"]
    );
    let errors = service_errors(json!({"domainRef": "zone", "externalName": "not a name"}));
    assert!(
        errors
            .iter()
            .all(|e| e.starts_with("spec.externalName: Invalid value"))
            && !errors.is_empty(),
        "{errors:?}"
    );
    let shape = service_errors(json!({"domainRef": "zone", "recordTTL": "long"}));
    assert!(
        shape.len() == 1 && shape[0].starts_with("spec: Invalid value: "),
        "{shape:?}"
    );
}

#[test]
fn an_ingress_record_lists_dns_names() {
    assert_eq!(
        ingress_errors(json!({"hosts": ["www.example.com", ""], "recordTTL": -5})),
        [
            "spec.hosts[1]: Required value: a host name",
            "spec.recordTTL: Invalid value: -5: must be 0 (the default of 180 seconds) or more",
        ]
    );
    assert_eq!(
        ingress_errors(json!({"hosts": ["web_1.example.com"]})),
        [
            "spec.hosts[0]: Invalid value: \"web_1.example.com\": must be a DNS name, e.g. www.example.com or *.example.com"
        ]
    );
}
