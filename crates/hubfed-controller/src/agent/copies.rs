//! The agent's member caches: per type of work, a watch on the member's managed copies
//! (`kubefed.io/managed=true`) that reports every change to the copy's work.
//!
//! Nothing is deleted here because a work is missing: a copy the hub wants gone while the
//! agent is away gets a tombstone work (`hubfed_core::pull::work_fate`), carried out like any
//! other work.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use futures::StreamExt;
use hubfed_api::names::MANAGED_LABEL;
use hubfed_api::work::{Work, WorkTarget};
use hubfed_core::plan::MemberObject;
use hubfed_core::pull::{member_object, work_name};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::watch::each_event;

/// One type's cache of managed copies.
#[derive(Clone)]
pub struct TypeCache {
    pub target: WorkTarget,
    pub resource: ApiResource,
    pub store: Store<DynamicObject>,
    listed: Arc<AtomicBool>,
}

impl TypeCache {
    /// Whether the first list has completed.
    pub fn listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }

    /// The copy `name` as the plan sees it: `None` until the cache has listed; `Some(None)`
    /// when it holds no managed copy of that name.
    pub fn copy(
        &self,
        name: &str,
        namespace: Option<&str>,
        collect_status: bool,
    ) -> Option<Option<MemberObject>> {
        if !self.listed() {
            return None;
        }
        let r = ObjectRef::new_with(name, self.resource.clone());
        let r = match namespace.filter(|_| self.target.namespaced) {
            Some(ns) => r.within(ns),
            None => r,
        };
        Some(self.store.get(&r).map(|object| {
            let value = serde_json::to_value(&*object).unwrap_or_default();
            member_object(
                &value,
                &self.resource.group,
                &self.target.kind,
                collect_status,
            )
        }))
    }
}

/// Every type's cache, started on first use.
pub struct Copies {
    member: kube::Client,
    types: Mutex<HashMap<String, TypeCache>>,
    /// Where watch events go: the work of the copy that changed.
    triggers: OnceLock<(
        mpsc::UnboundedSender<ObjectRef<Work>>,
        String,
        CancellationToken,
    )>,
}

/// `group/version/kind`, the key of a type.
fn key(target: &WorkTarget) -> String {
    format!("{}/{}", target.api_version, target.kind)
}

/// The member API resource of a work's target.
pub fn resource(target: &WorkTarget) -> ApiResource {
    let (group, version) = match target.api_version.split_once('/') {
        Some((group, version)) => (group.to_owned(), version.to_owned()),
        None => (String::new(), target.api_version.clone()),
    };
    ApiResource {
        group,
        version,
        api_version: target.api_version.clone(),
        kind: target.kind.clone(),
        plural: target.plural.clone(),
    }
}

impl Copies {
    pub fn new(member: kube::Client) -> Self {
        Self {
            member,
            types: Mutex::new(HashMap::new()),
            triggers: OnceLock::new(),
        }
    }

    /// Starts the caches: from now on their events queue works in `work_namespace`.
    pub fn start(
        &self,
        triggers: mpsc::UnboundedSender<ObjectRef<Work>>,
        work_namespace: &str,
        stop: CancellationToken,
    ) {
        let _ = self
            .triggers
            .set((triggers, work_namespace.to_owned(), stop));
    }

    /// The cache of `target`'s copies, started (and remembered in the member) if new.
    pub fn ensure(&self, target: &WorkTarget) -> TypeCache {
        let mut types = self.types.lock();
        if let Some(cache) = types.get(&key(target)) {
            return cache.clone();
        }
        let resource = resource(target);
        let (store, writer) = {
            let writer = reflector::store::Writer::new(resource.clone());
            (writer.as_reader(), writer)
        };
        let cache = TypeCache {
            target: target.clone(),
            resource: resource.clone(),
            store,
            listed: Arc::new(AtomicBool::new(false)),
        };
        types.insert(key(target), cache.clone());
        drop(types);
        info!(kind = %target.kind, api_version = %target.api_version, "watching managed copies");
        if let Some((triggers, work_namespace, stop)) = self.triggers.get() {
            let api: Api<DynamicObject> = Api::all_with(self.member.clone(), &resource);
            let config = watcher::Config::default().labels(&format!("{MANAGED_LABEL}=true"));
            let listed = Arc::clone(&cache.listed);
            let stream = reflector::reflector(
                writer,
                watcher(api, config).modify(|object| {
                    object.metadata.managed_fields = None;
                }),
            )
            .default_backoff()
            .inspect(move |event| {
                if let Ok(watcher::Event::InitDone) = event {
                    listed.store(true, Ordering::Release);
                }
            });
            let stream = crate::watch::settled(
                stream,
                cache.store.clone(),
                crate::watch::Deletions::Include,
            );
            tokio::spawn(forward(
                stream,
                cache.clone(),
                triggers.clone(),
                work_namespace.clone(),
                stop.clone(),
            ));
        }
        cache
    }
}

/// Queues the work of every copy that changes.
async fn forward(
    stream: impl futures::Stream<Item = Result<Arc<DynamicObject>, watcher::Error>>,
    cache: TypeCache,
    triggers: mpsc::UnboundedSender<ObjectRef<Work>>,
    work_namespace: String,
    stop: CancellationToken,
) {
    each_event(stream, &stop, |item| match item {
        Ok(copy) => {
            let namespace = copy.namespace().filter(|_| cache.target.namespaced);
            let name = work_name(
                &cache.resource.group,
                &cache.target.kind,
                namespace.as_deref(),
                &copy.name_any(),
            );
            let _ = triggers.send(ObjectRef::new(&name).within(&work_namespace));
        }
        Err(e) => {
            crate::watch::log_watch_error!(e, kind = %cache.target.kind, "member watch error")
        }
    })
    .await;
}
