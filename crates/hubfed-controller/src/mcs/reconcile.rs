//! One key's reconcile: its inputs from the caches, the decisions, then the writes.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use hubfed_api::mcs::{ServiceExport, ServiceImport};
use hubfed_api::pull_mcs::ServiceImportWork;
use hubfed_core::mcs::{
    EndpointFate, ExportInput, NamespaceState, SourcePresence, aggregate, derived_service_name,
    import_members, refused_export_conditions, source_endpoints,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use tracing::debug;

use super::ids::{self, Part};
use super::import::Target;
use super::index::{Cached, Feed, Key};
use super::write::WriteFailed;
use super::{Context, Member, export_status, import, pull};
use crate::clusters::MemberCluster;

/// When a key waits for a Ready member's first lists.
const LISTS_PENDING_RETRY: Duration = Duration::from_secs(1);
/// When a key is reconciled again after a failed write.
const WRITE_RETRY: Duration = Duration::from_secs(5);

/// One member's part in one key's reconcile: what its caches hold of the key.
pub(super) struct View {
    pub cluster: Arc<MemberCluster>,
    pub member: Arc<Member>,
    pub part: Option<Part>,
    pub listed: bool,
    pub lacks_crds: bool,
    pub export: Option<Arc<ServiceExport>>,
    pub service: Option<Arc<Service>>,
    pub sources: Vec<EndpointSlice>,
    pub namespace: NamespaceState,
    pub live: Live,
}

/// What this control plane wrote into the member for the key, as cached.
#[derive(Default)]
pub(super) struct Live {
    pub import: Option<Arc<ServiceImport>>,
    /// The Service under the derived name, if any (whose it is is checked before use).
    pub service: Option<Arc<Service>>,
    pub slices: Vec<Arc<EndpointSlice>>,
    /// A pull member's import work in the hub.
    pub work: Option<Arc<ServiceImportWork>>,
}

impl View {
    /// The member's cluster id, when it takes part.
    pub(super) fn id(&self) -> Option<&str> {
        match &self.part {
            Some(Part::Member { id, .. }) => Some(id),
            _ => None,
        }
    }

    /// Whether the hub reaches the member: through its client, or a pull member's works.
    fn reached(&self) -> bool {
        self.cluster.ready && (self.cluster.client.is_some() || self.cluster.pull)
    }

    /// Where a push member's share of the key is written.
    pub(super) fn target<'a>(&'a self, control_plane: &'a str) -> Target<'a> {
        Target {
            control_plane,
            cluster: &self.cluster,
            live: &self.live,
        }
    }

    /// The refusal of a reachable member refused a part in the ClusterSet: what hubfed wrote
    /// into it is withdrawn and its exports say why.
    pub(super) fn refusal(&self) -> Option<(&'static str, &str)> {
        let reachable = self.reached() && self.listed && !self.lacks_crds;
        match &self.part {
            Some(Part::Refused { reason, message }) if reachable => Some((reason, message)),
            _ => None,
        }
    }

    /// Whether the member is written to now.
    pub(super) fn writable(&self) -> bool {
        self.reached() && self.listed && !self.lacks_crds && self.id().is_some()
    }
}

/// Reconciles `key`, queuing it again when its outcome says when.
pub(super) async fn reconcile(ctx: Arc<Context>, key: Key) {
    if let Some(delay) = reconcile_key(&ctx, &key).await {
        ctx.queue.add_after(key, delay, &ctx.shutdown);
    }
}

/// observe → aggregate → write into every member → the exports' conditions; returns when
/// to look again.
async fn reconcile_key(ctx: &Context, key: &Key) -> Option<Duration> {
    let members = ctx.members();
    let parts = ids::decide(&members, &ctx.kubefed_namespace);
    let views: Vec<View> = members
        .into_iter()
        .map(|(cluster, member)| {
            let part = parts.get(&member.name).cloned();
            observe(cluster, member, part, key)
        })
        .collect();
    let untouched = views.iter().all(|v| {
        v.export.is_none()
            && v.live.import.is_none()
            && v.live.slices.is_empty()
            && v.live.work.is_none()
    });
    if untouched {
        ctx.set_exported(key, false);
        return None;
    }
    if views.iter().any(|v| v.cluster.ready && !v.listed) {
        return Some(LISTS_PENDING_RETRY);
    }
    let now = Time(Timestamp::now());
    let (sources, mut requeue) = contributing(ctx, &views, &now);
    let inputs: Vec<ExportInput<'_>> = sources
        .iter()
        .map(|s| ExportInput {
            cluster: s.id,
            created: &s.created,
            service: views[s.view]
                .service
                .as_ref()
                .and_then(|svc| svc.spec.as_ref()),
        })
        .collect();
    let decided = aggregate(&inputs);
    let writable: Vec<&View> = views.iter().filter(|v| v.writable()).collect();
    let admitted = import_members(
        writable
            .iter()
            .filter_map(|v| v.id().map(|id| (id, v.namespace))),
    );
    let endpoints: Vec<(String, Vec<EndpointSlice>)> = match &decided.import {
        Some(spec) => sources
            .iter()
            .filter(|s| spec.clusters.iter().any(|c| c == s.id))
            .map(|s| (s.id.to_owned(), views[s.view].sources.clone()))
            .collect(),
        None => Vec::new(),
    };
    let wanted = |view: &View| {
        decided.import.as_ref().filter(|_| {
            view.id()
                .is_some_and(|id| admitted.import.iter().any(|a| a == id))
        })
    };
    let (pulled, pushed): (Vec<&View>, Vec<&View>) =
        writable.iter().copied().partition(|v| v.cluster.pull);
    let writes = pushed.iter().map(|view| async {
        let target = view.target(&ctx.control_plane);
        import::converge(key, &target, wanted(view), &endpoints).await
    });
    let results = join_all(writes).await;
    // A pull member counts once its work is delivered, unless its agent failed it.
    let works_ok = pulled.iter().all(|v| !pull::failed(v));
    let before = results.iter().all(Result::is_ok) && works_ok && admitted.unknown.is_empty();
    let deliveries = pulled.iter().map(|view| {
        let live = pull::live_conditions(view);
        let conditions =
            export_status::desired(view, &decided, before, live, &now).unwrap_or_default();
        pull::deliver(ctx, key, view, wanted(view), &endpoints, conditions)
    });
    let delivered = join_all(deliveries).await;
    let written = results.iter().chain(&delivered).all(Result::is_ok);
    let everywhere = written && works_ok && admitted.unknown.is_empty();
    // A member whose writes just failed (it may not answer) gets no status write either.
    let answering: Vec<&View> = pushed
        .iter()
        .zip(&results)
        .filter(|(_, result)| result.is_ok())
        .map(|(view, _)| *view)
        .collect();
    let mut statuses = export_status::write(key, &answering, &decided, everywhere, &now).await;
    for (view, refusal) in views.iter().filter_map(|v| v.refusal().map(|r| (v, r))) {
        let (withdrawn, said) = if view.cluster.pull {
            let conditions = view
                .export
                .as_ref()
                .map(|_| refused_export_conditions(refusal.1, pull::live_conditions(view), &now))
                .unwrap_or_default();
            (
                pull::deliver(ctx, key, view, None, &[], conditions).await,
                Ok(()),
            )
        } else {
            let target = view.target(&ctx.control_plane);
            let withdrawn = import::converge(key, &target, None, &[]).await;
            let said = export_status::refused(key, view, refusal.0, refusal.1, &now).await;
            (withdrawn, said)
        };
        if withdrawn.is_err() || said.is_err() {
            statuses = Err(WriteFailed);
        }
    }
    ctx.set_exported(key, decided.import.is_some());
    debug!(
        namespace = %key.0,
        name = %key.1,
        exporters = inputs.len(),
        importers = admitted.import.len(),
        written,
        "MCS reconcile"
    );
    if !written || statuses.is_err() {
        requeue = Some(requeue.map_or(WRITE_RETRY, |r| r.min(WRITE_RETRY)));
    }
    requeue
}

/// A valid-looking export taking part: its view, cluster id and creation time.
struct Source<'a> {
    view: usize,
    id: &'a str,
    created: Time,
}

/// The exports whose endpoints stay (online members, offline ones within the TTL), and the
/// earliest time an offline member's endpoints are to be withdrawn.
fn contributing<'a>(
    ctx: &Context,
    views: &'a [View],
    now: &Time,
) -> (Vec<Source<'a>>, Option<Duration>) {
    let mut requeue: Option<Duration> = None;
    let mut sources = Vec::new();
    for (index, view) in views.iter().enumerate() {
        let (Some(export), Some(id)) = (view.export.as_ref(), view.id()) else {
            continue;
        };
        if view.lacks_crds {
            continue;
        }
        let since = view
            .cluster
            .ready_since
            .and_then(|s| Timestamp::from_second(s).ok())
            .map(Time);
        let presence = match (&since, view.cluster.ready) {
            (_, true) => SourcePresence::Online,
            (Some(since), false) => SourcePresence::Offline { since },
            (None, false) => SourcePresence::Online,
        };
        match source_endpoints(presence, now, ctx.settings.endpoint_ttl) {
            EndpointFate::Withdraw => continue,
            EndpointFate::KeepUntil(until) => {
                let wait = until.0.duration_since(now.0);
                let wait =
                    Duration::try_from(wait).unwrap_or(Duration::ZERO) + Duration::from_millis(500);
                requeue = Some(requeue.map_or(wait, |r| r.min(wait)));
            }
            EndpointFate::Keep => {}
        }
        let created = export
            .metadata
            .creation_timestamp
            .clone()
            .unwrap_or_else(|| now.clone());
        sources.push(Source {
            view: index,
            id,
            created,
        });
    }
    (sources, requeue)
}

/// What `member`'s caches hold of `key`.
fn observe(
    cluster: Arc<MemberCluster>,
    member: Arc<Member>,
    part: Option<Part>,
    key: &Key,
) -> View {
    let index = member.index.lock();
    let (namespace, name) = key;
    let export = match index.get(Feed::Exports, key, name) {
        Some(Cached::Export(e)) => Some(Arc::clone(e)),
        _ => None,
    };
    let service = match index.get(Feed::Services, key, name) {
        Some(Cached::Service(s)) => Some(Arc::clone(s)),
        _ => None,
    };
    let sources = index
        .of_key(Feed::SourceSlices, key)
        .filter_map(|(_, c)| match c {
            Cached::Slice(s) => Some(EndpointSlice::clone(s)),
            _ => None,
        })
        .collect();
    let live = Live {
        import: match index.get(Feed::Imports, key, name) {
            Some(Cached::Import(i)) => Some(Arc::clone(i)),
            _ => None,
        },
        service: match index.get(Feed::Services, key, &derived_service_name(namespace, name)) {
            Some(Cached::Service(s)) => Some(Arc::clone(s)),
            _ => None,
        },
        slices: index
            .of_key(Feed::DerivedSlices, key)
            .filter_map(|(_, c)| match c {
                Cached::Slice(s) => Some(Arc::clone(s)),
                _ => None,
            })
            .collect(),
        work: index.of_key(Feed::Works, key).find_map(|(_, c)| match c {
            Cached::Work(w) => Some(Arc::clone(w)),
            _ => None,
        }),
    };
    let view = View {
        part,
        listed: index.listed(),
        lacks_crds: index.lacks_mcs_crds(),
        namespace: index.namespace(namespace),
        export,
        service,
        sources,
        live,
        cluster,
        member: Arc::clone(&member),
    };
    drop(index);
    view
}
