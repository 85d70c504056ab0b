//! Which member clusters a federated object is placed in (docs/kubefed-compatibility.md §1.6
//! "Placement", KubeFed `pkg/controller/util/placement.go`).
//!
//! - `clusters` present (even `[]`) ⇒ exactly those names that are known clusters; the selector
//!   is ignored. Names that are not known clusters are reported in
//!   [`PlacementDecision::unknown_clusters`] so status can mention them.
//! - otherwise `clusterSelector` over cluster labels: `{}` ⇒ every cluster, absent ⇒ none.
//! - namespaced targets are further limited to the placement of the `FederatedNamespace`
//!   `<ns>/<ns>`; without one, a cluster-scoped control plane places nothing (and reports
//!   `NamespaceNotFederated`), a namespace-scoped one uses the object's placement verbatim.
//!
//! Readiness does not affect placement: a selected cluster that is not ready is reported as
//! `ClusterNotReady` by the planner.

use std::collections::{BTreeMap, BTreeSet};

use hubfed_api::federated::Placement;

use crate::Result;
use crate::selector::Selector;

/// What core needs to know about a joined member cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterInfo {
    /// The KubeFedCluster's name.
    pub name: String,
    /// The KubeFedCluster's labels, matched by `clusterSelector`.
    pub labels: BTreeMap<String, String>,
    /// Whether the cluster's `Ready` condition is `True`.
    pub ready: bool,
}

/// Scope of the control plane (KubeFedConfig `spec.scope`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ControlPlaneScope {
    /// Federates every namespace of the hub.
    #[default]
    Cluster,
    /// Federates only the control plane's own namespace.
    Namespaced,
}

/// The FederatedNamespace that contains a federated object, as far as placement cares.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NamespaceFederation<'a> {
    /// The target type is cluster-scoped (including `Namespace` itself): no intersection.
    NotApplicable,
    /// The FederatedNamespace `<ns>/<ns>` exists, with this `spec.placement`.
    Federated(Option<&'a Placement>),
    /// No FederatedNamespace `<ns>/<ns>` exists.
    NotFederated,
}

/// The outcome of placement for one federated object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlacementDecision {
    /// Known clusters the object must exist in.
    pub clusters: BTreeSet<String>,
    /// Names in `spec.placement.clusters` that are not joined clusters (sorted, deduplicated).
    pub unknown_clusters: Vec<String>,
    /// The target is namespaced, the control plane is cluster-scoped and the containing
    /// namespace has no FederatedNamespace: nothing is placed (status `NamespaceNotFederated`).
    pub namespace_not_federated: bool,
}

/// Clusters selected by one `spec.placement` (no namespace intersection).
///
/// Errors only when the cluster selector is invalid.
pub fn select_clusters(
    placement: Option<&Placement>,
    clusters: &[ClusterInfo],
) -> Result<PlacementDecision> {
    let known: BTreeSet<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
    let placement = placement.cloned().unwrap_or_default();
    if let Some(names) = &placement.clusters {
        let mut decision = PlacementDecision::default();
        for name in names.iter().map(|r| r.name.as_str()) {
            if known.contains(name) {
                decision.clusters.insert(name.to_owned());
            } else {
                decision.unknown_clusters.push(name.to_owned());
            }
        }
        decision.unknown_clusters.sort();
        decision.unknown_clusters.dedup();
        return Ok(decision);
    }
    let selector = Selector::new(placement.cluster_selector.as_ref())?;
    Ok(PlacementDecision {
        clusters: clusters
            .iter()
            .filter(|c| selector.matches(&c.labels))
            .map(|c| c.name.clone())
            .collect(),
        ..PlacementDecision::default()
    })
}

/// Effective placement of a federated object (KubeFed `ComputePlacement` /
/// `ComputeNamespacedPlacement`).
pub fn compute_placement(
    placement: Option<&Placement>,
    namespace: NamespaceFederation<'_>,
    scope: ControlPlaneScope,
    clusters: &[ClusterInfo],
) -> Result<PlacementDecision> {
    let mut decision = select_clusters(placement, clusters)?;
    match namespace {
        NamespaceFederation::NotApplicable => {}
        NamespaceFederation::Federated(namespace_placement) => {
            let namespace_decision = select_clusters(namespace_placement, clusters)?;
            decision
                .clusters
                .retain(|name| namespace_decision.clusters.contains(name));
        }
        NamespaceFederation::NotFederated => {
            if scope == ControlPlaneScope::Cluster {
                decision.clusters.clear();
                decision.namespace_not_federated = true;
            }
        }
    }
    Ok(decision)
}

/// Namespaces KubeFed never propagates as `FederatedNamespace` targets
/// (`accessor.go:isSystemNamespace`): `kube-system`, `kube-public`, `default` and the control
/// plane's own namespace.
///
/// hubfed adds `kube-node-lease`: it exists in every cluster, holds only kubelet heartbeat
/// Leases, and KubeFed predates it being universal; federating it can only cause harm.
///
/// This applies to `Namespace` targets only: namespaced resources in these namespaces are
/// propagated as usual (a namespace-scoped control plane federates its own namespace).
pub fn is_system_namespace(namespace: &str, kubefed_namespace: &str) -> bool {
    matches!(
        namespace,
        "kube-system" | "kube-public" | "default" | "kube-node-lease"
    ) || namespace == kubefed_namespace
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::test_support::cluster;

    fn fleet() -> Vec<ClusterInfo> {
        vec![
            cluster("a", &[("region", "eu")]),
            cluster("b", &[("region", "us")]),
            cluster("c", &[]),
        ]
    }

    fn placement(v: serde_json::Value) -> Placement {
        serde_json::from_value(v).unwrap()
    }

    fn names(decision: &PlacementDecision) -> Vec<&str> {
        decision.clusters.iter().map(String::as_str).collect()
    }

    #[test]
    fn cluster_list_wins_over_selector() {
        let p = placement(json!({
            "clusters": [{"name": "b"}, {"name": "zz"}, {"name": "a"}, {"name": "zz"}],
            "clusterSelector": {"matchLabels": {"region": "eu"}},
        }));
        let d = select_clusters(Some(&p), &fleet()).unwrap();
        assert_eq!(names(&d), ["a", "b"]);
        assert_eq!(d.unknown_clusters, ["zz"]);
    }

    #[test]
    fn empty_cluster_list_selects_nothing_even_with_selector() {
        let p = placement(json!({"clusters": [], "clusterSelector": {}}));
        assert!(
            select_clusters(Some(&p), &fleet())
                .unwrap()
                .clusters
                .is_empty()
        );
    }

    #[test]
    fn selector_over_cluster_labels() {
        let p = placement(json!({"clusterSelector": {"matchLabels": {"region": "eu"}}}));
        assert_eq!(names(&select_clusters(Some(&p), &fleet()).unwrap()), ["a"]);
        let all = placement(json!({"clusterSelector": {}}));
        assert_eq!(
            names(&select_clusters(Some(&all), &fleet()).unwrap()),
            ["a", "b", "c"]
        );
    }

    #[test]
    fn absent_placement_or_selector_selects_nothing() {
        assert!(select_clusters(None, &fleet()).unwrap().clusters.is_empty());
        let p = placement(json!({}));
        assert!(
            select_clusters(Some(&p), &fleet())
                .unwrap()
                .clusters
                .is_empty()
        );
        let null_clusters = placement(json!({"clusters": null, "clusterSelector": {}}));
        assert_eq!(
            select_clusters(Some(&null_clusters), &fleet())
                .unwrap()
                .clusters
                .len(),
            3
        );
    }

    #[test]
    fn readiness_does_not_affect_placement() {
        let mut clusters = fleet();
        clusters[0].ready = false;
        let p = placement(json!({"clusterSelector": {}}));
        assert_eq!(
            names(&select_clusters(Some(&p), &clusters).unwrap()),
            ["a", "b", "c"]
        );
    }

    #[test]
    fn invalid_selector_is_an_error() {
        let p = placement(json!({"clusterSelector": {"matchExpressions": [
            {"key": "region", "operator": "In", "values": []}
        ]}}));
        assert!(select_clusters(Some(&p), &fleet()).is_err());
    }

    #[test]
    fn namespaced_types_intersect_with_federated_namespace() {
        let p = placement(json!({"clusterSelector": {}}));
        let ns = placement(json!({"clusters": [{"name": "b"}, {"name": "c"}]}));
        let d = compute_placement(
            Some(&p),
            NamespaceFederation::Federated(Some(&ns)),
            ControlPlaneScope::Cluster,
            &fleet(),
        )
        .unwrap();
        assert_eq!(names(&d), ["b", "c"]);
        assert!(!d.namespace_not_federated);

        let none = compute_placement(
            Some(&p),
            NamespaceFederation::Federated(None),
            ControlPlaneScope::Cluster,
            &fleet(),
        )
        .unwrap();
        assert!(none.clusters.is_empty());
    }

    #[test]
    fn invalid_namespace_selector_is_an_error() {
        let p = placement(json!({"clusterSelector": {}}));
        let ns = placement(json!({"clusterSelector": {"matchExpressions": [
            {"key": "x", "operator": "Bogus"}
        ]}}));
        assert!(
            compute_placement(
                Some(&p),
                NamespaceFederation::Federated(Some(&ns)),
                ControlPlaneScope::Namespaced,
                &fleet(),
            )
            .is_err()
        );
    }

    #[test]
    fn missing_federated_namespace_depends_on_scope() {
        let p = placement(json!({"clusters": [{"name": "a"}]}));
        let cluster_scoped = compute_placement(
            Some(&p),
            NamespaceFederation::NotFederated,
            ControlPlaneScope::Cluster,
            &fleet(),
        )
        .unwrap();
        assert!(cluster_scoped.clusters.is_empty());
        assert!(cluster_scoped.namespace_not_federated);

        let namespace_scoped = compute_placement(
            Some(&p),
            NamespaceFederation::NotFederated,
            ControlPlaneScope::Namespaced,
            &fleet(),
        )
        .unwrap();
        assert_eq!(names(&namespace_scoped), ["a"]);
        assert!(!namespace_scoped.namespace_not_federated);
    }

    #[test]
    fn cluster_scoped_targets_ignore_namespaces() {
        let p = placement(json!({"clusters": [{"name": "c"}]}));
        let d = compute_placement(
            Some(&p),
            NamespaceFederation::NotApplicable,
            ControlPlaneScope::Cluster,
            &fleet(),
        )
        .unwrap();
        assert_eq!(names(&d), ["c"]);
    }

    #[test]
    fn system_namespaces() {
        for ns in [
            "kube-system",
            "kube-public",
            "default",
            "kube-node-lease",
            "fed-ns",
        ] {
            assert!(is_system_namespace(ns, "fed-ns"), "{ns}");
        }
        assert!(!is_system_namespace("kube-federation-system", "fed-ns"));
        assert!(!is_system_namespace("app", "fed-ns"));
    }
}
