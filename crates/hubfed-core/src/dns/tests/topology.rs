//! A member's region and zones from its nodes.

use std::collections::BTreeMap;

use super::*;

fn node(labels: &[(&str, &str)]) -> BTreeMap<String, String> {
    labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn topology(
    nodes: &[BTreeMap<String, String>],
    region: Option<&str>,
    zones: &[&str],
) -> ClusterTopology {
    let zones: Vec<String> = zones.iter().map(|z| (*z).to_owned()).collect();
    cluster_topology(nodes, region, &zones)
}

#[test]
fn current_labels_win_over_deprecated_ones() {
    let nodes = [
        node(&[
            (REGION_LABEL, "eu-west-1"),
            (ZONE_LABEL, "eu-west-1a"),
            (DEPRECATED_REGION_LABEL, "old"),
            (DEPRECATED_ZONE_LABEL, "old-a"),
        ]),
        node(&[
            (DEPRECATED_REGION_LABEL, "eu-west-1"),
            (DEPRECATED_ZONE_LABEL, "eu-west-1b"),
        ]),
        node(&[
            (REGION_LABEL, ""),
            (DEPRECATED_REGION_LABEL, "eu-west-1"),
            (ZONE_LABEL, "eu-west-1a"),
        ]),
    ];
    assert_eq!(
        topology(&nodes, None, &[]),
        ClusterTopology {
            region: Some("eu-west-1".to_owned()),
            zones: vec!["eu-west-1a".to_owned(), "eu-west-1b".to_owned()],
            other_regions: vec![],
        }
    );
}

#[test]
fn unlabelled_nodes_keep_what_a_person_set() {
    let nodes = [node(&[("kubernetes.io/hostname", "n1")])];
    assert_eq!(
        topology(&nodes, Some("r1"), &["z1", "z2"]),
        ClusterTopology {
            region: Some("r1".to_owned()),
            zones: vec!["z1".to_owned(), "z2".to_owned()],
            other_regions: vec![],
        }
    );
    assert_eq!(topology(&[], Some(""), &[]), ClusterTopology::default());
    let zoned = [node(&[(ZONE_LABEL, "z9")])];
    assert_eq!(
        topology(&zoned, Some("r1"), &["z1"]),
        ClusterTopology {
            region: Some("r1".to_owned()),
            zones: vec!["z9".to_owned()],
            other_regions: vec![],
        }
    );
}

/// Nodes in several regions: the region of most nodes (ties: the smallest name), its zones
/// only, the others reported.
#[test]
fn several_regions_choose_the_most_nodes_and_report_the_rest() {
    let nodes = [
        node(&[(REGION_LABEL, "us"), (ZONE_LABEL, "us-a")]),
        node(&[(REGION_LABEL, "eu"), (ZONE_LABEL, "eu-a")]),
        node(&[(REGION_LABEL, "eu"), (ZONE_LABEL, "eu-b")]),
        node(&[(ZONE_LABEL, "eu-c")]),
    ];
    assert_eq!(
        topology(&nodes, Some("us"), &[]),
        ClusterTopology {
            region: Some("eu".to_owned()),
            zones: vec!["eu-a".to_owned(), "eu-b".to_owned(), "eu-c".to_owned()],
            other_regions: vec!["us".to_owned()],
        }
    );
    let tied = [node(&[(REGION_LABEL, "us")]), node(&[(REGION_LABEL, "eu")])];
    let mut reversed = tied.clone();
    reversed.reverse();
    assert_eq!(topology(&tied, None, &[]).region.as_deref(), Some("eu"));
    assert_eq!(topology(&tied, None, &[]), topology(&reversed, None, &[]));
}
