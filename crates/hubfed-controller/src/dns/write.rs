//! The DNS controller's writes to the hub: a record's status, its DNSEndpoints in the chosen
//! groups, and the deletion of DNSEndpoints whose record is gone. Each write happens only
//! when the cached object differs from the desired one.

use hubfed_api::externaldns;
use hubfed_api::multiclusterdns::{self, DnsEndpointSpec, Endpoint};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt as _};
use serde::Serialize;
use serde_json::{Value, json};
use tracing::{debug, warn};

use super::observe::Context;
use super::{FIELD_MANAGER, RECORD_KIND_LABEL};
use crate::metrics::METRICS;

/// The kind of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RecordKind {
    Service,
    Ingress,
}

impl RecordKind {
    /// The record's kind, also the value of [`RECORD_KIND_LABEL`].
    pub fn kind(self) -> &'static str {
        match self {
            Self::Service => "ServiceDNSRecord",
            Self::Ingress => "IngressDNSRecord",
        }
    }

    fn of_label(value: &str) -> Option<Self> {
        [Self::Service, Self::Ingress]
            .into_iter()
            .find(|k| k.kind() == value)
    }
}

/// Writes `desired` as the record's status when it differs from `live`.
pub(super) async fn status<K, S>(ctx: &Context, kind: RecordKind, record: &K, live: &S, desired: &S)
where
    K: Resource<DynamicType = ()>,
    S: Serialize + PartialEq,
{
    if live == desired {
        return;
    }
    let (Some(ns), name) = (record.meta().namespace.as_deref(), record.name_any()) else {
        return;
    };
    let resource = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.hub.clone(), ns, &resource);
    let body = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": name, "namespace": ns},
        "status": desired,
    });
    let result = api
        .patch_status(&name, &apply_params(), &Patch::Apply(&body))
        .await;
    count(kind.kind(), "apply-status", result.is_ok());
    if let Err(error) = result {
        warn!(kind = kind.kind(), namespace = ns, name = %name, error = %error, "writing a DNS record's status failed");
    }
}

/// Writes the record's DNSEndpoint `name` in each chosen group, when the cached one differs.
pub(super) async fn endpoints<K>(
    ctx: &Context,
    kind: RecordKind,
    record: &K,
    name: &str,
    endpoints: Vec<Endpoint>,
) where
    K: Resource<DynamicType = ()>,
{
    let (Some(ns), Some(uid)) = (
        record.meta().namespace.as_deref(),
        record.meta().uid.as_deref(),
    ) else {
        return;
    };
    let kubefed_spec = DnsEndpointSpec { endpoints };
    let owner = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "name": record.name_any(),
        "uid": uid,
        "controller": true,
    });
    if ctx.settings.groups.kubefed() {
        let spec = serde_json::to_value(&kubefed_spec).unwrap_or(Value::Null);
        let cached = ctx
            .kubefed_endpoints
            .get(&ObjectRef::new(name).within(ns))
            .map(|e| {
                let spec = serde_json::to_value(&e.spec).unwrap_or(Value::Null);
                (spec, e.meta().clone())
            });
        let resource = ApiResource::erase::<multiclusterdns::DnsEndpoint>(&());
        apply(ctx, &resource, kind, ns, name, uid, &owner, spec, cached).await;
    }
    if ctx.settings.groups.externaldns() {
        let spec = serde_json::to_value(externaldns::DnsEndpointSpec::from(kubefed_spec))
            .unwrap_or(Value::Null);
        let cached = ctx
            .externaldns_endpoints
            .get(&ObjectRef::new(name).within(ns))
            .map(|e| {
                let spec = serde_json::to_value(&e.spec).unwrap_or(Value::Null);
                (spec, e.meta().clone())
            });
        let resource = ApiResource::erase::<externaldns::DnsEndpoint>(&());
        apply(ctx, &resource, kind, ns, name, uid, &owner, spec, cached).await;
    }
}

/// One DNSEndpoint's server-side apply, unless `cached` already is it.
#[allow(clippy::too_many_arguments)]
async fn apply(
    ctx: &Context,
    resource: &ApiResource,
    kind: RecordKind,
    ns: &str,
    name: &str,
    uid: &str,
    owner: &Value,
    spec: Value,
    cached: Option<(
        Value,
        k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    )>,
) {
    let current = cached.is_some_and(|(cached_spec, meta)| {
        cached_spec == spec
            && meta
                .labels
                .as_ref()
                .and_then(|l| l.get(RECORD_KIND_LABEL))
                .map(String::as_str)
                == Some(kind.kind())
            && meta
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == uid && o.controller == Some(true))
    });
    if current {
        return;
    }
    let body = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {RECORD_KIND_LABEL: kind.kind()},
            "ownerReferences": [owner],
        },
        "spec": spec,
    });
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.hub.clone(), ns, resource);
    let result = api.patch(name, &apply_params(), &Patch::Apply(&body)).await;
    count(&endpoint_kind(resource), "apply", result.is_ok());
    match result {
        Ok(_) => debug!(group = %resource.group, namespace = ns, name, "DNSEndpoint written"),
        Err(error) => warn!(
            group = %resource.group,
            namespace = ns,
            name,
            error = %error,
            "writing a DNSEndpoint failed (is its CRD installed in the hub?)"
        ),
    }
}

/// Deletes the DNSEndpoints this controller wrote, in the chosen groups, whose record is
/// gone (another record of the same name, a new uid, takes them over instead).
pub(super) async fn delete_orphans(ctx: &Context) {
    if ctx.settings.groups.kubefed() {
        let resource = ApiResource::erase::<multiclusterdns::DnsEndpoint>(&());
        for endpoint in ctx.kubefed_endpoints.state() {
            delete_if_orphan(ctx, &resource, endpoint.meta()).await;
        }
    }
    if ctx.settings.groups.externaldns() {
        let resource = ApiResource::erase::<externaldns::DnsEndpoint>(&());
        for endpoint in ctx.externaldns_endpoints.state() {
            delete_if_orphan(ctx, &resource, endpoint.meta()).await;
        }
    }
}

async fn delete_if_orphan(
    ctx: &Context,
    resource: &ApiResource,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) {
    let (Some(ns), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) else {
        return;
    };
    let Some(kind) = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(RECORD_KIND_LABEL))
        .and_then(|v| RecordKind::of_label(v))
    else {
        return;
    };
    let owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == kind.kind());
    let alive = owner.is_some_and(|owner| {
        let uid = Some(owner.uid.as_str());
        match kind {
            RecordKind::Service => ctx
                .service_records
                .get(&ObjectRef::new(&owner.name).within(ns))
                .is_some_and(|r| r.meta().uid.as_deref() == uid),
            RecordKind::Ingress => ctx
                .ingress_records
                .get(&ObjectRef::new(&owner.name).within(ns))
                .is_some_and(|r| r.meta().uid.as_deref() == uid),
        }
    });
    if alive {
        return;
    }
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.hub.clone(), ns, resource);
    let result = match api.delete(name, &DeleteParams::default()).await {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        other => other.map(|_| ()),
    };
    count(&endpoint_kind(resource), "delete", result.is_ok());
    if let Err(error) = result {
        warn!(group = %resource.group, namespace = ns, name, error = %error, "deleting a DNSEndpoint failed");
    }
}

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// `DNSEndpoint.<group>`, the metric's kind of a DNSEndpoint.
fn endpoint_kind(resource: &ApiResource) -> String {
    format!("{}.{}", resource.kind, resource.group)
}

fn count(kind: &str, operation: &str, ok: bool) {
    METRICS
        .dns_writes
        .with_label_values(&[kind, operation, if ok { "ok" } else { "error" }])
        .inc();
}
