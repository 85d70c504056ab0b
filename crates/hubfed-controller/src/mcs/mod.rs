//! The hub's multi-cluster services controller (KEP-1645): every push member's
//! ServiceExports become a ServiceImport, a derived Service and derived EndpointSlices in every
//! member where the namespace exists. Decisions are `hubfed_core::mcs`'s; this is the IO.
//!
//! # Pipeline
//!
//! - `observe.rs`: per member with a client, watches of ServiceExports, Services, source
//!   EndpointSlices (`kubernetes.io/service-name`, without an MCS label), Namespaces,
//!   ClusterProperties and this control plane's own derived objects (by
//!   [`CONTROL_PLANE_LABEL`]), kept lean in one [`MemberIndex`] per member. Each change queues
//!   the `namespace/name` keys it touches ([`WorkQueue`]: debounced, bounded, one key once).
//! - `reconcile.rs`: one key: its inputs from the caches, the sources' endpoint fates
//!   (an Offline member keeps its endpoints for `--mcs-endpoint-ttl`), `aggregate`, the
//!   members that get the import, then the writes and the ServiceExports' conditions.
//! - `write.rs`: server-side applies with the field manager [`FIELD_MANAGER`], each only when
//!   the body differs from the cached object (`needs_write`), and deletions of what this
//!   control plane wrote and no longer wants.
//! - `ids.rs`: cluster ids (`cluster.clusterset.k8s.io`) and the ClusterSet property
//!   (`clusterset.k8s.io`), written when absent; a refused member is said once.
//! - `pull.rs`: a pull member's index fed by its agent's reports in the hub, and its share
//!   of each key delivered as a `ServiceImportWork`; `agent.rs`: the agent's side, which
//!   reports and carries works out with this module's watches and writes.
//!
//! # The ClusterSet
//!
//! The members of this control plane that serve the MCS CRDs, push or pull. Its name, the
//! value of every member's `clusterset.k8s.io`, is the control plane's namespace in the hub
//! (the KubeFed namespace); [`CONTROL_PLANE_LABEL`]'s value, the UID of that namespace, tells
//! this control plane's objects from another's of the same name.
//!
//! # Member lifecycle
//!
//! A member that is not `Ready` is not written to; its exports and endpoints stay, as last
//! seen, for the endpoint TTL after it went offline, and are withdrawn from every other member
//! then. A member that unjoins is withdrawn at once (what hubfed wrote into it stays, as with
//! every unjoin). A member that does not serve the MCS CRDs is said once, with
//! `hubfed_mcs_member_crds{cluster}` 0, and the others go on.

pub mod agent;
mod export_status;
mod ids;
mod import;
mod index;
mod observe;
mod pull;
mod queue;
mod reconcile;
mod write;

use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use hubfed_core::mcs::CONTROL_PLANE_LABEL;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::Api;
use kube::runtime::events::Recorder;
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::clusters::{MemberClientPool, MemberCluster};
use crate::metrics::METRICS;
use index::{Feed, Key, MemberIndex, Slot};
use observe::{Sink, Watching};
use queue::WorkQueue;

/// The field manager of every MCS write into a member.
pub const FIELD_MANAGER: &str = "hubfed-mcs";
/// The reporter of the MCS controller's Events.
const REPORTER: &str = "hubfed-mcs";
/// How often the control plane's namespace is looked for while it cannot be read.
const NAMESPACE_RETRY: Duration = Duration::from_secs(5);

/// The MCS controller's settings.
#[derive(Clone, Debug)]
pub struct McsSettings {
    /// How long an Offline member's endpoints stay in the other members.
    pub endpoint_ttl: Duration,
    /// Keys reconciled at a time.
    pub concurrency: usize,
    /// Objects per page of a member list (`--member-list-page-size`).
    pub list_page_size: u32,
}

/// One member as the MCS controller follows it.
pub(crate) struct Member {
    name: String,
    client_id: usize,
    index: Mutex<MemberIndex>,
    /// Events on the member's own objects (its ServiceExports).
    recorder: Recorder,
    /// True once a watch of the MCS CRDs listed: the cluster-wide feeds start then.
    crds_served: tokio::sync::watch::Sender<bool>,
}

/// A member's watches: aborted when dropped.
struct Watched {
    member: Arc<Member>,
    tasks: Vec<AbortHandle>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Member {
    fn new(name: &str, client_id: usize, index: MemberIndex, recorder: Recorder) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_owned(),
            client_id,
            index: Mutex::new(index),
            recorder,
            crds_served: tokio::sync::watch::Sender::new(false),
        })
    }
}

/// What the MCS controller's tasks share.
pub(crate) struct Context {
    /// The hub: pull members' reports and works.
    hub: Client,
    pool: Arc<MemberClientPool>,
    kubefed_namespace: String,
    /// [`CONTROL_PLANE_LABEL`]'s value: the UID of the control plane's namespace.
    control_plane: String,
    settings: McsSettings,
    members: RwLock<BTreeMap<String, Arc<Member>>>,
    queue: Arc<WorkQueue>,
    /// Cluster ids may have changed (membership, ClusterProperties).
    ids_changed: Notify,
    /// Events on KubeFedClusters in the hub.
    hub_events: Recorder,
    /// Keys with a ServiceImport: `hubfed_mcs_exported_services`.
    exported: Mutex<BTreeSet<Key>>,
    shutdown: CancellationToken,
}

impl Context {
    /// Every followed member, with its registry entry, sorted by name.
    fn members(&self) -> Vec<(Arc<MemberCluster>, Arc<Member>)> {
        let members = self.members.read();
        self.pool
            .clusters()
            .into_iter()
            .filter_map(|cluster| {
                let member = members.get(&cluster.name)?;
                (member.client_id == cluster.client_id).then(|| (cluster, Arc::clone(member)))
            })
            .collect()
    }

    /// Queues the keys of `slots`, changed in `feed`.
    fn touched(&self, feed: Feed, slots: BTreeSet<Slot>) {
        match feed {
            Feed::Namespaces => {
                let namespaces: BTreeSet<String> = slots.into_iter().map(|s| s.2).collect();
                let keys = self
                    .keys()
                    .into_iter()
                    .filter(|k| namespaces.contains(&k.0));
                self.queue.add_all(keys);
            }
            Feed::Properties => {
                self.ids_changed.notify_one();
                self.queue_everything();
            }
            _ => self
                .queue
                .add_all(slots.into_iter().map(|(ns, group, _)| (ns, group))),
        }
    }

    /// Every key any member exports or holds hubfed's objects of.
    fn keys(&self) -> BTreeSet<Key> {
        let members: Vec<Arc<Member>> = self.members.read().values().cloned().collect();
        members.iter().flat_map(|m| m.index.lock().keys()).collect()
    }

    /// Queues every key: membership, readiness or cluster ids changed.
    fn queue_everything(&self) {
        self.queue.add_all(self.keys());
    }

    /// Records whether `key` has a ServiceImport.
    fn set_exported(&self, key: &Key, exported: bool) {
        let mut keys = self.exported.lock();
        if exported {
            keys.insert(key.clone());
        } else {
            keys.remove(key);
        }
        let count = i64::try_from(keys.len()).unwrap_or(i64::MAX);
        METRICS
            .mcs_exported_services
            .with_label_values::<&str>(&[])
            .set(count);
    }
}

/// Runs the MCS controller until `shutdown`.
pub async fn run(
    hub: Client,
    pool: Arc<MemberClientPool>,
    kubefed_namespace: String,
    settings: McsSettings,
    shutdown: CancellationToken,
) {
    let Some(control_plane) = control_plane_uid(&hub, &kubefed_namespace, &shutdown).await else {
        return;
    };
    info!(
        namespace = %kubefed_namespace,
        endpoint_ttl_seconds = settings.endpoint_ttl.as_secs(),
        "multi-cluster services controller started"
    );
    let ctx = Arc::new(Context {
        hub_events: Recorder::new(hub.clone(), crate::events::reporter(REPORTER)),
        hub,
        pool,
        kubefed_namespace,
        control_plane,
        settings,
        members: RwLock::new(BTreeMap::new()),
        queue: Arc::new(WorkQueue::default()),
        ids_changed: Notify::new(),
        exported: Mutex::new(BTreeSet::new()),
        shutdown: shutdown.clone(),
    });
    tokio::spawn(ids::maintain(Arc::clone(&ctx)));
    let worker = {
        let ctx = Arc::clone(&ctx);
        let concurrency = ctx.settings.concurrency.max(1);
        Arc::clone(&ctx.queue).run(
            concurrency,
            move |key| reconcile::reconcile(Arc::clone(&ctx), key),
            shutdown.clone(),
        )
    };
    tokio::spawn(worker);
    follow_members(&ctx).await;
}

/// The UID of the control plane's namespace in the hub, retried until `shutdown`.
async fn control_plane_uid(
    hub: &Client,
    namespace: &str,
    shutdown: &CancellationToken,
) -> Option<String> {
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    loop {
        match namespaces.get(namespace).await {
            Ok(ns) => {
                if let Some(uid) = ns.metadata.uid {
                    return Some(uid);
                }
            }
            Err(error) => warn!(
                namespace,
                error = %error,
                "multi-cluster services wait for the control plane's namespace"
            ),
        }
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = tokio::time::sleep(NAMESPACE_RETRY) => {}
        }
    }
}

/// Starts and stops members' watches as the registry changes, until `shutdown`.
async fn follow_members(ctx: &Arc<Context>) {
    let mut changes = ctx.pool.subscribe();
    let mut watched: BTreeMap<String, Watched> = BTreeMap::new();
    loop {
        let gone = sync_members(ctx, &mut watched);
        ctx.queue.add_all(gone);
        ctx.queue_everything();
        ctx.ids_changed.notify_one();
        tokio::select! {
            () = ctx.shutdown.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
    }
}

/// Watches every push member with a client (again when its client changed) and every pull
/// member's reports, and stops following the others; returns the keys of the members no
/// longer followed.
fn sync_members(ctx: &Arc<Context>, watched: &mut BTreeMap<String, Watched>) -> BTreeSet<Key> {
    let clusters = ctx.pool.clusters();
    let wanted: BTreeMap<&str, &Arc<MemberCluster>> = clusters
        .iter()
        .filter(|c| c.pull || c.watch_client.is_some())
        .map(|c| (c.name.as_str(), c))
        .collect();
    let mut gone = BTreeSet::new();
    watched.retain(|name, w| {
        let keep = wanted
            .get(name.as_str())
            .is_some_and(|c| c.client_id == w.member.client_id);
        if !keep {
            gone.extend(w.member.index.lock().keys());
            if !wanted.contains_key(name.as_str()) {
                let _ = METRICS
                    .mcs_member_crds
                    .remove_label_values(&[name.as_str()]);
            }
        }
        keep
    });
    for (name, cluster) in wanted {
        if watched.contains_key(name) {
            continue;
        }
        let (member, tasks) = if cluster.pull {
            // Its Events are its agent's to write.
            let recorder = Recorder::new(ctx.hub.clone(), crate::events::reporter(REPORTER));
            let member = Member::new(name, cluster.client_id, MemberIndex::pull(), recorder);
            let tasks = pull::start(ctx, &member);
            (member, tasks)
        } else {
            let (Some(client), Some(watch_client)) = (&cluster.client, &cluster.watch_client)
            else {
                continue;
            };
            let recorder = Recorder::new(client.clone(), crate::events::reporter(REPORTER));
            let member = Member::new(name, cluster.client_id, MemberIndex::default(), recorder);
            let watching = Watching {
                control_plane: &ctx.control_plane,
                page_size: ctx.settings.list_page_size,
            };
            let sink: Arc<dyn Sink> = Arc::clone(ctx) as Arc<dyn Sink>;
            let tasks = observe::start(&sink, &watching, &member, watch_client);
            (member, tasks)
        };
        watched.insert(name.to_owned(), Watched { member, tasks });
    }
    let mut members = ctx.members.write();
    *members = watched
        .iter()
        .map(|(name, w)| (name.clone(), Arc::clone(&w.member)))
        .collect();
    gone
}

/// The label selector of this control plane's derived objects.
fn own_selector(control_plane: &str) -> String {
    format!("{CONTROL_PLANE_LABEL}={control_plane}")
}
