//! The member lists of the controller running in this test process, from its metrics: lists
//! per type and cluster, slots used, lists waiting for one or stalled; and [`hold_lists`], the
//! fault-proxy rules that hold a member's lists unanswered.

use std::collections::BTreeMap;

use http::Method;
use hubfed_controller::metrics::METRICS;

use crate::fault_proxy::{Fault, FaultResponse};

/// The paths of lists of the default federated types' objects in a whole cluster.
pub const LISTS: [&str; 10] = [
    "/api/v1/configmaps",
    "/api/v1/namespaces",
    "/api/v1/secrets",
    "/api/v1/serviceaccounts",
    "/api/v1/services",
    "/apis/apps/v1/deployments",
    "/apis/apps/v1/replicasets",
    "/apis/batch/v1/jobs",
    "/apis/networking.k8s.io/v1/ingresses",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles",
];

/// `name`'s values by the label `key`, for the series whose `cluster` label is `cluster`.
pub fn by_type(name: &str, cluster: &str) -> BTreeMap<String, u64> {
    let mut values = BTreeMap::new();
    for family in METRICS.registry.gather() {
        if family.name() != name {
            continue;
        }
        for metric in family.get_metric() {
            let label = |key: &str| {
                metric
                    .get_label()
                    .iter()
                    .find(|l| l.name() == key)
                    .map(|l| l.value().to_owned())
            };
            // Both caches of a type kept as metadata count each list; one is enough.
            if label("cluster").as_deref() != Some(cluster)
                || label("cache").is_some_and(|c| c != "managed")
            {
                continue;
            }
            let Some(kind) = label("type") else { continue };
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "counters of lists"
            )]
            let value = metric.get_counter().get_value() as u64;
            *values.entry(kind).or_default() += value;
        }
    }
    values
}

/// Lists of `cluster` running without their slot after a stall (`hubfed_member_lists_stalled`),
/// every type together.
pub fn stalled_lists(cluster: &str) -> i64 {
    METRICS
        .registry
        .gather()
        .iter()
        .filter(|family| family.name() == "hubfed_member_lists_stalled")
        .flat_map(|family| family.get_metric())
        .filter(|metric| {
            metric
                .get_label()
                .iter()
                .any(|l| l.name() == "cluster" && l.value() == cluster)
        })
        .map(|metric| {
            #[expect(clippy::cast_possible_truncation, reason = "a gauge of lists")]
            let lists = metric.get_gauge().get_value() as i64;
            lists
        })
        .sum()
}

/// `hubfed_member_list_slots{state}`: `limit` or `used`.
pub fn slots(state: &str) -> i64 {
    METRICS.member_list_slots.with_label_values(&[state]).get()
}

/// Lists waiting for a slot (`hubfed_member_lists_waiting`).
pub fn waiting() -> i64 {
    METRICS
        .member_lists_waiting
        .with_label_values::<&str>(&[])
        .get()
}

/// Rules that hold every list (and watch) of the default federated types' objects unanswered
/// while they stand ([`FaultResponse::Hold`]).
pub fn hold_lists() -> Vec<Fault> {
    LISTS
        .iter()
        .map(|path| Fault {
            path: (*path).to_owned(),
            method: Some(Method::GET),
            response: FaultResponse::Hold,
        })
        .collect()
}
