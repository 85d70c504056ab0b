//! *Write*: the reconcile's hub writes — the sync finalizer, the federated object's status,
//! the (Cluster)PropagatedVersion — and Events. Each is made only when the conclusion asks.

use hubfed_api::federated::FederatedStatus;
use hubfed_api::names::SYNC_CONTROLLER_FINALIZER;
use hubfed_api::propagatedversion::{ClusterPropagatedVersion, PropagatedVersion};
use hubfed_core::status::{StatusInput, compute_status, only_remote_status_changed};
use hubfed_core::version::{PropagatedVersionStatus, propagated_version_name};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::{TypeContext, WrittenStatus};

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("hub API request failed: {0}")]
    Hub(#[from] kube::Error),
    #[error("serializing: {0}")]
    Json(#[from] serde_json::Error),
    #[error("no answer from the hub within {}s", HUB_WRITE_TIMEOUT.as_secs())]
    Timeout,
}

/// How long one hub write may take: the hub client has no read timeout, and a reconcile
/// waiting on an unreachable hub would hold up its controller, and its shutdown, forever.
const HUB_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A hub request, bounded by [`HUB_WRITE_TIMEOUT`].
pub(super) async fn bounded<T>(
    request: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<Result<T, kube::Error>, HubError> {
    tokio::time::timeout(HUB_WRITE_TIMEOUT, request)
        .await
        .map_err(|_| HubError::Timeout)
}

/// RFC 3339 with second precision, as Kubernetes writes times.
pub(super) fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

pub(super) fn federated_api(ctx: &TypeContext, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(ctx.shared.hub.clone(), ns, &ctx.federated),
        None => Api::all_with(ctx.shared.hub.clone(), &ctx.federated),
    }
}

/// The `Accept` of a write whose answer is read for its metadata at most.
const METADATA_ANSWER: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// A merge patch of the federated object `obj` — of its status subresource when `status` —
/// answered with the object's metadata only: the answer is not read, and the whole object
/// (its template: up to the ~1.5 MB an object can hold) would be encoded by the hub and
/// parsed here for nothing.
async fn patch_federated(
    ctx: &TypeContext,
    obj: &DynamicObject,
    patch: &Value,
    status: bool,
) -> Result<Option<String>, kube::Error> {
    let namespace = obj.namespace();
    let url = DynamicObject::url_path(&ctx.federated, namespace.as_deref());
    patch_for_metadata(&ctx.shared.hub, url, &obj.name_any(), patch, status).await
}

/// A merge patch of `name` under `url` (its status subresource when `status`), asking for
/// the object's metadata only as the answer; returns the resourceVersion it answered with.
async fn patch_for_metadata(
    client: &kube::Client,
    url: String,
    name: &str,
    patch: &Value,
    status: bool,
) -> Result<Option<String>, kube::Error> {
    let request = kube::core::Request::new(url);
    let (params, patch) = (PatchParams::default(), Patch::Merge(patch));
    let mut request = if status {
        request.patch_subresource("status", name, &params, &patch)
    } else {
        request.patch(name, &params, &patch)
    }
    .map_err(kube::Error::BuildRequest)?;
    request.headers_mut().insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static(METADATA_ANSWER),
    );
    client
        .request::<kube::api::PartialObjectMeta<DynamicObject>>(request)
        .await
        .map(|answer| answer.metadata.resource_version)
}

/// Adds the sync finalizer; the resourceVersion makes a concurrent change fail and retry.
pub async fn add_finalizer(ctx: &TypeContext, obj: &DynamicObject) -> Result<(), HubError> {
    let mut finalizers = obj.finalizers().to_vec();
    finalizers.push(SYNC_CONTROLLER_FINALIZER.to_string());
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": obj.resource_version(),
    }});
    bounded(patch_federated(ctx, obj, &patch, false)).await??;
    Ok(())
}

pub async fn remove_finalizer(ctx: &TypeContext, obj: &DynamicObject) -> Result<(), HubError> {
    let finalizers: Vec<&String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != SYNC_CONTROLLER_FINALIZER)
        .collect();
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": obj.resource_version(),
    }});
    done_or_gone(bounded(patch_federated(ctx, obj, &patch, false)).await?)
}

/// A write to the federated object is done when it went through, or when the object is gone
/// (nothing is left to write to).
fn done_or_gone<T>(written: Result<T, kube::Error>) -> Result<(), HubError> {
    match written {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Writes `status` through the status subresource. Lists are sent even when empty: a merge
/// patch would otherwise keep the old ones. What was written is remembered until the hub
/// cache shows it ([`previous_status`]).
pub async fn write_status(
    ctx: &TypeContext,
    obj: &DynamicObject,
    status: &FederatedStatus,
) -> Result<(), HubError> {
    let mut value = serde_json::to_value(status)?;
    if let Value::Object(map) = &mut value {
        map.entry("clusters").or_insert_with(|| json!([]));
        map.entry("conditions").or_insert_with(|| json!([]));
    }
    let patch = json!({ "status": value });
    match bounded(patch_federated(ctx, obj, &patch, true)).await? {
        Ok(Some(resource_version)) => {
            let key =
                kube::runtime::reflector::ObjectRef::from_obj_with(obj, ctx.federated.clone());
            let written = WrittenStatus {
                resource_version,
                status: status.clone(),
            };
            ctx.objects
                .update(&key, |state| state.written_status = Some(written));
            Ok(())
        }
        written => done_or_gone(written),
    }
}

/// The object's status as this controller last wrote it, when the cached `obj` predates that
/// write; else the cached one (and the remembered write is forgotten). Without it, a
/// reconcile queued while the previous one wrote (a member's watch event) reads the object
/// before the hub's watch has delivered the status and writes the same status again.
fn previous_status(ctx: &TypeContext, obj: &DynamicObject) -> Option<FederatedStatus> {
    let key = kube::runtime::reflector::ObjectRef::from_obj_with(obj, ctx.federated.clone());
    let written = ctx
        .objects
        .update(&key, |state| match &state.written_status {
            Some(w)
                if super::objects::store_is_behind(
                    obj.resource_version().as_deref(),
                    &w.resource_version,
                ) =>
            {
                Some(w.status.clone())
            }
            Some(_) => {
                state.written_status = None;
                None
            }
            None => None,
        });
    if written.is_some() {
        return written;
    }
    super::packed_fields::field(obj, "status").and_then(Result::ok)
}

/// The status for a spec that cannot be read, written when it changes.
pub async fn write_invalid_status(
    ctx: &TypeContext,
    obj: &DynamicObject,
    message: &str,
) -> Result<(), HubError> {
    let input = StatusInput {
        generation: 0,
        reason: hubfed_core::status::AggregateReason::ComputePlacementFailed,
        reason_message: Some(message),
        outcomes: &[],
        resources_updated: false,
        remote_status_collection: false,
        unknown_clusters: &[],
        now: "",
        readiness: None,
    };
    match status_to_write(ctx, obj, input) {
        StatusDecision::Write(status) => write_status(ctx, obj, &status).await,
        // No remote status for an invalid spec: a deferral never comes here.
        StatusDecision::Unchanged | StatusDecision::Deferred(_) => Ok(()),
    }
}

/// At most one status write per object in this interval when only remote status changed.
pub const REMOTE_STATUS_WRITE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// What a status computed from a reconcile's input comes to ([`status_to_write`]).
#[derive(Debug)]
pub enum StatusDecision {
    Write(Box<FederatedStatus>),
    Unchanged,
    /// Only remote status changed, and this object's status was written less than
    /// [`REMOTE_STATUS_WRITE_INTERVAL`] ago: write after this long (reconcile again then).
    Deferred(std::time::Duration),
}

/// Computes the status from `input` (its `generation` and `now` are filled in here) and
/// decides whether to write it: when it differs from the object's — unless only remote
/// status changed and the object's status was written moments ago.
pub fn status_to_write(
    ctx: &TypeContext,
    obj: &DynamicObject,
    input: StatusInput<'_>,
) -> StatusDecision {
    let previous = previous_status(ctx, obj);
    let now = now_rfc3339();
    let input = StatusInput {
        generation: obj.metadata.generation.unwrap_or(0),
        now: &now,
        ..input
    };
    let update = compute_status(previous.as_ref(), &input);
    if !update.changed {
        return StatusDecision::Unchanged;
    }
    if ctx.collect_status {
        let key = kube::runtime::reflector::ObjectRef::from_obj_with(obj, ctx.federated.clone());
        let now = std::time::Instant::now();
        let only_remote = only_remote_status_changed(previous.as_ref(), &update.status);
        let deferred = ctx.objects.update(&key, |state| {
            if let Some(at) = state.status_written_at
                && now.duration_since(at) < REMOTE_STATUS_WRITE_INTERVAL
                && only_remote
            {
                return Some(REMOTE_STATUS_WRITE_INTERVAL - now.duration_since(at));
            }
            state.status_written_at = Some(now);
            None
        });
        if let Some(wait) = deferred {
            crate::metrics::METRICS
                .status_writes_deferred
                .with_label_values(&[&ctx.federated.kind.to_lowercase()])
                .inc();
            return StatusDecision::Deferred(wait);
        }
    }
    StatusDecision::Write(Box::new(update.status))
}

/// Writes the (Cluster)PropagatedVersion's status, creating it unless it `exists`.
///
/// Under KubeFed's CRD (the status a subresource, as hubfed's CRDs have it too) that is a
/// create and a status write; under a CRD without the subresource (hubfed's before
/// 2026-12) one write of the object with its status. Which one the hub holds is found out
/// by the writes themselves and remembered: a status write answered 404 means no
/// subresource, an object write whose answer lacks the status sent means one. So a CRD
/// changed while the controller runs is followed. Returns the resourceVersion of the last
/// write.
pub async fn write_versions(
    ctx: &TypeContext,
    obj: &DynamicObject,
    exists: bool,
    versions: &PropagatedVersionStatus,
) -> Result<String, HubError> {
    let pv_name = propagated_version_name(&ctx.target.kind, &obj.name_any());
    let owner = OwnerReference {
        api_version: ctx.federated.api_version.clone(),
        kind: ctx.federated.kind.clone(),
        name: obj.name_any(),
        uid: obj.uid().unwrap_or_default(),
        ..Default::default()
    };
    let metadata = ObjectMeta {
        name: Some(pv_name.clone()),
        namespace: obj.namespace(),
        owner_references: Some(vec![owner]),
        ..Default::default()
    };
    let status = json!({ "status": versions });
    let hub = ctx.shared.hub.clone();
    let subresource = &ctx.shared.versions_status_subresource;
    match obj.namespace() {
        Some(ns) => {
            let pv = PropagatedVersion {
                metadata,
                ..PropagatedVersion::new(&pv_name, Default::default())
            };
            let api = Api::namespaced(hub, &ns);
            write_with_status(api, exists, subresource, &pv, &status).await
        }
        None => {
            let pv = ClusterPropagatedVersion {
                metadata,
                ..ClusterPropagatedVersion::new(&pv_name, Default::default())
            };
            write_with_status(Api::all(hub), exists, subresource, &pv, &status).await
        }
    }
}

async fn write_with_status<K>(
    api: Api<K>,
    exists: bool,
    subresource: &std::sync::atomic::AtomicBool,
    object: &K,
    status: &Value,
) -> Result<String, HubError>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use std::sync::atomic::Ordering::Relaxed;
    let name = object.name_any();
    if !subresource.load(Relaxed) {
        let written = if exists {
            None
        } else {
            create_with_status(&api, object, status).await?
        };
        let written = match written {
            Some(created) => created,
            None => {
                let patch = Patch::Merge(status);
                bounded(api.patch(&name, &PatchParams::default(), &patch)).await??
            }
        };
        if holds_status(&written, status) {
            return Ok(written.resource_version().unwrap_or_default());
        }
        // The status sent was dropped (an existing object keeps its old one): the CRD has
        // the subresource.
        subresource.store(true, Relaxed);
    } else if !exists {
        create_ignoring_conflict(&api, object).await?;
    }
    let params = PatchParams::default();
    match bounded(api.patch_status(&name, &params, &Patch::Merge(status))).await? {
        Ok(written) => Ok(written.resource_version().unwrap_or_default()),
        // No subresource (the object exists: it was just created or seen).
        Err(kube::Error::Api(e)) if e.code == 404 => {
            subresource.store(false, Relaxed);
            let patch = Patch::Merge(status);
            let written = bounded(api.patch(&name, &params, &patch)).await??;
            Ok(written.resource_version().unwrap_or_default())
        }
        Err(e) => Err(e.into()),
    }
}

/// Whether `object` as the API server answered holds the status of `sent`.
fn holds_status<K: serde::Serialize>(object: &K, sent: &Value) -> bool {
    serde_json::to_value(object)
        .ok()
        .is_some_and(|answer| answer.get("status") == sent.get("status"))
}

/// Creates `object` with `status` in it; `None` when it exists already.
async fn create_with_status<K>(
    api: &Api<K>,
    object: &K,
    status: &Value,
) -> Result<Option<K>, HubError>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut body = serde_json::to_value(object)?;
    if let (Some(body), Some(status)) = (body.as_object_mut(), status.get("status")) {
        body.insert("status".to_owned(), status.clone());
    }
    let body: K = serde_json::from_value(body)?;
    match bounded(api.create(&PostParams::default(), &body)).await? {
        Ok(created) => Ok(Some(created)),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

async fn create_ignoring_conflict<K>(api: &Api<K>, object: &K) -> Result<(), HubError>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match bounded(api.create(&PostParams::default(), object)).await? {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Records an Event on the federated object without holding up the reconcile.
pub fn publish(
    ctx: &TypeContext,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    type_: EventType,
    reason: &str,
    message: &str,
) {
    crate::events::publish(&ctx.recorder, reference, type_, reason, message);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_requests::{Seen, answering};

    #[test]
    fn an_answer_holds_the_status_only_when_it_is_the_one_sent() {
        let sent = json!({"status": {"templateVersion": "b", "overridesVersion": "o"}});
        let answer = |status: Value| {
            let mut pv = PropagatedVersion::new("configmap-web", Default::default());
            pv.status = serde_json::from_value(status).unwrap();
            pv
        };
        assert!(holds_status(&answer(sent["status"].clone()), &sent));
        // Under the status subresource an existing object keeps its old status.
        let old = json!({"templateVersion": "a", "overridesVersion": "o"});
        assert!(!holds_status(&answer(old), &sent));
        assert!(!holds_status(&answer(Value::Null), &sent));
    }

    #[tokio::test]
    async fn writes_to_the_federated_object_ask_for_its_metadata_only() {
        let seen = Seen::default();
        let client = answering(
            &seen,
            json!({
                "apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata",
                "metadata": {"name": "web", "namespace": "ns", "resourceVersion": "8"},
            }),
        );
        let url = "/apis/types.kubefed.io/v1beta1/namespaces/ns/federatedconfigmaps".to_owned();
        let patch = json!({"status": {"clusters": []}});
        for status in [false, true] {
            patch_for_metadata(&client, url.clone(), "web", &patch, status)
                .await
                .unwrap();
        }
        let seen = seen.take();
        let paths: Vec<&str> = seen.iter().map(|r| r.path.as_str()).collect();
        assert_eq!(paths, [format!("{url}/web"), format!("{url}/web/status")]);
        for request in &seen {
            assert_eq!(request.method, "PATCH");
            assert_eq!(request.accept, METADATA_ANSWER);
            assert_eq!(request.content_type, "application/merge-patch+json");
        }
    }
}
