//! What every member write shares: its result for the cluster's status, the member API for
//! the object's type, how a member's refusal reads, and the metrics of each request. Used by
//! the dispatcher and the apply steps alike (neither owns the other).

use hubfed_core::plan::FederatedObject;
use hubfed_core::status::{ClusterOutcome, PropagationStatus};
use kube::api::{Api, DynamicObject};

use super::TypeContext;
use crate::metrics::METRICS;

/// Field manager that holds fields hubfed hands over to the member (e.g. retained replicas).
pub(super) const RETAINED_FIELD_MANAGER: &str = "hubfed-retained";

pub(crate) struct ClusterResult {
    pub(crate) outcome: Option<ClusterOutcome>,
    pub(crate) version: Option<String>,
    pub(crate) wrote: bool,
    /// A successful write to report: (event reason, verb). Reported once per reconcile for
    /// all clusters, not per cluster: at scale one Event per member write doubles the hub's
    /// write load.
    pub(crate) done: Option<(&'static str, &'static str)>,
    /// The write failed without the member refusing the object (no answer, a server error,
    /// a conflict, throttling: [`hubfed_core::rollout::is_refusal`]): it never halts a rollout.
    pub(crate) transient: bool,
    /// The copy's readiness as the write's answer shows it (types with a status).
    pub(crate) readiness: Option<hubfed_core::readiness::Readiness>,
}

impl ClusterResult {
    /// Nothing written to the cluster; `outcome` for its status.
    pub(crate) fn unwritten(outcome: Option<ClusterOutcome>) -> Self {
        Self {
            outcome,
            version: None,
            wrote: false,
            done: None,
            transient: false,
            readiness: None,
        }
    }

    /// A write that was done (`done`: its Event's reason and verb); `outcome` for the
    /// cluster's status.
    pub(crate) fn written(
        outcome: Option<ClusterOutcome>,
        done: (&'static str, &'static str),
    ) -> Self {
        Self {
            wrote: true,
            done: Some(done),
            ..Self::unwritten(outcome)
        }
    }
}

pub(super) fn outcome(
    cluster: &str,
    status: Option<PropagationStatus>,
    message: Option<String>,
) -> Option<ClusterOutcome> {
    status.map(|status| ClusterOutcome {
        cluster: cluster.to_string(),
        status,
        message,
        remote_status: None,
        drift: None,
    })
}

pub(super) fn member_api(
    ctx: &TypeContext,
    client: kube::Client,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    match namespace {
        Some(ns) if ctx.target.namespaced => Api::namespaced_with(client, ns, &ctx.target_resource),
        _ => Api::all_with(client, &ctx.target_resource),
    }
}

pub(super) fn error_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(e) => e.message.clone(),
        other => other.to_string(),
    }
}

/// Whether `error` is a refusal of the object by the member ([`hubfed_core::rollout::is_refusal`]).
pub(super) fn is_refusal(error: &kube::Error) -> bool {
    let code = match error {
        kube::Error::Api(e) => Some(e.code),
        _ => None,
    };
    hubfed_core::rollout::is_refusal(code)
}

pub(super) fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(e) if e.code == 404)
}

pub(super) fn is_immutable_refusal(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(e) if e.code == 422 && e.message.contains("immutable"))
}

/// Records one member request in the metrics.
pub(super) fn record(cluster: &str, operation: &str, started: std::time::Instant, ok: bool) {
    let elapsed = started.elapsed().as_secs_f64();
    METRICS
        .member_operations_total
        .with_label_values(&[cluster, operation, if ok { "success" } else { "error" }])
        .inc();
    METRICS
        .member_operation_duration
        .with_label_values(&[cluster, operation])
        .observe(elapsed);
    let action = match operation {
        "create" | "update" | "delete" => Some(operation),
        _ => None,
    };
    if let Some(action) = action {
        METRICS
            .dispatch_operation_duration
            .with_label_values(&[action])
            .observe(elapsed);
    }
}

pub(super) fn kind_and_key(ctx: &TypeContext, object: &FederatedObject) -> String {
    let key = match &object.namespace {
        Some(ns) if ctx.target.namespaced => format!("{ns}/{}", object.name),
        _ => object.name.clone(),
    };
    format!("{} {key:?}", ctx.target.kind)
}

pub(super) fn federated_reference(
    ctx: &TypeContext,
    object: &FederatedObject,
) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(ctx.federated.api_version.clone()),
        kind: Some(ctx.federated.kind.clone()),
        name: Some(object.name.clone()),
        namespace: object.namespace.clone(),
        ..Default::default()
    }
}
