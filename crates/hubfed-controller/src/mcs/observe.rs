//! A member's watches: ServiceExports, Services, source and derived EndpointSlices, this
//! control plane's ServiceImports, Namespaces and ClusterProperties, into its
//! [`MemberIndex`](super::index::MemberIndex), each change handed to a [`Sink`]: the hub's
//! controller queues the keys it touches; a pull member's agent reports them.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::pin::pin;
use std::sync::Arc;

use futures::StreamExt as _;
use hubfed_api::about::ClusterProperty;
use hubfed_api::mcs::{self, ServiceExport, ServiceImport};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::task::AbortHandle;
use tracing::{debug, info, warn};

use super::index::{Cached, Feed, SERVICE_NAME_LABEL, Slot, slot_of};
use super::{Context, Member};
use crate::metrics::METRICS;

/// Where a member's watches say what changed.
pub(crate) trait Sink: Send + Sync + 'static {
    /// The objects under `slots` of `feed` changed.
    fn touched(&self, feed: Feed, slots: BTreeSet<Slot>);
    /// Every watch of the member has listed (again), or found its resource unserved: ids and
    /// every key may have changed.
    fn relisted(&self);
}

impl Sink for Context {
    fn touched(&self, feed: Feed, slots: BTreeSet<Slot>) {
        Context::touched(self, feed, slots);
    }

    fn relisted(&self) {
        self.ids_changed.notify_one();
        self.queue_everything();
    }
}

/// What a member's watches need beside their sink: the label of this control plane's
/// objects and the page size of their lists.
pub(crate) struct Watching<'a> {
    pub control_plane: &'a str,
    pub page_size: u32,
}

/// The annotation `kubectl apply` leaves: a copy of the object, never needed here.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Starts every watch of `member` with `client`; returns their tasks.
pub(crate) fn start(
    sink: &Arc<dyn Sink>,
    watching: &Watching<'_>,
    member: &Arc<Member>,
    client: &Client,
) -> Vec<AbortHandle> {
    let own = super::own_selector(watching.control_plane);
    let sources = format!("{SERVICE_NAME_LABEL},!{}", mcs::SERVICE_NAME_LABEL);
    let page_size = watching.page_size;
    let all = || watcher::Config::default().page_size(page_size);
    let feeds = Feeds { sink, member };
    vec![
        feeds.spawn(
            Feed::Exports,
            Api::<ServiceExport>::all(client.clone()),
            all(),
            |mut o| {
                lean(&mut o.metadata);
                Cached::Export(Arc::new(o))
            },
        ),
        feeds.spawn(
            Feed::Services,
            Api::<Service>::all(client.clone()),
            all(),
            |mut o| {
                lean(&mut o.metadata);
                o.status = None;
                Cached::Service(Arc::new(o))
            },
        ),
        feeds.spawn(
            Feed::SourceSlices,
            Api::<EndpointSlice>::all(client.clone()),
            all().labels(&sources),
            slice,
        ),
        feeds.spawn(
            Feed::DerivedSlices,
            Api::<EndpointSlice>::all(client.clone()),
            all().labels(&own),
            slice,
        ),
        feeds.spawn(
            Feed::Imports,
            Api::<ServiceImport>::all(client.clone()),
            all().labels(&own),
            |mut o| {
                lean(&mut o.metadata);
                Cached::Import(Arc::new(o))
            },
        ),
        feeds.spawn(
            Feed::Namespaces,
            Api::<Namespace>::all(client.clone()),
            all(),
            |o| {
                let mut metadata = o.metadata;
                lean(&mut metadata);
                Cached::Namespace(Arc::new(Namespace {
                    metadata,
                    ..Namespace::default()
                }))
            },
        ),
        feeds.spawn(
            Feed::Properties,
            Api::<ClusterProperty>::all(client.clone()),
            all(),
            |mut o| {
                lean(&mut o.metadata);
                Cached::Property(Arc::new(o))
            },
        ),
    ]
}

fn slice(mut o: EndpointSlice) -> Cached {
    lean(&mut o.metadata);
    Cached::Slice(Arc::new(o))
}

/// Drops what no decision reads: managed fields and kubectl's copy of the object.
fn lean(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

struct Feeds<'a> {
    sink: &'a Arc<dyn Sink>,
    member: &'a Arc<Member>,
}

impl Feeds<'_> {
    fn spawn<K>(
        &self,
        feed: Feed,
        api: Api<K>,
        config: watcher::Config,
        cache: fn(K) -> Cached,
    ) -> AbortHandle
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        let sink = Arc::clone(self.sink);
        let member = Arc::clone(self.member);
        tokio::spawn(watch_feed(sink, member, feed, api, config, cache)).abort_handle()
    }
}

/// Follows one watch until its task is aborted.
async fn watch_feed<K>(
    sink: Arc<dyn Sink>,
    member: Arc<Member>,
    feed: Feed,
    api: Api<K>,
    config: watcher::Config,
    cache: fn(K) -> Cached,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    if feed.waits_for_mcs_crds() {
        let mut served = member.crds_served.subscribe();
        if served.wait_for(|served| *served).await.is_err() {
            return;
        }
    }
    let mut events = pin!(watcher(api, config).default_backoff());
    let mut listing: Vec<(Slot, Cached)> = Vec::new();
    while let Some(event) = events.next().await {
        let touched = match event {
            Ok(watcher::Event::Init) => {
                listing.clear();
                continue;
            }
            Ok(watcher::Event::InitApply(object)) => {
                if let Some(slot) = slot_of(feed, &object) {
                    listing.push((slot, cache(object)));
                }
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                let mut index = member.index.lock();
                let was_unserved = index.lacks_mcs_crds() && feed.needs_mcs_crds();
                let touched = index.reset(feed, std::mem::take(&mut listing));
                if feed.needs_mcs_crds() && !index.lacks_mcs_crds() {
                    member.crds_served.send_replace(true);
                    if was_unserved {
                        info!(cluster = %member.name, "the member serves the MCS CRDs now");
                    }
                    METRICS
                        .mcs_member_crds
                        .with_label_values(&[&member.name])
                        .set(1);
                }
                if index.listed() {
                    drop(index);
                    sink.relisted();
                }
                touched
            }
            Ok(watcher::Event::Apply(object)) => {
                let Some(slot) = slot_of(feed, &object) else {
                    continue;
                };
                let mut index = member.index.lock();
                index.apply(feed, slot.clone(), cache(object));
                BTreeSet::from([slot])
            }
            Ok(watcher::Event::Delete(object)) => {
                let Some(slot) = slot_of(feed, &object) else {
                    continue;
                };
                let mut index = member.index.lock();
                index.delete(feed, &slot);
                BTreeSet::from([slot])
            }
            Err(error) if crate::watch::unserved(&error) => {
                unserved(sink.as_ref(), &member, feed);
                continue;
            }
            Err(error) => {
                debug!(cluster = %member.name, kind = feed.as_str(), error = %error, "MCS watch failed");
                continue;
            }
        };
        sink.touched(feed, touched);
    }
}

/// The member does not serve `feed`'s resource: said once per member and resource.
fn unserved(sink: &dyn Sink, member: &Arc<Member>, feed: Feed) {
    let (first, listed) = {
        let mut index = member.index.lock();
        (index.set_unserved(feed), index.listed())
    };
    if !first {
        return;
    }
    if feed.needs_mcs_crds() {
        warn!(
            cluster = %member.name,
            kind = feed.as_str(),
            "the member does not serve the MCS CRDs (multicluster.x-k8s.io): it takes no part \
             in multi-cluster services until they are installed"
        );
        METRICS
            .mcs_member_crds
            .with_label_values(&[&member.name])
            .set(0);
    } else {
        info!(
            cluster = %member.name,
            kind = feed.as_str(),
            "the member does not serve ClusterProperties (about.k8s.io): its cluster id is its \
             KubeFedCluster name, not written into it"
        );
    }
    if listed {
        sink.relisted();
    }
}
