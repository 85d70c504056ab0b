//! A TLS-terminating HTTP reverse proxy in front of a real kube-apiserver, for end-to-end tests
//! that need the API server to misbehave in ways a healthy one never does.
//!
//! [`FaultProxy`] listens on loopback with a certificate of its own ([`FaultProxy::ca_pem`]) and
//! forwards every request unchanged — method, path and query, headers including
//! `Authorization: Bearer …`, bodies streamed both ways, so watches deliver their events as they
//! come — except those matching one of its [`Fault`] rules, which it answers itself:
//!
//! - [`FaultResponse::Status`]: at once, with an error status and a Kubernetes `Status` body, e.g.
//!   a member whose identity lookup (`GET /api/v1/namespaces/kube-system`) is refused with 500;
//! - [`FaultResponse::Hang`]: never, e.g. a member whose identity lookup is not answered at all;
//! - [`FaultResponse::Hold`]: not while the rule stands, then forwarded as if it had just come,
//!   e.g. a member whose lists get no answer for a while.
//!
//! With a path prefix it also stands for an API server behind a path-routing proxy: it serves
//! only `https://127.0.0.1:<port>/<prefix>/…`, strips the prefix before forwarding and answers
//! 404 to anything else.
//!
//! A TLS-terminating proxy cannot forward client certificates: clients going through it must
//! authenticate with tokens. HTTP/1.1 only, and no upgrades (exec, attach, port-forward).
//! Dropping the proxy closes the listener and every connection, hanging requests and open
//! watches included.

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use anyhow::{Context as _, bail};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// Message of every answer the proxy makes up for a fault rule.
const INJECTED_MESSAGE: &str = "injected by the test proxy";
/// Longest a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the proxy does with a request matching a fault rule.
#[derive(Clone, Debug)]
pub enum FaultResponse {
    /// Answer at once with this HTTP status and a Kubernetes `Status` JSON body (`kind: Status`,
    /// `status: Failure`, the matching `reason`, message "injected by the test proxy"). A number
    /// that is no HTTP status is answered as 500.
    Status(u16),
    /// Never answer: hold the request open until the client gives up or the proxy stops.
    Hang,
    /// Hold the request unanswered while a `Hold` rule matches it; once none does (the rules
    /// replaced by [`FaultProxy::set_faults`]), forward it upstream.
    Hold,
}

/// A request the proxy answers itself instead of forwarding it.
#[derive(Clone, Debug)]
pub struct Fault {
    /// Exact request path after any prefix stripping, e.g. "/api/v1/namespaces/kube-system"
    /// (the query string is ignored for matching).
    pub path: String,
    /// `None` matches every method.
    pub method: Option<Method>,
    pub response: FaultResponse,
}

impl Fault {
    fn matches(&self, method: &Method, path: &str) -> bool {
        self.path == path && self.method.as_ref().is_none_or(|m| m == method)
    }
}

/// A TLS-terminating reverse proxy in front of a kube-apiserver that injects faults into
/// selected requests (see the [module documentation](self)). Stops when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    prefix: Option<String>,
    ca_pem: String,
    state: Arc<State>,
    shutdown: CancellationToken,
}

/// What the connection tasks share with the [`FaultProxy`].
struct State {
    /// Scheme and authority of the upstream, plus its base path without a trailing slash.
    upstream: String,
    prefix: Option<String>,
    client: Client<HttpsConnector<HttpConnector>, Incoming>,
    faults: Mutex<Vec<Fault>>,
    /// Bumped each time the rules are replaced, for the requests held by `Hold` rules.
    faults_changed: tokio::sync::watch::Sender<u64>,
    fault_hits: AtomicUsize,
    forwarded: AtomicUsize,
    /// Path and query string of every GET request received, in order.
    gets: Mutex<Vec<(String, String)>>,
    shutdown: CancellationToken,
    /// While `true`, a network partition: nothing passes either way, nothing is closed.
    partitioned: tokio::sync::watch::Sender<bool>,
}

impl FaultProxy {
    /// Starts on 127.0.0.1:<free port>, forwarding to `upstream_url` (e.g.
    /// "https://127.0.0.1:6443", a kube-apiserver) whose serving certificate is verified against
    /// `upstream_ca_pem`.
    ///
    /// `path_prefix`: when `Some("/path/to/endpoint")`, the proxy serves only requests whose
    /// path starts with that prefix, strips it before forwarding (an API server behind a
    /// path-routing proxy) and answers 404 to anything else.
    ///
    /// Must be called within a tokio runtime; the proxy runs on it and dies with it.
    pub async fn start(
        upstream_url: &str,
        upstream_ca_pem: &str,
        path_prefix: Option<&str>,
    ) -> anyhow::Result<Self> {
        let upstream = upstream_base(upstream_url)?;
        let prefix = match path_prefix.map(|p| p.trim_end_matches('/')) {
            None | Some("") => None,
            Some(p) if p.starts_with('/') => Some(p.to_owned()),
            Some(p) => bail!("path prefix {p:?} does not start with '/'"),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());

        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(upstream_ca_pem.as_bytes()) {
            roots
                .add(cert.context("reading the upstream CA bundle")?)
                .context("adding an upstream CA certificate")?;
        }
        if roots.is_empty() {
            bail!("the upstream CA bundle holds no certificate");
        }
        let client_config = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .context("upstream TLS configuration")?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(client_config)
            .https_only()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new()).build(connector);

        let (ca_pem, chain, key) = serving_certificate()?;
        let mut server_config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("serving TLS configuration")?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .context("serving TLS configuration")?;
        server_config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(server_config));

        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .context("binding the fault proxy's listener")?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let state = Arc::new(State {
            upstream,
            prefix: prefix.clone(),
            client,
            faults: Mutex::new(Vec::new()),
            faults_changed: tokio::sync::watch::Sender::new(0),
            fault_hits: AtomicUsize::new(0),
            forwarded: AtomicUsize::new(0),
            gets: Mutex::new(Vec::new()),
            shutdown: shutdown.clone(),
            partitioned: tokio::sync::watch::Sender::new(false),
        });
        tokio::spawn(accept_loop(listener, acceptor, state.clone()));
        Ok(Self {
            addr,
            prefix,
            ca_pem,
            state,
            shutdown,
        })
    }

    /// "https://127.0.0.1:<port>" plus the path prefix if any.
    pub fn url(&self) -> String {
        format!(
            "https://{}{}",
            self.addr,
            self.prefix.as_deref().unwrap_or_default()
        )
    }

    /// PEM of the self-signed CA that issued the proxy's serving certificate (SANs 127.0.0.1 and
    /// localhost), for a KubeFedCluster `caBundle` or a kubeconfig.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Replaces the fault rules (empty = pass everything through). The first matching rule
    /// applies. Requests already hanging keep hanging; those held by a `Hold` rule that no
    /// longer matches them are forwarded.
    pub fn set_faults(&self, faults: Vec<Fault>) {
        *self
            .state
            .faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = faults;
        self.state.faults_changed.send_modify(|n| *n += 1);
    }

    /// Cuts the network between clients and upstream, as dropped packets would: open
    /// connections (watches, pooled keep-alives) go silent without being closed, new
    /// connections are accepted but never answered. Until [`Self::heal`].
    pub fn partition(&self) {
        self.state.partitioned.send_replace(true);
    }

    /// Ends a [`Self::partition`]: connections held silent are closed (clients reconnect), new
    /// ones are served again.
    pub fn heal(&self) {
        self.state.partitioned.send_replace(false);
    }

    /// How many requests matched a fault rule so far.
    pub fn fault_hits(&self) -> usize {
        self.state.fault_hits.load(Ordering::SeqCst)
    }

    /// The query strings of the GET requests to `path` received so far, in order (those that
    /// matched a fault rule too).
    pub fn gets(&self, path: &str) -> Vec<String> {
        self.state
            .gets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(seen, _)| seen == path)
            .map(|(_, query)| query.clone())
            .collect()
    }

    /// How many requests were forwarded upstream so far.
    pub fn forwarded(&self) -> usize {
        self.state.forwarded.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("url", &self.url())
            .field("upstream", &self.state.upstream)
            .finish_non_exhaustive()
    }
}

/// `upstream_url` as "https://host:port[/base]", checked.
fn upstream_base(upstream_url: &str) -> anyhow::Result<String> {
    let uri: Uri = upstream_url
        .parse()
        .with_context(|| format!("upstream URL {upstream_url:?}"))?;
    if uri.scheme_str() != Some("https") {
        bail!("upstream URL {upstream_url:?} is not https");
    }
    let authority = uri
        .authority()
        .with_context(|| format!("upstream URL {upstream_url:?} has no host"))?;
    Ok(format!(
        "https://{authority}{}",
        uri.path().trim_end_matches('/')
    ))
}

/// A fresh CA and a serving certificate it issued for 127.0.0.1 and localhost: the CA's PEM,
/// the serving chain and key.
fn serving_certificate()
-> anyhow::Result<(String, Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "hubfed-e2e fault proxy CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec!["localhost".to_owned()])?;
    params
        .subject_alt_names
        .push(SanType::IpAddress(Ipv4Addr::LOCALHOST.into()));
    params
        .distinguished_name
        .push(DnType::CommonName, "hubfed-e2e fault proxy");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer)?;

    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    Ok((ca_cert.pem(), vec![cert.der().clone()], key))
}

/// Accepts connections until the proxy stops; each is served on a task of its own.
async fn accept_loop(listener: TcpListener, acceptor: TlsAcceptor, state: Arc<State>) {
    loop {
        let accepted = tokio::select! {
            () = state.shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((tcp, _)) => {
                tokio::spawn(serve_connection(tcp, acceptor.clone(), state.clone()));
            }
            // Out of file descriptors and the like: try again shortly.
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Returns once the partition flag is `cut` (or its sender is gone).
async fn until(partitioned: &mut tokio::sync::watch::Receiver<bool>, cut: bool) {
    let _ = partitioned.wait_for(|now| *now == cut).await.map(drop);
}

/// Serves one client connection until it closes or the proxy stops.
async fn serve_connection(tcp: tokio::net::TcpStream, acceptor: TlsAcceptor, state: Arc<State>) {
    let shutdown = state.shutdown.clone();
    let mut partitioned = state.partitioned.subscribe();
    let cut = *partitioned.borrow();
    if cut {
        // Never answered while the partition lasts, then closed.
        tokio::select! {
            () = shutdown.cancelled() => {}
            () = until(&mut partitioned, false) => {}
        }
        return;
    }
    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp));
    let tls = tokio::select! {
        () = shutdown.cancelled() => return,
        tls = handshake => match tls {
            Ok(Ok(tls)) => tls,
            _ => return,
        },
    };
    let service = service_fn(move |request| handle(state.clone(), request));
    let connection =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service);
    let mut connection = std::pin::pin!(connection);
    // Dropping the connection on shutdown closes it and ends its request, hanging or streaming.
    tokio::select! {
        () = shutdown.cancelled() => return,
        _ = &mut connection => return,
        () = until(&mut partitioned, true) => {}
    }
    // A partition stops serving the connection without closing it: it is kept open but no
    // longer polled, so nothing more is read or sent on it — silence, as with dropped packets
    // (a request in flight, a watch stream, all go quiet). The `select!` above must not own
    // the connection: it drops the futures of the branches not taken, which would close it.
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = until(&mut partitioned, false) => {}
    }
    // Healed: the connection is closed on return (dropped with this task), as a peer that
    // timed it out meanwhile would.
}

impl State {
    /// The response of the first rule matching a request.
    fn fault_for(&self, method: &Method, path: &str) -> Option<FaultResponse> {
        self.faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|fault| fault.matches(method, path))
            .map(|fault| fault.response.clone())
    }
}

/// Answers one request: 404 outside the prefix, the fault of the first matching rule, or the
/// upstream's response.
async fn handle(
    state: Arc<State>,
    request: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let full_path = request.uri().path();
    let path = match &state.prefix {
        None => full_path,
        Some(prefix) => match full_path.strip_prefix(prefix.as_str()) {
            Some("") => "/",
            Some(rest) if rest.starts_with('/') => rest,
            _ => {
                return Ok(status_response(
                    StatusCode::NOT_FOUND,
                    &format!("{full_path} is outside the proxy's path prefix {prefix}"),
                ));
            }
        },
    }
    .to_owned();

    if request.method() == Method::GET {
        let query = request.uri().query().unwrap_or_default().to_owned();
        (state.gets.lock().unwrap_or_else(PoisonError::into_inner)).push((path.clone(), query));
    }
    // Subscribed before the rules are read: a change after that is seen.
    let mut changes = state.faults_changed.subscribe();
    let fault = state.fault_for(request.method(), &path);
    if fault.is_some() {
        state.fault_hits.fetch_add(1, Ordering::SeqCst);
    }
    match fault {
        None => {}
        Some(FaultResponse::Status(code)) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return Ok(status_response(status, INJECTED_MESSAGE));
        }
        Some(FaultResponse::Hang) => {
            // Ends early only when the client closes the connection (hyper then drops this
            // future) or the proxy stops (the connection is dropped with it).
            state.shutdown.cancelled().await;
            return Ok(stopping());
        }
        Some(FaultResponse::Hold) => {
            while let Some(FaultResponse::Hold) = state.fault_for(request.method(), &path) {
                tokio::select! {
                    () = state.shutdown.cancelled() => return Ok(stopping()),
                    _ = changes.changed() => {}
                }
            }
        }
    }

    Ok(forward(&state, request, &path).await)
}

/// The answer of a request the proxy held when it stops.
fn stopping() -> Response<ProxyBody> {
    status_response(
        StatusCode::SERVICE_UNAVAILABLE,
        "the test proxy is stopping",
    )
}

/// Sends `request` upstream with its path replaced by `path` (prefix stripped) and returns the
/// upstream's response, its body streamed; 502 when the upstream cannot be reached.
async fn forward(state: &State, request: Request<Incoming>, path: &str) -> Response<ProxyBody> {
    let (mut parts, body) = request.into_parts();
    let query = parts
        .uri
        .query()
        .map(|query| format!("?{query}"))
        .unwrap_or_default();
    let target = format!("{}{path}{query}", state.upstream);
    parts.uri = match target.parse() {
        Ok(uri) => uri,
        Err(error) => {
            return status_response(
                StatusCode::BAD_REQUEST,
                &format!("cannot forward to {target}: {error}"),
            );
        }
    };
    parts.version = Version::HTTP_11;
    remove_hop_by_hop(&mut parts.headers);
    // The client sets Host from the upstream URI.
    parts.headers.remove(header::HOST);

    state.forwarded.fetch_add(1, Ordering::SeqCst);
    match state.client.request(Request::from_parts(parts, body)).await {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            remove_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, ProxyBody::Upstream(body))
        }
        Err(error) => status_response(
            StatusCode::BAD_GATEWAY,
            &format!("test proxy: upstream request failed: {error}"),
        ),
    }
}

/// Removes the headers that concern one connection only (RFC 9110 §7.6.1), including those the
/// `Connection` header names.
fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
}

/// The Kubernetes `reason` of a failure answered with `status`.
fn reason(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ if status.is_server_error() => "InternalError",
        _ => "Unknown",
    }
}

/// A response with `status` and a Kubernetes `Status` body carrying `message`.
fn status_response(status: StatusCode, message: &str) -> Response<ProxyBody> {
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason(status),
        "code": status.as_u16(),
    })
    .to_string();
    let mut response = Response::new(ProxyBody::Full(Some(Bytes::from(body))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The body of a response: the upstream's, streamed as it comes, or one made up here.
enum ProxyBody {
    Upstream(Incoming),
    /// `None` once sent.
    Full(Option<Bytes>),
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            Self::Upstream(body) => Pin::new(body).poll_frame(cx),
            Self::Full(data) => Poll::Ready(data.take().map(|data| Ok(Frame::data(data)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Upstream(body) => body.is_end_stream(),
            Self::Full(data) => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Upstream(body) => body.size_hint(),
            Self::Full(data) => {
                SizeHint::with_exact(data.as_ref().map_or(0, |data| data.len() as u64))
            }
        }
    }
}
