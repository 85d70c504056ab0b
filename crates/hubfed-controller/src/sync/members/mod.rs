//! Watches of member clusters, per (federated type, cluster) one metadata watch of all the
//! type's objects, or — for types whose copies' status is read — one of the managed copies'
//! whole objects and one of the others' metadata: started when a cluster is
//! Ready, kept while it is not Ready as long as they work (a health check that timed out on a
//! busy API server costs no re-list), stopped when they failed and it is not Ready, when it
//! is unjoined, or when its client changes.
//!
//! Managed objects (`kubefed.io/managed=true`): only metadata is watched, and only what
//! decisions need is kept — the object version, deletion state, labels and annotations, in
//! compact form (a few hundred bytes an object, against a couple of KiB for a cached
//! `ObjectMeta` keyed by an `ObjectRef`). Each event queues the federated object the member
//! object belongs to, and one that adds or changes a copy notes it for garbage collection
//! ([`super::gc`]), which removes or unlabels at once a copy whose federated object is gone.
//!
//! Other objects of the type: only a 64-bit keyed hash of each name is kept (and whether the
//! object is labeled `kubefed.io/managed=false`) — 16 bytes a slot, 19 to 39 bytes an object
//! with the map's spare room, however long the name — so that creating a member object needs
//! no GET to find out whether an unmanaged object of that name is in the way (adoption,
//! `AlreadyExists`). A hash that matches by chance only costs that GET. An unmanaged object
//! that appears, changes its `managed` label or goes away queues the federated object of its
//! name; one found gone by a re-list after a watch gap cannot be named and is seen by the
//! object's next periodic look ([`hubfed_core::conclude::RESYNC`]).

mod cached;
mod mirror;
mod packed;
mod watch;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hubfed_core::desired::TargetType;
use hubfed_core::plan::MemberObject;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DynamicObject, PartialObjectMeta};
use kube::discovery::ApiResource;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::sync::list_slots::ListProgress;
use cached::{Cached, managed_copy};
use mirror::{Mirror, NameHash};

pub type MemberMeta = PartialObjectMeta<DynamicObject>;

impl MemberCache {
    /// Neither watch failed since its last complete list.
    fn unbroken(&self) -> bool {
        self.gaps.iter().all(|gap| !gap.load(Ordering::Relaxed))
    }
}

/// One member cluster's caches of the type's objects.
pub struct MemberCache {
    /// Managed objects.
    objects: Mirror<Box<str>, Cached>,
    /// The type's unmanaged objects: whether each is labeled `kubefed.io/managed=false`.
    unmanaged: Mirror<NameHash, bool>,
    /// Why the managed objects' first list failed, until it succeeds.
    list_failure: parking_lot::Mutex<Option<ListFailure>>,
    /// Per mirror (managed, unmanaged): its watch failed since its last complete list. A
    /// cluster that turns not Ready keeps its watches while neither failed: they still follow
    /// the cluster, and a health check that timed out on a busy API server then costs no
    /// re-list of every object when it is Ready again.
    gaps: [AtomicBool; 2],
    /// When the managed objects' lists began or last got an object.
    progress: ListProgress,
    client_id: usize,
    stop: CancellationToken,
}

/// The member caches of one federated type.
pub struct MemberWatches {
    shared: Arc<Shared>,
    target_resource: ApiResource,
    target: TargetType,
    federated: ApiResource,
    trigger: UnboundedSender<ObjectRef<DynamicObject>>,
    caches: parking_lot::RwLock<HashMap<String, Arc<MemberCache>>>,
    /// Bumped whenever a cache of managed objects completes a (re)list: garbage collection
    /// looks at the cluster then.
    relisted: tokio::sync::watch::Sender<u64>,
    /// Federated objects a reconcile could not carry to clusters whose caches' first lists are
    /// under way or wait their turn, with those clusters: queued once the last of them listed.
    awaiting_lists: parking_lot::Mutex<HashMap<ObjectRef<DynamicObject>, HashSet<String>>>,
    /// Managed copies a watch event added or changed, for garbage collection to look at.
    changed_copies: parking_lot::Mutex<ChangedCopies>,
    /// Notified when a copy is added to `changed_copies`.
    copies_changed: tokio::sync::Notify,
    /// The copies' status is collected (remote status): whole objects are watched.
    collect_status: bool,
    /// Keys the hashes of unmanaged objects' names.
    hasher: std::hash::RandomState,
}

/// How many changed copies [`MemberWatches`] notes one by one; beyond that, garbage collection
/// looks at every managed copy instead.
const CHANGED_COPIES_LIMIT: usize = 4096;

/// Managed copies a watch event added or changed since garbage collection last looked.
#[derive(Default)]
struct ChangedCopies {
    /// `(cluster, cache key)`.
    keys: HashSet<(String, Box<str>)>,
    /// More than [`CHANGED_COPIES_LIMIT`] were noted: every copy is to be looked at.
    overflowed: bool,
}

impl ChangedCopies {
    /// Notes `key` in `cluster`, or that every copy is to be looked at once too many are.
    fn note(&mut self, cluster: &str, key: &str) {
        if self.overflowed {
            return;
        }
        if self.keys.len() < CHANGED_COPIES_LIMIT {
            self.keys.insert((cluster.to_owned(), key.into()));
        } else {
            self.keys = HashSet::new();
            self.overflowed = true;
        }
    }
}

/// A managed copy, as garbage collection sees it.
pub struct ManagedCopy {
    pub name: String,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    /// Its [`hubfed_api::names::OWNER_ANNOTATION`].
    pub owner: Option<String>,
}

/// Why a member cache's first list failed.
#[derive(Clone, Debug)]
struct ListFailure {
    /// The API server does not serve the type (404): the cluster holds no object of it.
    not_served: bool,
    message: String,
}

/// What the reconciler sees of one cluster's cache.
pub enum CacheView {
    /// No watch (cluster not ready or no client).
    Unavailable,
    /// The initial list has not completed: the watch started this long ago, its list began
    /// (took its list slot) or last got an object this long ago (`None` while it waits for its
    /// slot), and its last attempt failed with this message, if it did.
    Syncing(Duration, Option<Duration>, Option<String>),
    /// The cluster does not serve the type.
    NotServed,
    /// The managed object, if the cluster has one.
    Ready(Option<MemberObject>),
}

/// What the cache of unmanaged names knows of one name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmanaged {
    /// Not known (no watch, or its first list has not completed): look.
    Unknown,
    /// No unmanaged object of that name.
    Absent,
    /// An unmanaged object of that name exists.
    Present,
}

impl MemberWatches {
    pub fn new(
        shared: Arc<Shared>,
        target_resource: ApiResource,
        target: TargetType,
        federated: ApiResource,
        trigger: UnboundedSender<ObjectRef<DynamicObject>>,
        collect_status: bool,
    ) -> Arc<Self> {
        Arc::new(Self {
            shared,
            target_resource,
            target,
            federated,
            trigger,
            caches: parking_lot::RwLock::new(HashMap::new()),
            relisted: tokio::sync::watch::Sender::new(0),
            awaiting_lists: parking_lot::Mutex::new(HashMap::new()),
            changed_copies: parking_lot::Mutex::new(ChangedCopies::default()),
            copies_changed: tokio::sync::Notify::new(),
            collect_status,
            hasher: std::hash::RandomState::new(),
        })
    }

    /// What the cache of `cluster` holds of the managed object `name` in `namespace`.
    pub fn view(&self, cluster: &str, name: &str, namespace: Option<&str>) -> CacheView {
        let caches = self.caches.read();
        let Some(cache) = caches.get(cluster) else {
            return CacheView::Unavailable;
        };
        let objects = cache.objects.read();
        match objects.as_ref() {
            None => {
                let failure = cache.list_failure.lock();
                match failure.as_ref() {
                    Some(f) if f.not_served => CacheView::NotServed,
                    failure => CacheView::Syncing(
                        cache.progress.started.elapsed(),
                        cache.progress.quiet_for(),
                        failure.map(|f| f.message.clone()),
                    ),
                }
            }
            Some(objects) => CacheView::Ready(
                objects
                    .get(self.key(name, namespace).as_str())
                    .map(Cached::observation),
            ),
        }
    }

    /// The cache key of a member object: `namespace/name` for namespaced types, else `name`.
    fn key(&self, name: &str, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) if self.target.namespaced => format!("{ns}/{name}"),
            _ => name.to_owned(),
        }
    }

    /// The hash an unmanaged object named `name` is kept under.
    fn name_hash(&self, name: &str, namespace: Option<&str>) -> NameHash {
        let namespace = namespace.filter(|_| self.target.namespaced);
        NameHash(std::hash::BuildHasher::hash_one(
            &self.hasher,
            (namespace, name),
        ))
    }

    /// Whether an unmanaged object named `name` exists in `cluster`.
    pub fn unmanaged(&self, cluster: &str, name: &str, namespace: Option<&str>) -> Unmanaged {
        let caches = self.caches.read();
        let Some(cache) = caches.get(cluster) else {
            return Unmanaged::Unknown;
        };
        let names = cache.unmanaged.read();
        match names.as_ref() {
            None => Unmanaged::Unknown,
            Some(names) => {
                if names.contains_key(&self.name_hash(name, namespace)) {
                    Unmanaged::Present
                } else {
                    Unmanaged::Absent
                }
            }
        }
    }

    /// Notified after every (re)list of a cluster's managed objects.
    pub fn relisted(&self) -> tokio::sync::watch::Receiver<u64> {
        self.relisted.subscribe()
    }

    /// The managed copies in `cluster`, once its cache has listed.
    pub fn managed_copies(&self, cluster: &str) -> Option<Vec<ManagedCopy>> {
        let caches = self.caches.read();
        let objects = caches.get(cluster)?.objects.read();
        let copies = objects.as_ref()?.iter();
        Some(
            copies
                .map(|(key, cached)| managed_copy(key, cached))
                .collect(),
        )
    }

    /// Notes that a watch event added or changed the managed copy `key` in `cluster`.
    fn note_changed_copy(&self, cluster: &str, key: &str) {
        self.changed_copies.lock().note(cluster, key);
        self.copies_changed.notify_one();
    }

    /// Waits until a watch event added or changed a managed copy since the last
    /// [`Self::take_changed_copies`].
    pub async fn copies_changed(&self) {
        self.copies_changed.notified().await;
    }

    /// The managed copies watch events added or changed since the last call, by cluster, as
    /// the caches hold them now; every managed copy when more changed than were noted one by
    /// one. A copy gone since, or being deleted, is left out: its deletion is under way.
    pub fn take_changed_copies(&self) -> Vec<(String, ManagedCopy)> {
        let changed = std::mem::take(&mut *self.changed_copies.lock());
        let caches = self.caches.read();
        let mut copies = Vec::new();
        if changed.overflowed {
            for (cluster, cache) in caches.iter() {
                let objects = cache.objects.read();
                let all = objects.iter().flatten().filter(|(_, c)| !c.terminating);
                copies
                    .extend(all.map(|(key, cached)| (cluster.clone(), managed_copy(key, cached))));
            }
            return copies;
        }
        for (cluster, key) in changed.keys {
            let Some(cache) = caches.get(&cluster) else {
                continue;
            };
            let objects = cache.objects.read();
            let copy = objects.as_ref().and_then(|objects| objects.get(&key));
            if let Some(cached) = copy.filter(|c| !c.terminating) {
                let copy = managed_copy(&key, cached);
                drop(objects);
                copies.push((cluster, copy));
            }
        }
        copies
    }

    /// Number of cached managed objects per cluster.
    pub fn counts(&self) -> Vec<(String, usize)> {
        self.per_cluster(|cache| {
            let objects = cache.objects.read();
            Some(objects.as_ref().map_or(0, HashMap::len))
        })
    }

    /// Number of unmanaged objects per cluster, once listed.
    pub fn unmanaged_counts(&self) -> Vec<(String, usize)> {
        self.per_cluster(|cache| {
            let names = cache.unmanaged.read();
            Some(names.as_ref()?.len())
        })
    }

    /// `count` of each cluster's cache, for the clusters it answers for.
    fn per_cluster(&self, count: impl Fn(&MemberCache) -> Option<usize>) -> Vec<(String, usize)> {
        let caches = self.caches.read();
        caches
            .iter()
            .filter_map(|(name, cache)| Some((name.clone(), count(cache)?)))
            .collect()
    }

    /// Queues the federated object of a cache key.
    fn queue_key(&self, key: &str) {
        match key.split_once('/') {
            Some((namespace, name)) => self.queue(name, Some(namespace)),
            None => self.queue(key, None),
        }
    }

    /// Queues the federated object a member object belongs to.
    fn queue_owner(&self, meta: &ObjectMeta) {
        if let Some(name) = meta.name.as_deref() {
            self.queue(name, meta.namespace.as_deref());
        }
    }

    /// `object` waits for the first lists of `clusters`' caches (none: it waits for none):
    /// queued once the last of them completed — one look, not one per cluster listed.
    pub fn await_first_lists<'a>(
        &self,
        object: &ObjectRef<DynamicObject>,
        clusters: impl Iterator<Item = &'a str>,
    ) {
        let clusters: HashSet<String> = clusters.map(str::to_owned).collect();
        let mut awaiting = self.awaiting_lists.lock();
        if clusters.is_empty() {
            awaiting.remove(object);
        } else {
            awaiting.insert(object.clone(), clusters);
        }
    }

    /// `cluster`'s managed objects were listed, or its watch stopped: the objects that waited
    /// for it alone are queued.
    fn wake_awaiting(&self, cluster: &str) {
        let mut ready = Vec::new();
        self.awaiting_lists.lock().retain(|object, clusters| {
            clusters.remove(cluster);
            let waits = !clusters.is_empty();
            if !waits {
                ready.push(object.clone());
            }
            waits
        });
        for object in ready {
            self.queue_federated(object);
        }
    }

    /// Queues `object`, a federated object of this type.
    pub fn queue_federated(&self, object: ObjectRef<DynamicObject>) {
        super::queue(&self.trigger, object, &self.federated.kind.to_lowercase());
    }

    /// Queues the federated object of a member object's name and namespace.
    fn queue(&self, name: &str, namespace: Option<&str>) {
        let owner = ObjectRef::new_with(name, self.federated.clone());
        let owner = if self.target.is_namespace() {
            // FederatedNamespace `<ns>/<ns>`.
            owner.within(name)
        } else {
            match namespace {
                Some(ns) => owner.within(ns),
                None => owner,
            }
        };
        super::queue(&self.trigger, owner, &self.federated.kind.to_lowercase());
    }
}

#[cfg(test)]
mod tests {
    use super::{CHANGED_COPIES_LIMIT, ChangedCopies};

    #[test]
    fn changed_copies_are_noted_once_each_and_bounded() {
        let mut changed = ChangedCopies::default();
        changed.note("member1", "ns/a");
        changed.note("member1", "ns/a");
        changed.note("member2", "ns/a");
        assert_eq!(changed.keys.len(), 2);
        assert!(!changed.overflowed);
        for i in 0..CHANGED_COPIES_LIMIT {
            changed.note("member1", &format!("ns/{i}"));
        }
        // Past the limit, the keys give way to one look at every copy.
        assert!(changed.overflowed);
        assert!(changed.keys.is_empty());
        changed.note("member1", "ns/b");
        assert!(changed.keys.is_empty());
    }
}
