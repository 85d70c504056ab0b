//! The FederatedTypeConfig controller: types are data. Each enabled FTC in the control
//! plane's namespace gets a sync controller, started, stopped and refreshed at run time.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use hubfed_api::federatedtypeconfig::{
    ControllerStatus, FederatedTypeConfig, FederatedTypeConfigStatus,
};
use hubfed_api::names::{FTC_FINALIZER, NAMESPACES_FTC_NAME};
use hubfed_core::placement::ControlPlaneScope;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use serde_json::json;
use tokio::sync::{Mutex, mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::sync::{Shared, run_type};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("hub API request failed: {0}")]
    Hub(#[from] kube::Error),
}

/// A running sync controller and what it was started from.
struct Running {
    generation: i64,
    federated_namespace: Option<ApiResource>,
    /// The type's default rollout strategy ([`rollout_default`]).
    rollout_strategy: Option<String>,
    /// A child of the FTC controller's shutdown token: a shutdown reaches every sync
    /// controller at once.
    stop: CancellationToken,
    task: SyncTask,
}

impl Running {
    /// Stops the sync controller and waits until it has ended.
    async fn end(self) {
        self.stop.cancel();
        self.task.join().await;
    }
}

/// A sync controller's task, aborted when dropped: when the FTC controller is dropped (its
/// stop took too long), no sync controller keeps running.
struct SyncTask(JoinHandle<()>);

impl SyncTask {
    fn is_finished(&self) -> bool {
        self.0.is_finished()
    }

    /// Waits until the task has ended.
    async fn join(mut self) {
        let _ = (&mut self.0).await;
    }
}

impl Drop for SyncTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct Context {
    shared: Arc<Shared>,
    shutdown: CancellationToken,
    store: Store<FederatedTypeConfig>,
    running: Mutex<HashMap<String, Running>>,
    /// Requeues every FTC (the `namespaces` FTC gates the namespaced types).
    requeue_all: mpsc::UnboundedSender<()>,
    /// FTC reconciles running now.
    reconciling: watch::Sender<usize>,
}

/// Counts one running reconcile in [`Context::reconciling`] for as long as it lives (also
/// when the reconcile is cancelled).
struct Reconciling<'a>(&'a watch::Sender<usize>);

impl<'a> Reconciling<'a> {
    fn start(count: &'a watch::Sender<usize>) -> Self {
        count.send_modify(|n| *n += 1);
        Self(count)
    }
}

impl Drop for Reconciling<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Runs the FTC controller until `shutdown`; stops every sync controller on the way out.
pub async fn run(shared: Arc<Shared>, shutdown: CancellationToken) -> anyhow::Result<()> {
    let api: Api<FederatedTypeConfig> =
        Api::namespaced(shared.hub.clone(), &shared.kubefed_namespace);
    let controller = crate::watch::settled_controller(api, watcher::Config::default());
    let (tx, rx) = mpsc::unbounded_channel();
    let ctx = Arc::new(Context {
        shared,
        shutdown: shutdown.clone(),
        store: controller.store(),
        running: Mutex::new(HashMap::new()),
        requeue_all: tx,
        reconciling: watch::Sender::new(0),
    });
    let requeue_all =
        futures::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|()| ((), rx)) },
        );
    let stop = shutdown.clone();
    let controller = controller
        .reconcile_all_on(requeue_all)
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(reconcile, error_policy, Arc::clone(&ctx))
        .for_each(|_| async {});
    // Once stopping, nothing is waited for but reconciles in flight. kube-runtime's graceful
    // shutdown alone would wait forever for a controller whose cache had not loaded yet (its
    // runner holds every reconcile until then, and the watch that would load it is stopped):
    // a hub that does not answer the first list, or a stop right after the start.
    let idle = async {
        shutdown.cancelled().await;
        let _ = ctx.reconciling.subscribe().wait_for(|n| *n == 0).await;
    };
    tokio::select! {
        () = controller => {}
        () = idle => {}
    }
    let running = std::mem::take(&mut *ctx.running.lock().await);
    for r in running.values() {
        r.stop.cancel();
    }
    futures::future::join_all(running.into_values().map(|r| r.task.join())).await;
    Ok(())
}

fn error_policy(ftc: Arc<FederatedTypeConfig>, error: &Error, _ctx: Arc<Context>) -> Action {
    warn!(ftc = %ftc.name_any(), error = %error, "reconciling FederatedTypeConfig failed");
    Action::requeue(std::time::Duration::from_secs(5))
}

/// Reconciles one FTC, recording the outcome under KubeFed's `federatedtypeconfig` worker.
async fn reconcile(ftc: Arc<FederatedTypeConfig>, ctx: Arc<Context>) -> Result<Action, Error> {
    let metrics = &crate::metrics::METRICS;
    let started = std::time::Instant::now();
    let result = {
        let _reconciling = Reconciling::start(&ctx.reconciling);
        reconcile_ftc(ftc, Arc::clone(&ctx)).await
    };
    metrics
        .reconcile_time
        .with_label_values(&["federatedtypeconfig"])
        .observe(started.elapsed().as_secs_f64());
    let outcome = if result.is_ok() { "success" } else { "error" };
    if result.is_err() {
        metrics
            .reconcile_errors_total
            .with_label_values(&["federatedtypeconfig"])
            .inc();
    }
    metrics
        .reconcile_total
        .with_label_values(&["federatedtypeconfig", outcome])
        .inc();
    result
}

async fn reconcile_ftc(ftc: Arc<FederatedTypeConfig>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = ftc.name_any();
    let api: Api<FederatedTypeConfig> =
        Api::namespaced(ctx.shared.hub.clone(), &ctx.shared.kubefed_namespace);

    if ftc.metadata.deletion_timestamp.is_some() {
        stop(&ctx, &name).await;
        requeue_all_if_namespaces(&ctx, &name);
        release_finalizer(&api, &ftc).await?;
        return Ok(Action::await_change());
    }
    add_finalizer(&api, &ftc).await?;

    let wanted = Wanted::of(&ftc, &ctx);
    let status = wanted.status();
    if converge(&ctx, &name, wanted).await {
        requeue_all_if_namespaces(&ctx, &name);
    }
    if ftc.status.as_ref() != Some(&status) {
        let patch = json!({ "status": status });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(Action::await_change())
}

/// The `namespaces` FTC gates the namespaced types: a change to it requeues every FTC.
fn requeue_all_if_namespaces(ctx: &Context, name: &str) {
    if name == NAMESPACES_FTC_NAME {
        let _ = ctx.requeue_all.send(());
    }
}

fn has_finalizer(ftc: &FederatedTypeConfig) -> bool {
    ftc.finalizers().iter().any(|f| f == FTC_FINALIZER)
}

async fn release_finalizer(
    api: &Api<FederatedTypeConfig>,
    ftc: &FederatedTypeConfig,
) -> Result<(), Error> {
    if !has_finalizer(ftc) {
        return Ok(());
    }
    let finalizers = ftc
        .finalizers()
        .iter()
        .filter(|f| *f != FTC_FINALIZER)
        .cloned()
        .collect();
    patch_finalizers(api, ftc, finalizers).await
}

async fn add_finalizer(
    api: &Api<FederatedTypeConfig>,
    ftc: &FederatedTypeConfig,
) -> Result<(), Error> {
    if has_finalizer(ftc) {
        return Ok(());
    }
    let mut finalizers = ftc.finalizers().to_vec();
    finalizers.push(FTC_FINALIZER.to_string());
    patch_finalizers(api, ftc, finalizers).await
}

async fn patch_finalizers(
    api: &Api<FederatedTypeConfig>,
    ftc: &FederatedTypeConfig,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": ftc.resource_version()}});
    api.patch(
        &ftc.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// What an FTC asks for: whether its sync controller should run, and from what.
struct Wanted {
    /// The FTC with its defaults.
    ftc: FederatedTypeConfig,
    generation: i64,
    federated_namespace: Option<ApiResource>,
    /// The type's default rollout strategy ([`rollout_default`]): the sync controller reads
    /// it from the FTC it was started with, and an annotation does not change the generation.
    rollout_strategy: Option<String>,
    run: bool,
    collect_status: bool,
}

impl Wanted {
    fn of(ftc: &FederatedTypeConfig, ctx: &Context) -> Self {
        let mut defaulted = ftc.clone();
        defaulted.set_defaults();
        let federated_namespace = federated_namespace_type(ctx);
        // KubeFed: namespaced targets need the FederatedNamespace type; a namespace-scoped
        // control plane cannot propagate cluster-scoped targets.
        let needs_namespace_type = defaulted.target_namespaced() && !defaulted.is_namespace();
        let cluster_target_in_namespaced_plane =
            ctx.shared.scope == ControlPlaneScope::Namespaced && !defaulted.target_namespaced();
        let run = defaulted.propagation_enabled()
            && (!needs_namespace_type || federated_namespace.is_some())
            && !cluster_target_in_namespaced_plane;
        // Remote status is collected by the sync controller itself (KubeFed's raw resource
        // status collection); the status controller is reported running while it does.
        let collect_status = run && ctx.shared.collects_status(&defaulted);
        Self {
            ftc: defaulted,
            generation: ftc.metadata.generation.unwrap_or(0),
            federated_namespace,
            rollout_strategy: rollout_default(ftc),
            run,
            collect_status,
        }
    }

    /// Whether `running` was started from what is wanted now, and still runs.
    fn is_running(&self, running: Option<&Running>) -> bool {
        running.is_some_and(|r| {
            r.generation == self.generation
                && r.federated_namespace == self.federated_namespace
                && r.rollout_strategy == self.rollout_strategy
                && !r.task.is_finished()
        })
    }

    fn status(&self) -> FederatedTypeConfigStatus {
        FederatedTypeConfigStatus {
            observed_generation: self.generation,
            propagation_controller: controller_status(self.run),
            status_controller: Some(controller_status(self.collect_status)),
        }
    }
}

/// The rollout strategy an FTC's annotation makes the default of its type
/// (docs/user-guide.md "Rollouts").
fn rollout_default(ftc: &FederatedTypeConfig) -> Option<String> {
    ftc.annotations()
        .get(hubfed_core::rollout::STRATEGY_ANNOTATION)
        .filter(|name| !name.is_empty())
        .cloned()
}

fn controller_status(running: bool) -> ControllerStatus {
    if running {
        ControllerStatus::Running
    } else {
        ControllerStatus::NotRunning
    }
}

/// The FederatedNamespace type, from the `namespaces` FTC unless it is absent or deleted.
fn federated_namespace_type(ctx: &Context) -> Option<ApiResource> {
    ctx.store
        .get(&ObjectRef::new(NAMESPACES_FTC_NAME).within(&ctx.shared.kubefed_namespace))
        .filter(|f| f.metadata.deletion_timestamp.is_none())
        .map(|f| {
            let mut f = (*f).clone();
            f.set_defaults();
            f.spec.federated_type.to_dynamic()
        })
}

/// Starts, refreshes or stops the FTC's sync controller as `wanted`; true when it started or
/// stopped (not when it was refreshed).
async fn converge(ctx: &Context, name: &str, wanted: Wanted) -> bool {
    let mut running = ctx.running.lock().await;
    let was_running = running.contains_key(name);
    if wanted.run && !wanted.is_running(running.get(name)) {
        if let Some(old) = running.remove(name) {
            old.end().await;
            info!(ftc = %name, "refreshing sync controller");
        }
        running.insert(name.to_string(), start(ctx, name, wanted));
        !was_running
    } else if !wanted.run
        && let Some(old) = running.remove(name)
    {
        old.end().await;
        info!(ftc = %name, "stopped sync controller");
        true
    } else {
        false
    }
}

fn start(ctx: &Context, name: &str, wanted: Wanted) -> Running {
    let stop = ctx.shutdown.child_token();
    let task = tokio::spawn({
        let shared = Arc::clone(&ctx.shared);
        let stop = stop.clone();
        let fns = wanted.federated_namespace.clone();
        let ftc_name = name.to_string();
        async move {
            if let Err(e) = run_type(shared, wanted.ftc, fns, stop).await {
                warn!(ftc = %ftc_name, error = %e, "sync controller ended with an error");
            }
        }
    });
    Running {
        generation: wanted.generation,
        federated_namespace: wanted.federated_namespace,
        rollout_strategy: wanted.rollout_strategy,
        stop,
        task: SyncTask(task),
    }
}

async fn stop(ctx: &Context, name: &str) {
    if let Some(old) = ctx.running.lock().await.remove(name) {
        old.end().await;
        info!(ftc = %name, "stopped sync controller");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ftc(strategy: Option<&str>) -> FederatedTypeConfig {
        let mut ftc: FederatedTypeConfig = serde_json::from_value(json!({
            "apiVersion": "core.kubefed.io/v1beta1",
            "kind": "FederatedTypeConfig",
            "metadata": {"name": "deployments.apps", "generation": 3},
            "spec": {
                "federatedType": {"group": "types.kubefed.io", "kind": "FederatedDeployment",
                    "pluralName": "federateddeployments", "scope": "Namespaced", "version": "v1beta1"},
                "propagation": "Enabled",
                "targetType": {"group": "apps", "kind": "Deployment", "pluralName": "deployments",
                    "scope": "Namespaced", "version": "v1"},
            },
        }))
        .expect("an FTC");
        if let Some(strategy) = strategy {
            ftc.annotations_mut().insert(
                hubfed_core::rollout::STRATEGY_ANNOTATION.to_owned(),
                strategy.to_owned(),
            );
        }
        ftc
    }

    fn wanted(ftc: &FederatedTypeConfig) -> Wanted {
        Wanted {
            ftc: ftc.clone(),
            generation: ftc.metadata.generation.unwrap_or(0),
            federated_namespace: None,
            rollout_strategy: rollout_default(ftc),
            run: true,
            collect_status: false,
        }
    }

    /// The rollout strategy annotated on an FTC takes effect at once: a change of it (which
    /// leaves the generation as it is) restarts the type's sync controller, which reads it.
    #[tokio::test]
    async fn a_changed_rollout_default_restarts_the_sync_controller() {
        let started = wanted(&ftc(Some("canary")));
        let running = Running {
            generation: started.generation,
            federated_namespace: None,
            rollout_strategy: started.rollout_strategy.clone(),
            stop: CancellationToken::new(),
            task: SyncTask(tokio::spawn(std::future::pending())),
        };
        assert!(started.is_running(Some(&running)));
        for changed in [None, Some("regions"), Some("")] {
            let now = wanted(&ftc(changed));
            assert_eq!(now.generation, started.generation);
            assert!(!now.is_running(Some(&running)), "{changed:?}");
        }
    }
}
