//! Setting a federation up in test clusters, without a controller: the control plane (CRDs,
//! namespace, KubeFedConfig, FTCs) and the harness's join (a ServiceAccount token in the
//! member, its Secret and KubeFedCluster in the hub).

use std::collections::BTreeMap;

use anyhow::Context as _;
use hubfed_api::defaulttypes::{default_federated_crds, default_federated_type_configs};
use hubfed_api::federatedtypeconfig::FederatedTypeConfig;
use hubfed_api::kubefedcluster::{KubeFedCluster, KubeFedClusterSpec, LocalSecretReference};
use hubfed_api::kubefedconfig::{KubeFedConfig, KubeFedConfigSpec};
use hubfed_api::names::{CLUSTER_SECRET_TOKEN_KEY, KUBEFED_CONFIG_NAME};
use hubfed_api::render::core_crds;
use hubfed_testenv::{Cluster, TestEnv};
use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource};

use crate::{FIELD_MANAGER, KUBEFED_NAMESPACE, MEMBERS, TIMEOUT, Wait, wait_for};

/// Lifetime of the member tokens the harness requests at join: longer than any test run.
const TOKEN_SECONDS: i64 = 365 * 24 * 3600;

/// Applies `object` with server-side apply as [`FIELD_MANAGER`] (idempotent set-up).
pub async fn apply<K>(api: &Api<K>, object: &K) -> anyhow::Result<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let name = object.meta().name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .with_context(|| format!("applying {} {name}", std::any::type_name::<K>()))
}

/// Installs `crds` (server-side apply) and waits until each is `Established`.
pub async fn install_crds(
    client: &Client,
    crds: &[CustomResourceDefinition],
) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        apply(&api, crd).await?;
    }
    let names: Vec<String> = crds
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    wait_for(
        &format!("CRDs {} to be Established", names.join(", ")),
        TIMEOUT,
        async || {
            let mut pending = Vec::new();
            for name in &names {
                let established = api.get_opt(name).await?.is_some_and(|crd| {
                    crd.status
                        .and_then(|s| s.conditions)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
                if !established {
                    pending.push(format!("{name} not Established"));
                }
            }
            Ok(Wait::all_or_pending(pending))
        },
    )
    .await
}

pub(crate) async fn delete_ignoring_absent<K>(api: &Api<K>, name: &str) -> anyhow::Result<()>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("deleting {name}")),
    }
}

/// The control plane's namespace in the cluster behind `client` (created if missing).
async fn apply_kubefed_namespace(client: &Client) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    apply(
        &namespaces,
        &Namespace {
            metadata: named(KUBEFED_NAMESPACE),
            ..Default::default()
        },
    )
    .await?;
    Ok(())
}

pub(crate) fn named(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        ..Default::default()
    }
}

pub(crate) fn secret_name(cluster: &str) -> String {
    format!("{cluster}-secret")
}

/// Everything but the controller: CRDs, the KubeFed namespace, the default FTCs, and
/// `member1` and `member2` registered.
pub async fn bootstrap(env: &TestEnv) -> anyhow::Result<()> {
    set_up_federation(env, None, &MEMBERS).await
}

/// Everything but the controller in `env`: [`install_control_plane`] with `config`, and the
/// clusters `joined` registered ([`register_cluster`]; not waited for, as no controller runs
/// yet).
pub async fn set_up_federation(
    env: &TestEnv,
    config: Option<KubeFedConfigSpec>,
    joined: &[&str],
) -> anyhow::Result<()> {
    let hub = env.hub().client().await?;
    install_control_plane(&hub, config).await?;
    for name in joined {
        let cluster = env
            .cluster(name)
            .with_context(|| format!("the test environment has no {name}"))?;
        register_cluster(&hub, name, cluster).await?;
    }
    Ok(())
}

/// CRDs, the control-plane namespace, the KubeFedConfig `config` when given (else the
/// controller creates one with defaults), and the default FederatedTypeConfigs.
pub async fn install_control_plane(
    hub: &Client,
    config: Option<KubeFedConfigSpec>,
) -> anyhow::Result<()> {
    let mut crds = core_crds();
    crds.extend(default_federated_crds()?);
    install_crds(hub, &crds).await?;
    apply_kubefed_namespace(hub).await?;
    if let Some(spec) = config {
        let mut config = KubeFedConfig::new(KUBEFED_CONFIG_NAME, spec);
        config.metadata.namespace = Some(KUBEFED_NAMESPACE.to_owned());
        apply(&Api::namespaced(hub.clone(), KUBEFED_NAMESPACE), &config).await?;
    }
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    for ftc in default_federated_type_configs(KUBEFED_NAMESPACE) {
        apply(&ftcs, &ftc).await?;
    }
    Ok(())
}

/// The join: in the cluster, a ServiceAccount bound to cluster-admin (least privilege is a
/// later issue) and a long-lived token for it; in the hub, the token Secret and the
/// KubeFedCluster.
pub async fn register_cluster(hub: &Client, name: &str, cluster: &Cluster) -> anyhow::Result<()> {
    register_cluster_at(hub, name, cluster, &cluster.server_url(), cluster.ca_pem()).await
}

/// [`register_cluster`] with the KubeFedCluster's endpoint and CA bundle given (a proxy in
/// front of the cluster).
pub async fn register_cluster_at(
    hub: &Client,
    name: &str,
    cluster: &Cluster,
    endpoint: &str,
    ca_pem: &str,
) -> anyhow::Result<()> {
    let member = cluster.client().await?;
    let account = format!("hubfed-{name}");
    let token = service_account_token(&member, &account, "cluster-admin").await?;
    register_endpoint(hub, name, endpoint, ca_pem, &token).await
}

/// A long-lived token of ServiceAccount `account` in the control plane's namespace of the
/// cluster behind `member`, bound to ClusterRole `cluster_role` (all created if missing).
pub async fn service_account_token(
    member: &Client,
    account: &str,
    cluster_role: &str,
) -> anyhow::Result<String> {
    apply_kubefed_namespace(member).await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(member.clone(), KUBEFED_NAMESPACE);
    apply(
        &accounts,
        &ServiceAccount {
            metadata: named(account),
            ..Default::default()
        },
    )
    .await?;
    let bindings: Api<ClusterRoleBinding> = Api::all(member.clone());
    apply(
        &bindings,
        &ClusterRoleBinding {
            metadata: named(account),
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".to_owned()),
                kind: "ClusterRole".to_owned(),
                name: cluster_role.to_owned(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".to_owned(),
                name: account.to_owned(),
                namespace: Some(KUBEFED_NAMESPACE.to_owned()),
                ..Default::default()
            }]),
        },
    )
    .await?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(TOKEN_SECONDS),
            ..Default::default()
        }),
        ..Default::default()
    };
    accounts
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .with_context(|| format!("requesting a token for {account}"))?
        .status
        .and_then(|status| status.token)
        .filter(|token| !token.is_empty())
        .with_context(|| format!("the token request for {account} returned no token"))
}

/// In the hub: the token Secret and the KubeFedCluster `name` for the API server at
/// `api_endpoint`, whose serving certificate `ca_pem` verifies.
pub async fn register_endpoint(
    hub: &Client,
    name: &str,
    api_endpoint: &str,
    ca_pem: &str,
    token: &str,
) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    apply(
        &secrets,
        &Secret {
            metadata: ObjectMeta {
                namespace: Some(KUBEFED_NAMESPACE.to_owned()),
                ..named(&secret_name(name))
            },
            data: Some(BTreeMap::from([(
                CLUSTER_SECRET_TOKEN_KEY.to_owned(),
                ByteString(token.as_bytes().to_vec()),
            )])),
            ..Default::default()
        },
    )
    .await?;
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let mut object = KubeFedCluster::new(
        name,
        KubeFedClusterSpec {
            api_endpoint: api_endpoint.to_owned(),
            ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
            secret_ref: LocalSecretReference {
                name: secret_name(name),
            },
            disabled_tls_validations: Vec::new(),
            proxy_url: String::new(),
            sync_mode: Default::default(),
        },
    );
    object.metadata.namespace = Some(KUBEFED_NAMESPACE.to_owned());
    apply(&clusters, &object).await?;
    Ok(())
}

/// A private environment as `config` says, started off the async runtime.
pub(crate) async fn start_env(config: hubfed_testenv::TestEnvConfig) -> anyhow::Result<TestEnv> {
    Ok(tokio::task::spawn_blocking(move || TestEnv::start(config)).await??)
}

/// A KubeFedConfig spec (cluster-scoped control plane) with a short leader election:
/// `lease_seconds`, `renew_deadline_seconds`, retried every second.
pub fn leader_election_spec(lease_seconds: u64, renew_deadline_seconds: u64) -> KubeFedConfigSpec {
    let mut spec =
        KubeFedConfigSpec::with_defaults(hubfed_api::federatedtypeconfig::ResourceScope::Cluster);
    spec.leader_elect = Some(hubfed_api::kubefedconfig::LeaderElectConfig {
        lease_duration: Some(format!("{lease_seconds}s")),
        renew_deadline: Some(format!("{renew_deadline_seconds}s")),
        retry_period: Some("1s".to_owned()),
        ..spec.leader_elect.clone().unwrap_or_default()
    });
    spec
}
