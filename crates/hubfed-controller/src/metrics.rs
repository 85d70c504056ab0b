//! The controller's Prometheus metrics. Names follow KubeFed's where one exists
//! (docs/kubefed-compatibility.md §4), so existing dashboards keep working; hubfed's own carry
//! the `hubfed_` prefix. Labels are bounded: type, cluster, operation, result — never object
//! names.

use std::sync::LazyLock;

use prometheus::core::Collector;
use prometheus::process_collector::ProcessCollector;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// KubeFed's buckets for its own histograms.
const KUBEFED_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 7.5, 10.0, 12.5, 15.0, 17.5, 20.0, 22.5, 25.0, 27.5, 30.0,
    50.0, 75.0, 100.0, 1000.0,
];
/// Finer buckets for hubfed's latencies, which are mostly well under a second.
const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Buckets for admission reviews, answered in well under a millisecond.
const WEBHOOK_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5,
];

/// One metric's name, help text and label names.
struct Def {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
}

/// The type of a metric of kind `gauge`, `counter` or `histogram`.
macro_rules! metric_type {
    (gauge) => {
        IntGaugeVec
    };
    (counter) => {
        IntCounterVec
    };
    (histogram) => {
        HistogramVec
    };
}

/// Declares every metric once — its field, kind, name, help text, label names (and buckets)
/// — as the fields of [`Metrics`] and their registration in `Metrics::new`.
macro_rules! metrics {
    ($(
        $field:ident: $kind:ident($name:literal, $help:literal, [$($label:literal),*] $(, $buckets:ident)?);
    )*) => {
        pub struct Metrics {
            pub registry: Registry,
            $(pub $field: metric_type!($kind),)*
        }

        impl Metrics {
            fn new() -> Self {
                let registry = Registry::new();
                let r = Registering(&registry);
                let metrics = Self {
                    $($field: r.$kind(
                        Def { name: $name, help: $help, labels: &[$($label),*] }
                        $(, $buckets)?
                    ),)*
                    registry: registry.clone(),
                };
                register(&registry, Box::new(ProcessCollector::for_self()));
                metrics
            }
        }
    };
}

metrics! {
    // KubeFed-compatible.
    kubefedcluster_state: gauge(
        "kubefedcluster_state",
        "Member clusters by health state (1 for the current state).",
        ["state", "cluster"]
    );
    cluster_health_status_duration: histogram(
        "cluster_health_status_duration_seconds",
        "Duration of one cluster health probe.",
        [],
        KUBEFED_BUCKETS
    );
    reconcile_federated_resources_duration: histogram(
        "reconcile_federated_resources_duration_seconds",
        "Duration of one federated object reconcile.",
        [],
        KUBEFED_BUCKETS
    );
    dispatch_operation_duration: histogram(
        "dispatch_operation_duration_seconds",
        "Duration of member writes by action.",
        ["action"],
        KUBEFED_BUCKETS
    );
    reconcile_total: counter(
        "controller_runtime_reconcile_total",
        "Reconciles per controller and result.",
        ["controller", "result"]
    );
    reconcile_errors_total: counter(
        "controller_runtime_reconcile_errors_total",
        "Reconciles that failed, per controller.",
        ["controller"]
    );
    reconcile_time: histogram(
        "controller_runtime_reconcile_time_seconds",
        "Duration of reconciles per controller.",
        ["controller"],
        LATENCY_BUCKETS
    );
    // hubfed: member clusters.
    member_operations_total: counter(
        "hubfed_member_operations_total",
        "Requests to member clusters by cluster, operation and result.",
        ["cluster", "operation", "result"]
    );
    member_operation_duration: histogram(
        "hubfed_member_operation_duration_seconds",
        "Latency of requests to member clusters.",
        ["cluster", "operation"],
        LATENCY_BUCKETS
    );
    cluster_ready: gauge(
        "hubfed_cluster_ready",
        "1 when the member cluster is Ready, else 0.",
        ["cluster"]
    );
    managed_objects: gauge(
        "hubfed_managed_objects",
        "Objects labelled kubefed.io/managed=true in a member, per type.",
        ["type", "cluster"]
    );
    unmanaged_objects: gauge(
        "hubfed_unmanaged_objects",
        "Objects of a federated type in a member that hubfed does not manage, as its name cache holds them.",
        ["type", "cluster"]
    );
    member_cache_lists_total: counter(
        "hubfed_member_cache_lists_total",
        "Complete lists of a member's objects of a federated type into the controller's caches (a watch started, or re-listed after its history was lost), per type, cluster and cache (managed, unmanaged).",
        ["type", "cluster", "cache"]
    );
    member_list_slots: gauge(
        "hubfed_member_list_slots",
        "Slots of member lists, shared by every type and member (--member-list-concurrency): limit (0: no limit), and used by lists running.",
        ["state"]
    );
    member_lists_waiting: gauge(
        "hubfed_member_lists_waiting",
        "Lists of a member's objects into the controller's caches waiting for a slot.",
        []
    );
    member_list_stalls_total: counter(
        "hubfed_member_list_stalls_total",
        "Lists of a member's objects that got no page for the stall time and went on without their slot, per type and cluster.",
        ["type", "cluster"]
    );
    member_lists_stalled: gauge(
        "hubfed_member_lists_stalled",
        "Lists of a member's objects running without their slot after they got no page for the stall time, until they end or fail, per type and cluster: a list that stays here hangs.",
        ["type", "cluster"]
    );
    // hubfed: admission.
    webhook_requests_total: counter(
        "hubfed_webhook_requests_total",
        "Admission reviews answered by the webhook server, per webhook and verdict.",
        ["webhook", "verdict"]
    );
    webhook_duration: histogram(
        "hubfed_webhook_duration_seconds",
        "Time the webhook server took to answer an admission review, from its body read to its answer built, per webhook.",
        ["webhook"],
        WEBHOOK_BUCKETS
    );
    // hubfed: propagation and drift.
    propagation_latency: histogram(
        "hubfed_propagation_latency_seconds",
        "From a federated object's change being observed to every placed cluster converged.",
        ["type"],
        LATENCY_BUCKETS
    );
    drift_corrections_total: counter(
        "hubfed_drift_corrections_total",
        "Member objects restored after being changed or deleted in the member.",
        ["type", "cluster"]
    );
    drift_total: counter(
        "hubfed_drift_total",
        "Changes made to member copies behind hubfed's back, by what was done (Reverted, Reported).",
        ["type", "cluster", "action"]
    );
    // hubfed: the federated objects and their reconciles.
    workqueue_depth: gauge(
        "hubfed_workqueue_depth",
        "Reconciles of a federated type running or waiting to run.",
        ["type"]
    );
    federated_objects: gauge(
        "hubfed_federated_objects",
        "Federated objects by their Propagation condition.",
        ["type", "propagation"]
    );
    objects_in_backoff: gauge(
        "hubfed_objects_in_backoff",
        "Federated objects whose last attempts failed and that are retried with exponential backoff (5 s doubling to 5 min).",
        ["type"]
    );
    status_writes_deferred: counter(
        "hubfed_status_writes_deferred_total",
        "Hub status writes put off because only remote status changed and the object's status was written less than 5 s before (coalesced into the next write).",
        ["type"]
    );
    // hubfed: deletion and garbage collection.
    gc_collected_total: counter(
        "hubfed_gc_collected_total",
        "Member copies of deleted federated objects that garbage collection deleted or unlabelled.",
        ["type", "cluster", "action"]
    );
    leftovers: gauge(
        "hubfed_leftovers",
        "Copies recorded as possibly left in clusters that were not ready when their federated object was deleted, waiting for garbage collection.",
        ["type"]
    );
    oldest_deletion_wait: gauge(
        "hubfed_oldest_deletion_wait_seconds",
        "Seconds since the oldest federated object still held by hubfed's finalizer was deleted (0: no deletion waits).",
        ["type"]
    );
    // hubfed: the process.
    heap_bytes: gauge(
        "hubfed_heap_bytes",
        "The memory allocator's own figures, read at each scrape: allocated (live objects), active (their pages), resident (the allocator's pages in RAM, its metadata included), retained (address space kept without RAM).",
        ["state"]
    );
    large_object_budget_bytes: gauge(
        "hubfed_large_object_budget_bytes",
        "The room for large objects' writes (--large-object-budget-mib): limit (0: no budget), and used by reconciles and the member writes they left running.",
        ["state"]
    );
    large_object_budget_waiting: gauge(
        "hubfed_large_object_budget_waiting",
        "Reconciles of large federated objects waiting for room in the budget of large objects' writes.",
        []
    );
    // hubfed: leader election, scheduling and rollouts.
    leader: gauge(
        "hubfed_leader",
        "1 when this replica holds the leader lease, else 0.",
        []
    );
    // hubfed: the hub's own CRDs.
    crd_installed: gauge(
        "hubfed_crd_installed",
        "1 when the hub serves this hubfed CRD, 0 when discovery says it does not.",
        ["crd"]
    );
    schedules_total: counter(
        "hubfed_schedules_total",
        "ReplicaSchedulingPreference decisions by result: changed (placement and replica overrides written), unchanged, error (retried in 15 s).",
        ["result"]
    );
    // hubfed: multi-cluster services.
    mcs_exported_services: gauge(
        "hubfed_mcs_exported_services",
        "Exported names (namespace/name) with a ServiceImport: at least one valid ServiceExport.",
        []
    );
    mcs_imports_written: counter(
        "hubfed_mcs_imports_written_total",
        "ServiceImports written (created or changed) into members, by cluster.",
        ["cluster"]
    );
    mcs_member_writes: counter(
        "hubfed_mcs_member_writes_total",
        "Multi-cluster services writes to members by cluster, kind, operation (apply, apply-status, delete) and result (ok, error, absent).",
        ["cluster", "kind", "operation", "result"]
    );
    mcs_member_crds: gauge(
        "hubfed_mcs_member_crds",
        "1 when the member serves the MCS CRDs (multicluster.x-k8s.io), 0 when it does not: it takes no part in multi-cluster services.",
        ["cluster"]
    );
    // hubfed: multi-cluster DNS.
    dns_records: gauge(
        "hubfed_dns_records",
        "Multi-cluster DNS records in the hub by kind (ServiceDNSRecord, IngressDNSRecord).",
        ["kind"]
    );
    dns_writes: counter(
        "hubfed_dns_writes_total",
        "Multi-cluster DNS writes to the hub by kind (the record kinds, DNSEndpoint.<group>), operation (apply-status, apply, delete) and result (ok, error).",
        ["kind", "operation", "result"]
    );
    rollout_events_total: counter(
        "hubfed_rollout_events_total",
        "Staged rollout steps by federated type and event: StageCompleted, RolloutCompleted, RolloutHalted, RolloutResumed, RolloutAborted.",
        ["type", "event"]
    );
}

/// Builds metrics and registers each with the registry as it is built. The definitions are
/// constants: a failure here is a programming error caught by the unit test below, hence the
/// panics rather than error plumbing.
struct Registering<'a>(&'a Registry);

impl Registering<'_> {
    fn register<C: Collector + Clone + 'static>(&self, collector: C) -> C {
        register(self.0, Box::new(collector.clone()));
        collector
    }

    fn histogram(&self, def: Def, buckets: &[f64]) -> HistogramVec {
        let opts = HistogramOpts::new(def.name, def.help).buckets(buckets.to_vec());
        self.register(well_formed(def.name, HistogramVec::new(opts, def.labels)))
    }

    fn counter(&self, def: Def) -> IntCounterVec {
        let opts = Opts::new(def.name, def.help);
        self.register(well_formed(def.name, IntCounterVec::new(opts, def.labels)))
    }

    fn gauge(&self, def: Def) -> IntGaugeVec {
        let opts = Opts::new(def.name, def.help);
        self.register(well_formed(def.name, IntGaugeVec::new(opts, def.labels)))
    }
}

fn register(registry: &Registry, collector: Box<dyn Collector>) {
    registry
        .register(collector)
        .unwrap_or_else(|e| panic!("metrics register once: {e}"));
}

fn well_formed<M>(name: &str, metric: prometheus::Result<M>) -> M {
    metric.unwrap_or_else(|e| panic!("metric {name} is well-formed: {e}"))
}

impl Metrics {
    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        self.record_heap();
        let mut buffer = Vec::new();
        let encoder = TextEncoder::new();
        if encoder
            .encode(&self.registry.gather(), &mut buffer)
            .is_err()
        {
            return String::new();
        }
        String::from_utf8(buffer).unwrap_or_default()
    }

    /// Sets `hubfed_heap_bytes` from jemalloc's statistics, which it refreshes on demand (a new
    /// "epoch"). The binaries' allocator is jemalloc; elsewhere (unit tests) the figures are
    /// jemalloc's own, near 0. A statistic that cannot be read is left out, not set to 0.
    fn record_heap(&self) {
        use tikv_jemalloc_ctl::{epoch, stats};
        if epoch::advance().is_err() {
            return;
        }
        let figures = [
            ("allocated", stats::allocated::read()),
            ("active", stats::active::read()),
            ("resident", stats::resident::read()),
            ("retained", stats::retained::read()),
        ];
        for (state, bytes) in figures {
            if let Ok(bytes) = bytes {
                self.heap_bytes
                    .with_label_values(&[state])
                    .set(i64::try_from(bytes).unwrap_or(i64::MAX));
            }
        }
    }
}

/// The process-wide metrics.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// Keeps a gauge one higher while it lives: a reconcile or a list waiting, a slot held.
pub(crate) struct GaugeHeld(prometheus::IntGauge);

impl GaugeHeld {
    pub(crate) fn new(gauge: prometheus::IntGauge) -> Self {
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for GaugeHeld {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_registers_and_renders() {
        METRICS
            .reconcile_total
            .with_label_values(&["federatedconfigmap", "success"])
            .inc();
        METRICS.leader.with_label_values::<&str>(&[]).set(1);
        let text = METRICS.render();
        assert!(text.contains("controller_runtime_reconcile_total{controller=\"federatedconfigmap\",result=\"success\"} 1"));
        assert!(text.contains("hubfed_leader 1"));
        // jemalloc's statistics are compiled in (the `stats` feature): every figure is there.
        for state in ["allocated", "active", "resident", "retained"] {
            assert!(
                text.contains(&format!("hubfed_heap_bytes{{state=\"{state}\"}}")),
                "hubfed_heap_bytes{{state={state:?}}} missing"
            );
        }
    }
}
