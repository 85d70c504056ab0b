//! Admission webhooks over HTTPS (docs/kubefed-compatibility.md §6): KubeFed's validations of
//! FederatedTypeConfig, KubeFedCluster and KubeFedConfig, KubeFedConfig defaulting, and —
//! hubfed's additions — validation of every federated object's placement and overrides, of
//! PlacementPolicies and of the multi-cluster DNS kinds (Domain, ServiceDNSRecord,
//! IngressDNSRecord), so bad input is refused at `kubectl apply` with a readable message — and
//! the sync finalizer
//! given to a federated object in the write that creates it (`/default-federated`,
//! [`hubfed_core::admission`]), which spares the controller a hub write per object. The rules
//! themselves are pure functions in `hubfed_core::validation` and `hubfed_core::admission`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::routing::{get, post};
use axum_server::tls_rustls::RustlsConfig;
use base64::Engine as _;
use hubfed_api::federatedtypeconfig::{FederatedTypeConfig, ResourceScope};
use hubfed_api::kubefedconfig::KubeFedConfig;
use hubfed_api::names::KUBEFED_CONFIG_NAME;
use hubfed_core::validation::{self, FieldError};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview, Operation};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// What a webhook decided.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Allow,
    Deny(String),
    /// Allow with a JSON patch (RFC 6902) to apply.
    Patch(Value),
}

fn verdict(errors: Vec<FieldError>, what: &str) -> Verdict {
    if errors.is_empty() {
        Verdict::Allow
    } else {
        Verdict::Deny(format!(
            "{what} is invalid: {}",
            validation::summary(&errors)
        ))
    }
}

fn object_value(object: Option<&DynamicObject>) -> Option<Value> {
    object.and_then(|o| serde_json::to_value(o).ok())
}

/// What the webhooks know of the hub, from watches of the control plane's namespace: its
/// FederatedTypeConfigs and its KubeFedConfig. Empty until the watches have listed them: then
/// no federated object is given the sync finalizer.
#[derive(Clone)]
pub struct HubView {
    namespace: String,
    ftcs: Store<FederatedTypeConfig>,
    config: Store<KubeFedConfig>,
}

impl HubView {
    /// Watches the FTCs and the KubeFedConfig in `namespace` until `shutdown`.
    pub fn watch(hub: &Client, namespace: &str, shutdown: &CancellationToken) -> Self {
        let ftcs = crate::watch::spawn_cache(
            Api::namespaced(hub.clone(), namespace),
            watcher::Config::default(),
            shutdown.clone(),
        );
        let config = crate::watch::spawn_cache(
            Api::namespaced(hub.clone(), namespace),
            watcher::Config::default().fields(&format!("metadata.name={KUBEFED_CONFIG_NAME}")),
            shutdown.clone(),
        );
        Self {
            namespace: namespace.to_owned(),
            ftcs,
            config,
        }
    }

    fn scope(&self) -> Option<ResourceScope> {
        let config = self.config.state().into_iter().next()?;
        Some(config.spec.scope)
    }

    fn ftcs(&self) -> Vec<Arc<FederatedTypeConfig>> {
        self.ftcs.state()
    }
}

/// Decides one admission request for `path`; `hub` is what the webhooks know of the hub.
pub fn decide(path: &str, request: &AdmissionRequest<DynamicObject>, hub: &HubView) -> Verdict {
    if matches!(request.operation, Operation::Delete | Operation::Connect) {
        return Verdict::Allow;
    }
    let Some(object) = object_value(request.object.as_ref()) else {
        return Verdict::Deny("the request carries no object".into());
    };
    let old = object_value(request.old_object.as_ref());
    let status_update = request.sub_resource.as_deref() == Some("status");
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    match path {
        "/validate-federatedtypeconfigs" => {
            let errors = validation::validate_federated_type_config_value(&object, status_update);
            verdict(errors, &format!("FederatedTypeConfig {name:?}"))
        }
        "/validate-kubefedcluster" => {
            let errors = validation::validate_kubefed_cluster_value(&object, status_update);
            verdict(errors, &format!("KubeFedCluster {name:?}"))
        }
        "/validate-kubefedconfig" => verdict(
            validation::validate_kubefed_config_value(&object, old.as_ref()),
            &format!("KubeFedConfig {name:?}"),
        ),
        "/default-kubefedconfig" => match validation::default_kubefed_config_patch(&object) {
            Ok(Some(patch)) => Verdict::Patch(patch),
            // Nothing to default, or a spec too broken to default: the validating webhook
            // reports the problem with field paths.
            Ok(None) | Err(_) => Verdict::Allow,
        },
        "/validate-federated" => {
            // Never stand in the way of finalizer, label or annotation changes (the
            // controller's own patches) or of deletion: only creates and updates of what the
            // validation looks into are judged (a change of the template's contents is not),
            // so an object created before the webhook existed can still be cleaned up. The
            // chart's `matchConditions` spare the call in these cases; this is the same
            // decision for API servers that ignore them (Kubernetes 1.27).
            let deleting = object.pointer("/metadata/deletionTimestamp").is_some();
            let unjudged = old
                .as_ref()
                .is_some_and(|old| !validation::federated_update_needs_validation(old, &object));
            if deleting || unjudged {
                return Verdict::Allow;
            }
            let kind = request.kind.kind.clone();
            verdict(
                validation::validate_federated_object(&object),
                &format!("{kind} {name:?}"),
            )
        }
        "/default-federated" => {
            if !matches!(request.operation, Operation::Create) {
                return Verdict::Allow;
            }
            let ftcs = hub.ftcs();
            let plane = hubfed_core::admission::Plane {
                scope: hub.scope(),
                namespace: &hub.namespace,
                ftcs: &ftcs,
            };
            match hubfed_core::admission::sync_finalizer_patch(
                &object,
                &request.kind.group,
                &request.kind.kind,
                &plane,
            ) {
                Some(patch) => Verdict::Patch(patch),
                None => Verdict::Allow,
            }
        }
        "/validate-placementpolicy" => {
            let deleting = object.pointer("/metadata/deletionTimestamp").is_some();
            if deleting || status_update {
                return Verdict::Allow;
            }
            verdict(
                validation::validate_placement_policy_value(&object),
                &format!("PlacementPolicy {name:?}"),
            )
        }
        "/validate-domain" | "/validate-servicednsrecord" | "/validate-ingressdnsrecord" => {
            // A record's status is the DNS controller's; an object being deleted is let go.
            let deleting = object.pointer("/metadata/deletionTimestamp").is_some();
            if deleting || status_update {
                return Verdict::Allow;
            }
            let (errors, kind) = match path {
                "/validate-domain" => (validation::validate_domain_value(&object), "Domain"),
                "/validate-servicednsrecord" => (
                    validation::validate_service_dns_record_value(&object),
                    "ServiceDNSRecord",
                ),
                _ => (
                    validation::validate_ingress_dns_record_value(&object),
                    "IngressDNSRecord",
                ),
            };
            verdict(errors, &format!("{kind} {name:?}"))
        }
        other => Verdict::Deny(format!("no admission webhook at {other}")),
    }
}

/// The AdmissionReview response body (built here because kube's builder pins another
/// json-patch major version).
fn review_response(uid: &str, verdict: &Verdict) -> Value {
    let response = match verdict {
        Verdict::Allow => json!({"uid": uid, "allowed": true}),
        Verdict::Deny(message) => json!({
            "uid": uid,
            "allowed": false,
            "status": {"status": "Failure", "code": 403, "reason": "Forbidden", "message": message},
        }),
        Verdict::Patch(patch) => json!({
            "uid": uid,
            "allowed": true,
            "patchType": "JSONPatch",
            "patch": base64::engine::general_purpose::STANDARD.encode(patch.to_string()),
        }),
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// The deepest an object under review may nest: its controller must be able to read it back
/// (serde_json, in the webhook and in the Kubernetes client, stops at 128 levels, counted from
/// the list or review that holds the object).
pub const MAX_OBJECT_NESTING: usize = 100;
/// An AdmissionReview carries the object and, on updates, the old one: each up to the API
/// server's 3 MiB request limit, re-encoded.
const ADMISSION_BODY_LIMIT: usize = 16 * 1024 * 1024;

/// A review whose object nests too deep cannot be parsed: deny it, by the uid found without
/// parsing, saying where.
fn too_deep(body: &[u8]) -> Option<Value> {
    // review → request → object: the object's own levels start at the third.
    let review_limit = MAX_OBJECT_NESTING + 2;
    let nesting = validation::nesting(body, review_limit);
    let path = nesting.too_deep_at?;
    // Where it starts to go deep is what the user needs, not a hundred repeated keys.
    let fields: Vec<&str> = path.iter().skip(2).map(String::as_str).collect();
    let mut field = fields[..fields.len().min(6)].join(".");
    if fields.len() > 6 {
        field.push_str(".…");
    }
    let message = format!(
        "{field}: nested more than {MAX_OBJECT_NESTING} levels deep ({} levels): hubfed refuses \
         such objects, its controller could not read them back",
        nesting.depth.saturating_sub(2)
    );
    Some(review_response(
        nesting.request_uid.as_deref().unwrap_or_default(),
        &Verdict::Deny(message),
    ))
}

/// Answers one admission review at `path`, counted in `hubfed_webhook_requests_total` and
/// timed in `hubfed_webhook_duration_seconds`.
async fn handle(path: &'static str, hub: HubView, body: axum::body::Bytes) -> Json<Value> {
    let started = std::time::Instant::now();
    let (answer, verdict) = review(path, &hub, &body);
    let webhook = path.trim_start_matches('/');
    let metrics = &crate::metrics::METRICS;
    metrics
        .webhook_requests_total
        .with_label_values(&[webhook, verdict])
        .inc();
    metrics
        .webhook_duration
        .with_label_values(&[webhook])
        .observe(started.elapsed().as_secs_f64());
    Json(answer)
}

/// The answer to the review `body` at `path`, and its verdict for the metrics: `allowed`,
/// `patched` (allowed with a patch), `denied` or `undecodable`.
fn review(path: &'static str, hub: &HubView, body: &[u8]) -> (Value, &'static str) {
    if let Some(denied) = too_deep(body) {
        warn!(path, "refused an object nested too deep to read");
        return (denied, "denied");
    }
    let review: Result<AdmissionReview<DynamicObject>, _> = serde_json::from_slice(body);
    let request = review.map_err(|e| e.to_string()).and_then(|r| {
        let request: Result<AdmissionRequest<DynamicObject>, _> = r.try_into();
        request.map_err(|e| e.to_string())
    });
    let request = match request {
        Ok(request) => request,
        Err(e) => {
            warn!(path, error = %e, "undecodable admission review");
            let answer = json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": "", "allowed": false,
                    "status": {"status": "Failure", "code": 400, "reason": "BadRequest", "message": e}},
            });
            return (answer, "undecodable");
        }
    };
    let verdict = decide(path, &request, hub);
    debug!(path, name = %request.name, verdict = ?verdict, "admission decided");
    let label = match verdict {
        Verdict::Allow => "allowed",
        Verdict::Deny(_) => "denied",
        Verdict::Patch(_) => "patched",
    };
    (review_response(&request.uid, &verdict), label)
}

pub fn router(hub: HubView) -> Router {
    let route = |path: &'static str| {
        let hub = hub.clone();
        post(move |body: axum::body::Bytes| handle(path, hub, body))
            .layer(axum::extract::DefaultBodyLimit::max(ADMISSION_BODY_LIMIT))
    };
    Router::new()
        .route(
            "/validate-federatedtypeconfigs",
            route("/validate-federatedtypeconfigs"),
        )
        .route(
            "/validate-kubefedcluster",
            route("/validate-kubefedcluster"),
        )
        .route("/validate-kubefedconfig", route("/validate-kubefedconfig"))
        .route("/default-kubefedconfig", route("/default-kubefedconfig"))
        .route("/validate-federated", route("/validate-federated"))
        .route("/default-federated", route("/default-federated"))
        .route(
            "/validate-placementpolicy",
            route("/validate-placementpolicy"),
        )
        .route("/validate-domain", route("/validate-domain"))
        .route(
            "/validate-servicednsrecord",
            route("/validate-servicednsrecord"),
        )
        .route(
            "/validate-ingressdnsrecord",
            route("/validate-ingressdnsrecord"),
        )
        .route("/readyz", get(|| async { "ok" }))
}

/// Serves the webhooks over HTTPS with `tls.crt`/`tls.key` from `cert_dir`, reloading them
/// every minute so rotated certificates are picked up. On `shutdown` it stops accepting
/// connections; requests in flight get [`crate::admin::HTTP_DRAIN_TIMEOUT`]. `hub` is read
/// (the FTCs and the KubeFedConfig in `kubefed_namespace`) to give new federated objects the
/// sync finalizer.
pub async fn serve(
    addr: SocketAddr,
    cert_dir: PathBuf,
    hub: Client,
    kubefed_namespace: String,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (cert, key) = (cert_dir.join("tls.crt"), cert_dir.join("tls.key"));
    let tls = RustlsConfig::from_pem_file(&cert, &key)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "webhook certificate {} / {}: {e}",
                cert.display(),
                key.display()
            )
        })?;
    let view = HubView::watch(&hub, &kubefed_namespace, &shutdown);
    tokio::spawn({
        let tls = tls.clone();
        let shutdown = shutdown.clone();
        async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_secs(60)) => {}
                }
                if let Err(e) = tls.reload_from_pem_file(&cert, &key).await {
                    warn!(error = %e, "reloading the webhook certificate failed");
                }
            }
        }
    });
    let handle = axum_server::Handle::new();
    tokio::spawn({
        let handle = handle.clone();
        async move {
            shutdown.cancelled().await;
            handle.graceful_shutdown(Some(crate::admin::HTTP_DRAIN_TIMEOUT));
        }
    });
    info!(%addr, "admission webhooks listening");
    axum_server::bind_rustls(addr, tls)
        .handle(handle)
        .serve(router(view).into_make_service())
        .await?;
    Ok(())
}
