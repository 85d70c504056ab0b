//! What every member write shares: its result for the cluster's status, the member API for
//! the object's type, how a member's refusal reads, and the metrics of each request. Used by
//! the dispatcher and the apply steps alike (neither owns the other).

use hubfed_core::plan::{ApplyBody, FederatedObject};
use hubfed_core::status::{ClusterOutcome, PropagationStatus};
use kube::api::{Api, DynamicObject, Patch, PatchParams};

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

/// A patch of a member object whose answer is read for its metadata only (version, uid,
/// managedFields) — unless `whole`: types whose readiness is read from the answer's status
/// ([`hubfed_core::readiness::needs_status`]). The member then encodes, and hubfed parses,
/// the object's metadata instead of the whole object (`as=PartialObjectMetadata`): with
/// ~1 MB objects the answer was a large part of a write's cost on both sides. The object
/// returned holds the answer's metadata and, unless `whole`, no data.
pub(super) async fn patch_answer<P: serde::Serialize + std::fmt::Debug>(
    api: &Api<DynamicObject>,
    name: &str,
    params: &PatchParams,
    patch: &Patch<P>,
    whole: bool,
) -> Result<DynamicObject, kube::Error> {
    if whole {
        return api.patch(name, params, patch).await;
    }
    let answer = api.patch_metadata(name, params, patch).await?;
    Ok(metadata_only(answer))
}

/// A server-side apply of `body` as encoded once for every cluster that gets it
/// ([`ApplyBody::json`]): each request carries those bytes, not an encoding of its own (with
/// ~1 MB objects, one encoding per member request in flight was the largest share of the
/// controller's peak memory). Otherwise as [`patch_answer`] with `Patch::Apply(body)`.
pub(super) async fn apply_encoded(
    api: &Api<DynamicObject>,
    name: &str,
    params: &PatchParams,
    body: &ApplyBody,
    whole: bool,
) -> Result<DynamicObject, kube::Error> {
    // The request kube would make (path, query, headers), with the shared bytes as its body.
    let request = kube::core::Request::new(api.resource_url());
    let placeholder = Patch::Apply(());
    let request = if whole {
        request.patch(name, params, &placeholder)
    } else {
        request.patch_metadata(name, params, &placeholder)
    }
    .map_err(kube::Error::BuildRequest)?;
    let json = bytes::Bytes::from_owner(body.json());
    let request = request.map(|_| kube::client::Body::from(json));
    let response = api.clone().into_client().send(request).await?;
    let status = response.status();
    let answer = response.into_body().collect_bytes().await?;
    if status.is_client_error() || status.is_server_error() {
        return Err(api_error(status, &answer));
    }
    if whole {
        return serde_json::from_slice(&answer).map_err(kube::Error::SerdeError);
    }
    let answer: kube::api::PartialObjectMeta<DynamicObject> =
        serde_json::from_slice(&answer).map_err(kube::Error::SerdeError)?;
    Ok(metadata_only(answer))
}

/// A metadata-only answer as the object the apply steps read (its metadata, no data).
fn metadata_only(answer: kube::api::PartialObjectMeta<DynamicObject>) -> DynamicObject {
    DynamicObject {
        types: None,
        metadata: answer.metadata,
        data: serde_json::Value::Object(serde_json::Map::new()),
    }
}

/// An API server's refusal as kube reports it: its `Status`, or one made of the text.
fn api_error(code: http::StatusCode, answer: &[u8]) -> kube::Error {
    let text = String::from_utf8_lossy(answer);
    let status = serde_json::from_str::<kube::core::Status>(&text).unwrap_or_else(|_| {
        kube::core::Status::failure(text.trim(), "Failed to parse error data")
            .with_code(code.as_u16())
    });
    kube::Error::Api(status.boxed())
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

/// One member request, timed from [`MemberCall::start`] and recorded in the metrics when it
/// ends ([`MemberCall::end`]), or as failed when it is dropped unended: a request cut off by
/// a timeout or a `?` counts, as it did not before.
#[must_use = "a member call is recorded when it ends"]
pub(super) struct MemberCall<'a> {
    cluster: &'a str,
    operation: &'static str,
    started: std::time::Instant,
    ended: bool,
}

impl<'a> MemberCall<'a> {
    /// A request `operation` (`get`, `create`, `update`, `delete`, `remove_label`) to
    /// `cluster` starts now.
    pub(super) fn start(cluster: &'a str, operation: &'static str) -> Self {
        Self {
            cluster,
            operation,
            started: std::time::Instant::now(),
            ended: false,
        }
    }

    /// The request ended, well or not.
    pub(super) fn end(mut self, ok: bool) {
        self.ended = true;
        record(self.cluster, self.operation, self.started, ok);
    }
}

impl Drop for MemberCall<'_> {
    fn drop(&mut self) {
        if !self.ended {
            record(self.cluster, self.operation, self.started, false);
        }
    }
}

/// Records one member request in the metrics.
fn record(cluster: &str, operation: &str, started: std::time::Instant, ok: bool) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_requests::{Seen, answering, answering_with};
    use serde_json::json;

    fn api(client: kube::Client) -> Api<DynamicObject> {
        let resource =
            kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        Api::namespaced_with(client, "ns", &resource)
    }

    #[tokio::test]
    async fn an_apply_asks_for_the_metadata_only_unless_the_status_is_read() {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web"}});
        let params = PatchParams::apply("hubfed").force();

        let seen = Seen::default();
        let answer = json!({
            "apiVersion": "meta.k8s.io/v1",
            "kind": "PartialObjectMetadata",
            "metadata": {"name": "web", "namespace": "ns", "resourceVersion": "8", "generation": 2},
        });
        let applied = patch_answer(
            &api(answering(&seen, answer)),
            "web",
            &params,
            &Patch::Apply(&body),
            false,
        )
        .await
        .unwrap();
        assert_eq!(applied.metadata.resource_version.as_deref(), Some("8"));
        assert_eq!(applied.metadata.generation, Some(2));
        assert_eq!(applied.data, json!({}));
        let request = seen.take().remove(0);
        assert_eq!(request.path, "/api/v1/namespaces/ns/configmaps/web");
        assert!(
            request.accept.contains("as=PartialObjectMetadata"),
            "{}",
            request.accept
        );
        assert_eq!(request.content_type, "application/apply-patch+yaml");

        let seen = Seen::default();
        let whole = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "web", "namespace": "ns", "resourceVersion": "9"},
            "data": {"a": "b"},
        });
        let applied = patch_answer(
            &api(answering(&seen, whole)),
            "web",
            &params,
            &Patch::Apply(&body),
            true,
        )
        .await
        .unwrap();
        assert_eq!(applied.data["data"], json!({"a": "b"}));
        let request = seen.take().remove(0);
        assert!(
            !request.accept.contains("PartialObjectMetadata"),
            "{}",
            request.accept
        );
    }

    #[tokio::test]
    async fn an_encoded_apply_sends_the_shared_bytes_as_kube_would_send_the_object() {
        let body = ApplyBody::from(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "web", "namespace": "ns"},
            "data": {"a": "b"},
        }));
        let params = PatchParams::apply("hubfed").force();
        let answer = json!({
            "apiVersion": "meta.k8s.io/v1",
            "kind": "PartialObjectMetadata",
            "metadata": {"name": "web", "namespace": "ns", "resourceVersion": "8"},
        });
        // What kube sends for the object itself.
        let seen = Seen::default();
        patch_answer(
            &api(answering(&seen, answer.clone())),
            "web",
            &params,
            &Patch::Apply(&*body),
            false,
        )
        .await
        .unwrap();
        let by_kube = seen.take().remove(0);

        let seen = Seen::default();
        let applied = apply_encoded(&api(answering(&seen, answer)), "web", &params, &body, false)
            .await
            .unwrap();
        assert_eq!(applied.metadata.resource_version.as_deref(), Some("8"));
        let encoded = seen.take().remove(0);
        assert_eq!(encoded.body, &*body.json());
        let sent: serde_json::Value = serde_json::from_slice(&encoded.body).unwrap();
        assert_eq!(sent, *body);
        assert_eq!(
            (
                &encoded.method,
                &encoded.path,
                &encoded.query,
                &encoded.accept,
                &encoded.content_type
            ),
            (
                &by_kube.method,
                &by_kube.path,
                &by_kube.query,
                &by_kube.accept,
                &by_kube.content_type
            ),
        );
        assert_eq!(encoded.query, "&force=true&fieldManager=hubfed");
    }

    #[tokio::test]
    async fn an_encoded_apply_refused_reads_as_kube_reports_it() {
        let body = ApplyBody::from(json!({"apiVersion": "v1", "kind": "ConfigMap"}));
        let params = PatchParams::apply("hubfed");
        let conflict = json!({
            "apiVersion": "v1",
            "kind": "Status",
            "status": "Failure",
            "message": "Apply failed with 1 conflict",
            "reason": "Conflict",
            "code": 409,
        });
        let seen = Seen::default();
        let refused = apply_encoded(
            &api(answering_with(&seen, 409, conflict)),
            "web",
            &params,
            &body,
            false,
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&refused, kube::Error::Api(s) if s.code == 409 && s.message == "Apply failed with 1 conflict"),
            "{refused:?}"
        );
        // Not a Status: the text, with the HTTP code.
        let refused = apply_encoded(
            &api(answering_with(&seen, 503, json!("overloaded"))),
            "web",
            &params,
            &body,
            true,
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&refused, kube::Error::Api(s) if s.code == 503),
            "{refused:?}"
        );
    }
}
