//! One sync controller per enabled FederatedTypeConfig: its watches (the federated objects,
//! their FederatedNamespaces, the member copies), its context, and the kube-runtime
//! controller that calls [`super::reconcile::reconcile`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use hubfed_api::federatedtypeconfig::FederatedTypeConfig;
use hubfed_api::work::{WORK_CLUSTER_LABEL, WORK_KIND_LABEL, Work};
use hubfed_core::burst::EventBudget;
use hubfed_core::desired::TargetType;
use kube::ResourceExt as _;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::controller::Controller;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::members::MemberWatches;
use super::objects::store_is_behind;
use super::{AppliedMap, LatencyTracker};
use super::{
    LAST_APPLIED_ANNOTATION, Shared, TypeContext, deletions, gc, observe, queue, reconcile,
};
use crate::events::reporter;
use crate::watch::{Deletions, changes, each_event, quiet_while_unserved, scoped_with, settled};

/// How long a sync controller waits for its works to list before it starts without them.
const WORK_CACHE_GRACE: Duration = Duration::from_secs(30);

/// Returns once the caches plans read have loaded. Never plan from caches that have not: a
/// FederatedNamespace not yet seen would read as "namespace not federated" and the plan would
/// delete the member objects; a PropagatedVersion not yet seen would re-apply what is already
/// in place.
async fn caches_loaded(ctx: &TypeContext, shared: &Shared) -> anyhow::Result<()> {
    if let Some(fns) = &ctx.federated_namespaces {
        // This task is the only waiter on its own FederatedNamespace store.
        fns.wait_until_ready()
            .await
            .map_err(|e| anyhow::anyhow!("the FederatedNamespace cache stopped: {e}"))?;
    }
    // This task is the only waiter on its type's work store (loaded at once, empty, when the
    // Work CRD is not installed). Works that cannot be listed (RBAC without works, a hub that
    // does not answer) must not stop push members' sync: after a
    // while the controller starts without them, and pull members' works are rewritten as
    // their plans ask (nothing is deleted on a work not seen).
    let works = tokio::time::timeout(WORK_CACHE_GRACE, ctx.works.store.wait_until_ready());
    match works.await {
        Ok(ready) => ready.map_err(|e| anyhow::anyhow!("the Work cache stopped: {e}"))?,
        Err(_) => {
            warn!(kind = %ctx.federated.kind, "works cannot be listed yet: pull-mode members are served from an empty cache until they can")
        }
    }
    let mut hub_caches = shared.hub_caches_ready.clone();
    hub_caches
        .wait_for(|ready| *ready)
        .await
        .map(drop)
        .map_err(|_| anyhow::anyhow!("the version caches stopped"))
}

/// Watches the FederatedNamespaces (in the control plane's namespace when it is namespaced)
/// and queues every federated object of `fed` (store, type) in a namespace whose
/// FederatedNamespace changed: its placement bounds theirs. Returns their cache.
fn watch_federated_namespaces(
    shared: &Shared,
    fns: &ApiResource,
    (fed_store, fed_ar): (Store<DynamicObject>, ApiResource),
    trigger_tx: mpsc::UnboundedSender<ObjectRef<DynamicObject>>,
    stop: CancellationToken,
) -> Store<DynamicObject> {
    let api = scoped_with(&shared.hub, shared.target_namespace(), fns);
    let writer = reflector::store::Writer::new(fns.clone());
    let reader = writer.as_reader();
    let tx = trigger_tx;
    let stream =
        reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    let stream = settled(stream, reader.clone(), Deletions::Include);
    tokio::spawn(async move {
        each_event(stream, &stop, |item| match item {
            Ok(fns) => {
                let Some(ns) = fns.metadata.namespace.clone() else {
                    return;
                };
                for obj in fed_store.state() {
                    if obj.metadata.namespace.as_deref() == Some(ns.as_str())
                        && let Some(name) = obj.metadata.name.clone()
                    {
                        let r = ObjectRef::new_with(&name, fed_ar.clone()).within(&ns);
                        queue(&tx, r, &fed_ar.kind.to_lowercase());
                    }
                }
            }
            Err(e) => crate::watch::log_watch_error!(e, "FederatedNamespace watch error"),
        })
        .await;
    });
    reader
}

/// Watches this type's works for pull-mode members (by their kind label) and queues the
/// federated object of every work that changes: an agent's report is the pull member's
/// watch event. Returns their cache.
fn watch_works(
    shared: &Shared,
    fed_ar: &ApiResource,
    trigger_tx: mpsc::UnboundedSender<ObjectRef<DynamicObject>>,
    stop: CancellationToken,
) -> Store<Work> {
    let api: Api<Work> = Api::all(shared.hub.clone());
    let kind = fed_ar.kind.to_lowercase();
    let config = watcher::Config::default().labels(&format!("{WORK_KIND_LABEL}={kind}"));
    let (reader, writer) = reflector::store();
    // Lean: the works' managedFields are never read.
    let works = watcher(api, config).modify(|work| {
        work.metadata.managed_fields = None;
    });
    // The Work CRD may not be installed (a hub taken over from KubeFed): then the cache is
    // empty and loaded, and the watch waits for the CRD quietly (`crate::hub_crds`).
    let works = quiet_while_unserved(works, "Work".to_owned());
    let stream = reflector::reflector(writer, works).default_backoff();
    let stream = settled(stream, reader.clone(), Deletions::Include);
    let fed_ar = fed_ar.clone();
    tokio::spawn(async move {
        each_event(stream, &stop, |item| match item {
            Ok(work) => {
                let source = &work.spec.source;
                let r = ObjectRef::new_with(&source.name, fed_ar.clone());
                let r = match &source.namespace {
                    Some(ns) => r.within(ns),
                    None => r,
                };
                queue(&trigger_tx, r, &kind);
            }
            Err(e) => crate::watch::log_watch_error!(e, "Work watch error"),
        })
        .await;
    });
    reader
}

/// Every 10 s: the works whose federated object is gone (its last reconcile could not settle
/// them, e.g. a label removal the agent had not carried out yet) are settled
/// ([`hubfed_core::pull::orphaned_work_fate`]).
async fn sweep_works(
    ctx: Arc<TypeContext>,
    federated: Store<DynamicObject>,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(Duration::from_secs(10)) => {}
        }
        for work in ctx.works.store.state() {
            let source = &work.spec.source;
            let r = ObjectRef::new_with(&source.name, ctx.federated.clone());
            let r = match &source.namespace {
                Some(ns) => r.within(ns),
                None => r,
            };
            if federated.get(&r).is_some() {
                continue;
            }
            let fate = hubfed_core::pull::orphaned_work_fate(&work);
            let Some(cluster) = work.labels().get(WORK_CLUSTER_LABEL).cloned() else {
                continue;
            };
            let object = hubfed_core::plan::FederatedObject {
                name: source.name.clone(),
                namespace: source.namespace.clone(),
                ..Default::default()
            };
            if let Err(e) = super::deliver::carry_out(&ctx, &object, &cluster, &work, fate).await {
                warn!(work = %work.name_any(), error = %e, "settling a work of a deleted object failed");
            }
        }
    }
}

/// Federated objects per page of the (re)list that fills their cache. A page is read whole
/// before it is decoded: at kube's default of 500, a page of templates near the ~1.5 MB an
/// object can hold would be most of a gigabyte, read and then decoded (heaptrack: the
/// largest single allocation of a cold start of 250 objects of 900 KB was one type's list
/// body, 100 MB). 50 bounds a page at ~75 MB and costs a list of 10,000 small objects 200
/// requests instead of 20.
const FEDERATED_LIST_PAGE: u32 = 50;

/// The kube-runtime controller over one type's federated objects, their cache, and whether
/// its first list completed (a kube-runtime controller stopped before that never finishes
/// stopping: it holds its queue until the cache loads, and the watch that would load it has
/// stopped). The objects of the first list go to `event_budget`: a start over many objects is
/// one batch of Events ([`hubfed_core::burst`]).
fn federated_controller(
    shared: &Shared,
    ftc: &FederatedTypeConfig,
    federated: &ApiResource,
    event_budget: &Arc<parking_lot::Mutex<EventBudget>>,
) -> (
    Controller<DynamicObject>,
    Store<DynamicObject>,
    Arc<std::sync::atomic::AtomicBool>,
) {
    let hub = shared.hub.clone();
    let fed_api: Api<DynamicObject> = match shared.target_namespace() {
        Some(ns) if ftc.federated_namespaced() => Api::namespaced_with(hub, ns, federated),
        _ => Api::all_with(hub, federated),
    };
    // The federated objects' cache, lean: their managedFields (a JSON tree of every template
    // field, per writer) and kubectl's last-applied copy of the whole object are never read.
    let writer = reflector::store::Writer::new(federated.clone());
    let store = writer.as_reader();
    let listed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let objects = reflector::reflector(
        writer,
        watcher(
            fed_api,
            watcher::Config::default().page_size(FEDERATED_LIST_PAGE),
        )
        .modify(|object| {
            object.metadata.managed_fields = None;
            if let Some(annotations) = object.metadata.annotations.as_mut() {
                annotations.remove(LAST_APPLIED_ANNOTATION);
            }
            // Spec and status as JSON text: a third of the controller's memory otherwise.
            super::packed_fields::pack(object);
        })
        // Retried here, not by the controller: its backoff would pause every trigger.
        .default_backoff(),
    )
    .inspect({
        let listed = Arc::clone(&listed);
        let kind = federated.kind.clone();
        let (store, event_budget) = (store.clone(), Arc::clone(event_budget));
        move |event| match event {
            Ok(watcher::Event::Init) => debug!(kind = %kind, "listing the federated objects"),
            Ok(watcher::Event::InitDone) => {
                debug!(kind = %kind, "federated objects listed");
                if !listed.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    let objects = store
                        .state()
                        .iter()
                        .map(|o| super::start_key(o))
                        .collect::<Vec<_>>();
                    event_budget
                        .lock()
                        .started_with(objects, std::time::Instant::now());
                }
            }
            Ok(_) => {}
            Err(e) => {
                crate::watch::log_watch_error!(e, kind = %kind, "federated objects' watch error")
            }
        }
    });
    // Logged above.
    let objects = settled(objects, store.clone(), Deletions::Skip)
        .filter_map(|item| std::future::ready(item.ok()));
    let controller = Controller::for_shared_stream_with(objects, store.clone(), federated.clone())
        .with_config(
            kube::runtime::controller::Config::default()
                .concurrency(shared.reconcile_concurrency)
                // No debounce: a change is reconciled at once. A 20 ms debounce delayed every
                // propagation by that much and coalesced nothing (the same 4,69x reconciles in
                // a cold start of 2,000 objects; docs/benchmarks.md).
                .debounce(Duration::ZERO),
        );
    (controller, store, listed)
}

/// Runs the sync controller of one FTC until `stop` is cancelled.
pub async fn run_type(
    shared: Arc<Shared>,
    ftc: FederatedTypeConfig,
    federated_namespace: Option<ApiResource>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let federated = ftc.spec.federated_type.to_dynamic();
    let target_resource = ftc.spec.target_type.to_dynamic();
    let target = TargetType {
        kind: ftc.spec.target_type.kind.clone(),
        group: ftc.spec.target_type.group.clone(),
        version: ftc.spec.target_type.version.clone(),
        namespaced: ftc.target_namespaced(),
    };
    let (trigger_tx, trigger_rx) = mpsc::unbounded_channel::<ObjectRef<DynamicObject>>();
    let event_budget = Arc::new(parking_lot::Mutex::new(EventBudget::default()));
    let (controller, store, listed) =
        federated_controller(&shared, &ftc, &federated, &event_budget);

    // FederatedNamespaces: their placement bounds every namespaced object in them.
    let federated_namespaces = match (&federated_namespace, target.namespaced) {
        (Some(fns), true) => Some(watch_federated_namespaces(
            &shared,
            fns,
            (store.clone(), federated.clone()),
            trigger_tx.clone(),
            stop.clone(),
        )),
        _ => None,
    };

    let works = watch_works(&shared, &federated, trigger_tx.clone(), stop.clone());
    let collect_status = shared.collects_status(&ftc);
    let members = MemberWatches::new(
        Arc::clone(&shared),
        target_resource.clone(),
        target.clone(),
        federated.clone(),
        trigger_tx.clone(),
        collect_status,
    );
    let members_task = tokio::spawn(members.clone().run(stop.clone()));
    tokio::spawn(deletions::report_waiting_deletions(
        store.clone(),
        federated.kind.to_lowercase(),
        stop.clone(),
    ));

    let reporter = reporter(format!("{}-controller", federated.kind.to_lowercase()));
    let ctx = Arc::new(TypeContext {
        recorder: Recorder::new(shared.hub.clone(), reporter),
        shared: Arc::clone(&shared),
        ftc,
        federated: federated.clone(),
        target_resource,
        target,
        federated_namespace,
        federated_namespaces,
        members,
        works: super::deliver::PullWorks::new(works),
        applied: AppliedMap::default(),
        latency: parking_lot::Mutex::new(LatencyTracker::default()),
        objects: super::objects::ObjectIndex::default(),
        collect_status,
        detached: parking_lot::Mutex::new(HashMap::new()),
        status_writes: super::status_writes::StatusWrites::new(shared.reconcile_concurrency),
        write_times: parking_lot::Mutex::new(HashMap::new()),
        event_budget,
        stop: stop.clone(),
    });
    let running = Running {
        controller,
        store,
        listed,
        trigger_rx,
    };
    let served = serve(ctx, running, stop.clone()).await;
    stop.cancel();
    let _ = members_task.await;
    served
}

/// What [`serve`] runs: the controller, its cache, whether that has listed, and its queue of
/// objects to look at again.
struct Running {
    controller: Controller<DynamicObject>,
    store: Store<DynamicObject>,
    listed: Arc<std::sync::atomic::AtomicBool>,
    trigger_rx: mpsc::UnboundedReceiver<ObjectRef<DynamicObject>>,
}

/// Waits for the caches, then runs the controller (and its periodic tasks) until `stop`.
async fn serve(
    ctx: Arc<TypeContext>,
    running: Running,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let Running {
        controller,
        store,
        listed,
        trigger_rx,
    } = running;
    let shared = Arc::clone(&ctx.shared);
    let kind = ctx.federated.kind.clone();
    let depth = crate::metrics::METRICS
        .workqueue_depth
        .with_label_values(&[&kind.to_lowercase()]);
    tokio::spawn(export_object_gauges(
        Arc::clone(&ctx),
        store.clone(),
        stop.clone(),
    ));
    let triggers = futures::stream::unfold((trigger_rx, depth), |(mut rx, depth)| async move {
        let next = rx.recv().await;
        if next.is_some() {
            depth.dec();
        }
        next.map(|r| (r, (rx, depth)))
    });
    let registry_changes = changes(shared.pool.subscribe());
    let settings_changes = changes(shared.settings.subscribe());
    // A stop that comes while the caches load wins: a controller started with its shutdown
    // already signalled never finished draining (a KubeFedConfig change right after start hung
    // the restart).
    tokio::select! {
        biased;
        () = stop.cancelled() => return Ok(()),
        ready = caches_loaded(&ctx, &shared) => ready?,
    }
    if stop.is_cancelled() {
        return Ok(());
    }
    info!(kind = %kind, "starting sync controller");
    tokio::spawn(sweep_works(Arc::clone(&ctx), store.clone(), stop.clone()));
    tokio::spawn(gc::run(Arc::clone(&ctx), store, stop.clone()));
    let stop_signal = stop.clone();
    let running = controller
        .reconcile_on(triggers)
        .reconcile_all_on(futures::stream::select(registry_changes, settings_changes))
        .graceful_shutdown_on(async move { stop_signal.cancelled().await })
        .run(
            reconcile::reconcile,
            reconcile::error_policy,
            Arc::clone(&ctx),
        )
        .for_each(|_| async {});
    // Stopped before the first list completed: nothing can be in flight; do not wait.
    let stopped_unlisted = async {
        stop.cancelled().await;
        if listed.load(std::sync::atomic::Ordering::Relaxed) {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = running => {}
        () = stopped_unlisted => {}
    }
    // The status and version writes of the last reconciles are work in flight too.
    ctx.status_writes.drain().await;
    info!(kind = %kind, "sync controller stopped");
    Ok(())
}

/// Managed copies per pull member, as their agents last reported them.
fn pull_counts(ctx: &TypeContext) -> Vec<(String, usize)> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for work in ctx.works.store.state() {
        let managed = work
            .status
            .as_ref()
            .and_then(|s| s.copy.as_ref())
            .is_some_and(|c| c.exists && c.managed_label.as_deref() == Some("true"));
        if let Some(cluster) = work.labels().get(WORK_CLUSTER_LABEL) {
            *counts.entry(cluster.clone()).or_default() += usize::from(managed);
        }
    }
    counts.into_iter().collect()
}

/// Refreshes `hubfed_managed_objects` and `hubfed_federated_objects` for one type, forgets
/// written PropagatedVersions once the hub cache shows them, and queues the objects whose
/// status has waited past its hold — every 10 s.
async fn export_object_gauges(
    ctx: Arc<TypeContext>,
    federated: Store<DynamicObject>,
    stop: CancellationToken,
) {
    let type_label = ctx.federated.kind.to_lowercase();
    let metrics = &crate::metrics::METRICS;
    loop {
        let in_backoff = forget_deleted(&ctx, &federated);
        queue_expired_holds(&ctx);
        metrics
            .objects_in_backoff
            .with_label_values(&[type_label.as_str()])
            .set(i64::try_from(in_backoff).unwrap_or(i64::MAX));
        let (propagated, failing) = propagation_counts(&federated);
        metrics
            .federated_objects
            .with_label_values(&[type_label.as_str(), "true"])
            .set(propagated);
        metrics
            .federated_objects
            .with_label_values(&[type_label.as_str(), "false"])
            .set(failing);
        for (cluster, count) in ctx.members.counts().into_iter().chain(pull_counts(&ctx)) {
            let count = i64::try_from(count).unwrap_or(i64::MAX);
            metrics
                .managed_objects
                .with_label_values(&[type_label.as_str(), cluster.as_str()])
                .set(count);
        }
        for (cluster, count) in ctx.members.unmanaged_counts() {
            let count = i64::try_from(count).unwrap_or(i64::MAX);
            metrics
                .unmanaged_objects
                .with_label_values(&[type_label.as_str(), cluster.as_str()])
                .set(count);
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(Duration::from_secs(10)) => {}
        }
    }
    // A stopped controller (lease lost, type disabled) reports nothing: a standby's stale
    // series would keep alerts firing.
    for propagation in ["true", "false"] {
        let _ = metrics
            .federated_objects
            .remove_label_values(&[type_label.as_str(), propagation]);
    }
    let _ = metrics
        .objects_in_backoff
        .remove_label_values(&[type_label.as_str()]);
    let _ = metrics
        .leftovers
        .remove_label_values(&[type_label.as_str()]);
}

/// Forgets what is remembered of objects no longer in the `federated` cache, and written
/// statuses and versions the caches have caught up with; returns how many objects are in
/// backoff.
fn forget_deleted(ctx: &TypeContext, federated: &Store<DynamicObject>) -> usize {
    ctx.objects.retain(|object, state| {
        let Some(cached) = federated.get(object) else {
            return false;
        };
        if state.written_status.as_ref().is_some_and(|written| {
            !store_is_behind(
                cached.resource_version().as_deref(),
                &written.resource_version,
            )
        }) {
            state.written_status = None;
        }
        if state.written_versions.as_ref().is_some_and(|written| {
            let (_, stored) =
                observe::stored_propagated_version(ctx, &object.name, object.namespace.as_deref());
            !store_is_behind(stored.as_deref(), &written.resource_version)
        }) {
            state.written_versions = None;
        }
        true
    });
    ctx.latency.lock().shrink();
    super::detach::forget(ctx, |object| federated.get(object).is_some());
    ctx.objects.failing()
}

/// Queues the objects whose status has waited for pending clusters past every hold
/// ([`hubfed_core::conclude::hold_expired`]): their next reconcile writes it with what is known.
fn queue_expired_holds(ctx: &TypeContext) {
    let expired = ctx.objects.select(|state| {
        state
            .pending_since
            .is_some_and(|since| hubfed_core::conclude::hold_expired(since.elapsed()))
    });
    for object in expired {
        ctx.members.queue_federated(object);
    }
}

/// What [`propagation_counts`] reads of a status.
#[derive(serde::Deserialize)]
struct Conditions {
    #[serde(default)]
    conditions: Vec<Condition>,
}

#[derive(serde::Deserialize)]
struct Condition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

/// How many federated objects have propagated (`Propagation` True) and how many have not.
fn propagation_counts(federated: &Store<DynamicObject>) -> (i64, i64) {
    let (mut propagated, mut failing) = (0_i64, 0_i64);
    for obj in federated.state() {
        let status = super::packed_fields::field::<Conditions>(&obj, "status").and_then(Result::ok);
        let condition = status
            .iter()
            .flat_map(|s| &s.conditions)
            .find(|c| c.type_ == "Propagation")
            .map(|c| c.status.as_str());
        match condition {
            Some("True") => propagated += 1,
            Some(_) => failing += 1,
            None => {}
        }
    }
    (propagated, failing)
}
