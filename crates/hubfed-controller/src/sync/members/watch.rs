//! The watches of each member cluster: started, kept and stopped as the registry changes,
//! and the events that keep its mirrors ([`super::mirror`]) and queue federated objects.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hubfed_api::names::MANAGED_LABEL;
use hubfed_core::readiness::needs_status;
use kube::Resource;
use kube::api::{Api, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::cached::{Cached, managed_label};
use super::mirror::{MirrorKey, MirrorTarget, NameHash, remove, update};
use super::{MemberCache, MemberMeta, MemberWatches};
use crate::sync::list_slots::{ListProgress, ListTurn};

impl MemberWatches {
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
}
