//! FederatedTypeConfig.

use super::*;

pub(super) const FTC_NAME_ERROR_MSG: &str = "name must be 'TARGET_PLURAL_NAME(.TARGET_GROUP_NAME)'";
pub(super) const DOMAIN_WITH_AT_LEAST_ONE_DOT: &str = "should be a domain with at least one dot";

/// KubeFed's `ValidateFederatedTypeConfig` for a create or update of the main resource,
/// applied to the spec after `SetFederatedTypeConfigDefaults`: the name must be the target's
/// `plural[.group]`; every API resource needs a DNS-1123 group (may be empty for the target),
/// a DNS-1035 version, kind (lowercased) and plural; the federated and status types need a
/// group with at least one dot.
pub fn validate_federated_type_config(
    name: &str,
    spec: &FederatedTypeConfigSpec,
) -> Vec<FieldError> {
    let mut ftc = FederatedTypeConfig::new(name, spec.clone());
    ftc.set_defaults();
    let spec = &ftc.spec;
    let mut errors = Vec::new();

    let expected = spec.target_type.group_qualified_name();
    if expected != name {
        errors.push(FieldError::invalid(
            "metadata.name",
            name,
            &format!("{FTC_NAME_ERROR_MSG}, i.e. {}", go_quote(&expected)),
        ));
    }
    validate_api_resource(&spec.target_type, "spec.targetType", &mut errors);
    validate_federated_api_resource(&spec.federated_type, "spec.federatedType", &mut errors);
    if let Some(status_type) = &spec.status_type {
        validate_federated_api_resource(status_type, "spec.statusType", &mut errors);
    }
    errors
}

/// KubeFed's validation of the FTC status subresource: `observedGeneration` ≥ 0 (the enums are
/// enforced by the types).
pub fn validate_federated_type_config_status(
    status: &FederatedTypeConfigStatus,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if status.observed_generation < 0 {
        errors.push(FieldError::invalid_value(
            "status.observedGeneration",
            status.observed_generation,
            "must be greater than or equal to 0",
        ));
    }
    errors
}

/// [`validate_federated_type_config`] (or, for the `status` subresource,
/// [`validate_federated_type_config_status`]) over a raw FederatedTypeConfig object, with
/// wrong JSON types and unknown enum values reported at their paths.
pub fn validate_federated_type_config_value(
    object: &Value,
    status_subresource: bool,
) -> Vec<FieldError> {
    let mut shape_errors = Vec::new();
    if status_subresource {
        let status = conform_member::<FederatedTypeConfigStatus>(
            object,
            "status",
            FTC_STATUS,
            &mut shape_errors,
        );
        let typed = status
            .map(|status| validate_federated_type_config_status(&status))
            .unwrap_or_default();
        return merge(shape_errors, typed);
    }
    let mut metadata = present(object.get("metadata"))
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    conform(&mut metadata, METADATA, "metadata", &mut shape_errors);
    let name = metadata
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let spec =
        conform_member::<FederatedTypeConfigSpec>(object, "spec", FTC_SPEC, &mut shape_errors);
    let typed = spec
        .map(|spec| validate_federated_type_config(name, &spec))
        .unwrap_or_default();
    merge(shape_errors, typed)
}

pub(super) fn validate_federated_api_resource(
    resource: &ApiResource,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let group_path = child(path, "group");
    if resource.group.is_empty() {
        errors.push(FieldError::required(group_path, ""));
    } else if !resource.group.contains('.') {
        errors.push(FieldError::invalid(
            group_path,
            &resource.group,
            DOMAIN_WITH_AT_LEAST_ONE_DOT,
        ));
    }
    validate_api_resource(resource, path, errors);
}

pub(super) fn validate_api_resource(
    resource: &ApiResource,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    if !resource.group.is_empty() {
        let problems = is_dns1123_subdomain(&resource.group);
        if !problems.is_empty() {
            errors.push(FieldError::invalid(
                child(path, "group"),
                &resource.group,
                &problems.join(","),
            ));
        }
    }
    let dns1035_fields = [
        (
            "version",
            resource.version.as_str(),
            resource.version.clone(),
        ),
        ("kind", resource.kind.as_str(), resource.kind.to_lowercase()),
        (
            "pluralName",
            resource.plural_name.as_str(),
            resource.plural_name.clone(),
        ),
    ];
    for (name, value, checked) in dns1035_fields {
        if value.is_empty() {
            errors.push(FieldError::required(child(path, name), ""));
            continue;
        }
        let problems = is_dns1035_label(&checked);
        if !problems.is_empty() {
            errors.push(FieldError::invalid(
                child(path, name),
                value,
                &problems.join(","),
            ));
        }
    }
}
