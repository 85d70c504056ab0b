//! One sync controller per enabled FederatedTypeConfig.
//!
//! A kube-runtime `Controller` watches the `Federated<Kind>` objects on the hub; member
//! watches (label-selected on `kubefed.io/managed=true`, metadata only) feed the same queue
//! with the federated object each member object belongs to, so drift and deletions in a member
//! are corrected as soon as they happen. Cluster registry changes re-queue everything.
//! Every decision is `hubfed_core::plan`; this module observes and carries plans out.

mod applied;
mod apply;
mod controller;
mod create_only;
mod deletions;
mod deliver;
mod detach;
mod dispatch;
mod error;
mod exec_env;
pub(crate) mod execute;
mod gc;
mod hub_writes;
mod identity;
mod large_objects;
mod latency;
pub(crate) mod list_slots;
mod member_io;
mod members;
mod objects;
mod observe;
mod packed_fields;
mod reconcile;
pub mod rollout;
mod status_writes;

use std::collections::HashMap;
use std::sync::Arc;

use hubfed_api::federatedtypeconfig::FederatedTypeConfig;
use hubfed_api::kubefedconfig::KubeFedConfigSpec;
use hubfed_api::propagatedversion::{ClusterPropagatedVersion, PropagatedVersion};
use hubfed_core::desired::TargetType;
use hubfed_core::placement::ControlPlaneScope;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::clusters::MemberClientPool;
use crate::settings::ControllerConfig;
pub use applied::AppliedMap;
pub use controller::run_type;
pub use error::Error;
pub use latency::LatencyTracker;
pub(crate) use member_io::ClusterResult;
use members::MemberWatches;
pub(crate) use members::Unmanaged;
pub use objects::{Failing, WrittenStatus, WrittenVersions};

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
    /// The budget of large objects' writes in flight, shared by every type ([`large_objects`]).
    pub(crate) large_objects: large_objects::Budget,
    /// Slots of member lists, shared by every type and member ([`list_slots`]).
    pub(crate) member_lists: list_slots::ListSlots,
    /// Field managers whose changes are people's (drift to revert).
    pub drift_people: Vec<String>,
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
    /// Whether the hub's PropagatedVersion CRDs have a status subresource.
    ///
    /// KubeFed's and hubfed's CRDs have it; hubfed's CRDs of 2026-11 did not. Starts true;
    /// the last write corrects it ([`hub_writes::write_versions`]).
    pub versions_status_subresource: std::sync::atomic::AtomicBool,
    /// Bumped when a KubeFedConfig setting that changes plans changes.
    settings: tokio::sync::watch::Sender<u64>,
    shutdown: CancellationToken,
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

    /// The shared state for the KubeFedConfig `kubefed` holds now; settings applied without
    /// a restart (`adoptResources`) follow its later values.
    pub fn start(
        hub: Client,
        pool: Arc<MemberClientPool>,
        config: &ControllerConfig,
        updates: tokio::sync::watch::Receiver<KubeFedConfigSpec>,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let kubefed = &updates.borrow().clone();
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
        let propagated_versions =
            crate::watch::spawn_cache(pv_api, watcher::Config::default(), shutdown.clone());
        let cluster_propagated_versions =
            crate::watch::spawn_cache(cpv_api, watcher::Config::default(), shutdown.clone());
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
            large_objects: large_objects::Budget::new(config.large_object_budget_mib),
            member_lists: list_slots::ListSlots::new(
                config.member_list_concurrency,
                config.member_list_stall,
                config.member_list_page_size,
            ),
            drift_people: config.drift_revert_managers.clone(),
            hub_identities: identity::HubIdentities::default(),
            control_plane: tokio::sync::OnceCell::new(),
            versions_status_subresource: std::sync::atomic::AtomicBool::new(true),
            settings: tokio::sync::watch::Sender::new(0),
            shutdown,
        });
        tokio::spawn(Arc::clone(&shared).follow_kubefed_config(updates));
        shared
    }

    /// Keeps run-time settings in step with the KubeFedConfig.
    async fn follow_kubefed_config(
        self: Arc<Self>,
        mut updates: tokio::sync::watch::Receiver<KubeFedConfigSpec>,
    ) {
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => break,
                changed = updates.changed() => if changed.is_err() { break },
            }
            let adopt = adopt_resources_enabled(&updates.borrow_and_update());
            let before = self
                .adopt_resources
                .swap(adopt, std::sync::atomic::Ordering::Relaxed);
            if before != adopt {
                info!(adopt_resources = adopt, "KubeFedConfig changed");
                self.settings.send_modify(|generation| *generation += 1);
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
        crate::watch::scope_namespace(self.scope, &self.kubefed_namespace)
    }
}

/// Queues `object` for its type's sync controller (`kind`, lowercase), counted in the queue's
/// depth.
fn queue(
    trigger: &tokio::sync::mpsc::UnboundedSender<ObjectRef<DynamicObject>>,
    object: ObjectRef<DynamicObject>,
    kind: &str,
) {
    if trigger.send(object).is_ok() {
        crate::metrics::METRICS
            .workqueue_depth
            .with_label_values(&[kind])
            .inc();
    }
}

/// A federated object's key in its type's start batch of Events ([`hubfed_core::burst`]).
pub(crate) fn start_key(object: &DynamicObject) -> String {
    let name = object.metadata.name.as_deref().unwrap_or_default();
    match object.metadata.namespace.as_deref() {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
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
    /// This type's works for pull-mode members.
    pub works: deliver::PullWorks,
    pub recorder: Recorder,
    /// What the last successful apply per (object, cluster) sent and got back.
    pub applied: AppliedMap,
    /// Generations being propagated, for the propagation latency metric.
    pub latency: parking_lot::Mutex<LatencyTracker>,
    /// What is remembered of each federated object between reconciles: written status and
    /// versions, backoff, drift reported, holds ([`objects`]).
    pub objects: objects::ObjectIndex,
    /// The copies' status is collected into `status.clusters[].remoteStatus`.
    pub collect_status: bool,
    /// Member applies left running past their reconcile ([`detach`]).
    pub(crate) detached: detach::DetachedWrites,
    /// Status and PropagatedVersion writes left running past their reconcile
    /// ([`status_writes`]).
    pub(crate) status_writes: status_writes::StatusWrites,
    /// Each member's recent apply times, by cluster: how long a reconcile waits for its
    /// writes before leaving them running ([`hubfed_core::detach::WriteTimes`]).
    pub(crate) write_times: parking_lot::Mutex<HashMap<String, hubfed_core::detach::WriteTimes>>,
    /// Normal Events of this type in a burst ([`hubfed_core::burst`]); told which objects
    /// the first list found ([`start_key`]).
    pub event_budget: Arc<parking_lot::Mutex<hubfed_core::burst::EventBudget>>,
    /// Cancelled when this sync controller stops: ends a reconcile's wait for room
    /// ([`large_objects`]), which would otherwise hold up the controller's shutdown.
    pub(crate) stop: CancellationToken,
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
