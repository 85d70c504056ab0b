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
        pem_certificates(b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----").is_err()
    );
    assert!(pem_certificates(b"-----BEGIN CERTIFICATE-----\nAQID\n").is_err());
    // Only a key: nothing to trust.
    assert!(
        pem_certificates(b"-----BEGIN PRIVATE KEY-----\nAQID\n-----END PRIVATE KEY-----").is_err()
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
                    let uri = endpoint_url(&endpoint).unwrap_or_else(|e| panic!("{endpoint}: {e}"));
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
