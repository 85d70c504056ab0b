//! Multi-cluster DNS (`multiclusterdns.kubefed.io/v1alpha1`): what admission refuses of a
//! Domain, a ServiceDNSRecord and an IngressDNSRecord, so that a record that could never be
//! named is rejected with a field path at `kubectl apply`.
//!
//! The rules are [`crate::dns`]'s; these entry points take the raw admission object. A Domain
//! the typed struct cannot read is reported at the field that broke it. A `domainRef` naming no
//! Domain is not refused here: the Domain may come later, and the DNS controller reports it on
//! the record's status.

use hubfed_api::multiclusterdns::{Domain, IngressDnsRecordSpec, ServiceDnsRecordSpec};

use super::*;
use crate::dns::{validate_domain, validate_ingress_dns_record, validate_service_dns_record};

/// [`validate_domain`] over a raw admission object.
pub fn validate_domain_value(object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for field in ["domain", "nameServer"] {
        if let Some(value) = object.get(field)
            && !value.is_string()
            && !value.is_null()
        {
            errors.push(FieldError::invalid_detail(
                field,
                &format!("must be a string, not {}", json_type_name(value)),
            ));
        }
    }
    if !errors.is_empty() {
        return errors;
    }
    match serde_json::from_value::<Domain>(object.clone()) {
        Ok(domain) => validate_domain(&domain),
        Err(e) => vec![FieldError::invalid_detail("", &e.to_string())],
    }
}

/// [`validate_service_dns_record`] over a raw admission object. KubeFed's `spec` is
/// optional, but a record without one names no Domain.
pub fn validate_service_dns_record_value(object: &Value) -> Vec<FieldError> {
    let spec = match object.get("spec") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(spec) => spec.clone(),
    };
    match serde_json::from_value::<ServiceDnsRecordSpec>(spec) {
        Ok(spec) => validate_service_dns_record(&spec),
        Err(e) => vec![FieldError::invalid_detail("spec", &e.to_string())],
    }
}

/// [`validate_ingress_dns_record`] over a raw admission object.
pub fn validate_ingress_dns_record_value(object: &Value) -> Vec<FieldError> {
    let spec = match object.get("spec") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(spec) => spec.clone(),
    };
    match serde_json::from_value::<IngressDnsRecordSpec>(spec) {
        Ok(spec) => validate_ingress_dns_record(&spec),
        Err(e) => vec![FieldError::invalid_detail("spec", &e.to_string())],
    }
}
