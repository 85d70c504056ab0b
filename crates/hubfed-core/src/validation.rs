//! Admission validation and defaulting (docs/kubefed-compatibility.md §6): pure functions behind
//! the webhooks for FederatedTypeConfig, KubeFedCluster, KubeFedConfig and — a hubfed addition —
//! federated objects. Errors are apimachinery field errors (`spec.apiEndpoint: Required value`) and
//! [`summary`] joins them the way an aggregate error does, which is what the webhook reports.
//!
//! Each kind has a typed entry point over the `hubfed-api` structs and a `*_value` entry point
//! over the raw admission object. The raw entry points first check the object's shape field by
//! field (wrong JSON types, unknown enum values, missing required enums), so that problems the
//! typed structs cannot even represent are still reported with their field path; then they run
//! the typed rules on what deserialises.
//!
//! Deliberate differences from KubeFed's `validation.go`:
//! - FederatedTypeConfigs are validated after `SetFederatedTypeConfigDefaults`, the view every
//!   controller works with; the name error is reported at `metadata.name` (KubeFed: `name`).
//! - List items are reported with their index (`spec.featureGates[1].name`, KubeFed:
//!   `spec.featureGates.name`).
//! - Added checks: `proxyURL`, the `ConfigMalformed` condition type (which KubeFed's own health
//!   controller writes), `cacheSyncTimeout` and `maxConcurrentReconciles` (> 0 when set; not
//!   required, so configs written by older KubeFed versions still update), and durations that do
//!   not parse (KubeFed failed to decode them: 400 instead of a field error).
//! - The legacy feature gate name `FederatedIngress` stays accepted, as KubeFed v0.10 did.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use hubfed_api::condition::ConditionStatus;
use hubfed_api::duration::parse_go_duration;
use hubfed_api::federatedtypeconfig::{
    ApiResource, FederatedTypeConfig, FederatedTypeConfigSpec, FederatedTypeConfigStatus,
    ResourceScope,
};
use hubfed_api::kubefedcluster::{
    ClusterConditionType, KubeFedClusterSpec, KubeFedClusterStatus, TlsValidation,
};
use hubfed_api::kubefedconfig::KubeFedConfigSpec;
use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use serde_json::{Map, Value, json};

use crate::CoreError;
use crate::overrides::FORBIDDEN_PATHS;
use crate::selector::Selector;

// ---------------------------------------------------------------------------------------------
// Field errors
// ---------------------------------------------------------------------------------------------

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

    fn wrong_type(path: impl Into<String>, found: &Value, expected: &str) -> Self {
        Self::invalid(
            path,
            json_type_name(found),
            &format!("must be of type {expected}"),
        )
    }

    fn with_detail(path: impl Into<String>, body: String, detail: &str) -> Self {
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

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

// ---------------------------------------------------------------------------------------------
// apimachinery string validators (k8s.io/apimachinery/pkg/util/validation)
// ---------------------------------------------------------------------------------------------

/// Longest DNS-1123 subdomain.
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// Longest DNS-1035 label.
pub const DNS1035_LABEL_MAX_LENGTH: usize = 63;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_ERROR_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_ERROR_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";

/// `validation.IsDNS1123Subdomain`: the problems with `value`, empty when it is valid.
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errors.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    // `label(\.label)*` with `label` = `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
    let matches = value.split('.').all(|label| {
        let bytes = label.as_bytes();
        match (bytes.first(), bytes.last()) {
            (Some(first), Some(last)) => {
                is_lower_alnum(*first)
                    && is_lower_alnum(*last)
                    && bytes.iter().all(|b| is_lower_alnum(*b) || *b == b'-')
            }
            _ => false,
        }
    });
    if !matches {
        let format = format!("{DNS1123_LABEL_FMT}(\\.{DNS1123_LABEL_FMT})*");
        errors.push(regex_error(
            DNS1123_SUBDOMAIN_ERROR_MSG,
            &format,
            &["example.com"],
        ));
    }
    errors
}

/// `validation.IsDNS1035Label`: the problems with `value`, empty when it is valid.
pub fn is_dns1035_label(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > DNS1035_LABEL_MAX_LENGTH {
        errors.push(max_len_error(DNS1035_LABEL_MAX_LENGTH));
    }
    let bytes = value.as_bytes();
    let matches = match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_lowercase()
                && is_lower_alnum(*last)
                && bytes.iter().all(|b| is_lower_alnum(*b) || *b == b'-')
        }
        _ => false,
    };
    if !matches {
        errors.push(regex_error(
            DNS1035_LABEL_ERROR_MSG,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errors
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// `validation.RegexError`, including its odd `'a',  or 'b'` spacing.
fn regex_error(message: &str, format: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{message} (regex used for validation is '{format}')");
    }
    let mut out = format!("{message} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(example);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(format);
    out.push_str("')");
    out
}

// ---------------------------------------------------------------------------------------------
// Go formatting helpers
// ---------------------------------------------------------------------------------------------

/// Go's `strconv.Quote` (`%q`) for valid UTF-8.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if c.is_control() => {
                let code = u32::from(c);
                if code < 0x80 {
                    out.push_str(&format!("\\x{code:02x}"));
                } else if code <= 0xffff {
                    out.push_str(&format!("\\u{code:04x}"));
                } else {
                    out.push_str(&format!("\\U{code:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `time.Duration.String()` for a signed nanosecond count (`1m0s`, `1.5s`, `300ms`).
fn go_duration_string(nanos: i128) -> String {
    fn fraction(value: u128, precision: usize) -> String {
        if value == 0 {
            return String::new();
        }
        let digits = format!("{value:0precision$}");
        format!(".{}", digits.trim_end_matches('0'))
    }
    let magnitude = nanos.unsigned_abs();
    if magnitude == 0 {
        return "0s".to_owned();
    }
    let body = if magnitude < 1_000_000_000 {
        let (scale, precision, unit) = if magnitude < 1_000 {
            (1, 0, "ns")
        } else if magnitude < 1_000_000 {
            (1_000, 3, "\u{b5}s")
        } else {
            (1_000_000, 6, "ms")
        };
        format!(
            "{}{}{unit}",
            magnitude / scale,
            fraction(magnitude % scale, precision)
        )
    } else {
        let seconds_total = magnitude / 1_000_000_000;
        let seconds = format!(
            "{}{}s",
            seconds_total % 60,
            fraction(magnitude % 1_000_000_000, 9)
        );
        let minutes_total = seconds_total / 60;
        let hours = minutes_total / 60;
        match (hours, minutes_total) {
            (_, 0) => seconds,
            (0, minutes) => format!("{minutes}m{seconds}"),
            (hours, minutes) => format!("{hours}h{}m{seconds}", minutes % 60),
        }
    };
    if nanos < 0 { format!("-{body}") } else { body }
}

fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Treats JSON `null` like an absent member: the API server prunes nulls of non-nullable
/// fields before admission, and Go decodes both to the zero value.
fn present(value: Option<&Value>) -> Option<&Value> {
    value.filter(|v| !v.is_null())
}

// ---------------------------------------------------------------------------------------------
// Go URL parsing (net/url.Parse and client-go rest.DefaultServerURL), enough to validate
// endpoints exactly as the controller will use them
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Default, PartialEq, Eq)]
struct GoUrl {
    scheme: String,
    opaque: String,
    /// `host[:port]` as written, brackets kept for IPv6 literals.
    host: String,
    /// Path after percent-decoding.
    path: Vec<u8>,
}

impl GoUrl {
    /// `url.URL.Port()`: the digits after the last colon, if that colon starts a valid port.
    fn port(&self) -> &str {
        match self.host.rfind(':') {
            Some(colon) if valid_optional_port(&self.host[colon..]) => &self.host[colon + 1..],
            _ => "",
        }
    }
}

/// `url.Parse`, with Go's error text (`parse "<url>": <reason>`).
fn go_url_parse(raw: &str) -> Result<GoUrl, String> {
    let (without_fragment, fragment) = match raw.split_once('#') {
        Some((url, fragment)) => (url, fragment),
        None => (raw, ""),
    };
    let url = go_url_parse_without_fragment(without_fragment)
        .map_err(|reason| format!("parse {}: {reason}", go_quote(without_fragment)))?;
    percent_decode(fragment, EscapeMode::Other)
        .map_err(|reason| format!("parse {}: {reason}", go_quote(raw)))?;
    Ok(url)
}

fn go_url_parse_without_fragment(raw: &str) -> Result<GoUrl, String> {
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err("net/url: invalid control character in URL".to_owned());
    }
    if raw == "*" {
        return Ok(GoUrl {
            path: b"*".to_vec(),
            ..GoUrl::default()
        });
    }
    let (scheme, rest) = go_url_scheme(raw)?;
    let scheme = scheme.to_ascii_lowercase();
    let rest = if rest.ends_with('?') && rest.matches('?').count() == 1 {
        &rest[..rest.len() - 1]
    } else {
        rest.split_once('?').map_or(rest, |(before, _)| before)
    };
    if !rest.starts_with('/') {
        if !scheme.is_empty() {
            return Ok(GoUrl {
                scheme,
                opaque: rest.to_owned(),
                ..GoUrl::default()
            });
        }
        let first_segment = rest.split('/').next().unwrap_or_default();
        if first_segment.contains(':') {
            return Err("first path segment in URL cannot contain colon".to_owned());
        }
    }
    let mut host = String::new();
    let mut path = rest;
    if (!scheme.is_empty() || !rest.starts_with("///")) && rest.starts_with("//") {
        let after_slashes = &rest[2..];
        let (authority, after_authority) = match after_slashes.find('/') {
            Some(slash) => after_slashes.split_at(slash),
            None => (after_slashes, ""),
        };
        host = go_url_authority(authority)?;
        path = after_authority;
    }
    let path = percent_decode(path, EscapeMode::Other)?;
    Ok(GoUrl {
        scheme,
        opaque: String::new(),
        host,
        path,
    })
}

/// `getScheme`: letters then `:`; digits, `+`, `-`, `.` allowed after the first character.
fn go_url_scheme(raw: &str) -> Result<(&str, &str), String> {
    for (i, b) in raw.bytes().enumerate() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return Err("missing protocol scheme".to_owned()),
            b':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

/// `parseAuthority`: optional `userinfo@`, then the host.
fn go_url_authority(authority: &str) -> Result<String, String> {
    let (userinfo, host) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    go_url_host(host)?;
    if let Some(userinfo) = userinfo {
        let valid = userinfo
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:~!$&'()*+,;=%@".contains(&b) || b >= 0x80);
        if !valid {
            return Err("net/url: invalid userinfo".to_owned());
        }
        percent_decode(userinfo, EscapeMode::Other)?;
    }
    Ok(host.to_owned())
}

/// `parseHost`: a valid optional port after the host or the IPv6 literal, legal characters.
fn go_url_host(host: &str) -> Result<(), String> {
    let colon_port = if host.starts_with('[') {
        let Some(close) = host.rfind(']') else {
            return Err("missing ']' in host".to_owned());
        };
        Some(&host[close + 1..])
    } else {
        host.rfind(':').map(|colon| &host[colon..])
    };
    if let Some(colon_port) = colon_port
        && !valid_optional_port(colon_port)
    {
        return Err(format!("invalid port {} after host", go_quote(colon_port)));
    }
    percent_decode(host, EscapeMode::Host).map(|_| ())
}

fn valid_optional_port(colon_port: &str) -> bool {
    colon_port.is_empty()
        || colon_port
            .strip_prefix(':')
            .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_digit()))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum EscapeMode {
    Host,
    Other,
}

/// Go's `unescape`: `%XX` must be two hex digits; in hosts only non-ASCII bytes (or `%25`)
/// may be escaped and ASCII characters outside the host alphabet are errors.
fn percent_decode(s: &str, mode: EscapeMode) -> Result<Vec<u8>, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hex = |j: usize| bytes.get(j).and_then(|h| char::from(*h).to_digit(16));
            let (Some(high), Some(low)) = (hex(i + 1), hex(i + 2)) else {
                let end = (i + 3).min(bytes.len());
                return Err(format!(
                    "invalid URL escape {}",
                    go_quote(&String::from_utf8_lossy(&bytes[i..end]))
                ));
            };
            let escape = &s[i..i + 3];
            if mode == EscapeMode::Host && high < 8 && escape != "%25" {
                return Err(format!("invalid URL escape {}", go_quote(escape)));
            }
            // Both digits are below 16, so the byte fits.
            out.push(u8::try_from(high * 16 + low).unwrap_or_default());
            i += 3;
            continue;
        }
        if mode == EscapeMode::Host && b < 0x80 && !is_host_byte(b) {
            return Err(format!(
                "invalid character {} in host name",
                go_quote(&char::from(b).to_string())
            ));
        }
        out.push(b);
        i += 1;
    }
    Ok(out)
}

/// ASCII bytes `shouldEscape(b, encodeHost)` leaves alone.
fn is_host_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-_.~!$&'()*+,;=:[]<>\"".contains(&b)
}

/// client-go `rest.DefaultServerURL(host, "", _, true)`: a URL with scheme and host is taken
/// as it is, any path in it a prefix of every request (an API server behind a path-routing
/// proxy, e.g. `https://my.example.com:80/path/to/endpoint`); anything else is parsed again as
/// `https://` + the value, which may then carry no path beyond `/` (`example.com/path` is
/// refused).
fn default_server_url(host: &str) -> Result<GoUrl, String> {
    if let Ok(url) = go_url_parse(host)
        && !url.scheme.is_empty()
        && !url.host.is_empty()
    {
        return Ok(url);
    }
    let url = go_url_parse(&format!("https://{host}"))?;
    if !url.path.is_empty() && url.path != b"/" {
        return Err(format!(
            "host must be a URL or a host:port pair: {}",
            go_quote(host)
        ));
    }
    Ok(url)
}

/// `text` with every password that `value` carries in a `scheme://user:password@host`
/// authority (also once client-go prefixed `https://`) replaced by `xxxxx`, as Go's
/// `URL.Redacted` does, so that an echoed value or parse error leaks no credential.
fn redact_passwords(text: &str, value: &str) -> String {
    let mut redacted = text.to_owned();
    for candidate in [value.to_owned(), format!("https://{value}")] {
        for (scheme_end, _) in candidate.match_indices("://") {
            let authority = &candidate[scheme_end + 3..];
            let authority = authority
                .find(['/', '?', '#'])
                .map_or(authority, |end| &authority[..end]);
            let password = authority
                .rfind('@')
                .and_then(|at| authority[..at].split_once(':'))
                .map(|(_, password)| password);
            if let Some(password) = password.filter(|p| !p.is_empty()) {
                redacted = redacted.replace(password, "xxxxx");
            }
        }
    }
    redacted
}

// ---------------------------------------------------------------------------------------------
// Shape checks for raw admission objects
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Shape {
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
enum Presence {
    /// May be absent.
    Optional,
    /// Filled in silently when absent (Go would see the zero value); the typed rules report it.
    Fill,
    /// `Required value` when absent.
    Required,
}

#[derive(Clone, Copy)]
struct Field {
    name: &'static str,
    shape: Shape,
    presence: Presence,
}

const fn field(name: &'static str, shape: Shape, presence: Presence) -> Field {
    Field {
        name,
        shape,
        presence,
    }
}

const SCOPES: &[&str] = &["Cluster", "Namespaced"];
const ENABLED_DISABLED: &[&str] = &["Enabled", "Disabled"];
const CONTROLLER_STATUSES: &[&str] = &["Running", "NotRunning"];
const RESOURCE_LOCKS: &[&str] = &["configmaps", "endpoints"];
const TLS_VALIDATIONS: &[&str] = &["*", "SubjectName", "ValidityPeriod"];
/// A timestamp that deserialises, put in place of a missing or broken one.
const PLACEHOLDER_TIME: &str = "1970-01-01T00:00:00Z";

const API_RESOURCE: Shape = Shape::Object(&[
    field("group", Shape::String, Presence::Optional),
    field("version", Shape::String, Presence::Fill),
    field("kind", Shape::String, Presence::Fill),
    field("pluralName", Shape::String, Presence::Fill),
    field("scope", Shape::Enum(SCOPES), Presence::Required),
]);

const METADATA: Shape = Shape::Object(&[field("name", Shape::String, Presence::Fill)]);

const FTC_SPEC: Shape = Shape::Object(&[
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

const FTC_STATUS: Shape = Shape::Object(&[
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

const CLUSTER_SPEC: Shape = Shape::Object(&[
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

const CLUSTER_CONDITION: Shape = Shape::Object(&[
    field("type", Shape::String, Presence::Fill),
    field("status", Shape::String, Presence::Fill),
    field("lastProbeTime", Shape::Time, Presence::Required),
    field("lastTransitionTime", Shape::Time, Presence::Optional),
    field("reason", Shape::String, Presence::Optional),
    field("message", Shape::String, Presence::Optional),
]);

const CLUSTER_STATUS: Shape = Shape::Object(&[
    field(
        "conditions",
        Shape::List(&CLUSTER_CONDITION),
        Presence::Fill,
    ),
    field("kubernetesVersion", Shape::String, Presence::Optional),
    field("zones", Shape::List(&Shape::String), Presence::Optional),
    field("region", Shape::String, Presence::Optional),
]);

const KUBEFED_CONFIG_SPEC: Shape = Shape::Object(&[
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
fn placeholder(shape: Shape) -> Value {
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
fn conform(value: &mut Value, shape: Shape, path: &str, errors: &mut Vec<FieldError>) {
    match shape {
        Shape::String => {
            if !value.is_string() {
                errors.push(FieldError::wrong_type(path, value, "string"));
                *value = placeholder(shape);
            }
        }
        Shape::Enum(allowed) => {
            let error = match value.as_str() {
                None => Some(FieldError::wrong_type(path, value, "string")),
                Some("") => Some(FieldError::required(path, "")),
                Some(s) if !allowed.contains(&s) => {
                    Some(FieldError::not_supported(path, s, allowed))
                }
                Some(_) => None,
            };
            if let Some(error) = error {
                errors.push(error);
                *value = placeholder(shape);
            }
        }
        Shape::Int => {
            if value.as_i64().is_none() {
                errors.push(FieldError::wrong_type(path, value, "integer"));
                *value = placeholder(shape);
            }
        }
        Shape::Time => {
            if let Err(error) = serde_json::from_value::<Time>(value.clone()) {
                errors.push(match value.as_str() {
                    Some(s) => FieldError::invalid(
                        path,
                        s,
                        &format!("must be an RFC 3339 date-time: {error}"),
                    ),
                    None => FieldError::wrong_type(path, value, "string"),
                });
                *value = placeholder(shape);
            }
        }
        Shape::Bytes => {
            if serde_json::from_value::<ByteString>(value.clone()).is_err() {
                errors.push(if value.is_string() {
                    FieldError::invalid_detail(path, "must be base64-encoded bytes")
                } else {
                    FieldError::wrong_type(path, value, "string")
                });
                *value = placeholder(shape);
            }
        }
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
        Shape::Object(fields) => {
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
    }
}

/// Shape-checks the member `name` of `object` (absent ⇒ an empty object) and deserialises it.
fn conform_member<T: serde::de::DeserializeOwned>(
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
fn merge(mut shape_errors: Vec<FieldError>, typed_errors: Vec<FieldError>) -> Vec<FieldError> {
    let reported: Vec<String> = shape_errors.iter().map(|e| e.path.clone()).collect();
    shape_errors.extend(typed_errors.into_iter().filter(|error| {
        !reported
            .iter()
            .any(|path| is_within(&error.path, path) || is_within(path, &error.path))
    }));
    shape_errors
}

/// Whether field `path` is `ancestor` or lies inside it.
fn is_within(path: &str, ancestor: &str) -> bool {
    path.strip_prefix(ancestor)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
}

// ---------------------------------------------------------------------------------------------
// FederatedTypeConfig
// ---------------------------------------------------------------------------------------------

const FTC_NAME_ERROR_MSG: &str = "name must be 'TARGET_PLURAL_NAME(.TARGET_GROUP_NAME)'";
const DOMAIN_WITH_AT_LEAST_ONE_DOT: &str = "should be a domain with at least one dot";

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

fn validate_federated_api_resource(
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

fn validate_api_resource(resource: &ApiResource, path: &str, errors: &mut Vec<FieldError>) {
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

// ---------------------------------------------------------------------------------------------
// KubeFedCluster
// ---------------------------------------------------------------------------------------------

/// Go's zero `time.Time` (`0001-01-01T00:00:00Z`) as Unix seconds; `IsZero` in KubeFed's check.
const GO_ZERO_TIME_UNIX_SECONDS: i64 = -62_135_596_800;

/// [`validate_kubefed_cluster_spec`] plus, when given, [`validate_kubefed_cluster_status`].
pub fn validate_kubefed_cluster(
    spec: &KubeFedClusterSpec,
    status: Option<&KubeFedClusterStatus>,
) -> Vec<FieldError> {
    let mut errors = validate_kubefed_cluster_spec(spec);
    if let Some(status) = status {
        errors.extend(validate_kubefed_cluster_status(status));
    }
    errors
}

/// KubeFed's `validateKubeFedClusterSpec`: `apiEndpoint` required and parsable as client-go
/// parses it (a URL may carry a path prefix, a bare `host[:port]` may not), scheme http or
/// https, port 1–65535; `secretRef.name` a DNS-1123 subdomain;
/// `*` alone in `disabledTLSValidations`. hubfed adds: `proxyURL`, when set, is a URL with
/// scheme http, https or socks5 and a host.
pub fn validate_kubefed_cluster_spec(spec: &KubeFedClusterSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validate_api_endpoint(&spec.api_endpoint, "spec.apiEndpoint", &mut errors);

    let name_path = "spec.secretRef.name";
    if spec.secret_ref.name.is_empty() {
        errors.push(FieldError::required(name_path, ""));
    } else {
        let problems = is_dns1123_subdomain(&spec.secret_ref.name);
        if !problems.is_empty() {
            errors.push(FieldError::invalid(
                name_path,
                &spec.secret_ref.name,
                &problems.join(","),
            ));
        }
    }

    let tls = &spec.disabled_tls_validations;
    if tls.len() > 1 && tls.contains(&TlsValidation::All) {
        let values: Vec<String> = tls
            .iter()
            .map(|value| go_quote(tls_validation_str(*value)))
            .collect();
        errors.push(FieldError::invalid_value(
            "spec.disabledTLSValidations",
            format!("[{}]", values.join(", ")),
            "when * is specified, it is expected to be the only option in list",
        ));
    }

    if !spec.proxy_url.is_empty() {
        validate_proxy_url(&spec.proxy_url, "spec.proxyURL", &mut errors);
    }
    errors
}

/// KubeFed's `validateKubeFedClusterStatus`: each condition's type is `Ready`, `Offline` or
/// `ConfigMalformed`, its status `True`, `False` or `Unknown`, and `lastProbeTime` is set.
pub fn validate_kubefed_cluster_status(status: &KubeFedClusterStatus) -> Vec<FieldError> {
    let condition_types: Vec<&str> = ClusterConditionType::ALL
        .iter()
        .map(|t| t.as_str())
        .collect();
    let condition_statuses: Vec<&str> = ConditionStatus::ALL.iter().map(|s| s.as_str()).collect();
    let mut errors = Vec::new();
    for (i, condition) in status.conditions.iter().enumerate() {
        let path = index("status.conditions", i);
        validate_enum_string(
            &child(&path, "type"),
            &condition.type_,
            &condition_types,
            &mut errors,
        );
        validate_enum_string(
            &child(&path, "status"),
            &condition.status,
            &condition_statuses,
            &mut errors,
        );
        let probed = &condition.last_probe_time.0;
        if probed.as_second() == GO_ZERO_TIME_UNIX_SECONDS && probed.subsec_nanosecond() == 0 {
            errors.push(FieldError::required(child(&path, "lastProbeTime"), ""));
        }
    }
    errors
}

/// [`validate_kubefed_cluster_spec`] (or, for the `status` subresource,
/// [`validate_kubefed_cluster_status`]) over a raw KubeFedCluster object.
pub fn validate_kubefed_cluster_value(object: &Value, status_subresource: bool) -> Vec<FieldError> {
    let mut shape_errors = Vec::new();
    let typed = if status_subresource {
        conform_member::<KubeFedClusterStatus>(object, "status", CLUSTER_STATUS, &mut shape_errors)
            .map(|status| validate_kubefed_cluster_status(&status))
    } else {
        conform_member::<KubeFedClusterSpec>(object, "spec", CLUSTER_SPEC, &mut shape_errors)
            .map(|spec| validate_kubefed_cluster_spec(&spec))
    };
    merge(shape_errors, typed.unwrap_or_default())
}

fn tls_validation_str(value: TlsValidation) -> &'static str {
    match value {
        TlsValidation::All => "*",
        TlsValidation::SubjectName => "SubjectName",
        TlsValidation::ValidityPeriod => "ValidityPeriod",
    }
}

fn validate_api_endpoint(endpoint: &str, path: &str, errors: &mut Vec<FieldError>) {
    if endpoint.is_empty() {
        errors.push(FieldError::required(path, ""));
        return;
    }
    let url = match default_server_url(endpoint) {
        Ok(url) => url,
        Err(reason) => {
            errors.push(FieldError::invalid(
                path,
                &redact_passwords(endpoint, endpoint),
                &redact_passwords(&reason, endpoint),
            ));
            return;
        }
    };
    validate_enum_string(path, &url.scheme, &["http", "https"], errors);
    let port = url.port();
    if !port.is_empty() {
        // Go's strconv.Atoi: the digits can only fail by overflowing.
        match port.parse::<i64>() {
            Err(_) => errors.push(FieldError::invalid(
                path,
                port,
                "error converting port to integer",
            )),
            Ok(number) if !(1..=65535).contains(&number) => errors.push(FieldError::invalid_value(
                path,
                number,
                "must be between 1 and 65535, inclusive",
            )),
            Ok(_) => {}
        }
    }
}

fn validate_proxy_url(proxy: &str, path: &str, errors: &mut Vec<FieldError>) {
    let shown = redact_passwords(proxy, proxy);
    match go_url_parse(proxy) {
        Err(reason) => errors.push(FieldError::invalid(
            path,
            &shown,
            &redact_passwords(&reason, proxy),
        )),
        Ok(url) if !matches!(url.scheme.as_str(), "http" | "https" | "socks5") => errors.push(
            FieldError::invalid(path, &shown, "scheme must be http, https or socks5"),
        ),
        Ok(url) if url.host.is_empty() => {
            errors.push(FieldError::invalid(path, &shown, "host must be provided"));
        }
        Ok(_) => {}
    }
}

/// KubeFed's `validateEnumStrings`: empty ⇒ required, unknown ⇒ unsupported.
fn validate_enum_string(path: &str, value: &str, accepted: &[&str], errors: &mut Vec<FieldError>) {
    if value.is_empty() {
        errors.push(FieldError::required(path, ""));
    } else if !accepted.contains(&value) {
        errors.push(FieldError::not_supported(path, value, accepted));
    }
}

// ---------------------------------------------------------------------------------------------
// KubeFedConfig
// ---------------------------------------------------------------------------------------------

/// Feature gate names KubeFed v0.10's validation accepts: the known gates plus the retired
/// `FederatedIngress`, so that existing configs keep validating.
const ACCEPTED_FEATURE_GATES: &[&str] = &[
    "PushReconciler",
    "RawResourceStatusCollection",
    "SchedulerPreferences",
    "FederatedIngress",
];

/// client-go `leaderelection.JitterFactor`.
const LEADER_ELECTION_JITTER_FACTOR: f64 = 1.2;

/// KubeFed's `SetDefaultKubeFedConfig` (via [`KubeFedConfigSpec::apply_defaults`]).
pub fn default_kubefed_config(spec: &KubeFedConfigSpec) -> KubeFedConfigSpec {
    let mut defaulted = spec.clone();
    defaulted.apply_defaults();
    defaulted
}

/// The mutating webhook's answer for a raw KubeFedConfig: `Ok(None)` when defaulting changes
/// nothing, `Ok(Some(patch))` with the JSON patch `[{"op":"replace","path":"/spec",...}]`
/// otherwise, `Err` when the spec cannot be read.
pub fn default_kubefed_config_patch(object: &Value) -> Result<Option<Value>, Vec<FieldError>> {
    let mut errors = Vec::new();
    let spec =
        conform_member::<KubeFedConfigSpec>(object, "spec", KUBEFED_CONFIG_SPEC, &mut errors);
    let spec = match spec {
        Some(spec) if errors.is_empty() => spec,
        _ => return Err(errors),
    };
    let defaulted = default_kubefed_config(&spec);
    if defaulted == spec {
        return Ok(None);
    }
    let value = serde_json::to_value(&defaulted)
        .map_err(|error| vec![FieldError::invalid_detail("spec", &error.to_string())])?;
    Ok(Some(
        json!([{"op": "replace", "path": "/spec", "value": value}]),
    ))
}

/// KubeFed's `ValidateKubeFedConfig` on a (defaulted) spec: every duration set, parseable and
/// positive; `leaseDuration` > `renewDeadline` > `retryPeriod` × 1.2; `resourceLock` set;
/// feature gates known and unique; health thresholds positive; `adoptResources` set; `scope`
/// unchanged when `old` (the spec before an update) is given. `cacheSyncTimeout` and
/// `maxConcurrentReconciles` must be positive when set.
pub fn validate_kubefed_config(
    spec: &KubeFedConfigSpec,
    old: Option<&KubeFedConfigSpec>,
) -> Vec<FieldError> {
    validate_kubefed_config_with_old_scope(spec, old.map(|old| old.scope))
}

/// [`validate_kubefed_config`] over raw KubeFedConfig objects; `old_object` is the object
/// before an update.
pub fn validate_kubefed_config_value(
    object: &Value,
    old_object: Option<&Value>,
) -> Vec<FieldError> {
    let mut shape_errors = Vec::new();
    let spec =
        conform_member::<KubeFedConfigSpec>(object, "spec", KUBEFED_CONFIG_SPEC, &mut shape_errors);
    let old_scope = old_object
        .and_then(|old| present(old.pointer("/spec/scope")))
        .and_then(|scope| serde_json::from_value::<ResourceScope>(scope.clone()).ok());
    let typed = spec
        .map(|spec| validate_kubefed_config_with_old_scope(&spec, old_scope))
        .unwrap_or_default();
    merge(shape_errors, typed)
}

fn validate_kubefed_config_with_old_scope(
    spec: &KubeFedConfigSpec,
    old_scope: Option<ResourceScope>,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(old_scope) = old_scope
        && old_scope != spec.scope
    {
        errors.push(FieldError::invalid(
            "spec.scope",
            spec.scope.as_str(),
            "field is immutable",
        ));
    }

    match &spec.controller_duration {
        None => errors.push(FieldError::required("spec.controllerDuration", "")),
        Some(durations) => {
            let path = "spec.controllerDuration";
            let fields = [
                ("availableDelay", &durations.available_delay, true),
                ("unavailableDelay", &durations.unavailable_delay, true),
                ("cacheSyncTimeout", &durations.cache_sync_timeout, false),
            ];
            for (name, value, required) in fields {
                positive_duration(&child(path, name), value.as_deref(), required, &mut errors);
            }
        }
    }

    match &spec.leader_elect {
        None => errors.push(FieldError::required("spec.leaderElect", "")),
        Some(election) => {
            let path = "spec.leaderElect";
            let lease_path = child(path, "leaseDuration");
            let renew_path = child(path, "renewDeadline");
            let lease = positive_duration(
                &lease_path,
                election.lease_duration.as_deref(),
                true,
                &mut errors,
            );
            let renew = positive_duration(
                &renew_path,
                election.renew_deadline.as_deref(),
                true,
                &mut errors,
            );
            let retry = positive_duration(
                &child(path, "retryPeriod"),
                election.retry_period.as_deref(),
                true,
                &mut errors,
            );
            if let (Some(lease), Some(renew)) = (lease, renew)
                && lease <= renew
            {
                errors.push(FieldError::invalid_value(
                    lease_path,
                    go_duration_string(lease),
                    "leaseDuration must be greater than renewDeadline",
                ));
            }
            if let (Some(renew), Some(retry)) = (renew, retry) {
                // Go: time.Duration(float64(retry) * JitterFactor), truncated toward zero.
                let jittered = (retry as f64 * LEADER_ELECTION_JITTER_FACTOR) as i128;
                if renew <= jittered {
                    errors.push(FieldError::invalid_value(
                        renew_path,
                        go_duration_string(renew),
                        &format!(
                            "renewDeadline must be greater than retryPeriod*JitterFactor({LEADER_ELECTION_JITTER_FACTOR:.1})"
                        ),
                    ));
                }
            }
            if election.resource_lock.is_none() {
                errors.push(FieldError::required(child(path, "resourceLock"), ""));
            }
        }
    }

    if spec.feature_gates.is_empty() {
        errors.push(FieldError::required("spec.featureGates", ""));
    }
    let mut seen_gates = HashSet::new();
    for (i, gate) in spec.feature_gates.iter().enumerate() {
        let name_path = child(&index("spec.featureGates", i), "name");
        if !seen_gates.insert(gate.name.as_str()) {
            errors.push(FieldError::duplicate(name_path, &gate.name));
            continue;
        }
        validate_enum_string(&name_path, &gate.name, ACCEPTED_FEATURE_GATES, &mut errors);
    }

    match &spec.cluster_health_check {
        None => errors.push(FieldError::required("spec.clusterHealthCheck", "")),
        Some(health) => {
            let path = "spec.clusterHealthCheck";
            positive_duration(
                &child(path, "period"),
                health.period.as_deref(),
                true,
                &mut errors,
            );
            positive_int(
                &child(path, "failureThreshold"),
                health.failure_threshold,
                true,
                &mut errors,
            );
            positive_int(
                &child(path, "successThreshold"),
                health.success_threshold,
                true,
                &mut errors,
            );
            positive_duration(
                &child(path, "timeout"),
                health.timeout.as_deref(),
                true,
                &mut errors,
            );
        }
    }

    match &spec.sync_controller {
        None => errors.push(FieldError::required("spec.syncController", "")),
        Some(sync) => {
            positive_int(
                "spec.syncController.maxConcurrentReconciles",
                sync.max_concurrent_reconciles,
                false,
                &mut errors,
            );
            if sync.adopt_resources.is_none() {
                errors.push(FieldError::required(
                    "spec.syncController.adoptResources",
                    "",
                ));
            }
        }
    }

    if let Some(status) = &spec.status_controller {
        positive_int(
            "spec.statusController.maxConcurrentReconciles",
            status.max_concurrent_reconciles,
            false,
            &mut errors,
        );
    }
    errors
}

/// Checks a duration string is set (when `required`), parses as a Go duration and is > 0.
/// Returns its signed length in nanoseconds when it parses.
fn positive_duration(
    path: &str,
    value: Option<&str>,
    required: bool,
    errors: &mut Vec<FieldError>,
) -> Option<i128> {
    let Some(value) = value else {
        if required {
            errors.push(FieldError::required(path, ""));
        }
        return None;
    };
    match parse_signed_go_duration(value) {
        Ok(nanos) => {
            if nanos <= 0 {
                // Go reports the duration as its int64 nanosecond count.
                errors.push(FieldError::invalid_value(
                    path,
                    nanos,
                    "should be greater than 0",
                ));
            }
            Some(nanos)
        }
        Err(reason) => {
            errors.push(FieldError::invalid(
                path,
                value,
                &format!("must be a Go duration such as \"20s\" or \"1m30s\": {reason}"),
            ));
            None
        }
    }
}

/// Go's `time.ParseDuration`, negative values included, as nanoseconds within `int64`.
fn parse_signed_go_duration(value: &str) -> Result<i128, String> {
    let (negative, magnitude) = match value.strip_prefix('-') {
        Some(rest) if !rest.starts_with(['+', '-']) => (true, rest),
        _ => (false, value),
    };
    let duration = parse_go_duration(magnitude).map_err(|error| match error {
        hubfed_api::Error::InvalidDuration { reason, .. } => reason.to_owned(),
        other => other.to_string(),
    })?;
    let nanos = i128::try_from(duration.as_nanos()).unwrap_or(i128::MAX);
    if nanos > i128::from(i64::MAX) {
        return Err("number out of range".to_owned());
    }
    Ok(if negative { -nanos } else { nanos })
}

fn positive_int(path: &str, value: Option<i64>, required: bool, errors: &mut Vec<FieldError>) {
    match value {
        None if required => errors.push(FieldError::required(path, "")),
        Some(value) if value <= 0 => {
            errors.push(FieldError::invalid_value(
                path,
                value,
                "should be greater than 0",
            ));
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Federated objects (hubfed addition; KubeFed validated them only by CRD schema)
// ---------------------------------------------------------------------------------------------

const OVERRIDE_OPS: &[&str] = &["", "add", "remove", "replace"];

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

/// An object at `path`, or an error.
fn expect_object<'a>(
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
fn expect_array<'a>(
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
fn required_string<'a>(
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

fn validate_placement(placement: &Value, path: &str, errors: &mut Vec<FieldError>) {
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
fn validate_label_selector(selector: &Value, path: &str, errors: &mut Vec<FieldError>) {
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

fn check_selector(selector: &LabelSelector, path: &str, errors: &mut Vec<FieldError>) {
    match Selector::new(Some(selector)) {
        Ok(_) => {}
        Err(CoreError::InvalidSelector(reason)) => {
            errors.push(FieldError::invalid_detail(path, &reason));
        }
        Err(other) => errors.push(FieldError::invalid_detail(path, &other.to_string())),
    }
}

fn validate_overrides(overrides: &Value, path: &str, errors: &mut Vec<FieldError>) {
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

fn validate_override<'a>(
    item: &'a Value,
    path: &str,
    seen_paths: &mut HashSet<&'a str>,
    errors: &mut Vec<FieldError>,
) {
    let Some(item) = expect_object(item, path, errors) else {
        return;
    };
    let before = errors.len();
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
    let pointer = required_string(item, "path", &pointer_path, errors);
    if let Some(pointer) = pointer {
        if !pointer.starts_with('/') {
            errors.push(FieldError::invalid(
                pointer_path.clone(),
                pointer,
                "must be a JSON pointer starting with \"/\"",
            ));
        } else if let Some(problem) = json_pointer_problem(pointer) {
            errors.push(FieldError::invalid(pointer_path.clone(), pointer, problem));
        } else if FORBIDDEN_PATHS.contains(&pointer) {
            errors.push(FieldError::forbidden(
                pointer_path.clone(),
                &format!("{} cannot be overridden", go_quote(pointer)),
            ));
        } else if !seen_paths.insert(pointer) {
            errors.push(FieldError::duplicate(pointer_path.clone(), pointer));
        }
    }

    // `null` is a value here: it is what a replace with `value: null` writes.
    let value = item.get("value");
    if let Some(op @ ("add" | "replace")) = op
        && value.is_none()
    {
        errors.push(FieldError::required(
            child(path, "value"),
            &format!("op {} needs a value", go_quote(op)),
        ));
    }

    // The controller builds exactly this operation; whatever it would refuse, refuse here.
    if errors.len() == before
        && let (Some(op), Some(pointer)) = (op, pointer)
    {
        let operation = match op {
            "remove" => json!({"op": op, "path": pointer}),
            _ => json!({"op": op, "path": pointer, "value": value.cloned().unwrap_or(Value::Null)}),
        };
        if let Err(error) = serde_json::from_value::<json_patch::PatchOperation>(operation) {
            errors.push(FieldError::invalid_detail(path, &error.to_string()));
        }
    }
}

/// RFC 6901: `~` only as `~0` or `~1`.
fn json_pointer_problem(pointer: &str) -> Option<&'static str> {
    let bytes = pointer.as_bytes();
    let bad_escape = bytes
        .iter()
        .enumerate()
        .any(|(i, b)| *b == b'~' && !matches!(bytes.get(i + 1), Some(b'0' | b'1')));
    bad_escape.then_some("must be a JSON pointer: \"~\" must be followed by \"0\" or \"1\"")
}

#[cfg(test)]
mod tests {
    use hubfed_api::defaulttypes::default_federated_type_configs;
    use hubfed_api::kubefedconfig::FEATURE_GATES;

    use super::*;

    fn strings(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    #[track_caller]
    fn assert_errors(errors: &[FieldError], expected: &[&str]) {
        assert_eq!(strings(errors), expected);
    }

    // --- field errors ---------------------------------------------------------------------

    #[test]
    fn field_errors_display_like_apimachinery() {
        assert_eq!(
            FieldError::required("spec.apiEndpoint", "").to_string(),
            "spec.apiEndpoint: Required value"
        );
        assert_eq!(
            FieldError::required("spec.x", "why").to_string(),
            "spec.x: Required value: why"
        );
        assert_eq!(
            FieldError::invalid(
                "spec.proxyURL",
                "ftp://x",
                "scheme must be http, https or socks5"
            )
            .to_string(),
            r#"spec.proxyURL: Invalid value: "ftp://x": scheme must be http, https or socks5"#
        );
        assert_eq!(
            FieldError::invalid_value("a", 0, "should be greater than 0").to_string(),
            "a: Invalid value: 0: should be greater than 0"
        );
        assert_eq!(
            FieldError::invalid_detail("a", "broken").to_string(),
            "a: Invalid value: broken"
        );
        assert_eq!(
            FieldError::not_supported("spec.scope", "Global", SCOPES).to_string(),
            r#"spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced""#
        );
        assert_eq!(
            FieldError::duplicate("a[1].name", "x").to_string(),
            r#"a[1].name: Duplicate value: "x""#
        );
        assert_eq!(
            FieldError::forbidden("p", "no").to_string(),
            "p: Forbidden: no"
        );
        assert_eq!(FieldError::required("", "").to_string(), "Required value");
    }

    #[test]
    fn summary_joins_like_an_aggregate() {
        let a = FieldError::required("a", "");
        let b = FieldError::required("b", "");
        assert_eq!(summary(&[]), "");
        assert_eq!(summary(std::slice::from_ref(&a)), "a: Required value");
        assert_eq!(
            summary(&[a.clone(), b.clone()]),
            "[a: Required value, b: Required value]"
        );
        // Duplicates collapse, and a single remaining message has no brackets.
        assert_eq!(summary(&[a.clone(), a.clone()]), "a: Required value");
        assert_eq!(
            summary(&[a.clone(), b, a]),
            "[a: Required value, b: Required value]"
        );
    }

    #[test]
    fn go_quote_escapes_like_strconv_quote() {
        assert_eq!(go_quote("plain"), r#""plain""#);
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(go_quote("\n\t\u{1}\u{7f}"), r#""\n\t\x01\x7f""#);
        assert_eq!(go_quote("ünï"), "\"ünï\"");
    }

    #[test]
    fn durations_print_like_go() {
        let cases: [(i128, &str); 10] = [
            (0, "0s"),
            (7, "7ns"),
            (1_500, "1.5\u{b5}s"),
            (300_000_000, "300ms"),
            (1_000_000_000, "1s"),
            (1_500_000_000, "1.5s"),
            (60_000_000_000, "1m0s"),
            (300_000_000_000, "5m0s"),
            (3_723_000_000_000, "1h2m3s"),
            (-10_000_000_000, "-10s"),
        ];
        for (nanos, expected) in cases {
            assert_eq!(go_duration_string(nanos), expected, "{nanos}");
        }
    }

    // --- DNS names ------------------------------------------------------------------------

    #[test]
    fn dns1123_subdomain() {
        for valid in ["a", "example.com", "a-b.c9", "0", "types.kubefed.io"] {
            assert!(is_dns1123_subdomain(valid).is_empty(), "{valid}");
        }
        assert!(is_dns1123_subdomain(&"a".repeat(253)).is_empty());
        for invalid in [
            "", "Example", "-a", "a-", "a..b", "a_b", ".a", "a.", "a b", "ä",
        ] {
            assert_eq!(is_dns1123_subdomain(invalid).len(), 1, "{invalid}");
        }
        assert_eq!(
            is_dns1123_subdomain("A"),
            [
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ]
        );
        assert_eq!(
            is_dns1123_subdomain(&"a".repeat(254)),
            ["must be no more than 253 characters"]
        );
        assert_eq!(is_dns1123_subdomain(&"A".repeat(254)).len(), 2);
    }

    #[test]
    fn dns1035_label() {
        for valid in ["v1", "v1beta1", "deployments", "a", "a-b"] {
            assert!(is_dns1035_label(valid).is_empty(), "{valid}");
        }
        assert!(is_dns1035_label(&"a".repeat(63)).is_empty());
        for invalid in ["", "1v", "a-", "A", "a.b", "a_b", "-a"] {
            assert_eq!(is_dns1035_label(invalid).len(), 1, "{invalid}");
        }
        assert_eq!(
            is_dns1035_label("1v"),
            [
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
            ]
        );
        assert_eq!(
            is_dns1035_label(&"a".repeat(64)),
            ["must be no more than 63 characters"]
        );
    }

    // --- FederatedTypeConfig --------------------------------------------------------------

    fn kubefed_deployments_ftc() -> Value {
        // As KubeFed's chart / `kubefedctl enable deployments.apps` writes it.
        json!({
            "apiVersion": "core.kubefed.io/v1beta1",
            "kind": "FederatedTypeConfig",
            "metadata": {"name": "deployments.apps", "namespace": "kube-federation-system"},
            "spec": {
                "federatedType": {
                    "group": "types.kubefed.io",
                    "kind": "FederatedDeployment",
                    "pluralName": "federateddeployments",
                    "scope": "Namespaced",
                    "version": "v1beta1",
                },
                "propagation": "Enabled",
                "targetType": {
                    "group": "apps",
                    "kind": "Deployment",
                    "pluralName": "deployments",
                    "scope": "Namespaced",
                    "version": "v1",
                },
            },
        })
    }

    fn ftc_with(path: &str, value: Value) -> Value {
        let mut object = kubefed_deployments_ftc();
        let (parent, member) = path.rsplit_once('/').unwrap();
        object
            .pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .unwrap()
            .insert(member.to_owned(), value);
        object
    }

    fn ftc_without(parent: &str, member: &str) -> Value {
        let mut object = kubefed_deployments_ftc();
        object
            .pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .unwrap()
            .remove(member);
        object
    }

    #[test]
    fn default_ftcs_validate() {
        let ftcs = default_federated_type_configs("kube-federation-system");
        assert!(!ftcs.is_empty());
        for ftc in ftcs {
            let name = ftc.metadata.name.clone().unwrap();
            assert_errors(&validate_federated_type_config(&name, &ftc.spec), &[]);
            let raw = serde_json::to_value(&ftc).unwrap();
            assert_errors(&validate_federated_type_config_value(&raw, false), &[]);
        }
    }

    #[test]
    fn kubefed_ftc_manifests_validate() {
        assert_errors(
            &validate_federated_type_config_value(&kubefed_deployments_ftc(), false),
            &[],
        );
        let namespaces = json!({
            "metadata": {"name": "namespaces"},
            "spec": {
                "targetType": {"version": "v1", "kind": "Namespace", "pluralName": "namespaces", "scope": "Cluster"},
                "propagation": "Enabled",
                "federatedType": {"group": "types.kubefed.io", "version": "v1beta1", "kind": "FederatedNamespace", "pluralName": "federatednamespaces", "scope": "Namespaced"},
                "statusType": {"kind": "FederatedNamespaceStatus", "scope": "Namespaced"},
                "statusCollection": "Disabled",
            },
        });
        assert_errors(
            &validate_federated_type_config_value(&namespaces, false),
            &[],
        );
    }

    #[test]
    fn ftc_name_must_match_target() {
        let object = ftc_with("/metadata/name", json!("deployments"));
        assert_errors(
            &validate_federated_type_config_value(&object, false),
            &[
                r#"metadata.name: Invalid value: "deployments": name must be 'TARGET_PLURAL_NAME(.TARGET_GROUP_NAME)', i.e. "deployments.apps""#,
            ],
        );
        let object = ftc_with("/spec/targetType/group", json!("extensions"));
        assert_eq!(
            validate_federated_type_config_value(&object, false).len(),
            1
        );
    }

    #[test]
    fn ftc_is_validated_after_kubefed_defaulting() {
        // Target plural and group come from the name, federated plural from the kind.
        let mut object = ftc_without("/spec/targetType", "pluralName");
        object["spec"]["targetType"]
            .as_object_mut()
            .unwrap()
            .remove("group");
        object["spec"]["federatedType"]
            .as_object_mut()
            .unwrap()
            .remove("pluralName");
        assert_errors(&validate_federated_type_config_value(&object, false), &[]);
    }

    #[test]
    fn ftc_api_resource_rules() {
        let cases = [
            (
                ftc_with("/spec/targetType/group", json!("Apps")),
                r#"spec.targetType.group: Invalid value: "Apps": a lowercase RFC 1123 subdomain"#,
            ),
            (
                ftc_with("/spec/targetType/version", json!("")),
                "spec.targetType.version: Required value",
            ),
            (
                ftc_without("/spec/targetType", "version"),
                "spec.targetType.version: Required value",
            ),
            (
                ftc_with("/spec/targetType/version", json!("V1")),
                r#"spec.targetType.version: Invalid value: "V1": a DNS-1035 label"#,
            ),
            (
                ftc_with("/spec/targetType/kind", json!("")),
                "spec.targetType.kind: Required value",
            ),
            (
                ftc_with("/spec/targetType/kind", json!("Deploy_ment")),
                r#"spec.targetType.kind: Invalid value: "Deploy_ment": a DNS-1035 label"#,
            ),
            (
                ftc_with(
                    "/spec/federatedType/pluralName",
                    json!("federated.deployments"),
                ),
                r#"spec.federatedType.pluralName: Invalid value: "federated.deployments": a DNS-1035 label"#,
            ),
            (
                ftc_with("/spec/federatedType/group", json!("")),
                "spec.federatedType.group: Required value",
            ),
            (
                ftc_with("/spec/federatedType/group", json!("types")),
                r#"spec.federatedType.group: Invalid value: "types": should be a domain with at least one dot"#,
            ),
            (
                ftc_with("/spec/targetType/scope", json!("Global")),
                r#"spec.targetType.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced""#,
            ),
            (
                ftc_with("/spec/targetType/scope", json!("")),
                "spec.targetType.scope: Required value",
            ),
            (
                ftc_without("/spec/federatedType", "scope"),
                "spec.federatedType.scope: Required value",
            ),
            (
                ftc_with("/spec/propagation", json!("On")),
                r#"spec.propagation: Unsupported value: "On": supported values: "Enabled", "Disabled""#,
            ),
            (
                ftc_without("/spec", "propagation"),
                "spec.propagation: Required value",
            ),
            (
                ftc_with("/spec/statusCollection", json!("")),
                "spec.statusCollection: Required value",
            ),
            (
                ftc_with("/spec/statusCollection", json!("Yes")),
                r#"spec.statusCollection: Unsupported value: "Yes": supported values: "Enabled", "Disabled""#,
            ),
            (
                ftc_with("/spec/targetType/version", json!(1)),
                r#"spec.targetType.version: Invalid value: "number": must be of type string"#,
            ),
            (
                ftc_with("/spec/targetType", json!("apps/v1")),
                r#"spec.targetType: Invalid value: "string": must be of type object"#,
            ),
        ];
        for (object, expected) in cases {
            let errors = strings(&validate_federated_type_config_value(&object, false));
            assert!(
                errors.iter().any(|e| e.starts_with(expected)),
                "{expected:?} not in {errors:#?}"
            );
        }
    }

    #[test]
    fn ftc_status_type_rules() {
        let object = ftc_with(
            "/spec/statusType",
            json!({"kind": "DeploymentStatus", "scope": "Namespaced", "group": "status"}),
        );
        assert_errors(
            &validate_federated_type_config_value(&object, false),
            &[
                r#"spec.statusType.group: Invalid value: "status": should be a domain with at least one dot"#,
            ],
        );
        // Group and version default to the federated type's.
        let object = ftc_with(
            "/spec/statusType",
            json!({"kind": "DeploymentStatus", "scope": "Namespaced"}),
        );
        assert_errors(&validate_federated_type_config_value(&object, false), &[]);
    }

    #[test]
    fn ftc_missing_target_reports_every_field() {
        let object = ftc_without("/spec", "targetType");
        assert_errors(
            &validate_federated_type_config_value(&object, false),
            &[
                // Plural and group are defaulted from the name.
                "spec.targetType.scope: Required value",
                "spec.targetType.version: Required value",
                "spec.targetType.kind: Required value",
            ],
        );
    }

    #[test]
    fn ftc_status_rules() {
        let ok = json!({"status": {"observedGeneration": 3, "propagationController": "Running", "statusController": "NotRunning"}});
        assert_errors(&validate_federated_type_config_value(&ok, true), &[]);
        let negative =
            json!({"status": {"observedGeneration": -1, "propagationController": "Running"}});
        assert_errors(
            &validate_federated_type_config_value(&negative, true),
            &["status.observedGeneration: Invalid value: -1: must be greater than or equal to 0"],
        );
        assert_errors(
            &validate_federated_type_config_value(&json!({}), true),
            &["status.propagationController: Required value"],
        );
        let bad = json!({"status": {"propagationController": "Stopped", "statusController": ""}});
        assert_errors(
            &validate_federated_type_config_value(&bad, true),
            &[
                r#"status.propagationController: Unsupported value: "Stopped": supported values: "Running", "NotRunning""#,
                "status.statusController: Required value",
            ],
        );
        // The status subresource does not look at the spec.
        let mut with_bad_spec = ftc_with("/metadata/name", json!("wrong"));
        with_bad_spec["status"] = ok["status"].clone();
        assert_errors(
            &validate_federated_type_config_value(&with_bad_spec, true),
            &[],
        );
    }

    // --- KubeFedCluster -------------------------------------------------------------------

    fn cluster(spec: Value) -> Value {
        json!({"apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedCluster", "metadata": {"name": "c1"}, "spec": spec})
    }

    fn cluster_spec_errors(spec: Value) -> Vec<String> {
        strings(&validate_kubefed_cluster_value(&cluster(spec), false))
    }

    fn endpoint_errors(endpoint: &str) -> Vec<String> {
        cluster_spec_errors(json!({"apiEndpoint": endpoint, "secretRef": {"name": "c1-token"}}))
    }

    #[test]
    fn kubefed_cluster_manifest_validates() {
        let object = cluster(json!({
            "apiEndpoint": "https://172.18.0.2:6443",
            "caBundle": "LS0tLS1CRUdJTg==",
            "secretRef": {"name": "cluster1-shfbm"},
            "disabledTLSValidations": ["SubjectName", "ValidityPeriod"],
            "proxyURL": "",
        }));
        assert_errors(&validate_kubefed_cluster_value(&object, false), &[]);
        let spec: KubeFedClusterSpec = serde_json::from_value(object["spec"].clone()).unwrap();
        assert_errors(&validate_kubefed_cluster(&spec, None), &[]);
    }

    #[test]
    fn api_endpoint_forms_accepted_by_client_go() {
        for endpoint in [
            "https://1.2.3.4:6443",
            "http://member:8080",
            "HTTPS://member",
            "https://member/",
            "https://member?x=y",
            "10.0.0.1:6443",
            "10.0.0.1",
            "localhost",
            "localhost:6443",
            "[::1]:6443",
            "https://[fd00::1]",
            "kubernetes.default.svc",
            "https://user@member:443",
            // A path prefix, as for an API server behind a path-routing proxy.
            "https://member/api",
            "http://member:8080/prefix/",
            "https://my.example.com:80/path/to/endpoint",
            "https://[fd00::1]:6443/a/b",
        ] {
            assert_eq!(
                endpoint_errors(endpoint),
                Vec::<String>::new(),
                "{endpoint}"
            );
        }
    }

    #[test]
    fn api_endpoint_rejections() {
        let cases = [
            ("", "spec.apiEndpoint: Required value"),
            (
                "ftp://member",
                r#"spec.apiEndpoint: Unsupported value: "ftp": supported values: "http", "https""#,
            ),
            (
                "member:abc",
                r#"spec.apiEndpoint: Invalid value: "member:abc": parse "https://member:abc": invalid port ":abc" after host"#,
            ),
            (
                // Only a URL with a scheme may carry a path.
                "member/api",
                r#"spec.apiEndpoint: Invalid value: "member/api": host must be a URL or a host:port pair: "member/api""#,
            ),
            (
                "member:6443/api",
                r#"spec.apiEndpoint: Invalid value: "member:6443/api": host must be a URL or a host:port pair: "member:6443/api""#,
            ),
            (
                "member:0",
                "spec.apiEndpoint: Invalid value: 0: must be between 1 and 65535, inclusive",
            ),
            (
                "https://member:65536",
                "spec.apiEndpoint: Invalid value: 65536: must be between 1 and 65535, inclusive",
            ),
            (
                "member:99999999999999999999",
                r#"spec.apiEndpoint: Invalid value: "99999999999999999999": error converting port to integer"#,
            ),
            (
                "mem ber:6443",
                r#"spec.apiEndpoint: Invalid value: "mem ber:6443": parse "https://mem ber:6443": invalid character " " in host name"#,
            ),
            (
                // As client-go: the scheme-less retry reads "https:" as the host.
                "https://mem ber",
                r#"spec.apiEndpoint: Invalid value: "https://mem ber": host must be a URL or a host:port pair: "https://mem ber""#,
            ),
            (
                "[::1",
                r#"spec.apiEndpoint: Invalid value: "[::1": parse "https://[::1": missing ']' in host"#,
            ),
            (
                "https://member\n",
                r#"spec.apiEndpoint: Invalid value: "https://member\n": parse "https://https://member\n": net/url: invalid control character in URL"#,
            ),
            (
                "https://%zz",
                r#"spec.apiEndpoint: Invalid value: "https://%zz": parse "https://https://%zz": invalid URL escape "%zz""#,
            ),
        ];
        for (endpoint, expected) in cases {
            assert_eq!(endpoint_errors(endpoint), [expected], "{endpoint}");
        }
    }

    // KubeFed's own apiEndpoint cases, the authority on what is accepted and refused:
    // `TestValidateAPIEndpoint` and `TestValidateKubeFedCluster` in
    // `pkg/apis/core/v1beta1/validation/validation_test.go` (kubernetes-sigs/kubefed), for
    // `validateAPIEndpoint` in `pkg/apis/core/v1beta1/validation/validation.go`. KubeFed
    // validates with the field path `apiEndpoint` and matches by substring; hubfed's path is
    // `spec.apiEndpoint`, so each KubeFed message is still a substring of hubfed's, which is
    // checked in full as well.

    /// KubeFed's successes: every scheme × host × port × path, except a path without a scheme.
    fn kubefed_accepted_api_endpoints() -> Vec<String> {
        let mut endpoints = Vec::new();
        for scheme in ["", "http://", "https://"] {
            for host in [
                "example.com",
                "my.example.com",
                "192.0.2.219",
                "[2001:db8:25a4:8d2::1]",
            ] {
                for port in ["", ":1", ":80", ":8080", ":65535"] {
                    for path in ["", "/", "/path/to/endpoint"] {
                        // "An empty protocol scheme with a URL path (e.g. /path/to/endpoint) is
                        // not supported so skip it."
                        if scheme.is_empty() && path == "/path/to/endpoint" {
                            continue;
                        }
                        endpoints.push(format!("{scheme}{host}{port}{path}"));
                    }
                }
            }
        }
        endpoints
    }

    #[test]
    fn kubefed_api_endpoint_successes() {
        let endpoints = kubefed_accepted_api_endpoints();
        assert_eq!(endpoints.len(), 160);
        for endpoint in &endpoints {
            assert_eq!(
                endpoint_errors(endpoint),
                Vec::<String>::new(),
                "{endpoint}"
            );
        }
    }

    #[test]
    fn kubefed_api_endpoint_errors() {
        // (apiEndpoint, KubeFed's expected substring, hubfed's full message)
        let cases = [
            (
                "",
                "apiEndpoint: Required value",
                "spec.apiEndpoint: Required value",
            ),
            (
                "https://",
                r#"apiEndpoint: Invalid value: "https://": host must be a URL or a host:port pair"#,
                r#"spec.apiEndpoint: Invalid value: "https://": host must be a URL or a host:port pair: "https://""#,
            ),
            (
                "example.com/path/to/somewhere",
                r#"apiEndpoint: Invalid value: "example.com/path/to/somewhere": host must be a URL or a host:port pair"#,
                r#"spec.apiEndpoint: Invalid value: "example.com/path/to/somewhere": host must be a URL or a host:port pair: "example.com/path/to/somewhere""#,
            ),
            (
                "192.0.2.35/path/to/somewhere",
                r#"apiEndpoint: Invalid value: "192.0.2.35/path/to/somewhere": host must be a URL or a host:port pair"#,
                r#"spec.apiEndpoint: Invalid value: "192.0.2.35/path/to/somewhere": host must be a URL or a host:port pair: "192.0.2.35/path/to/somewhere""#,
            ),
            (
                "tcp://example.com",
                r#"apiEndpoint: Unsupported value: "tcp""#,
                r#"spec.apiEndpoint: Unsupported value: "tcp": supported values: "http", "https""#,
            ),
            (
                "example.com:port80",
                "invalid port",
                r#"spec.apiEndpoint: Invalid value: "example.com:port80": parse "https://example.com:port80": invalid port ":port80" after host"#,
            ),
            (
                "example.com:-80",
                "invalid port",
                r#"spec.apiEndpoint: Invalid value: "example.com:-80": parse "https://example.com:-80": invalid port ":-80" after host"#,
            ),
            (
                "example.com:0",
                "apiEndpoint: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.apiEndpoint: Invalid value: 0: must be between 1 and 65535, inclusive",
            ),
            (
                "example.com:65536",
                "apiEndpoint: Invalid value: 65536: must be between 1 and 65535, inclusive",
                "spec.apiEndpoint: Invalid value: 65536: must be between 1 and 65535, inclusive",
            ),
        ];
        for (endpoint, kubefed, hubfed) in cases {
            let errors = endpoint_errors(endpoint);
            assert!(
                errors.iter().any(|error| error.contains(kubefed)),
                "{endpoint}: {errors:?} lacks {kubefed:?}"
            );
            assert_eq!(errors, [hubfed], "{endpoint}");
        }
    }

    /// KubeFed's `ValidKubeFedCluster` (`test/common/validation.go`).
    fn kubefed_valid_cluster() -> Value {
        let probe = "2021-06-29T11:14:40Z";
        let condition = |type_: &str, status: &str, reason: &str, message: &str| json!({"type": type_, "status": status, "lastProbeTime": probe, "lastTransitionTime": probe, "reason": reason, "message": message});
        json!({
            "apiVersion": "core.kubefed.io/v1beta1",
            "kind": "KubeFedCluster",
            "metadata": {"name": "validation-test-cluster"},
            "spec": {
                "apiEndpoint": "https://my.example.com:80/path/to/endpoint",
                "secretRef": {"name": "validation-unit-test-cluster-pw97k"},
            },
            "status": {
                "conditions": [
                    condition("Ready", "True", "ClusterReady", "/healthz responded with ok"),
                    condition("Ready", "False", "ClusterNotReady", "/healthz responded without ok"),
                    condition("Offline", "True", "ClusterNotReachable", "cluster is not reachable"),
                    condition("Offline", "False", "ClusterReachable", "cluster is reachable"),
                ],
                "zones": ["us-west1-a", "us-west1-b"],
                "region": "us-west1",
            },
        })
    }

    #[test]
    fn kubefed_cluster_validation_is_wired() {
        // KubeFed's TestValidateKubeFedCluster: its valid cluster passes, spec and status.
        let valid = kubefed_valid_cluster();
        for status_subresource in [false, true] {
            assert_errors(
                &validate_kubefed_cluster_value(&valid, status_subresource),
                &[],
            );
        }
        let spec: KubeFedClusterSpec = serde_json::from_value(valid["spec"].clone()).unwrap();
        let status: KubeFedClusterStatus = serde_json::from_value(valid["status"].clone()).unwrap();
        assert_errors(&validate_kubefed_cluster(&spec, Some(&status)), &[]);

        // ... and its two error cases, whose first error carries the message.
        let mut no_endpoint = kubefed_valid_cluster();
        no_endpoint["spec"]["apiEndpoint"] = json!("");
        let mut untyped_condition = kubefed_valid_cluster();
        untyped_condition["status"]["conditions"][1]["type"] = json!("");
        for (object, status_subresource, kubefed) in [
            (no_endpoint, false, "apiEndpoint: Required value"),
            (
                untyped_condition,
                true,
                "conditions[1].type: Required value",
            ),
        ] {
            let errors = strings(&validate_kubefed_cluster_value(&object, status_subresource));
            assert!(
                errors.first().is_some_and(|first| first.contains(kubefed)),
                "{errors:?} does not start with {kubefed:?}"
            );
        }
    }

    #[test]
    fn proxy_url_rules() {
        let with_proxy = |proxy: &str| {
            cluster_spec_errors(
                json!({"apiEndpoint": "https://m", "secretRef": {"name": "s"}, "proxyURL": proxy}),
            )
        };
        for ok in [
            "",
            "http://proxy:3128",
            "https://proxy",
            "socks5://proxy:1080",
        ] {
            assert_eq!(with_proxy(ok), Vec::<String>::new(), "{ok}");
        }
        assert_eq!(
            with_proxy("ftp://x"),
            [r#"spec.proxyURL: Invalid value: "ftp://x": scheme must be http, https or socks5"#]
        );
        assert_eq!(
            with_proxy("proxy:3128"),
            [r#"spec.proxyURL: Invalid value: "proxy:3128": scheme must be http, https or socks5"#]
        );
        assert_eq!(
            with_proxy("http://"),
            [r#"spec.proxyURL: Invalid value: "http://": host must be provided"#]
        );
        // Credentials never come back in the message, however the value fails.
        for endpoint in [
            "https://user:s3cret@member:bad",
            "https://user:s3cret@mem ber",
            "https://user:s3cret@member\n",
            "user:s3cret@member:bad",
        ] {
            let errors = endpoint_errors(endpoint);
            assert_eq!(errors.len(), 1, "{endpoint}");
            assert!(!errors[0].contains("s3cret"), "{errors:?}");
            assert!(errors[0].contains("xxxxx"), "{errors:?}");
        }
        let errors = with_proxy("http://user:s3cret@proxy:bad");
        assert_eq!(
            errors,
            [
                r#"spec.proxyURL: Invalid value: "http://user:xxxxx@proxy:bad": parse "http://user:xxxxx@proxy:bad": invalid port ":bad" after host"#
            ]
        );
    }

    #[test]
    fn secret_ref_and_tls_rules() {
        assert_eq!(
            cluster_spec_errors(json!({"apiEndpoint": "https://m", "secretRef": {}})),
            ["spec.secretRef.name: Required value"]
        );
        assert_eq!(
            cluster_spec_errors(json!({"apiEndpoint": "https://m"})),
            ["spec.secretRef.name: Required value"]
        );
        let errors = cluster_spec_errors(
            json!({"apiEndpoint": "https://m", "secretRef": {"name": "My_Secret"}}),
        );
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with(
                r#"spec.secretRef.name: Invalid value: "My_Secret": a lowercase RFC 1123 subdomain"#
            ),
            "{errors:?}"
        );
        assert_eq!(
            cluster_spec_errors(
                json!({"apiEndpoint": "https://m", "secretRef": {"name": "s"}, "disabledTLSValidations": ["*"]})
            ),
            Vec::<String>::new()
        );
        assert_eq!(
            cluster_spec_errors(
                json!({"apiEndpoint": "https://m", "secretRef": {"name": "s"}, "disabledTLSValidations": ["SubjectName", "*"]})
            ),
            [
                r#"spec.disabledTLSValidations: Invalid value: ["SubjectName", "*"]: when * is specified, it is expected to be the only option in list"#
            ]
        );
        assert_eq!(
            cluster_spec_errors(
                json!({"apiEndpoint": "https://m", "secretRef": {"name": "s"}, "disabledTLSValidations": ["Hostname", ""]})
            ),
            [
                r#"spec.disabledTLSValidations[0]: Unsupported value: "Hostname": supported values: "*", "SubjectName", "ValidityPeriod""#,
                "spec.disabledTLSValidations[1]: Required value",
            ]
        );
        assert_eq!(
            cluster_spec_errors(
                json!({"apiEndpoint": "https://m", "secretRef": {"name": "s"}, "caBundle": "not base64!"})
            ),
            ["spec.caBundle: Invalid value: must be base64-encoded bytes"]
        );
        assert_eq!(
            cluster_spec_errors(json!({"apiEndpoint": 443, "secretRef": {"name": "s"}})),
            [r#"spec.apiEndpoint: Invalid value: "number": must be of type string"#]
        );
        assert_eq!(
            strings(&validate_kubefed_cluster_value(
                &json!({"metadata": {}}),
                false
            )),
            [
                "spec.apiEndpoint: Required value",
                "spec.secretRef.name: Required value"
            ]
        );
    }

    #[test]
    fn cluster_status_rules() {
        let status = |conditions: Value| json!({"spec": {}, "status": {"conditions": conditions}});
        let ok = status(json!([
            {"type": "Ready", "status": "True", "lastProbeTime": "2024-01-01T00:00:00Z", "lastTransitionTime": "2024-01-01T00:00:00Z", "reason": "ClusterReady", "message": "/healthz responded with ok"},
            {"type": "Offline", "status": "False", "lastProbeTime": "2024-01-01T00:00:00Z"},
            {"type": "ConfigMalformed", "status": "Unknown", "lastProbeTime": "2024-01-01T00:00:00Z"},
        ]));
        assert_errors(&validate_kubefed_cluster_value(&ok, true), &[]);
        let typed: KubeFedClusterStatus = serde_json::from_value(ok["status"].clone()).unwrap();
        assert_errors(&validate_kubefed_cluster_status(&typed), &[]);
        assert_errors(&validate_kubefed_cluster_value(&json!({}), true), &[]);

        let bad = status(json!([
            {"type": "Healthy", "status": "Yes", "lastProbeTime": "2024-01-01T00:00:00Z"},
            {"type": "", "status": ""},
            {"type": "Ready", "status": "True", "lastProbeTime": "yesterday"},
            {"type": "Ready", "status": "True", "lastProbeTime": "0001-01-01T00:00:00Z"},
        ]));
        let errors = strings(&validate_kubefed_cluster_value(&bad, true));
        assert_eq!(errors.len(), 7, "{errors:#?}");
        // Shape problems come first; the broken time's placeholder is not reported again.
        assert_eq!(
            errors[0],
            "status.conditions[1].lastProbeTime: Required value"
        );
        assert!(
            errors[1].starts_with(r#"status.conditions[2].lastProbeTime: Invalid value: "yesterday": must be an RFC 3339 date-time"#),
            "{errors:#?}"
        );
        assert_eq!(
            errors[2..],
            [
                r#"status.conditions[0].type: Unsupported value: "Healthy": supported values: "Ready", "Offline", "ConfigMalformed""#,
                r#"status.conditions[0].status: Unsupported value: "Yes": supported values: "True", "False", "Unknown""#,
                "status.conditions[1].type: Required value",
                "status.conditions[1].status: Required value",
                // Go's zero time counts as unset.
                "status.conditions[3].lastProbeTime: Required value",
            ]
        );
    }

    // --- KubeFedConfig --------------------------------------------------------------------

    fn defaulted_config() -> Value {
        json!({
            "apiVersion": "core.kubefed.io/v1beta1",
            "kind": "KubeFedConfig",
            "metadata": {"name": "kubefed", "namespace": "kube-federation-system"},
            "spec": serde_json::to_value(KubeFedConfigSpec::with_defaults(ResourceScope::Cluster)).unwrap(),
        })
    }

    fn config_with(path: &str, value: Value) -> Value {
        let mut object = defaulted_config();
        let (parent, member) = path.rsplit_once('/').unwrap();
        object
            .pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .unwrap()
            .insert(member.to_owned(), value);
        object
    }

    fn config_without(path: &str) -> Value {
        let mut object = defaulted_config();
        let (parent, member) = path.rsplit_once('/').unwrap();
        object
            .pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .unwrap()
            .remove(member);
        object
    }

    fn config_errors(object: &Value) -> Vec<String> {
        strings(&validate_kubefed_config_value(object, None))
    }

    #[test]
    fn defaulted_configs_validate() {
        for scope in [ResourceScope::Cluster, ResourceScope::Namespaced] {
            let spec = KubeFedConfigSpec::with_defaults(scope);
            assert_errors(&validate_kubefed_config(&spec, None), &[]);
            assert_errors(&validate_kubefed_config(&spec, Some(&spec)), &[]);
        }
        assert_eq!(config_errors(&defaulted_config()), Vec::<String>::new());
    }

    #[test]
    fn kubefed_chart_config_validates() {
        let object = json!({
            "apiVersion": "core.kubefed.io/v1beta1",
            "kind": "KubeFedConfig",
            "metadata": {"name": "kubefed", "namespace": "kube-federation-system"},
            "spec": {
                "scope": "Cluster",
                "controllerDuration": {"availableDelay": "20s", "unavailableDelay": "60s", "cacheSyncTimeout": "5m"},
                "leaderElect": {"leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "5s", "resourceLock": "configmaps"},
                "clusterHealthCheck": {"period": "10s", "failureThreshold": 3, "successThreshold": 1, "timeout": "3s"},
                "syncController": {"maxConcurrentReconciles": 1, "adoptResources": "Enabled"},
                "statusController": {"maxConcurrentReconciles": 1},
                "featureGates": [
                    {"name": "PushReconciler", "configuration": "Enabled"},
                    {"name": "SchedulerPreferences", "configuration": "Enabled"},
                    {"name": "RawResourceStatusCollection", "configuration": "Disabled"},
                    {"name": "FederatedIngress", "configuration": "Disabled"},
                ],
            },
        });
        assert_eq!(config_errors(&object), Vec::<String>::new());
    }

    #[test]
    fn config_duration_rules() {
        let cases = [
            (
                config_with("/spec/controllerDuration/availableDelay", json!("0s")),
                "spec.controllerDuration.availableDelay: Invalid value: 0: should be greater than 0",
            ),
            (
                config_with("/spec/controllerDuration/unavailableDelay", json!("-1s")),
                "spec.controllerDuration.unavailableDelay: Invalid value: -1000000000: should be greater than 0",
            ),
            (
                config_with("/spec/controllerDuration/cacheSyncTimeout", json!("0")),
                "spec.controllerDuration.cacheSyncTimeout: Invalid value: 0: should be greater than 0",
            ),
            (
                config_without("/spec/controllerDuration/availableDelay"),
                "spec.controllerDuration.availableDelay: Required value",
            ),
            (
                config_with("/spec/clusterHealthCheck/period", json!("10")),
                r#"spec.clusterHealthCheck.period: Invalid value: "10": must be a Go duration such as "20s" or "1m30s": missing unit"#,
            ),
            (
                config_with("/spec/clusterHealthCheck/timeout", json!("3 s")),
                r#"spec.clusterHealthCheck.timeout: Invalid value: "3 s": must be a Go duration such as "20s" or "1m30s": unknown unit"#,
            ),
            (
                config_with("/spec/clusterHealthCheck/timeout", json!(3)),
                r#"spec.clusterHealthCheck.timeout: Invalid value: "number": must be of type string"#,
            ),
            (
                config_without("/spec/controllerDuration"),
                "spec.controllerDuration: Required value",
            ),
        ];
        for (object, expected) in cases {
            assert_eq!(config_errors(&object), [expected]);
        }
        // A missing cacheSyncTimeout is fine: KubeFed never required it.
        assert_eq!(
            config_errors(&config_without("/spec/controllerDuration/cacheSyncTimeout")),
            Vec::<String>::new()
        );
    }

    #[test]
    fn config_leader_election_rules() {
        let election = |lease: &str, renew: &str, retry: &str| {
            config_with(
                "/spec/leaderElect",
                json!({"leaseDuration": lease, "renewDeadline": renew, "retryPeriod": retry, "resourceLock": "endpoints"}),
            )
        };
        assert_eq!(
            config_errors(&election("15s", "10s", "5s")),
            Vec::<String>::new()
        );
        assert_eq!(
            config_errors(&election("10s", "10s", "5s")),
            [
                "spec.leaderElect.leaseDuration: Invalid value: 10s: leaseDuration must be greater than renewDeadline"
            ]
        );
        assert_eq!(
            config_errors(&election("1m", "6s", "5s")),
            [
                "spec.leaderElect.renewDeadline: Invalid value: 6s: renewDeadline must be greater than retryPeriod*JitterFactor(1.2)"
            ]
        );
        assert_eq!(
            config_errors(&election("1m", "6001ms", "5s")),
            Vec::<String>::new()
        );
        assert_eq!(
            config_errors(&election("1m", "90s", "5s")),
            [
                "spec.leaderElect.leaseDuration: Invalid value: 1m0s: leaseDuration must be greater than renewDeadline"
            ]
        );
        assert_eq!(
            config_errors(&config_without("/spec/leaderElect/resourceLock")),
            ["spec.leaderElect.resourceLock: Required value"]
        );
        assert_eq!(
            config_errors(&config_with(
                "/spec/leaderElect/resourceLock",
                json!("leases")
            )),
            [
                r#"spec.leaderElect.resourceLock: Unsupported value: "leases": supported values: "configmaps", "endpoints""#
            ]
        );
        assert_eq!(
            config_errors(&config_without("/spec/leaderElect/retryPeriod")),
            ["spec.leaderElect.retryPeriod: Required value"]
        );
        assert_eq!(
            config_errors(&config_without("/spec/leaderElect")),
            ["spec.leaderElect: Required value"]
        );
    }

    #[test]
    fn config_feature_gate_rules() {
        let gates = |gates: Value| config_with("/spec/featureGates", gates);
        assert_eq!(
            config_errors(&gates(json!([
                {"name": "PushReconciler", "configuration": "Enabled"},
                {"name": "PushReconciler", "configuration": "Disabled"},
                {"name": "Teleport", "configuration": "Enabled"},
                {"name": "", "configuration": "Enabled"},
                {"name": "SchedulerPreferences", "configuration": "On"},
                {"name": "RawResourceStatusCollection"},
            ]))),
            [
                r#"spec.featureGates[4].configuration: Unsupported value: "On": supported values: "Enabled", "Disabled""#,
                "spec.featureGates[5].configuration: Required value",
                r#"spec.featureGates[1].name: Duplicate value: "PushReconciler""#,
                r#"spec.featureGates[2].name: Unsupported value: "Teleport": supported values: "PushReconciler", "RawResourceStatusCollection", "SchedulerPreferences", "FederatedIngress""#,
                "spec.featureGates[3].name: Required value",
            ]
        );
        assert_eq!(
            config_errors(&config_without("/spec/featureGates")),
            ["spec.featureGates: Required value"]
        );
        for (name, _) in FEATURE_GATES {
            assert!(ACCEPTED_FEATURE_GATES.contains(name), "{name}");
        }
    }

    #[test]
    fn config_health_and_controller_rules() {
        let cases = [
            (
                config_with("/spec/clusterHealthCheck/failureThreshold", json!(0)),
                "spec.clusterHealthCheck.failureThreshold: Invalid value: 0: should be greater than 0",
            ),
            (
                config_with("/spec/clusterHealthCheck/successThreshold", json!(-2)),
                "spec.clusterHealthCheck.successThreshold: Invalid value: -2: should be greater than 0",
            ),
            (
                config_without("/spec/clusterHealthCheck/failureThreshold"),
                "spec.clusterHealthCheck.failureThreshold: Required value",
            ),
            (
                config_with("/spec/clusterHealthCheck/failureThreshold", json!(1.5)),
                r#"spec.clusterHealthCheck.failureThreshold: Invalid value: "number": must be of type integer"#,
            ),
            (
                config_without("/spec/clusterHealthCheck"),
                "spec.clusterHealthCheck: Required value",
            ),
            (
                config_with("/spec/syncController/maxConcurrentReconciles", json!(0)),
                "spec.syncController.maxConcurrentReconciles: Invalid value: 0: should be greater than 0",
            ),
            (
                config_with("/spec/statusController/maxConcurrentReconciles", json!(-1)),
                "spec.statusController.maxConcurrentReconciles: Invalid value: -1: should be greater than 0",
            ),
            (
                config_without("/spec/syncController/adoptResources"),
                "spec.syncController.adoptResources: Required value",
            ),
            (
                config_with("/spec/syncController/adoptResources", json!("Sometimes")),
                r#"spec.syncController.adoptResources: Unsupported value: "Sometimes": supported values: "Enabled", "Disabled""#,
            ),
            (
                config_without("/spec/syncController"),
                "spec.syncController: Required value",
            ),
            (
                config_with("/spec/scope", json!("Global")),
                r#"spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced""#,
            ),
            (config_without("/spec/scope"), "spec.scope: Required value"),
        ];
        for (object, expected) in cases {
            assert_eq!(config_errors(&object), [expected]);
        }
        // Optional sections KubeFed never required.
        assert_eq!(
            config_errors(&config_without("/spec/statusController")),
            Vec::<String>::new()
        );
        assert_eq!(
            config_errors(&config_without(
                "/spec/syncController/maxConcurrentReconciles"
            )),
            Vec::<String>::new()
        );
    }

    #[test]
    fn config_scope_is_immutable() {
        let old = KubeFedConfigSpec::with_defaults(ResourceScope::Cluster);
        let new = KubeFedConfigSpec::with_defaults(ResourceScope::Namespaced);
        assert_errors(
            &validate_kubefed_config(&new, Some(&old)),
            &[r#"spec.scope: Invalid value: "Namespaced": field is immutable"#],
        );
        let old_object = defaulted_config();
        let new_object = config_with("/spec/scope", json!("Namespaced"));
        assert_errors(
            &validate_kubefed_config_value(&new_object, Some(&old_object)),
            &[r#"spec.scope: Invalid value: "Namespaced": field is immutable"#],
        );
        assert_errors(
            &validate_kubefed_config_value(&old_object, Some(&old_object)),
            &[],
        );
        // An unsupported new scope is reported once, not also as a change.
        let bad_object = config_with("/spec/scope", json!("Global"));
        assert_eq!(
            strings(&validate_kubefed_config_value(
                &bad_object,
                Some(&new_object)
            ))
            .len(),
            1
        );
    }

    #[test]
    fn undefaulted_config_reports_what_defaulting_would_fill() {
        let object = json!({"spec": {"scope": "Cluster"}});
        assert_eq!(
            config_errors(&object),
            [
                "spec.controllerDuration: Required value",
                "spec.leaderElect: Required value",
                "spec.featureGates: Required value",
                "spec.clusterHealthCheck: Required value",
                "spec.syncController: Required value",
            ]
        );
    }

    #[test]
    fn defaulting_matches_with_defaults_and_builds_a_patch() {
        let minimal: KubeFedConfigSpec =
            serde_json::from_value(json!({"scope": "Namespaced"})).unwrap();
        let defaulted = default_kubefed_config(&minimal);
        assert_eq!(
            defaulted,
            KubeFedConfigSpec::with_defaults(ResourceScope::Namespaced)
        );
        assert_errors(&validate_kubefed_config(&defaulted, None), &[]);

        let object = json!({"metadata": {"name": "kubefed"}, "spec": {"scope": "Namespaced"}});
        let patch = default_kubefed_config_patch(&object).unwrap().unwrap();
        assert_eq!(
            patch,
            json!([{"op": "replace", "path": "/spec", "value": serde_json::to_value(&defaulted).unwrap()}])
        );
        let mut patched = object.clone();
        let patch: json_patch::Patch = serde_json::from_value(patch).unwrap();
        json_patch::patch(&mut patched, &patch).unwrap();
        assert_eq!(config_errors(&patched), Vec::<String>::new());

        // Already defaulted: nothing to patch.
        assert_eq!(
            default_kubefed_config_patch(&defaulted_config()).unwrap(),
            None
        );
        // Set values survive defaulting.
        let custom =
            json!({"spec": {"scope": "Cluster", "leaderElect": {"resourceLock": "endpoints"}}});
        let patch = default_kubefed_config_patch(&custom).unwrap().unwrap();
        assert_eq!(
            patch[0]["value"]["leaderElect"]["resourceLock"],
            "endpoints"
        );
        assert_eq!(patch[0]["value"]["leaderElect"]["leaseDuration"], "15s");
        // Unreadable specs are refused with field errors.
        let errors =
            default_kubefed_config_patch(&json!({"spec": {"scope": "Global"}})).unwrap_err();
        assert_errors(
            &errors,
            &[
                r#"spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced""#,
            ],
        );
        assert_errors(
            &default_kubefed_config_patch(&json!({})).unwrap_err(),
            &["spec.scope: Required value"],
        );
    }

    // --- federated objects ----------------------------------------------------------------

    fn federated(spec: Value) -> Value {
        json!({
            "apiVersion": "types.kubefed.io/v1beta1",
            "kind": "FederatedDeployment",
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": spec,
        })
    }

    fn federated_errors(spec: Value) -> Vec<String> {
        strings(&validate_federated_object(&federated(spec)))
    }

    #[test]
    fn kubefed_federated_objects_validate() {
        let spec = json!({
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
            },
            "placement": {
                "clusters": [{"name": "cluster1"}, {"name": "cluster2"}],
                "clusterSelector": {
                    "matchLabels": {"region": "eu"},
                    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}],
                },
            },
            "overrides": [
                {"clusterName": "cluster2", "clusterOverrides": [
                    {"path": "/spec/replicas", "value": 5},
                    {"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}},
                    {"op": "remove", "path": "/metadata/labels/app"},
                    {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "nginx:2"},
                    {"op": "replace", "path": "/apiVersion", "value": "apps/v1"},
                    {"path": "/metadata/labels/a~1b", "value": null},
                ]},
                {"clusterName": "cluster1"},
            ],
            "retainReplicas": true,
        });
        assert_eq!(federated_errors(spec), Vec::<String>::new());
        for spec in [
            json!({}),
            json!({"placement": {}}),
            json!({"placement": {"clusters": []}}),
            json!({"placement": {"clusterSelector": {}}}),
            json!({"template": null, "overrides": []}),
        ] {
            assert_eq!(
                federated_errors(spec.clone()),
                Vec::<String>::new(),
                "{spec}"
            );
        }
    }

    #[test]
    fn federated_spec_shape() {
        assert_errors(
            &validate_federated_object(&json!({"metadata": {"name": "x"}})),
            &["spec: Required value"],
        );
        assert_errors(
            &validate_federated_object(&json!({"spec": null})),
            &["spec: Required value"],
        );
        assert_errors(
            &validate_federated_object(&json!({"spec": []})),
            &[r#"spec: Invalid value: "array": must be of type object"#],
        );
        // A spec of the wrong type is one error, not one per missing member.
        assert_errors(
            &validate_federated_type_config_value(
                &json!({"metadata": {"name": "configmaps"}, "spec": "x"}),
                false,
            ),
            &[r#"spec: Invalid value: "string": must be of type object"#],
        );
        assert_errors(
            &validate_kubefed_config_value(&json!({"spec": ["Cluster"]}), None),
            &[r#"spec: Invalid value: "array": must be of type object"#],
        );
        assert_eq!(
            federated_errors(json!({"template": "x", "retainReplicas": "yes"})),
            [
                r#"spec.template: Invalid value: "string": must be of type object"#,
                r#"spec.retainReplicas: Invalid value: "string": must be of type boolean"#,
            ]
        );
    }

    #[test]
    fn federated_placement_rules() {
        assert_eq!(
            federated_errors(json!({"placement": []})),
            [r#"spec.placement: Invalid value: "array": must be of type object"#]
        );
        assert_eq!(
            federated_errors(json!({"placement": {"clusters": {"name": "a"}}})),
            [r#"spec.placement.clusters: Invalid value: "object": must be of type array"#]
        );
        let errors = federated_errors(json!({"placement": {"clusters": [
            {"name": "ok"}, {}, {"name": ""}, {"name": "Bad_Name"}, "c1", {"name": 7},
        ]}}));
        assert_eq!(errors.len(), 5, "{errors:#?}");
        assert_eq!(errors[0], "spec.placement.clusters[1].name: Required value");
        assert_eq!(errors[1], "spec.placement.clusters[2].name: Required value");
        assert!(
            errors[2].starts_with(r#"spec.placement.clusters[3].name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain"#),
            "{errors:#?}"
        );
        assert_eq!(
            errors[3..],
            [
                r#"spec.placement.clusters[4]: Invalid value: "string": must be of type object"#,
                r#"spec.placement.clusters[5].name: Invalid value: "number": must be of type string"#,
            ]
        );
    }

    #[test]
    fn federated_cluster_selector_rules() {
        let selector =
            |selector: Value| federated_errors(json!({"placement": {"clusterSelector": selector}}));
        assert_eq!(
            selector(json!("region=eu")),
            [r#"spec.placement.clusterSelector: Invalid value: "string": must be of type object"#]
        );
        assert_eq!(
            selector(json!({"matchLabels": {"region": "eu west", "tier": 1}})),
            [
                r#"spec.placement.clusterSelector.matchLabels[region]: Invalid value: invalid label value "eu west" for key "region": must be 63 characters or less, consist of alphanumeric characters, '-', '_' or '.', and start and end with an alphanumeric character"#,
                r#"spec.placement.clusterSelector.matchLabels[tier]: Invalid value: "number": must be of type string"#,
            ]
        );
        assert_eq!(
            selector(json!({"matchExpressions": [
                {"key": "region", "operator": "In", "values": ["eu"]},
                {"key": "region", "operator": "Gt", "values": ["1"]},
                {"key": "region", "operator": "In", "values": []},
                {"operator": "Exists"},
                {"key": "a", "operator": "In", "values": [1]},
                "region",
            ]})),
            [
                r#"spec.placement.clusterSelector.matchExpressions[1]: Invalid value: "Gt" is not a valid label selector operator"#,
                r#"spec.placement.clusterSelector.matchExpressions[2]: Invalid value: key "region": for 'In', 'NotIn' operators, values set can't be empty"#,
                "spec.placement.clusterSelector.matchExpressions[3].key: Required value",
                r#"spec.placement.clusterSelector.matchExpressions[4].values[0]: Invalid value: "number": must be of type string"#,
                r#"spec.placement.clusterSelector.matchExpressions[5]: Invalid value: "string": must be of type object"#,
            ]
        );
    }

    #[test]
    fn federated_override_rules() {
        let overrides = |overrides: Value| federated_errors(json!({"overrides": overrides}));
        assert_eq!(
            overrides(json!({"clusterName": "c1"})),
            [r#"spec.overrides: Invalid value: "object": must be of type array"#]
        );
        assert_eq!(
            overrides(json!([
                {"clusterName": "c1", "clusterOverrides": [{"path": "/metadata/labels/a", "value": "x"}]},
                {"clusterOverrides": []},
                {"clusterName": "c1"},
                {"clusterName": "c2", "clusterOverrides": {"path": "/x"}},
            ])),
            [
                "spec.overrides[1].clusterName: Required value",
                r#"spec.overrides[2].clusterName: Duplicate value: "c1""#,
                r#"spec.overrides[3].clusterOverrides: Invalid value: "object": must be of type array"#,
            ]
        );
        assert_eq!(
            overrides(json!([{"clusterName": "c1", "clusterOverrides": [
                {"path": "/spec/replicas", "value": 1},
                {"path": "/metadata/name", "value": "other"},
                {"op": "copy", "path": "/spec/a", "value": 1},
                {"op": "add", "path": "spec/b", "value": 1},
                {"op": "replace", "path": "/spec/c"},
                {"path": "/spec/d"},
                {"op": "remove"},
                {"op": "remove", "path": "/spec/replicas"},
                {"op": "add", "path": "/spec/e~2", "value": 1},
                {"op": 1, "path": "/kind", "value": "Other"},
                "remove",
            ]}])),
            [
                r#"spec.overrides[0].clusterOverrides[1].path: Forbidden: "/metadata/name" cannot be overridden"#,
                r#"spec.overrides[0].clusterOverrides[2].op: Unsupported value: "copy": supported values: "", "add", "remove", "replace""#,
                r#"spec.overrides[0].clusterOverrides[3].path: Invalid value: "spec/b": must be a JSON pointer starting with "/""#,
                r#"spec.overrides[0].clusterOverrides[4].value: Required value: op "replace" needs a value"#,
                r#"spec.overrides[0].clusterOverrides[5].value: Required value: op "replace" needs a value"#,
                "spec.overrides[0].clusterOverrides[6].path: Required value",
                r#"spec.overrides[0].clusterOverrides[7].path: Duplicate value: "/spec/replicas""#,
                r#"spec.overrides[0].clusterOverrides[8].path: Invalid value: "/spec/e~2": must be a JSON pointer: "~" must be followed by "0" or "1""#,
                r#"spec.overrides[0].clusterOverrides[9].op: Invalid value: "number": must be of type string"#,
                r#"spec.overrides[0].clusterOverrides[9].path: Forbidden: "/kind" cannot be overridden"#,
                r#"spec.overrides[0].clusterOverrides[10]: Invalid value: "string": must be of type object"#,
            ]
        );
        for path in FORBIDDEN_PATHS {
            let errors = overrides(
                json!([{"clusterName": "c1", "clusterOverrides": [{"op": "remove", "path": path}]}]),
            );
            assert_eq!(
                errors,
                [format!(
                    r#"spec.overrides[0].clusterOverrides[0].path: Forbidden: "{path}" cannot be overridden"#
                )]
            );
        }
        // Duplicate paths are per cluster.
        assert_eq!(
            overrides(json!([
                {"clusterName": "c1", "clusterOverrides": [{"path": "/spec/replicas", "value": 1}]},
                {"clusterName": "c2", "clusterOverrides": [{"path": "/spec/replicas", "value": 2}]},
            ])),
            Vec::<String>::new()
        );
    }

    #[test]
    fn accepted_overrides_are_accepted_by_the_controller() {
        let spec = json!({"overrides": [{"clusterName": "c1", "clusterOverrides": [
            {"path": "/spec/replicas", "value": 5},
            {"op": "add", "path": "/metadata/labels/a~1b", "value": "x"},
            {"op": "remove", "path": "/metadata/labels/app"},
        ]}]});
        assert_eq!(federated_errors(spec.clone()), Vec::<String>::new());
        let parsed: hubfed_api::federated::FederatedSpec = serde_json::from_value(spec).unwrap();
        let patch = crate::overrides::patch_for_cluster(parsed.overrides.as_deref(), "c1").unwrap();
        assert_eq!(patch.unwrap().0.len(), 3);
    }

    // --- consistency with the API types ---------------------------------------------------

    #[test]
    fn shape_enums_match_the_api_types() {
        for scope in SCOPES {
            serde_json::from_value::<ResourceScope>(json!(scope)).unwrap();
        }
        for mode in ENABLED_DISABLED {
            serde_json::from_value::<hubfed_api::federatedtypeconfig::EnabledDisabled>(json!(mode))
                .unwrap();
        }
        for status in CONTROLLER_STATUSES {
            serde_json::from_value::<hubfed_api::federatedtypeconfig::ControllerStatus>(json!(
                status
            ))
            .unwrap();
        }
        for lock in RESOURCE_LOCKS {
            serde_json::from_value::<hubfed_api::kubefedconfig::ResourceLockType>(json!(lock))
                .unwrap();
        }
        for tls in TLS_VALIDATIONS {
            let parsed: TlsValidation = serde_json::from_value(json!(tls)).unwrap();
            assert_eq!(tls_validation_str(parsed), *tls);
        }
        serde_json::from_value::<Time>(json!(PLACEHOLDER_TIME)).unwrap();
    }
}
