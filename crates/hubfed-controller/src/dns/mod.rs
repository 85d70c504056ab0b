//! The multi-cluster DNS controller (KubeFed's `servicedns`, `ingressdns` and `dnsendpoint`
//! controllers): every ServiceDNSRecord and IngressDNSRecord of the hub gets its status from
//! the members' Services or Ingresses of its namespace and name, and a DNSEndpoint of its
//! records for external-dns. Decisions are `hubfed_core::dns`'s; this is the IO.
//!
//! # Pipeline
//!
//! - `observe.rs`: caches of the hub's records, Domains, KubeFedClusters (region and zones)
//!   and this controller's DNSEndpoints (both groups), and per push member with a client its
//!   Services, EndpointSlices and Ingresses. Every change wakes the reconciler.
//! - `reconcile.rs`: after a change settles ([`DEBOUNCE`]) and every [`RESYNC`] (host names
//!   are looked up again then), every record: its members' observations, its status and
//!   condition ([`hubfed_core::dns::service_record_status`], `record_conditions`), its
//!   endpoints ([`hubfed_core::dns::service_endpoints`]); then the DNSEndpoints whose record
//!   is gone.
//! - `write.rs`: status and DNSEndpoint writes (server-side apply as [`FIELD_MANAGER`]), each
//!   only when it differs from the cached object, deletions, and the record's Events.
//!
//! # DNSEndpoints
//!
//! Named `service-<name>` or `ingress-<name>` in the record's namespace, labelled
//! [`RECORD_KIND_LABEL`], owned by the record (an owner reference, as KubeFed's, so a hub's
//! garbage collector removes them too). Written in external-dns's group
//! (`externaldns.k8s.io`, the default), KubeFed's (`multiclusterdns.kubefed.io`) or both
//! ([`EndpointGroups`]); a group not chosen is left alone.

mod observe;
mod reconcile;
mod write;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::Client;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::clusters::MemberClientPool;
use crate::watch::scope_namespace;
use hubfed_core::placement::ControlPlaneScope;

/// The field manager of every write of the DNS controller.
pub const FIELD_MANAGER: &str = "hubfed-dns";
/// The reporter of its Events.
const REPORTER: &str = "hubfed-dns";
/// The label on the DNSEndpoints the controller writes: the kind of their record.
pub const RECORD_KIND_LABEL: &str = "multiclusterdns.hubfed.io/record-kind";
/// How long the reconciler waits for a burst of changes to end.
const DEBOUNCE: Duration = Duration::from_millis(200);
/// How often every record is reconciled without a change (host names looked up again).
const RESYNC: Duration = Duration::from_secs(60);
/// How long one host-name lookup may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// The groups the DNSEndpoints are written in (`--dns-endpoint-groups`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EndpointGroups {
    /// `externaldns.k8s.io/v1alpha1`, the one external-dns ≥ v0.21 reads.
    #[default]
    Externaldns,
    /// KubeFed's `multiclusterdns.kubefed.io/v1alpha1`, for external-dns before v0.21.
    Kubefed,
    /// Both.
    Both,
}

impl EndpointGroups {
    /// Whether external-dns's group is written.
    pub fn externaldns(self) -> bool {
        matches!(self, Self::Externaldns | Self::Both)
    }

    /// Whether KubeFed's group is written.
    pub fn kubefed(self) -> bool {
        matches!(self, Self::Kubefed | Self::Both)
    }
}

/// Looks host names up: the system resolver in the controller, a table in tests.
pub trait HostLookup: Send + Sync {
    /// The addresses of `host`, or why there are none.
    fn lookup(&self, host: String) -> BoxFuture<'static, Result<Vec<String>, String>>;
}

/// The system resolver (`getaddrinfo`), each lookup bounded by [`LOOKUP_TIMEOUT`].
pub struct SystemLookup;

impl HostLookup for SystemLookup {
    fn lookup(&self, host: String) -> BoxFuture<'static, Result<Vec<String>, String>> {
        Box::pin(async move {
            let found = tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((host, 0)))
                .await
                .map_err(|_| format!("no answer within {}s", LOOKUP_TIMEOUT.as_secs()))?
                .map_err(|e| e.to_string())?;
            let mut addresses: Vec<String> = found.map(|a| a.ip().to_string()).collect();
            addresses.sort();
            addresses.dedup();
            Ok(addresses)
        })
    }
}

/// The DNS controller's settings.
#[derive(Clone)]
pub struct DnsSettings {
    /// The groups DNSEndpoints are written in.
    pub groups: EndpointGroups,
    /// How host-name load balancers are looked up.
    pub lookup: Arc<dyn HostLookup>,
    /// Objects per page of a member list (`--member-list-page-size`).
    pub list_page_size: u32,
}

/// Runs the DNS controller until `shutdown`.
pub async fn run(
    hub: Client,
    pool: Arc<MemberClientPool>,
    scope: ControlPlaneScope,
    kubefed_namespace: String,
    settings: DnsSettings,
    shutdown: CancellationToken,
) {
    let records_namespace = scope_namespace(scope, &kubefed_namespace).map(str::to_owned);
    info!(
        groups = ?settings.groups,
        namespace = %kubefed_namespace,
        "multi-cluster DNS controller started"
    );
    let ctx = observe::Context::start(
        hub,
        pool,
        kubefed_namespace,
        records_namespace,
        settings,
        shutdown.clone(),
    );
    tokio::spawn(observe::follow_members(Arc::clone(&ctx)));
    reconcile::run(ctx).await;
}
