//! A member whose KubeFedCluster `apiEndpoint` is a URL with a path (issue 16 §2), as for an
//! API server behind a path-routing proxy: member2's API server is served by a TLS-terminating
//! proxy only under `/path/to/endpoint` (404 anywhere else) and joined through it as
//! `member2-via-path`. The cluster must turn Ready, and a FederatedNamespace and a
//! FederatedConfigMap placed on it must reach member2 and leave it again, all through the
//! proxy.
//!
//! Its own test binary: it changes the cluster registry. member2's own registration is
//! unjoined for the duration (two KubeFedClusters for the same API server would fight: each
//! deletes the managed objects not placed on it) and joined again at the end.

use anyhow::{Context as _, ensure};
use hubfed_api::kubefedcluster::{KubeFedCluster, KubeFedClusterSpec, LocalSecretReference};
use hubfed_core::validation::{summary, validate_kubefed_cluster_spec};
use hubfed_e2e::fault_proxy::FaultProxy;
use hubfed_e2e::{
    Federation, KUBEFED_NAMESPACE, TIMEOUT, Wait, create_federated, get_value, member_mismatch,
    placement, propagated_ok, target, unique_ns, wait_for,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams};
use serde_json::json;

/// The name member2 is joined under through the proxy.
const VIA_PATH: &str = "member2-via-path";
/// The path the proxy serves member2's API server under (KubeFed's own example).
const PATH: &str = "/path/to/endpoint";
const CONFIG_MAP: &str = "through-path";

#[tokio::test]
async fn a_member_behind_a_path_routing_proxy_is_used() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let member2 = fed.cluster("member2")?;
    let proxy = FaultProxy::start(&member2.server_url(), member2.ca_pem(), Some(PATH)).await?;
    let endpoint = proxy.url();
    ensure!(
        endpoint.ends_with(PATH),
        "the proxy's URL {endpoint} lacks {PATH}"
    );

    // What the validating webhook decides (the harness runs none): KubeFed accepts it.
    let spec = KubeFedClusterSpec {
        api_endpoint: endpoint.clone(),
        ca_bundle: Some(ByteString(proxy.ca_pem().as_bytes().to_vec())),
        secret_ref: LocalSecretReference {
            name: format!("{VIA_PATH}-token"),
        },
        disabled_tls_validations: Vec::new(),
        proxy_url: String::new(),
        sync_mode: Default::default(),
    };
    let errors = validate_kubefed_cluster_spec(&spec);
    ensure!(
        errors.is_empty(),
        "apiEndpoint {endpoint} refused: {}",
        summary(&errors)
    );

    fed.unjoin("member2").await?;
    let result = scenario(fed, &proxy).await;
    let unjoined = fed.unjoin(VIA_PATH).await;
    let rejoined = fed.join("member2", member2).await;
    result?;
    unjoined?;
    rejoined.context("joining member2 again")?;
    Ok(())
}

async fn scenario(fed: &Federation, proxy: &FaultProxy) -> anyhow::Result<()> {
    let hub = fed.hub().await?;
    // Ready means /healthz answered ok: the proxy answers 404 outside the path.
    fed.join_via(
        VIA_PATH,
        fed.cluster("member2")?,
        &proxy.url(),
        proxy.ca_pem(),
    )
    .await?;
    let member2 = fed.client("member2").await?;
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let version = clusters
        .get(VIA_PATH)
        .await?
        .status
        .and_then(|status| status.kubernetes_version)
        .unwrap_or_default();
    ensure!(
        !version.is_empty(),
        "{VIA_PATH} is Ready without a kubernetesVersion (/version)"
    );

    let ns = unique_ns("endpoint-path");
    fed.create_hub_namespace(&ns).await?;
    let fns_api = create_federated(
        &hub,
        "Namespace",
        Some(&ns),
        &ns,
        json!({ "placement": placement(&[VIA_PATH]) }),
    )
    .await?;
    let fcm_api = create_federated(
        &hub,
        "ConfigMap",
        Some(&ns),
        CONFIG_MAP,
        json!({
            "template": {"data": {"key": "value"}},
            "placement": placement(&[VIA_PATH]),
        }),
    )
    .await?;

    let forwarded_before = proxy.forwarded();
    let value = json!("value");
    wait_for(
        &format!("the namespace and ConfigMap in member2, propagated through {VIA_PATH}"),
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            let namespace = fed
                .member_object("member2", &target("Namespace"), None, &ns)
                .await?;
            problems.extend(member_mismatch(
                "member2 namespace",
                namespace.as_ref(),
                &[],
            ));
            let config_map = fed
                .member_object("member2", &target("ConfigMap"), Some(&ns), CONFIG_MAP)
                .await?;
            problems.extend(member_mismatch(
                "member2 ConfigMap",
                config_map.as_ref(),
                &[("/data/key", Some(&value))],
            ));
            for (api, name) in [(&fns_api, ns.as_str()), (&fcm_api, CONFIG_MAP)] {
                match get_value(api, name).await? {
                    Some(object) => {
                        if let Wait::Pending(problem) = propagated_ok(&object, &[VIA_PATH]) {
                            problems.push(format!("{name}: {problem}"));
                        }
                    }
                    None => problems.push(format!("{name}: the federated object is gone")),
                }
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;
    ensure!(
        proxy.forwarded() > forwarded_before,
        "nothing went through the proxy while the objects propagated"
    );

    // Removal goes through the path too.
    fcm_api
        .delete(CONFIG_MAP, &DeleteParams::default())
        .await
        .context("deleting the FederatedConfigMap")?;
    fns_api
        .delete(&ns, &DeleteParams::default())
        .await
        .context("deleting the FederatedNamespace")?;
    let member2_namespaces: Api<Namespace> = Api::all(member2);
    wait_for(
        "the federated objects gone and member2's namespace deleted",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            for (api, name) in [(&fcm_api, CONFIG_MAP), (&fns_api, ns.as_str())] {
                if get_value(api, name).await?.is_some() {
                    problems.push(format!("{name}: the federated object still exists"));
                }
            }
            if let Some(namespace) = member2_namespaces.get_opt(&ns).await?
                && namespace.metadata.deletion_timestamp.is_none()
            {
                problems.push("member2: the namespace is not being deleted".to_owned());
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;
    Api::<Namespace>::all(hub)
        .delete(&ns, &DeleteParams::default())
        .await
        .context("deleting the hub's namespace")?;
    Ok(())
}
