//! A push member's region and zones: a metadata-only watch of its Nodes, reduced to their
//! topology labels, and the status write when they change what the KubeFedCluster says
//! (decisions in `hubfed_core::dns::cluster_topology` and `hubfed_core::health`).
//!
//! The watch is event-driven and its cost bounded: only object metadata crosses the wire, only
//! the four topology labels are kept per node, and the registry hears of a change only when
//! those labels change (a kubelet's status updates do not count). A member whose credentials
//! cannot list nodes is said once (a log line and a Warning Event) and keeps the region and
//! zones a person set; its health probes never wait for this watch.

use std::collections::BTreeMap;

use futures::StreamExt;
use hubfed_core::dns::{
    ClusterTopology, DEPRECATED_REGION_LABEL, DEPRECATED_ZONE_LABEL, REGION_LABEL, ZONE_LABEL,
    cluster_topology,
};
use hubfed_core::health::{topology_needs_write, topology_patch};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::super::config::error_chain;
use super::report::spawn_status_write;
use super::{NEXT_PROBE_ID, Registry, TaskDone};

/// Reason of the Warning Event on a KubeFedCluster whose nodes cannot be read.
const EVENT_NODES_NOT_READABLE: &str = "ClusterTopologyUnknown";

/// The topology labels of each node of a member, by node name.
pub(super) type NodeLabels = BTreeMap<String, BTreeMap<String, String>>;

/// What a member's node watch tells the registry.
pub(super) struct NodeReport {
    pub cluster: String,
    pub client_id: usize,
    pub kind: NodeReportKind,
}

pub(super) enum NodeReportKind {
    /// Every node's topology labels, after a (re)list and after each change of them.
    Nodes(NodeLabels),
    /// The member refused to list or watch nodes (RBAC): said once per refusal streak.
    Refused(String),
}

/// A member's node watch, aborted when dropped (new clients, a removed cluster, shutdown).
pub(super) struct NodeWatch(AbortHandle);

impl Drop for NodeWatch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the node watch of `cluster` through its watch client `client`.
pub(super) fn watch_nodes(
    cluster: &str,
    client_id: usize,
    client: kube::Client,
    reports: mpsc::Sender<NodeReport>,
) -> NodeWatch {
    let cluster = cluster.to_owned();
    let task = tokio::spawn(async move {
        // `PartialObjectMeta` makes every list and watch metadata-only.
        let nodes: Api<PartialObjectMeta<Node>> = Api::all(client);
        let mut events = watcher(nodes, watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut known = NodeLabels::new();
        let mut relist: Option<NodeLabels> = None;
        let mut reported: Option<NodeLabels> = None;
        let mut refused = false;
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    if let Some(message) = refusal(&error)
                        && !refused
                    {
                        refused = true;
                        let kind = NodeReportKind::Refused(message);
                        if send(&reports, &cluster, client_id, kind).await.is_err() {
                            return;
                        }
                    } else {
                        debug!(cluster = %cluster, error = %error_chain(&error), "node watch failed; retrying");
                    }
                    continue;
                }
            };
            refused = false;
            match event {
                watcher::Event::Init => relist = Some(NodeLabels::new()),
                watcher::Event::InitApply(node) => {
                    if let Some(relist) = &mut relist {
                        relist.insert(node_name(&node), topology_labels(&node));
                    }
                    continue;
                }
                watcher::Event::InitDone => {
                    if let Some(listed) = relist.take() {
                        known = listed;
                    }
                }
                watcher::Event::Apply(node) => {
                    known.insert(node_name(&node), topology_labels(&node));
                }
                watcher::Event::Delete(node) => {
                    known.remove(&node_name(&node));
                }
            }
            if reported.as_ref() != Some(&known) {
                reported = Some(known.clone());
                let kind = NodeReportKind::Nodes(known.clone());
                if send(&reports, &cluster, client_id, kind).await.is_err() {
                    return;
                }
            }
        }
    });
    NodeWatch(task.abort_handle())
}

async fn send(
    reports: &mpsc::Sender<NodeReport>,
    cluster: &str,
    client_id: usize,
    kind: NodeReportKind,
) -> Result<(), mpsc::error::SendError<NodeReport>> {
    reports
        .send(NodeReport {
            cluster: cluster.to_owned(),
            client_id,
            kind,
        })
        .await
}

fn node_name(node: &PartialObjectMeta<Node>) -> String {
    node.metadata.name.clone().unwrap_or_default()
}

/// The labels of `node` that say where it runs; the rest is not kept.
fn topology_labels(node: &PartialObjectMeta<Node>) -> BTreeMap<String, String> {
    let labels = node.metadata.labels.as_ref();
    [
        REGION_LABEL,
        ZONE_LABEL,
        DEPRECATED_REGION_LABEL,
        DEPRECATED_ZONE_LABEL,
    ]
    .into_iter()
    .filter_map(|key| Some((key.to_owned(), labels?.get(key)?.clone())))
    .collect()
}

/// The member's refusal of a node list or watch (401, 403), as its message.
fn refusal(error: &watcher::Error) -> Option<String> {
    let (watcher::Error::InitialListFailed(kube::Error::Api(status))
    | watcher::Error::WatchStartFailed(kube::Error::Api(status))
    | watcher::Error::WatchError(status)
    | watcher::Error::WatchFailed(kube::Error::Api(status))) = error
    else {
        return None;
    };
    matches!(status.code, 401 | 403).then(|| status.message.clone())
}

impl Registry {
    pub(super) fn on_node_report(&mut self, report: NodeReport, tasks: &mut JoinSet<TaskDone>) {
        let Some(entry) = self.entries.get_mut(&report.cluster) else {
            return;
        };
        if entry.client_id != report.client_id {
            return;
        }
        match report.kind {
            NodeReportKind::Nodes(nodes) => {
                debug!(cluster = %report.cluster, nodes = nodes.len(), "node topology labels changed");
                entry.nodes = Some(nodes);
                entry.nodes_refused = false;
                entry.topology_stale = true;
            }
            NodeReportKind::Refused(message) => {
                if entry.nodes_refused {
                    return;
                }
                entry.nodes_refused = true;
                warn!(
                    cluster = %report.cluster,
                    error = %message,
                    "cannot list the member's nodes: region and zones stay as set in its KubeFedCluster"
                );
                let object = entry.object.clone();
                self.emit_warning(
                    &report.cluster,
                    &object,
                    EVENT_NODES_NOT_READABLE,
                    "ListNodes",
                    format!(
                        "Cannot list the cluster's nodes, so its region and zones are not read \
                         from their labels (they stay as set in status.region and status.zones); \
                         grant get, list and watch on nodes: {message}"
                    ),
                    tasks,
                );
            }
        }
    }

    /// Writes the region and zones of clusters whose nodes changed since, when they differ
    /// from the status. A cluster with a probe (or a write) in flight waits for it: the probe's
    /// status write carries the topology too, and this runs again after every event.
    pub(super) fn write_stale_topologies(&mut self, tasks: &mut JoinSet<TaskDone>) {
        for (name, entry) in &mut self.entries {
            if !entry.topology_stale || entry.in_flight.is_some() {
                continue;
            }
            entry.topology_stale = false;
            // Before the first probe there is no status to add to: the probe writes it all.
            if entry.tracker.published().is_none() || entry.object.status.is_none() {
                continue;
            }
            let Some(topology) = entry.topology() else {
                continue;
            };
            if !topology_needs_write(entry.object.status.as_ref(), &topology) {
                continue;
            }
            info!(cluster = %name, region = ?topology.region, zones = ?topology.zones, "cluster region and zones changed");
            let write = NEXT_PROBE_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            entry.in_flight = Some(write);
            entry.probe_started = Instant::now();
            spawn_status_write(
                &self.clusters_api,
                name,
                write,
                None,
                topology_patch(&topology),
                tasks,
            );
        }
    }
}

impl super::Entry {
    /// The region and zones the status should hold, `None` while the nodes are not known.
    pub(super) fn topology(&self) -> Option<ClusterTopology> {
        let nodes = self.nodes.as_ref()?;
        let status = self.object.status.as_ref();
        let topology = cluster_topology(
            nodes.values(),
            status.and_then(|s| s.region.as_deref()),
            status.map_or(&[][..], |s| s.zones.as_slice()),
        );
        Some(topology)
    }
}
