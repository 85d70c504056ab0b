//! Pull members in the hub: their agents' reports feed a [`MemberIndex`] as watches feed a
//! push member's, and their share of each key is delivered as a [`ServiceImportWork`] in
//! their work namespace, which their agent carries out (`super::agent`).
//!
//! Every object read or written here lives in the member's work namespace in the hub, where
//! its agent's credentials reach and nowhere else: an agent reads its own works, never
//! another cluster's reports.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::pin::pin;
use std::sync::Arc;

use futures::StreamExt as _;
use hubfed_api::about::{ClusterProperty, ClusterPropertySpec};
use hubfed_api::pull_mcs::{
    CLUSTER_REPORT_NAME, ClusterReport, ClusterReportSpec, IMPORT_WORK_FAILED, MCS_REPORT_LABEL,
    ServiceExportReport, ServiceImportWork, mcs_object_name,
};
use hubfed_api::work::PULL_GROUP;
use hubfed_core::mcs::{CONTROL_PLANE_LABEL, ImportSpec};
use hubfed_core::pull::cluster_namespace;
use hubfed_core::pull::{import_work, spec_needs_write};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, watcher};
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::task::AbortHandle;
use tracing::{debug, warn};

use super::index::{Cached, Feed, Key, MemberIndex, Slot, slot_of};
use super::observe::Sink;
use super::reconcile::View;
use super::write::{Write, WriteFailed, apply, delete};
use super::{Context, Member};

/// What the hub keeps of one kind of a pull member's objects, and how.
trait Reported:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + 'static
{
    const KIND: &'static str;
    /// A whole list replaces what the index held.
    fn list(index: &mut MemberIndex, objects: Vec<Self>) -> Touch;
    fn apply(index: &mut MemberIndex, object: Self) -> Touch;
    fn delete(index: &mut MemberIndex, object: &Self) -> Touch;
}

/// What a change touches.
enum Touch {
    Keys(BTreeSet<Slot>),
    /// The member's namespaces or ids: every key.
    Everything,
}

/// Starts the hub watches of pull member `member`'s reports and works; returns their tasks.
pub(super) fn start(ctx: &Arc<Context>, member: &Arc<Member>) -> Vec<AbortHandle> {
    let namespace = cluster_namespace(&member.name);
    vec![
        spawn::<ServiceExportReport>(ctx, member, &namespace),
        spawn::<ClusterReport>(ctx, member, &namespace),
        spawn::<ServiceImportWork>(ctx, member, &namespace),
    ]
}

fn spawn<K: Reported>(ctx: &Arc<Context>, member: &Arc<Member>, namespace: &str) -> AbortHandle {
    let api: Api<K> = Api::namespaced(ctx.hub.clone(), namespace);
    tokio::spawn(follow(Arc::clone(ctx), Arc::clone(member), api)).abort_handle()
}

/// Follows one kind in the member's work namespace until its task is aborted.
async fn follow<K: Reported>(ctx: Arc<Context>, member: Arc<Member>, api: Api<K>) {
    let config = watcher::Config::default().page_size(ctx.settings.list_page_size);
    let mut events = pin!(watcher(api, config).default_backoff());
    let mut listing: Vec<K> = Vec::new();
    let mut said_unserved = false;
    while let Some(event) = events.next().await {
        let mut index = member.index.lock();
        let touch = match event {
            Ok(watcher::Event::Init) => {
                listing.clear();
                continue;
            }
            Ok(watcher::Event::InitApply(mut object)) => {
                object.meta_mut().managed_fields = None;
                listing.push(object);
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                let touch = K::list(&mut index, std::mem::take(&mut listing));
                if index.listed() {
                    drop(index);
                    ctx.relisted();
                    continue;
                }
                touch
            }
            Ok(watcher::Event::Apply(mut object)) => {
                object.meta_mut().managed_fields = None;
                K::apply(&mut index, object)
            }
            Ok(watcher::Event::Delete(object)) => K::delete(&mut index, &object),
            Err(error) if crate::watch::unserved(&error) => {
                // A hub without the pull MCS CRDs: the member takes no part.
                index.set_served(Feed::Imports, false);
                drop(index);
                if !said_unserved {
                    said_unserved = true;
                    warn!(
                        cluster = %member.name,
                        kind = K::KIND,
                        "the hub does not serve {} ({PULL_GROUP}): the pull member takes no \
                         part in multi-cluster services until hubfed's CRDs are installed",
                        K::KIND
                    );
                    ctx.relisted();
                }
                continue;
            }
            Err(error) => {
                debug!(cluster = %member.name, kind = K::KIND, error = %error, "pull MCS watch failed");
                continue;
            }
        };
        drop(index);
        match touch {
            Touch::Keys(slots) => ctx.touched(Feed::Exports, slots),
            Touch::Everything => ctx.relisted(),
        }
    }
}

/// The key of a report or work: `<namespace>.<name>`.
fn key_of<K: Resource>(object: &K) -> Option<Key> {
    let (namespace, name) = object.meta().name.as_deref()?.split_once('.')?;
    Some((namespace.to_owned(), name.to_owned()))
}

/// A report's entries in the feeds it stands for: the export, its Service, its slices.
fn report_entries(key: &Key, report: &ServiceExportReport) -> [(Feed, Vec<(Slot, Cached)>); 3] {
    let (namespace, name) = key;
    let slot = |own: &str| (namespace.clone(), name.clone(), own.to_owned());
    let mut export = report.spec.export.clone();
    // The export is the member's of the key, whatever its report says it is.
    export.metadata.namespace = Some(namespace.clone());
    export.metadata.name = Some(name.clone());
    let service = report.spec.service.clone().map(|mut service| {
        service.metadata.namespace = Some(namespace.clone());
        service.metadata.name = Some(name.clone());
        (slot(name), Cached::Service(Arc::new(service)))
    });
    let slices = report
        .spec
        .slices
        .iter()
        .filter_map(|s| {
            let own = s.metadata.name.clone()?;
            let slice = EndpointSlice {
                metadata: ObjectMeta {
                    namespace: Some(namespace.clone()),
                    ..s.metadata.clone()
                },
                ..s.clone()
            };
            Some((slot(&own), Cached::Slice(Arc::new(slice))))
        })
        .collect();
    [
        (
            Feed::Exports,
            vec![(slot(name), Cached::Export(Arc::new(export)))],
        ),
        (Feed::Services, service.into_iter().collect()),
        (Feed::SourceSlices, slices),
    ]
}

const REPORT_FEEDS: [Feed; 3] = [Feed::Exports, Feed::Services, Feed::SourceSlices];

fn key_slot(key: &Key) -> BTreeSet<Slot> {
    BTreeSet::from([(key.0.clone(), key.1.clone(), key.1.clone())])
}

impl Reported for ServiceExportReport {
    const KIND: &'static str = "ServiceExportReport";

    fn list(index: &mut MemberIndex, objects: Vec<Self>) -> Touch {
        let mut feeds: [Vec<(Slot, Cached)>; 3] = Default::default();
        for report in &objects {
            let Some(key) = key_of(report) else { continue };
            for (i, (_, entries)) in report_entries(&key, report).into_iter().enumerate() {
                feeds[i].extend(entries);
            }
        }
        let mut touched = BTreeSet::new();
        for (feed, entries) in REPORT_FEEDS.into_iter().zip(feeds) {
            let slots = index.reset(feed, entries);
            touched.extend(
                slots
                    .into_iter()
                    .map(|(ns, group, _)| (ns, group.clone(), group)),
            );
        }
        Touch::Keys(touched)
    }

    fn apply(index: &mut MemberIndex, object: Self) -> Touch {
        let Some(key) = key_of(&object) else {
            return Touch::Keys(BTreeSet::new());
        };
        for (feed, entries) in report_entries(&key, &object) {
            index.replace_key(feed, &key, entries);
        }
        Touch::Keys(key_slot(&key))
    }

    fn delete(index: &mut MemberIndex, object: &Self) -> Touch {
        let Some(key) = key_of(object) else {
            return Touch::Keys(BTreeSet::new());
        };
        for feed in REPORT_FEEDS {
            index.replace_key(feed, &key, Vec::new());
        }
        Touch::Keys(key_slot(&key))
    }
}

/// The member's namespaces and properties, and what it serves, from its report; no report:
/// the member takes no part (its agent does not run multi-cluster services).
fn cluster_entries(index: &mut MemberIndex, report: Option<&ClusterReportSpec>) {
    let terminating = Time(Timestamp::now());
    let namespaces = report
        .into_iter()
        .flat_map(|r| &r.namespaces)
        .map(|ns| {
            let slot = (String::new(), ns.name.clone(), ns.name.clone());
            let namespace = Namespace {
                metadata: ObjectMeta {
                    name: Some(ns.name.clone()),
                    deletion_timestamp: ns.terminating.then(|| terminating.clone()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            };
            (slot, Cached::Namespace(Arc::new(namespace)))
        })
        .collect();
    index.reset(Feed::Namespaces, namespaces);
    let properties = report
        .into_iter()
        .flat_map(|r| &r.properties)
        .map(|(name, value)| {
            let slot = (String::new(), name.clone(), name.clone());
            let property = ClusterProperty {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..ObjectMeta::default()
                },
                spec: ClusterPropertySpec {
                    value: value.clone(),
                },
                status: None,
            };
            (slot, Cached::Property(Arc::new(property)))
        })
        .collect();
    index.reset(Feed::Properties, properties);
    index.set_served(
        Feed::Properties,
        report.is_some_and(|r| r.properties_served),
    );
    index.set_served(Feed::Imports, report.is_some_and(|r| r.mcs_crds));
}

impl Reported for ClusterReport {
    const KIND: &'static str = "ClusterReport";

    fn list(index: &mut MemberIndex, objects: Vec<Self>) -> Touch {
        let report = objects
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(CLUSTER_REPORT_NAME));
        cluster_entries(index, report.map(|r| &r.spec));
        Touch::Everything
    }

    fn apply(index: &mut MemberIndex, object: Self) -> Touch {
        if object.metadata.name.as_deref() == Some(CLUSTER_REPORT_NAME) {
            cluster_entries(index, Some(&object.spec));
        }
        Touch::Everything
    }

    fn delete(index: &mut MemberIndex, object: &Self) -> Touch {
        if object.metadata.name.as_deref() == Some(CLUSTER_REPORT_NAME) {
            cluster_entries(index, None);
        }
        Touch::Everything
    }
}

impl Reported for ServiceImportWork {
    const KIND: &'static str = "ServiceImportWork";

    fn list(index: &mut MemberIndex, objects: Vec<Self>) -> Touch {
        let entries = objects
            .into_iter()
            .filter_map(|w| Some((slot_of(Feed::Works, &w)?, Cached::Work(Arc::new(w)))))
            .collect();
        Touch::Keys(index.reset(Feed::Works, entries))
    }

    fn apply(index: &mut MemberIndex, object: Self) -> Touch {
        let Some(slot) = slot_of(Feed::Works, &object) else {
            return Touch::Keys(BTreeSet::new());
        };
        index.apply(Feed::Works, slot.clone(), Cached::Work(Arc::new(object)));
        Touch::Keys(BTreeSet::from([slot]))
    }

    fn delete(index: &mut MemberIndex, object: &Self) -> Touch {
        let Some(slot) = slot_of(Feed::Works, object) else {
            return Touch::Keys(BTreeSet::new());
        };
        index.delete(Feed::Works, &slot);
        Touch::Keys(BTreeSet::from([slot]))
    }
}

/// Whether the member's agent failed the key's current work.
pub(super) fn failed(view: &View) -> bool {
    view.live
        .work
        .as_ref()
        .and_then(|w| w.status.as_ref())
        .is_some_and(|s| s.result == IMPORT_WORK_FAILED)
}

/// The conditions of the member's ServiceExport as the hub last delivered them.
pub(super) fn live_conditions(view: &View) -> &[Condition] {
    view.live
        .work
        .as_ref()
        .map(|w| w.spec.export_conditions.as_slice())
        .unwrap_or_default()
}

/// Writes the member's work for the key (deletes it when there is nothing to do there),
/// only when it differs from the one the hub holds.
pub(super) async fn deliver(
    ctx: &Context,
    key: &Key,
    view: &View,
    import: Option<&ImportSpec>,
    endpoints: &[(String, Vec<EndpointSlice>)],
    export_conditions: Vec<Condition>,
) -> Result<(), WriteFailed> {
    let (namespace, name) = key;
    let desired = import_work(namespace, name, import, endpoints, export_conditions);
    let work_namespace = cluster_namespace(&view.cluster.name);
    let works: Api<ServiceImportWork> = Api::namespaced(ctx.hub.clone(), &work_namespace);
    let work_name = mcs_object_name(namespace, name);
    let write = Write {
        cluster: &view.cluster,
        kind: "ServiceImportWork",
        status: false,
    };
    let live = view.live.work.as_deref();
    let Some(spec) = desired else {
        return match live {
            Some(_) => delete(&write, &works, &work_name).await,
            None => Ok(()),
        };
    };
    if !spec_needs_write(live.map(|w| &w.spec), &spec) {
        return Ok(());
    }
    let body = json!({
        "apiVersion": ServiceImportWork::api_version(&()),
        "kind": ServiceImportWork::kind(&()),
        "metadata": {
            "name": work_name,
            "namespace": work_namespace,
            "labels": {
                MCS_REPORT_LABEL: view.cluster.name,
                CONTROL_PLANE_LABEL: ctx.control_plane,
            },
        },
        "spec": spec,
    });
    apply(&write, &works, &work_name, &body).await.map(|_| ())
}
