//! Admission webhooks through a real kube-apiserver: invalid FederatedTypeConfigs,
//! KubeFedClusters, KubeFedConfigs and federated objects are refused with a readable
//! message; valid ones pass; KubeFedConfig is defaulted.
//!
//! The webhook server runs in-process with a certificate for 127.0.0.1; the webhook
//! configurations call it by URL. Its own test binary: the configurations apply to the whole
//! hub.

use std::time::Duration;

use hubfed_e2e::{Federation, KUBEFED_NAMESPACE, federated, federated_object, placement};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

/// Starts the webhook server (once) and registers the webhook configurations on the hub.
async fn webhooks() -> anyhow::Result<&'static Federation> {
    static READY: OnceCell<()> = OnceCell::const_new();
    let federation = Federation::shared();
    READY
        .get_or_try_init(|| async {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let key = rcgen::KeyPair::generate()?;
            let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()])?;
            params
                .subject_alt_names
                .push(rcgen::SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
            let cert = params.self_signed(&key)?;
            let dir = federation.env().dir().join("webhook-certs");
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join("tls.crt"), cert.pem())?;
            std::fs::write(dir.join("tls.key"), key.serialize_pem())?;

            // A thread of its own: the server must outlive each test's runtime.
            let serve_dir = dir.clone();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .expect("webhook runtime");
                runtime.block_on(hubfed_controller::webhook::serve(
                    ([127, 0, 0, 1], port).into(),
                    serve_dir,
                    KUBEFED_NAMESPACE.to_string(),
                    tokio_util::sync::CancellationToken::new(),
                ))
            });
            wait_listening(port).await?;

            let ca = base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                cert.pem(),
            );
            let hook = |name: &str, path: &str, group: &str, resources: Vec<&str>| {
                json!({
                    "name": name,
                    "clientConfig": {"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": ca},
                    "rules": [{"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"], "resources": resources}],
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 10,
                })
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
                    hook("federated.types.kubefed.io", "/validate-federated", "types.kubefed.io", vec!["*"]),
                ],
            }))?;
            let mutating: MutatingWebhookConfiguration = serde_json::from_value(json!({
                "metadata": {"name": "hubfed-e2e-mutation"},
                "webhooks": [hook("kubefedconfigs.core.kubefed.io", "/default-kubefedconfig", "core.kubefed.io",
                                  vec!["kubefedconfigs"])],
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

async fn wait_listening(port: u16) -> anyhow::Result<()> {
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

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..Default::default()
    }
}

/// Creates `object` (dry run) and returns the API server's refusal message, if any.
async fn refusal(api: &Api<DynamicObject>, object: Value) -> anyhow::Result<Option<String>> {
    let object: DynamicObject = serde_json::from_value(object)?;
    match api.create(&dry_run(), &object).await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(e)) => Ok(Some(e.message)),
        Err(e) => Err(e.into()),
    }
}

fn core_api(hub: kube::Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk("core.kubefed.io", "v1beta1", kind);
    let resource = kube::discovery::ApiResource::from_gvk_with_plural(&gvk, plural);
    Api::namespaced_with(hub, KUBEFED_NAMESPACE, &resource)
}

#[tokio::test]
async fn federated_type_configs_are_validated() -> anyhow::Result<()> {
    let federation = webhooks().await?;
    let api = core_api(
        federation.hub().await?,
        "FederatedTypeConfig",
        "federatedtypeconfigs",
    );
    let valid = json!({
        "apiVersion": "core.kubefed.io/v1beta1", "kind": "FederatedTypeConfig",
        "metadata": {"name": "widgets.example.io", "namespace": KUBEFED_NAMESPACE},
        "spec": {
            "targetType": {"group": "example.io", "version": "v1", "kind": "Widget", "pluralName": "widgets", "scope": "Namespaced"},
            "federatedType": {"group": "types.kubefed.io", "version": "v1beta1", "kind": "FederatedWidget", "pluralName": "federatedwidgets", "scope": "Namespaced"},
            "propagation": "Enabled",
        },
    });
    assert_eq!(
        refusal(&api, valid.clone()).await?,
        None,
        "a valid FTC passes"
    );

    let mut misnamed = valid.clone();
    misnamed["metadata"]["name"] = json!("gadgets.example.io");
    let message = refusal(&api, misnamed)
        .await?
        .expect("a misnamed FTC is refused");
    assert!(
        message.contains("metadata.name") || message.contains("widgets.example.io"),
        "{message}"
    );

    let mut bad_group = valid;
    bad_group["spec"]["federatedType"]["group"] = json!("nodots");
    let message = refusal(&api, bad_group)
        .await?
        .expect("a federated group without a dot is refused");
    assert!(message.contains("spec.federatedType.group"), "{message}");
    Ok(())
}

#[tokio::test]
async fn kubefed_clusters_are_validated() -> anyhow::Result<()> {
    let federation = webhooks().await?;
    let api = core_api(federation.hub().await?, "KubeFedCluster", "kubefedclusters");
    let valid = json!({
        "apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedCluster",
        "metadata": {"name": "webhook-probe", "namespace": KUBEFED_NAMESPACE},
        "spec": {"apiEndpoint": "https://10.0.0.1:6443", "secretRef": {"name": "webhook-probe-secret"}},
    });
    assert_eq!(
        refusal(&api, valid.clone()).await?,
        None,
        "a valid KubeFedCluster passes"
    );

    let mut ftp = valid.clone();
    ftp["spec"]["apiEndpoint"] = json!("ftp://10.0.0.1:6443");
    let message = refusal(&api, ftp)
        .await?
        .expect("an ftp endpoint is refused");
    assert!(message.contains("spec.apiEndpoint"), "{message}");

    let mut mixed = valid;
    mixed["spec"]["disabledTLSValidations"] = json!(["*", "SubjectName"]);
    let message = refusal(&api, mixed)
        .await?
        .expect("'*' with others is refused");
    assert!(message.contains("spec.disabledTLSValidations"), "{message}");
    Ok(())
}

#[tokio::test]
async fn kubefed_configs_are_defaulted_and_validated() -> anyhow::Result<()> {
    let federation = webhooks().await?;
    let hub = federation.hub().await?;
    let namespace = hubfed_e2e::unique_ns("webhook-config");
    federation.create_hub_namespace(&namespace).await?;
    let gvk = kube::api::GroupVersionKind::gvk("core.kubefed.io", "v1beta1", "KubeFedConfig");
    let resource = kube::discovery::ApiResource::from_gvk_with_plural(&gvk, "kubefedconfigs");
    let api: Api<DynamicObject> = Api::namespaced_with(hub, &namespace, &resource);

    // Defaulting: a bare spec comes back complete.
    let bare: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedConfig",
        "metadata": {"name": "kubefed", "namespace": namespace},
        "spec": {"scope": "Cluster"},
    }))?;
    let created = api.create(&PostParams::default(), &bare).await?;
    let spec = &created.data["spec"];
    assert_eq!(
        spec["controllerDuration"]["availableDelay"],
        json!("20s"),
        "{spec}"
    );
    assert_eq!(
        spec["clusterHealthCheck"]["failureThreshold"],
        json!(3),
        "{spec}"
    );
    assert_eq!(
        spec["syncController"]["adoptResources"],
        json!("Enabled"),
        "{spec}"
    );

    // Validation: leaseDuration must exceed renewDeadline.
    let bad = json!({
        "apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedConfig",
        "metadata": {"name": "other", "namespace": namespace},
        "spec": {"scope": "Cluster", "leaderElect": {"leaseDuration": "5s", "renewDeadline": "10s", "retryPeriod": "2s"}},
    });
    let message = refusal(&api, bad)
        .await?
        .expect("leaseDuration <= renewDeadline is refused");
    assert!(message.contains("spec.leaderElect"), "{message}");

    // Scope is immutable.
    let mut changed = created.clone();
    changed.data["spec"]["scope"] = json!("Namespaced");
    let refused = api
        .replace("kubefed", &PostParams::default(), &changed)
        .await
        .expect_err("changing the scope is refused");
    assert!(refused.to_string().contains("spec.scope"), "{refused}");
    Ok(())
}

#[tokio::test]
async fn federated_objects_with_bad_overrides_are_refused() -> anyhow::Result<()> {
    let federation = webhooks().await?;
    let hub = federation.hub().await?;
    let namespace = hubfed_e2e::unique_ns("webhook-federated");
    federation.create_hub_namespace(&namespace).await?;
    let resource = federated("ConfigMap");
    let api: Api<DynamicObject> = Api::namespaced_with(hub, &namespace, &resource);
    let object = |overrides: Value| {
        let mut o = federated_object(
            &resource,
            Some(&namespace),
            "webhook-probe",
            json!({
                "template": {"data": {"a": "b"}},
                "placement": placement(&["member1"]),
                "overrides": overrides,
            }),
        );
        o.types = Some(kube::api::TypeMeta {
            api_version: resource.api_version.clone(),
            kind: resource.kind.clone(),
        });
        serde_json::to_value(o).expect("serializable")
    };
    assert_eq!(
        refusal(&api, object(json!([{"clusterName": "member1", "clusterOverrides": [{"path": "/data/a", "value": "c"}]}]))).await?,
        None,
        "a valid override passes"
    );
    let message = refusal(
        &api,
        object(json!([{"clusterName": "member1", "clusterOverrides": [{"path": "/metadata/name", "value": "x"}]}])),
    )
    .await?
    .expect("overriding /metadata/name is refused");
    assert!(message.contains("/metadata/name"), "{message}");
    assert!(
        message.contains("spec.overrides[0].clusterOverrides[0].path"),
        "{message}"
    );

    let message = refusal(
        &api,
        object(json!([
            {"clusterName": "member1", "clusterOverrides": [{"path": "/data/a", "value": "c"}]},
            {"clusterName": "member1", "clusterOverrides": [{"path": "/data/b", "value": "d"}]},
        ])),
    )
    .await?
    .expect("a cluster listed twice is refused");
    assert!(message.contains("member1"), "{message}");
    Ok(())
}
