//! Which joined clusters are the hub itself: the `kube-system` UID read on the hub and through
//! each member's client ([`hubfed_core::hub`] decides; this module only reads and remembers).
//!
//! Answers are remembered per member client (a rebuilt client — new endpoint or credentials —
//! is asked again). A failed lookup is never remembered as an answer: the cluster's identity is
//! `Unknown` until a lookup succeeds, and lookups after failures back off (1 s doubling to
//! 5 min). One lookup is made at a time (single flight); a reconcile waits at most 2 s for it,
//! then goes on with `Unknown`. No lock on the remembered answers is held across a request.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use hubfed_core::hub::{ClusterIdentity, identity_from_uids, identity_retry_delay};
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client};
use tracing::{info, warn};

use crate::clusters::MemberCluster;

/// How long one `kube-system` lookup may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a reconcile waits for a lookup another one is making; then the identity is
/// `Unknown` for this reconcile (nothing is deleted on it; the object is looked at again).
const LOOKUP_WAIT: Duration = Duration::from_secs(2);

#[derive(Clone)]
enum Entry {
    Known {
        client_id: usize,
        is_hub: bool,
        /// The member's `kube-system` UID: two names with the same one are one API server.
        uid: String,
    },
    Failed {
        client_id: usize,
        failures: u32,
        retry_at: Instant,
        message: String,
    },
}

/// Remembered identities of the member clusters.
#[derive(Default)]
pub struct HubIdentities {
    /// The hub's `kube-system` UID, once read.
    hub_uid: Mutex<Option<String>>,
    entries: Mutex<HashMap<String, Entry>>,
    /// Held while lookups are made (single flight).
    lookups: tokio::sync::Mutex<()>,
}

impl HubIdentities {
    /// The identity of every ready cluster with a client, and the `kube-system` UIDs of those
    /// whose identity is known; a lookup is made for those not known yet and not backing off.
    pub async fn resolve(
        &self,
        hub: &Client,
        clusters: &[Arc<MemberCluster>],
    ) -> (BTreeMap<String, ClusterIdentity>, BTreeMap<String, String>) {
        let (mut known, mut uids, to_look_up) = self.remembered(clusters);
        if to_look_up.is_empty() {
            return (known, uids);
        }
        // One lookup at a time for the whole controller: concurrent reconciles wait for it
        // (briefly) instead of each sending their own, and a member that does not answer
        // holds up no reconcile longer than LOOKUP_WAIT.
        let Ok(_lookup) = tokio::time::timeout(LOOKUP_WAIT, self.lookups.lock()).await else {
            for (name, _, _) in to_look_up {
                known.insert(
                    name,
                    ClusterIdentity::Unknown("the lookup of its identity is under way".into()),
                );
            }
            return (known, uids);
        };
        // Another reconcile may have made the lookups while this one waited.
        let (known_now, uids_now, to_look_up) = self.remembered(clusters);
        known.extend(known_now);
        uids.extend(uids_now);
        if to_look_up.is_empty() {
            return (known, uids);
        }

        let hub_uid = self.hub_uid(hub).await;
        let lookups = to_look_up
            .iter()
            .map(|(_, _, client)| kube_system_uid(client));
        let results = join_all(lookups).await;
        let mut entries = self.entries.lock();
        for ((name, client_id, _), member_uid) in to_look_up.into_iter().zip(results) {
            let identity = identity_from_uids(
                hub_uid.as_deref().map_err(String::as_str),
                member_uid.as_deref().map_err(String::as_str),
            );
            let entry = match &identity {
                ClusterIdentity::Hub | ClusterIdentity::NotHub => {
                    let uid = member_uid.clone().unwrap_or_default();
                    uids.insert(name.clone(), uid.clone());
                    let is_hub = identity == ClusterIdentity::Hub;
                    known_entry(&name, client_id, is_hub, uid)
                }
                ClusterIdentity::Unknown(message) => {
                    failed_entry(entries.get(&name), &name, client_id, message)
                }
            };
            entries.insert(name.clone(), entry);
            known.insert(name, identity);
        }
        let names: Vec<&String> = clusters.iter().map(|c| &c.name).collect();
        entries.retain(|name, _| names.contains(&name));
        warn_duplicates(&uids);
        (known, uids)
    }

    /// What is remembered of `clusters` (ready, with a client): their identities and UIDs, and
    /// those to look up (not known yet, not backing off).
    #[allow(clippy::type_complexity)]
    fn remembered(
        &self,
        clusters: &[Arc<MemberCluster>],
    ) -> (
        BTreeMap<String, ClusterIdentity>,
        BTreeMap<String, String>,
        Vec<(String, usize, Client)>,
    ) {
        let now = Instant::now();
        let mut known = BTreeMap::new();
        let mut uids = BTreeMap::new();
        let mut to_look_up = Vec::new();
        let entries = self.entries.lock();
        for cluster in clusters.iter().filter(|c| c.ready) {
            let Some(client) = &cluster.client else {
                continue;
            };
            match entries.get(&cluster.name) {
                Some(Entry::Known {
                    client_id,
                    is_hub,
                    uid,
                }) if *client_id == cluster.client_id => {
                    let identity = if *is_hub {
                        ClusterIdentity::Hub
                    } else {
                        ClusterIdentity::NotHub
                    };
                    known.insert(cluster.name.clone(), identity);
                    uids.insert(cluster.name.clone(), uid.clone());
                }
                Some(Entry::Failed {
                    client_id,
                    retry_at,
                    message,
                    ..
                }) if *client_id == cluster.client_id && now < *retry_at => {
                    known.insert(
                        cluster.name.clone(),
                        ClusterIdentity::Unknown(message.clone()),
                    );
                }
                _ => to_look_up.push((cluster.name.clone(), cluster.client_id, client.clone())),
            }
        }
        (known, uids, to_look_up)
    }

    /// The hub's `kube-system` UID: read once, then remembered (it never changes).
    async fn hub_uid(&self, hub: &Client) -> Result<String, String> {
        if let Some(uid) = self.hub_uid.lock().clone() {
            return Ok(uid);
        }
        let uid = kube_system_uid(hub).await?;
        if !uid.is_empty() {
            *self.hub_uid.lock() = Some(uid.clone());
        }
        Ok(uid)
    }
}

/// A cluster found to be the hub (`is_hub`) or not, remembered for its client.
fn known_entry(name: &str, client_id: usize, is_hub: bool, uid: String) -> Entry {
    if is_hub {
        info!(cluster = %name, "this joined cluster is the hub itself");
    }
    Entry::Known {
        client_id,
        is_hub,
        uid,
    }
}

/// A failed lookup (`message`), remembered with its backoff: failures with the same client
/// count on from the `previous` entry.
fn failed_entry(previous: Option<&Entry>, name: &str, client_id: usize, message: &str) -> Entry {
    let failures = match previous {
        Some(Entry::Failed {
            client_id: previous,
            failures,
            ..
        }) if *previous == client_id => failures.saturating_add(1),
        _ => 1,
    };
    let delay = identity_retry_delay(failures);
    warn!(
        cluster = %name,
        failures,
        retry_in_seconds = delay.as_secs(),
        reason = %message,
        "cannot tell whether this cluster is the hub; its namespaces are not deleted"
    );
    Entry::Failed {
        client_id,
        failures,
        retry_at: Instant::now() + delay,
        message: message.to_owned(),
    }
}

/// Says which joined clusters reach the same API server (the same `kube-system` UID).
fn warn_duplicates(uids: &BTreeMap<String, String>) {
    let duplicates = hubfed_core::hub::duplicate_clusters(uids);
    for (cluster, others) in &duplicates {
        warn!(cluster = %cluster, same_api_server = ?others,
            "joined clusters reach the same API server: nothing is written or deleted through them until one is unjoined");
    }
}

/// The UID of `kube-system` through `client`, or why it could not be read.
async fn kube_system_uid(client: &Client) -> Result<String, String> {
    let api: Api<Namespace> = Api::all(client.clone());
    match tokio::time::timeout(LOOKUP_TIMEOUT, api.get_metadata("kube-system")).await {
        Err(_) => Err(format!("no answer within {}s", LOOKUP_TIMEOUT.as_secs())),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(meta)) => Ok(meta.metadata.uid.unwrap_or_default()),
    }
}
