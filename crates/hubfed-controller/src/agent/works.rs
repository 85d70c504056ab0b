//! The agent's work loop: each work whose current generation has no report yet is carried
//! out with the push dispatcher's code ([`execute_action`]) and reported — result, version,
//! Events, drift and the copy it left; a work already reported only has its copy's changes
//! reported (the hub plans again on each: drift, deletion, readiness).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use hubfed_api::work::{WORK_RESULT_DONE, WORK_RESULT_OK, Work, WorkCopy, WorkEvent};
use hubfed_core::plan::MemberObject;
use hubfed_core::plan::{ClusterAction, ClusterPlan, FederatedObject};
use hubfed_core::pull::{copy_of, delete_guard, member_object, reported, work_action};
use hubfed_core::status::PropagationStatus;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::Agent;
use super::copies::{self, TypeCache};
use crate::admin::Health;
use crate::sync::execute::{EventSink, ExecEnv, execute_action};
use crate::sync::{ClusterResult, Unmanaged};

/// How often a quiet work is looked at again anyway (a safety net; changes arrive by watch).
const RESYNC: Duration = Duration::from_secs(300);
/// The deadline of one action in the member (the push dispatcher's).
const EXECUTE_TIMEOUT: Duration = Duration::from_secs(30);
/// Retry delay after a failed report.
const RETRY: Duration = Duration::from_secs(5);

struct Ctx {
    agent: Arc<Agent>,
    drift_reported: Mutex<HashMap<String, String>>,
    /// Work UID → the generation this process carried out and reported. The cache may not
    /// show the report yet when the copy's own watch event queues the work again: without
    /// this, the work would be carried out twice.
    carried_out: Mutex<HashMap<String, i64>>,
}

/// Events an action makes, kept for the work's status.
#[derive(Default)]
struct Collected(Mutex<Vec<WorkEvent>>);

impl EventSink for Collected {
    fn publish(&self, type_: EventType, reason: &str, message: &str) {
        let type_ = match type_ {
            EventType::Warning => "Warning",
            EventType::Normal => "Normal",
        };
        self.0.lock().push(WorkEvent {
            type_: type_.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
        });
    }
}

/// Runs the work loop and garbage collection until `shutdown`.
/// `trigger_rx`: the works whose copies changed ([`copies::Copies::start`]).
pub async fn run(
    agent: Arc<Agent>,
    health: Arc<Health>,
    trigger_rx: mpsc::UnboundedReceiver<ObjectRef<Work>>,
    shutdown: CancellationToken,
) {
    let api: Api<Work> = Api::namespaced(agent.hub.clone(), &agent.work_namespace);
    let (store, writer) = reflector::store();
    let listed = Arc::new(AtomicBool::new(false));
    // Lean: the works' managedFields are never read.
    let works = watcher(api, watcher::Config::default()).modify(|work| {
        work.metadata.managed_fields = None;
    });
    // The hub may lack the Work CRD: the agent then waits for it quietly, ready with no works
    // (`crate::hub_crds` says so once).
    let works = crate::watch::quiet_while_unserved(works, "Work".to_owned());
    let works = reflector::reflector(writer, works)
        .default_backoff()
        .inspect({
            let listed = Arc::clone(&listed);
            let health = Arc::clone(&health);
            move |event| {
                if let Ok(watcher::Event::InitDone) = event {
                    listed.store(true, Ordering::Release);
                    health.set_ready(true);
                }
            }
        });
    let works = crate::watch::settled_objects(
        crate::watch::settled(works, store.clone(), crate::watch::Deletions::Skip),
        "Work".to_owned(),
    );
    let triggers = futures::stream::unfold(trigger_rx, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    });
    let ctx = Arc::new(Ctx {
        agent: Arc::clone(&agent),
        drift_reported: Mutex::new(HashMap::new()),
        carried_out: Mutex::new(HashMap::new()),
    });
    let stop = shutdown.clone();
    Controller::for_shared_stream(works, store)
        .with_config(kube::runtime::controller::Config::default().concurrency(16))
        .reconcile_on(triggers)
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
    info!("work loop stopped");
}

fn error_policy(work: Arc<Work>, error: &kube::Error, _ctx: Arc<Ctx>) -> Action {
    warn!(work = %work.name_any(), error = %error, "reporting a work failed; retrying");
    Action::requeue(RETRY)
}

async fn reconcile(work: Arc<Work>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    let agent = &ctx.agent;
    let cache = agent.copies.ensure(&work.spec.target);
    let uid = work.metadata.uid.clone().unwrap_or_default();
    let done_here = ctx.carried_out.lock().get(&uid).copied();
    if reported(&work) {
        report_copy(agent, &work, &cache).await?;
    } else if done_here.is_none() || done_here != work.metadata.generation {
        carry_out(&ctx, &work).await?;
        if let Some(generation) = work.metadata.generation {
            ctx.carried_out.lock().insert(uid, generation);
        }
    }
    Ok(Action::requeue(RESYNC))
}

fn member_api(agent: &Agent, work: &Work) -> Api<DynamicObject> {
    let resource = copies::resource(&work.spec.target);
    match work
        .spec
        .namespace
        .as_deref()
        .filter(|_| work.spec.target.namespaced)
    {
        Some(ns) => Api::namespaced_with(agent.member.clone(), ns, &resource),
        None => Api::all_with(agent.member.clone(), &resource),
    }
}

/// The live copy, whole, as the plan sees a member object.
async fn live_member(agent: &Agent, work: &Work) -> Result<Option<MemberObject>, kube::Error> {
    let api = member_api(agent, work);
    let resource = copies::resource(&work.spec.target);
    let found = api.get_opt(&work.spec.name).await?;
    Ok(found.map(|object| {
        let value = serde_json::to_value(&object).unwrap_or_default();
        member_object(
            &value,
            &resource.group,
            &work.spec.target.kind,
            work.spec.collect_status,
        )
    }))
}

/// The copy as the plan is to see it (a copy without the managed label reads as none, as in
/// the push member cache), read live; `None` when it cannot be read.
async fn live_copy(agent: &Agent, work: &Work) -> Option<WorkCopy> {
    match live_member(agent, work).await {
        Ok(member) => Some(copy_of(member.as_ref().filter(|m| m.is_managed()))),
        Err(e) => {
            debug!(work = %work.name_any(), error = %e, "cannot read the copy");
            None
        }
    }
}

/// Reports the copy's change since the last report, if any.
async fn report_copy(agent: &Agent, work: &Work, cache: &TypeCache) -> Result<(), kube::Error> {
    let spec = &work.spec;
    let Some(member) = cache.copy(&spec.name, spec.namespace.as_deref(), spec.collect_status)
    else {
        return Ok(());
    };
    let copy = copy_of(member.as_ref().filter(|m| m.is_managed()));
    if work.status.as_ref().and_then(|s| s.copy.as_ref()) == Some(&copy) {
        return Ok(());
    }
    debug!(work = %work.name_any(), exists = copy.exists, version = %copy.version, "copy changed");
    patch_status(agent, work, &json!({ "copy": copy })).await
}

/// Carries out the work's action and reports the result.
async fn carry_out(ctx: &Ctx, work: &Work) -> Result<(), kube::Error> {
    let agent = &ctx.agent;
    let Some(action) = action_to_take(agent, work).await? else {
        return Ok(());
    };
    let spec = &work.spec;
    let object = FederatedObject {
        name: spec.name.clone(),
        namespace: spec.namespace.clone(),
        annotations: spec.annotations.clone(),
        ..FederatedObject::default()
    };
    let cp = ClusterPlan {
        cluster: agent.cluster.clone(),
        action,
    };
    let events = Collected::default();
    // No cache of unmanaged names here: every create looks first.
    let unmanaged = |_: &str, _: &str, _: Option<&str>| Unmanaged::Unknown;
    let env = ExecEnv {
        target_kind: &spec.target.kind,
        target_group: spec
            .target
            .api_version
            .rsplit_once('/')
            .map_or("", |(g, _)| g),
        namespaced: spec.target.namespaced,
        type_label: spec.source.kind.to_lowercase(),
        drift_people: &agent.drift_people,
        drift_reported: &ctx.drift_reported,
        applied: None,
        unmanaged: &unmanaged,
        events: &events,
    };
    let api = member_api(agent, work);
    // As the push dispatcher's deadline: a member that does not answer is reported, not
    // waited for.
    let executed = tokio::time::timeout(EXECUTE_TIMEOUT, execute_action(&env, &object, &cp, &api));
    let result = match executed.await {
        Ok(result) => result,
        Err(_) => timed_out(&cp),
    };
    let copy = live_copy(agent, work).await;
    let events = events.0.into_inner();
    let status = report(&cp.action, &result, work.metadata.generation, copy, &events);
    debug!(work = %work.name_any(), result = %status["result"], "carried out");
    patch_status(agent, work, &status).await
}

/// The action the work asks for, or `None` when there is none to take and the work has been
/// reported: an unreadable work (reported as a refusal, never guessed at), or a tombstone that
/// names no copy (the agent never reported one) and finds none of this control plane's to
/// remove — checked live ([`delete_guard`]).
async fn action_to_take(agent: &Agent, work: &Work) -> Result<Option<ClusterAction>, kube::Error> {
    let generation = work.metadata.generation;
    match work_action(&work.spec) {
        Ok(ClusterAction::Delete(delete)) if delete.uid.is_none() => {
            let copy = live_member(agent, work).await?;
            if let Some(action) = delete_guard(copy.as_ref(), agent.control_plane.as_deref()) {
                return Ok(Some(action));
            }
            let status = json!({
                "observedGeneration": generation,
                "result": WORK_RESULT_DONE,
                "message": "no managed copy of this control plane's to remove",
                "transient": false,
                "done": null,
                "events": [],
                "drift": null,
                "appliedVersion": null,
                "appliedHash": null,
                "copy": copy_of(copy.as_ref().filter(|c| c.is_managed())),
            });
            patch_status(agent, work, &status).await.map(|()| None)
        }
        Ok(action) => Ok(Some(action)),
        Err(message) => {
            warn!(work = %work.name_any(), %message, "a work cannot be carried out");
            let status = json!({
                "observedGeneration": generation,
                "result": PropagationStatus::UpdateFailed.as_str(),
                "message": message,
                "transient": false,
                "done": null,
                "events": [],
                "drift": null,
            });
            patch_status(agent, work, &status).await.map(|()| None)
        }
    }
}

/// The result of an action the member did not answer in time.
fn timed_out(cp: &ClusterPlan) -> ClusterResult {
    let outcome = hubfed_core::status::ClusterOutcome {
        cluster: cp.cluster.clone(),
        status: cp
            .action
            .status_on_timeout()
            .unwrap_or(PropagationStatus::UpdateTimedOut),
        message: Some(format!(
            "no answer from the cluster within {}s",
            EXECUTE_TIMEOUT.as_secs()
        )),
        remote_status: None,
        drift: None,
    };
    ClusterResult {
        outcome: Some(outcome),
        version: None,
        wrote: false,
        done: None,
        transient: true,
        readiness: None,
    }
}

/// The status that reports `result` of `action`.
fn report(
    action: &ClusterAction,
    result: &ClusterResult,
    generation: Option<i64>,
    copy: Option<WorkCopy>,
    events: &[WorkEvent],
) -> serde_json::Value {
    let removal = matches!(
        action,
        ClusterAction::Delete(_) | ClusterAction::RemoveManagedLabel
    );
    let (text, message) = match &result.outcome {
        None => (WORK_RESULT_DONE.to_owned(), None),
        Some(o) if removal && Some(o.status) == action.status_on_success() => {
            (WORK_RESULT_DONE.to_owned(), None)
        }
        Some(o) if o.status == PropagationStatus::Ok => {
            (WORK_RESULT_OK.to_owned(), o.message.clone())
        }
        Some(o) => (o.status.as_str().to_owned(), o.message.clone()),
    };
    let mut status = json!({
        "observedGeneration": generation,
        "result": text,
        "message": message,
        "transient": result.transient,
        "done": result.done.map(|(reason, _)| reason),
        "events": events,
        "drift": result.outcome.as_ref().and_then(|o| o.drift.clone()),
    });
    if let (ClusterAction::Apply(apply), Some(version)) = (action, &result.version) {
        status["appliedVersion"] = json!(version);
        status["appliedHash"] = json!(apply.desired_hash);
    }
    if removal && text == WORK_RESULT_DONE {
        status["appliedVersion"] = json!(null);
        status["appliedHash"] = json!(null);
    }
    if let Some(copy) = copy {
        status["copy"] = json!(copy);
    }
    status
}

async fn patch_status(
    agent: &Agent,
    work: &Work,
    status: &serde_json::Value,
) -> Result<(), kube::Error> {
    let api: Api<Work> = Api::namespaced(agent.hub.clone(), &agent.work_namespace);
    let patch = json!({ "status": status });
    api.patch_status(
        &work.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(drop)
}
