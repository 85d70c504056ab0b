//! Garbage collection of member copies whose federated object is gone ([`hubfed_core::gc`]
//! decides; this module reads, records and acts).
//!
//! The record: one ConfigMap per federated type in the control plane's namespace,
//! `hubfed-leftovers.<federated kind>`, one key per copy that may remain in a cluster that was
//! not ready when its federated object was deleted ([`Leftover`] as JSON). Keys are added and
//! removed with merge patches, so concurrent reconciles never conflict.
//!
//! The pass: for every ready cluster whose cache has listed, each managed copy carrying this
//! control plane's proof of ownership whose federated object is absent from the hub (confirmed
//! by a live read) is deleted with its UID as precondition, or unlabelled when its deletion
//! asked to orphan; a managed copy without proof whose federated object is absent is
//! unlabelled. It runs after every (re)list of a member cache, when a cluster turns Ready,
//! and every [`GC_PERIOD`].
//! The hub's own namespace (the hub joined as a member) is never deleted, only unlabelled, and
//! nothing in the hub's control-plane namespace is touched ([`hubfed_core::gc::guard`]).
//!
//! Between passes, the same task looks at each copy a member watch reports added or changed,
//! with the same rules, within moments: KubeFed's sync controller, too, unlabels a managed
//! object without federated object on the member's watch event. Only a copy whose federated
//! object the hub cache lacks goes further than a cache lookup.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hubfed_api::names::{LEFTOVERS_CONFIGMAP_PREFIX, MANAGED_LABEL};
use hubfed_core::gc::{Collect, HubObject, Leftover, collect, guard, leftover_key, owned_by};
use hubfed_core::hub::{ClusterIdentity, HubNamespace, namespace_role};
use hubfed_core::plan::FederatedObject;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::TypeContext;
use super::member_io::member_api;
use super::members::ManagedCopy;
use crate::clusters::MemberCluster;
use crate::metrics::METRICS;

/// How often every cluster is looked at, besides after each (re)list of its cache.
pub const GC_PERIOD: Duration = Duration::from_secs(300);

fn record_api(ctx: &TypeContext) -> (Api<ConfigMap>, String) {
    let api = Api::namespaced(ctx.shared.hub.clone(), &ctx.shared.kubefed_namespace);
    let name = format!(
        "{LEFTOVERS_CONFIGMAP_PREFIX}{}",
        ctx.federated.kind.to_lowercase()
    );
    (api, name)
}

/// Records that a copy of `object` may remain in each of `clusters`.
pub async fn record_leftovers(
    ctx: &TypeContext,
    object: &FederatedObject,
    clusters: &[String],
    orphan: bool,
) -> Result<(), kube::Error> {
    let uid = object.uid.as_deref().unwrap_or_default();
    let leftover = Leftover {
        namespace: object.namespace.clone(),
        name: object.name.clone(),
        orphan,
    };
    let value = serde_json::to_string(&leftover).unwrap_or_default();
    let data: serde_json::Map<String, Value> = clusters
        .iter()
        .map(|cluster| (leftover_key(cluster, uid), Value::String(value.clone())))
        .collect();
    patch_record(ctx, json!({ "data": data })).await
}

async fn forget_leftover(ctx: &TypeContext, key: &str) -> Result<(), kube::Error> {
    patch_record(ctx, json!({ "data": { key: null } })).await
}

/// Merge-patches the record, creating it first if missing.
async fn patch_record(ctx: &TypeContext, patch: Value) -> Result<(), kube::Error> {
    let (api, name) = record_api(ctx);
    let params = PatchParams::default();
    match api.patch(&name, &params, &Patch::Merge(&patch)).await {
        Ok(_) => return Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e),
    }
    let mut record = ConfigMap::default();
    record.metadata.name = Some(name.clone());
    match api.create(&PostParams::default(), &record).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e),
    }
    api.patch(&name, &params, &Patch::Merge(&patch)).await?;
    Ok(())
}

async fn read_leftovers(ctx: &TypeContext) -> Result<BTreeMap<String, Leftover>, kube::Error> {
    let (api, name) = record_api(ctx);
    let data = api
        .get_opt(&name)
        .await?
        .and_then(|record| record.data)
        .unwrap_or_default();
    Ok(data
        .into_iter()
        .filter_map(|(key, value)| Some((key, serde_json::from_str(&value).ok()?)))
        .collect())
}

/// Collects garbage after every (re)list of a member cache and every [`GC_PERIOD`], until
/// `stop`. `federated` is the hub cache of the type's federated objects (loaded).
pub async fn run(ctx: Arc<TypeContext>, federated: Store<DynamicObject>, stop: CancellationToken) {
    let mut relisted = ctx.members.relisted();
    let mut registry = ctx.shared.pool.subscribe();
    let mut ready = ready_clusters(&ctx);
    let mut ticks = tokio::time::interval(GC_PERIOD);
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = ticks.tick() => {}
            changed = relisted.changed() => if changed.is_err() { break },
            () = ctx.members.copies_changed() => {
                collect_changed(&ctx, &federated).await;
                continue;
            }
            changed = registry.changed() => {
                if changed.is_err() {
                    break;
                }
                // A cluster back to Ready: its cache may have relisted while it was not.
                let now = ready_clusters(&ctx);
                let back = now.iter().any(|name| !ready.contains(name));
                ready = now;
                if !back {
                    continue;
                }
            }
        }
        collect_garbage(&ctx, &federated).await;
    }
}

fn ready_clusters(ctx: &TypeContext) -> Vec<String> {
    let clusters = ctx.shared.pool.clusters();
    clusters
        .iter()
        .filter(|c| c.ready)
        .map(|c| c.name.clone())
        .collect()
}

async fn collect_garbage(ctx: &TypeContext, federated: &Store<DynamicObject>) {
    let Some(plane) = ctx.shared.control_plane().await.map(str::to_owned) else {
        return;
    };
    let mut records = match read_leftovers(ctx).await {
        Ok(records) => records,
        Err(e) => {
            warn!(kind = %ctx.federated.kind, error = %e, "cannot read the leftover record");
            return;
        }
    };
    let (clusters, identities) = clusters_and_identities(ctx).await;
    debug!(kind = %ctx.federated.kind, records = records.len(), "garbage collection pass");
    for cluster in clusters.iter().filter(|c| c.ready) {
        let (Some(client), Some(copies)) =
            (&cluster.client, ctx.members.managed_copies(&cluster.name))
        else {
            continue;
        };
        let member = Member {
            name: &cluster.name,
            client,
            identity: identities.get(&cluster.name),
        };
        for copy in copies {
            collect_copy(ctx, federated, &plane, &member, &copy, &mut records).await;
        }
    }
    forget_settled(ctx, &mut records).await;
    export_leftovers(ctx, &records);
}

/// Looks at the copies member watches reported added or changed since the last look whose
/// federated object the hub cache lacks, as the pass would.
async fn collect_changed(ctx: &TypeContext, federated: &Store<DynamicObject>) {
    let changed = ctx.members.take_changed_copies();
    let absent: Vec<_> = changed
        .into_iter()
        .filter(|(_, copy)| {
            federated_ref(ctx, copy)
                .and_then(|r| federated.get(&r))
                .is_none()
        })
        .collect();
    if absent.is_empty() {
        return;
    }
    let Some(plane) = ctx.shared.control_plane().await.map(str::to_owned) else {
        return;
    };
    // A copy with this control plane's proof is deleted or unlabelled as its deletion record
    // says: while the record cannot be read, it waits for the next event or pass.
    let owned = |copy: &ManagedCopy| owned_by(&plane, copy.owner.as_deref()).is_some();
    let any_owned = absent.iter().any(|(_, copy)| owned(copy));
    let (mut records, records_read) = if any_owned {
        match read_leftovers(ctx).await {
            Ok(records) => (records, true),
            Err(e) => {
                warn!(kind = %ctx.federated.kind, error = %e, "cannot read the leftover record");
                (BTreeMap::new(), false)
            }
        }
    } else {
        (BTreeMap::new(), true)
    };
    let (clusters, identities) = clusters_and_identities(ctx).await;
    for (cluster, copy) in &absent {
        let Some(client) = clusters
            .iter()
            .find(|c| c.ready && &c.name == cluster)
            .and_then(|c| c.client.as_ref())
        else {
            continue;
        };
        if !records_read && owned(copy) {
            continue;
        }
        let member = Member {
            name: cluster,
            client,
            identity: identities.get(cluster),
        };
        collect_copy(ctx, federated, &plane, &member, copy, &mut records).await;
    }
    if any_owned && records_read {
        export_leftovers(ctx, &records);
    }
}

/// The registry's clusters and, by name, which of them are the hub itself.
async fn clusters_and_identities(
    ctx: &TypeContext,
) -> (Vec<Arc<MemberCluster>>, BTreeMap<String, ClusterIdentity>) {
    let clusters = ctx.shared.pool.clusters();
    let (identities, _) = ctx
        .shared
        .hub_identities
        .resolve(&ctx.shared.hub, &clusters)
        .await;
    (clusters, identities)
}

/// A ready member cluster, as garbage collection reaches it.
struct Member<'a> {
    name: &'a str,
    client: &'a kube::Client,
    /// Whether it is the hub itself.
    identity: Option<&'a ClusterIdentity>,
}

/// Decides about one managed copy in `member` ([`decide`], [`guarded`]) and carries it out
/// ([`act`]); forgets the copy's deletion record in `records` once it is done.
async fn collect_copy(
    ctx: &TypeContext,
    federated: &Store<DynamicObject>,
    plane: &str,
    member: &Member<'_>,
    copy: &ManagedCopy,
    records: &mut BTreeMap<String, Leftover>,
) {
    // Copies without this control plane's proof have no deletion record.
    let key = owned_by(plane, copy.owner.as_deref()).map(|uid| leftover_key(member.name, uid));
    let record = key.as_ref().and_then(|key| records.get(key));
    let action = decide(ctx, federated, plane, copy, record).await;
    let action = guarded(ctx, member.identity, copy, action).await;
    debug!(cluster = %member.name, kind = %ctx.target.kind, name = %copy.name,
        namespace = ?copy.namespace, owner = ?copy.owner, recorded = record.is_some(),
        ?action, "garbage collection looked at a copy");
    if action == Collect::Keep {
        return;
    }
    let recorded = record.is_some();
    let api = member_api(ctx, member.client.clone(), copy.namespace.as_deref());
    if act(ctx, &api, member.name, copy, action).await
        && recorded
        && let Some(key) = &key
    {
        match forget_leftover(ctx, key).await {
            Ok(()) => {
                records.remove(key);
            }
            Err(e) => warn!(key, error = %e, "cannot update the leftover record"),
        }
    }
}

/// The number of deletion records, as the `leftovers` gauge.
fn export_leftovers(ctx: &TypeContext, records: &BTreeMap<String, Leftover>) {
    METRICS
        .leftovers
        .with_label_values(&[&ctx.federated.kind.to_lowercase()])
        .set(i64::try_from(records.len()).unwrap_or(i64::MAX));
}

/// [`collect`], with a live read of the hub before acting on a cached absence.
async fn decide(
    ctx: &TypeContext,
    federated: &Store<DynamicObject>,
    plane: &str,
    copy: &ManagedCopy,
    record: Option<&Leftover>,
) -> Collect {
    let owner = copy.owner.as_deref();
    let cached = federated_ref(ctx, copy).and_then(|r| federated.get(&r));
    let hub = match &cached {
        Some(object) => HubObject::Present {
            uid: object.metadata.uid.as_deref().unwrap_or_default(),
        },
        None => HubObject::Absent,
    };
    let first = collect(plane, owner, hub, false, record);
    if first != Collect::ConfirmAbsent {
        return first;
    }
    // A namespace's FederatedNamespace lives in that namespace (`<ns>/<ns>`).
    let namespace = if ctx.target.is_namespace() {
        Some(&copy.name)
    } else {
        copy.namespace.as_ref()
    };
    let api: Api<DynamicObject> = match (namespace, ctx.ftc.federated_namespaced()) {
        (Some(ns), true) => Api::namespaced_with(ctx.shared.hub.clone(), ns, &ctx.federated),
        _ => Api::all_with(ctx.shared.hub.clone(), &ctx.federated),
    };
    let live = match api.get_metadata_opt(&copy.name).await {
        Ok(None) => HubObject::Absent,
        Ok(Some(_)) | Err(_) => HubObject::Unknown,
    };
    collect(plane, owner, live, true, record)
}

/// [`guard`]: the hub's own namespace and control plane are never collected. Reads the hub's
/// namespace of the copy's name before a namespace is deleted.
async fn guarded(
    ctx: &TypeContext,
    identity: Option<&ClusterIdentity>,
    copy: &ManagedCopy,
    action: Collect,
) -> Collect {
    let in_hub_control_plane = copy.namespace.as_deref()
        == Some(ctx.shared.kubefed_namespace.as_str())
        && identity != Some(&ClusterIdentity::NotHub);
    let role = if action == Collect::Delete && ctx.target.is_namespace() {
        let api: Api<Namespace> = Api::all(ctx.shared.hub.clone());
        let read = api.get_metadata_opt(&copy.name).await;
        let hub_namespace = match &read {
            Ok(None) => HubNamespace::Absent,
            Ok(Some(found)) => HubNamespace::Uid(found.metadata.uid.as_deref().unwrap_or("")),
            Err(_) => HubNamespace::Unreadable("the read failed"),
        };
        Some(namespace_role(identity, copy.uid.as_deref(), hub_namespace))
    } else {
        None
    };
    let guarded = guard(action, role.as_ref(), in_hub_control_plane);
    if guarded != action {
        info!(kind = %ctx.target.kind, name = %copy.name, namespace = ?copy.namespace, role = ?role,
            "garbage collection: the hub's own namespace or control plane is not deleted");
    }
    guarded
}

/// The federated object a copy belongs to: same name and namespace, or for a namespace, the
/// FederatedNamespace `<ns>/<ns>`.
fn federated_ref(ctx: &TypeContext, copy: &ManagedCopy) -> Option<ObjectRef<DynamicObject>> {
    let r = ObjectRef::new_with(&copy.name, ctx.federated.clone());
    Some(if ctx.target.is_namespace() {
        r.within(&copy.name)
    } else {
        match &copy.namespace {
            Some(ns) => r.within(ns),
            None => r,
        }
    })
}

/// Deletes or unlabels one copy; whether it is done (or already gone).
async fn act(
    ctx: &TypeContext,
    api: &Api<DynamicObject>,
    cluster: &str,
    copy: &ManagedCopy,
    action: Collect,
) -> bool {
    let (verb, result) = match action {
        Collect::Delete => {
            // The cache may be behind: an orphaning deletion unlabels its copies just before
            // its finalizer goes. Delete only what is, read live, still the managed copy seen,
            // and nothing changed since that read.
            let live = match api.get_metadata_opt(&copy.name).await {
                Ok(Some(live)) => live,
                Ok(None) => return true,
                Err(e) => {
                    warn!(cluster, name = %copy.name, error = %e, "garbage collection: cannot read the copy");
                    return false;
                }
            };
            let managed = live
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(MANAGED_LABEL));
            if managed.map(String::as_str) != Some("true") || live.metadata.uid != copy.uid {
                return false;
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: copy.uid.clone(),
                    resource_version: live.metadata.resource_version,
                }),
                ..DeleteParams::default()
            };
            ("delete", api.delete(&copy.name, &params).await.map(drop))
        }
        Collect::Unlabel => {
            let patch = json!({"metadata": {"labels": {MANAGED_LABEL: null}}});
            let params = PatchParams::default();
            let patched = api.patch(&copy.name, &params, &Patch::Merge(&patch)).await;
            ("unlabel", patched.map(drop))
        }
        Collect::Keep | Collect::ConfirmAbsent => return false,
    };
    match result {
        Ok(()) => {
            info!(cluster, kind = %ctx.target.kind, name = %copy.name, namespace = ?copy.namespace, action = verb,
                "garbage collected a copy whose federated object is gone");
            METRICS
                .gc_collected_total
                .with_label_values(&[&ctx.federated.kind.to_lowercase(), cluster, verb])
                .inc();
            true
        }
        Err(kube::Error::Api(e)) if e.code == 404 => true,
        Err(e) => {
            warn!(cluster, kind = %ctx.target.kind, name = %copy.name, error = %e, "garbage collection failed");
            false
        }
    }
}

/// Forgets records of copies that are gone: the cluster is ready, its cache has listed, and it
/// holds no managed copy of that name.
async fn forget_settled(ctx: &TypeContext, records: &mut BTreeMap<String, Leftover>) {
    let clusters = ctx.shared.pool.clusters();
    let mut settled = Vec::new();
    for (key, leftover) in records.iter() {
        // `<cluster>.<uid>`: UIDs hold no dots, cluster names may.
        let Some((cluster, _)) = key.rsplit_once('.') else {
            continue;
        };
        if !clusters.iter().any(|c| c.name == cluster) {
            // Unjoined: nothing will collect there any more.
            settled.push(key.clone());
            continue;
        }
        if !clusters.iter().any(|c| c.ready && c.name == cluster) {
            continue;
        }
        let Some(copies) = ctx.members.managed_copies(cluster) else {
            continue;
        };
        let namespaced = ctx.target.namespaced;
        let present = copies
            .iter()
            .any(|c| c.name == leftover.name && (!namespaced || c.namespace == leftover.namespace));
        if !present {
            settled.push(key.clone());
        }
    }
    for key in settled {
        match forget_leftover(ctx, &key).await {
            Ok(()) => {
                debug!(key, "leftover record settled");
                records.remove(&key);
            }
            Err(e) => warn!(key, error = %e, "cannot update the leftover record"),
        }
    }
}
