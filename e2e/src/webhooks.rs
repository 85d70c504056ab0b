//! Hubfed's admission webhooks in front of the shared federation's hub: the webhook server
//! in-process with a certificate for 127.0.0.1, the webhook configurations calling it by URL.
//! They apply to the whole hub: use them from test binaries of their own.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::{Federation, KUBEFED_NAMESPACE};

/// Starts the webhook server (once) and registers the webhook configurations on the hub.
pub async fn with_webhooks() -> anyhow::Result<&'static Federation> {
    static READY: OnceCell<()> = OnceCell::const_new();
    let federation = Federation::shared();
    READY
        .get_or_try_init(|| async {
            let port = free_port()?;
            let dir = federation.env().dir().join("webhook-certs");
            let ca = write_certificate(&dir)?;

            // A thread of its own: the server must outlive each test's runtime.
            let serve_dir = dir.clone();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .expect("webhook runtime");
                runtime.block_on(async {
                    // A client of this runtime's own: the server outlives the tests' runtimes.
                    let hub = federation.hub().await?;
                    hubfed_controller::webhook::serve(
                        ([127, 0, 0, 1], port).into(),
                        serve_dir,
                        hub,
                        KUBEFED_NAMESPACE.to_string(),
                        tokio_util::sync::CancellationToken::new(),
                    )
                    .await
                })
            });
            wait_listening(port).await?;

            let hook = |name: &str, path: &str, group: &str, resources: Vec<&str>| {
                hook(port, &ca, name, path, group, resources)
            };
            let validating: ValidatingWebhookConfiguration = serde_json::from_value(json!({
                "metadata": {"name": "hubfed-e2e-validations"},
                "webhooks": [
                    hook("federatedtypeconfigs.core.kubefed.io", "/validate-federatedtypeconfigs", "core.kubefed.io",
                         vec!["federatedtypeconfigs", "federatedtypeconfigs/status"]),
                    hook("kubefedclusters.core.kubefed.io", "/validate-kubefedcluster", "core.kubefed.io",
                         vec!["kubefedclusters", "kubefedclusters/status"]),
                    hook("kubefedconfigs.core.kubefed.io", "/validate-kubefedconfig", "core.kubefed.io",
                         vec!["kubefedconfigs"]),
                    federated_validation_hook(port, &ca),
                    hook("placementpolicies.scheduling.hubfed.io", "/validate-placementpolicy", "scheduling.hubfed.io",
                         vec!["placementpolicies"]),
                    hook("domains.multiclusterdns.kubefed.io", "/validate-domain", "multiclusterdns.kubefed.io",
                         vec!["domains"]),
                    hook("servicednsrecords.multiclusterdns.kubefed.io", "/validate-servicednsrecord",
                         "multiclusterdns.kubefed.io", vec!["servicednsrecords"]),
                    hook("ingressdnsrecords.multiclusterdns.kubefed.io", "/validate-ingressdnsrecord",
                         "multiclusterdns.kubefed.io", vec!["ingressdnsrecords"]),
                ],
            }))?;
            let mutating: MutatingWebhookConfiguration = serde_json::from_value(json!({
                "metadata": {"name": "hubfed-e2e-mutation"},
                "webhooks": [
                    hook("kubefedconfigs.core.kubefed.io", "/default-kubefedconfig", "core.kubefed.io",
                         vec!["kubefedconfigs"]),
                    sync_finalizer_hook(port, &ca),
                ],
            }))?;
            let hub = federation.hub().await?;
            Api::<ValidatingWebhookConfiguration>::all(hub.clone())
                .create(&PostParams::default(), &validating)
                .await?;
            Api::<MutatingWebhookConfiguration>::all(hub.clone())
                .create(&PostParams::default(), &mutating)
                .await?;
            anyhow::Ok(())
        })
        .await?;
    Ok(federation)
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Writes a self-signed serving certificate for `localhost` and 127.0.0.1 to `dir`
/// (`tls.crt`, `tls.key`, as the webhook server reads them); returns the certificate as a
/// base64 `caBundle`.
pub fn write_certificate(dir: &Path) -> anyhow::Result<String> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()])?;
    params.subject_alt_names.push(rcgen::SanType::IpAddress(
        std::net::Ipv4Addr::LOCALHOST.into(),
    ));
    let cert = params.self_signed(&key)?;
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("tls.crt"), cert.pem())?;
    std::fs::write(dir.join("tls.key"), key.serialize_pem())?;
    Ok(base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        cert.pem(),
    ))
}

/// A webhook entry calling `https://127.0.0.1:<port><path>` on CREATE and UPDATE of
/// `resources` in `group`, failing closed.
pub fn hook(
    port: u16,
    ca: &str,
    name: &str,
    path: &str,
    group: &str,
    resources: Vec<&str>,
) -> Value {
    json!({
        "name": name,
        "clientConfig": {"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": ca},
        "rules": [{"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"], "resources": resources}],
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": 10,
    })
}

/// The sync-finalizer webhook (`/default-federated`) as the chart registers it: creates of
/// `types.kubefed.io` objects, `failurePolicy: Ignore`.
pub fn sync_finalizer_hook(port: u16, ca: &str) -> Value {
    let mut hook = hook(
        port,
        ca,
        "sync-finalizer.types.kubefed.io",
        "/default-federated",
        "types.kubefed.io",
        vec!["*"],
    );
    hook["rules"][0]["operations"] = json!(["CREATE"]);
    hook["failurePolicy"] = json!("Ignore");
    hook
}

/// The validating webhook of federated objects (`/validate-federated`) as the chart registers
/// it: creates and updates of `types.kubefed.io` objects, failing closed, called only when
/// [`federated_validation_match_conditions`] hold.
pub fn federated_validation_hook(port: u16, ca: &str) -> Value {
    let mut hook = hook(
        port,
        ca,
        "federated.types.kubefed.io",
        "/validate-federated",
        "types.kubefed.io",
        vec!["*"],
    );
    hook["matchConditions"] = federated_validation_match_conditions();
    hook
}

/// The chart's `matchConditions` of the validating webhook of federated objects
/// (`hubfed_core::validation::FEDERATED_VALIDATION_MATCH_CONDITIONS`): the API server calls it
/// only for a create, or an update of what the validation looks into (not the template's
/// contents), of an object not being deleted.
pub fn federated_validation_match_conditions() -> Value {
    hubfed_core::validation::FEDERATED_VALIDATION_MATCH_CONDITIONS
        .iter()
        .map(|(name, expression)| json!({"name": name, "expression": expression}))
        .collect()
}

/// Waits until something listens on 127.0.0.1:`port` (5 s at most).
pub async fn wait_listening(port: u16) -> anyhow::Result<()> {
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("the webhook server did not start")
}

/// Creates `object` through `api` (only a dry run when `dry_run`) and returns the API
/// server's refusal message — admission webhooks included — or `None` when it was accepted.
pub async fn refusal(
    api: &Api<DynamicObject>,
    object: serde_json::Value,
    dry_run: bool,
) -> anyhow::Result<Option<String>> {
    let object: DynamicObject = serde_json::from_value(object)?;
    let params = PostParams {
        dry_run,
        ..PostParams::default()
    };
    match api.create(&params, &object).await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(e)) => Ok(Some(e.message)),
        Err(e) => Err(e.into()),
    }
}

/// The API of a `core.kubefed.io/v1beta1` kind in the control plane's namespace.
pub fn core_api(hub: kube::Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk("core.kubefed.io", "v1beta1", kind);
    let resource = kube::discovery::ApiResource::from_gvk_with_plural(&gvk, plural);
    Api::namespaced_with(hub, KUBEFED_NAMESPACE, &resource)
}
