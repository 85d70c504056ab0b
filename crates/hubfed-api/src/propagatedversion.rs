//! `PropagatedVersion` / `ClusterPropagatedVersion` (`core.kubefed.io/v1alpha1`,
//! docs/kubefed-compatibility.md §1.7): what was last propagated for one federated object, so
//! unchanged members are not rewritten. They have no spec; everything lives in the status.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// No spec: everything is in the status.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "core.kubefed.io",
    version = "v1alpha1",
    kind = "PropagatedVersion",
    namespaced,
    no_spec,
    status = "PropagatedVersionStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "What was last propagated for a namespaced federated object, named `<lowercase target kind>-<name>` in its namespace."
)]
pub struct PropagatedVersionSpec {}

/// No spec: everything is in the status.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "core.kubefed.io",
    version = "v1alpha1",
    kind = "ClusterPropagatedVersion",
    no_spec,
    status = "PropagatedVersionStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "What was last propagated for a cluster-scoped federated object, named `<lowercase target kind>-<name>`."
)]
pub struct ClusterPropagatedVersionSpec {}

/// Hashes of what was propagated and the member object versions it produced.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PropagatedVersionStatus {
    /// md5 of the template as KubeFed encodes it.
    pub template_version: String,
    /// md5 of the overrides as KubeFed encodes them (KubeFed's json tag is plural).
    #[serde(rename = "overridesVersion")]
    pub override_version: String,
    /// Sorted by cluster name; entries with an empty version are dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_versions: Vec<ClusterObjectVersion>,
}

/// The version of the member object last written in one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterObjectVersion {
    pub cluster_name: String,
    /// `gen:<metadata.generation>`, or `rv:<metadata.resourceVersion>` when generation is 0.
    pub version: String,
}

/// Name of the (Cluster)PropagatedVersion of a federated object: `<lowercase target
/// kind>-<federated name>`, e.g. `deployment-foo`, as KubeFed names it.
///
/// A name longer than an object name may be (253 characters; KubeFed then failed to record
/// versions) is cut and ends in a hash of the whole name, so that it stays unique and valid.
pub fn propagated_version_name(target_kind: &str, federated_name: &str) -> String {
    const MAX: usize = 253;
    let name = format!("{}-{federated_name}", target_kind.to_lowercase());
    if name.len() <= MAX {
        return name;
    }
    let hash = format!("{:016x}", fnv1a(name.as_bytes()));
    // Names are ASCII (DNS subdomains); the cut must not leave a '-' or '.' before the hash.
    let keep = name[..MAX - hash.len() - 1].trim_end_matches(['-', '.']);
    format!("{keep}-{hash}")
}

/// FNV-1a, 64 bits: stable across releases and platforms, which names must be.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod name_tests {
    use super::propagated_version_name;

    #[test]
    fn names_are_kubefeds_and_never_too_long() {
        assert_eq!(
            propagated_version_name("Deployment", "web"),
            "deployment-web"
        );
        let long = "a".repeat(253);
        let name = propagated_version_name("ConfigMap", &long);
        assert_eq!(name.len(), 253);
        assert!(name.starts_with("configmap-aaa"));
        let other = propagated_version_name("ConfigMap", &format!("{}b", "a".repeat(252)));
        assert_ne!(name, other, "the hash keeps cut names apart");
        assert_eq!(name, propagated_version_name("ConfigMap", &long), "stable");
        let dotted = format!("{}.{}", "a".repeat(224), "b".repeat(28));
        let name = propagated_version_name("Secret", &dotted);
        assert!(!name.contains(".-") && !name.contains("--"), "{name}");
    }
}
