//! *Write*, after the slot: a reconcile's hub writes — the federated object's status and
//! its (Cluster)PropagatedVersion, as the reconcile decided them — written by a task of its
//! own, so the reconcile's slot goes to the next object's member writes instead of waiting on
//! the hub ([`hubfed_core::status_writes`]). At most `--reconcile-concurrency` objects'
//! status writes run at once per type; a reconcile of an object whose status writes run is
//! put off until it ends.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use hubfed_api::federated::FederatedStatus;
use hubfed_core::status::{AggregateReason, ClusterOutcome, PropagationStatus};
use hubfed_core::status_writes::{InFlight, Next, next};
use hubfed_core::version::PropagatedVersionStatus;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::DynamicObject;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::hub_writes::{self, publish};
use super::{TypeContext, WrittenVersions};
use crate::metrics::METRICS;

/// One type's status writes: which objects' run, and the permits bounding them.
pub(crate) struct StatusWrites {
    in_flight: Mutex<InFlight<ObjectRef<DynamicObject>>>,
    permits: Arc<Semaphore>,
    /// Told each time an object's status writes end ([`StatusWrites::drain`]).
    ended: tokio::sync::Notify,
    /// Cancelled when the controller stopped without waiting for them to end.
    abandon: CancellationToken,
}

impl StatusWrites {
    pub fn new(concurrency: u16) -> Self {
        Self {
            in_flight: Mutex::new(InFlight::default()),
            permits: Arc::new(Semaphore::new(usize::from(concurrency.max(1)))),
            ended: tokio::sync::Notify::new(),
            abandon: CancellationToken::new(),
        }
    }

    /// Waits until no status write runs: a stopping controller's work in flight, as its
    /// reconciles are. Dropped before that (the drain's time is up), it abandons what runs.
    pub async fn drain(&self) {
        let abandon = self.abandon.clone().drop_guard();
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.in_flight().is_empty() {
                break;
            }
            ended.await;
        }
        abandon.disarm();
    }

    fn in_flight(&self) -> parking_lot::MutexGuard<'_, InFlight<ObjectRef<DynamicObject>>> {
        self.in_flight.lock()
    }

    /// Whether a reconcile of `object` is to be put off: its status writes run (the object is
    /// queued again when it ends).
    pub fn put_off(&self, object: &ObjectRef<DynamicObject>) -> bool {
        self.in_flight().put_off(object)
    }
}

/// What a status says that is the user's to know, as Warnings once per change: what a
/// deletion waits on, placement problems, clusters placed but not joined.
pub(super) struct StatusWarnings {
    pub reference: ObjectReference,
    pub deleting: bool,
    pub reason: AggregateReason,
    pub reason_message: Option<String>,
    pub unknown_clusters: Vec<String>,
    /// The clusters' outcomes, for what a deletion waits on (empty otherwise).
    pub outcomes: Vec<ClusterOutcome>,
}

impl StatusWarnings {
    /// Published once the status that says it is written.
    pub fn publish(&self, ctx: &TypeContext) {
        let reference = &self.reference;
        if self.deleting
            && let Some(message) = deletion_waiting(&self.outcomes)
        {
            publish(
                ctx,
                reference,
                EventType::Warning,
                "DeletionWaiting",
                &message,
            );
        }
        // Placement problems are the user's to fix: say so once per change, as an Event.
        if let Some(message) = &self.reason_message {
            publish(
                ctx,
                reference,
                EventType::Warning,
                self.reason.as_str(),
                message,
            );
        }
        if !self.unknown_clusters.is_empty() {
            let message = format!(
                "placement names clusters that are not joined: {}",
                self.unknown_clusters.join(", ")
            );
            publish(
                ctx,
                reference,
                EventType::Warning,
                "UnknownClusters",
                &message,
            );
        }
    }
}

/// What a deletion waits on: the clusters whose copies are not gone yet, and why; none when
/// it waits on nothing.
fn deletion_waiting(outcomes: &[ClusterOutcome]) -> Option<String> {
    let waiting: Vec<String> = outcomes
        .iter()
        .filter(|o| o.status != PropagationStatus::Ok)
        .map(|o| match &o.message {
            Some(message) => format!("{} ({}: {message})", o.cluster, o.status.as_str()),
            None => format!("{} ({})", o.cluster, o.status.as_str()),
        })
        .collect();
    (!waiting.is_empty()).then(|| {
        format!(
            "deletion waits for the copies in {} before its finalizer is removed",
            waiting.join(", ")
        )
    })
}

/// The writes a reconcile decided on.
pub(super) struct StatusWrite {
    pub object: Arc<DynamicObject>,
    pub object_ref: ObjectRef<DynamicObject>,
    /// The new status, and what to say once it is written.
    pub status: Option<(Box<FederatedStatus>, StatusWarnings)>,
    /// The PropagatedVersion's new status, and whether the object exists in the hub.
    pub versions: Option<(PropagatedVersionStatus, bool)>,
}

/// Starts `pending`' writes, if any, in a task of their own.
pub(super) fn spawn(ctx: &Arc<TypeContext>, pending: StatusWrite) {
    if pending.status.is_none() && pending.versions.is_none() {
        return;
    }
    ctx.status_writes
        .in_flight()
        .begin(pending.object_ref.clone());
    let ctx = Arc::clone(ctx);
    tokio::spawn(async move {
        let written = async {
            let _permit = Arc::clone(&ctx.status_writes.permits).acquire_owned().await;
            write(&ctx, &pending).await
        };
        let status_failed = tokio::select! {
            status_failed = written => Some(status_failed),
            () = ctx.status_writes.abandon.cancelled() => None,
        };
        let asked = ctx.status_writes.in_flight().end(&pending.object_ref);
        ctx.status_writes.ended.notify_waiters();
        let Some(status_failed) = status_failed else {
            return;
        };
        match next(status_failed, asked) {
            Next::Done => {}
            Next::Reconcile => ctx.members.queue_federated(pending.object_ref),
            Next::ReconcileAfter(after) => queue_after(&ctx, pending.object_ref, after),
        }
    });
}

fn queue_after(ctx: &Arc<TypeContext>, object: ObjectRef<DynamicObject>, after: Duration) {
    let ctx = Arc::clone(ctx);
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        ctx.members.queue_federated(object);
    });
}

/// The status and the versions, side by side (two objects); whether the status write failed.
/// A failed PropagatedVersion write is logged: the next reconcile that writes records again.
async fn write(ctx: &TypeContext, pending: &StatusWrite) -> bool {
    let object = &pending.object;
    let status = async {
        let Some((status, warnings)) = &pending.status else {
            return false;
        };
        match hub_writes::write_status(ctx, object, status).await {
            Ok(()) => {
                warnings.publish(ctx);
                false
            }
            Err(e) => {
                let kind = ctx.federated.kind.to_lowercase();
                METRICS
                    .reconcile_errors_total
                    .with_label_values(&[&kind])
                    .inc();
                warn!(name = %pending.object_ref.name, namespace = ?pending.object_ref.namespace,
                    error = %e, "writing the status failed");
                true
            }
        }
    };
    let versions = async {
        let Some((versions, exists)) = &pending.versions else {
            return;
        };
        match hub_writes::write_versions(ctx, object, *exists, versions).await {
            Ok(resource_version) => {
                let written = WrittenVersions {
                    resource_version,
                    status: versions.clone(),
                };
                ctx.objects.update(&pending.object_ref, |state| {
                    state.written_versions = Some(written);
                });
            }
            Err(e) => {
                warn!(name = %pending.object_ref.name, error = %e,
                    "writing the propagated version failed");
            }
        }
    };
    let (status_failed, ()) = tokio::join!(status, versions);
    status_failed
}
