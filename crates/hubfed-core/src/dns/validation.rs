//! The admission rules of Domains and DNS records, as apimachinery field errors.
//!
//! KubeFed had no webhook for these kinds: a Domain without `domain` or a `dnsPrefix` with a
//! dot wrote broken names. Each rule here is what a record needs to be named.

use hubfed_api::multiclusterdns::{Domain, IngressDnsRecordSpec, ServiceDnsRecordSpec};

use crate::validation::{FieldError, is_dns1123_subdomain};

/// Longest DNS label (RFC 1035).
const DNS_LABEL_MAX_LENGTH: usize = 63;

/// The problems of a Domain: `domain` must be set and a DNS name.
pub fn validate_domain(domain: &Domain) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if domain.domain.is_empty() {
        errors.push(FieldError::required(
            "domain",
            "the DNS zone the records are written under, e.g. example.com",
        ));
    } else {
        subdomain(&mut errors, "domain", &domain.domain);
    }
    errors
}

/// The problems of a ServiceDNSRecord's spec: `domainRef` set and a Domain's name,
/// `dnsPrefix` a DNS label, `externalName` a DNS name, `recordTTL` not negative.
pub fn validate_service_dns_record(spec: &ServiceDnsRecordSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if spec.domain_ref.is_empty() {
        errors.push(FieldError::required(
            "spec.domainRef",
            "the name of a Domain in the KubeFed namespace",
        ));
    } else {
        subdomain(&mut errors, "spec.domainRef", &spec.domain_ref);
    }
    if !spec.dns_prefix.is_empty() && !is_dns_label(&spec.dns_prefix) {
        errors.push(FieldError::invalid(
            "spec.dnsPrefix",
            &spec.dns_prefix,
            &format!(
                "must be one DNS label (it names <dnsPrefix>.<domain>): at most \
                 {DNS_LABEL_MAX_LENGTH} lower case alphanumeric characters or '-', starting and \
                 ending with an alphanumeric character"
            ),
        ));
    }
    if !spec.external_name.is_empty() {
        subdomain(&mut errors, "spec.externalName", &spec.external_name);
    }
    ttl(&mut errors, spec.record_ttl);
    errors
}

/// The problems of an IngressDNSRecord's spec: each host a DNS name (a leading `*.` allowed),
/// `recordTTL` not negative.
pub fn validate_ingress_dns_record(spec: &IngressDnsRecordSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (i, host) in spec.hosts.iter().enumerate() {
        let path = format!("spec.hosts[{i}]");
        if host.is_empty() {
            errors.push(FieldError::required(path, "a host name"));
        } else {
            let name = host.strip_prefix("*.").unwrap_or(host);
            if !is_dns1123_subdomain(name).is_empty() {
                errors.push(FieldError::invalid(
                    path,
                    host,
                    "must be a DNS name, e.g. www.example.com or *.example.com",
                ));
            }
        }
    }
    ttl(&mut errors, spec.record_ttl);
    errors
}

fn subdomain(errors: &mut Vec<FieldError>, path: &str, value: &str) {
    for problem in is_dns1123_subdomain(value) {
        errors.push(FieldError::invalid(path, value, &problem));
    }
}

fn ttl(errors: &mut Vec<FieldError>, record_ttl: i64) {
    if record_ttl < 0 {
        errors.push(FieldError::invalid_value(
            "spec.recordTTL",
            record_ttl,
            "must be 0 (the default of 180 seconds) or more",
        ));
    }
}

/// An RFC 1123 label: 1 to 63 lower case alphanumeric characters or '-', starting and ending
/// with an alphanumeric character.
fn is_dns_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    bytes.len() <= DNS_LABEL_MAX_LENGTH
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes.iter().all(|b| alnum(b) || *b == b'-')
}
