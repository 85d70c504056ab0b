//! The ReplicaSchedulingPreference controller (KubeFed's `schedulingpreference` controller
//! and replica scheduler, docs/kubefed-compatibility.md §2.7), run when the KubeFedConfig
//! feature gate `SchedulerPreferences` is enabled.
//!
//! For each RSP it reads the FederatedDeployment/FederatedReplicaSet of the same namespace and
//! name, the registry's Ready clusters and each candidate member's Deployment/ReplicaSet (and
//! its pods when not all replicas are ready); [`hubfed_core::schedule`] decides, and the
//! result is written into the federated object's placement and `/spec/replicas` overrides as
//! KubeFed writes them — only when it changed — with a `Scheduled` Event on the RSP. An RSP
//! [`hubfed_core::schedule::validate`] refuses (another target kind, a negative number) gets
//! one Warning Event per problem and its federated object is not touched.
//!
//! Triggers: the RSP, the federated object of the same name and the registry (clusters joining,
//! leaving, turning Ready or not). Members are not watched: while a member's replicas are not
//! all ready the RSP is looked at again every [`UNSETTLED_RECHECK`] (and exactly when a
//! recently unschedulable pod passes the threshold), otherwise every [`RESYNC`].

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use hubfed_api::federated::FederatedSpec;
use hubfed_api::scheduling::{PlacementPolicy, ReplicaSchedulingPreference};
use hubfed_core::placement::{ClusterInfo, ControlPlaneScope, NamespaceFederation};
use hubfed_core::planner::write_schedule;
use hubfed_core::schedule::{
    MemberWorkload, PodSelector, TARGET_KINDS, analyze_pods, candidate_clusters, decide, describe,
    replica_state, validate,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource as _, ResourceExt as _};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::clusters::MemberClientPool;
use crate::events::reporter;
use crate::metrics::METRICS;
use crate::watch::{drive, registry_controller, scope_namespace, scoped, scoped_with};

/// How often an RSP whose members have not all replicas ready is looked at again.
pub const UNSETTLED_RECHECK: Duration = Duration::from_secs(10);
/// How often a settled RSP is looked at again (members are not watched).
pub const RESYNC: Duration = Duration::from_secs(120);
/// The field manager of the scheduler's writes to federated objects.
pub const FIELD_MANAGER: &str = "hubfed-scheduler";

/// What the RSP controller needs.
pub struct Scheduler {
    pub hub: Client,
    pub pool: Arc<MemberClientPool>,
    pub scope: ControlPlaneScope,
    pub kubefed_namespace: String,
    /// Seconds a pod must have been unschedulable before its replica may move.
    pub unschedulable_threshold: i64,
}

struct Context {
    scheduler: Scheduler,
    recorder: Recorder,
    /// The refusal last reported per RSP (by UID).
    refused: Reported,
    /// The RSPs the controller knows (its reflector): an RSP deleted while refused is
    /// forgotten on the next pass.
    rsps: Store<ReplicaSchedulingPreference>,
}

/// What was last reported per object, so that a Warning is published once per problem
/// rather than on every reconcile.
#[derive(Default)]
struct Reported(parking_lot::Mutex<std::collections::HashMap<String, String>>);

impl Reported {
    /// Whether `message` is new for `key` (and remembers it).
    fn first(&self, key: &str, message: &str) -> bool {
        let mut map = self.0.lock();
        map.insert(key.to_owned(), message.to_owned()).as_deref() != Some(message)
    }

    /// The object is fine again: a later problem is reported anew.
    fn forget(&self, key: &str) {
        let mut map = self.0.lock();
        map.remove(key);
    }

    /// Forgets the objects no longer in `live` (deleted ones: nothing reconciles them again).
    /// `live` is only asked for when something is remembered, which is rare.
    fn prune(&self, live: impl FnOnce() -> HashSet<String>) {
        let lock = || self.0.lock();
        if lock().is_empty() {
            return;
        }
        let live = live();
        lock().retain(|key, _| live.contains(key));
    }
}

#[derive(Debug, thiserror::Error)]
enum ScheduleError {
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0}")]
    Member(String),
}

fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ScheduleError {
    let what = what.into();
    move |source| ScheduleError::Kube { what, source }
}

/// `types.kubefed.io/v1beta1` resource of a target kind (`FederatedDeployment`, ...).
fn federated_resource(kind: &str) -> ApiResource {
    ApiResource {
        group: hubfed_api::names::TYPES_GROUP.to_owned(),
        version: "v1beta1".to_owned(),
        api_version: format!("{}/v1beta1", hubfed_api::names::TYPES_GROUP),
        kind: kind.to_owned(),
        plural: format!("{}s", kind.to_lowercase()),
    }
}

/// The member workload a federated kind propagates.
fn member_resource(kind: &str) -> ApiResource {
    let kind = kind.trim_start_matches("Federated");
    ApiResource {
        group: "apps".to_owned(),
        version: "v1".to_owned(),
        api_version: "apps/v1".to_owned(),
        kind: kind.to_owned(),
        plural: format!("{}s", kind.to_lowercase()),
    }
}

impl Scheduler {
    /// Runs the controller until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let hub = self.hub.clone();
        let namespace = scope_namespace(self.scope, &self.kubefed_namespace);
        let mut controller = registry_controller::<ReplicaSchedulingPreference>(
            &hub, namespace, &self.pool, &shutdown,
        );
        for kind in TARGET_KINDS {
            let resource = federated_resource(kind);
            let api = scoped_with(&hub, namespace, &resource);
            // Backoff: the kind's CRD exists only once its type is enabled.
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .touched_objects();
            controller = controller.watches_stream_with(
                stream,
                |object: DynamicObject| {
                    let namespace = object.namespace()?;
                    Some(
                        ObjectRef::<ReplicaSchedulingPreference>::new(&object.name_any())
                            .within(&namespace),
                    )
                },
                resource,
            );
        }
        // A PlacementPolicy of the same name limits the clusters: its choice wakes the RSP.
        let policies: Api<PlacementPolicy> = scoped(&hub, namespace);
        let stream = watcher(policies, watcher::Config::default())
            .default_backoff()
            .touched_objects();
        controller = controller.watches_stream(stream, |policy: PlacementPolicy| {
            let namespace = policy.namespace()?;
            Some(
                ObjectRef::<ReplicaSchedulingPreference>::new(&policy.name_any())
                    .within(&namespace),
            )
        });
        let reporter = reporter("replicaschedulingpreference-controller");
        let ctx = Arc::new(Context {
            recorder: Recorder::new(hub, reporter),
            scheduler: self,
            refused: Reported::default(),
            rsps: controller.store(),
        });
        info!("ReplicaSchedulingPreference controller started");
        drive(
            controller.run(reconcile, error_policy, ctx),
            "RSP controller",
        )
        .await;
    }
}

fn error_policy(
    rsp: Arc<ReplicaSchedulingPreference>,
    error: &ScheduleError,
    _ctx: Arc<Context>,
) -> Action {
    warn!(rsp = %key(&rsp), error = %error, "scheduling failed; retrying in 15s");
    METRICS.schedules_total.with_label_values(&["error"]).inc();
    Action::requeue(Duration::from_secs(15))
}

fn key(rsp: &ReplicaSchedulingPreference) -> String {
    format!("{}/{}", rsp.namespace().unwrap_or_default(), rsp.name_any())
}

/// The key of an RSP in [`Reported`]: its UID (a recreated RSP is reported anew).
fn uid(rsp: &ReplicaSchedulingPreference) -> String {
    rsp.uid().unwrap_or_else(|| key(rsp))
}

fn publish(
    ctx: &Context,
    rsp: &ReplicaSchedulingPreference,
    type_: EventType,
    reason: &str,
    note: String,
) {
    crate::events::publish(&ctx.recorder, &rsp.object_ref(&()), type_, reason, &note);
}

async fn reconcile(
    rsp: Arc<ReplicaSchedulingPreference>,
    ctx: Arc<Context>,
) -> Result<Action, ScheduleError> {
    // Deleted RSPs are not reconciled: their refusals are forgotten here.
    ctx.refused
        .prune(|| ctx.rsps.state().iter().map(|rsp| uid(rsp)).collect());
    if refused(&ctx, &rsp) {
        return Ok(Action::await_change());
    }
    let Some(target) = Target::read(&ctx, &rsp).await? else {
        return Ok(Action::await_change());
    };
    let candidates = candidates(&ctx, &rsp, &target).await?;
    if candidates.is_empty() {
        // KubeFed: no cluster to schedule on, nothing to do; the registry wakes us.
        return Ok(Action::await_change());
    }
    let s = &ctx.scheduler;
    let (kind, namespace, name) = (target.kind, &target.namespace, &target.name);
    let members = read_members(s, kind, namespace, name, &candidates).await?;
    let state = replica_state(&members);
    let workload_key = format!("{namespace}/{name}");
    let result = decide(&rsp.spec, &candidates, &state, &workload_key);
    let mut scheduled = target.spec.clone();
    if write_schedule(&mut scheduled, &result) {
        write(&target.api, &target.object, &scheduled).await?;
        let summary = describe(&result);
        info!(rsp = %workload_key, schedule = %summary, "scheduled");
        publish(
            &ctx,
            &rsp,
            EventType::Normal,
            "Scheduled",
            format!("{kind} {workload_key}: {summary}"),
        );
        METRICS
            .schedules_total
            .with_label_values(&["changed"])
            .inc();
    } else {
        METRICS
            .schedules_total
            .with_label_values(&["unchanged"])
            .inc();
    }
    Ok(match state.recheck_in {
        Some(seconds) => Action::requeue(
            Duration::from_secs(u64::try_from(seconds).unwrap_or(1)).min(UNSETTLED_RECHECK),
        ),
        None if state.unsettled => Action::requeue(UNSETTLED_RECHECK),
        None => Action::requeue(RESYNC),
    })
}

/// Whether [`validate`] refuses the RSP: its federated object is then left alone. Said once
/// per problem, not on every wake-up (the registry and the federated object wake every RSP).
fn refused(ctx: &Context, rsp: &ReplicaSchedulingPreference) -> bool {
    let uid = uid(rsp);
    let Err(refusal) = validate(&rsp.spec) else {
        ctx.refused.forget(&uid);
        return false;
    };
    if ctx.refused.first(&uid, &refusal.message) {
        warn!(
            rsp = %key(rsp),
            reason = refusal.reason,
            message = %refusal.message,
            "not scheduled"
        );
        publish(
            ctx,
            rsp,
            EventType::Warning,
            refusal.reason,
            refusal.message,
        );
    }
    true
}

/// The federated object an RSP schedules, as read.
struct Target<'a> {
    kind: &'a str,
    namespace: String,
    name: String,
    api: Api<DynamicObject>,
    object: DynamicObject,
    spec: FederatedSpec,
}

impl<'a> Target<'a> {
    /// The RSP's federated object; none when there is nothing to schedule (yet: its creation
    /// triggers us), its type is not enabled, or its spec does not decode (a Warning).
    async fn read(
        ctx: &Context,
        rsp: &'a ReplicaSchedulingPreference,
    ) -> Result<Option<Self>, ScheduleError> {
        let kind = rsp.spec.target_kind.as_str();
        let namespace = rsp.namespace().unwrap_or_default();
        let name = rsp.name_any();
        let hub = ctx.scheduler.hub.clone();
        let api: Api<DynamicObject> =
            Api::namespaced_with(hub, &namespace, &federated_resource(kind));
        let object = match api.get_opt(&name).await {
            Ok(Some(object)) if object.metadata.deletion_timestamp.is_none() => object,
            Ok(_) => return Ok(None),
            // The kind's CRD is not installed: its type is not enabled.
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
            Err(e) => return Err(kube_err(format!("reading {kind} {namespace}/{name}"))(e)),
        };
        let spec: FederatedSpec = match serde_json::from_value(object.data["spec"].clone()) {
            Ok(spec) => spec,
            Err(e) => {
                invalid_target(ctx, rsp, format!("{kind} {namespace}/{name}: spec: {e}"));
                return Ok(None);
            }
        };
        Ok(Some(Self {
            kind,
            namespace,
            name,
            api,
            object,
            spec,
        }))
    }
}

/// A Warning `InvalidTarget` on the RSP.
fn invalid_target(ctx: &Context, rsp: &ReplicaSchedulingPreference, note: String) {
    publish(ctx, rsp, EventType::Warning, "InvalidTarget", note);
}

/// The clusters the RSP may schedule on: KubeFed's candidates among the registry's clusters,
/// limited by a PlacementPolicy of the same name. None when the target's placement cannot
/// be used (a Warning).
async fn candidates(
    ctx: &Context,
    rsp: &ReplicaSchedulingPreference,
    target: &Target<'_>,
) -> Result<Vec<String>, ScheduleError> {
    let s = &ctx.scheduler;
    let (kind, namespace, name) = (target.kind, &target.namespace, &target.name);
    let clusters: Vec<ClusterInfo> = s
        .pool
        .clusters()
        .iter()
        .map(|c| ClusterInfo {
            name: c.name.clone(),
            labels: c.labels.clone(),
            ready: c.ready && c.client.is_some(),
        })
        .collect();
    let namespace_placement = if rsp.spec.intersect_with_cluster_selector {
        federated_namespace(s, namespace).await?
    } else {
        None
    };
    let namespace_federation = match &namespace_placement {
        Some(placement) => NamespaceFederation::Federated(placement.as_ref()),
        None if rsp.spec.intersect_with_cluster_selector => NamespaceFederation::NotFederated,
        None => NamespaceFederation::NotApplicable,
    };
    let candidates = match candidate_clusters(
        &rsp.spec,
        target.spec.placement.as_ref(),
        namespace_federation,
        s.scope,
        &clusters,
    ) {
        Ok(candidates) => candidates,
        Err(e) => {
            invalid_target(ctx, rsp, format!("{kind} {namespace}/{name}: {e}"));
            return Ok(Vec::new());
        }
    };
    Ok(match chosen_by_policy(s, namespace, name, kind).await? {
        Some(chosen) => candidates
            .into_iter()
            .filter(|c| chosen.contains(c))
            .collect(),
        None => candidates,
    })
}

/// The clusters a PlacementPolicy of the same name chose for this kind (hubfed, beyond
/// KubeFed), `None` without one. A policy that has chosen nothing yet limits to nothing.
async fn chosen_by_policy(
    s: &Scheduler,
    namespace: &str,
    name: &str,
    kind: &str,
) -> Result<Option<Vec<String>>, ScheduleError> {
    let api: Api<PlacementPolicy> = Api::namespaced(s.hub.clone(), namespace);
    let policy = match api.get_opt(name).await {
        Ok(policy) => policy,
        Err(kube::Error::Api(e)) if e.code == 404 => None,
        Err(e) => {
            return Err(kube_err(format!(
                "reading PlacementPolicy {namespace}/{name}"
            ))(e));
        }
    };
    Ok(policy.filter(|p| p.spec.target_kind == kind).map(|p| {
        p.status
            .map(|s| s.clusters.into_iter().map(|c| c.name).collect())
            .unwrap_or_default()
    }))
}

/// The placement of the FederatedNamespace `<ns>/<ns>`: `None` when there is none,
/// `Some(None)` when it has no placement.
async fn federated_namespace(
    s: &Scheduler,
    namespace: &str,
) -> Result<Option<Option<hubfed_api::federated::Placement>>, ScheduleError> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        s.hub.clone(),
        namespace,
        &federated_resource("FederatedNamespace"),
    );
    match api.get_opt(namespace).await {
        Ok(Some(object)) => Ok(Some(
            serde_json::from_value(object.data["spec"]["placement"].clone()).ok(),
        )),
        Ok(None) => Ok(None),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(kube_err(format!(
            "reading FederatedNamespace {namespace}/{namespace}"
        ))(e)),
    }
}

/// Each candidate's copy of the workload (clusters without one are left out), with its pods
/// analysed when not all replicas are ready.
async fn read_members(
    s: &Scheduler,
    kind: &str,
    namespace: &str,
    name: &str,
    candidates: &[String],
) -> Result<BTreeMap<String, MemberWorkload>, ScheduleError> {
    let reads = candidates.iter().map(|cluster| async move {
        let workload = read_member(s, cluster, kind, namespace, name).await?;
        Ok::<_, ScheduleError>(workload.map(|w| (cluster.clone(), w)))
    });
    let mut members = BTreeMap::new();
    for read in futures::future::join_all(reads).await {
        if let Some((cluster, workload)) = read? {
            members.insert(cluster, workload);
        }
    }
    Ok(members)
}

async fn read_member(
    s: &Scheduler,
    cluster: &str,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Result<Option<MemberWorkload>, ScheduleError> {
    let Some(client) = s.pool.get(cluster).and_then(|c| c.client.clone()) else {
        return Err(ScheduleError::Member(format!(
            "cluster {cluster} has no client"
        )));
    };
    let resource = member_resource(kind);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let what = format!("reading {} {namespace}/{name} in {cluster}", resource.kind);
    let Some(object) = api.get_opt(name).await.map_err(kube_err(&what))? else {
        return Ok(None);
    };
    let int = |v: &serde_json::Value| v.as_i64().unwrap_or(0);
    let mut workload = MemberWorkload {
        replicas: int(&object.data["spec"]["replicas"]),
        ready_replicas: int(&object.data["status"]["readyReplicas"]),
        pods: None,
    };
    if workload.needs_pods() {
        let selector = serde_json::from_value::<Option<LabelSelector>>(
            object.data["spec"]["selector"].clone(),
        )
        .map_err(|e| e.to_string())
        .and_then(|selector| selector.ok_or_else(|| "missing".to_owned()))
        .and_then(|selector| PodSelector::new(&selector))
        .map_err(|e| {
            ScheduleError::Member(format!(
                "{} {namespace}/{name} in {cluster}: spec.selector: {e}",
                resource.kind
            ))
        })?;
        let pods: Api<Pod> = Api::namespaced(client, namespace);
        let mut params = ListParams::default();
        if !selector.query().is_empty() {
            params = params.labels(selector.query());
        }
        let list = pods
            .list(&params)
            .await
            .map_err(kube_err(format!("listing the pods of {what}")))?;
        let mine: Vec<Pod> = list
            .items
            .into_iter()
            .filter(|pod| selector.matches(pod))
            .collect();
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        workload.pods = Some(analyze_pods(&mine, now, s.unschedulable_threshold));
    }
    Ok(Some(workload))
}

/// Writes the scheduled placement and overrides with a merge patch that carries the
/// resourceVersion read (a concurrent change makes it fail and the RSP is looked at again).
async fn write(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    scheduled: &FederatedSpec,
) -> Result<(), ScheduleError> {
    let clusters = scheduled
        .placement
        .as_ref()
        .and_then(|p| p.clusters.clone())
        .unwrap_or_default();
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": object.resource_version()},
        "spec": {
            "placement": {"clusters": clusters},
            "overrides": scheduled.overrides.clone().unwrap_or_default(),
        },
    });
    let name = object.name_any();
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    api.patch(&name, &params, &Patch::Merge(&patch))
        .await
        .map_err(kube_err(format!("writing the schedule into {name}")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::Reported;

    /// A refusal is reported once, again only when it changes or after the RSP was fine.
    #[test]
    fn a_refusal_is_reported_once_per_problem() {
        let reported = Reported::default();
        assert!(reported.first("uid-1", "weight -1"));
        assert!(!reported.first("uid-1", "weight -1"));
        assert!(reported.first("uid-2", "weight -1"));
        assert!(reported.first("uid-1", "weight -2"));
        assert!(!reported.first("uid-1", "weight -2"));
        reported.forget("uid-1");
        assert!(reported.first("uid-1", "weight -2"));
    }

    /// A deleted RSP's refusal is forgotten; `live` is not asked for when nothing is kept.
    #[test]
    fn deleted_rsps_are_forgotten() {
        let reported = Reported::default();
        reported.prune(|| unreachable!("nothing remembered"));
        assert!(reported.first("uid-1", "weight -1"));
        assert!(reported.first("uid-2", "weight -1"));
        reported.prune(|| ["uid-2".to_owned(), "uid-3".to_owned()].into());
        assert_eq!(reported.0.lock().len(), 1);
        assert!(reported.first("uid-1", "weight -1"));
        assert!(!reported.first("uid-2", "weight -1"));
        reported.prune(HashSet::new);
        reported.prune(|| unreachable!("everything forgotten"));
    }
}
