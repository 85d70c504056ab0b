//! The registry's IO: watches on KubeFedClusters and Secrets, client builds, health probes,
//! each push member's node watch (its region and zones), status writes and events. One task owns all state; probes and writes run as child tasks
//! and report back, so one slow member never delays the others.

use parking_lot::RwLock;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use hubfed_api::kubefedcluster::{
    ClusterCondition, EVENT_MALFORMED_CLUSTER_CONFIG, KubeFedCluster, KubeFedClusterStatus,
    SyncMode,
};
use hubfed_api::names::CLUSTER_SECRET_TOKEN_KEY;
use hubfed_core::pull::{HeartbeatSeen, cluster_namespace};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::events::Recorder;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::config::{
    ClientInputs, ConfigError, MemberConfigs, SecretToken, error_chain, member_configs,
};
use super::probe::{Probed, now, probe_cluster, read_heartbeat};
use super::tls::client;
use super::{HealthCheckSettings, MemberCluster};
use hubfed_core::health::{HealthTracker, ProbeOutcome};
use topology::{NodeLabels, NodeReport, NodeWatch, watch_nodes};

mod report;
mod topology;

/// Event source of KubeFed's cluster controller; kept for compatibility.
const REPORTER: &str = "kubefedcluster-controller";
/// Limit of one status write or event on the hub.
const HUB_WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Slack on top of the probe and write timeouts before a probe is considered lost.
const STALE_MARGIN: Duration = Duration::from_secs(10);
/// Node reports waiting for the registry; a node watch waits when they are not taken.
const NODE_REPORT_BUFFER: usize = 64;
/// Helm release Secrets can be large and never hold cluster tokens.
const SECRET_FIELD_SELECTOR: &str = "type!=helm.sh/release.v1";

static NEXT_CLIENT_ID: AtomicUsize = AtomicUsize::new(1);
static NEXT_PROBE_ID: AtomicU64 = AtomicU64::new(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SyncState {
    Loading,
    Synced,
    Stopped,
}

/// The cluster registry. Create with [`MemberClientPool::new`], drive with
/// [`MemberClientPool::run`] (once), read with [`MemberClientPool::clusters`],
/// [`MemberClientPool::get`] and [`MemberClientPool::subscribe`].
pub struct MemberClientPool {
    hub: kube::Client,
    namespace: String,
    health: HealthCheckSettings,
    member_write_concurrency: usize,
    members: RwLock<BTreeMap<String, Arc<MemberCluster>>>,
    changes: watch::Sender<u64>,
    sync_state: watch::Sender<SyncState>,
}

impl MemberClientPool {
    /// A registry of the KubeFedClusters in `namespace` (their Secrets live there too).
    /// `member_write_concurrency` is the number of permits of each cluster's write semaphore.
    pub fn new(
        hub: kube::Client,
        namespace: String,
        health: HealthCheckSettings,
        member_write_concurrency: usize,
    ) -> Arc<Self> {
        Arc::new(Self {
            hub,
            namespace,
            health,
            member_write_concurrency: member_write_concurrency.max(1),
            members: RwLock::new(BTreeMap::new()),
            changes: watch::Sender::new(0),
            sync_state: watch::Sender::new(SyncState::Loading),
        })
    }

    /// Every registered cluster, sorted by name.
    pub fn clusters(&self) -> Vec<Arc<MemberCluster>> {
        self.members.read().values().cloned().collect()
    }

    /// The registered cluster of that name.
    pub fn get(&self, name: &str) -> Option<Arc<MemberCluster>> {
        self.members.read().get(name).cloned()
    }

    /// The counter of [`Self::subscribe`], now.
    pub fn version(&self) -> u64 {
        *self.changes.borrow()
    }

    /// A counter that increases whenever a cluster is added or removed or its labels,
    /// readiness or clients change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Returns once the KubeFedClusters and Secrets have been listed and every cluster listed
    /// then has been probed once, or when [`Self::run`] has stopped.
    pub async fn wait_until_synced(&self) {
        let mut state = self.sync_state.subscribe();
        // The sender lives as long as `self`, so waiting cannot fail.
        let _ = state.wait_for(|s| *s != SyncState::Loading).await;
    }

    /// Watches, builds clients, probes and writes status until `shutdown` is cancelled.
    /// Child tasks (probes, writes) are aborted on return.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) -> anyhow::Result<()> {
        let result = Arc::clone(&self).run_registry(shutdown).await;
        self.sync_state.send_replace(SyncState::Stopped);
        result
    }

    async fn run_registry(self: Arc<Self>, shutdown: CancellationToken) -> anyhow::Result<()> {
        let clusters_api: Api<KubeFedCluster> = Api::namespaced(self.hub.clone(), &self.namespace);
        let secrets_api: Api<Secret> = Api::namespaced(self.hub.clone(), &self.namespace);
        let mut cluster_events = watcher(clusters_api.clone(), watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut secret_events = watcher(
            secrets_api,
            watcher::Config::default().fields(SECRET_FIELD_SELECTOR),
        )
        .default_backoff()
        .boxed();
        let mut ticks = tokio::time::interval(self.health.period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut tasks = JoinSet::new();
        let (node_reports, mut node_report_events) = mpsc::channel(NODE_REPORT_BUFFER);
        let mut registry = Registry {
            node_reports,
            recorder: Recorder::new(self.hub.clone(), REPORTER.into()),
            pool: Arc::clone(&self),
            clusters_api,
            entries: BTreeMap::new(),
            tokens: BTreeMap::new(),
            clusters_listed: false,
            secrets_listed: false,
            clusters_relist: None,
            secrets_relist: None,
        };
        info!(namespace = %self.namespace, "starting cluster registry");
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                event = cluster_events.next() => match event {
                    Some(Ok(event)) => registry.on_cluster_event(event, &mut tasks),
                    Some(Err(error)) => warn!(
                        namespace = %self.namespace,
                        error = %error_chain(&error),
                        "KubeFedCluster watch failed; retrying"
                    ),
                    None => anyhow::bail!("the KubeFedCluster watch ended"),
                },
                event = secret_events.next() => match event {
                    Some(Ok(event)) => registry.on_secret_event(event, &mut tasks),
                    Some(Err(error)) => warn!(
                        namespace = %self.namespace,
                        error = %secret_watch_error(&error),
                        "Secret watch failed; retrying"
                    ),
                    None => anyhow::bail!("the Secret watch ended"),
                },
                Some(done) = tasks.join_next() => match done {
                    Ok(done) => registry.on_task_done(done, &mut tasks),
                    Err(error) if error.is_panic() => warn!(%error, "cluster registry task panicked"),
                    Err(_) => {}
                },
                Some(report) = node_report_events.recv() => registry.on_node_report(report, &mut tasks),
                _ = ticks.tick() => registry.on_tick(),
            }
            registry.settle(&mut tasks);
        }
    }
}

/// Watch errors about Secrets, without decode details: a serde error may quote a value.
fn secret_watch_error(error: &watcher::Error) -> String {
    match error {
        watcher::Error::InitialListFailed(kube::Error::SerdeError(_))
        | watcher::Error::WatchStartFailed(kube::Error::SerdeError(_))
        | watcher::Error::WatchFailed(kube::Error::SerdeError(_)) => {
            "cannot decode a Secret (details withheld)".to_owned()
        }
        other => error_chain(other),
    }
}

/// What a child task reports back to the registry.
enum TaskDone {
    Probed {
        cluster: String,
        probe: u64,
        client_id: usize,
        probe_time: Time,
        outcome: Probed,
    },
    StatusWritten {
        cluster: String,
        probe: u64,
        /// The conditions written, `None` for a write of region and zones only.
        conditions: Option<Vec<ClusterCondition>>,
        result: Result<Option<KubeFedClusterStatus>, String>,
    },
    EventPublished {
        cluster: String,
        reason: &'static str,
        result: Result<(), String>,
    },
}

/// The clients of one member.
#[derive(Clone)]
struct MemberClients {
    request: kube::Client,
    watch: kube::Client,
}

enum ClientState {
    /// Waiting for the initial lists.
    NotBuilt,
    Built(MemberClients),
    /// The configuration is malformed; the error text went into an event.
    Failed,
    /// `syncMode: Pull`: the hub never connects to this member; its agent's heartbeat in the
    /// hub is its health.
    Pull,
}

/// The registry's knowledge of one KubeFedCluster.
struct Entry {
    /// The latest object seen; its status is also refreshed from our own writes.
    object: KubeFedCluster,
    /// What the current clients were built from.
    inputs: Option<ClientInputs>,
    clients: ClientState,
    client_id: usize,
    tracker: HealthTracker,
    /// The conditions we last wrote: the reference for transition times, immune to a watch
    /// event that is older than our write.
    last_written: Option<Vec<ClusterCondition>>,
    /// The last unreachability error, so the warning event is sent once per distinct error.
    last_probe_error: Option<String>,
    /// The probe (and the status write following it) in progress.
    in_flight: Option<u64>,
    /// When the probe in flight started; a probe that never reports back (a panicked task)
    /// is abandoned after every timeout it could legitimately take.
    probe_started: Instant,
    probe_wanted: bool,
    probed: bool,
    writes: Arc<Semaphore>,
    /// A pull member's last heartbeat, on this process's clock.
    heartbeat: Option<HeartbeatSeen>,
    /// A push member's node watch, for its region and zones.
    node_watch: Option<NodeWatch>,
    /// The topology labels of the member's nodes, `None` until listed (and for pull members).
    nodes: Option<NodeLabels>,
    /// The member refused to list its nodes; said once until it lists them again.
    nodes_refused: bool,
    /// The nodes changed since their region and zones were compared with the status.
    topology_stale: bool,
}

impl Entry {
    fn ready(&self) -> bool {
        self.tracker
            .published()
            .map_or_else(|| self.object.is_ready(), ProbeOutcome::is_ready)
    }

    fn clients(&self) -> Option<&MemberClients> {
        match &self.clients {
            ClientState::Built(clients) => Some(clients),
            ClientState::NotBuilt | ClientState::Failed | ClientState::Pull => None,
        }
    }
}

/// The state owned by the registry task.
struct Registry {
    pool: Arc<MemberClientPool>,
    /// Where the members' node watches report.
    node_reports: mpsc::Sender<NodeReport>,
    clusters_api: Api<KubeFedCluster>,
    recorder: Recorder,
    entries: BTreeMap<String, Entry>,
    /// The `token` of every Secret in the namespace, by Secret name.
    tokens: BTreeMap<String, SecretToken>,
    clusters_listed: bool,
    secrets_listed: bool,
    /// Names seen since a watch (re)started listing; the rest are gone when it completes.
    clusters_relist: Option<BTreeSet<String>>,
    secrets_relist: Option<BTreeSet<String>>,
}

impl Registry {
    /// Clients are built only once both lists are in, so that a Secret not listed yet is not
    /// mistaken for a missing one.
    fn listed(&self) -> bool {
        self.clusters_listed && self.secrets_listed
    }

    fn on_cluster_event(
        &mut self,
        event: watcher::Event<KubeFedCluster>,
        tasks: &mut JoinSet<TaskDone>,
    ) {
        match event {
            watcher::Event::Init => self.clusters_relist = Some(BTreeSet::new()),
            watcher::Event::InitApply(cluster) => {
                if let Some(seen) = &mut self.clusters_relist {
                    seen.insert(cluster.name_any());
                }
                self.upsert(cluster, tasks);
            }
            watcher::Event::Apply(cluster) => self.upsert(cluster, tasks),
            watcher::Event::Delete(cluster) => self.remove(&cluster.name_any()),
            watcher::Event::InitDone => {
                if let Some(seen) = self.clusters_relist.take() {
                    let gone: Vec<String> = self
                        .entries
                        .keys()
                        .filter(|name| !seen.contains(*name))
                        .cloned()
                        .collect();
                    for name in gone {
                        self.remove(&name);
                    }
                }
                if !self.clusters_listed {
                    debug!(namespace = %self.pool.namespace, clusters = self.entries.len(), "KubeFedClusters listed");
                }
                self.clusters_listed = true;
            }
        }
    }

    fn on_secret_event(&mut self, event: watcher::Event<Secret>, tasks: &mut JoinSet<TaskDone>) {
        match event {
            watcher::Event::Init => {
                self.secrets_relist = Some(BTreeSet::new());
                return;
            }
            watcher::Event::InitApply(secret) | watcher::Event::Apply(secret) => {
                let name = secret.name_any();
                if let Some(seen) = &mut self.secrets_relist {
                    seen.insert(name.clone());
                }
                let token = secret
                    .data
                    .as_ref()
                    .and_then(|data| data.get(CLUSTER_SECRET_TOKEN_KEY))
                    .map(|value| value.0.as_slice());
                self.tokens.insert(name, SecretToken::from_data(token));
            }
            watcher::Event::Delete(secret) => {
                self.tokens.remove(&secret.name_any());
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.secrets_relist.take() {
                    self.tokens.retain(|name, _| seen.contains(name));
                }
                self.secrets_listed = true;
            }
        }
        if self.listed() {
            let names: Vec<String> = self.entries.keys().cloned().collect();
            for name in names {
                self.refresh_client(&name, tasks);
            }
        }
    }

    fn upsert(&mut self, cluster: KubeFedCluster, tasks: &mut JoinSet<TaskDone>) {
        let name = cluster.name_any();
        match self.entries.get_mut(&name) {
            Some(entry) => entry.object = cluster,
            None => {
                info!(cluster = %name, "cluster registered");
                self.entries.insert(
                    name.clone(),
                    Entry {
                        object: cluster,
                        inputs: None,
                        clients: ClientState::NotBuilt,
                        client_id: 0,
                        tracker: HealthTracker::default(),
                        last_written: None,
                        last_probe_error: None,
                        in_flight: None,
                        probe_started: Instant::now(),
                        probe_wanted: false,
                        probed: false,
                        writes: Arc::new(Semaphore::new(self.pool.member_write_concurrency)),
                        heartbeat: None,
                        node_watch: None,
                        nodes: None,
                        nodes_refused: false,
                        topology_stale: false,
                    },
                );
            }
        }
        if self.listed() {
            self.refresh_client(&name, tasks);
        }
    }

    fn remove(&mut self, name: &str) {
        if self.entries.remove(name).is_some() {
            info!(cluster = %name, "cluster unregistered");
        }
    }

    /// Rebuilds the clients when the spec or the token changed since the last build.
    fn refresh_client(&mut self, name: &str, tasks: &mut JoinSet<TaskDone>) {
        let Some(entry) = self.entries.get_mut(name) else {
            return;
        };
        let spec = &entry.object.spec;
        let token = self.tokens.get(&spec.secret_ref.name);
        let unchanged = entry
            .inputs
            .as_ref()
            .is_some_and(|inputs| inputs.spec == *spec && inputs.token.as_ref() == token);
        if unchanged {
            return;
        }
        let inputs = ClientInputs {
            spec: spec.clone(),
            token: token.cloned(),
        };
        let rebuild = entry.inputs.is_some();
        entry.client_id = NEXT_CLIENT_ID.fetch_add(1, Ordering::Relaxed);
        // Like KubeFed, a changed cluster starts its health history afresh.
        entry.tracker = HealthTracker::default();
        entry.probe_wanted = true;
        // The old clients' node watch stops; the new clients list the nodes afresh.
        entry.node_watch = None;
        entry.nodes = None;
        entry.nodes_refused = false;
        if inputs.spec.sync_mode == SyncMode::Pull {
            info!(cluster = %name, "pull-mode member: health from its agent's heartbeat");
            entry.clients = ClientState::Pull;
            entry.inputs = Some(inputs);
            return;
        }
        let malformed = match build_clients(&inputs) {
            Ok(built) => {
                info!(
                    cluster = %name,
                    rebuild,
                    endpoint = %built.request_url,
                    proxy = proxy_scheme(&inputs.spec.proxy_url),
                    disabled_tls_validations = ?inputs.spec.disabled_tls_validations,
                    "member client built"
                );
                entry.node_watch = Some(watch_nodes(
                    name,
                    entry.client_id,
                    built.clients.watch.clone(),
                    self.node_reports.clone(),
                ));
                entry.clients = ClientState::Built(built.clients);
                None
            }
            Err(error) => {
                let message = error_chain(&error);
                warn!(cluster = %name, error = %message, "the configuration for this cluster may be malformed");
                entry.clients = ClientState::Failed;
                Some((
                    entry.object.clone(),
                    format!("The configuration for this cluster may be malformed: {message}"),
                ))
            }
        };
        entry.inputs = Some(inputs);
        if let Some((object, note)) = malformed {
            self.emit_warning(
                name,
                &object,
                EVENT_MALFORMED_CLUSTER_CONFIG,
                "BuildClient",
                note,
                tasks,
            );
        }
    }

    fn on_tick(&mut self) {
        let abandon_after = self.pool.health.timeout * 2 + HUB_WRITE_TIMEOUT + STALE_MARGIN;
        for (name, entry) in &mut self.entries {
            if entry.in_flight.is_some() && entry.probe_started.elapsed() > abandon_after {
                warn!(cluster = %name, "health probe never reported back; probing again");
                entry.in_flight = None;
            }
            if entry.in_flight.is_none() {
                entry.probe_wanted = true;
            }
        }
    }

    /// After every event: start wanted probes, publish the snapshot, report sync.
    fn settle(&mut self, tasks: &mut JoinSet<TaskDone>) {
        if !self.listed() {
            return;
        }
        let unbuilt: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, entry)| matches!(entry.clients, ClientState::NotBuilt))
            .map(|(name, _)| name.clone())
            .collect();
        for name in unbuilt {
            self.refresh_client(&name, tasks);
        }
        let timeout = self.pool.health.timeout;
        for (name, entry) in &mut self.entries {
            if entry.probe_wanted && entry.in_flight.is_none() {
                start_probe(name, entry, timeout, &self.pool.hub, tasks);
            }
        }
        self.write_stale_topologies(tasks);
        self.publish();
        if *self.pool.sync_state.borrow() == SyncState::Loading
            && self.entries.values().all(|entry| entry.probed)
        {
            info!(namespace = %self.pool.namespace, clusters = self.entries.len(), "cluster registry synced");
            self.pool.sync_state.send_replace(SyncState::Synced);
        }
    }

    /// Replaces the snapshot entries whose labels, readiness or clients changed.
    fn publish(&self) {
        let mut changed = false;
        {
            let mut members = self.pool.members.write();
            let before = members.len();
            members.retain(|name, _| self.entries.contains_key(name));
            changed |= members.len() != before;
            for (name, entry) in &self.entries {
                // A pull member is ready while its agent's heartbeat says so; the hub
                // delivers its work through Works in the hub (sync::deliver).
                let ready = entry.ready();
                let pull = matches!(entry.clients, ClientState::Pull);
                let labels = entry.object.labels();
                if let Some(member) = members.get(name)
                    && member.ready == ready
                    && member.pull == pull
                    && member.client_id == entry.client_id
                    && member.labels == *labels
                {
                    continue;
                }
                let clients = entry.clients();
                let ready_since = match members.get(name) {
                    Some(member) if member.ready == ready => member.ready_since,
                    _ => Some(
                        ready_condition_since(&entry.object, ready)
                            .unwrap_or_else(|| k8s_openapi::jiff::Timestamp::now().as_second()),
                    ),
                };
                members.insert(
                    name.clone(),
                    Arc::new(MemberCluster {
                        name: name.clone(),
                        labels: labels.clone(),
                        ready,
                        ready_since,
                        pull,
                        client: clients.map(|c| c.request.clone()),
                        watch_client: clients.map(|c| c.watch.clone()),
                        client_id: entry.client_id,
                        writes: Arc::clone(&entry.writes),
                    }),
                );
                changed = true;
            }
        }
        if changed {
            self.pool.changes.send_modify(|v| *v = v.wrapping_add(1));
        }
    }
}

/// The proxy's scheme for logs; the URL itself may carry credentials.
fn proxy_scheme(proxy_url: &str) -> &str {
    match proxy_url.split_once("://") {
        Some((scheme, _)) => scheme,
        None if proxy_url.is_empty() => "none",
        None => "invalid",
    }
}

struct BuiltClients {
    clients: MemberClients,
    request_url: http::Uri,
}

fn build_clients(inputs: &ClientInputs) -> Result<BuiltClients, ConfigError> {
    let MemberConfigs {
        request,
        watch,
        tls_relaxation,
    } = member_configs(inputs)?;
    let request_url = request.cluster_url.clone();
    // Requests: HTTP/1.1, a connection per request in flight, each request bounded by the
    // read timeout; connections idle for 30 s are closed (kube's own client keeps them all).
    let request = client(&request, tls_relaxation, false);
    // Watches — two per federated type, open all the time — share one HTTP/2 connection
    // instead of holding one each (TLS state and buffers: ~50 KiB a connection).
    let watch = client(&watch, tls_relaxation, true);
    let request = request.map_err(|source| ConfigError::Client { source })?;
    let watch = watch.map_err(|source| ConfigError::Client { source })?;
    Ok(BuiltClients {
        clients: MemberClients { request, watch },
        request_url,
    })
}

fn start_probe(
    name: &str,
    entry: &mut Entry,
    timeout: Duration,
    hub: &kube::Client,
    tasks: &mut JoinSet<TaskDone>,
) {
    let probe = NEXT_PROBE_ID.fetch_add(1, Ordering::Relaxed);
    entry.in_flight = Some(probe);
    entry.probe_started = Instant::now();
    entry.probe_wanted = false;
    let cluster = name.to_owned();
    let client_id = entry.client_id;
    if matches!(entry.clients, ClientState::Pull) {
        let leases: Api<Lease> = Api::namespaced(hub.clone(), &cluster_namespace(name));
        tasks.spawn(async move {
            let probe_time = now();
            let lease = read_heartbeat(&leases, timeout).await;
            TaskDone::Probed {
                cluster,
                probe,
                client_id,
                probe_time,
                outcome: Probed::Heartbeat(lease),
            }
        });
        return;
    }
    let client = entry.clients().map(|c| c.request.clone());
    tasks.spawn(async move {
        let probe_time = now();
        let outcome = match client {
            Some(client) => {
                let started = std::time::Instant::now();
                let outcome = probe_cluster(&client, timeout).await;
                crate::metrics::METRICS
                    .cluster_health_status_duration
                    .with_label_values::<&str>(&[])
                    .observe(started.elapsed().as_secs_f64());
                outcome
            }
            None => ProbeOutcome::ConfigMalformed,
        };
        TaskDone::Probed {
            cluster,
            probe,
            client_id,
            probe_time,
            outcome: Probed::Member(outcome),
        }
    });
}

/// When the KubeFedCluster's `Ready` condition last changed, if its status says `ready`
/// (Unix seconds): the start of the current readiness after a restart of the controller.
fn ready_condition_since(object: &KubeFedCluster, ready: bool) -> Option<i64> {
    let condition = object
        .status
        .as_ref()?
        .condition(hubfed_api::kubefedcluster::ClusterConditionType::Ready)?;
    ((condition.status == "True") == ready)
        .then(|| {
            condition
                .last_transition_time
                .as_ref()
                .map(|t| t.0.as_second())
        })
        .flatten()
}
