//! From a KubeFedCluster spec and its token to member client configurations (KubeFed's
//! `BuildClusterConfig`). Pure: nothing here talks to a cluster.
//!
//! `disabledTLSValidations` is honoured as KubeFed does: `*` turns verification off
//! (`accept_invalid_certs`); `SubjectName` and `ValidityPeriod` skip only the host-name check
//! and only the notBefore/notAfter check, the chain still verified against `caBundle` (or the
//! system roots). kube-rs has no setting for those two, so [`MemberConfigs::tls_relaxation`]
//! tells the pool to build such a member's clients with the verifier of [`super::tls`].

use std::fmt;
use std::net::Ipv6Addr;
use std::time::Duration;

use base64::Engine as _;
use hubfed_api::kubefedcluster::{KubeFedClusterSpec, TlsValidation};

use super::tls::TlsRelaxation;

/// Connecting, including the TLS handshake (KubeFed dials with 30s; a member that cannot
/// complete a handshake in 10s is not usable anyway).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest silence while waiting for a response on the request client.
const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest time to send one request.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// Why no client could be built for a cluster; shown in the `MalformedClusterConfig` event.
/// Never contains the token.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("the api endpoint is empty")]
    EmptyEndpoint,
    /// The endpoint is not echoed: a rejected one may carry credentials.
    #[error("invalid api endpoint: {reason}")]
    InvalidEndpoint { reason: &'static str },
    #[error("the cluster does not have a secret name")]
    MissingSecretName,
    #[error("secret {name:?} not found")]
    SecretNotFound { name: String },
    #[error("the secret {name:?} is missing a non-empty value for \"token\"")]
    MissingToken { name: String },
    #[error("the token in secret {name:?} is not valid UTF-8")]
    TokenNotUtf8 { name: String },
    #[error("invalid caBundle: {reason}")]
    InvalidCaBundle { reason: &'static str },
    /// The proxy URL is not echoed: it may carry credentials.
    #[error("invalid proxyURL: {reason}")]
    InvalidProxy { reason: &'static str },
    #[error("cannot build client")]
    Client {
        #[source]
        source: kube::Error,
    },
}

/// The `token` entry of a Secret, as far as building a client needs it.
#[derive(Clone, PartialEq, Eq)]
pub enum SecretToken {
    Present(String),
    /// Absent or empty.
    Missing,
    NotUtf8,
}

// Hand-written so that the token can never reach a log line through `{:?}`.
impl fmt::Debug for SecretToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Present(_) => f.write_str("Present(<redacted>)"),
            Self::Missing => f.write_str("Missing"),
            Self::NotUtf8 => f.write_str("NotUtf8"),
        }
    }
}

impl SecretToken {
    /// Reads the `token` key of a Secret's data. Surrounding whitespace is dropped: a token
    /// written from a file often ends in a newline, which is never part of a bearer token.
    pub fn from_data(value: Option<&[u8]>) -> Self {
        match value.map(std::str::from_utf8) {
            None => Self::Missing,
            Some(Err(_)) => Self::NotUtf8,
            Some(Ok(token)) => match token.trim() {
                "" => Self::Missing,
                token => Self::Present(token.to_owned()),
            },
        }
    }
}

/// Everything a member client is built from; a change in any of it means a new client.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientInputs {
    pub spec: KubeFedClusterSpec,
    /// `None` when the Secret does not exist.
    pub token: Option<SecretToken>,
}

/// The two configurations of one member: requests carry a read timeout so that a hung member
/// cannot hold a caller forever; watches must not have one (a quiet watch is silent for
/// minutes; kube-runtime's watcher has its own idle timeout).
pub struct MemberConfigs {
    pub request: kube::Config,
    pub watch: kube::Config,
    /// TLS checks to skip that `kube::Config` cannot express; `None`: kube's own verification
    /// (full, or none at all with `accept_invalid_certs`).
    pub tls_relaxation: Option<TlsRelaxation>,
}

impl fmt::Debug for MemberConfigs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemberConfigs")
            .field("cluster_url", &self.request.cluster_url)
            .field("tls_relaxation", &self.tls_relaxation)
            .finish_non_exhaustive()
    }
}

/// KubeFed's `BuildClusterConfig`, for kube-rs.
pub fn member_configs(inputs: &ClientInputs) -> Result<MemberConfigs, ConfigError> {
    let spec = &inputs.spec;
    let cluster_url = endpoint_url(&spec.api_endpoint)?;
    let secret_name = spec.secret_ref.name.as_str();
    if secret_name.is_empty() {
        return Err(ConfigError::MissingSecretName);
    }
    let token = match &inputs.token {
        None => {
            return Err(ConfigError::SecretNotFound {
                name: secret_name.to_owned(),
            });
        }
        Some(SecretToken::Missing) => {
            return Err(ConfigError::MissingToken {
                name: secret_name.to_owned(),
            });
        }
        Some(SecretToken::NotUtf8) => {
            return Err(ConfigError::TokenNotUtf8 {
                name: secret_name.to_owned(),
            });
        }
        Some(SecretToken::Present(token)) => token,
    };
    let root_cert = match &spec.ca_bundle {
        Some(bundle) if !bundle.0.is_empty() => Some(pem_certificates(&bundle.0)?),
        _ => None,
    };
    let proxy_url = proxy_url(&spec.proxy_url)?;

    let mut watch = kube::Config::new(cluster_url);
    watch.root_cert = root_cert;
    watch.proxy_url = proxy_url;
    watch.accept_invalid_certs = tls_verification_disabled(&spec.disabled_tls_validations);
    watch.auth_info.token = Some(token.clone().into());
    watch.connect_timeout = Some(CONNECT_TIMEOUT);
    watch.read_timeout = None;

    let mut request = watch.clone();
    request.read_timeout = Some(REQUEST_READ_TIMEOUT);
    // Count the read timeout from the request, not from when a pooled connection went idle.
    request.reset_reader_on_write = true;
    request.write_timeout = Some(WRITE_TIMEOUT);
    Ok(MemberConfigs {
        request,
        watch,
        tls_relaxation: tls_relaxation(&spec.disabled_tls_validations),
    })
}

/// `*` anywhere disables every check (KubeFed returns early on it).
pub fn tls_verification_disabled(disabled: &[TlsValidation]) -> bool {
    disabled.contains(&TlsValidation::All)
}

/// The checks `SubjectName` and `ValidityPeriod` skip; `None` when nothing is skipped or `*`
/// skips everything.
pub fn tls_relaxation(disabled: &[TlsValidation]) -> Option<TlsRelaxation> {
    if disabled.is_empty() || tls_verification_disabled(disabled) {
        return None;
    }
    Some(TlsRelaxation {
        skip_subject_name: disabled.contains(&TlsValidation::SubjectName),
        skip_validity_period: disabled.contains(&TlsValidation::ValidityPeriod),
    })
}

/// Normalises `apiEndpoint` (hostname, host:port, IP, IP:port or URL) to a URL, as client-go's
/// `DefaultServerURL` does, except that the default scheme is always https (client-go picks
/// http when no CA is configured). A URL may carry a path prefix, which every request of the
/// member's clients then goes under (an API server behind a path-routing proxy); a bare host
/// may not. A port, if any, is 1–65535.
pub fn endpoint_url(endpoint: &str) -> Result<http::Uri, ConfigError> {
    let endpoint = endpoint.trim();
    if endpoint.is_empty() {
        return Err(ConfigError::EmptyEndpoint);
    }
    let invalid = |reason| ConfigError::InvalidEndpoint { reason };
    let (url, had_scheme) = match endpoint.split_once("://") {
        Some((scheme, rest)) => {
            let scheme = scheme.to_ascii_lowercase();
            if scheme != "https" && scheme != "http" {
                return Err(invalid("scheme must be http or https"));
            }
            (format!("{scheme}://{rest}"), true)
        }
        // An unbracketed IPv6 address has colons that are not a port separator.
        None => match endpoint.parse::<Ipv6Addr>() {
            Ok(ip) => (format!("https://[{ip}]"), false),
            Err(_) => (format!("https://{endpoint}"), false),
        },
    };
    if url.contains('#') {
        return Err(invalid("fragments are not allowed"));
    }
    let uri: http::Uri = url.parse().map_err(|_| invalid("not a valid URL"))?;
    let Some(authority) = uri.authority() else {
        return Err(invalid("no host"));
    };
    if authority.host().is_empty() {
        return Err(invalid("no host"));
    }
    if authority.as_str().contains('@') {
        return Err(invalid("credentials in the URL are not supported"));
    }
    // `http::Uri` takes any characters after the host's colon; Go's `url.Parse` only digits,
    // and KubeFed only ports 1–65535. A lone colon is no port.
    let port = &authority.as_str()[authority.host().len()..];
    if let Some(digits) = port.strip_prefix(':').filter(|digits| !digits.is_empty())
        && !digits
            .parse::<u16>()
            .is_ok_and(|port| port > 0 && digits.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(invalid("the port must be a number from 1 to 65535"));
    }
    if uri.query().is_some() {
        return Err(invalid("queries are not allowed"));
    }
    if !had_scheme && !matches!(uri.path(), "" | "/") {
        return Err(invalid("must be a URL or a host:port pair"));
    }
    Ok(uri)
}

/// Parses `proxyURL` (http, https or socks5); empty means no proxy.
pub fn proxy_url(value: &str) -> Result<Option<http::Uri>, ConfigError> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    let invalid = |reason| ConfigError::InvalidProxy { reason };
    let Some((scheme, rest)) = value.split_once("://") else {
        return Err(invalid("missing scheme (http, https or socks5)"));
    };
    let scheme = scheme.to_ascii_lowercase();
    if !matches!(scheme.as_str(), "http" | "https" | "socks5") {
        return Err(invalid("scheme must be http, https or socks5"));
    }
    let uri: http::Uri = format!("{scheme}://{rest}")
        .parse()
        .map_err(|_| invalid("not a valid URL"))?;
    if uri.host().is_none_or(str::is_empty) {
        return Err(invalid("no host"));
    }
    Ok(Some(uri))
}

const PEM_BEGIN: &str = "-----BEGIN ";
const PEM_END: &str = "-----END ";
const PEM_DASHES: &str = "-----";

/// The DER certificates of a PEM bundle, like Go's `AppendCertsFromPEM`: blocks other than
/// `CERTIFICATE` and blocks with headers are skipped; no certificate at all is an error.
pub fn pem_certificates(pem: &[u8]) -> Result<Vec<Vec<u8>>, ConfigError> {
    let text = String::from_utf8_lossy(pem);
    let mut rest: &str = &text;
    let mut certificates = Vec::new();
    while let Some(start) = rest.find(PEM_BEGIN) {
        let after_begin = &rest[start + PEM_BEGIN.len()..];
        let Some(label_end) = after_begin.find(PEM_DASHES) else {
            break;
        };
        let label = &after_begin[..label_end];
        let body_and_rest = &after_begin[label_end + PEM_DASHES.len()..];
        let end_marker = format!("{PEM_END}{label}{PEM_DASHES}");
        let Some(body_end) = body_and_rest.find(&end_marker) else {
            return Err(ConfigError::InvalidCaBundle {
                reason: "unterminated PEM block",
            });
        };
        let body = &body_and_rest[..body_end];
        rest = &body_and_rest[body_end + end_marker.len()..];
        if label != "CERTIFICATE" || body.contains(':') {
            continue;
        }
        let encoded: String = body.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|_| ConfigError::InvalidCaBundle {
                reason: "a CERTIFICATE block is not valid base64",
            })?;
        if der.is_empty() {
            return Err(ConfigError::InvalidCaBundle {
                reason: "empty CERTIFICATE block",
            });
        }
        certificates.push(der);
    }
    if certificates.is_empty() {
        return Err(ConfigError::InvalidCaBundle {
            reason: "no PEM CERTIFICATE block",
        });
    }
    Ok(certificates)
}

/// An error and its sources on one line, `outer: inner: innermost`.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        // Some wrappers repeat their source's text; keep the line readable.
        if !message.ends_with(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests;
