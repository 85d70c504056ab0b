//! The DNS controller's caches: the hub's records, Domains, KubeFedClusters and its own
//! DNSEndpoints, and each push member's Services, EndpointSlices and Ingresses. Every change
//! wakes the reconciler.

use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt as _;
use hubfed_api::externaldns;
use hubfed_api::kubefedcluster::KubeFedCluster;
use hubfed_api::multiclusterdns::{self, Domain, IngressDnsRecord, ServiceDnsRecord};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use super::{DnsSettings, RECORD_KIND_LABEL, REPORTER};
use crate::clusters::MemberClientPool;
use crate::watch::quiet_while_unserved;

/// The label naming an EndpointSlice's Service.
pub(super) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// One member's caches, and the tasks that keep them (aborted when dropped).
pub(super) struct MemberCaches {
    pub client_id: usize,
    pub services: Store<Service>,
    pub slices: Store<EndpointSlice>,
    pub ingresses: Store<Ingress>,
    tasks: Vec<AbortHandle>,
}

impl Drop for MemberCaches {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// What the DNS controller's tasks share.
pub(super) struct Context {
    pub hub: Client,
    pub pool: Arc<MemberClientPool>,
    pub kubefed_namespace: String,
    pub settings: DnsSettings,
    pub service_records: Store<ServiceDnsRecord>,
    pub ingress_records: Store<IngressDnsRecord>,
    pub domains: Store<Domain>,
    pub clusters: Store<KubeFedCluster>,
    pub externaldns_endpoints: Store<externaldns::DnsEndpoint>,
    pub kubefed_endpoints: Store<multiclusterdns::DnsEndpoint>,
    pub members: RwLock<BTreeMap<String, Arc<MemberCaches>>>,
    pub recorder: kube::runtime::events::Recorder,
    /// Something changed: the reconciler looks again.
    pub changed: Arc<Notify>,
    pub shutdown: CancellationToken,
}

impl Context {
    /// Starts the hub's caches.
    pub fn start(
        hub: Client,
        pool: Arc<MemberClientPool>,
        kubefed_namespace: String,
        records_namespace: Option<String>,
        settings: DnsSettings,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let changed = Arc::new(Notify::new());
        let cache = Cache {
            changed: &changed,
            shutdown: &shutdown,
        };
        let ns = records_namespace.as_deref();
        let own = watcher::Config::default().labels(RECORD_KIND_LABEL);
        let all = watcher::Config::default;
        Arc::new(Self {
            service_records: cache.hub(scoped(&hub, ns), all()),
            ingress_records: cache.hub(scoped(&hub, ns), all()),
            domains: cache.hub(Api::namespaced(hub.clone(), &kubefed_namespace), all()),
            clusters: cache.hub(Api::namespaced(hub.clone(), &kubefed_namespace), all()),
            externaldns_endpoints: cache.hub(scoped(&hub, ns), own.clone()),
            kubefed_endpoints: cache.hub(scoped(&hub, ns), own),
            recorder: kube::runtime::events::Recorder::new(
                hub.clone(),
                crate::events::reporter(REPORTER),
            ),
            hub,
            pool,
            kubefed_namespace,
            settings,
            members: RwLock::new(BTreeMap::new()),
            changed,
            shutdown,
        })
    }

    /// Every followed member's caches, by name.
    pub fn members(&self) -> BTreeMap<String, Arc<MemberCaches>> {
        self.members.read().clone()
    }
}

/// `K` in `namespace`, or in every namespace.
fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// How caches are started: each change notifies `changed`, each ends with `shutdown`.
struct Cache<'a> {
    changed: &'a Arc<Notify>,
    shutdown: &'a CancellationToken,
}

impl Cache<'_> {
    /// A cache of a hub type that may not be served (its CRD not installed): it waits quietly
    /// and counts as empty meanwhile.
    fn hub<K>(&self, api: Api<K>, config: watcher::Config) -> Store<K>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    {
        let (store, _) = self.spawn(api, config, "hub");
        store
    }

    /// A cache of `api`'s objects, returned with its task.
    fn spawn<K>(
        &self,
        api: Api<K>,
        config: watcher::Config,
        cluster: &str,
    ) -> (Store<K>, AbortHandle)
    where
        K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    {
        let kind = K::kind(&()).into_owned();
        let (reader, writer) = reflector::store();
        let events = quiet_while_unserved(watcher(api, config), kind.clone())
            .default_backoff()
            .modify(|o: &mut K| {
                let meta = o.meta_mut();
                meta.managed_fields = None;
                if let Some(annotations) = meta.annotations.as_mut() {
                    annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
                }
            });
        let stream = reflector::reflector(writer, events);
        let changed = Arc::clone(self.changed);
        let shutdown = self.shutdown.clone();
        let cluster = cluster.to_owned();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    item = stream.next() => match item {
                        Some(Err(e)) => crate::watch::log_watch_error!(e, kind = %kind, cluster = %cluster, "multi-cluster DNS watch error"),
                        Some(Ok(_)) => changed.notify_one(),
                        None => break,
                    },
                }
            }
        });
        (reader, task.abort_handle())
    }
}

/// Starts and stops members' caches as the registry changes, until `shutdown`: every push
/// member with a client is followed (again when its client changed).
pub(super) async fn follow_members(ctx: Arc<Context>) {
    let mut changes = ctx.pool.subscribe();
    loop {
        sync_members(&ctx);
        ctx.changed.notify_one();
        tokio::select! {
            () = ctx.shutdown.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
    }
}

fn sync_members(ctx: &Context) {
    let clusters = ctx.pool.clusters();
    let mut members = ctx.members.write();
    members.retain(|name, caches| {
        clusters.iter().any(|c| {
            &c.name == name
                && !c.pull
                && c.client_id == caches.client_id
                && c.watch_client.is_some()
        })
    });
    let cache = Cache {
        changed: &ctx.changed,
        shutdown: &ctx.shutdown,
    };
    let page = ctx.settings.list_page_size;
    for cluster in clusters.iter().filter(|c| !c.pull) {
        let Some(client) = &cluster.watch_client else {
            continue;
        };
        if members.contains_key(&cluster.name) {
            continue;
        }
        let all = || watcher::Config::default().page_size(page);
        let (services, a) = cache.spawn(Api::all(client.clone()), all(), &cluster.name);
        let (slices, b) = cache.spawn(
            Api::all(client.clone()),
            all().labels(SERVICE_NAME_LABEL),
            &cluster.name,
        );
        let (ingresses, c) = cache.spawn(Api::all(client.clone()), all(), &cluster.name);
        members.insert(
            cluster.name.clone(),
            Arc::new(MemberCaches {
                client_id: cluster.client_id,
                services,
                slices,
                ingresses,
                tasks: vec![a, b, c],
            }),
        );
    }
}
