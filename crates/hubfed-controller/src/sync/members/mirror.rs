//! The maps a member watch keeps equal to what it selects ([`Mirror`]), their keys, and how
//! a watch event changes them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use kube::runtime::watcher;

use super::{ListFailure, MemberWatches};
use crate::sync::list_slots::ListProgress;

/// A map kept equal to what one member watch selects, by key ([`MirrorKey`]); `None` until
/// the watch's first list has completed.
pub(super) type Mirror<K, V> = parking_lot::RwLock<Option<HashMap<K, V>>>;

/// How a mirror keys the member objects it keeps.
pub(super) trait MirrorKey: std::hash::Hash + Eq + Clone + Send + Sync + 'static {
    fn of(watches: &MemberWatches, name: &str, namespace: Option<&str>) -> Self;
    /// Queues the federated object of the key, when the key names one.
    fn queue(&self, watches: &MemberWatches);
    /// A watch event added or changed the object of the key in `cluster`: garbage collection
    /// looks at it, when the key names a managed copy.
    fn copy_changed(&self, watches: &MemberWatches, cluster: &str);
}

/// The managed objects' key: `namespace/name`, or `name` for cluster-scoped types.
impl MirrorKey for Box<str> {
    fn of(watches: &MemberWatches, name: &str, namespace: Option<&str>) -> Self {
        watches.key(name, namespace).into()
    }

    fn queue(&self, watches: &MemberWatches) {
        watches.queue_key(self);
    }

    fn copy_changed(&self, watches: &MemberWatches, cluster: &str) {
        watches.note_changed_copy(cluster, self);
    }
}

/// The unmanaged objects' key: a keyed hash of `namespace/name` (the keys are random per
/// process, so names cannot be chosen to collide). It cannot be turned back into a name.
#[derive(Clone, Copy, Hash, PartialEq, Eq)]
pub(super) struct NameHash(pub(super) u64);

impl MirrorKey for NameHash {
    fn of(watches: &MemberWatches, name: &str, namespace: Option<&str>) -> Self {
        watches.name_hash(name, namespace)
    }

    fn queue(&self, _: &MemberWatches) {}

    fn copy_changed(&self, _: &MemberWatches, _: &str) {}
}

/// One of a cluster's two caches, as [`MemberWatches::mirror`] or
/// [`MemberWatches::mirror_both`] fills it.
pub(super) struct MirrorTarget<'a, M, V> {
    pub(super) map: &'a Mirror<M, V>,
    /// Given for the managed objects' mirror: why its first list failed.
    pub(super) failure: Option<&'a parking_lot::Mutex<Option<ListFailure>>>,
    /// Set when its watch fails, cleared by its next complete list.
    pub(super) gap: &'a AtomicBool,
    /// Given for the managed objects' mirror: its lists' progress.
    pub(super) progress: Option<&'a ListProgress>,
    /// `managed` or `unmanaged`: the `cache` label of its lists' metric.
    pub(super) name: &'static str,
}

impl<M, V> MirrorTarget<'_, M, V> {
    /// Its watch failed with `error`: a gap until its next complete list. Whether that was its
    /// first list failing, when it keeps why (`failure` given).
    pub(super) fn watch_failed(&self, error: &watcher::Error) -> bool {
        self.gap.store(true, Ordering::Relaxed);
        let first_list = self.map.read().is_none();
        match (first_list, self.failure) {
            (true, Some(failure)) => {
                *failure.lock() = Some(list_failure(error));
                true
            }
            _ => false,
        }
    }
}

/// Sets `key` to `value` in a listed mirror; whether that changed it (an unlisted mirror is
/// left alone).
pub(super) fn update<K: std::hash::Hash + Eq, V: PartialEq>(
    map: &Mirror<K, V>,
    key: K,
    value: V,
) -> bool {
    let mut guard = map.write();
    match guard.as_mut() {
        Some(map) if map.get(&key) != Some(&value) => {
            map.insert(key, value);
            true
        }
        _ => false,
    }
}

/// Removes `key` from a listed mirror; whether it was there.
pub(super) fn remove<K: std::hash::Hash + Eq, V>(map: &Mirror<K, V>, key: &K) -> bool {
    map.write()
        .as_mut()
        .is_some_and(|map| map.remove(key).is_some())
}

pub(super) fn list_failure(error: &watcher::Error) -> ListFailure {
    let not_served = matches!(
        error,
        watcher::Error::InitialListFailed(kube::Error::Api(status)) if status.code == 404
    );
    ListFailure {
        not_served,
        message: error.to_string(),
    }
}
