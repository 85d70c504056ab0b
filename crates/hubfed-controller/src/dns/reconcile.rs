//! Every record, after a change settles and every [`RESYNC`]: the members' observations, the
//! record's status and condition, its DNSEndpoints; then the DNSEndpoints whose record is gone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use hubfed_api::multiclusterdns::{
    IngressDnsRecord, IngressDnsRecordStatus, ServiceDnsRecord, ServiceDnsRecordStatus,
};
use hubfed_core::dns::{
    MemberObservation, RecordOutcome, ResolvedHosts, condition_event, ingress_endpoint_name,
    ingress_endpoints, ingress_record_status, load_balancer_hostnames, record_conditions,
    service_endpoint_name, service_endpoints, service_record_status,
};
use k8s_openapi::api::core::v1::LoadBalancerStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;
use kube::runtime::reflector::ObjectRef;

use super::observe::{Context, MemberCaches, SERVICE_NAME_LABEL};
use super::write::{self, RecordKind};
use super::{DEBOUNCE, RESYNC};
use crate::metrics::METRICS;

/// Reconciles every record whenever something changed, and every [`RESYNC`], until shutdown.
pub(super) async fn run(ctx: Arc<Context>) {
    let synced = async {
        let _ = ctx.service_records.wait_until_ready().await;
        let _ = ctx.ingress_records.wait_until_ready().await;
        let _ = ctx.domains.wait_until_ready().await;
        let _ = ctx.clusters.wait_until_ready().await;
        let _ = ctx.externaldns_endpoints.wait_until_ready().await;
        let _ = ctx.kubefed_endpoints.wait_until_ready().await;
    };
    tokio::select! {
        () = ctx.shutdown.cancelled() => return,
        () = synced => {}
    }
    loop {
        reconcile_all(&ctx).await;
        tokio::select! {
            () = ctx.shutdown.cancelled() => return,
            () = ctx.changed.notified() => {}
            () = tokio::time::sleep(RESYNC) => {}
        }
        tokio::select! {
            () = ctx.shutdown.cancelled() => return,
            () = tokio::time::sleep(DEBOUNCE) => {}
        }
    }
}

/// One member as every record sees it in this pass.
struct MemberView {
    name: String,
    ready: bool,
    region: String,
    zones: Vec<String>,
    caches: Option<Arc<MemberCaches>>,
    /// `(namespace, service)` of the Services with a ready endpoint.
    ready_services: BTreeSet<(String, String)>,
}

impl MemberView {
    fn observe(&self, namespace: &str, name: &str, ingress: bool) -> MemberObservation {
        let key = ObjectRef::new(name).within(namespace);
        let load_balancer = self.caches.as_ref().and_then(|caches| {
            if ingress {
                let ingress = caches
                    .ingresses
                    .get(&ObjectRef::new(name).within(namespace))?;
                let lb = ingress.status.as_ref()?.load_balancer.as_ref()?;
                // An Ingress's load balancer has the shape of a Service's.
                serde_json::to_value(lb)
                    .ok()
                    .and_then(|v| serde_json::from_value::<LoadBalancerStatus>(v).ok())
            } else {
                let service = caches.services.get(&key)?;
                Some(
                    service
                        .status
                        .as_ref()
                        .and_then(|s| s.load_balancer.clone())
                        .unwrap_or_default(),
                )
            }
        });
        MemberObservation {
            cluster: self.name.clone(),
            ready: self.ready,
            region: self.region.clone(),
            zones: self.zones.clone(),
            load_balancer,
            ready_endpoints: self
                .ready_services
                .contains(&(namespace.to_owned(), name.to_owned())),
        }
    }
}

/// The push members of the registry with their region, zones and caches.
fn member_views(ctx: &Context) -> Vec<MemberView> {
    let caches = ctx.members();
    ctx.pool
        .clusters()
        .into_iter()
        .filter(|c| !c.pull)
        .map(|cluster| {
            let status = ctx
                .clusters
                .get(&ObjectRef::new(&cluster.name).within(&ctx.kubefed_namespace))
                .and_then(|c| c.status.clone());
            let caches = caches.get(&cluster.name).cloned();
            let ready_services = caches
                .as_ref()
                .map(|c| ready_services(c))
                .unwrap_or_default();
            MemberView {
                name: cluster.name.clone(),
                ready: cluster.ready,
                region: status
                    .as_ref()
                    .and_then(|s| s.region.clone())
                    .unwrap_or_default(),
                zones: status.map(|s| s.zones).unwrap_or_default(),
                caches,
                ready_services,
            }
        })
        .collect()
}

/// The Services of a member with at least one ready endpoint in their EndpointSlices (an
/// endpoint without a `ready` condition is ready, as the API says).
fn ready_services(caches: &MemberCaches) -> BTreeSet<(String, String)> {
    caches
        .slices
        .state()
        .iter()
        .filter(|slice| {
            slice.endpoints.iter().flatten().any(|e| {
                !e.addresses.is_empty()
                    && e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true)
            })
        })
        .filter_map(|slice| {
            let service = slice.labels().get(SERVICE_NAME_LABEL)?.clone();
            Some((slice.namespace().unwrap_or_default(), service))
        })
        .collect()
}

/// A record's desired status and DNSEndpoint, before its host names are looked up.
struct Planned<R> {
    record: Arc<R>,
    /// The record with its new status (without conditions yet); `None`: its Domain is missing.
    with_status: Option<R>,
}

async fn reconcile_all(ctx: &Context) {
    let members = member_views(ctx);
    let now = Time(Timestamp::now());
    let services: Vec<Planned<ServiceDnsRecord>> = ctx
        .service_records
        .state()
        .into_iter()
        .map(|record| plan_service(ctx, &members, record))
        .collect();
    let ingresses: Vec<Planned<IngressDnsRecord>> = ctx
        .ingress_records
        .state()
        .into_iter()
        .map(|record| {
            let ns = record.namespace().unwrap_or_default();
            let observations: Vec<MemberObservation> = members
                .iter()
                .map(|m| m.observe(&ns, &record.name_any(), true))
                .collect();
            let mut with_status = (*record).clone();
            with_status.status = Some(ingress_record_status(&observations));
            Planned {
                record,
                with_status: Some(with_status),
            }
        })
        .collect();
    let resolved = resolve(ctx, &services, &ingresses).await;
    for planned in &services {
        finish_service(ctx, planned, &resolved, &now).await;
    }
    for planned in &ingresses {
        finish_ingress(ctx, planned, &resolved, &now).await;
    }
    write::delete_orphans(ctx).await;
    METRICS
        .dns_records
        .with_label_values(&[RecordKind::Service.kind()])
        .set(i64::try_from(services.len()).unwrap_or(i64::MAX));
    METRICS
        .dns_records
        .with_label_values(&[RecordKind::Ingress.kind()])
        .set(i64::try_from(ingresses.len()).unwrap_or(i64::MAX));
}

fn plan_service(
    ctx: &Context,
    members: &[MemberView],
    record: Arc<ServiceDnsRecord>,
) -> Planned<ServiceDnsRecord> {
    let domain = ctx
        .domains
        .get(&ObjectRef::new(&record.spec.domain_ref).within(&ctx.kubefed_namespace));
    let Some(domain) = domain.filter(|_| !record.spec.domain_ref.is_empty()) else {
        return Planned {
            record,
            with_status: None,
        };
    };
    let ns = record.namespace().unwrap_or_default();
    let observations: Vec<MemberObservation> = members
        .iter()
        .map(|m| m.observe(&ns, &record.name_any(), false))
        .collect();
    let mut with_status = (*record).clone();
    with_status.status = Some(service_record_status(
        &record.spec,
        &domain.domain,
        &observations,
    ));
    Planned {
        record,
        with_status: Some(with_status),
    }
}

/// Every host name of the planned statuses' load balancers, looked up at once.
async fn resolve(
    ctx: &Context,
    services: &[Planned<ServiceDnsRecord>],
    ingresses: &[Planned<IngressDnsRecord>],
) -> ResolvedHosts {
    let service_lbs = services
        .iter()
        .filter_map(|p| p.with_status.as_ref()?.status.as_ref())
        .flat_map(|s| s.dns.iter().map(|c| &c.load_balancer));
    let ingress_lbs = ingresses
        .iter()
        .filter_map(|p| p.with_status.as_ref()?.status.as_ref())
        .flat_map(|s| s.dns.iter().map(|c| &c.load_balancer));
    let hosts = load_balancer_hostnames(service_lbs.chain(ingress_lbs));
    let lookup = &ctx.settings.lookup;
    let lookups = hosts.into_iter().map(|host| async move {
        let found = lookup.lookup(host.clone()).await;
        (host, found)
    });
    ResolvedHosts(
        futures::future::join_all(lookups)
            .await
            .into_iter()
            .collect::<BTreeMap<_, _>>(),
    )
}

async fn finish_service(
    ctx: &Context,
    planned: &Planned<ServiceDnsRecord>,
    resolved: &ResolvedHosts,
    now: &Time,
) {
    let record = &planned.record;
    let live = record.status.clone().unwrap_or_default();
    let Some(with_status) = &planned.with_status else {
        let outcome = RecordOutcome::DomainNotFound {
            domain_ref: &record.spec.domain_ref,
            namespace: &ctx.kubefed_namespace,
        };
        let status = ServiceDnsRecordStatus {
            conditions: record_conditions(&outcome, &live.conditions, now),
            ..live.clone()
        };
        report(ctx, record.as_ref(), &live.conditions, &status.conditions);
        write::status(ctx, RecordKind::Service, record.as_ref(), &live, &status).await;
        return;
    };
    let endpoints = service_endpoints(with_status, resolved);
    let mut status = with_status.status.clone().unwrap_or_default();
    status.conditions = record_conditions(
        &RecordOutcome::Written(&endpoints.problems),
        &live.conditions,
        now,
    );
    report(ctx, record.as_ref(), &live.conditions, &status.conditions);
    write::status(ctx, RecordKind::Service, record.as_ref(), &live, &status).await;
    write::endpoints(
        ctx,
        RecordKind::Service,
        record.as_ref(),
        &service_endpoint_name(&record.name_any()),
        endpoints.endpoints,
    )
    .await;
}

async fn finish_ingress(
    ctx: &Context,
    planned: &Planned<IngressDnsRecord>,
    resolved: &ResolvedHosts,
    now: &Time,
) {
    let record = &planned.record;
    let Some(with_status) = &planned.with_status else {
        return;
    };
    let live: IngressDnsRecordStatus = record.status.clone().unwrap_or_default();
    let endpoints = ingress_endpoints(with_status, resolved);
    let mut status = with_status.status.clone().unwrap_or_default();
    status.conditions = record_conditions(
        &RecordOutcome::Written(&endpoints.problems),
        &live.conditions,
        now,
    );
    report(ctx, record.as_ref(), &live.conditions, &status.conditions);
    write::status(ctx, RecordKind::Ingress, record.as_ref(), &live, &status).await;
    write::endpoints(
        ctx,
        RecordKind::Ingress,
        record.as_ref(),
        &ingress_endpoint_name(&record.name_any()),
        endpoints.endpoints,
    )
    .await;
}

/// A Warning Event on the record when its `RecordsComplete` condition turns or stays false
/// with another message.
fn report<K>(
    ctx: &Context,
    record: &K,
    live: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    desired: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) where
    K: kube::Resource<DynamicType = ()>,
{
    if let Some((reason, message)) = condition_event(live, desired) {
        tracing::warn!(
            kind = %K::kind(&()),
            namespace = record.meta().namespace.as_deref().unwrap_or_default(),
            name = record.meta().name.as_deref().unwrap_or_default(),
            reason = %reason,
            "{message}"
        );
        crate::events::publish(
            &ctx.recorder,
            &record.object_ref(&()),
            kube::runtime::events::EventType::Warning,
            &reason,
            &message,
        );
    }
}
