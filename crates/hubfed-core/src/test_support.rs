//! Builders the unit tests of several modules share.

use std::collections::BTreeMap;

use hubfed_api::scheduling::{ClusterPreferences, ReplicaSchedulingPreferenceSpec};

use crate::placement::ClusterInfo;

/// Labels from `(key, value)` pairs.
pub(crate) fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A joined cluster, Ready, with these labels.
pub(crate) fn cluster(name: &str, labels: &[(&str, &str)]) -> ClusterInfo {
    ClusterInfo {
        name: name.to_owned(),
        labels: self::labels(labels),
        ready: true,
    }
}

/// A FederatedDeployment's ReplicaSchedulingPreference with these per-cluster preferences.
pub(crate) fn replica_preference(
    total: i32,
    rebalance: bool,
    clusters: impl IntoIterator<Item = (String, ClusterPreferences)>,
) -> ReplicaSchedulingPreferenceSpec {
    ReplicaSchedulingPreferenceSpec {
        target_kind: "FederatedDeployment".into(),
        total_replicas: total,
        rebalance,
        intersect_with_cluster_selector: false,
        clusters: clusters.into_iter().collect(),
    }
}
