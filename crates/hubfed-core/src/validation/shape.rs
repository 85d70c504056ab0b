//! Shape checks of raw admission objects: wrong JSON types and unknown enum values reported
//! with their field path before the typed rules run.

use super::*;

#[derive(Clone, Copy)]
pub(super) enum Shape {
    String,
    /// A string from a closed set; `""` counts as missing.
    Enum(&'static [&'static str]),
    Int,
    /// An RFC 3339 `metav1.Time`.
    Time,
    /// Base64 bytes.
    Bytes,
    List(&'static Shape),
    /// An object; members not listed are left alone.
    Object(&'static [Field]),
}

#[derive(Clone, Copy)]
pub(super) enum Presence {
    /// May be absent.
    Optional,
    /// Filled in silently when absent (Go would see the zero value); the typed rules report it.
    Fill,
    /// `Required value` when absent.
    Required,
}

#[derive(Clone, Copy)]
pub(super) struct Field {
    name: &'static str,
    shape: Shape,
    presence: Presence,
}

pub(super) const fn field(name: &'static str, shape: Shape, presence: Presence) -> Field {
    Field {
        name,
        shape,
        presence,
    }
}

pub(super) const SCOPES: &[&str] = &["Cluster", "Namespaced"];
pub(super) const ENABLED_DISABLED: &[&str] = &["Enabled", "Disabled"];
pub(super) const CONTROLLER_STATUSES: &[&str] = &["Running", "NotRunning"];
pub(super) const RESOURCE_LOCKS: &[&str] = &["configmaps", "endpoints"];
pub(super) const TLS_VALIDATIONS: &[&str] = &["*", "SubjectName", "ValidityPeriod"];
/// A timestamp that deserialises, put in place of a missing or broken one.
pub(super) const PLACEHOLDER_TIME: &str = "1970-01-01T00:00:00Z";

pub(super) const API_RESOURCE: Shape = Shape::Object(&[
    field("group", Shape::String, Presence::Optional),
    field("version", Shape::String, Presence::Fill),
    field("kind", Shape::String, Presence::Fill),
    field("pluralName", Shape::String, Presence::Fill),
    field("scope", Shape::Enum(SCOPES), Presence::Required),
]);

pub(super) const METADATA: Shape = Shape::Object(&[field("name", Shape::String, Presence::Fill)]);

pub(super) const FTC_SPEC: Shape = Shape::Object(&[
    field("targetType", API_RESOURCE, Presence::Fill),
    field(
        "propagation",
        Shape::Enum(ENABLED_DISABLED),
        Presence::Required,
    ),
    field("federatedType", API_RESOURCE, Presence::Fill),
    field("statusType", API_RESOURCE, Presence::Optional),
    field(
        "statusCollection",
        Shape::Enum(ENABLED_DISABLED),
        Presence::Optional,
    ),
]);

pub(super) const FTC_STATUS: Shape = Shape::Object(&[
    field("observedGeneration", Shape::Int, Presence::Fill),
    field(
        "propagationController",
        Shape::Enum(CONTROLLER_STATUSES),
        Presence::Required,
    ),
    field(
        "statusController",
        Shape::Enum(CONTROLLER_STATUSES),
        Presence::Optional,
    ),
]);

pub(super) const CLUSTER_SPEC: Shape = Shape::Object(&[
    field("apiEndpoint", Shape::String, Presence::Fill),
    field("caBundle", Shape::Bytes, Presence::Optional),
    field(
        "secretRef",
        Shape::Object(&[field("name", Shape::String, Presence::Fill)]),
        Presence::Fill,
    ),
    field(
        "disabledTLSValidations",
        Shape::List(&Shape::Enum(TLS_VALIDATIONS)),
        Presence::Optional,
    ),
    field("proxyURL", Shape::String, Presence::Optional),
]);

pub(super) const CLUSTER_CONDITION: Shape = Shape::Object(&[
    field("type", Shape::String, Presence::Fill),
    field("status", Shape::String, Presence::Fill),
    field("lastProbeTime", Shape::Time, Presence::Required),
    field("lastTransitionTime", Shape::Time, Presence::Optional),
    field("reason", Shape::String, Presence::Optional),
    field("message", Shape::String, Presence::Optional),
]);

pub(super) const CLUSTER_STATUS: Shape = Shape::Object(&[
    field(
        "conditions",
        Shape::List(&CLUSTER_CONDITION),
        Presence::Fill,
    ),
    field("kubernetesVersion", Shape::String, Presence::Optional),
    field("zones", Shape::List(&Shape::String), Presence::Optional),
    field("region", Shape::String, Presence::Optional),
]);

pub(super) const KUBEFED_CONFIG_SPEC: Shape = Shape::Object(&[
    field("scope", Shape::Enum(SCOPES), Presence::Required),
    field(
        "controllerDuration",
        Shape::Object(&[
            field("availableDelay", Shape::String, Presence::Optional),
            field("unavailableDelay", Shape::String, Presence::Optional),
            field("cacheSyncTimeout", Shape::String, Presence::Optional),
        ]),
        Presence::Optional,
    ),
    field(
        "leaderElect",
        Shape::Object(&[
            field("leaseDuration", Shape::String, Presence::Optional),
            field("renewDeadline", Shape::String, Presence::Optional),
            field("retryPeriod", Shape::String, Presence::Optional),
            field(
                "resourceLock",
                Shape::Enum(RESOURCE_LOCKS),
                Presence::Optional,
            ),
        ]),
        Presence::Optional,
    ),
    field(
        "featureGates",
        Shape::List(&Shape::Object(&[
            field("name", Shape::String, Presence::Fill),
            field(
                "configuration",
                Shape::Enum(ENABLED_DISABLED),
                Presence::Required,
            ),
        ])),
        Presence::Optional,
    ),
    field(
        "clusterHealthCheck",
        Shape::Object(&[
            field("period", Shape::String, Presence::Optional),
            field("failureThreshold", Shape::Int, Presence::Optional),
            field("successThreshold", Shape::Int, Presence::Optional),
            field("timeout", Shape::String, Presence::Optional),
        ]),
        Presence::Optional,
    ),
    field(
        "syncController",
        Shape::Object(&[
            field("maxConcurrentReconciles", Shape::Int, Presence::Optional),
            field(
                "adoptResources",
                Shape::Enum(ENABLED_DISABLED),
                Presence::Optional,
            ),
        ]),
        Presence::Optional,
    ),
    field(
        "statusController",
        Shape::Object(&[field(
            "maxConcurrentReconciles",
            Shape::Int,
            Presence::Optional,
        )]),
        Presence::Optional,
    ),
]);

/// The value to put in place of a missing or broken one so that deserialisation succeeds;
/// objects start empty and are then filled by [`conform`].
pub(super) fn placeholder(shape: Shape) -> Value {
    match shape {
        Shape::String | Shape::Bytes => Value::String(String::new()),
        Shape::Enum(allowed) => Value::String(allowed.first().copied().unwrap_or_default().into()),
        Shape::Int => json!(0),
        Shape::Time => Value::String(PLACEHOLDER_TIME.to_owned()),
        Shape::List(_) => Value::Array(Vec::new()),
        Shape::Object(_) => Value::Object(Map::new()),
    }
}

/// Checks `value` against `shape`, reporting problems at their paths and repairing them with
/// placeholders, so that the result deserialises into the typed struct.
pub(super) fn conform(value: &mut Value, shape: Shape, path: &str, errors: &mut Vec<FieldError>) {
    match shape {
        Shape::List(item) => match value.as_array_mut() {
            Some(items) => {
                for (i, element) in items.iter_mut().enumerate() {
                    conform(element, *item, &index(path, i), errors);
                }
            }
            None => {
                errors.push(FieldError::wrong_type(path, value, "array"));
                *value = placeholder(shape);
            }
        },
        Shape::Object(fields) => conform_object(value, shape, fields, path, errors),
        _ => {
            if let Some(error) = scalar_error(value, shape, path) {
                errors.push(error);
                *value = placeholder(shape);
            }
        }
    }
}

/// What is wrong with a scalar `value` of `shape`, if anything.
fn scalar_error(value: &Value, shape: Shape, path: &str) -> Option<FieldError> {
    match shape {
        Shape::String => {
            (!value.is_string()).then(|| FieldError::wrong_type(path, value, "string"))
        }
        Shape::Enum(allowed) => match value.as_str() {
            None => Some(FieldError::wrong_type(path, value, "string")),
            Some("") => Some(FieldError::required(path, "")),
            Some(s) if !allowed.contains(&s) => Some(FieldError::not_supported(path, s, allowed)),
            Some(_) => None,
        },
        Shape::Int => value
            .as_i64()
            .is_none()
            .then(|| FieldError::wrong_type(path, value, "integer")),
        Shape::Time => {
            let error = serde_json::from_value::<Time>(value.clone()).err()?;
            Some(match value.as_str() {
                Some(s) => {
                    FieldError::invalid(path, s, &format!("must be an RFC 3339 date-time: {error}"))
                }
                None => FieldError::wrong_type(path, value, "string"),
            })
        }
        Shape::Bytes => {
            serde_json::from_value::<ByteString>(value.clone()).err()?;
            Some(if value.is_string() {
                FieldError::invalid_detail(path, "must be base64-encoded bytes")
            } else {
                FieldError::wrong_type(path, value, "string")
            })
        }
        Shape::List(_) | Shape::Object(_) => None,
    }
}

/// [`conform`] for an object: each listed member conformed, missing ones dropped (optional)
/// or filled in (reported when required).
fn conform_object(
    value: &mut Value,
    shape: Shape,
    fields: &[Field],
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    if !value.is_object() {
        errors.push(FieldError::wrong_type(path, value, "object"));
        // Fill the replacement quietly: its missing members are not news.
        *value = placeholder(shape);
        conform(value, shape, path, &mut Vec::new());
        return;
    }
    let Some(members) = value.as_object_mut() else {
        return;
    };
    for field in fields {
        let field_path = child(path, field.name);
        match members.get_mut(field.name).filter(|v| !v.is_null()) {
            Some(member) => conform(member, field.shape, &field_path, errors),
            None => {
                if let Presence::Optional = field.presence {
                    members.remove(field.name);
                    continue;
                }
                if let Presence::Required = field.presence {
                    errors.push(FieldError::required(field_path.clone(), ""));
                }
                let mut filled = placeholder(field.shape);
                conform(&mut filled, field.shape, &field_path, errors);
                members.insert(field.name.to_owned(), filled);
            }
        }
    }
}

/// Shape-checks the member `name` of `object` (absent ⇒ an empty object) and deserialises it.
pub(super) fn conform_member<T: serde::de::DeserializeOwned>(
    object: &Value,
    name: &str,
    shape: Shape,
    errors: &mut Vec<FieldError>,
) -> Option<T> {
    let mut member = present(object.get(name))
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    conform(&mut member, shape, name, errors);
    match serde_json::from_value(member) {
        Ok(typed) => Some(typed),
        Err(error) => {
            errors.push(FieldError::invalid_detail(name, &error.to_string()));
            None
        }
    }
}

/// Adds the typed errors that are not about a field the shape check already reported, nor
/// about a field within or around one: those would be about its placeholder.
pub(super) fn merge(
    mut shape_errors: Vec<FieldError>,
    typed_errors: Vec<FieldError>,
) -> Vec<FieldError> {
    let reported: Vec<String> = shape_errors.iter().map(|e| e.path.clone()).collect();
    shape_errors.extend(typed_errors.into_iter().filter(|error| {
        !reported
            .iter()
            .any(|path| is_within(&error.path, path) || is_within(path, &error.path))
    }));
    shape_errors
}

/// Whether field `path` is `ancestor` or lies inside it.
pub(super) fn is_within(path: &str, ancestor: &str) -> bool {
    path.strip_prefix(ancestor)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
}
