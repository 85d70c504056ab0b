//! Federated objects (a hubfed addition; KubeFed validated them only by CRD schema).

use super::*;

pub(super) const OVERRIDE_OPS: &[&str] = &["", "add", "remove", "replace"];

/// Validates a raw `Federated<Kind>` object as the sync controller will read it: `spec` is an
/// object; `spec.template` an object; placement `clusters` a list of `{name}` with DNS-1123
/// names and `clusterSelector` a valid label selector; overrides a list of `{clusterName,
/// clusterOverrides}` with unique cluster names, each override an `add`, `remove` or `replace`
/// (empty = replace) of a unique JSON-pointer path that is not one of
/// [`FORBIDDEN_PATHS`], carrying a `value` unless it is a `remove`; `retainReplicas` a
/// boolean.
pub fn validate_federated_object(object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Some(spec) = present(object.get("spec")) else {
        return vec![FieldError::required("spec", "")];
    };
    let Some(spec) = spec.as_object() else {
        return vec![FieldError::wrong_type("spec", spec, "object")];
    };
    if let Some(template) = present(spec.get("template"))
        && !template.is_object()
    {
        errors.push(FieldError::wrong_type("spec.template", template, "object"));
    }
    if let Some(placement) = present(spec.get("placement")) {
        validate_placement(placement, "spec.placement", &mut errors);
    }
    if let Some(overrides) = present(spec.get("overrides")) {
        validate_overrides(overrides, "spec.overrides", &mut errors);
    }
    if let Some(retain) = present(spec.get("retainReplicas"))
        && !retain.is_boolean()
    {
        errors.push(FieldError::wrong_type(
            "spec.retainReplicas",
            retain,
            "boolean",
        ));
    }
    errors
}

/// Whether an update of a federated object from `old` to `new` needs
/// [`validate_federated_object`]'s judgement: it does unless the update leaves every part of
/// `spec` the validation looks into as it was — placement, overrides, `retainReplicas` and
/// any other member of `spec` — and the template, if present, is an object (the validation
/// asks nothing more of it; the CRD's schema asks the same). So a change of the template's
/// contents alone, the most common write to a federated object, is not judged again; nor are
/// changes of labels, annotations or finalizers. The webhook's `matchConditions`
/// ([`FEDERATED_VALIDATION_MATCH_CONDITIONS`]) spare the API server the call in every such
/// case (and may call it in a few more: this function decides then).
pub fn federated_update_needs_validation(old: &Value, new: &Value) -> bool {
    let (old_spec, new_spec) = (old.get("spec"), new.get("spec"));
    let (Some(old_map), Some(new_map)) = (
        old_spec.and_then(Value::as_object),
        new_spec.and_then(Value::as_object),
    ) else {
        return old_spec != new_spec;
    };
    let template_fits = present(new_map.get("template")).is_none_or(Value::is_object);
    let judged = |map: &Map<String, Value>| map.keys().filter(|k| *k != "template").count();
    let judged_equal = judged(old_map) == judged(new_map)
        && new_map
            .iter()
            .filter(|(k, _)| *k != "template")
            .all(|(k, v)| old_map.get(k) == Some(v));
    !(template_fits && judged_equal)
}

/// The `matchConditions` (name, CEL expression) under which the API server calls the
/// validating webhook of federated objects, as the chart registers it: a create, or an update
/// [`federated_update_needs_validation`] may judge, of an object not being deleted. Every
/// update that function lets pass unjudged — label, annotation and finalizer changes, a
/// deletion's, a change of the template's contents alone — then neither waits for the webhook
/// nor fails while no replica answers. They are written so that no evaluation errs (with
/// `failurePolicy: Fail` an error refuses the write without calling the webhook): CEL's `||`
/// is true when either side is, whatever the other's error.
pub const FEDERATED_VALIDATION_MATCH_CONDITIONS: [(&str, &str); 2] = [
    (
        "not-being-deleted",
        "!has(object.metadata.deletionTimestamp)",
    ),
    (
        "judged-spec-changed",
        "oldObject == null || has(object.spec) != has(oldObject.spec) || (has(object.spec) && \
         (type(object.spec) != map || type(oldObject.spec) != map || \
         (has(object.spec.template) && type(object.spec.template) != map) || \
         object.spec.exists(k, k != 'template' && (!(k in oldObject.spec) || object.spec[k] != oldObject.spec[k])) || \
         oldObject.spec.exists(k, k != 'template' && !(k in object.spec))))",
    ),
];

/// An object at `path`, or an error.
pub(super) fn expect_object<'a>(
    value: &'a Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) -> Option<&'a Map<String, Value>> {
    let object = value.as_object();
    if object.is_none() {
        errors.push(FieldError::wrong_type(path, value, "object"));
    }
    object
}

/// An array at `path`, or an error.
pub(super) fn expect_array<'a>(
    value: &'a Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) -> Option<&'a [Value]> {
    let array = value.as_array().map(Vec::as_slice);
    if array.is_none() {
        errors.push(FieldError::wrong_type(path, value, "array"));
    }
    array
}

/// A required non-empty string member, or an error.
pub(super) fn required_string<'a>(
    object: &'a Map<String, Value>,
    name: &str,
    path: &str,
    errors: &mut Vec<FieldError>,
) -> Option<&'a str> {
    match present(object.get(name)) {
        None => {
            errors.push(FieldError::required(path, ""));
            None
        }
        Some(Value::String(s)) if s.is_empty() => {
            errors.push(FieldError::required(path, ""));
            None
        }
        Some(Value::String(s)) => Some(s),
        Some(other) => {
            errors.push(FieldError::wrong_type(path, other, "string"));
            None
        }
    }
}

pub(super) fn validate_placement(placement: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(placement) = expect_object(placement, path, errors) else {
        return;
    };
    if let Some(clusters) = present(placement.get("clusters")) {
        let clusters_path = child(path, "clusters");
        for (i, cluster) in expect_array(clusters, &clusters_path, errors)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let cluster_path = index(&clusters_path, i);
            let Some(cluster) = expect_object(cluster, &cluster_path, errors) else {
                continue;
            };
            let name_path = child(&cluster_path, "name");
            if let Some(name) = required_string(cluster, "name", &name_path, errors) {
                let problems = is_dns1123_subdomain(name);
                if !problems.is_empty() {
                    errors.push(FieldError::invalid(name_path, name, &problems.join(",")));
                }
            }
        }
    }
    if let Some(selector) = present(placement.get("clusterSelector")) {
        validate_label_selector(selector, &child(path, "clusterSelector"), errors);
    }
}

/// Shape of a `metav1.LabelSelector`, then each requirement on its own through
/// [`Selector::new`] so that its error names the entry.
pub(super) fn validate_label_selector(selector: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(selector) = expect_object(selector, path, errors) else {
        return;
    };
    if let Some(labels) = present(selector.get("matchLabels")) {
        let labels_path = child(path, "matchLabels");
        if let Some(labels) = expect_object(labels, &labels_path, errors) {
            for (key, value) in labels {
                let entry_path = format!("{labels_path}[{key}]");
                let Some(value) = value.as_str() else {
                    errors.push(FieldError::wrong_type(entry_path, value, "string"));
                    continue;
                };
                let single = LabelSelector {
                    match_labels: Some(BTreeMap::from([(key.clone(), value.to_owned())])),
                    match_expressions: None,
                };
                check_selector(&single, &entry_path, errors);
            }
        }
    }
    if let Some(expressions) = present(selector.get("matchExpressions")) {
        let expressions_path = child(path, "matchExpressions");
        for (i, expression) in expect_array(expressions, &expressions_path, errors)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let expression_path = index(&expressions_path, i);
            let Some(members) = expect_object(expression, &expression_path, errors) else {
                continue;
            };
            let before = errors.len();
            required_string(members, "key", &child(&expression_path, "key"), errors);
            required_string(
                members,
                "operator",
                &child(&expression_path, "operator"),
                errors,
            );
            if let Some(values) = present(members.get("values")) {
                let values_path = child(&expression_path, "values");
                for (j, value) in expect_array(values, &values_path, errors)
                    .unwrap_or_default()
                    .iter()
                    .enumerate()
                {
                    if !value.is_string() {
                        errors.push(FieldError::wrong_type(
                            index(&values_path, j),
                            value,
                            "string",
                        ));
                    }
                }
            }
            if errors.len() > before {
                continue;
            }
            match serde_json::from_value(json!({"matchExpressions": [expression]})) {
                Ok(single) => check_selector(&single, &expression_path, errors),
                Err(error) => errors.push(FieldError::invalid_detail(
                    expression_path,
                    &error.to_string(),
                )),
            }
        }
    }
}

pub(super) fn check_selector(selector: &LabelSelector, path: &str, errors: &mut Vec<FieldError>) {
    match Selector::new(Some(selector)) {
        Ok(_) => {}
        Err(CoreError::InvalidSelector(reason)) => {
            errors.push(FieldError::invalid_detail(path, &reason));
        }
        Err(other) => errors.push(FieldError::invalid_detail(path, &other.to_string())),
    }
}

pub(super) fn validate_overrides(overrides: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let mut seen_clusters = HashSet::new();
    for (i, entry) in expect_array(overrides, path, errors)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let entry_path = index(path, i);
        let Some(entry) = expect_object(entry, &entry_path, errors) else {
            continue;
        };
        let name_path = child(&entry_path, "clusterName");
        if let Some(name) = required_string(entry, "clusterName", &name_path, errors)
            && !seen_clusters.insert(name)
        {
            errors.push(FieldError::duplicate(name_path, name));
        }
        if let Some(items) = present(entry.get("clusterOverrides")) {
            let items_path = child(&entry_path, "clusterOverrides");
            let items = expect_array(items, &items_path, errors).unwrap_or_default();
            let mut seen_paths = HashSet::new();
            for (j, item) in items.iter().enumerate() {
                validate_override(item, &index(&items_path, j), &mut seen_paths, errors);
            }
        }
    }
}

pub(super) fn validate_override<'a>(
    item: &'a Value,
    path: &str,
    seen_paths: &mut HashSet<&'a str>,
    errors: &mut Vec<FieldError>,
) {
    let Some(item) = expect_object(item, path, errors) else {
        return;
    };
    let op_path = child(path, "op");
    let op = match present(item.get("op")) {
        None => Some("replace"),
        Some(Value::String(op)) if op.is_empty() => Some("replace"),
        Some(Value::String(op)) if OVERRIDE_OPS.contains(&op.as_str()) => Some(op.as_str()),
        Some(Value::String(op)) => {
            errors.push(FieldError::not_supported(op_path, op, OVERRIDE_OPS));
            None
        }
        Some(other) => {
            errors.push(FieldError::wrong_type(op_path, other, "string"));
            None
        }
    };

    let pointer_path = child(path, "path");
    // Required, but `""` is a path: the whole object (KubeFed's CRD only asks for presence).
    let pointer = match present(item.get("path")) {
        None => {
            errors.push(FieldError::required(&pointer_path, ""));
            None
        }
        Some(Value::String(pointer)) => Some(pointer.as_str()),
        Some(other) => {
            errors.push(FieldError::wrong_type(&pointer_path, other, "string"));
            None
        }
    };
    if let Some(pointer) = pointer {
        if FORBIDDEN_PATHS.contains(&pointer) {
            errors.push(FieldError::forbidden(
                pointer_path.clone(),
                &format!("{} cannot be overridden", go_quote(pointer)),
            ));
        } else if !seen_paths.insert(pointer) {
            errors.push(FieldError::duplicate(pointer_path.clone(), pointer));
        } else if let Some(op) = op
            && let Some(problem) = never_applies(op, pointer, present(item.get("value")))
        {
            errors.push(FieldError::invalid(pointer_path.clone(), pointer, problem));
        }
    }
}

/// What makes an override fail in KubeFed whatever the template (see `crate::gopatch`): a
/// path without `/` never applies, and `replace` of the whole object (`""`) without a value
/// crashed KubeFed. Everything else depends on the template and is reported per cluster at
/// apply time (`ApplyOverridesFailed`), as KubeFed did.
pub(super) fn never_applies(
    op: &str,
    pointer: &str,
    value: Option<&Value>,
) -> Option<&'static str> {
    match (op, pointer) {
        ("replace", "") if value.is_none() => {
            Some("replacing the whole object (empty path) needs a value")
        }
        ("replace", "") => None,
        (_, p) if !p.contains('/') => {
            Some("must be a JSON pointer starting with \"/\" (a path without \"/\" never applies)")
        }
        _ => None,
    }
}
