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

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hubfed_api::names::MANAGED_LABEL;
use hubfed_core::desired::TargetType;
use hubfed_core::plan::MemberObject;
use hubfed_core::readiness::{Readiness, needs_status, readiness};
use hubfed_core::version::object_version;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::discovery::ApiResource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::Shared;
use super::list_slots::{ListProgress, ListTurn};

pub type MemberMeta = PartialObjectMeta<DynamicObject>;

/// What is kept of one managed member object: its strings in one allocation ([`Packed`]:
/// version, uid, why it is not ready, then label and annotation pairs), 32 bytes beside it.
#[derive(PartialEq, Eq)]
struct Cached {
    strings: Packed,
    /// The number of label pairs; the annotation pairs follow them to the end.
    labels: u32,
    terminating: bool,
    /// [`hubfed_core::readiness`]; the reason is the third string.
    ready: bool,
    /// The copy's `.status`, kept only when the type's status is collected.
    status: Option<Box<serde_json::Value>>,
}

/// Strings in one allocation, each as its byte length (LEB128) then its bytes: one
/// allocation a cached copy instead of one per label, annotation and field.
#[derive(PartialEq, Eq)]
struct Packed(Box<[u8]>);

impl Packed {
    fn new<'a>(strings: impl IntoIterator<Item = &'a str>) -> Self {
        let mut bytes = Vec::new();
        for string in strings {
            let mut len = string.len();
            loop {
                let low = (len & 0x7f) as u8;
                len >>= 7;
                if len == 0 {
                    bytes.push(low);
                    break;
                }
                bytes.push(low | 0x80);
            }
            bytes.extend_from_slice(string.as_bytes());
        }
        Self(bytes.into_boxed_slice())
    }

    /// The strings, in order.
    fn iter(&self) -> impl Iterator<Item = &str> {
        let mut rest: &[u8] = &self.0;
        std::iter::from_fn(move || {
            let mut len = 0usize;
            let mut shift = 0;
            loop {
                let (&byte, tail) = rest.split_first()?;
                rest = tail;
                len |= usize::from(byte & 0x7f) << shift;
                shift += 7;
                if byte & 0x80 == 0 {
                    break;
                }
            }
            let (string, tail) = rest.split_at_checked(len)?;
            rest = tail;
            // Only `&str`s went in: the bytes are valid UTF-8.
            Some(std::str::from_utf8(string).unwrap_or_default())
        })
    }
}

fn pairs(map: Option<&std::collections::BTreeMap<String, String>>) -> impl Iterator<Item = &str> {
    map.into_iter()
        .flatten()
        .flat_map(|(k, v)| [k.as_str(), v.as_str()])
}

fn collect_pairs<'a>(
    strings: &mut impl Iterator<Item = &'a str>,
    count: usize,
) -> std::collections::BTreeMap<String, String> {
    let mut map = std::collections::BTreeMap::new();
    for _ in 0..count {
        let (Some(k), Some(v)) = (strings.next(), strings.next()) else {
            break;
        };
        map.insert(k.to_owned(), v.to_owned());
    }
    map
}

impl Cached {
    fn new(meta: &ObjectMeta) -> Self {
        Self::with_readiness(meta, None)
    }

    fn with_readiness(meta: &ObjectMeta, not_ready: Option<&str>) -> Self {
        let version = object_version(
            meta.generation.unwrap_or(0),
            meta.resource_version.as_deref().unwrap_or(""),
        );
        let fixed = [
            version.as_str(),
            meta.uid.as_deref().unwrap_or(""),
            not_ready.unwrap_or(""),
        ];
        Self {
            strings: Packed::new(
                fixed
                    .into_iter()
                    .chain(pairs(meta.labels.as_ref()))
                    .chain(pairs(meta.annotations.as_ref())),
            ),
            labels: meta
                .labels
                .as_ref()
                .map_or(0, |l| u32::try_from(l.len()).unwrap_or(u32::MAX)),
            terminating: meta.deletion_timestamp.is_some(),
            ready: not_ready.is_none(),
            status: None,
        }
    }

    /// From a whole object: its readiness, and its status when `collect_status`.
    fn with_status(object: &DynamicObject, target: &TargetType, collect_status: bool) -> Self {
        let json = serde_json::to_value(object).unwrap_or_default();
        let not_ready = match readiness(&target.group, &target.kind, &json) {
            Readiness::Ready => None,
            Readiness::NotReady(why) => Some(why),
        };
        let status = collect_status
            .then(|| object.data.get("status").cloned())
            .flatten()
            .map(Box::new);
        Self {
            status,
            ..Self::with_readiness(&object.metadata, not_ready.as_deref())
        }
    }

    /// The uid, empty when the object had none.
    fn uid(&self) -> &str {
        self.strings.iter().nth(1).unwrap_or_default()
    }

    /// The value of annotation `key`.
    fn annotation(&self, key: &str) -> Option<&str> {
        let mut strings = self.strings.iter().skip(3 + 2 * self.labels as usize);
        while let (Some(k), Some(v)) = (strings.next(), strings.next()) {
            if k == key {
                return Some(v);
            }
        }
        None
    }

    fn observation(&self) -> MemberObject {
        let mut strings = self.strings.iter();
        let version = strings.next().unwrap_or_default().to_owned();
        let uid = strings.next().unwrap_or_default();
        let not_ready = strings.next().unwrap_or_default();
        let labels = collect_pairs(&mut strings, self.labels as usize);
        let annotations = collect_pairs(&mut strings, usize::MAX);
        MemberObject {
            managed_label: labels.get(MANAGED_LABEL).cloned(),
            terminating: self.terminating,
            version,
            uid: (!uid.is_empty()).then(|| uid.to_owned()),
            labels,
            annotations,
            readiness: if self.ready {
                Readiness::Ready
            } else {
                Readiness::NotReady(not_ready.to_owned())
            },
            remote_status: self.status.as_deref().cloned(),
        }
    }
}

/// A map kept equal to what one member watch selects, by key ([`MirrorKey`]); `None` until
/// the watch's first list has completed.
type Mirror<K, V> = parking_lot::RwLock<Option<HashMap<K, V>>>;

/// How a mirror keys the member objects it keeps.
trait MirrorKey: std::hash::Hash + Eq + Clone + Send + Sync + 'static {
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
struct NameHash(u64);

impl MirrorKey for NameHash {
    fn of(watches: &MemberWatches, name: &str, namespace: Option<&str>) -> Self {
        watches.name_hash(name, namespace)
    }

    fn queue(&self, _: &MemberWatches) {}

    fn copy_changed(&self, _: &MemberWatches, _: &str) {}
}

/// One of a cluster's two caches, as [`MemberWatches::mirror`] or
/// [`MemberWatches::mirror_both`] fills it.
struct MirrorTarget<'a, M, V> {
    map: &'a Mirror<M, V>,
    /// Given for the managed objects' mirror: why its first list failed.
    failure: Option<&'a parking_lot::Mutex<Option<ListFailure>>>,
    /// Set when its watch fails, cleared by its next complete list.
    gap: &'a AtomicBool,
    /// Given for the managed objects' mirror: its lists' progress.
    progress: Option<&'a ListProgress>,
    /// `managed` or `unmanaged`: the `cache` label of its lists' metric.
    name: &'static str,
}

impl<M, V> MirrorTarget<'_, M, V> {
    /// Its watch failed with `error`: a gap until its next complete list. Whether that was its
    /// first list failing, when it keeps why (`failure` given).
    fn watch_failed(&self, error: &watcher::Error) -> bool {
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

    /// Keeps one cache (and its watches) per ready cluster with a client, following the
    /// registry; a cluster that turns not Ready keeps them while its watches work.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut changes = self.shared.pool.subscribe();
        loop {
            self.sync_watches();
            tokio::select! {
                () = stop.cancelled() => break,
                changed = changes.changed() => if changed.is_err() { break },
            }
        }
        let caches = std::mem::take(&mut *self.caches.write());
        for cache in caches.values() {
            cache.stop.cancel();
        }
    }

    fn sync_watches(self: &Arc<Self>) {
        let clusters = self.shared.pool.clusters();
        let mut caches = self.caches.write();
        caches.retain(|name, cache| {
            let cluster = clusters.iter().find(|c| &c.name == name);
            // A cluster not Ready keeps watches that work (a slow health check); one whose
            // watch failed starts afresh, with a full list, once Ready again.
            let keep = cluster.is_some_and(|c| {
                (c.ready || cache.unbroken())
                    && c.client
                        .as_ref()
                        .is_some_and(|_| c.client_id == cache.client_id)
            });
            if !keep {
                self.stop_watch(name, cache);
                self.wake_awaiting(name);
            }
            if cluster.is_none() {
                // Unjoined: its lists' counts go with it.
                let type_label = self.federated.kind.to_lowercase();
                for mirror in ["managed", "unmanaged"] {
                    let _ = crate::metrics::METRICS
                        .member_cache_lists_total
                        .remove_label_values(&[type_label.as_str(), name, mirror]);
                }
                let _ = crate::metrics::METRICS
                    .member_list_stalls_total
                    .remove_label_values(&[type_label.as_str(), name]);
            }
            keep
        });
        for cluster in clusters {
            if !cluster.ready || caches.contains_key(&cluster.name) {
                continue;
            }
            // Watches may be quiet for longer than the request client's read timeout.
            let Some(client) = cluster.watch_client.clone() else {
                continue;
            };
            let cache = self.start_watch(&cluster.name, cluster.client_id, client);
            caches.insert(cluster.name.clone(), cache);
        }
    }

    /// Stops the watch of a cluster gone, not ready with a failed watch, or with a new client.
    fn stop_watch(&self, name: &str, cache: &MemberCache) {
        debug!(cluster = %name, kind = %self.target.kind, "stopping member watch");
        cache.stop.cancel();
        let type_label = self.federated.kind.to_lowercase();
        for gauge in [
            &crate::metrics::METRICS.managed_objects,
            &crate::metrics::METRICS.unmanaged_objects,
        ] {
            let _ = gauge.remove_label_values(&[type_label.as_str(), name]);
        }
    }

    /// Starts watching `cluster` through `client` (its `client_id`); returns the cache the
    /// watch fills.
    fn start_watch(
        self: &Arc<Self>,
        cluster: &str,
        client_id: usize,
        client: kube::Client,
    ) -> Arc<MemberCache> {
        // `Api<PartialObjectMeta<_>>` makes metadata-only requests; whole objects are
        // watched only for the managed copies of types whose readiness is in their status.
        let (api, objects): (Api<MemberMeta>, Api<DynamicObject>) =
            match self.shared.target_namespace() {
                Some(ns) if self.target.namespaced => (
                    Api::namespaced_with(client.clone(), ns, &self.target_resource),
                    Api::namespaced_with(client, ns, &self.target_resource),
                ),
                _ => (
                    Api::all_with(client.clone(), &self.target_resource),
                    Api::all_with(client, &self.target_resource),
                ),
            };
        let cache = Arc::new(MemberCache {
            objects: parking_lot::RwLock::new(None),
            unmanaged: parking_lot::RwLock::new(None),
            list_failure: parking_lot::Mutex::new(None),
            gaps: [AtomicBool::new(false), AtomicBool::new(false)],
            progress: ListProgress::new(),
            client_id,
            stop: CancellationToken::new(),
        });
        let watch = Arc::clone(self).watch(cluster.to_owned(), Arc::clone(&cache), api, objects);
        tokio::spawn(watch);
        cache
    }

    /// Mirrors one cluster's managed copies (metadata, or whole objects when their status is
    /// read) and the names of its unmanaged objects into `cache`, until it is stopped.
    async fn watch(
        self: Arc<Self>,
        name: String,
        cache: Arc<MemberCache>,
        api: Api<MemberMeta>,
        objects: Api<DynamicObject>,
    ) {
        let collect_status = self.collect_status;
        let with_status = collect_status || needs_status(&self.target.group, &self.target.kind);
        if !with_status {
            self.mirror_both(&name, api, &cache).await;
            return;
        }
        // `!=` also selects objects without the label.
        let selector = format!("{MANAGED_LABEL}=true");
        let mirror = MirrorTarget {
            map: &cache.objects,
            failure: Some(&cache.list_failure),
            gap: &cache.gaps[0],
            progress: Some(&cache.progress),
            name: "managed",
        };
        let target = &self.target;
        let managed = self.mirror(&name, objects, selector, mirror, &cache.stop, |object| {
            Cached::with_status(object, target, collect_status)
        });
        let unmanaged = self.mirror(
            &name,
            api,
            format!("{MANAGED_LABEL}!=true"),
            MirrorTarget {
                map: &cache.unmanaged,
                failure: None,
                gap: &cache.gaps[1],
                progress: None,
                name: "unmanaged",
            },
            &cache.stop,
            |meta| managed_label(&meta.metadata) == Some("false"),
        );
        futures::join!(managed, unmanaged);
    }

    /// For types whose copies are kept as metadata: one metadata watch of all the type's
    /// objects fills both caches — managed copies (`kubefed.io/managed=true`) and the others'
    /// names — instead of one watch per label selector. Every event of the type then advances
    /// the watch, so its resourceVersion stays current: a watch selecting no object saw no
    /// event, and an API server without a watch cache (no bookmarks) had etcd replay the type's
    /// whole history since its last list each time it was sent again (every ~5 minutes) — with
    /// ~1 MB objects, gigabytes. The two caches behave as with two watches: an object whose
    /// label changes moves from one to the other, queueing its federated object.
    async fn mirror_both(&self, cluster: &str, api: Api<MemberMeta>, cache: &MemberCache) {
        let config = self.shared.member_lists.watcher_config();
        let stream = watcher(api, config).default_backoff();
        let mut stream = std::pin::pin!(stream);
        let managed = MirrorTarget {
            map: &cache.objects,
            failure: Some(&cache.list_failure),
            gap: &cache.gaps[0],
            progress: Some(&cache.progress),
            name: "managed",
        };
        let unmanaged = MirrorTarget {
            map: &cache.unmanaged,
            failure: None,
            gap: &cache.gaps[1],
            progress: None,
            name: "unmanaged",
        };
        let type_label = self.federated.kind.to_lowercase();
        let lists = [managed.name, unmanaged.name].map(|name| {
            crate::metrics::METRICS
                .member_cache_lists_total
                .with_label_values(&[type_label.as_str(), cluster, name])
        });
        let mut listing: (HashMap<Box<str>, Cached>, HashMap<NameHash, bool>) = Default::default();
        let mut failed_before = false;
        let mut turn = ListTurn::new(
            &self.shared.member_lists,
            cluster,
            &self.target.kind,
            &type_label,
        )
        .noting(&cache.progress);
        while let Some(event) = turn.next(&mut stream, &cache.stop).await {
            match event {
                Ok(watcher::Event::Init) => {
                    listing = Default::default();
                }
                Ok(watcher::Event::InitApply(object)) => {
                    let Some(name) = object.metadata.name.as_deref() else {
                        continue;
                    };
                    let namespace = object.metadata.namespace.as_deref();
                    match managed_label(&object.metadata) {
                        Some("true") => {
                            let key = Box::<str>::of(self, name, namespace);
                            listing.0.insert(key, Cached::new(&object.metadata));
                        }
                        label => {
                            let key = NameHash::of(self, name, namespace);
                            listing.1.insert(key, label == Some("false"));
                        }
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    let (listed_managed, listed_unmanaged) = std::mem::take(&mut listing);
                    self.listed(listed_managed, &managed, failed_before);
                    self.listed(listed_unmanaged, &unmanaged, false);
                    self.wake_awaiting(cluster);
                    for (gap, lists) in [managed.gap, unmanaged.gap].into_iter().zip(&lists) {
                        gap.store(false, Ordering::Relaxed);
                        lists.inc();
                    }
                    debug!(cluster, kind = %self.target.kind, "member cache synced");
                }
                Ok(watcher::Event::Apply(object)) => {
                    let Some(name) = object.metadata.name.as_deref() else {
                        continue;
                    };
                    let namespace = object.metadata.namespace.as_deref();
                    let managed_key = Box::<str>::of(self, name, namespace);
                    let unmanaged_key = NameHash::of(self, name, namespace);
                    let label = managed_label(&object.metadata);
                    let changed = if label == Some("true") {
                        let value = Cached::new(&object.metadata);
                        let moved = remove(unmanaged.map, &unmanaged_key);
                        let changed = update(managed.map, managed_key.clone(), value) || moved;
                        if changed {
                            managed_key.copy_changed(self, cluster);
                        }
                        changed
                    } else {
                        let moved = remove(managed.map, &managed_key);
                        update(unmanaged.map, unmanaged_key, label == Some("false")) || moved
                    };
                    if changed {
                        self.queue_owner(&object.metadata);
                    }
                }
                Ok(watcher::Event::Delete(object)) => {
                    if let Some(name) = object.metadata.name.as_deref() {
                        let namespace = object.metadata.namespace.as_deref();
                        remove(managed.map, &Box::<str>::of(self, name, namespace));
                        remove(unmanaged.map, &NameHash::of(self, name, namespace));
                    }
                    self.queue_owner(&object.metadata);
                }
                Err(e) => {
                    crate::watch::log_watch_error!(e, cluster, kind = %self.target.kind, "member watch error");
                    failed_before |= managed.watch_failed(&e);
                    unmanaged.watch_failed(&e);
                }
            }
        }
    }

    /// Keeps `map` equal to the objects `selector` selects in the cluster, each as
    /// `value(metadata)`, and queues the federated object of every key whose value changes
    /// (after a re-list, of every key that changed while the watch was down). `failure`, given
    /// for the managed objects' mirror, keeps why its first list fails; that mirror also queues
    /// every key after its first list.
    async fn mirror<K, M: MirrorKey, V: PartialEq>(
        &self,
        cluster: &str,
        api: Api<K>,
        selector: String,
        target: MirrorTarget<'_, M, V>,
        stop: &CancellationToken,
        value: impl Fn(&K) -> V,
    ) where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        let config = self.shared.member_lists.watcher_config().labels(&selector);
        let stream = watcher(api, config).default_backoff();
        let mut stream = std::pin::pin!(stream);
        let type_label = self.federated.kind.to_lowercase();
        let lists = crate::metrics::METRICS
            .member_cache_lists_total
            .with_label_values(&[type_label.as_str(), cluster, target.name]);
        let mut listing: HashMap<M, V> = HashMap::new();
        let mut failed_before = false;
        let key_of = |object: &K| {
            let meta = object.meta();
            let name = meta.name.as_deref()?;
            Some(M::of(self, name, meta.namespace.as_deref()))
        };
        let mut turn = ListTurn::new(
            &self.shared.member_lists,
            cluster,
            &self.target.kind,
            &type_label,
        );
        if let Some(progress) = target.progress {
            turn = turn.noting(progress);
        }
        while let Some(event) = turn.next(&mut stream, stop).await {
            match event {
                Ok(watcher::Event::Init) => {
                    listing = HashMap::new();
                }
                Ok(watcher::Event::InitApply(object)) => {
                    if let Some(key) = key_of(&object) {
                        listing.insert(key, value(&object));
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    let listed = std::mem::take(&mut listing);
                    self.listed(listed, &target, failed_before);
                    if target.progress.is_some() {
                        self.wake_awaiting(cluster);
                    }
                    target.gap.store(false, Ordering::Relaxed);
                    lists.inc();
                    debug!(cluster, kind = %self.target.kind, selector, "member cache synced");
                }
                Ok(watcher::Event::Apply(object)) => {
                    if let Some(key) = key_of(&object)
                        && update(target.map, key.clone(), value(&object))
                    {
                        key.copy_changed(self, cluster);
                        self.queue_owner(object.meta());
                    }
                }
                Ok(watcher::Event::Delete(object)) => {
                    if let Some(key) = key_of(&object) {
                        remove(target.map, &key);
                    }
                    self.queue_owner(object.meta());
                }
                Err(e) => {
                    crate::watch::log_watch_error!(e, cluster, kind = %self.target.kind, selector, "member watch error");
                    failed_before |= target.watch_failed(&e);
                }
            }
        }
    }

    /// A (re)list of `map` completed with `listed`, which replaces what it held. Queued: the
    /// federated object of every key that changed while the watch was down; of every key, for
    /// a new cache of managed objects (`failure` given) or one whose first list had failed.
    fn listed<M: MirrorKey, V: PartialEq>(
        &self,
        listed: HashMap<M, V>,
        &MirrorTarget { map, failure, .. }: &MirrorTarget<'_, M, V>,
        failed_before: bool,
    ) {
        let mut guard = map.write();
        let previous = guard.replace(listed);
        match (previous, guard.as_ref()) {
            (Some(previous), Some(current)) => {
                for key in previous.keys().filter(|k| !current.contains_key(*k)) {
                    key.queue(self);
                }
                for (key, v) in current {
                    if previous.get(key) != Some(v) {
                        key.queue(self);
                    }
                }
            }
            // A new cache (a cluster joined or back): the copies it holds are looked at at
            // once — while it listed, plans could not see them (a copy in a cluster the
            // object no longer places there must go).
            (None, Some(current)) if failure.is_some() || failed_before => {
                current.keys().for_each(|key| key.queue(self));
            }
            _ => {}
        }
        if let Some(failure) = failure {
            *failure.lock() = None;
            // Only the managed objects' mirror keeps failures.
            self.relisted.send_modify(|n| *n += 1);
        }
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

/// The copy a managed objects' cache holds under `key`.
fn managed_copy(key: &str, cached: &Cached) -> ManagedCopy {
    let (namespace, name) = match key.split_once('/') {
        Some((ns, name)) => (Some(ns.to_owned()), name.to_owned()),
        None => (None, key.to_owned()),
    };
    ManagedCopy {
        name,
        namespace,
        uid: Some(cached.uid())
            .filter(|uid| !uid.is_empty())
            .map(str::to_owned),
        owner: cached
            .annotation(hubfed_api::names::OWNER_ANNOTATION)
            .map(str::to_owned),
    }
}

/// A member object's `kubefed.io/managed` label.
fn managed_label(meta: &ObjectMeta) -> Option<&str> {
    meta.labels.as_ref()?.get(MANAGED_LABEL).map(String::as_str)
}

/// Sets `key` to `value` in a listed mirror; whether that changed it (an unlisted mirror is
/// left alone).
fn update<K: std::hash::Hash + Eq, V: PartialEq>(map: &Mirror<K, V>, key: K, value: V) -> bool {
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
fn remove<K: std::hash::Hash + Eq, V>(map: &Mirror<K, V>, key: &K) -> bool {
    map.write()
        .as_mut()
        .is_some_and(|map| map.remove(key).is_some())
}

fn list_failure(error: &watcher::Error) -> ListFailure {
    let not_served = matches!(
        error,
        watcher::Error::InitialListFailed(kube::Error::Api(status)) if status.code == 404
    );
    ListFailure {
        not_served,
        message: error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::{CHANGED_COPIES_LIMIT, Cached, ChangedCopies, Readiness};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use std::collections::BTreeMap;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_compact_form_keeps_what_decisions_read() {
        let meta = ObjectMeta {
            name: Some("x".into()),
            generation: Some(3),
            resource_version: Some("41".into()),
            labels: Some(map(&[("kubefed.io/managed", "true"), ("app", "web")])),
            annotations: Some(map(&[("note", "n")])),
            ..Default::default()
        };
        let member = Cached::new(&meta).observation();
        assert_eq!(member.version, "gen:3");
        assert_eq!(member.managed_label.as_deref(), Some("true"));
        assert!(!member.terminating);
        assert_eq!(
            member.labels,
            map(&[("kubefed.io/managed", "true"), ("app", "web")])
        );
        assert_eq!(member.annotations, map(&[("note", "n")]));

        let terminating = ObjectMeta {
            resource_version: Some("42".into()),
            deletion_timestamp: Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            ..Default::default()
        };
        let member = Cached::new(&terminating).observation();
        assert_eq!(member.version, "rv:42");
        assert!(member.terminating);
        assert!(member.labels.is_empty() && member.managed_label.is_none());
        assert!(member.annotations.is_empty() && member.uid.is_none());
    }

    #[test]
    fn packed_strings_come_back_whole_long_empty_or_not_ascii() {
        let long = "x".repeat(300) + "é";
        let very_long = "y".repeat(70_000);
        let owner = format!("ns/{long}");
        let meta = ObjectMeta {
            uid: Some("0b8f6a2e-1c3d-4e5f-8a9b-0c1d2e3f4a5b".into()),
            resource_version: Some("7".into()),
            labels: Some(map(&[("empty", ""), ("kubefed.io/managed", "true")])),
            annotations: Some(map(&[
                ("hubfed.io/owner", &owner),
                ("big", &very_long),
                ("ünïcode", "värde"),
            ])),
            ..Default::default()
        };
        let cached = Cached::with_readiness(&meta, Some("0 of 3 replicas available"));
        assert_eq!(cached.uid(), "0b8f6a2e-1c3d-4e5f-8a9b-0c1d2e3f4a5b");
        assert_eq!(cached.annotation("hubfed.io/owner"), Some(owner.as_str()));
        // A label of the same name is not an annotation.
        assert_eq!(cached.annotation("empty"), None);
        let member = cached.observation();
        assert_eq!(member.version, "rv:7");
        assert_eq!(member.uid.as_deref(), Some(cached.uid()));
        assert_eq!(member.labels, meta.labels.clone().unwrap());
        assert_eq!(member.annotations, meta.annotations.clone().unwrap());
        assert_eq!(
            member.readiness,
            Readiness::NotReady("0 of 3 replicas available".into())
        );
        // Not ready with no reason stays not ready.
        let member = Cached::with_readiness(&meta, Some("")).observation();
        assert_eq!(member.readiness, Readiness::NotReady(String::new()));
        assert_eq!(Cached::new(&meta).observation().readiness, Readiness::Ready);
    }

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
