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

use super::exec_env::DriftMemory;
use super::memory::shrink_when_sparse;
use super::{TypeContext, WrittenStatus, WrittenVersions};

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
}
