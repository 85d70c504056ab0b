//! The agent's member caches: per type of work, a watch on the member's managed copies
//! (`kubefed.io/managed=true`) that reports every change to the copy's work, and garbage
//! collection of managed copies that have no work.
//!
//! The types are remembered on the agent's heartbeat Lease in the hub
//! ([`AGENT_TYPES_ANNOTATION`]) so that a restarted agent still collects copies of a type whose
//! works are all gone — the case of an object deleted in the hub while the agent was down.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use hubfed_api::names::MANAGED_LABEL;
use hubfed_api::work::{AGENT_LEASE_NAME, AGENT_TYPES_ANNOTATION};
use hubfed_api::work::{Work, WorkTarget};
use hubfed_core::gc::{Collect, HubObject, OWNER_ANNOTATION, collect, guard};
use hubfed_core::hub::NamespaceRole;
use hubfed_core::plan::MemberObject;
use hubfed_core::pull::{member_object, work_name};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::discovery::ApiResource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::Agent;

/// How often managed copies without a work are looked for.
const COLLECT_PERIOD: Duration = Duration::from_secs(30);

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

    pub fn caches(&self) -> Vec<TypeCache> {
        self.types
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// The cache of `target`'s copies, started (and remembered in the member) if new.
    pub fn ensure(&self, target: &WorkTarget) -> TypeCache {
        let mut types = self.types.lock().unwrap_or_else(|e| e.into_inner());
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
            })
            .touched_objects();
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

    /// The types this agent has worked with, as remembered on its heartbeat Lease.
    pub fn remembered(&self) -> String {
        let mut targets: Vec<WorkTarget> = self.caches().into_iter().map(|c| c.target).collect();
        targets.sort_by(|a, b| (&a.api_version, &a.kind).cmp(&(&b.api_version, &b.kind)));
        serde_json::to_string(&targets).unwrap_or_default()
    }

    /// Starts the caches of the types remembered on the heartbeat Lease (before the first
    /// heartbeat, which writes the list again).
    pub async fn restore(&self, agent: &Agent) {
        let leases: Api<Lease> = Api::namespaced(agent.hub.clone(), &agent.work_namespace);
        let remembered = match leases.get_opt(AGENT_LEASE_NAME).await {
            Ok(lease) => lease.and_then(|l| l.annotations().get(AGENT_TYPES_ANNOTATION).cloned()),
            Err(e) => {
                warn!(error = %e, "cannot read the remembered types; copies of types without works are not collected until they have works again");
                None
            }
        };
        let Some(remembered) = remembered else {
            return;
        };
        match serde_json::from_str::<Vec<WorkTarget>>(&remembered) {
            Ok(targets) => {
                for target in &targets {
                    self.ensure(target);
                }
            }
            Err(e) => warn!(error = %e, "the remembered types cannot be read; skipped"),
        }
    }
}

/// Queues the work of every copy that changes.
async fn forward(
    stream: impl futures::Stream<Item = Result<DynamicObject, watcher::Error>>,
    cache: TypeCache,
    triggers: mpsc::UnboundedSender<ObjectRef<Work>>,
    work_namespace: String,
    stop: CancellationToken,
) {
    let mut stream = std::pin::pin!(stream);
    loop {
        let item = tokio::select! {
            () = stop.cancelled() => break,
            item = stream.next() => item,
        };
        match item {
            Some(Ok(copy)) => {
                let namespace = copy.namespace().filter(|_| cache.target.namespaced);
                let name = work_name(
                    &cache.resource.group,
                    &cache.target.kind,
                    namespace.as_deref(),
                    &copy.name_any(),
                );
                let _ = triggers.send(ObjectRef::new(&name).within(&work_namespace));
            }
            Some(Err(e)) => warn!(kind = %cache.target.kind, error = %e, "member watch error"),
            None => break,
        }
    }
}

/// Soon after the start, then every [`COLLECT_PERIOD`], once the works are listed: managed
/// copies without a work are collected.
pub async fn collect_loop(
    agent: Arc<Agent>,
    works: Store<Work>,
    works_listed: Arc<AtomicBool>,
    stop: CancellationToken,
) {
    let mut wait = Duration::from_secs(5);
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(wait) => {}
        }
        wait = COLLECT_PERIOD;
        if !works_listed.load(Ordering::Acquire) {
            continue;
        }
        for cache in agent.copies.caches() {
            if cache.listed() {
                collect_type(&agent, &works, &cache).await;
            }
        }
    }
}

/// Collects the managed copies of one type that have no work.
pub async fn collect_type(agent: &Agent, works: &Store<Work>, cache: &TypeCache) {
    let hub_works: Api<Work> = Api::namespaced(agent.hub.clone(), &agent.work_namespace);
    for object in cache.store.state() {
        let value = serde_json::to_value(&*object).unwrap_or_default();
        let copy = member_object(&value, &cache.resource.group, &cache.target.kind, false);
        if !copy.is_managed() || copy.terminating {
            continue;
        }
        let namespace = object.namespace().filter(|_| cache.target.namespaced);
        let name = work_name(
            &cache.resource.group,
            &cache.target.kind,
            namespace.as_deref(),
            &object.name_any(),
        );
        if works
            .get(&ObjectRef::new(&name).within(&agent.work_namespace))
            .is_some()
        {
            continue;
        }
        // Unknown is never a yes: the cache's "no work" is confirmed in the hub.
        match hub_works.get_opt(&name).await {
            Ok(None) => {}
            Ok(Some(_)) => continue,
            Err(e) => {
                debug!(work = %name, error = %e, "cannot confirm that the work is gone; not collected");
                continue;
            }
        }
        let owner = copy.annotations.get(OWNER_ANNOTATION).map(String::as_str);
        let plane = agent.control_plane.as_deref().unwrap_or("");
        let decided = collect(plane, owner, HubObject::Absent, true, None);
        let is_namespace = cache.resource.group.is_empty() && cache.target.kind == "Namespace";
        // Whether a member namespace is the hub's own cannot be told from here: never deleted.
        let role = is_namespace.then(|| {
            NamespaceRole::Unknown(
                "a pull member's namespace is never deleted by garbage collection".to_owned(),
            )
        });
        let own = namespace.as_deref() == Some(agent.kubefed_namespace.as_str())
            || (is_namespace && object.name_any() == agent.kubefed_namespace);
        let action = guard(decided, role.as_ref(), own);
        carry_out(agent, cache, &object, action).await;
    }
}

async fn carry_out(agent: &Agent, cache: &TypeCache, object: &DynamicObject, action: Collect) {
    let api: Api<DynamicObject> = match object.namespace().filter(|_| cache.target.namespaced) {
        Some(ns) => Api::namespaced_with(agent.member.clone(), &ns, &cache.resource),
        None => Api::all_with(agent.member.clone(), &cache.resource),
    };
    let name = object.name_any();
    let what = format!(
        "{} {:?}",
        cache.target.kind,
        object.object_ref(&cache.resource).name.unwrap_or_default()
    );
    let result = match action {
        Collect::Keep | Collect::ConfirmAbsent => return,
        Collect::Delete => {
            let params = DeleteParams {
                preconditions: object.uid().map(|uid| Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            api.delete(&name, &params).await.map(drop)
        }
        Collect::Unlabel => {
            let patch = json!({"metadata": {"labels": {MANAGED_LABEL: null}}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(drop)
        }
    };
    match result {
        Ok(()) => {
            info!(copy = %what, namespace = ?object.namespace(), action = ?action, "garbage collected a copy without work")
        }
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
        Err(e) => {
            warn!(copy = %what, error = %e, "garbage collection failed; tried again next round")
        }
    }
}
