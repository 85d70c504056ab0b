//! A pull member's share of multi-cluster services, run by its agent (`hubfed-agent`).
//!
//! - It watches its member with the hub controller's own watches (`super::observe`) and
//!   reports, into its work namespace in the hub, each exported name (`ServiceExportReport`:
//!   the ServiceExport, its Service and source EndpointSlices, lean) and the member as a whole
//!   (`ClusterReport`: namespaces, ClusterProperties, whether it serves the MCS CRDs) — each
//!   written only when it differs from the report the hub holds.
//! - It carries out the hub's `ServiceImportWork`s with the hub's own writes
//!   (`super::import`, `super::export_status`): ServiceImport, derived Service, derived
//!   EndpointSlices, the ServiceExport's conditions and Events; and says `Ok` or `Failed` in
//!   the work's status. A name with no work has what this control plane wrote of it withdrawn.
//! - It writes its member's ClusterProperties when absent: `cluster.clusterset.k8s.io` its
//!   cluster name, `clusterset.k8s.io` the ClusterSet's name (`--cluster-set`).

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use hubfed_api::about::{CLUSTER_ID_PROPERTY, CLUSTER_SET_PROPERTY};
use hubfed_api::mcs::ServiceExport;
use hubfed_api::pull_mcs::{
    CLUSTER_REPORT_NAME, ClusterReport, IMPORT_WORK_FAILED, IMPORT_WORK_OK, MCS_REPORT_LABEL,
    ServiceExportReport, ServiceImportWork, mcs_object_name,
};
use hubfed_core::mcs::derived_service_name;
use hubfed_core::pull::{
    cluster_report, export_report, spec_needs_write, work_endpoints, work_import,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::import::{self, Target};
use super::index::{Cached, Feed, Key, MemberIndex, Slot};
use super::observe::{self, Sink, Watching};
use super::queue::WorkQueue;
use super::reconcile::Live;
use super::write::{Write, WriteFailed, apply, delete};
use super::{Member, REPORTER, export_status, ids};
use crate::clusters::MemberCluster;

/// When a key waits for the first lists (the member's and the hub's).
const LISTS_PENDING_RETRY: Duration = Duration::from_secs(1);
/// When a key or the cluster report is tried again after a failed write.
const RETRY: Duration = Duration::from_secs(5);
/// Keys carried out at a time.
const CONCURRENCY: usize = 8;
/// Writes into the member at a time.
const MEMBER_WRITES: usize = 16;

/// What the agent's multi-cluster services need.
pub struct AgentMcs {
    /// The cluster's name in the hub: its cluster id unless its ClusterProperty says another.
    pub cluster: String,
    /// Its work namespace in the hub.
    pub work_namespace: String,
    pub hub: Client,
    pub member: Client,
    /// This control plane's identity, the UID of its namespace in the hub.
    pub control_plane: String,
    /// The ClusterSet's name: the hub's KubeFed namespace.
    pub cluster_set: String,
    /// Objects per page of a list.
    pub page_size: u32,
}

/// The hub's objects in the work namespace, as watched.
struct HubCache<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    listed: AtomicBool,
}

struct State {
    settings: AgentMcs,
    /// The member as the writes see it.
    cluster: MemberCluster,
    member: Arc<Member>,
    reports: HubCache<ServiceExportReport>,
    works: HubCache<ServiceImportWork>,
    cluster_report: HubCache<ClusterReport>,
    queue: Arc<WorkQueue>,
    /// The member's namespaces, ClusterProperties or CRDs may have changed.
    cluster_changed: Notify,
    shutdown: CancellationToken,
}

impl Sink for State {
    fn touched(&self, feed: Feed, slots: BTreeSet<Slot>) {
        match feed {
            Feed::Namespaces | Feed::Properties => self.cluster_changed.notify_one(),
            _ => self
                .queue
                .add_all(slots.into_iter().map(|(ns, group, _)| (ns, group))),
        }
    }

    fn relisted(&self) {
        self.cluster_changed.notify_one();
        self.queue_everything();
    }
}

impl State {
    /// Every key the member exports or holds this control plane's objects of, or the hub
    /// holds a report or work of.
    fn queue_everything(&self) {
        let mut keys = self.member.index.lock().keys();
        keys.extend(
            self.reports
                .store
                .state()
                .iter()
                .filter_map(|r| key_of(&**r)),
        );
        keys.extend(self.works.store.state().iter().filter_map(|w| key_of(&**w)));
        self.queue.add_all(keys);
    }

    /// Whether every list is in: the member's and the hub's.
    fn listed(&self) -> bool {
        let member = self.member.index.lock().listed();
        member
            && self.reports.listed.load(Ordering::Acquire)
            && self.works.listed.load(Ordering::Acquire)
            && self.cluster_report.listed.load(Ordering::Acquire)
    }

    fn hub_object<K: Resource<DynamicType = ()> + Clone>(
        &self,
        cache: &HubCache<K>,
        name: &str,
    ) -> Option<Arc<K>> {
        cache
            .store
            .get(&ObjectRef::new(name).within(&self.settings.work_namespace))
    }
}

/// The key of a report or work: `<namespace>.<name>`.
fn key_of<K: Resource>(object: &K) -> Option<Key> {
    let (namespace, name) = object.meta().name.as_deref()?.split_once('.')?;
    Some((namespace.to_owned(), name.to_owned()))
}

fn hub_cache<K>() -> (HubCache<K>, reflector::store::Writer<K>)
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let (store, writer) = reflector::store();
    let cache = HubCache {
        store,
        listed: AtomicBool::new(false),
    };
    (cache, writer)
}

/// Runs the agent's multi-cluster services until `shutdown`.
pub async fn run(settings: AgentMcs, shutdown: CancellationToken) {
    let (reports, reports_writer) = hub_cache();
    let (works, works_writer) = hub_cache();
    let (cluster_report, cluster_writer) = hub_cache();
    let recorder = kube::runtime::events::Recorder::new(
        settings.member.clone(),
        crate::events::reporter(REPORTER),
    );
    let cluster = MemberCluster {
        name: settings.cluster.clone(),
        labels: Default::default(),
        ready: true,
        ready_since: None,
        pull: false,
        client: Some(settings.member.clone()),
        watch_client: Some(settings.member.clone()),
        client_id: 0,
        writes: Arc::new(Semaphore::new(MEMBER_WRITES)),
    };
    let state = Arc::new(State {
        member: Member::new(&settings.cluster, 0, MemberIndex::default(), recorder),
        cluster,
        settings,
        reports,
        works,
        cluster_report,
        queue: Arc::new(WorkQueue::default()),
        cluster_changed: Notify::new(),
        shutdown: shutdown.clone(),
    });
    info!(
        cluster = %state.settings.cluster,
        cluster_set = %state.settings.cluster_set,
        "multi-cluster services of the agent started"
    );
    let namespace = state.settings.work_namespace.clone();
    let hub = state.settings.hub.clone();
    let mut tasks = vec![
        tokio::spawn(follow_hub(
            Arc::clone(&state),
            Api::<ServiceExportReport>::namespaced(hub.clone(), &namespace),
            reports_writer,
            |s| &s.reports,
        )),
        tokio::spawn(follow_hub(
            Arc::clone(&state),
            Api::<ServiceImportWork>::namespaced(hub.clone(), &namespace),
            works_writer,
            |s| &s.works,
        )),
        tokio::spawn(follow_hub(
            Arc::clone(&state),
            Api::<ClusterReport>::namespaced(hub, &namespace),
            cluster_writer,
            |s| &s.cluster_report,
        )),
        tokio::spawn(maintain_cluster(Arc::clone(&state))),
    ];
    let sink: Arc<dyn Sink> = Arc::clone(&state) as Arc<dyn Sink>;
    let watching = Watching {
        control_plane: &state.settings.control_plane,
        page_size: state.settings.page_size,
    };
    let watches = observe::start(&sink, &watching, &state.member, &state.settings.member);
    let worker = {
        let state = Arc::clone(&state);
        Arc::clone(&state.queue).run(
            CONCURRENCY,
            move |key| reconcile(Arc::clone(&state), key),
            shutdown.clone(),
        )
    };
    tasks.push(tokio::spawn(worker));
    shutdown.cancelled().await;
    for task in watches {
        task.abort();
    }
    for task in tasks {
        task.abort();
    }
}

/// Follows one kind in the work namespace into its store, queuing what each change touches.
async fn follow_hub<K>(
    state: Arc<State>,
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    cache: fn(&State) -> &HubCache<K>,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let config = watcher::Config::default().page_size(state.settings.page_size);
    let events = watcher(api, config).modify(|o| o.meta_mut().managed_fields = None);
    let mut events = pin!(reflector::reflector(writer, events).default_backoff());
    let mut said_unserved = false;
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::InitDone) => {
                cache(&state).listed.store(true, Ordering::Release);
                state.relisted();
            }
            Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object)) => {
                if K::kind(&()) == ClusterReport::kind(&()) {
                    state.cluster_changed.notify_one();
                } else if let Some(key) = key_of(&object) {
                    state.queue.add_all([key]);
                }
            }
            Ok(_) => {}
            Err(error) if crate::watch::unserved(&error) => {
                if !said_unserved {
                    said_unserved = true;
                    warn!(
                        kind = %K::kind(&()),
                        "the hub does not serve {}: this member takes no part in multi-cluster \
                         services until hubfed's CRDs are installed in the hub",
                        K::kind(&())
                    );
                }
            }
            Err(error) => debug!(kind = %K::kind(&()), error = %error, "hub watch failed"),
        }
    }
}

/// What the member holds of one key.
struct Observed {
    lacks_crds: bool,
    export: Option<Arc<ServiceExport>>,
    service: Option<Arc<Service>>,
    sources: Vec<Arc<EndpointSlice>>,
    live: Live,
}

fn observe_key(index: &MemberIndex, key: &Key) -> Observed {
    let (namespace, name) = key;
    let slices = |feed| {
        index
            .of_key(feed, key)
            .filter_map(|(_, c)| match c {
                Cached::Slice(s) => Some(Arc::clone(s)),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let service = |own: &str| match index.get(Feed::Services, key, own) {
        Some(Cached::Service(s)) => Some(Arc::clone(s)),
        _ => None,
    };
    Observed {
        lacks_crds: index.lacks_mcs_crds(),
        export: match index.get(Feed::Exports, key, name) {
            Some(Cached::Export(e)) => Some(Arc::clone(e)),
            _ => None,
        },
        service: service(name),
        sources: slices(Feed::SourceSlices),
        live: Live {
            import: match index.get(Feed::Imports, key, name) {
                Some(Cached::Import(i)) => Some(Arc::clone(i)),
                _ => None,
            },
            service: service(&derived_service_name(namespace, name)),
            slices: slices(Feed::DerivedSlices),
            work: None,
        },
    }
}

async fn reconcile(state: Arc<State>, key: Key) {
    if let Some(delay) = reconcile_key(&state, &key).await {
        state.queue.add_after(key, delay, &state.shutdown);
    }
}

/// Reports the key's export, then carries out its work; returns when to look again.
async fn reconcile_key(state: &State, key: &Key) -> Option<Duration> {
    if !state.listed() {
        return Some(LISTS_PENDING_RETRY);
    }
    let observed = {
        let index = state.member.index.lock();
        observe_key(&index, key)
    };
    let reported = report(state, key, &observed).await;
    let carried = carry_out(state, key, &observed).await;
    (reported.is_err() || carried.is_err()).then_some(RETRY)
}

/// Writes the key's report when it differs from the hub's, deletes it when the member
/// exports the name no more.
async fn report(state: &State, key: &Key, observed: &Observed) -> Result<(), WriteFailed> {
    let (namespace, name) = key;
    let report_name = mcs_object_name(namespace, name);
    let live = state.hub_object(&state.reports, &report_name);
    let desired = observed
        .export
        .as_deref()
        .filter(|_| !observed.lacks_crds)
        .map(|export| {
            let sources: Vec<&EndpointSlice> = observed.sources.iter().map(|s| &**s).collect();
            export_report(export, observed.service.as_deref(), &sources)
        });
    let api: Api<ServiceExportReport> =
        Api::namespaced(state.settings.hub.clone(), &state.settings.work_namespace);
    let write = Write {
        cluster: &state.cluster,
        kind: "ServiceExportReport",
        status: false,
    };
    match desired {
        None if live.is_some() => delete(&write, &api, &report_name).await,
        None => Ok(()),
        Some(spec) if spec_needs_write(live.as_ref().map(|r| &r.spec), &spec) => {
            let body = hub_body::<ServiceExportReport>(state, &report_name, &spec);
            apply(&write, &api, &report_name, &body).await.map(|_| ())
        }
        Some(_) => Ok(()),
    }
}

/// The apply body of a report in the work namespace.
fn hub_body<K: Resource<DynamicType = ()>>(
    state: &State,
    name: &str,
    spec: &impl Serialize,
) -> serde_json::Value {
    json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {
            "name": name,
            "namespace": state.settings.work_namespace,
            "labels": {MCS_REPORT_LABEL: state.settings.cluster},
        },
        "spec": spec,
    })
}

/// Carries out the key's work in the member (withdraws this control plane's objects of the
/// key when it has none) and says how it went in the work's status.
async fn carry_out(state: &State, key: &Key, observed: &Observed) -> Result<(), WriteFailed> {
    if observed.lacks_crds {
        return Ok(());
    }
    let (namespace, name) = key;
    let work = state.hub_object(&state.works, &mcs_object_name(namespace, name));
    let target = Target {
        control_plane: &state.settings.control_plane,
        cluster: &state.cluster,
        live: &observed.live,
    };
    let Some(work) = work else {
        let live = &observed.live;
        if live.import.is_none() && live.slices.is_empty() && live.service.is_none() {
            return Ok(());
        }
        return import::converge(key, &target, None, &[]).await;
    };
    let import = work_import(&work.spec);
    let endpoints = work_endpoints(&work.spec);
    let mut result = import::converge(key, &target, import.as_ref(), &endpoints).await;
    if let Some(export) = observed.export.as_deref()
        && !work.spec.export_conditions.is_empty()
    {
        let recorder = &state.member.recorder;
        let conditions = &work.spec.export_conditions;
        if export_status::write_conditions(&state.cluster, recorder, key, export, conditions)
            .await
            .is_err()
        {
            result = Err(WriteFailed);
        }
    }
    work_status(state, &work, result.is_ok()).await?;
    result
}

/// Says in the work's status what became of its generation, when that is news.
async fn work_status(state: &State, work: &ServiceImportWork, ok: bool) -> Result<(), WriteFailed> {
    let (result, message) = if ok {
        (IMPORT_WORK_OK, None)
    } else {
        (
            IMPORT_WORK_FAILED,
            Some("a write into the member failed; retrying (see the agent's log)"),
        )
    };
    let generation = work.metadata.generation;
    let live = work.status.as_ref();
    if live.is_some_and(|s| s.observed_generation == generation && s.result == result) {
        return Ok(());
    }
    let name = work.metadata.name.as_deref().unwrap_or_default();
    let api: Api<ServiceImportWork> =
        Api::namespaced(state.settings.hub.clone(), &state.settings.work_namespace);
    let patch = json!({"status": {
        "observedGeneration": generation,
        "result": result,
        "message": message,
    }});
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(error) => {
            warn!(work = name, error = %error, "cannot report an import work's status");
            Err(WriteFailed)
        }
    }
}

/// Writes the member's missing ClusterProperties and its ClusterReport whenever they may
/// have changed, until shutdown.
async fn maintain_cluster(state: Arc<State>) {
    let mut failed = false;
    loop {
        tokio::select! {
            () = state.shutdown.cancelled() => return,
            () = state.cluster_changed.notified() => {}
            () = tokio::time::sleep(RETRY), if failed => {}
        }
        failed = state.listed() && write_cluster(&state).await.is_err();
    }
}

async fn write_cluster(state: &State) -> Result<(), WriteFailed> {
    let (serves, lacks, absent, namespaces, properties) = {
        let index = state.member.index.lock();
        let absent: Vec<(&'static str, String)> = [
            (CLUSTER_ID_PROPERTY, state.settings.cluster.clone()),
            (CLUSTER_SET_PROPERTY, state.settings.cluster_set.clone()),
        ]
        .into_iter()
        .filter(|(name, _)| index.property(name).is_none())
        .collect();
        let namespaces: Vec<(String, bool)> = index
            .namespaces()
            .map(|(name, terminating)| (name.to_owned(), terminating))
            .collect();
        let properties: Vec<(&'static str, String)> = [CLUSTER_ID_PROPERTY, CLUSTER_SET_PROPERTY]
            .into_iter()
            .filter_map(|name| Some((name, index.property(name)?.to_owned())))
            .collect();
        (
            index.serves_properties(),
            index.lacks_mcs_crds(),
            absent,
            namespaces,
            properties,
        )
    };
    if serves && !lacks {
        // Written, they come back through the watch and into the report.
        for (name, value) in &absent {
            ids::write_property(&state.cluster, &state.member, name, value).await;
        }
    }
    let desired = cluster_report(
        !lacks,
        serves,
        namespaces.iter().map(|(n, t)| (n.as_str(), *t)),
        properties.iter().map(|(n, v)| (*n, v.as_str())),
    );
    let live = state.hub_object(&state.cluster_report, CLUSTER_REPORT_NAME);
    if !spec_needs_write(live.as_ref().map(|r| &r.spec), &desired) {
        return Ok(());
    }
    let api: Api<ClusterReport> =
        Api::namespaced(state.settings.hub.clone(), &state.settings.work_namespace);
    let write = Write {
        cluster: &state.cluster,
        kind: "ClusterReport",
        status: false,
    };
    let body = hub_body::<ClusterReport>(state, CLUSTER_REPORT_NAME, &desired);
    apply(&write, &api, CLUSTER_REPORT_NAME, &body)
        .await
        .map(|_| ())
}
