//! What a sync controller remembers of each federated object between reconciles.
//!
//! One entry per object, behind one lock, changed only through [`ObjectIndex::update`]; an
//! entry left empty goes at once, and [`ObjectIndex::retain`] forgets the objects the hub
//! no longer holds in one pass. Memory only: every decision can be derived again without it
//! (a restart loses nothing but work saved).

use std::collections::HashMap;
use std::time::Instant;

use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;
use parking_lot::Mutex;

use hubfed_core::plan::FederatedObject;

use super::TypeContext;
use super::exec_env::DriftMemory;

/// The key of a federated object in the index.
pub type ObjectKey = ObjectRef<DynamicObject>;

/// What is remembered of one federated object.
#[derive(Default)]
pub struct ObjectState {
    /// The (Cluster)PropagatedVersion status last written, until its store shows it.
    pub written_versions: Option<WrittenVersions>,
    /// The object's status last written, until the federated objects' store shows it.
    pub written_status: Option<WrittenStatus>,
    /// Its last attempts failed: its backoff.
    pub failing: Option<Failing>,
    /// Since when its status has waited for pending clusters.
    pub pending_since: Option<Instant>,
    /// When its status was last written, kept only while collecting remote status.
    pub status_written_at: Option<Instant>,
    /// The drift last reported per cluster, so the same drift seen again is not news.
    pub drift_reported: Vec<(Box<str>, String)>,
}

impl ObjectState {
    fn is_empty(&self) -> bool {
        self.written_versions.is_none()
            && self.written_status.is_none()
            && self.failing.is_none()
            && self.pending_since.is_none()
            && self.status_written_at.is_none()
            && self.drift_reported.is_empty()
    }

    /// Records `what` as the drift last reported in `cluster`; whether it differs from the
    /// one reported before.
    pub fn report_drift(&mut self, cluster: &str, what: &str) -> bool {
        match self
            .drift_reported
            .iter_mut()
            .find(|(c, _)| &**c == cluster)
        {
            Some((_, last)) if last == what => false,
            Some((_, last)) => {
                what.clone_into(last);
                true
            }
            None => {
                self.drift_reported.push((cluster.into(), what.to_owned()));
                true
            }
        }
    }
}

/// An object whose last attempts failed.
#[derive(Clone, Copy, Debug)]
pub struct Failing {
    /// Failed attempts in a row.
    pub failures: u32,
    /// The generation they were made for.
    pub generation: i64,
    /// When the last one ended.
    pub at: Instant,
    /// The cluster registry's version then (`MemberClientPool::version`): a change ends the
    /// backoff.
    pub registry: u64,
    /// A hash of the object's labels and annotations then: a change ends the backoff.
    pub metadata: u64,
}

/// Every federated object's [`ObjectState`], by object.
#[derive(Default)]
pub struct ObjectIndex(Mutex<Entries>);

#[derive(Default)]
struct Entries {
    by_object: HashMap<ObjectKey, ObjectState>,
    /// How many entries have `failing` set, kept as they change.
    failing: usize,
}

impl ObjectIndex {
    /// Reads `object`'s state (`None` when nothing is remembered of it).
    pub fn read<R>(&self, object: &ObjectKey, read: impl FnOnce(Option<&ObjectState>) -> R) -> R {
        read(self.0.lock().by_object.get(object))
    }

    /// Changes `object`'s state; an entry left empty is removed.
    pub fn update<R>(&self, object: &ObjectKey, change: impl FnOnce(&mut ObjectState) -> R) -> R {
        let mut entries = self.0.lock();
        let Entries { by_object, failing } = &mut *entries;
        let (result, was_failing, is_failing, empty) = match by_object.get_mut(object) {
            Some(state) => {
                let was = state.failing.is_some();
                let result = change(state);
                (result, was, state.failing.is_some(), state.is_empty())
            }
            None => {
                let mut state = ObjectState::default();
                let result = change(&mut state);
                let (is, empty) = (state.failing.is_some(), state.is_empty());
                if !empty {
                    by_object.insert(object.clone(), state);
                }
                (result, false, is, false)
            }
        };
        if empty {
            by_object.remove(object);
        }
        *failing = *failing + usize::from(is_failing) - usize::from(was_failing);
        result
    }

    /// How many objects are in backoff.
    pub fn failing(&self) -> usize {
        self.0.lock().failing
    }

    /// The objects whose state `select` picks.
    pub fn select(&self, mut select: impl FnMut(&ObjectState) -> bool) -> Vec<ObjectKey> {
        let entries = self.0.lock();
        entries
            .by_object
            .iter()
            .filter(|(_, state)| select(state))
            .map(|(object, _)| object.clone())
            .collect()
    }

    /// Keeps the objects `keep` accepts (it may change their state), forgets the others, and
    /// gives back the room they took ([`shrink_when_sparse`]).
    pub fn retain(&self, mut keep: impl FnMut(&ObjectKey, &mut ObjectState) -> bool) {
        let mut entries = self.0.lock();
        let Entries { by_object, failing } = &mut *entries;
        by_object.retain(|object, state| keep(object, state) && !state.is_empty());
        *failing = by_object.values().filter(|s| s.failing.is_some()).count();
        shrink_when_sparse(by_object);
    }

    /// How many objects have an entry.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().by_object.len()
    }
}

/// The push controller's memory of drift, in each object's entry.
impl DriftMemory for TypeContext {
    fn report(&self, object: &FederatedObject, cluster: &str, what: &str) -> bool {
        let key = ObjectRef::new_with(&object.name, self.federated.clone());
        let key = match &object.namespace {
            Some(ns) => key.within(ns),
            None => key,
        };
        self.objects
            .update(&key, |state| state.report_drift(cluster, what))
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

/// A federated object's status written by this controller, kept until the federated objects'
/// store shows that write or a later one (`hub_writes::write_status`).
pub struct WrittenStatus {
    /// The resourceVersion the status write returned.
    pub resource_version: String,
    pub status: hubfed_api::federated::FederatedStatus,
}

/// Gives a map's spare room back once it is mostly empty. A `HashMap` never shrinks by itself,
/// so one a burst filled kept its table for good: the writes left running during a cold start
/// ([`super::detach`], one entry per copy at its height) held 3.3 MB of empty table at rest at
/// 10 × 2,000, heap a warm restart never allocates (docs/benchmarks.md). Asks for room for
/// twice the entries: the table is rebuilt only when half its buckets would hold that (the
/// entries fill less than about a fifth of it), else nothing happens — so a map that fills and
/// empties again costs amortized O(1) per entry. (`capacity()` cannot tell: removed entries
/// leave tombstones it does not count as room.)
pub(crate) fn shrink_when_sparse<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V>) {
    /// Room kept however few the entries.
    const KEEP: usize = 64;
    map.shrink_to((map.len() * 2).max(KEEP));
}

/// Keeps the entries of the map behind `map` that `keep` accepts, gives back the room of
/// the others ([`shrink_when_sparse`]) and returns how many are left.
pub(crate) fn prune<K: Eq + std::hash::Hash, V>(
    map: &parking_lot::Mutex<HashMap<K, V>>,
    mut keep: impl FnMut(&K, &V) -> bool,
) -> usize {
    let mut map = map.lock();
    map.retain(|key, value| keep(key, value));
    shrink_when_sparse(&mut map);
    map.len()
}

/// Whether a cached copy at `cached` predates the write that returned `written`. Kubernetes
/// resourceVersions are comparable decimal numbers (KEP-5504); anything else counts as
/// caught up, which at worst costs one redundant write.
pub fn store_is_behind(cached: Option<&str>, written: &str) -> bool {
    let Ok(written) = written.parse::<u64>() else {
        return false;
    };
    match cached {
        None => true,
        Some(cached) => cached.parse::<u64>().is_ok_and(|cached| cached < written),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::discovery::ApiResource;

    fn key(name: &str) -> ObjectKey {
        let resource = ApiResource {
            group: "types.kubefed.io".into(),
            version: "v1beta1".into(),
            api_version: "types.kubefed.io/v1beta1".into(),
            kind: "FederatedConfigMap".into(),
            plural: "federatedconfigmaps".into(),
        };
        ObjectRef::new_with(name, resource).within("ns")
    }

    fn failing() -> Failing {
        Failing {
            failures: 1,
            generation: 1,
            at: Instant::now(),
            registry: 0,
            metadata: 0,
        }
    }

    #[test]
    fn an_entry_lives_while_it_holds_something() {
        let index = ObjectIndex::default();
        index.update(&key("a"), |_| ());
        assert_eq!(index.len(), 0, "reading through update creates nothing");
        index.update(&key("a"), |s| s.pending_since = Some(Instant::now()));
        assert_eq!(index.len(), 1);
        assert!(index.read(&key("a"), |s| s.is_some_and(|s| s.pending_since.is_some())));
        index.update(&key("a"), |s| s.pending_since = None);
        assert_eq!(index.len(), 0, "an emptied entry goes");
        assert!(index.read(&key("a"), |s| s.is_none()));
    }

    #[test]
    fn the_backoff_count_follows_every_change() {
        let index = ObjectIndex::default();
        index.update(&key("a"), |s| s.failing = Some(failing()));
        index.update(&key("b"), |s| s.failing = Some(failing()));
        index.update(&key("b"), |s| s.failing = Some(failing()));
        assert_eq!(
            index.failing(),
            2,
            "a second failure of b is not a second object"
        );
        index.update(&key("a"), |s| s.failing = None);
        assert_eq!(index.failing(), 1);
        index.retain(|object, _| object.name != "b");
        assert_eq!(index.failing(), 0, "a forgotten object leaves the backoff");
        assert_eq!(index.len(), 0);
    }

    #[test]
    fn retain_forgets_gone_objects_and_emptied_entries() {
        let index = ObjectIndex::default();
        for name in ["kept", "gone", "emptied"] {
            index.update(&key(name), |s| s.status_written_at = Some(Instant::now()));
        }
        index.retain(|object, state| {
            if object.name == "emptied" {
                state.status_written_at = None;
            }
            object.name != "gone"
        });
        assert_eq!(index.select(|_| true), vec![key("kept")]);
    }

    #[test]
    fn the_same_drift_is_news_once_per_cluster() {
        let mut state = ObjectState::default();
        assert!(state.report_drift("member1", "Reverted [kubectl] [spec]"));
        assert!(!state.report_drift("member1", "Reverted [kubectl] [spec]"));
        assert!(state.report_drift("member2", "Reverted [kubectl] [spec]"));
        assert!(state.report_drift("member1", "Reported [kubectl] [spec]"));
        assert!(!state.report_drift("member1", "Reported [kubectl] [spec]"));
    }

    #[test]
    fn select_picks_by_state() {
        let index = ObjectIndex::default();
        index.update(&key("waiting"), |s| s.pending_since = Some(Instant::now()));
        index.update(&key("failing"), |s| s.failing = Some(failing()));
        assert_eq!(
            index.select(|s| s.pending_since.is_some()),
            vec![key("waiting")]
        );
    }

    /// A map a burst filled gives its table back once nearly emptied; one still half full
    /// keeps it, and an empty one keeps a small table.
    #[test]
    fn a_sparse_map_gives_its_room_back() {
        let mut map: HashMap<u32, [u8; 200]> = (0..10_000).map(|i| (i, [0; 200])).collect();
        map.retain(|i, _| *i < 5_000);
        let half = map.capacity();
        shrink_when_sparse(&mut map);
        assert_eq!(map.capacity(), half, "half full: the table is kept");
        map.retain(|i, _| *i < 10);
        shrink_when_sparse(&mut map);
        assert!(
            map.capacity() < 200,
            "capacity {} for 10 entries",
            map.capacity()
        );
        assert_eq!(map.len(), 10);
        assert!(map.contains_key(&9));
        let locked = parking_lot::Mutex::new(map);
        assert_eq!(
            prune(&locked, |i, _| i % 2 == 0),
            5,
            "prune keeps what it is told to"
        );
        let mut map = locked.into_inner();
        assert!(map.contains_key(&8) && !map.contains_key(&9));
        map.clear();
        shrink_when_sparse(&mut map);
        assert!(map.capacity() >= 64, "a small table is kept");
        map.extend((0..1_000).map(|i| (i, [0; 200])));
        assert_eq!(map.len(), 1_000, "grows again");
    }
}
