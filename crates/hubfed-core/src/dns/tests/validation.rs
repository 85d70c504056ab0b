//! The admission rules of Domains and DNS records.

use hubfed_api::multiclusterdns::{Domain, IngressDnsRecordSpec, ServiceDnsRecordSpec};

use super::*;

fn messages(errors: Vec<crate::validation::FieldError>) -> Vec<String> {
    errors.into_iter().map(|e| e.to_string()).collect()
}

#[test]
fn a_domain_needs_a_dns_name() {
    let domain = |name: &str| Domain {
        domain: name.to_owned(),
        ..Domain::default()
    };
    assert_eq!(
        messages(validate_domain(&domain("example.com"))),
        Vec::<String>::new()
    );
    assert_eq!(
        messages(validate_domain(&domain(""))),
        ["domain: Required value: the DNS zone the records are written under, e.g. example.com"]
    );
    let bad = messages(validate_domain(&domain("Example..com")));
    assert_eq!(bad.len(), 1);
    assert!(
        bad[0]
            .starts_with("domain: Invalid value: \"Example..com\": a lowercase RFC 1123 subdomain"),
        "{bad:?}"
    );
}

#[test]
fn a_service_record_needs_a_domain_ref_and_a_label_prefix() {
    let spec = |domain_ref: &str, dns_prefix: &str| ServiceDnsRecordSpec {
        domain_ref: domain_ref.to_owned(),
        dns_prefix: dns_prefix.to_owned(),
        ..ServiceDnsRecordSpec::default()
    };
    assert!(validate_service_dns_record(&spec("galactic", "www")).is_empty());
    assert_eq!(
        messages(validate_service_dns_record(&spec("", ""))),
        ["spec.domainRef: Required value: the name of a Domain in the KubeFed namespace"]
    );
    for prefix in ["www.app", "-www", "WWW", &"a".repeat(64)] {
        let errors = messages(validate_service_dns_record(&spec("galactic", prefix)));
        assert_eq!(errors.len(), 1, "{prefix}: {errors:?}");
        assert!(errors[0].starts_with(&format!(
            "spec.dnsPrefix: Invalid value: \"{prefix}\": must be one DNS label"
        )));
    }
    let mut negative = spec("galactic", "");
    negative.record_ttl = -1;
    negative.external_name = "Web_1".to_owned();
    let errors = messages(validate_service_dns_record(&negative));
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].starts_with("spec.externalName: Invalid value: \"Web_1\""));
    assert_eq!(
        errors[1],
        "spec.recordTTL: Invalid value: -1: must be 0 (the default of 180 seconds) or more"
    );
}

#[test]
fn an_ingress_record_needs_host_names() {
    let spec = IngressDnsRecordSpec {
        hosts: vec!["*.example.com".to_owned(), String::new(), "a b".to_owned()],
        record_ttl: 0,
    };
    assert_eq!(
        messages(validate_ingress_dns_record(&spec)),
        [
            "spec.hosts[1]: Required value: a host name",
            "spec.hosts[2]: Invalid value: \"a b\": must be a DNS name, e.g. www.example.com or *.example.com",
        ]
    );
}
