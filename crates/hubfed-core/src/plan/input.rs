//! What a plan reads: the federated object, its member copies as observed, and the rest of
//! [`PlanInput`].

use std::collections::BTreeMap;

use hubfed_api::federated::FederatedSpec;

use crate::desired::TargetType;
use crate::hub::{ClusterIdentity, HubNamespace};
use crate::placement::{ClusterInfo, ControlPlaneScope, NamespaceFederation};
use crate::version::RecordedApply;

/// The federated object, as far as planning cares.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FederatedObject {
    pub name: String,
    /// `None` only for cluster-scoped federated types.
    pub namespace: Option<String>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    pub spec: FederatedSpec,
    pub annotations: BTreeMap<String, String>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `metadata.finalizers` contains `kubefed.io/sync-controller`.
    pub has_sync_finalizer: bool,
}

/// A member object as the member cache shows it.
impl FederatedObject {
    /// The object without its spec: what carrying out a plan's actions reads of it (name,
    /// namespace, annotations). A write that waits for its member keeps this, not the
    /// template — the apply body holds the desired object already.
    pub fn without_spec(&self) -> Self {
        Self {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            uid: self.uid.clone(),
            spec: FederatedSpec::default(),
            annotations: self.annotations.clone(),
            deleting: self.deleting,
            has_sync_finalizer: self.has_sync_finalizer,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberObject {
    /// Value of the `kubefed.io/managed` label, if any.
    pub managed_label: Option<String>,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// [`crate::version::object_version`] of the object.
    pub version: String,
    /// `metadata.uid`.
    pub uid: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Whether its workload is up ([`crate::readiness`]).
    pub readiness: crate::readiness::Readiness,
    /// Its `.status`, when the type's status is collected.
    pub remote_status: Option<serde_json::Value>,
}

impl MemberObject {
    /// Carries `kubefed.io/managed: "true"`.
    pub fn is_managed(&self) -> bool {
        self.managed_label.as_deref() == Some("true")
    }
}

/// What is known about the member object in one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum MemberObservation {
    /// Not in the cache (the cache may hold only managed objects).
    #[default]
    Absent,
    Present(MemberObject),
    /// The cache could not be read; the message says why.
    RetrievalFailed(String),
    /// The cluster does not serve the type (its CRD is missing there): it holds no copy.
    NotServed,
}

/// Everything [`plan`](super::plan) needs.
#[derive(Clone, Debug)]
pub struct PlanInput<'a> {
    pub object: &'a FederatedObject,
    pub target: &'a TargetType,
    /// Every joined cluster.
    pub clusters: &'a [ClusterInfo],
    /// The containing namespace's FederatedNamespace, for namespaced targets.
    pub namespace: NamespaceFederation<'a>,
    pub scope: ControlPlaneScope,
    /// The control plane's namespace (a system namespace for `Namespace` targets).
    pub kubefed_namespace: &'a str,
    /// The control plane's identity for [`crate::gc::OWNER_ANNOTATION`], if known.
    pub control_plane: Option<&'a str>,
    /// For `Namespace` targets: whether each joined cluster is the hub itself (a missing
    /// entry is unknown). Not read for other targets.
    pub identities: &'a BTreeMap<String, ClusterIdentity>,
    /// For `Namespace` targets: the hub's own namespace of the object's name, read only when a
    /// plan asks for it ([`Plan::needs_hub_namespace`](super::Plan::needs_hub_namespace)).
    pub hub_namespace: HubNamespace<'a>,
    /// For namespaced objects: the hub's namespace that holds the object, read only when a
    /// sync plan would delete a copy ([`Plan::needs_containing_namespace`](super::Plan::needs_containing_namespace)).
    pub containing_namespace: ContainingNamespace<'a>,
    /// Clusters that reach the same API server as other joined clusters
    /// ([`crate::hub::duplicate_clusters`]): nothing is written or deleted there.
    pub duplicates: &'a BTreeMap<String, Vec<String>>,
    /// KubeFedConfig `spec.syncController.adoptResources == Enabled`.
    pub adopt_resources: bool,
    /// Member observations by cluster name; a missing entry means [`MemberObservation::Absent`].
    pub members: &'a BTreeMap<String, MemberObservation>,
    /// The last successful applies by cluster name (only entries still valid for the current
    /// template and overrides versions, see [`crate::version::recorded_cluster_versions`]).
    pub recorded: &'a BTreeMap<String, RecordedApply>,
}

/// The hub's namespace that holds a namespaced federated object (for a FederatedNamespace,
/// the namespace it federates).
///
/// When it is deleted, the API server's namespace controller deletes the federated objects in
/// it in no set order: a FederatedNamespace that goes first leaves the other objects "not
/// federated" for a moment, and a sync plan would then delete their copies — also those whose
/// `kubefed.io/orphan: "true"` asks to keep them. While the namespace is being deleted, no
/// sync plan deletes a copy: each object's own deletion, which follows, decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ContainingNamespace<'a> {
    /// Not read: read only when a sync plan would delete a copy.
    #[default]
    NotRead,
    Active,
    /// Being deleted, or already gone.
    Deleting,
    /// It could not be read; the message says why.
    Unreadable(&'a str),
}
