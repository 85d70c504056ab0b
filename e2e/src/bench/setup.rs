//! The federation under test: the KubeFed CRDs and default FederatedTypeConfigs in the hub,
//! N members joined with TokenRequest tokens (as the e2e harness joins two) or, with
//! `--pull`, by `hubfedctl join --mode pull`, and the benchmark namespaces federated onto
//! every member.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};
use hubfed_api::kubefedcluster::KubeFedCluster;
use hubfed_api::names::MANAGED_LABEL;
use hubfed_api::work::AGENT_SERVICE_ACCOUNT;
use hubfed_e2e::{KUBEFED_NAMESPACE, apply, federated, hubfedctl as hubfedctl_e2e};
use hubfed_testenv::{Cluster, TestEnv};
use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};

use super::controller::ControllerProcess;
use super::procstat::Groups;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// No reconcile for this long: the controller has nothing left to do.
pub const QUIET: Duration = Duration::from_secs(3);

/// The clusters and clients of a run.
pub struct Federation {
    pub env: TestEnv,
    pub hub: Client,
    pub members: Vec<Client>,
    pub names: Vec<String>,
    /// The agents' processes (pull mode), a CPU group of their own.
    pub agent_pids: Vec<u32>,
    /// `--slow-member-ms`: the proxy the controller reaches the last member through (kept
    /// for the whole run; the benchmark's own clients talk to the member directly).
    pub slow_proxy: Option<hubfed_testenv::DelayProxy>,
}

impl Federation {
    pub fn names(&self) -> Vec<&str> {
        self.names.iter().map(String::as_str).collect()
    }

    /// CPU groups: the controller, the member API servers, the hub, etcd and this process.
    pub fn groups(&self, controller: Option<&ControllerProcess>) -> Groups {
        let member_pids: Vec<u32> = self.env.members().iter().flat_map(|c| c.pids()).collect();
        let hub_pids = self.env.hub().pids();
        let etcd: Vec<u32> = self
            .env
            .pids()
            .into_iter()
            .filter(|p| !member_pids.contains(p) && !hub_pids.contains(p))
            .collect();
        let mut groups = BTreeMap::new();
        groups.insert(
            "controller",
            controller.map(|c| vec![c.pid]).unwrap_or_default(),
        );
        groups.insert("member apiservers", member_pids);
        groups.insert("hub apiserver", hub_pids);
        groups.insert("etcd", etcd);
        groups.insert("bench", vec![std::process::id()]);
        if !self.agent_pids.is_empty() {
            groups.insert("agents", self.agent_pids.clone());
        }
        Groups(groups)
    }
}

/// The hub Secret `hubfedctl join --mode pull` makes for the agent's token (in the cluster's
/// work namespace).
const AGENT_TOKEN_SECRET: &str = "hubfed-agent-token";
/// Lifetime of the agent tokens the benchmark fills in: a day, far beyond any run.
const AGENT_TOKEN_SECONDS: i64 = 24 * 3600;

fn named(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        ..Default::default()
    }
}

/// Joins `cluster` as `name`: a cluster-admin ServiceAccount in the member and a token for
/// it, then the token Secret and the KubeFedCluster in the hub.
pub async fn join(hub: &Client, name: &str, cluster: &Cluster) -> anyhow::Result<()> {
    hubfed_e2e::register_cluster(hub, name, cluster).await
}

/// Joins member `name` of `env` in pull mode: `hubfedctl join NAME --mode pull
/// --cluster-context NAME` (run in process, as the e2e tests run it). The join waits for the
/// hub's token controller to fill the agent's token Secret; the benchmark runs no
/// kube-controller-manager, so meanwhile the benchmark fills it itself with a TokenRequest
/// token for the agent's ServiceAccount and the hub's CA — the pull equivalent of the push
/// join's TokenRequest tokens.
pub async fn join_pull(env: &TestEnv, hub: &Client, name: &str) -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    let filler = tokio::spawn(fill_agent_token(
        hub.clone(),
        name.to_owned(),
        env.hub().ca_pem().to_owned(),
        stop.clone(),
    ));
    let args = ["join", name, "--mode", "pull", "--cluster-context", name];
    let (code, out, err) = hubfedctl_e2e(env.kubeconfig_path(), &args).await;
    stop.cancel();
    let filled = filler.await.context("the token filler task")?;
    anyhow::ensure!(
        code == 0,
        "hubfedctl {}: exit {code}\n{out}\n{err}\ntoken filler: {filled:?}",
        args.join(" ")
    );
    filled
}

/// Fills the agent's hub token Secret of cluster `name` once it exists, until `stop`.
async fn fill_agent_token(
    hub: Client,
    name: String,
    hub_ca: String,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let work_ns = hubfed_core::pull::cluster_namespace(&name);
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), &work_ns);
    let accounts: Api<ServiceAccount> = Api::namespaced(hub.clone(), &work_ns);
    loop {
        let secret = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            secret = secrets.get_opt(AGENT_TOKEN_SECRET) => secret?,
        };
        let empty = secret.as_ref().is_some_and(|s| {
            s.data
                .as_ref()
                .and_then(|d| d.get("token"))
                .is_none_or(|t| t.0.is_empty())
        });
        if empty && accounts.get_opt(AGENT_SERVICE_ACCOUNT).await?.is_some() {
            let request = TokenRequest {
                spec: Some(TokenRequestSpec {
                    expiration_seconds: Some(AGENT_TOKEN_SECONDS),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let token = accounts
                .create_token_request(AGENT_SERVICE_ACCOUNT, &PostParams::default(), &request)
                .await
                .with_context(|| format!("{work_ns}: a token for {AGENT_SERVICE_ACCOUNT}"))?
                .status
                .and_then(|s| s.token)
                .filter(|t| !t.is_empty())
                .with_context(|| format!("{work_ns}: the token request returned no token"))?;
            let patch = json!({"data": {
                "token": ByteString(token.into_bytes()),
                "ca.crt": ByteString(hub_ca.clone().into_bytes()),
            }});
            secrets
                .patch(
                    AGENT_TOKEN_SECRET,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .with_context(|| format!("{work_ns}: filling {AGENT_TOKEN_SECRET}"))?;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every KubeFedCluster of `names` is Ready.
pub async fn wait_clusters_ready(
    hub: &Client,
    names: &[String],
    timeout: Duration,
) -> anyhow::Result<()> {
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let deadline = Instant::now() + timeout;
    loop {
        let ready: Vec<String> = clusters
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(KubeFedCluster::is_ready)
            .map(|c| c.name_any())
            .collect();
        let missing: Vec<&String> = names.iter().filter(|n| !ready.contains(n)).collect();
        if missing.is_empty() {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "KubeFedClusters not Ready after {}s: {missing:?}",
            timeout.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Creates the hub namespaces and their FederatedNamespaces placed on `clusters`.
pub async fn federate_namespaces(
    hub: &Client,
    namespaces: &[String],
    clusters: &[&str],
) -> anyhow::Result<()> {
    let hub_namespaces: Api<Namespace> = Api::all(hub.clone());
    let resource = federated("Namespace");
    for ns in namespaces {
        apply(
            &hub_namespaces,
            &Namespace {
                metadata: named(ns),
                ..Default::default()
            },
        )
        .await?;
        let api = hubfed_e2e::dynamic_api(hub.clone(), &resource, Some(ns));
        let object = hubfed_e2e::federated_object(
            &resource,
            Some(ns),
            ns,
            json!({"template": {}, "placement": hubfed_e2e::placement(clusters)}),
        );
        api.create(&PostParams::default(), &object)
            .await
            .with_context(|| format!("creating FederatedNamespace {ns}"))?;
    }
    Ok(())
}

/// Waits until every member holds every namespace of `namespaces`, managed.
pub async fn wait_member_namespaces(
    members: &[Client],
    namespaces: &[String],
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let selector = ListParams::default().labels(&format!("{MANAGED_LABEL}=true"));
    loop {
        let mut missing = 0;
        for member in members {
            let present: Vec<String> = Api::<Namespace>::all(member.clone())
                .list_metadata(&selector)
                .await?
                .items
                .into_iter()
                .map(|n| n.name_any())
                .collect();
            missing += namespaces.iter().filter(|n| !present.contains(n)).count();
        }
        if missing == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{missing} member namespaces still missing after {}s",
            timeout.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Creates plain (unfederated) namespaces in every member, for the raw phase.
pub async fn create_member_namespaces(
    members: &[Client],
    namespaces: &[String],
) -> anyhow::Result<()> {
    for member in members {
        let api: Api<Namespace> = Api::all(member.clone());
        for ns in namespaces {
            apply(
                &api,
                &Namespace {
                    metadata: named(ns),
                    ..Default::default()
                },
            )
            .await?;
        }
    }
    Ok(())
}

/// Runs `work` over `items` with at most `concurrency` in flight; fails on the first error.
pub async fn for_each_concurrent<T, F, Fut>(
    items: impl IntoIterator<Item = T>,
    concurrency: usize,
    work: F,
) -> anyhow::Result<()>
where
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    futures::stream::iter(items)
        .map(work)
        .buffer_unordered(concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Turns remote status collection on: a KubeFedConfig (defaults, as the controller would
/// write it) with the feature gate `RawResourceStatusCollection` enabled, and
/// `statusCollection: Enabled` on the benchmarked types.
pub async fn enable_remote_status(hub: &Client) -> anyhow::Result<()> {
    use hubfed_api::federatedtypeconfig::{FederatedTypeConfig, ResourceScope};
    use hubfed_api::kubefedconfig::{
        ConfigurationMode, FeatureGatesConfig, KubeFedConfig, KubeFedConfigSpec,
    };
    use hubfed_api::names::KUBEFED_CONFIG_NAME;
    use kube::api::{Patch, PatchParams};
    let mut spec = KubeFedConfigSpec::with_defaults(ResourceScope::Cluster);
    spec.feature_gates
        .retain(|g| g.name != "RawResourceStatusCollection");
    spec.feature_gates.push(FeatureGatesConfig {
        name: "RawResourceStatusCollection".to_owned(),
        configuration: ConfigurationMode::Enabled,
    });
    let mut config = KubeFedConfig::new(KUBEFED_CONFIG_NAME, spec);
    config.metadata.namespace = Some(KUBEFED_NAMESPACE.to_owned());
    apply(&Api::namespaced(hub.clone(), KUBEFED_NAMESPACE), &config).await?;
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    for name in ["configmaps", "secrets", "deployments.apps"] {
        ftcs.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"statusCollection": "Enabled"}})),
        )
        .await
        .with_context(|| format!("enabling status collection on {name}"))?;
    }
    Ok(())
}

/// Which of hubfed's admission webhooks for federated objects the benchmark registers.
#[derive(Clone, Copy, Debug)]
pub struct Hooks {
    /// The sync-finalizer webhook (`/default-federated`, creates).
    pub finalizer: bool,
    /// The validating webhook (`/validate-federated`, creates and updates).
    pub validation: bool,
}

impl std::fmt::Display for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = [
            (
                self.finalizer,
                "sync finalizer (federated objects are created with it)",
            ),
            (
                self.validation,
                "validation of federated objects' creates and updates",
            ),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        f.write_str(&names.join(", "))
    }
}

/// Serves hubfed's admission webhooks of federated objects in this process and registers
/// those of `hooks` on the hub as the chart does: the sync-finalizer webhook
/// (`/default-federated`; federated objects are created with the sync finalizer, a hub write
/// less per object in the cold start) and the validating one (`/validate-federated`; every
/// create and update is validated). Returns once a dry-run create of `probe` through `api`
/// passes them (with the finalizer, when asked: the webhook's FTC cache is filled); the
/// server stops when the guard is dropped.
pub async fn admission_webhooks(
    fed: &Federation,
    hooks: Hooks,
    api: &Api<kube::api::DynamicObject>,
    probe: &kube::api::DynamicObject,
    timeout: Duration,
) -> anyhow::Result<tokio_util::sync::DropGuard> {
    use hubfed_e2e::webhooks::{
        federated_validation_hook, free_port, sync_finalizer_hook, wait_listening,
        write_certificate,
    };
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };

    let port = free_port()?;
    let dir = fed.env.dir().join("webhook-certs");
    let ca = write_certificate(&dir)?;
    let stop = CancellationToken::new();
    // A thread and runtime of its own, as a replica's webhook server has a process of its own:
    // the benchmark's busy runtime (its member watches) does not delay the reviews' answers.
    std::thread::spawn({
        let (hub, stop) = (fed.hub.clone(), stop.clone());
        move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()?;
            runtime.block_on(hubfed_controller::webhook::serve(
                ([127, 0, 0, 1], port).into(),
                dir,
                hub,
                KUBEFED_NAMESPACE.to_owned(),
                stop,
            ))
        }
    });
    wait_listening(port).await?;
    if hooks.finalizer {
        let config: MutatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": "hubfed-bench-sync-finalizer"},
            "webhooks": [sync_finalizer_hook(port, &ca)],
        }))?;
        Api::<MutatingWebhookConfiguration>::all(fed.hub.clone())
            .create(&PostParams::default(), &config)
            .await
            .context("registering the sync-finalizer webhook")?;
    }
    if hooks.validation {
        let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": "hubfed-bench-validation"},
            "webhooks": [federated_validation_hook(port, &ca)],
        }))?;
        Api::<ValidatingWebhookConfiguration>::all(fed.hub.clone())
            .create(&PostParams::default(), &config)
            .await
            .context("registering the validating webhook of federated objects")?;
    }
    let began = Instant::now();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    loop {
        let passed = match api.create(&dry_run, probe).await {
            Ok(created) => {
                !hooks.finalizer
                    || created
                        .finalizers()
                        .iter()
                        .any(|f| f == hubfed_api::names::SYNC_CONTROLLER_FINALIZER)
            }
            // The validating webhook not answering yet (it fails closed).
            Err(kube::Error::Api(e)) if hooks.validation && e.code >= 500 => false,
            Err(e) => return Err(e.into()),
        };
        if passed {
            return Ok(stop.drop_guard());
        }
        anyhow::ensure!(
            began.elapsed() < timeout,
            "a dry-run create did not pass hubfed's admission webhooks ({hooks}) within {}s",
            timeout.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
