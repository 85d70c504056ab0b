//! A running federation for end-to-end tests: the hub and members of
//! [`hubfed_testenv::shared`], the KubeFed CRDs, the ten default FederatedTypeConfigs, both
//! members joined, and one `hubfed-controller` per test binary.
//!
//! [`Federation::shared`] sets all of this up on first use and blocks until both members'
//! KubeFedClusters are `Ready`. The controller then runs for as long as the test binary, on a
//! dedicated thread with its own multi-thread tokio runtime: every `#[tokio::test]` has its own
//! runtime, and kube clients die with the runtime that created them. For the same reason the
//! client getters here create a fresh client per call; keep one per test.
//!
//! Tests wait for conditions with [`wait_for`] and generous deadlines ([`TIMEOUT`]), never
//! sleep-and-assert. Each test works in its own namespace ([`unique_ns`]) or on uniquely named
//! cluster-scoped objects ([`unique_name`]), so tests run in parallel. Namespaced federated
//! objects propagate only inside a federated namespace (cluster-scoped control plane,
//! docs/kubefed-compatibility.md §1.6): [`Federation::create_federated_namespace`] makes one.
//!
//! Tests that need their own clusters — a KubeFedConfig in place before the controller starts,
//! members they join themselves, a controller they start, stop or kill — set them up with
//! [`PrivateFederation`] and start a controller with [`controller::ControllerTask`] or
//! [`controller::ControllerProcess`] (docs/development.md, "Writing an end-to-end test").
//!
//! Controller logs: set `HUBFED_E2E_LOG` to a tracing filter (e.g.
//! `info,hubfed_controller=debug`); they go to stderr, or to `HUBFED_E2E_LOG_FILE`.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::io::Write as _;
use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use hubfed_api::defaulttypes::{default_federated_crds, default_federated_type_configs};
use hubfed_api::federatedtypeconfig::{FederatedTypeConfig, plural_name};
use hubfed_api::kubefedcluster::{
    ClusterConditionType, KubeFedCluster, KubeFedClusterSpec, LocalSecretReference,
};
use hubfed_api::kubefedconfig::{KubeFedConfig, KubeFedConfigSpec};
use hubfed_api::names::{
    CLUSTER_SECRET_TOKEN_KEY, DEFAULT_KUBEFED_NAMESPACE, KUBEFED_CONFIG_NAME, MANAGED_LABEL,
    SYNC_CONTROLLER_FINALIZER, TYPES_GROUP, TYPES_VERSION,
};
use hubfed_api::render::core_crds;
use hubfed_testenv::{Cluster, TestEnv};
use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::{Client, Resource};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub mod agent;
pub mod controller;
pub mod fault_proxy;
mod private;
pub mod webhooks;

pub use private::{PrivateFederation, fast_health_checks};

/// Namespace of the control plane: FTCs, KubeFedClusters, their Secrets, the KubeFedConfig.
pub const KUBEFED_NAMESPACE: &str = DEFAULT_KUBEFED_NAMESPACE;
/// The members [`Federation::shared`] joins.
pub const MEMBERS: [&str; 2] = ["member1", "member2"];
/// Default deadline of a wait: generous, the machine is shared and has 2 cores.
pub const TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between two checks of a [`wait_for`].
pub const POLL_INTERVAL: Duration = Duration::from_millis(150);
/// Field manager of every write the tests make.
pub const FIELD_MANAGER: &str = "hubfed-e2e";
/// Lifetime of the member tokens the harness requests at join: longer than any test run.
const TOKEN_SECONDS: i64 = 365 * 24 * 3600;

static FEDERATION: OnceLock<Result<Federation, String>> = OnceLock::new();
/// Set when the controller stops; every [`wait_for`] then fails at once with this text.
static CONTROLLER_EXIT: OnceLock<String> = OnceLock::new();
static NAME_COUNTER: AtomicU32 = AtomicU32::new(0);

/// The federation of this test binary. See the [crate documentation](crate).
pub struct Federation {
    env: &'static TestEnv,
}

impl Federation {
    /// The federation of this test binary, set up on first use (blocking). Panics when it
    /// cannot be set up; every later call panics with the same message.
    pub fn shared() -> &'static Federation {
        Self::shared_by(|| start(hubfed_testenv::shared(), None, &MEMBERS))
    }

    /// Like [`Federation::shared`], on members that schedule pods: a kube-scheduler each, one
    /// Node of [`SCHEDULING_PODS_PER_NODE`] pods and the environment's stand-in kubelet
    /// ([`hubfed_testenv::Scheduling`]). Every test of a binary must use the same one of the
    /// two.
    pub fn shared_scheduling() -> &'static Federation {
        Self::shared_on(MEMBERS.len())
    }

    /// [`Federation::shared_scheduling`] with `members` members: `member1` and `member2`
    /// joined, the others (`member3`, ...) left for the test to join.
    pub fn shared_on(members: usize) -> &'static Federation {
        PrivateFederation::new()
            .members(members.max(MEMBERS.len()))
            .scheduling(hubfed_testenv::Scheduling {
                nodes_per_member: 1,
                pods_per_node: SCHEDULING_PODS_PER_NODE,
                ..Default::default()
            })
            .join(&MEMBERS)
            .shared()
    }

    /// The federation of this test binary, set up by `init` on first use.
    pub(crate) fn shared_by(
        init: impl FnOnce() -> Result<Federation, String>,
    ) -> &'static Federation {
        match FEDERATION.get_or_init(init) {
            Ok(federation) => federation,
            Err(e) => panic!("cannot start the federation: {e}"),
        }
    }

    /// The test clusters underneath.
    pub fn env(&self) -> &'static TestEnv {
        self.env
    }

    /// The kubeconfig of the test clusters (one admin context each: `hub`, `member1`, ...).
    pub fn kubeconfig(&self) -> &'static std::path::Path {
        self.env.kubeconfig_path()
    }

    /// A test cluster by kubeconfig context (`hub`, `member1`, ...).
    pub fn cluster(&self, name: &str) -> anyhow::Result<&'static Cluster> {
        self.env
            .cluster(name)
            .with_context(|| format!("no test cluster named {name}"))
    }

    /// A new admin client of the hub, bound to the calling runtime.
    pub async fn hub(&self) -> anyhow::Result<Client> {
        self.env.hub().client().await
    }

    /// A new admin client of a test cluster (`hub`, `member1`, ...), bound to the calling
    /// runtime.
    pub async fn client(&self, cluster: &str) -> anyhow::Result<Client> {
        self.cluster(cluster)?.client().await
    }

    /// Joins `cluster` under the name `name` (as `hubfedctl join` will) and waits until its
    /// KubeFedCluster is `Ready`. Joining the hub itself as `"hub"` is allowed.
    pub async fn join(&self, name: &str, cluster: &Cluster) -> anyhow::Result<()> {
        self.join_via(name, cluster, &cluster.server_url(), cluster.ca_pem())
            .await
    }

    /// [`Self::join`] with the KubeFedCluster's endpoint and CA bundle given, e.g. those of a
    /// [`fault_proxy::FaultProxy`] in front of the cluster.
    pub async fn join_via(
        &self,
        name: &str,
        cluster: &Cluster,
        endpoint: &str,
        ca_pem: &str,
    ) -> anyhow::Result<()> {
        let hub = self.hub().await?;
        register_cluster_at(&hub, name, cluster, endpoint, ca_pem).await?;
        wait_clusters_ready(&hub, &[name]).await
    }

    /// Removes the KubeFedCluster `name` and its Secret, and waits until the KubeFedCluster is
    /// gone. What the member holds stays, as with KubeFed's unjoin.
    pub async fn unjoin(&self, name: &str) -> anyhow::Result<()> {
        let hub = self.hub().await?;
        let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
        let secrets: Api<Secret> = Api::namespaced(hub, KUBEFED_NAMESPACE);
        delete_ignoring_absent(&clusters, name).await?;
        delete_ignoring_absent(&secrets, &secret_name(name)).await?;
        wait_for(
            &format!("KubeFedCluster {name} to be deleted"),
            TIMEOUT,
            async || match clusters.get_opt(name).await? {
                None => Ok(Wait::Done(())),
                Some(_) => Ok(Wait::Pending("it still exists".into())),
            },
        )
        .await
    }

    /// Creates namespace `namespace` on the hub (only there).
    pub async fn create_hub_namespace(&self, namespace: &str) -> anyhow::Result<()> {
        create_hub_namespace(&self.hub().await?, namespace).await
    }

    /// Creates namespace `namespace` on the hub and its FederatedNamespace placed on
    /// `clusters`, and waits until each of them holds the namespace, managed.
    pub async fn create_federated_namespace(
        &self,
        namespace: &str,
        clusters: &[&str],
    ) -> anyhow::Result<()> {
        let mut members = Vec::new();
        for cluster in clusters {
            members.push((*cluster, self.client(cluster).await?));
        }
        create_federated_namespace(&self.hub().await?, &members, namespace).await
    }

    /// A member's (or the hub's) object of type `resource` as JSON; `None` when absent.
    pub async fn member_object(
        &self,
        cluster: &str,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> anyhow::Result<Option<Value>> {
        let api = dynamic_api(self.client(cluster).await?, resource, namespace);
        get_value(&api, name).await
    }
}

/// Creates namespace `namespace` on the `hub` (only there).
pub async fn create_hub_namespace(hub: &Client, namespace: &str) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    let object = Namespace {
        metadata: named(namespace),
        ..Default::default()
    };
    namespaces
        .create(&PostParams::default(), &object)
        .await
        .with_context(|| format!("creating namespace {namespace} on the hub"))?;
    Ok(())
}

/// Creates namespace `namespace` on the `hub` and its FederatedNamespace placed on the
/// `members` (name, client), and waits until each of them holds the namespace, managed.
pub async fn create_federated_namespace(
    hub: &Client,
    members: &[(&str, Client)],
    namespace: &str,
) -> anyhow::Result<()> {
    create_hub_namespace(hub, namespace).await?;
    let clusters: Vec<&str> = members.iter().map(|(name, _)| *name).collect();
    create_federated(
        hub,
        "Namespace",
        Some(namespace),
        namespace,
        json!({ "placement": placement(&clusters) }),
    )
    .await?;
    wait_for(
        &format!("namespace {namespace} in {}", clusters.join(", ")),
        TIMEOUT,
        async || {
            let mut missing = Vec::new();
            for (cluster, client) in members {
                let namespaces: Api<Namespace> = Api::all(client.clone());
                let found = namespaces.get_opt(namespace).await?;
                let found = found.map(serde_json::to_value).transpose()?;
                if let Some(problem) = member_mismatch(cluster, found.as_ref(), &[]) {
                    missing.push(problem);
                }
            }
            Ok(Wait::all_or_pending(missing))
        },
    )
    .await
}

/// What one check of a [`wait_for`] found.
#[derive(Debug)]
pub enum Wait<T> {
    /// The condition holds; the wait returns this value.
    Done(T),
    /// Not yet; the text says what was observed (shown if the deadline passes).
    Pending(String),
}

impl Wait<()> {
    /// `Done` when `problems` is empty, else `Pending` listing them.
    pub fn all_or_pending(problems: Vec<String>) -> Self {
        if problems.is_empty() {
            Wait::Done(())
        } else {
            Wait::Pending(problems.join("; "))
        }
    }
}

/// Polls `check` every [`POLL_INTERVAL`] until it returns [`Wait::Done`] or `timeout` passes.
///
/// An error from `check` fails the wait at once (use it for what can never recover, e.g. an
/// object that must not be deleted is gone). A timeout fails with `what` and the last
/// observation. If the controller has stopped, the wait fails at once saying why.
pub async fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> anyhow::Result<Wait<T>>,
) -> anyhow::Result<T> {
    let began = Instant::now();
    let mut last = String::from("nothing checked yet");
    loop {
        if let Some(exit) = CONTROLLER_EXIT.get() {
            bail!("while waiting for {what}: {exit} (last observed: {last})");
        }
        match check()
            .await
            .with_context(|| format!("while waiting for {what}"))?
        {
            Wait::Done(value) => return Ok(value),
            Wait::Pending(observed) => last = observed,
        }
        if began.elapsed() >= timeout {
            bail!(
                "timed out after {}s waiting for {what}; last observed: {last}",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// A name unique within this test binary (each binary has its own clusters): `<prefix>-<n>`.
/// Keep `prefix` a short DNS label.
pub fn unique_name(prefix: &str) -> String {
    let n = NAME_COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{n}")
}

/// A fresh namespace name for one test: `e2e-<prefix>-<n>`.
pub fn unique_ns(prefix: &str) -> String {
    unique_name(&format!("e2e-{prefix}"))
}

/// The `types.kubefed.io/v1beta1` type `Federated<kind>` (e.g. `federated("ConfigMap")`).
pub fn federated(kind: &str) -> ApiResource {
    let kind = format!("Federated{kind}");
    ApiResource {
        group: TYPES_GROUP.to_owned(),
        version: TYPES_VERSION.to_owned(),
        api_version: format!("{TYPES_GROUP}/{TYPES_VERSION}"),
        plural: plural_name(&kind),
        kind,
    }
}

/// The FTC of a default target kind (`ConfigMap`, `Deployment`, ...), as the harness created
/// it. Panics for other kinds: a test asking for one is wrong.
pub fn default_ftc(kind: &str) -> FederatedTypeConfig {
    default_federated_type_configs(KUBEFED_NAMESPACE)
        .into_iter()
        .find(|ftc| ftc.spec.target_type.kind == kind)
        .unwrap_or_else(|| panic!("{kind} is not a default federated type"))
}

/// The target type of a default federated kind, for reading member objects.
pub fn target(kind: &str) -> ApiResource {
    default_ftc(kind).spec.target_type.to_dynamic()
}

/// A dynamic API for `resource`: namespaced when `namespace` is given, else cluster-wide.
pub fn dynamic_api(
    client: Client,
    resource: &ApiResource,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    match namespace {
        Some(namespace) => Api::namespaced_with(client, namespace, resource),
        None => Api::all_with(client, resource),
    }
}

/// An object as JSON; `None` when it does not exist.
pub async fn get_value(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<Option<Value>> {
    Ok(api
        .get_opt(name)
        .await?
        .map(serde_json::to_value)
        .transpose()?)
}

/// A federated object of type `resource` with the given `spec`.
pub fn federated_object(
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
    spec: Value,
) -> DynamicObject {
    let mut object = DynamicObject::new(name, resource).data(json!({ "spec": spec }));
    object.metadata.namespace = namespace.map(str::to_owned);
    object
}

/// `spec.placement` naming exactly `clusters`.
pub fn placement(clusters: &[&str]) -> Value {
    let clusters: Vec<Value> = clusters
        .iter()
        .map(|name| json!({ "name": name }))
        .collect();
    json!({ "clusters": clusters })
}

/// Reads an object, lets `change` edit its JSON and writes it back with a PUT (retrying on
/// conflicts), like `kubectl edit`. Returns the object as written.
pub async fn modify(
    api: &Api<DynamicObject>,
    name: &str,
    change: impl FnMut(&mut Value),
) -> anyhow::Result<Value> {
    modify_as(api, name, FIELD_MANAGER, change).await
}

/// [`modify`] as field manager `manager` (e.g. `kubectl-edit`, to act as a person would).
pub async fn modify_as(
    api: &Api<DynamicObject>,
    name: &str,
    manager: &str,
    mut change: impl FnMut(&mut Value),
) -> anyhow::Result<Value> {
    let mut attempts = 0;
    loop {
        let mut value = serde_json::to_value(api.get(name).await?)?;
        change(&mut value);
        let object: DynamicObject = serde_json::from_value(value)?;
        let params = PostParams {
            field_manager: Some(manager.to_owned()),
            ..Default::default()
        };
        match api.replace(name, &params, &object).await {
            Ok(written) => return Ok(serde_json::to_value(written)?),
            Err(kube::Error::Api(status)) if status.code == 409 && attempts < 10 => {
                attempts += 1;
            }
            Err(e) => return Err(e).with_context(|| format!("updating {name}")),
        }
    }
}

/// Sets the value at JSON pointer `pointer` inside `target`, creating missing objects on the
/// way (array elements must exist).
pub fn set_pointer(target: &mut Value, pointer: &str, new: Value) {
    let mut current = target;
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        if current.is_null() {
            *current = json!({});
        }
        current = match current {
            Value::Object(map) => map.entry(token).or_insert(Value::Null),
            Value::Array(items) => {
                let index: usize = token
                    .parse()
                    .unwrap_or_else(|_| panic!("{pointer}: {token} is not an array index"));
                &mut items[index]
            }
            other => panic!("{pointer}: cannot descend into {other}"),
        };
    }
    *current = new;
}

/// The object's labels.
pub fn labels(object: &Value) -> BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the object carries `kubefed.io/managed=true`.
pub fn is_managed(object: &Value) -> bool {
    object["metadata"]["labels"][MANAGED_LABEL] == "true"
}

/// Why `object` (a copy in `cluster`) is not yet as wanted: it must exist, be managed and hold
/// each `(JSON pointer, value)` of `fields` (`None`: the field must be absent). `None` when all
/// holds.
pub fn member_mismatch(
    cluster: &str,
    object: Option<&Value>,
    fields: &[(&str, Option<&Value>)],
) -> Option<String> {
    let Some(object) = object else {
        return Some(format!("{cluster}: no object"));
    };
    let mut problems = Vec::new();
    if !is_managed(object) {
        problems.push(format!("not managed (labels {:?})", labels(object)));
    }
    if object["metadata"]["deletionTimestamp"].is_string() {
        problems.push("terminating".to_owned());
    }
    for (pointer, wanted) in fields {
        let actual = object.pointer(pointer);
        if actual != *wanted {
            problems.push(format!(
                "{pointer} is {}, want {}",
                show(actual),
                show(*wanted)
            ));
        }
    }
    (!problems.is_empty()).then(|| format!("{cluster}: {}", problems.join(", ")))
}

/// `Done` when the federated object has the sync finalizer, a current status with
/// `Propagation=True`, and an OK `status.clusters` entry for each of `clusters`.
pub fn propagated_ok(object: &Value, clusters: &[&str]) -> Wait<()> {
    let mut problems = Vec::new();
    let finalizers = &object["metadata"]["finalizers"];
    if !finalizers
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f == SYNC_CONTROLLER_FINALIZER))
    {
        problems.push(format!("finalizers {finalizers}"));
    }
    if !status_is_current(object) {
        problems.push(format!(
            "observedGeneration {} for generation {}",
            object["status"]["observedGeneration"], object["metadata"]["generation"]
        ));
    }
    match propagation_condition(object) {
        Some(condition) if condition["status"] == "True" => {}
        other => problems.push(format!("Propagation condition {}", show(other))),
    }
    for cluster in clusters {
        match cluster_status(object, cluster) {
            Some(entry) if entry.get("status").is_none_or(|s| s == "") => {}
            other => problems.push(format!("status.clusters[{cluster}] {}", show(other))),
        }
    }
    Wait::all_or_pending(problems)
}

/// A JSON value for a message; `absent` for `None`.
pub fn show(value: Option<&Value>) -> String {
    value.map_or_else(|| "absent".to_owned(), Value::to_string)
}

/// The `Propagation` condition of a federated object.
pub fn propagation_condition(object: &Value) -> Option<&Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|condition| condition["type"] == "Propagation")
}

/// The `status.clusters[]` entry of `cluster`.
pub fn cluster_status<'a>(object: &'a Value, cluster: &str) -> Option<&'a Value> {
    object["status"]["clusters"]
        .as_array()?
        .iter()
        .find(|entry| entry["name"] == cluster)
}

/// Whether the status was written for the object's current generation.
pub fn status_is_current(object: &Value) -> bool {
    object["status"]["observedGeneration"].as_i64().is_some()
        && object["status"]["observedGeneration"] == object["metadata"]["generation"]
}

/// One plain HTTP/1.0 GET on loopback (a controller's admin port): (status, body); `None` when
/// it fails or takes more than 10 s.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, body.to_owned()))
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .ok()
        .flatten()
}

/// Creates `Federated<kind>` `namespace/name` (or cluster-scoped `name`) on the hub with
/// `spec`; returns the API of its type in that namespace.
pub async fn create_federated(
    hub: &Client,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    spec: Value,
) -> anyhow::Result<Api<DynamicObject>> {
    let resource = federated(kind);
    let api = dynamic_api(hub.clone(), &resource, namespace);
    api.create(
        &PostParams::default(),
        &federated_object(&resource, namespace, name, spec),
    )
    .await
    .with_context(|| format!("creating Federated{kind} {name}"))?;
    Ok(api)
}

/// Runs `hubfedctl --kubeconfig <kubeconfig> --host-cluster-context hub <args>` in this process
/// (through `hubfedctl::run_async`, the code the binary runs): exit code, stdout, stderr.
pub async fn hubfedctl(kubeconfig: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let mut full = vec![
        "hubfedctl".to_owned(),
        "--kubeconfig".to_owned(),
        kubeconfig.display().to_string(),
        "--host-cluster-context".to_owned(),
        "hub".to_owned(),
    ];
    full.extend(args.iter().map(|a| (*a).to_owned()));
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let code = ::hubfedctl::run_async(full, &mut stdout, &mut stderr).await;
    (
        code,
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// Writes a line to stderr (not through the print macros, which the test harness captures):
/// timings and facts worth seeing in CI logs, never asserted.
pub fn report(line: impl Display) {
    let _ = writeln!(std::io::stderr(), "hubfed-e2e: {line}");
}

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

async fn delete_ignoring_absent<K>(api: &Api<K>, name: &str) -> anyhow::Result<()>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("deleting {name}")),
    }
}

fn named(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        ..Default::default()
    }
}

fn secret_name(cluster: &str) -> String {
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
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    apply(
        &namespaces,
        &Namespace {
            metadata: named(KUBEFED_NAMESPACE),
            ..Default::default()
        },
    )
    .await?;
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
    let namespaces: Api<Namespace> = Api::all(member.clone());
    apply(
        &namespaces,
        &Namespace {
            metadata: named(KUBEFED_NAMESPACE),
            ..Default::default()
        },
    )
    .await?;
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

/// Waits for an Event in `namespace` with `reason` whose message contains every one of `words`.
pub async fn wait_event(
    hub: &Client,
    namespace: &str,
    reason: &str,
    words: &[&str],
) -> anyhow::Result<()> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(hub.clone(), namespace);
    wait_for(
        &format!("a {reason} event naming {}", words.join(", ")),
        TIMEOUT,
        async || {
            let found = events
                .list(&kube::api::ListParams::default())
                .await?
                .items
                .into_iter()
                .any(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.message
                            .as_deref()
                            .is_some_and(|m| words.iter().all(|w| m.contains(w)))
                });
            Ok(if found {
                Wait::Done(())
            } else {
                Wait::Pending("no event yet".into())
            })
        },
    )
    .await
}

/// Whether the KubeFedCluster `cluster` reports Offline (and not Ready).
pub async fn is_offline(hub: &Client, cluster: &str) -> anyhow::Result<bool> {
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let object = clusters.get(cluster).await?;
    Ok(object
        .status
        .as_ref()
        .and_then(|s| s.condition(ClusterConditionType::Offline))
        .is_some_and(|c| c.status == "True")
        && !object.is_ready())
}

/// Waits (up to 2 minutes: default health checks take about 30 s) until `cluster` is Offline;
/// returns when it was seen so.
pub async fn wait_offline(hub: &Client, cluster: &str) -> anyhow::Result<Instant> {
    wait_for(
        &format!("{cluster} Offline"),
        Duration::from_secs(120),
        async || {
            Ok(if is_offline(hub, cluster).await? {
                Wait::Done(Instant::now())
            } else {
                Wait::Pending("not Offline".into())
            })
        },
    )
    .await
}

/// Waits until the KubeFedClusters `names` report Ready.
pub async fn wait_clusters_ready(hub: &Client, names: &[&str]) -> anyhow::Result<()> {
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    wait_for(
        &format!("KubeFedClusters {} to be Ready", names.join(", ")),
        TIMEOUT,
        async || {
            let mut pending = Vec::new();
            for name in names {
                match clusters.get_opt(name).await? {
                    Some(cluster) if cluster.is_ready() => {}
                    Some(cluster) => {
                        let conditions = cluster
                            .status
                            .map(|s| {
                                s.conditions
                                    .iter()
                                    .map(|c| {
                                        format!(
                                            "{}={} ({})",
                                            c.type_,
                                            c.status,
                                            c.message.as_deref().unwrap_or_default()
                                        )
                                    })
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            })
                            .unwrap_or_else(|| "no status".to_owned());
                        pending.push(format!(
                            "{name}: not {} [{conditions}]",
                            ClusterConditionType::Ready
                        ));
                    }
                    None => pending.push(format!("{name}: no KubeFedCluster")),
                }
            }
            Ok(Wait::all_or_pending(pending))
        },
    )
    .await
}

/// Pods one Node of [`Federation::shared_scheduling`] holds.
pub const SCHEDULING_PODS_PER_NODE: u32 = 40;

/// Sets the federation up in `env` ([`set_up_federation`] with `config` and `joined`) and
/// runs the controller on a thread of its own until the test binary exits; returns once the
/// `joined` members are `Ready`.
pub(crate) fn start(
    env: &'static TestEnv,
    config: Option<KubeFedConfigSpec>,
    joined: &[&str],
) -> Result<Federation, String> {
    let began = Instant::now();
    let (ready_tx, ready_rx) = mpsc::channel();
    let set_up = SetUp {
        config,
        joined: joined.iter().map(|name| (*name).to_owned()).collect(),
    };
    let joined = match joined {
        [] => "nothing joined".to_owned(),
        names => format!("{} joined and Ready", names.join(" + ")),
    };
    std::thread::Builder::new()
        .name("hubfed-controller".to_owned())
        .spawn(move || controller_thread(env, set_up, ready_tx))
        .map_err(|e| format!("cannot start the controller thread: {e}"))?;
    match ready_rx.recv() {
        Ok(Ok(())) => {
            report(format_args!(
                "federation (CRDs, FTCs, {joined}) set up in {:.1}s",
                began.elapsed().as_secs_f64()
            ));
            Ok(Federation { env })
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(CONTROLLER_EXIT
            .get()
            .cloned()
            .unwrap_or_else(|| "the controller thread ended during set-up".to_owned())),
    }
}

/// Runs set-up, then the controller until the test binary exits. Reports set-up success or
/// failure on `ready`, and records in [`CONTROLLER_EXIT`] why the controller stopped.
fn controller_thread(
    env: &'static TestEnv,
    set_up: SetUp,
    ready: mpsc::Sender<Result<(), String>>,
) {
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("hubfed-controller-rt")
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = ready.send(Err(format!("cannot build the controller runtime: {e}")));
            return;
        }
    };
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
        runtime.block_on(run_federation(env, set_up, ready.clone()))
    }));
    let exit = match outcome {
        Ok(exit) => exit,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            format!("the controller panicked: {message}")
        }
    };
    report(&exit);
    let _ = CONTROLLER_EXIT.set(exit.clone());
    let _ = ready.send(Err(exit));
}

/// What [`controller_thread`] sets up before the controller starts.
struct SetUp {
    config: Option<KubeFedConfigSpec>,
    joined: Vec<String>,
}

async fn run_federation(
    env: &'static TestEnv,
    set_up: SetUp,
    ready: mpsc::Sender<Result<(), String>>,
) -> String {
    let joined: Vec<&str> = set_up.joined.iter().map(String::as_str).collect();
    if let Err(e) = set_up_federation(env, set_up.config, &joined).await {
        return format!("federation set-up failed: {e:#}");
    }
    let hub = match env.hub().client().await {
        Ok(hub) => hub,
        Err(e) => return format!("cannot build the controller's hub client: {e:#}"),
    };
    // Never cancelled: the controller lives as long as the test binary.
    let shutdown = CancellationToken::new();
    let controller = hubfed_controller::run(
        hub.clone(),
        hubfed_controller::ControllerConfig::default(),
        shutdown,
    );
    tokio::pin!(controller);
    tokio::select! {
        result = &mut controller => return describe_exit(result),
        result = wait_clusters_ready(&hub, &joined) => {
            if let Err(e) = result {
                return format!("the members did not become Ready: {e:#}");
            }
        }
    }
    let _ = ready.send(Ok(()));
    describe_exit(controller.await)
}

fn describe_exit(result: anyhow::Result<()>) -> String {
    match result {
        Ok(()) => "the controller stopped without being asked to".to_owned(),
        Err(e) => format!("the controller failed: {e:#}"),
    }
}

fn init_logging() {
    let Ok(filter) = std::env::var("HUBFED_E2E_LOG") else {
        return;
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let file = std::env::var("HUBFED_E2E_LOG_FILE")
        .ok()
        .and_then(|path| std::fs::File::create(path).ok());
    let _ = match file {
        Some(file) => builder
            .with_ansi(false)
            .with_writer(std::sync::Arc::new(file))
            .try_init(),
        None => builder.with_writer(std::io::stderr).try_init(),
    };
}

/// A private environment of the test's own (a hub and `members` members, with or without
/// kube-controller-manager), started off the async runtime.
pub async fn private_env(members: usize, controller_manager: bool) -> anyhow::Result<TestEnv> {
    start_env(hubfed_testenv::TestEnvConfig {
        members,
        controller_manager,
        ..Default::default()
    })
    .await
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

/// The spec of a FederatedDeployment of `replicas` nginx pods labelled `app: <app>`, placed on
/// `clusters`.
pub fn deployment_spec(app: &str, replicas: i64, clusters: &[&str]) -> Value {
    json!({
        "template": {"spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": app, "image": "nginx"}]},
            },
        }},
        "placement": placement(clusters),
    })
}
