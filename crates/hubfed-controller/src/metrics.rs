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

pub struct Metrics {
    pub registry: Registry,
    // KubeFed-compatible.
    pub kubefedcluster_state: IntGaugeVec,
    pub cluster_health_status_duration: HistogramVec,
    pub reconcile_federated_resources_duration: HistogramVec,
    pub dispatch_operation_duration: HistogramVec,
    pub reconcile_total: IntCounterVec,
    pub reconcile_errors_total: IntCounterVec,
    pub reconcile_time: HistogramVec,
    // hubfed.
    pub member_operations_total: IntCounterVec,
    pub member_operation_duration: HistogramVec,
    pub propagation_latency: HistogramVec,
    pub drift_corrections_total: IntCounterVec,
    pub drift_total: IntCounterVec,
    pub cluster_ready: IntGaugeVec,
    pub workqueue_depth: IntGaugeVec,
    pub managed_objects: IntGaugeVec,
    pub federated_objects: IntGaugeVec,
    pub leader: IntGaugeVec,
    pub gc_collected_total: IntCounterVec,
    pub leftovers: IntGaugeVec,
    pub objects_in_backoff: IntGaugeVec,
    pub oldest_deletion_wait: IntGaugeVec,
    pub status_writes_deferred: IntCounterVec,
    pub schedules_total: IntCounterVec,
    pub rollout_events_total: IntCounterVec,
}

/// One metric's name, help text and label names.
struct Def {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
}

// KubeFed-compatible.
const KUBEFEDCLUSTER_STATE: Def = Def {
    name: "kubefedcluster_state",
    help: "Member clusters by health state (1 for the current state).",
    labels: &["state", "cluster"],
};
const CLUSTER_HEALTH_STATUS_DURATION: Def = Def {
    name: "cluster_health_status_duration_seconds",
    help: "Duration of one cluster health probe.",
    labels: &[],
};
const RECONCILE_FEDERATED_RESOURCES_DURATION: Def = Def {
    name: "reconcile_federated_resources_duration_seconds",
    help: "Duration of one federated object reconcile.",
    labels: &[],
};
const DISPATCH_OPERATION_DURATION: Def = Def {
    name: "dispatch_operation_duration_seconds",
    help: "Duration of member writes by action.",
    labels: &["action"],
};
const RECONCILE_TOTAL: Def = Def {
    name: "controller_runtime_reconcile_total",
    help: "Reconciles per controller and result.",
    labels: &["controller", "result"],
};
const RECONCILE_ERRORS_TOTAL: Def = Def {
    name: "controller_runtime_reconcile_errors_total",
    help: "Reconciles that failed, per controller.",
    labels: &["controller"],
};
const RECONCILE_TIME: Def = Def {
    name: "controller_runtime_reconcile_time_seconds",
    help: "Duration of reconciles per controller.",
    labels: &["controller"],
};

// hubfed: member clusters.
const MEMBER_OPERATIONS_TOTAL: Def = Def {
    name: "hubfed_member_operations_total",
    help: "Requests to member clusters by cluster, operation and result.",
    labels: &["cluster", "operation", "result"],
};
const MEMBER_OPERATION_DURATION: Def = Def {
    name: "hubfed_member_operation_duration_seconds",
    help: "Latency of requests to member clusters.",
    labels: &["cluster", "operation"],
};
const CLUSTER_READY: Def = Def {
    name: "hubfed_cluster_ready",
    help: "1 when the member cluster is Ready, else 0.",
    labels: &["cluster"],
};
const MANAGED_OBJECTS: Def = Def {
    name: "hubfed_managed_objects",
    help: "Objects labelled kubefed.io/managed=true in a member, per type.",
    labels: &["type", "cluster"],
};

// hubfed: propagation and drift.
const PROPAGATION_LATENCY: Def = Def {
    name: "hubfed_propagation_latency_seconds",
    help: "From a federated object's change being observed to every placed cluster converged.",
    labels: &["type"],
};
const DRIFT_CORRECTIONS_TOTAL: Def = Def {
    name: "hubfed_drift_corrections_total",
    help: "Member objects restored after being changed or deleted in the member.",
    labels: &["type", "cluster"],
};
const DRIFT_TOTAL: Def = Def {
    name: "hubfed_drift_total",
    help: "Changes made to member copies behind hubfed's back, by what was done (Reverted, Reported).",
    labels: &["type", "cluster", "action"],
};

// hubfed: the federated objects and their reconciles.
const WORKQUEUE_DEPTH: Def = Def {
    name: "hubfed_workqueue_depth",
    help: "Reconciles of a federated type running or waiting to run.",
    labels: &["type"],
};
const FEDERATED_OBJECTS: Def = Def {
    name: "hubfed_federated_objects",
    help: "Federated objects by their Propagation condition.",
    labels: &["type", "propagation"],
};
const OBJECTS_IN_BACKOFF: Def = Def {
    name: "hubfed_objects_in_backoff",
    help: "Federated objects whose last attempts failed and that are retried with exponential backoff (5 s doubling to 5 min).",
    labels: &["type"],
};
const STATUS_WRITES_DEFERRED: Def = Def {
    name: "hubfed_status_writes_deferred_total",
    help: "Hub status writes put off because only remote status changed and the object's status was written less than 5 s before (coalesced into the next write).",
    labels: &["type"],
};

// hubfed: deletion and garbage collection.
const GC_COLLECTED_TOTAL: Def = Def {
    name: "hubfed_gc_collected_total",
    help: "Member copies of deleted federated objects that garbage collection deleted or unlabelled.",
    labels: &["type", "cluster", "action"],
};
const LEFTOVERS: Def = Def {
    name: "hubfed_leftovers",
    help: "Copies recorded as possibly left in clusters that were not ready when their federated object was deleted, waiting for garbage collection.",
    labels: &["type"],
};
const OLDEST_DELETION_WAIT: Def = Def {
    name: "hubfed_oldest_deletion_wait_seconds",
    help: "Seconds since the oldest federated object still held by hubfed's finalizer was deleted (0: no deletion waits).",
    labels: &["type"],
};

// hubfed: leader election, scheduling and rollouts.
const LEADER: Def = Def {
    name: "hubfed_leader",
    help: "1 when this replica holds the leader lease, else 0.",
    labels: &[],
};
const SCHEDULES_TOTAL: Def = Def {
    name: "hubfed_schedules_total",
    help: "ReplicaSchedulingPreference decisions by result: changed (placement and replica overrides written), unchanged, error (retried in 15 s).",
    labels: &["result"],
};
const ROLLOUT_EVENTS_TOTAL: Def = Def {
    name: "hubfed_rollout_events_total",
    help: "Staged rollout steps by federated type and event: StageCompleted, RolloutCompleted, RolloutHalted, RolloutResumed, RolloutAborted.",
    labels: &["type", "event"],
};

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
    fn new() -> Self {
        let registry = Registry::new();
        let r = Registering(&registry);
        let m = Self {
            kubefedcluster_state: r.gauge(KUBEFEDCLUSTER_STATE),
            cluster_health_status_duration: r
                .histogram(CLUSTER_HEALTH_STATUS_DURATION, KUBEFED_BUCKETS),
            reconcile_federated_resources_duration: r
                .histogram(RECONCILE_FEDERATED_RESOURCES_DURATION, KUBEFED_BUCKETS),
            dispatch_operation_duration: r.histogram(DISPATCH_OPERATION_DURATION, KUBEFED_BUCKETS),
            reconcile_total: r.counter(RECONCILE_TOTAL),
            reconcile_errors_total: r.counter(RECONCILE_ERRORS_TOTAL),
            reconcile_time: r.histogram(RECONCILE_TIME, LATENCY_BUCKETS),
            member_operations_total: r.counter(MEMBER_OPERATIONS_TOTAL),
            member_operation_duration: r.histogram(MEMBER_OPERATION_DURATION, LATENCY_BUCKETS),
            cluster_ready: r.gauge(CLUSTER_READY),
            managed_objects: r.gauge(MANAGED_OBJECTS),
            propagation_latency: r.histogram(PROPAGATION_LATENCY, LATENCY_BUCKETS),
            drift_corrections_total: r.counter(DRIFT_CORRECTIONS_TOTAL),
            drift_total: r.counter(DRIFT_TOTAL),
            workqueue_depth: r.gauge(WORKQUEUE_DEPTH),
            federated_objects: r.gauge(FEDERATED_OBJECTS),
            objects_in_backoff: r.gauge(OBJECTS_IN_BACKOFF),
            status_writes_deferred: r.counter(STATUS_WRITES_DEFERRED),
            gc_collected_total: r.counter(GC_COLLECTED_TOTAL),
            leftovers: r.gauge(LEFTOVERS),
            oldest_deletion_wait: r.gauge(OLDEST_DELETION_WAIT),
            leader: r.gauge(LEADER),
            schedules_total: r.counter(SCHEDULES_TOTAL),
            rollout_events_total: r.counter(ROLLOUT_EVENTS_TOTAL),
            registry: registry.clone(),
        };
        register(&registry, Box::new(ProcessCollector::for_self()));
        m
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
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
}

/// The process-wide metrics.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

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
    }
}
