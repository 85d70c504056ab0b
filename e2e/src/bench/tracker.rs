//! What the members hold, from metadata-only watches of managed objects
//! (`kubefed.io/managed=true`) in every member: which revision of each benchmark object each
//! member shows, when it first appeared, and how long each template update took to reach its
//! last member.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::StreamExt;
use hubfed_api::names::MANAGED_LABEL;
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::runtime::watcher;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::workload::{KINDS, Kind, Workload, revision_of};

/// An update on its way: its revision, when the hub write was sent, members still missing it.
struct InFlight {
    rev: u32,
    sent: Instant,
    missing: usize,
}

#[derive(Default)]
pub struct State {
    /// `seen[cluster][object]`: the revision the member shows, `None` when absent.
    seen: Vec<Vec<Option<u32>>>,
    /// Pairs (object, cluster) present in a member.
    pub present: usize,
    pub first_arrival: Option<Instant>,
    pub last_arrival: Option<Instant>,
    in_flight: HashMap<usize, InFlight>,
    /// Hub write → last placed member shows the revision.
    pub latencies: Vec<Duration>,
    /// Watch events about benchmark objects outside initial lists: each is a member write.
    pub events: u64,
    /// Deletions of benchmark objects seen in members (expected: none).
    pub deletions: u64,
    /// Events that took a member back to an older revision (expected: none).
    pub regressions: u64,
    /// Events that moved a member object's `metadata.generation` (its spec changed).
    pub generation_changes: u64,
    /// `generation[cluster][object]` last seen.
    generation: Vec<Vec<i64>>,
    /// Watches (cluster × kind) whose initial list has completed.
    synced: usize,
}

impl State {
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

/// The shared view of all members.
pub struct Tracker {
    workload: Workload,
    clusters: usize,
    state: Mutex<State>,
    changed: Notify,
}

impl Tracker {
    pub fn new(workload: Workload, clusters: usize) -> Arc<Self> {
        let state = State {
            seen: vec![vec![None; workload.objects]; clusters],
            generation: vec![vec![0; workload.objects]; clusters],
            ..Default::default()
        };
        Arc::new(Self {
            workload,
            clusters,
            state: Mutex::new(state),
            changed: Notify::new(),
        })
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers an update of `object` to `rev`, sent now; call before sending the hub write.
    pub fn expect(&self, object: usize, rev: u32, sent: Instant) {
        let mut state = self.state();
        let missing = state
            .seen
            .iter()
            .filter(|per_cluster| per_cluster[object].is_none_or(|r| r < rev))
            .count();
        state
            .in_flight
            .insert(object, InFlight { rev, sent, missing });
    }

    /// Forgets an update whose hub write failed.
    pub fn cancel(&self, object: usize) {
        self.state().in_flight.remove(&object);
    }

    /// Waits until something changes or `timeout` passes.
    pub async fn changed(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.changed.notified()).await;
    }

    fn observe(
        &self,
        cluster: usize,
        kind: Kind,
        meta: &PartialObjectMeta<DynamicObject>,
        listed: bool,
    ) {
        let Some(name) = meta.metadata.name.as_deref() else {
            return;
        };
        let Some(index) = self
            .workload
            .index_of(kind, meta.metadata.namespace.as_deref(), name)
        else {
            return;
        };
        let rev = revision_of(
            meta.metadata.labels.as_ref(),
            meta.metadata.annotations.as_ref(),
        );
        let managed = meta
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(MANAGED_LABEL))
            .is_some_and(|v| v == "true");
        let now = Instant::now();
        let mut state = self.state();
        if !listed {
            state.events += 1;
        }
        let previous = state.seen[cluster][index];
        let current = if managed && meta.metadata.deletion_timestamp.is_none() {
            rev
        } else {
            None
        };
        state.seen[cluster][index] = current;
        let generation = meta.metadata.generation.unwrap_or(0);
        let previous_generation =
            std::mem::replace(&mut state.generation[cluster][index], generation);
        if !listed {
            if previous.is_some() && current.is_some() && current < previous {
                state.regressions += 1;
            }
            if previous_generation != 0 && previous_generation != generation {
                state.generation_changes += 1;
            }
        }
        match (previous, current) {
            (None, Some(_)) => {
                state.present += 1;
                state.first_arrival.get_or_insert(now);
                state.last_arrival = Some(now);
            }
            (Some(_), None) => state.present -= 1,
            _ => {}
        }
        if let Some(rev) = current
            && previous.is_none_or(|p| p < rev)
            && let Some(flight) = state.in_flight.get_mut(&index)
            && rev >= flight.rev
            && previous.is_none_or(|p| p < flight.rev)
        {
            flight.missing = flight.missing.saturating_sub(1);
            if flight.missing == 0 {
                let latency = now.duration_since(flight.sent);
                state.in_flight.remove(&index);
                state.latencies.push(latency);
            }
        }
        drop(state);
        self.changed.notify_waiters();
    }

    fn forget(&self, cluster: usize, kind: Kind, meta: &PartialObjectMeta<DynamicObject>) {
        let Some(name) = meta.metadata.name.as_deref() else {
            return;
        };
        if let Some(index) = self
            .workload
            .index_of(kind, meta.metadata.namespace.as_deref(), name)
        {
            let mut state = self.state();
            state.events += 1;
            state.deletions += 1;
            if state.seen[cluster][index].take().is_some() {
                state.present -= 1;
            }
        }
        self.changed.notify_waiters();
    }

    /// Starts one metadata-only watch per (member, kind) and waits until every initial list
    /// has completed, so later events are member writes seen as they happen.
    pub async fn watch_members(
        self: &Arc<Self>,
        members: &[kube::Client],
        stop: &CancellationToken,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        for (cluster, client) in members.iter().enumerate() {
            for kind in KINDS {
                // `Api<PartialObjectMeta<_>>` makes metadata-only requests.
                let api: Api<PartialObjectMeta<DynamicObject>> =
                    Api::all_with(client.clone(), &kind.target());
                let config = watcher::Config::default().labels(&format!("{MANAGED_LABEL}=true"));
                let this = Arc::clone(self);
                let stop = stop.clone();
                tokio::spawn(async move {
                    let stream = watcher::watcher(api, config);
                    let mut stream = std::pin::pin!(stream);
                    let mut initial = true;
                    loop {
                        let event = tokio::select! {
                            () = stop.cancelled() => break,
                            event = stream.next() => event,
                        };
                        match event {
                            Some(Ok(watcher::Event::InitApply(meta))) => {
                                this.observe(cluster, kind, &meta, true);
                            }
                            Some(Ok(watcher::Event::Apply(meta))) => {
                                this.observe(cluster, kind, &meta, false);
                            }
                            Some(Ok(watcher::Event::Delete(meta))) => {
                                this.forget(cluster, kind, &meta);
                            }
                            Some(Ok(watcher::Event::InitDone)) => {
                                if initial {
                                    initial = false;
                                    this.state().synced += 1;
                                    this.changed.notify_waiters();
                                }
                            }
                            Some(Ok(watcher::Event::Init)) => {}
                            Some(Err(e)) => {
                                super::progress(format_args!(
                                    "member{} {} watch error (retrying): {e}",
                                    cluster + 1,
                                    kind.name()
                                ));
                                tokio::time::sleep(Duration::from_secs(1)).await;
                            }
                            None => break,
                        }
                    }
                });
            }
        }
        let want = self.clusters * KINDS.len();
        let deadline = Instant::now() + timeout;
        loop {
            let synced = self.state().synced;
            if synced == want {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "only {synced} of {want} member watches started within {}s",
                timeout.as_secs()
            );
            self.changed(Duration::from_millis(200)).await;
        }
    }
}
