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
mod tests {
    use super::*;
    use hubfed_api::kubefedcluster::LocalSecretReference;
    use k8s_openapi::ByteString;

    fn url(endpoint: &str) -> String {
        endpoint_url(endpoint).unwrap().to_string()
    }

    #[test]
    fn endpoint_forms_normalise_to_urls() {
        assert_eq!(url("member.example.com"), "https://member.example.com/");
        assert_eq!(
            url("member.example.com:6443"),
            "https://member.example.com:6443/"
        );
        assert_eq!(url("10.0.0.1"), "https://10.0.0.1/");
        assert_eq!(url("10.0.0.1:6443"), "https://10.0.0.1:6443/");
        assert_eq!(url("[::1]:6443"), "https://[::1]:6443/");
        assert_eq!(url("fd00::1"), "https://[fd00::1]/");
        assert_eq!(url("https://127.0.0.1:6443"), "https://127.0.0.1:6443/");
        assert_eq!(url("http://member:8080"), "http://member:8080/");
        assert_eq!(url("HTTPS://member"), "https://member/");
        assert_eq!(url(" https://member:6443/ "), "https://member:6443/");
        assert_eq!(
            url("https://my.example.com:80/path/to/endpoint"),
            "https://my.example.com:80/path/to/endpoint"
        );
    }

    #[test]
    fn bad_endpoints_are_rejected() {
        for endpoint in [
            "",
            "   ",
            "ftp://member",
            "https://",
            "member/prefix",
            "https://user:secret@member",
            "https://member?x=1",
            "https://member#frag",
            "https://mem ber",
        ] {
            assert!(endpoint_url(endpoint).is_err(), "{endpoint:?} should fail");
        }
    }

    #[test]
    fn proxy_urls() {
        assert_eq!(proxy_url("").unwrap(), None);
        assert_eq!(
            proxy_url("http://proxy:3128").unwrap().unwrap().to_string(),
            "http://proxy:3128/"
        );
        assert_eq!(
            proxy_url("https://proxy").unwrap().unwrap().scheme_str(),
            Some("https")
        );
        assert_eq!(
            proxy_url("SOCKS5://proxy:1080")
                .unwrap()
                .unwrap()
                .scheme_str(),
            Some("socks5")
        );
        for bad in ["proxy:3128", "ftp://proxy", "socks4://proxy", "http://"] {
            assert!(proxy_url(bad).is_err(), "{bad:?} should fail");
        }
    }

    const CERT_BODY: &str = "MIIBszCCAVmgAwIBAgIUXo5Y\nAAECAwQFBgcICQ==";

    #[test]
    fn pem_bundle_yields_certificate_blocks_only() {
        let pem = format!(
            "junk before\n-----BEGIN CERTIFICATE-----\n{CERT_BODY}\n-----END CERTIFICATE-----\n\
             -----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n\
             -----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n"
        );
        let certs = pem_certificates(pem.as_bytes()).unwrap();
        assert_eq!(certs.len(), 2);
        assert_eq!(certs[1], vec![1, 2, 3]);
    }

    #[test]
    fn pem_bundle_errors() {
        assert!(pem_certificates(b"").is_err());
        assert!(pem_certificates(b"not pem at all").is_err());
        assert!(
            pem_certificates(b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----")
                .is_err()
        );
        assert!(pem_certificates(b"-----BEGIN CERTIFICATE-----\nAQID\n").is_err());
        // Only a key: nothing to trust.
        assert!(
            pem_certificates(b"-----BEGIN PRIVATE KEY-----\nAQID\n-----END PRIVATE KEY-----")
                .is_err()
        );
    }

    #[test]
    fn secret_token_reading() {
        assert_eq!(SecretToken::from_data(None), SecretToken::Missing);
        assert_eq!(SecretToken::from_data(Some(b"")), SecretToken::Missing);
        assert_eq!(SecretToken::from_data(Some(b" \n")), SecretToken::Missing);
        assert_eq!(
            SecretToken::from_data(Some(&[0xff, 0xfe])),
            SecretToken::NotUtf8
        );
        assert_eq!(
            SecretToken::from_data(Some(b"abc.def\n")),
            SecretToken::Present("abc.def".to_owned())
        );
        assert_eq!(
            format!("{:?}", SecretToken::Present("hunter2".to_owned())),
            "Present(<redacted>)"
        );
    }

    fn spec(endpoint: &str) -> KubeFedClusterSpec {
        KubeFedClusterSpec {
            api_endpoint: endpoint.to_owned(),
            ca_bundle: None,
            secret_ref: LocalSecretReference {
                name: "member-secret".to_owned(),
            },
            disabled_tls_validations: Vec::new(),
            proxy_url: String::new(),
            sync_mode: Default::default(),
        }
    }

    fn inputs(spec: KubeFedClusterSpec) -> ClientInputs {
        ClientInputs {
            spec,
            token: Some(SecretToken::Present("tok".to_owned())),
        }
    }

    #[test]
    fn configs_carry_endpoint_ca_proxy_and_timeouts() {
        let mut spec = spec("127.0.0.1:6443");
        spec.ca_bundle = Some(ByteString(
            b"-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n".to_vec(),
        ));
        spec.proxy_url = "socks5://proxy:1080".to_owned();
        let configs = member_configs(&inputs(spec)).unwrap();
        for config in [&configs.request, &configs.watch] {
            assert_eq!(config.cluster_url.to_string(), "https://127.0.0.1:6443/");
            assert_eq!(config.root_cert, Some(vec![vec![1, 2, 3]]));
            assert_eq!(
                config.proxy_url.as_ref().map(ToString::to_string),
                Some("socks5://proxy:1080/".to_owned())
            );
            assert!(!config.accept_invalid_certs);
            assert!(config.auth_info.token.is_some());
            assert_eq!(config.connect_timeout, Some(CONNECT_TIMEOUT));
        }
        assert_eq!(configs.request.read_timeout, Some(REQUEST_READ_TIMEOUT));
        assert_eq!(configs.watch.read_timeout, None);
        let debug = format!("{configs:?}");
        assert!(!debug.contains("tok\""), "{debug}");
    }

    /// An API server behind a path-routing proxy (KubeFed's `ValidKubeFedCluster` endpoint):
    /// the path stays in the cluster URL of both clients.
    #[test]
    fn endpoint_path_is_kept_in_the_cluster_url() {
        for (endpoint, expected) in [
            (
                "https://my.example.com:80/path/to/endpoint",
                "https://my.example.com:80/path/to/endpoint",
            ),
            (
                "https://127.0.0.1:6443/path/to/endpoint/",
                "https://127.0.0.1:6443/path/to/endpoint/",
            ),
            ("http://[::1]:8080/a", "http://[::1]:8080/a"),
        ] {
            let configs = member_configs(&inputs(spec(endpoint))).unwrap();
            assert_eq!(configs.request.cluster_url.to_string(), expected);
            assert_eq!(configs.watch.cluster_url.to_string(), expected);
        }
    }

    /// Every endpoint KubeFed's validation accepts (`TestValidateAPIEndpoint` in KubeFed's
    /// `pkg/apis/core/v1beta1/validation/validation_test.go`) yields a client URL, its path
    /// kept; those it refuses do not.
    #[test]
    fn kubefed_endpoints_build_clients() {
        for scheme in ["", "http://", "https://"] {
            for host in [
                "example.com",
                "my.example.com",
                "192.0.2.219",
                "[2001:db8:25a4:8d2::1]",
            ] {
                for port in ["", ":1", ":80", ":8080", ":65535"] {
                    for path in ["", "/", "/path/to/endpoint"] {
                        if scheme.is_empty() && path == "/path/to/endpoint" {
                            continue;
                        }
                        let endpoint = format!("{scheme}{host}{port}{path}");
                        let uri =
                            endpoint_url(&endpoint).unwrap_or_else(|e| panic!("{endpoint}: {e}"));
                        let scheme = if scheme.is_empty() {
                            "https://"
                        } else {
                            scheme
                        };
                        let path = if path.is_empty() { "/" } else { path };
                        assert_eq!(uri.to_string(), format!("{scheme}{host}{port}{path}"));
                    }
                }
            }
        }
        for endpoint in [
            "https://",
            "example.com/path/to/somewhere",
            "192.0.2.35/path/to/somewhere",
            "tcp://example.com",
            "example.com:port80",
            "example.com:-80",
            "example.com:0",
            "example.com:65536",
        ] {
            assert!(endpoint_url(endpoint).is_err(), "{endpoint} should fail");
        }
    }

    /// The member client sends every request, the health probe's `/healthz` and API calls
    /// alike, under the endpoint's path.
    #[tokio::test]
    async fn member_requests_go_under_the_endpoint_path() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}/path/to/endpoint", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let mut request_lines = Vec::new();
            for _ in 0..2 {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    head.push(stream.read_u8().await.unwrap());
                }
                let head = String::from_utf8(head).unwrap();
                let line = head.lines().next().unwrap_or_default().to_owned();
                let body = if line.contains("/healthz") {
                    "ok"
                } else {
                    r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"kube-system"}}"#
                };
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                stream.write_all(response.as_bytes()).await.unwrap();
                request_lines.push(line);
            }
            request_lines
        });

        let configs = member_configs(&inputs(spec(&endpoint))).unwrap();
        let client = kube::Client::try_from(configs.request).unwrap();
        let healthz = http::Request::get("/healthz").body(Vec::new()).unwrap();
        assert_eq!(client.request_text(healthz).await.unwrap(), "ok");
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
        namespaces.get("kube-system").await.unwrap();
        assert_eq!(
            server.await.unwrap(),
            [
                "GET /path/to/endpoint/healthz HTTP/1.1",
                "GET /path/to/endpoint/api/v1/namespaces/kube-system HTTP/1.1",
            ]
        );
    }

    #[test]
    fn star_turns_verification_off() {
        let mut star = spec("https://member");
        star.disabled_tls_validations = vec![TlsValidation::All];
        let configs = member_configs(&inputs(star)).unwrap();
        assert!(configs.request.accept_invalid_certs);
        assert!(configs.watch.accept_invalid_certs);
        assert_eq!(configs.tls_relaxation, None);

        let configs = member_configs(&inputs(spec("https://member"))).unwrap();
        assert!(!configs.request.accept_invalid_certs);
        assert_eq!(configs.tls_relaxation, None);
    }

    #[test]
    fn subject_name_and_validity_period_relax_single_checks() {
        use TlsValidation::{SubjectName, ValidityPeriod};
        let relaxation = |skip_subject_name, skip_validity_period| {
            Some(TlsRelaxation {
                skip_subject_name,
                skip_validity_period,
            })
        };
        for (disabled, expected) in [
            (vec![SubjectName], relaxation(true, false)),
            (vec![ValidityPeriod], relaxation(false, true)),
            (vec![ValidityPeriod, SubjectName], relaxation(true, true)),
        ] {
            let mut partial = spec("https://member");
            partial.disabled_tls_validations = disabled.clone();
            let configs = member_configs(&inputs(partial)).unwrap();
            assert!(!configs.request.accept_invalid_certs, "{disabled:?}");
            assert!(!configs.watch.accept_invalid_certs, "{disabled:?}");
            assert_eq!(configs.tls_relaxation, expected, "{disabled:?}");
        }
        assert_eq!(tls_relaxation(&[]), None);
        assert_eq!(tls_relaxation(&[TlsValidation::All]), None);
    }

    #[test]
    fn malformed_inputs_are_errors() {
        let missing_secret = ClientInputs {
            spec: spec("https://member"),
            token: None,
        };
        assert!(matches!(
            member_configs(&missing_secret),
            Err(ConfigError::SecretNotFound { .. })
        ));
        let missing_token = ClientInputs {
            spec: spec("https://member"),
            token: Some(SecretToken::Missing),
        };
        assert!(matches!(
            member_configs(&missing_token),
            Err(ConfigError::MissingToken { .. })
        ));
        let mut no_name = spec("https://member");
        no_name.secret_ref.name.clear();
        assert!(matches!(
            member_configs(&inputs(no_name)),
            Err(ConfigError::MissingSecretName)
        ));
        assert!(matches!(
            member_configs(&inputs(spec(""))),
            Err(ConfigError::EmptyEndpoint)
        ));
        let mut bad_ca = spec("https://member");
        bad_ca.ca_bundle = Some(ByteString(b"garbage".to_vec()));
        assert!(matches!(
            member_configs(&inputs(bad_ca)),
            Err(ConfigError::InvalidCaBundle { .. })
        ));
        let mut bad_proxy = spec("https://member");
        bad_proxy.proxy_url = "ftp://proxy".to_owned();
        assert!(matches!(
            member_configs(&inputs(bad_proxy)),
            Err(ConfigError::InvalidProxy { .. })
        ));
    }

    #[test]
    fn error_chain_joins_sources() {
        let inner = std::io::Error::other("connection refused");
        let outer = ConfigError::Client {
            source: kube::Error::Service(Box::new(inner)),
        };
        let text = error_chain(&outer);
        assert!(text.starts_with("cannot build client: "), "{text}");
        assert!(text.ends_with("connection refused"), "{text}");
    }
}
