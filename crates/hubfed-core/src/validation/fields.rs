//! Field errors: what admission reports, apimachinery style.

use super::*;

/// One apimachinery-style field error. `message` is the error body without the path, e.g.
/// `Required value` or `Invalid value: "ftp://x": scheme must be http, https or socks5`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted field path with list indices, e.g. `spec.overrides[0].clusterName`.
    pub path: String,
    pub message: String,
}

impl FieldError {
    /// `Required value[: detail]`.
    pub fn required(path: impl Into<String>, detail: &str) -> Self {
        Self::with_detail(path, "Required value".to_owned(), detail)
    }

    /// `Invalid value: "<value>"[: detail]`, the value quoted as Go's `%q` does.
    pub fn invalid(path: impl Into<String>, value: &str, detail: &str) -> Self {
        Self::with_detail(path, format!("Invalid value: {}", go_quote(value)), detail)
    }

    /// `Invalid value: <value>[: detail]` for values Go prints unquoted (numbers, durations,
    /// lists).
    pub fn invalid_value(path: impl Into<String>, value: impl fmt::Display, detail: &str) -> Self {
        Self::with_detail(path, format!("Invalid value: {value}"), detail)
    }

    /// `Invalid value: detail`, for when the value is too large or not worth repeating.
    pub fn invalid_detail(path: impl Into<String>, detail: &str) -> Self {
        Self::with_detail(path, "Invalid value".to_owned(), detail)
    }

    /// `Unsupported value: "<value>": supported values: "a", "b"`.
    pub fn not_supported(path: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
        Self::with_detail(
            path,
            format!("Unsupported value: {}", go_quote(value)),
            &format!("supported values: {}", quoted.join(", ")),
        )
    }

    /// `Duplicate value: "<value>"`.
    pub fn duplicate(path: impl Into<String>, value: &str) -> Self {
        Self::with_detail(path, format!("Duplicate value: {}", go_quote(value)), "")
    }

    /// `Forbidden[: detail]`.
    pub fn forbidden(path: impl Into<String>, detail: &str) -> Self {
        Self::with_detail(path, "Forbidden".to_owned(), detail)
    }

    pub(super) fn wrong_type(path: impl Into<String>, found: &Value, expected: &str) -> Self {
        Self::invalid(
            path,
            json_type_name(found),
            &format!("must be of type {expected}"),
        )
    }

    pub(super) fn with_detail(path: impl Into<String>, body: String, detail: &str) -> Self {
        let message = if detail.is_empty() {
            body
        } else {
            format!("{body}: {detail}")
        };
        Self {
            path: path.into(),
            message,
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// The errors as one message, like apimachinery's aggregate: duplicates dropped, a single
/// message as is, several as `[a, b]`, none as the empty string.
pub fn summary(errors: &[FieldError]) -> String {
    let mut seen = HashSet::new();
    let messages: Vec<String> = errors
        .iter()
        .map(ToString::to_string)
        .filter(|message| seen.insert(message.clone()))
        .collect();
    match messages.as_slice() {
        [] => String::new(),
        [only] => only.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

pub(super) fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

pub(super) fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}
