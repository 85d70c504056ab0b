//! One sync controller per enabled FederatedTypeConfig.
//!
//! A kube-runtime `Controller` watches the `Federated<Kind>` objects on the hub; member
//! watches (label-selected on `kubefed.io/managed=true`, metadata only) feed the same queue
//! with the federated object each member object belongs to, so drift and deletions in a member
//! are corrected as soon as they happen. Cluster registry changes re-queue everything.
//! Every decision is `hubfed_core::plan`; this module observes and carries plans out.

mod create_only;
mod deletions;
mod dispatch;
mod gc;
mod hub_writes;
mod identity;
mod members;
mod observe;
mod reconcile;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use hubfed_api::federatedtypeconfig::FederatedTypeConfig;
use hubfed_api::kubefedconfig::{KubeFedConfig, KubeFedConfigSpec};
use hubfed_api::propagatedversion::{ClusterPropagatedVersion, PropagatedVersion};
use hubfed_core::desired::TargetType;
use hubfed_core::placement::ControlPlaneScope;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::controller::Controller;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::clusters::MemberClientPool;
use crate::run::ControllerConfig;
use members::MemberWatches;

/// kubectl's copy of the last applied object, on objects managed with `kubectl apply`.
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// State shared by every sync controller.
pub struct Shared {
    pub hub: Client,
    pub pool: Arc<MemberClientPool>,
    pub kubefed_namespace: String,
    pub scope: ControlPlaneScope,
    /// KubeFedConfig `syncController.adoptResources`, kept current by a watch.
    pub adopt_resources: std::sync::atomic::AtomicBool,
    /// KubeFedConfig feature gate `RawResourceStatusCollection` (a change restarts the
    /// controllers): with an FTC's `statusCollection: Enabled`, copies' status is collected.
    pub raw_status_collection: bool,
    pub reconcile_concurrency: u16,
    pub propagated_versions: Store<PropagatedVersion>,
    pub cluster_propagated_versions: Store<ClusterPropagatedVersion>,
    /// Becomes `true` once both version caches have loaded. One task waits on the stores and
    /// publishes here: kube-runtime's `Store::wait_until_ready` wakes only the last of several
    /// concurrent waiters (its one-shot receiver keeps a single waker), so the sync
    /// controllers must not each wait on the shared stores themselves.
    hub_caches_ready: tokio::sync::watch::Receiver<bool>,
    /// Which member clusters are the hub itself (compared by the UID of `kube-system`).
    pub hub_identities: identity::HubIdentities,
    /// The UID of the control plane's namespace in the hub, once read: this control plane's
    /// identity in the proof of ownership on member copies.
    control_plane: tokio::sync::OnceCell<String>,
    /// Bumped when a KubeFedConfig setting that changes plans changes.
    settings: tokio::sync::watch::Sender<u64>,
    shutdown: CancellationToken,
}

fn spawn_reflector<K>(api: Api<K>, shutdown: CancellationToken) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                item = stream.next() => match item {
                    Some(Err(e)) => warn!(error = %e, "hub watch error"),
                    Some(Ok(_)) => {}
                    None => break,
                },
            }
        }
    });
    reader
}

/// A readiness flag any number of tasks can wait on, set once both stores have loaded.
///
/// kube-runtime's `Store::wait_until_ready` is backed by a one-shot receiver that keeps a
/// single waker: of several tasks waiting on one store at once, only the last to poll is
/// woken. So exactly one task waits on the stores here and publishes to a `watch` channel;
/// its sender is dropped (waiters see an error) if a store's writer goes away first.
fn readiness<A, B>(a: Store<A>, b: Store<B>) -> tokio::sync::watch::Receiver<bool>
where
    A: kube::Resource + Clone + Send + Sync + 'static,
    A::DynamicType: std::hash::Hash + Eq + Clone + Send + Sync,
    B: kube::Resource + Clone + Send + Sync + 'static,
    B::DynamicType: std::hash::Hash + Eq + Clone + Send + Sync,
{
    let (ready_tx, ready_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if a.wait_until_ready().await.is_ok() && b.wait_until_ready().await.is_ok() {
            let _ = ready_tx.send(true);
        }
    });
    ready_rx
}

impl Shared {
    /// Whether the sync controller of `ftc` collects the member copies' status into
    /// `status.clusters[].remoteStatus` (KubeFed's raw resource status collection).
    pub fn collects_status(&self, ftc: &FederatedTypeConfig) -> bool {
        self.raw_status_collection
            && ftc
                .spec
                .status_collection
                .is_some_and(hubfed_api::federatedtypeconfig::EnabledDisabled::is_enabled)
    }

    pub fn start(
        hub: Client,
        pool: Arc<MemberClientPool>,
        config: &ControllerConfig,
        kubefed: &KubeFedConfigSpec,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let scope = match kubefed.scope {
            hubfed_api::federatedtypeconfig::ResourceScope::Namespaced => {
                ControlPlaneScope::Namespaced
            }
            hubfed_api::federatedtypeconfig::ResourceScope::Cluster => ControlPlaneScope::Cluster,
        };
        let adopt_resources = std::sync::atomic::AtomicBool::new(adopt_resources_enabled(kubefed));
        let max = kubefed
            .sync_controller
            .as_ref()
            .and_then(|s| s.max_concurrent_reconciles)
            .unwrap_or(1);
        let reconcile_concurrency = config
            .reconcile_concurrency
            .max(u16::try_from(max).unwrap_or(u16::MAX));
        let (pv_api, cpv_api) = match scope {
            ControlPlaneScope::Cluster => (Api::all(hub.clone()), Api::all(hub.clone())),
            ControlPlaneScope::Namespaced => (
                Api::namespaced(hub.clone(), &config.kubefed_namespace),
                Api::all(hub.clone()),
            ),
        };
        let propagated_versions = spawn_reflector(pv_api, shutdown.clone());
        let cluster_propagated_versions = spawn_reflector(cpv_api, shutdown.clone());
        let hub_caches_ready = readiness(
            propagated_versions.clone(),
            cluster_propagated_versions.clone(),
        );
        let shared = Arc::new(Self {
            propagated_versions,
            cluster_propagated_versions,
            hub_caches_ready,
            hub,
            pool,
            kubefed_namespace: config.kubefed_namespace.clone(),
            scope,
            adopt_resources,
            raw_status_collection: kubefed
                .feature_enabled(hubfed_api::kubefedconfig::FEATURE_RAW_RESOURCE_STATUS_COLLECTION),
            reconcile_concurrency,
            hub_identities: identity::HubIdentities::default(),
            control_plane: tokio::sync::OnceCell::new(),
            settings: tokio::sync::watch::Sender::new(0),
            shutdown,
        });
        tokio::spawn(Arc::clone(&shared).follow_kubefed_config());
        shared
    }

    /// Keeps run-time settings in step with the KubeFedConfig.
    async fn follow_kubefed_config(self: Arc<Self>) {
        let api: Api<KubeFedConfig> = Api::namespaced(self.hub.clone(), &self.kubefed_namespace);
        let config = watcher::Config::default().fields(&format!(
            "metadata.name={}",
            hubfed_api::names::KUBEFED_CONFIG_NAME
        ));
        let stream = watcher(api, config).default_backoff().applied_objects();
        let mut stream = std::pin::pin!(stream);
        loop {
            let item = tokio::select! {
                () = self.shutdown.cancelled() => break,
                item = stream.next() => item,
            };
            match item {
                Some(Ok(mut kubefed)) => {
                    kubefed.spec.apply_defaults();
                    let adopt = adopt_resources_enabled(&kubefed.spec);
                    let before = self
                        .adopt_resources
                        .swap(adopt, std::sync::atomic::Ordering::Relaxed);
                    if before != adopt {
                        info!(adopt_resources = adopt, "KubeFedConfig changed");
                        self.settings.send_modify(|generation| *generation += 1);
                    }
                }
                Some(Err(e)) => warn!(error = %e, "KubeFedConfig watch error"),
                None => break,
            }
        }
    }

    /// This control plane's identity (see [`hubfed_api::names::OWNER_ANNOTATION`]); `None`
    /// while it cannot be read (copies are then written without the proof, and garbage
    /// collection does not run).
    pub async fn control_plane(&self) -> Option<&str> {
        let read = self
            .control_plane
            .get_or_try_init(|| async {
                let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.hub.clone());
                let namespace = api.get_metadata(&self.kubefed_namespace).await?;
                namespace
                    .metadata
                    .uid
                    .filter(|uid| !uid.is_empty())
                    .ok_or_else(|| anyhow::anyhow!("the namespace has no UID"))
            })
            .await;
        match read {
            Ok(uid) => Some(uid.as_str()),
            Err(e) => {
                warn!(namespace = %self.kubefed_namespace, error = %e, "cannot read the control plane's namespace");
                None
            }
        }
    }

    /// The namespace federated objects are watched in: all, or the control plane's own.
    fn target_namespace(&self) -> Option<&str> {
        match self.scope {
            ControlPlaneScope::Cluster => None,
            ControlPlaneScope::Namespaced => Some(&self.kubefed_namespace),
        }
    }
}

/// KubeFed adopts pre-existing member objects unless `adoptResources: Disabled`.
pub(crate) fn adopt_resources_enabled(spec: &KubeFedConfigSpec) -> bool {
    spec.sync_controller
        .as_ref()
        .and_then(|s| s.adopt_resources)
        != Some(hubfed_api::federatedtypeconfig::EnabledDisabled::Disabled)
}

/// Everything one federated type's reconciles need.
pub struct TypeContext {
    pub shared: Arc<Shared>,
    pub ftc: FederatedTypeConfig,
    pub federated: ApiResource,
    pub target_resource: ApiResource,
    pub target: TargetType,
    /// The FederatedNamespace type, for namespaced targets.
    pub federated_namespace: Option<ApiResource>,
    pub federated_namespaces: Option<Store<DynamicObject>>,
    pub members: Arc<MemberWatches>,
    pub recorder: Recorder,
    /// What the last successful apply per (object, cluster) sent and got back.
    pub applied: AppliedMap,
    /// Generations being propagated, for the propagation latency metric.
    pub latency: std::sync::Mutex<LatencyTracker>,
    /// PropagatedVersion statuses this controller wrote that the hub cache has not shown yet.
    pub written_versions: std::sync::Mutex<HashMap<ObjectRef<DynamicObject>, WrittenVersions>>,
    /// Objects whose last attempts failed: (failures in a row, generation), for the backoff.
    /// Memory only: after a restart an object starts again from the shortest delay.
    pub backoff: std::sync::Mutex<HashMap<ObjectRef<DynamicObject>, (u32, i64)>>,
    /// The copies' status is collected into `status.clusters[].remoteStatus`.
    pub collect_status: bool,
    /// When each object's status was last written, kept only while collecting remote
    /// status: remote-status-only changes are coalesced to one write per interval.
    pub status_written: std::sync::Mutex<HashMap<ObjectRef<DynamicObject>, std::time::Instant>>,
}

/// What the last successful apply per (federated object, cluster) sent and got back.
///
/// Kept compact, one entry per object with a short list of clusters: it holds an entry for
/// most object×cluster pairs.
#[derive(Default)]
pub struct AppliedMap(std::sync::Mutex<AppliedByObject>);

/// Object key (`namespace/name` or `name`) → (cluster, recorded apply).
type AppliedByObject = HashMap<Box<str>, Vec<(Box<str>, hubfed_core::version::RecordedApply)>>;

impl AppliedMap {
    fn key(namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_owned(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AppliedByObject> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The recorded applies of one object, by cluster.
    pub fn get(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> HashMap<String, hubfed_core::version::RecordedApply> {
        self.lock()
            .get(Self::key(namespace, name).as_str())
            .into_iter()
            .flatten()
            .map(|(cluster, recorded)| (cluster.to_string(), recorded.clone()))
            .collect()
    }

    pub fn insert(
        &self,
        namespace: Option<&str>,
        name: &str,
        cluster: &str,
        recorded: hubfed_core::version::RecordedApply,
    ) {
        let mut map = self.lock();
        let clusters = map.entry(Self::key(namespace, name).into()).or_default();
        match clusters.iter_mut().find(|(c, _)| &**c == cluster) {
            Some((_, entry)) => *entry = recorded,
            None => {
                clusters.push((cluster.into(), recorded));
                clusters.shrink_to_fit();
            }
        }
    }

    pub fn remove(&self, namespace: Option<&str>, name: &str, cluster: &str) {
        let mut map = self.lock();
        let key = Self::key(namespace, name);
        if let Some(clusters) = map.get_mut(key.as_str()) {
            clusters.retain(|(c, _)| &**c != cluster);
            if clusters.is_empty() {
                map.remove(key.as_str());
            }
        }
    }

    /// Forgets every cluster of one object.
    pub fn forget(&self, namespace: Option<&str>, name: &str) {
        self.lock().remove(Self::key(namespace, name).as_str());
    }
}

/// A PropagatedVersion status written by this controller, kept until the PropagatedVersion
/// store shows that write or a later one. Without it, a reconcile queued by the previous
/// one's own writes reads the store before the watch has delivered them (or has delivered
/// only the creation of the PropagatedVersion, without its status) and writes the versions
/// again.
pub struct WrittenVersions {
    /// The resourceVersion the status write returned.
    pub resource_version: String,
    pub status: hubfed_core::version::PropagatedVersionStatus,
}

/// When each federated object's current generation was first seen, until every placed
/// cluster has converged to it.
#[derive(Default)]
pub struct LatencyTracker {
    pending: HashMap<ObjectRef<DynamicObject>, Pending>,
    converged: HashMap<ObjectRef<DynamicObject>, i64>,
}

struct Pending {
    generation: i64,
    since: std::time::Instant,
    wrote: bool,
}

impl LatencyTracker {
    pub fn observe_start(&mut self, object: &ObjectRef<DynamicObject>, generation: i64) {
        if self.converged.get(object) == Some(&generation) {
            return;
        }
        let fresh = self
            .pending
            .get(object)
            .is_none_or(|p| p.generation != generation);
        if fresh {
            self.pending.insert(
                object.clone(),
                Pending {
                    generation,
                    since: std::time::Instant::now(),
                    wrote: false,
                },
            );
        }
    }

    /// The latency to report when this reconcile completed propagation of `generation`.
    /// Generations that needed no member write (already in place, e.g. after a restart)
    /// report nothing.
    pub fn observe_end(
        &mut self,
        object: &ObjectRef<DynamicObject>,
        generation: i64,
        wrote: bool,
        converged: bool,
    ) -> Option<std::time::Duration> {
        let pending = self
            .pending
            .get_mut(object)
            .filter(|p| p.generation == generation)?;
        pending.wrote |= wrote;
        if !converged {
            return None;
        }
        let pending = self.pending.remove(object)?;
        self.converged.insert(object.clone(), generation);
        pending.wrote.then(|| pending.since.elapsed())
    }

    pub fn forget(&mut self, object: &ObjectRef<DynamicObject>) {
        self.pending.remove(object);
        self.converged.remove(object);
    }
}

/// Runs the sync controller of one FTC until `stop` is cancelled.
pub async fn run_type(
    shared: Arc<Shared>,
    ftc: FederatedTypeConfig,
    federated_namespace: Option<ApiResource>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let federated = ftc.spec.federated_type.to_dynamic();
    let target_resource = ftc.spec.target_type.to_dynamic();
    let target = TargetType {
        kind: ftc.spec.target_type.kind.clone(),
        group: ftc.spec.target_type.group.clone(),
        version: ftc.spec.target_type.version.clone(),
        namespaced: ftc.target_namespaced(),
    };
    let hub = shared.hub.clone();
    let fed_api: Api<DynamicObject> = match shared.target_namespace() {
        Some(ns) if ftc.federated_namespaced() => Api::namespaced_with(hub.clone(), ns, &federated),
        _ => Api::all_with(hub.clone(), &federated),
    };

    let (trigger_tx, trigger_rx) = mpsc::unbounded_channel::<ObjectRef<DynamicObject>>();
    // The federated objects' cache, lean: their managedFields (a JSON tree of every template
    // field, per writer) and kubectl's last-applied copy of the whole object are never read.
    let writer = reflector::store::Writer::new(federated.clone());
    let store = writer.as_reader();
    // Whether the federated objects' first list completed: a kube-runtime controller stopped
    // before that never finishes stopping (it holds its queue until the cache loads, and the
    // watch that would load it has stopped).
    let listed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let objects = reflector::reflector(
        writer,
        watcher(fed_api, watcher::Config::default()).modify(|object| {
            object.metadata.managed_fields = None;
            if let Some(annotations) = object.metadata.annotations.as_mut() {
                annotations.remove(LAST_APPLIED_ANNOTATION);
            }
        }),
    )
    .inspect({
        let listed = Arc::clone(&listed);
        move |event| {
            if let Ok(watcher::Event::InitDone) = event {
                listed.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
    })
    .applied_objects();
    let controller = Controller::for_stream_with(objects, store.clone(), federated.clone())
        .with_config(
            kube::runtime::controller::Config::default()
                .concurrency(shared.reconcile_concurrency)
                .debounce(Duration::from_millis(20)),
        );

    // FederatedNamespaces: their placement bounds every namespaced object in them.
    let federated_namespaces = match (&federated_namespace, target.namespaced) {
        (Some(fns), true) => {
            let api: Api<DynamicObject> = match shared.target_namespace() {
                Some(ns) => Api::namespaced_with(hub.clone(), ns, fns),
                None => Api::all_with(hub.clone(), fns),
            };
            let writer = reflector::store::Writer::new(fns.clone());
            let reader = writer.as_reader();
            let tx = trigger_tx.clone();
            let fed_store = store.clone();
            let fed_ar = federated.clone();
            let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
                .default_backoff()
                .touched_objects();
            let stop2 = stop.clone();
            tokio::spawn(async move {
                let mut stream = std::pin::pin!(stream);
                loop {
                    let item = tokio::select! {
                        () = stop2.cancelled() => break,
                        item = stream.next() => item,
                    };
                    match item {
                        Some(Ok(fns)) => {
                            let Some(ns) = fns.metadata.namespace.clone() else {
                                continue;
                            };
                            for obj in fed_store.state() {
                                if obj.metadata.namespace.as_deref() == Some(ns.as_str())
                                    && let Some(name) = obj.metadata.name.clone()
                                {
                                    let r = ObjectRef::new_with(&name, fed_ar.clone()).within(&ns);
                                    if tx.send(r).is_ok() {
                                        crate::metrics::METRICS
                                            .workqueue_depth
                                            .with_label_values(&[&fed_ar.kind.to_lowercase()])
                                            .inc();
                                    }
                                }
                            }
                        }
                        Some(Err(e)) => warn!(error = %e, "FederatedNamespace watch error"),
                        None => break,
                    }
                }
            });
            Some(reader)
        }
        _ => None,
    };

    let collect_status = shared.collects_status(&ftc);
    let members = MemberWatches::new(
        Arc::clone(&shared),
        target_resource.clone(),
        target.clone(),
        federated.clone(),
        trigger_tx.clone(),
        collect_status,
    );
    let members_task = tokio::spawn(members.clone().run(stop.clone()));
    tokio::spawn(deletions::report_waiting_deletions(
        store.clone(),
        federated.kind.to_lowercase(),
        stop.clone(),
    ));

    let reporter = Reporter {
        controller: format!("{}-controller", federated.kind.to_lowercase()),
        instance: std::env::var("HOSTNAME").ok(),
    };
    let ctx = Arc::new(TypeContext {
        recorder: Recorder::new(hub.clone(), reporter),
        shared: Arc::clone(&shared),
        ftc,
        federated: federated.clone(),
        target_resource,
        target,
        federated_namespace,
        federated_namespaces,
        members,
        applied: AppliedMap::default(),
        latency: std::sync::Mutex::new(LatencyTracker::default()),
        written_versions: std::sync::Mutex::new(HashMap::new()),
        backoff: std::sync::Mutex::new(HashMap::new()),
        collect_status,
        status_written: std::sync::Mutex::new(HashMap::new()),
    });

    let depth = crate::metrics::METRICS
        .workqueue_depth
        .with_label_values(&[&federated.kind.to_lowercase()]);
    tokio::spawn(export_object_gauges(
        Arc::clone(&ctx),
        store.clone(),
        stop.clone(),
    ));
    let gc_store = store.clone();
    let triggers = futures::stream::unfold((trigger_rx, depth), |(mut rx, depth)| async move {
        let next = rx.recv().await;
        if next.is_some() {
            depth.dec();
        }
        next.map(|r| (r, (rx, depth)))
    });
    let registry_changes = futures::stream::unfold(shared.pool.subscribe(), |mut rx| async move {
        rx.changed().await.ok().map(|()| ((), rx))
    });
    let settings_changes =
        futures::stream::unfold(shared.settings.subscribe(), |mut rx| async move {
            rx.changed().await.ok().map(|()| ((), rx))
        });
    // Never plan from caches that have not loaded: a FederatedNamespace not yet seen would
    // read as "namespace not federated" and the plan would delete the member objects; a
    // PropagatedVersion not yet seen would re-apply what is already in place.
    let stores_ready = async {
        if let Some(fns) = &ctx.federated_namespaces {
            // This task is the only waiter on its own FederatedNamespace store.
            fns.wait_until_ready()
                .await
                .map_err(|e| anyhow::anyhow!("the FederatedNamespace cache stopped: {e}"))?;
        }
        let mut hub_caches = shared.hub_caches_ready.clone();
        hub_caches
            .wait_for(|ready| *ready)
            .await
            .map(drop)
            .map_err(|_| anyhow::anyhow!("the version caches stopped"))
    };
    // A stop that comes while the caches load wins: a controller started with its shutdown
    // already signalled never finished draining (a KubeFedConfig change right after start hung
    // the restart).
    tokio::select! {
        biased;
        () = stop.cancelled() => {
            let _ = members_task.await;
            return Ok(());
        }
        ready = stores_ready => ready?,
    }
    if stop.is_cancelled() {
        let _ = members_task.await;
        return Ok(());
    }
    info!(kind = %federated.kind, "starting sync controller");
    tokio::spawn(gc::run(Arc::clone(&ctx), gc_store, stop.clone()));
    let stop_signal = stop.clone();
    let running = controller
        .reconcile_on(triggers)
        .reconcile_all_on(futures::stream::select(registry_changes, settings_changes))
        .graceful_shutdown_on(async move { stop_signal.cancelled().await })
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|_| async {});
    // Stopped before the first list completed: nothing can be in flight; do not wait.
    let stopped_unlisted = async {
        stop.cancelled().await;
        if listed.load(std::sync::atomic::Ordering::Relaxed) {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = running => {}
        () = stopped_unlisted => {}
    }
    stop.cancel();
    let _ = members_task.await;
    info!(kind = %federated.kind, "sync controller stopped");
    Ok(())
}

/// Refreshes `hubfed_managed_objects` and `hubfed_federated_objects` for one type, and
/// forgets written PropagatedVersions once the hub cache shows them.
async fn export_object_gauges(
    ctx: Arc<TypeContext>,
    federated: Store<DynamicObject>,
    stop: CancellationToken,
) {
    let type_label = ctx.federated.kind.to_lowercase();
    let metrics = &crate::metrics::METRICS;
    loop {
        observe::prune_written_versions(&ctx);
        ctx.backoff
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|object, _| federated.get(object).is_some());
        let (mut propagated, mut failing) = (0_i64, 0_i64);
        for obj in federated.state() {
            let condition = obj
                .data
                .pointer("/status/conditions")
                .and_then(serde_json::Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == "Propagation"))
                .and_then(|c| c["status"].as_str().map(str::to_string));
            match condition.as_deref() {
                Some("True") => propagated += 1,
                Some(_) => failing += 1,
                None => {}
            }
        }
        metrics
            .federated_objects
            .with_label_values(&[type_label.as_str(), "true"])
            .set(propagated);
        metrics
            .federated_objects
            .with_label_values(&[type_label.as_str(), "false"])
            .set(failing);
        for (cluster, count) in ctx.members.counts() {
            let count = i64::try_from(count).unwrap_or(i64::MAX);
            metrics
                .managed_objects
                .with_label_values(&[type_label.as_str(), cluster.as_str()])
                .set(count);
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(Duration::from_secs(10)) => {}
        }
    }
    for propagation in ["true", "false"] {
        let _ = metrics
            .federated_objects
            .remove_label_values(&[type_label.as_str(), propagation]);
    }
}

#[cfg(test)]
mod tests {
    use super::{AppliedMap, readiness};
    use hubfed_core::version::RecordedApply;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::runtime::{reflector, watcher::Event};
    use std::time::Duration;

    /// Every waiter is released, however many wait at once (kube-runtime's own
    /// `wait_until_ready` would wake only the last of them).
    #[tokio::test]
    async fn every_concurrent_waiter_sees_the_caches_ready() {
        let (a, mut a_writer) = reflector::store::<ConfigMap>();
        let (b, mut b_writer) = reflector::store::<Secret>();
        let ready = readiness(a, b);
        let waiters: Vec<_> = (0..10)
            .map(|_| {
                let mut ready = ready.clone();
                tokio::spawn(async move { ready.wait_for(|r| *r).await.map(|r| *r) })
            })
            .collect();
        tokio::task::yield_now().await;
        assert!(!*ready.borrow(), "ready before any store loaded");
        a_writer.apply_watcher_event(&Event::Init);
        a_writer.apply_watcher_event(&Event::InitDone);
        tokio::task::yield_now().await;
        assert!(!*ready.borrow(), "ready with one store still loading");
        b_writer.apply_watcher_event(&Event::Init);
        b_writer.apply_watcher_event(&Event::InitDone);
        for waiter in waiters {
            let seen = tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("a waiter was never woken")
                .expect("waiter task")
                .expect("readiness sender dropped");
            assert!(seen);
        }
    }

    /// A store whose writer goes away before loading releases the waiters with an error.
    #[tokio::test]
    async fn a_dropped_writer_releases_the_waiters() {
        let (a, a_writer) = reflector::store::<ConfigMap>();
        let (b, _b_writer) = reflector::store::<Secret>();
        let mut ready = readiness(a, b);
        drop(a_writer);
        let outcome = tokio::time::timeout(Duration::from_secs(5), ready.wait_for(|r| *r))
            .await
            .expect("the waiter was never released");
        assert!(outcome.is_err());
    }

    fn recorded(version: &str) -> RecordedApply {
        RecordedApply {
            version: version.to_owned(),
            desired_hash: Some("h".to_owned()),
        }
    }

    #[test]
    fn applied_map_keeps_clusters_per_object() {
        let applied = AppliedMap::default();
        applied.insert(Some("ns"), "a", "member1", recorded("gen:1"));
        applied.insert(Some("ns"), "a", "member2", recorded("gen:1"));
        applied.insert(Some("ns"), "a", "member1", recorded("gen:2"));
        applied.insert(Some("other"), "a", "member1", recorded("rv:7"));
        applied.insert(None, "a", "member1", recorded("rv:8"));
        let a = applied.get(Some("ns"), "a");
        assert_eq!(a.len(), 2);
        assert_eq!(a["member1"].version, "gen:2");
        assert_eq!(a["member2"].version, "gen:1");
        assert_eq!(applied.get(Some("other"), "a")["member1"].version, "rv:7");
        assert_eq!(applied.get(None, "a")["member1"].version, "rv:8");

        applied.remove(Some("ns"), "a", "member1");
        assert_eq!(
            applied.get(Some("ns"), "a").keys().collect::<Vec<_>>(),
            ["member2"]
        );
        applied.forget(Some("ns"), "a");
        assert!(applied.get(Some("ns"), "a").is_empty());
        assert_eq!(applied.get(Some("other"), "a").len(), 1);
    }
}
