//! A member's region and zones from its nodes' labels, for `KubeFedCluster.status.region` and
//! `zones` (KubeFed's `GetClusterZones` and `updateClusterZonesAndRegion`).

use std::collections::{BTreeMap, BTreeSet};

/// The well-known region label of a node.
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
/// The well-known zone label of a node.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The region label before Kubernetes 1.17, the one KubeFed read.
pub const DEPRECATED_REGION_LABEL: &str = "failure-domain.beta.kubernetes.io/region";
/// The zone label before Kubernetes 1.17, the one KubeFed read.
pub const DEPRECATED_ZONE_LABEL: &str = "failure-domain.beta.kubernetes.io/zone";

/// A member's region and zones, as its status should hold them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterTopology {
    /// The region, `None` when neither the nodes nor the status have one.
    pub region: Option<String>,
    /// The zones, sorted.
    pub zones: Vec<String>,
    /// The other regions some nodes are labelled with, sorted: not empty means the nodes
    /// disagree, which the controller reports.
    pub other_regions: Vec<String>,
}

/// The region and zones of a member whose nodes carry `node_labels`, its status holding
/// `region` and `zones` now.
///
/// A node's region is its `topology.kubernetes.io/region` label, or when that is missing or
/// empty its deprecated `failure-domain.beta.kubernetes.io/region`; its zone likewise. The
/// member's region is the one most nodes have, ties going to the smallest name: one region
/// per member is what the records can name, and unlike KubeFed's region of the first node
/// listed, the choice does not change with the list order. Its zones are those of the nodes in
/// that region or without a region, since a zone of another region would be named under the
/// wrong one. When no node has a region, or no node a zone, the status's value is kept, so a
/// region or zones set by a person on a member with unlabelled nodes stay.
pub fn cluster_topology<'a>(
    node_labels: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
    region: Option<&str>,
    zones: &[String],
) -> ClusterTopology {
    let nodes: Vec<(Option<&str>, Option<&str>)> = node_labels
        .into_iter()
        .map(|labels| {
            (
                label(labels, REGION_LABEL, DEPRECATED_REGION_LABEL),
                label(labels, ZONE_LABEL, DEPRECATED_ZONE_LABEL),
            )
        })
        .collect();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for region in nodes.iter().filter_map(|(region, _)| *region) {
        *counts.entry(region).or_default() += 1;
    }
    // The first of the most frequent in name order: `max_by_key` keeps the last maximum, so
    // iterate in reverse.
    let chosen = counts
        .iter()
        .rev()
        .max_by_key(|(_, count)| **count)
        .map(|(region, _)| *region);
    let labelled_zones: BTreeSet<&str> = nodes
        .iter()
        .filter(|(node_region, _)| node_region.is_none() || *node_region == chosen)
        .filter_map(|(_, zone)| *zone)
        .collect();
    ClusterTopology {
        region: chosen
            .or(region.filter(|r| !r.is_empty()))
            .map(str::to_owned),
        zones: if labelled_zones.is_empty() {
            zones.to_vec()
        } else {
            labelled_zones.into_iter().map(str::to_owned).collect()
        },
        other_regions: counts
            .keys()
            .filter(|r| Some(**r) != chosen)
            .map(|r| (*r).to_owned())
            .collect(),
    }
}

/// The value of `key`, or of `deprecated` when `key` is missing or empty.
fn label<'a>(labels: &'a BTreeMap<String, String>, key: &str, deprecated: &str) -> Option<&'a str> {
    [key, deprecated]
        .into_iter()
        .filter_map(|k| labels.get(k))
        .map(String::as_str)
        .find(|v| !v.is_empty())
}
