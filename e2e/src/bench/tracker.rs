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

/// An update on its way: its revision, when the hub write was sent, members still missing it
/// (all of them, the healthy ones and the slow ones).
struct InFlight {
    rev: u32,
    sent: Instant,
    /// Nothing of this update seen yet: neither the hub's watch event nor any member's copy.
    hub_seen: bool,
    first_seen: bool,
    missing: usize,
    missing_healthy: usize,
    missing_slow: usize,
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
    /// Hub write → a watch of the federated objects in the hub (as the controller's) gets
    /// the change (`generation` moved), and → the first placed member shows the revision:
    /// where an update's time goes ([`Self::latencies`] is the last member).
    pub hub_watch: Vec<Duration>,
    pub first_member: Vec<Duration>,
    /// `hub_generation[object]` last seen by the hub watch.
    hub_generation: Vec<i64>,
    /// With a slow member (`--slow-member-ms`): hub write → the last healthy member shows the
    /// revision, and → the last slow member shows it.
    pub latencies_healthy: Vec<Duration>,
    pub latencies_slow: Vec<Duration>,
    /// Pairs present in the healthy members, and when the last of them arrived.
    pub present_healthy: usize,
    pub last_arrival_healthy: Option<Instant>,
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
    /// Clusters `0..healthy` are healthy, the others slow.
    healthy: usize,
    state: Mutex<State>,
    changed: Notify,
}

impl Tracker {
    /// A tracker of `clusters` members whose clusters `healthy..clusters` are slow (none:
    /// `healthy == clusters`): latencies and arrivals are also recorded for the healthy ones
    /// alone and for the slow ones alone.
    pub fn with_healthy(workload: Workload, clusters: usize, healthy: usize) -> Arc<Self> {
        let state = State {
            seen: vec![vec![None; workload.objects]; clusters],
            generation: vec![vec![0; workload.objects]; clusters],
            hub_generation: vec![0; workload.objects],
            ..Default::default()
        };
        Arc::new(Self {
            workload,
            clusters,
            healthy: healthy.min(clusters),
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
        let behind: Vec<bool> = state
            .seen
            .iter()
            .map(|per_cluster| per_cluster[object].is_none_or(|r| r < rev))
            .collect();
        let missing_healthy = behind[..self.healthy].iter().filter(|b| **b).count();
        let missing_slow = behind[self.healthy..].iter().filter(|b| **b).count();
        state.in_flight.insert(
            object,
            InFlight {
                rev,
                sent,
                hub_seen: false,
                first_seen: false,
                missing: missing_healthy + missing_slow,
                missing_healthy,
                missing_slow,
            },
        );
    }

    /// Forgets an update whose hub write failed.
    pub fn cancel(&self, object: usize) {
        self.state().in_flight.remove(&object);
    }

    /// Waits until something changes or `timeout` passes.
    pub async fn changed(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.changed.notified()).await;
    }

    /// The benchmark object `meta` is a copy of (or, in the hub, the federated object of).
    fn index(&self, kind: Kind, meta: &PartialObjectMeta<DynamicObject>) -> Option<usize> {
        let name = meta.metadata.name.as_deref()?;
        self.workload
            .index_of(kind, meta.metadata.namespace.as_deref(), name)
    }

    fn observe(
        &self,
        cluster: usize,
        kind: Kind,
        meta: &PartialObjectMeta<DynamicObject>,
        listed: bool,
    ) {
        let Some(index) = self.index(kind, meta) else {
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
        let healthy = cluster < self.healthy;
        match (previous, current) {
            (None, Some(_)) => {
                state.present += 1;
                state.first_arrival.get_or_insert(now);
                state.last_arrival = Some(now);
                if healthy {
                    state.present_healthy += 1;
                    state.last_arrival_healthy = Some(now);
                }
            }
            (Some(_), None) => {
                state.present -= 1;
                if healthy {
                    state.present_healthy -= 1;
                }
            }
            _ => {}
        }
        if let Some(rev) = current
            && previous.is_none_or(|p| p < rev)
            && let Some(flight) = state.in_flight.get_mut(&index)
            && rev >= flight.rev
            && previous.is_none_or(|p| p < flight.rev)
        {
            flight.missing = flight.missing.saturating_sub(1);
            let latency = now.duration_since(flight.sent);
            let first = !std::mem::replace(&mut flight.first_seen, true);
            let (healthy_done, slow_done) = if healthy {
                flight.missing_healthy = flight.missing_healthy.saturating_sub(1);
                (flight.missing_healthy == 0, false)
            } else {
                flight.missing_slow = flight.missing_slow.saturating_sub(1);
                (false, flight.missing_slow == 0)
            };
            if flight.missing == 0 {
                state.in_flight.remove(&index);
                state.latencies.push(latency);
            }
            if first {
                state.first_member.push(latency);
            }
            if healthy_done {
                state.latencies_healthy.push(latency);
            }
            if slow_done {
                state.latencies_slow.push(latency);
            }
        }
        drop(state);
        self.changed.notify_waiters();
    }

    /// A hub watch event of federated object `meta`: an update in flight is seen by the hub's
    /// watchers when its `generation` moves (status writes leave it).
    fn observe_hub(&self, kind: Kind, meta: &PartialObjectMeta<DynamicObject>, listed: bool) {
        let Some(index) = self.index(kind, meta) else {
            return;
        };
        let generation = meta.metadata.generation.unwrap_or(0);
        let now = Instant::now();
        let mut state = self.state();
        let previous = std::mem::replace(&mut state.hub_generation[index], generation);
        if listed || generation <= previous {
            return;
        }
        if let Some(flight) = state.in_flight.get_mut(&index)
            && !std::mem::replace(&mut flight.hub_seen, true)
        {
            let latency = now.duration_since(flight.sent);
            state.hub_watch.push(latency);
        }
    }

    /// Starts one metadata-only watch per federated kind in the hub (the controller's are
    /// whole-object watches of the same objects) and waits until their initial lists are in.
    pub async fn watch_hub(
        self: &Arc<Self>,
        hub: &kube::Client,
        stop: &CancellationToken,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let (ready, mut listed) = tokio::sync::mpsc::channel(KINDS.len());
        for kind in KINDS {
            let api: Api<PartialObjectMeta<DynamicObject>> =
                Api::all_with(hub.clone(), &kind.federated());
            let (this, stop, ready) = (Arc::clone(self), stop.clone(), ready.clone());
            tokio::spawn(async move {
                let stream = watcher::watcher(api, watcher::Config::default());
                let mut stream = std::pin::pin!(stream);
                loop {
                    let event = tokio::select! {
                        () = stop.cancelled() => break,
                        event = stream.next() => event,
                    };
                    match event {
                        Some(Ok(watcher::Event::InitApply(meta))) => {
                            this.observe_hub(kind, &meta, true);
                        }
                        Some(Ok(watcher::Event::Apply(meta))) => {
                            this.observe_hub(kind, &meta, false);
                        }
                        Some(Ok(watcher::Event::InitDone)) => {
                            let _ = ready.try_send(());
                        }
                        Some(Ok(watcher::Event::Init | watcher::Event::Delete(_))) => {}
                        Some(Err(e)) => {
                            super::progress(format_args!(
                                "hub {} watch error (retrying): {e}",
                                kind.name()
                            ));
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                        None => break,
                    }
                }
            });
        }
        for _ in KINDS {
            tokio::time::timeout(timeout, listed.recv())
                .await
                .map_err(|_| {
                    anyhow::anyhow!("hub watches not started within {}s", timeout.as_secs())
                })?;
        }
        Ok(())
    }

    fn forget(&self, cluster: usize, kind: Kind, meta: &PartialObjectMeta<DynamicObject>) {
        if let Some(index) = self.index(kind, meta) {
            let mut state = self.state();
            state.events += 1;
            state.deletions += 1;
            if state.seen[cluster][index].take().is_some() {
                state.present -= 1;
                if cluster < self.healthy {
                    state.present_healthy -= 1;
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn meta(workload: &Workload, index: usize, rev: u32) -> PartialObjectMeta<DynamicObject> {
        let id = workload.id(index);
        PartialObjectMeta {
            types: None,
            metadata: ObjectMeta {
                name: Some(id.name),
                namespace: Some(id.namespace),
                labels: Some([(MANAGED_LABEL.to_owned(), "true".to_owned())].into()),
                annotations: Some(
                    [(
                        super::super::workload::REV_ANNOTATION.to_owned(),
                        rev.to_string(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            _phantom: std::marker::PhantomData,
        }
    }

    /// A workload of two objects in one namespace, and the kind of the first.
    fn two_objects() -> (Workload, Kind) {
        let workload = Workload {
            objects: 2,
            namespaces: 1,
        };
        let kind = workload.id(0).kind;
        (workload, kind)
    }

    #[test]
    fn latencies_split_between_healthy_and_slow_members() {
        let (workload, kind) = two_objects();
        // Three members, the third slow.
        let tracker = Tracker::with_healthy(workload.clone(), 3, 2);
        for cluster in 0..3 {
            tracker.observe(cluster, kind, &meta(&workload, 0, 0), true);
        }
        {
            let state = tracker.state();
            assert_eq!((state.present, state.present_healthy), (3, 2));
        }
        tracker.expect(0, 1, Instant::now());
        tracker.observe(0, kind, &meta(&workload, 0, 1), false);
        tracker.observe(2, kind, &meta(&workload, 0, 1), false);
        {
            let state = tracker.state();
            assert_eq!(state.latencies_slow.len(), 1);
            assert!(state.latencies_healthy.is_empty() && state.latencies.is_empty());
        }
        tracker.observe(1, kind, &meta(&workload, 0, 1), false);
        let state = tracker.state();
        assert_eq!(
            (
                state.latencies_healthy.len(),
                state.latencies_slow.len(),
                state.latencies.len(),
                state.in_flight()
            ),
            (1, 1, 1, 0)
        );
    }

    #[test]
    fn an_update_is_timed_at_the_hub_watch_and_at_its_first_and_last_member() {
        let (workload, kind) = two_objects();
        let tracker = Tracker::with_healthy(workload.clone(), 2, 2);
        let hub = |generation: i64| {
            let mut m = meta(&workload, 0, 0);
            m.metadata.generation = Some(generation);
            m
        };
        tracker.observe_hub(kind, &hub(1), true);
        for cluster in 0..2 {
            tracker.observe(cluster, kind, &meta(&workload, 0, 0), true);
        }
        tracker.expect(0, 1, Instant::now());
        // A status write (generation unchanged) is not the update.
        tracker.observe_hub(kind, &hub(1), false);
        assert!(tracker.state().hub_watch.is_empty());
        tracker.observe_hub(kind, &hub(2), false);
        tracker.observe_hub(kind, &hub(3), false);
        tracker.observe(1, kind, &meta(&workload, 0, 1), false);
        {
            let state = tracker.state();
            assert_eq!(state.hub_watch.len(), 1, "once per update");
            assert_eq!((state.first_member.len(), state.latencies.len()), (1, 0));
        }
        tracker.observe(0, kind, &meta(&workload, 0, 1), false);
        let state = tracker.state();
        assert_eq!((state.first_member.len(), state.latencies.len()), (1, 1));
        assert!(state.first_member[0] <= state.latencies[0]);
    }
}
