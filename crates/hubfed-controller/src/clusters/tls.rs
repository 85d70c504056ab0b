//! Clients assembled from kube's own pieces — its rustls configuration, proxy connectors,
//! timeouts, base-URI, retry, auth and header layers, as in `kube::Client::try_from` — where
//! kube's stack cannot do what the controller needs:
//!
//! - KubeFedCluster `disabledTLSValidations` short of `*`: `SubjectName` and `ValidityPeriod`
//!   (KubeFed's `CustomizeCertificateValidation`). kube-rs knows only all-or-nothing
//!   verification (`accept_invalid_certs`, used for `*`); the server certificate verifier
//!   here is [`RelaxedVerifier`].
//! - HTTP/2 for a member's watches and for everything the controller asks of the hub (kube
//!   speaks HTTP/1.1 only): all of them share one connection instead of holding one each.
//! - Idle connections closed after [`IDLE_CONNECTION_TIMEOUT`] (kube's pool has no timer and
//!   keeps every connection a burst opened).
//!
//! Both clients of a member — requests (HTTP/1.1) and watches — and the controller's and the
//! agent's hub client ([`hub_client`]) are built here.

use std::sync::Arc;
use std::time::Duration;

use http::Uri;
use hyper::rt::{Read, Write};
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::proxy::{SocksV5, Tunnel};
use hyper_util::client::legacy::connect::{Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ConfigExt as _, RustlsTlsError};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore};
use tower::retry::RetryLayer;
use tower::{BoxError, Service, ServiceBuilder};

/// The hub client of the controller and of the agent: HTTP/2, so that the hub's watches —
/// several per federated type, open all the time — and its requests share one connection, as
/// client-go's do (kube-apiserver allows 1,000 streams on a connection), rather than holding
/// a connection each with its TLS state and buffers (~50 KiB).
pub fn hub_client(config: &kube::Config) -> Result<kube::Client, kube::Error> {
    client(config, None, true)
}

/// The checks a member's `disabledTLSValidations` turns off, short of `*`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlsRelaxation {
    /// `SubjectName`: accept a certificate that is not valid for the endpoint's host.
    pub skip_subject_name: bool,
    /// `ValidityPeriod`: accept a certificate outside its notBefore/notAfter window.
    pub skip_validity_period: bool,
}

/// Validity windows tried before giving up: the leaf's and those of a few intermediates.
const VALIDITY_ATTEMPTS: usize = 4;

/// rustls' WebPKI verifier, with the checks of a [`TlsRelaxation`] skipped. The chain must
/// still lead to one of the roots.
///
/// - `SubjectName`: rustls checks the name only after the chain has verified, so a name
///   error means everything else passed and is accepted as such.
/// - `ValidityPeriod`: webpki checks each certificate's validity before it looks for the
///   issuer, so a validity error says nothing about the chain and cannot simply be accepted.
///   Like KubeFed (which verifies at the leaf's notBefore), the chain is verified again at a
///   time within the offending certificate's window, taken from the error.
#[derive(Debug)]
pub struct RelaxedVerifier {
    inner: Arc<WebPkiServerVerifier>,
    relaxation: TlsRelaxation,
}

impl RelaxedVerifier {
    /// Trusts `roots` (DER), or the system's roots when there are none (as kube does on
    /// Linux, where its platform verifier is WebPKI over the native roots).
    pub fn new(
        roots: Option<&[Vec<u8>]>,
        provider: Arc<CryptoProvider>,
        relaxation: TlsRelaxation,
    ) -> Result<Self, RustlsTlsError> {
        let add_error = |error: rustls::Error| RustlsTlsError::AddRootCertificate(Box::new(error));
        let mut store = RootCertStore::empty();
        match roots {
            Some(roots) => {
                for der in roots {
                    store
                        .add(CertificateDer::from(der.clone()))
                        .map_err(add_error)?;
                }
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                store.add_parsable_certificates(native.certs);
                if store.is_empty() {
                    return Err(RustlsTlsError::NoValidNativeRootCA(std::io::Error::other(
                        "no CA certificates could be loaded from the system",
                    )));
                }
            }
        }
        let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
            .build()
            .map_err(|error| RustlsTlsError::AddRootCertificate(Box::new(error)))?;
        Ok(Self { inner, relaxation })
    }
}

impl ServerCertVerifier for RelaxedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let mut at = now;
        let mut attempts = 1;
        loop {
            let result = self.inner.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                at,
            );
            let Err(rustls::Error::InvalidCertificate(error)) = &result else {
                return result;
            };
            let retry_at = match error {
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. }
                    if self.relaxation.skip_subject_name =>
                {
                    return Ok(ServerCertVerified::assertion());
                }
                CertificateError::ExpiredContext { not_after, .. } => *not_after,
                CertificateError::NotValidYetContext { not_before, .. } => *not_before,
                // `Expired` without context is a certificate whose notAfter precedes its
                // notBefore: no time is inside it, and accepting it would skip the chain.
                _ => return result,
            };
            if !self.relaxation.skip_validity_period || attempts >= VALIDITY_ATTEMPTS {
                return result;
            }
            attempts += 1;
            at = retry_at;
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }

    fn root_hint_subjects(&self) -> Option<&[DistinguishedName]> {
        self.inner.root_hint_subjects()
    }
}

/// A client for `config`, as `kube::Client::try_from(config)` builds it — proxy (`http`,
/// `https`, `socks5`), connect/read/write timeouts, base URI, kube's default retry, bearer
/// token, headers — except that the member's certificate is verified with a
/// [`RelaxedVerifier`] when `relaxation` is given, and that with `http2` the client offers
/// HTTP/2 (ALPN `h2`, then `http/1.1`): every request then shares one connection, kept
/// alive by pings ([`H2_PING_INTERVAL`], [`H2_PING_TIMEOUT`]), so that a connection that
/// died silently fails its requests within 45 s. Idle connections are closed after
/// [`IDLE_CONNECTION_TIMEOUT`].
pub fn client(
    config: &kube::Config,
    relaxation: Option<TlsRelaxation>,
    http2: bool,
) -> Result<kube::Client, kube::Error> {
    let mut tls = config.rustls_client_config()?;
    if let Some(relaxation) = relaxation {
        let provider = Arc::clone(tls.crypto_provider());
        let verifier = RelaxedVerifier::new(config.root_cert.as_deref(), provider, relaxation)
            .map_err(kube::Error::RustlsTls)?;
        tls.dangerous().set_certificate_verifier(Arc::new(verifier));
    }

    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    match config.proxy_url.as_ref() {
        None => assemble(config, tls, tcp, http2),
        Some(proxy) => match proxy.scheme_str() {
            Some("socks5") => assemble(config, tls, SocksV5::new(proxy.clone(), tcp), http2),
            Some("http") => assemble(config, tls, tunnel(proxy, tcp), http2),
            // As kube does: the proxy's own certificate is verified with the member's
            // settings, unrelaxed.
            Some("https") => {
                let to_proxy = config.rustls_https_connector_with_connector(tcp)?;
                assemble(config, tls, tunnel(proxy, to_proxy), http2)
            }
            _ => Err(kube::Error::ProxyProtocolUnsupported {
                proxy_url: Box::new(proxy.clone()),
            }),
        },
    }
}

/// An HTTP CONNECT tunnel, with basic auth when the proxy URL carries credentials.
fn tunnel<C>(proxy: &Uri, connector: C) -> Tunnel<C> {
    let tunnel = Tunnel::new(proxy.clone(), connector);
    let userinfo = proxy
        .authority()
        .and_then(|authority| authority.as_str().split_once('@'))
        .map(|(userinfo, _)| userinfo);
    match userinfo.and_then(|userinfo| proxy_basic_auth(userinfo).ok()) {
        Some(header) => tunnel.with_auth(header),
        None => tunnel,
    }
}

/// `Basic` credentials from URL userinfo, percent-escapes decoded (as kube does).
fn proxy_basic_auth(userinfo: &str) -> Result<http::HeaderValue, http::header::InvalidHeaderValue> {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(percent_decode(userinfo));
    http::HeaderValue::from_str(&format!("Basic {encoded}"))
}

fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match bytes.get(i..i + 3) {
            Some([b'%', high, low]) => char::from(*high)
                .to_digit(16)
                .zip(char::from(*low).to_digit(16))
                // Two hex digits: at most 255.
                .and_then(|(high, low)| u8::try_from(high * 16 + low).ok()),
            _ => None,
        };
        match escaped {
            Some(byte) => {
                decoded.push(byte);
                i += 3;
            }
            None => {
                decoded.push(bytes[i]);
                i += 1;
            }
        }
    }
    decoded
}

/// How long a member connection may sit idle in the pool before it is closed. Without it
/// (kube's own client sets no pool timer) every connection a burst opened — up to
/// `--member-write-concurrency` per member — stayed open for good, its TLS state and buffers
/// with it: ~50 KiB each (8.8 MiB of live heap at rest at 10 members, docs/benchmarks.md).
pub const IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);
/// Interval of the HTTP/2 pings that keep a member connection known to be alive.
pub const H2_PING_INTERVAL: Duration = Duration::from_secs(30);
/// How long a ping may go unanswered before the connection is closed.
pub const H2_PING_TIMEOUT: Duration = Duration::from_secs(15);

/// kube's `make_generic_builder` with our TLS configuration: TLS over `connector`, the
/// timeouts, then the middleware kube puts in front of every client.
fn assemble<H>(
    config: &kube::Config,
    tls: rustls::ClientConfig,
    connector: H,
    http2: bool,
) -> Result<kube::Client, kube::Error>
where
    H: Service<Uri> + Clone + Send + Sync + 'static,
    H::Response: Connection + Read + Write + Send + Unpin + 'static,
    H::Future: Send + 'static,
    H::Error: Into<BoxError>,
{
    let protocols = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1();
    let https = if http2 {
        protocols.enable_http2().wrap_connector(connector)
    } else {
        protocols.wrap_connector(connector)
    };
    let mut connector = TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let mut builder = hyper_util::client::legacy::Builder::new(TokioExecutor::new());
    builder
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(IDLE_CONNECTION_TIMEOUT);
    if http2 {
        builder
            .timer(TokioTimer::new())
            .http2_keep_alive_interval(H2_PING_INTERVAL)
            .http2_keep_alive_timeout(H2_PING_TIMEOUT)
            .http2_keep_alive_while_idle(true);
    }
    let http: hyper_util::client::legacy::Client<_, Body> = builder.build(connector);

    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, date_time_ymd,
    };

    const HOST: &str = "member.example";

    struct Ca {
        der: Vec<u8>,
        issuer: Issuer<'static, KeyPair>,
    }

    fn ca(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        Ca {
            der: cert.der().to_vec(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A serving certificate for `host` signed by `ca`, valid from `not_before` to
    /// `not_after` (years; rcgen's wide default when `None`).
    fn serving(ca: &Ca, host: &str, validity: Option<(i32, i32)>) -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec![host.to_owned()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        if let Some((from, until)) = validity {
            params.not_before = date_time_ymd(from, 1, 1);
            params.not_after = date_time_ymd(until, 1, 1);
        }
        params.signed_by(&key, &ca.issuer).unwrap().der().clone()
    }

    fn verifier(ca: &Ca, skip_subject_name: bool, skip_validity_period: bool) -> RelaxedVerifier {
        RelaxedVerifier::new(
            Some(std::slice::from_ref(&ca.der)),
            Arc::new(rustls::crypto::ring::default_provider()),
            TlsRelaxation {
                skip_subject_name,
                skip_validity_period,
            },
        )
        .unwrap()
    }

    fn verify(verifier: &RelaxedVerifier, cert: &CertificateDer<'_>) -> Result<(), String> {
        let name = ServerName::try_from(HOST).unwrap();
        verifier
            .verify_server_cert(cert, &[], &name, &[], UnixTime::now())
            .map(drop)
            .map_err(|error| error.to_string())
    }

    struct Certs {
        good: CertificateDer<'static>,
        wrong_name: CertificateDer<'static>,
        expired: CertificateDer<'static>,
        not_yet_valid: CertificateDer<'static>,
        wrong_name_expired: CertificateDer<'static>,
        wrong_ca: CertificateDer<'static>,
        wrong_ca_expired: CertificateDer<'static>,
        wrong_ca_wrong_name: CertificateDer<'static>,
    }

    fn certs(ca: &Ca) -> Certs {
        let other = self::ca("another CA");
        Certs {
            good: serving(ca, HOST, None),
            wrong_name: serving(ca, "elsewhere.example", None),
            expired: serving(ca, HOST, Some((2000, 2001))),
            not_yet_valid: serving(ca, HOST, Some((4000, 4001))),
            wrong_name_expired: serving(ca, "elsewhere.example", Some((2000, 2001))),
            wrong_ca: serving(&other, HOST, None),
            wrong_ca_expired: serving(&other, HOST, Some((2000, 2001))),
            wrong_ca_wrong_name: serving(&other, "elsewhere.example", None),
        }
    }

    fn assert_rejected(result: Result<(), String>, because: &str, what: &str) {
        match result {
            Ok(()) => panic!("{what} was accepted"),
            Err(error) => assert!(error.contains(because), "{what}: {error}"),
        }
    }

    #[test]
    fn nothing_skipped_accepts_only_a_good_certificate() {
        let ca = ca("member CA");
        let certs = certs(&ca);
        let strict = verifier(&ca, false, false);
        assert_eq!(verify(&strict, &certs.good), Ok(()));
        assert_rejected(
            verify(&strict, &certs.wrong_name),
            "not valid for name",
            "wrong name",
        );
        assert_rejected(verify(&strict, &certs.expired), "expired", "expired");
        assert_rejected(
            verify(&strict, &certs.not_yet_valid),
            "not valid yet",
            "future",
        );
        assert_rejected(
            verify(&strict, &certs.wrong_ca),
            "UnknownIssuer",
            "wrong CA",
        );
    }

    #[test]
    fn subject_name_skips_only_the_name() {
        let ca = ca("member CA");
        let certs = certs(&ca);
        let relaxed = verifier(&ca, true, false);
        assert_eq!(verify(&relaxed, &certs.good), Ok(()));
        assert_eq!(verify(&relaxed, &certs.wrong_name), Ok(()));
        assert_rejected(verify(&relaxed, &certs.expired), "expired", "expired");
        assert_rejected(
            verify(&relaxed, &certs.not_yet_valid),
            "not valid yet",
            "future",
        );
        assert_rejected(
            verify(&relaxed, &certs.wrong_name_expired),
            "expired",
            "wrong name, expired",
        );
        assert_rejected(
            verify(&relaxed, &certs.wrong_ca),
            "UnknownIssuer",
            "wrong CA",
        );
        assert_rejected(
            verify(&relaxed, &certs.wrong_ca_wrong_name),
            "UnknownIssuer",
            "wrong CA, wrong name",
        );
    }

    #[test]
    fn validity_period_skips_only_the_dates() {
        let ca = ca("member CA");
        let certs = certs(&ca);
        let relaxed = verifier(&ca, false, true);
        assert_eq!(verify(&relaxed, &certs.good), Ok(()));
        assert_eq!(verify(&relaxed, &certs.expired), Ok(()));
        assert_eq!(verify(&relaxed, &certs.not_yet_valid), Ok(()));
        assert_rejected(
            verify(&relaxed, &certs.wrong_name),
            "not valid for name",
            "wrong name",
        );
        assert_rejected(
            verify(&relaxed, &certs.wrong_name_expired),
            "not valid for name",
            "wrong name, expired",
        );
        assert_rejected(
            verify(&relaxed, &certs.wrong_ca),
            "UnknownIssuer",
            "wrong CA",
        );
        // webpki reports the dates before it looks at the issuer: the chain must still be
        // checked once the dates are out of the way.
        assert_rejected(
            verify(&relaxed, &certs.wrong_ca_expired),
            "UnknownIssuer",
            "wrong CA, expired",
        );
    }

    #[test]
    fn both_skip_name_and_dates_but_not_the_chain() {
        let ca = ca("member CA");
        let certs = certs(&ca);
        let relaxed = verifier(&ca, true, true);
        assert_eq!(verify(&relaxed, &certs.good), Ok(()));
        assert_eq!(verify(&relaxed, &certs.wrong_name), Ok(()));
        assert_eq!(verify(&relaxed, &certs.expired), Ok(()));
        assert_eq!(verify(&relaxed, &certs.wrong_name_expired), Ok(()));
        assert_rejected(
            verify(&relaxed, &certs.wrong_ca),
            "UnknownIssuer",
            "wrong CA",
        );
        assert_rejected(
            verify(&relaxed, &certs.wrong_ca_expired),
            "UnknownIssuer",
            "wrong CA, expired",
        );
        assert_rejected(
            verify(&relaxed, &certs.wrong_ca_wrong_name),
            "UnknownIssuer",
            "wrong CA, wrong name",
        );
    }

    #[test]
    fn proxy_credentials_are_percent_decoded() {
        assert_eq!(percent_decode("user:pa%40ss%3Aword"), b"user:pa@ss:word");
        assert_eq!(percent_decode("user:pass%+A%4"), b"user:pass%+A%4");
        assert_eq!(proxy_basic_auth("user:pass").unwrap(), "Basic dXNlcjpwYXNz");
    }
}
