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

/// Numbers of every kind Go's JSON encoder writes its own way, as one JSON object: the input
/// of the golden tests of [`crate::gojson`] and [`crate::version`].
pub(crate) const GO_NUMBER_TABLE: &str = r#"{"a":1e20,"b":1e-6,"c":1e-7,"d":123456789.125,"e":5e-324,"f":1.7976931348623157e308,"g":0.1,"h":-0.0,"i":1e100,"j":12345678901234567890,"k":9223372036854775807,"l":-9223372036854775808,"m":2.5e-10,"n":0.000001234,"o":1.0,"p":1e3,"q":123456789012345680000,"r":-1e-7}"#;
