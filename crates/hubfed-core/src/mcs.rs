//! Multi-cluster services: every decision of the hub's MCS controller, as data in, data out.
//!
//! The API is KEP-1645's, as sigs.k8s.io/mcs-api v0.5.2 (v1beta1) has it.
//! For one exported `namespace/name` the controller reads, in every member of the ClusterSet,
//! the ServiceExport, the Service and the Service's EndpointSlices, and then:
//!
//! 1. [`aggregate`] turns the exports into the ServiceImport's spec ([`ImportSpec`], or none
//!    when no export is valid) and each export's `Valid` and `Conflict` conditions. The oldest
//!    valid export (by `creationTimestamp`, then cluster id) wins every property; the ports are
//!    the union, merged by name, then by protocol and port.
//! 2. [`import_members`] says which members get the import: those where the namespace exists.
//! 3. In each of them, a ClusterSetIP import is backed by a derived ClusterIP Service
//!    ([`derived_service`], named by [`derived_service_name`] as the upstream reference
//!    controller names it) whose member-allocated IPs become the import's `ips`
//!    ([`import_ips`]).
//! 4. Each source cluster's EndpointSlices ([`is_source_slice`]) are mirrored into every
//!    importing member as derived slices ([`derived_endpoint_slices`]); what hubfed wrote there
//!    earlier and no longer wants is found by [`leftover_endpoint_slices`]. A source cluster
//!    that is offline keeps its endpoints for [`DEFAULT_ENDPOINT_TTL`] ([`source_endpoints`]).
//!
//! 5. [`needs_write`] compares each body with the member's cached object, so that nothing
//!    unchanged is written; [`export_conditions`] gives each ServiceExport its `Valid`,
//!    `Conflict` and `Ready` conditions.
//!
//! Members take part under their cluster id (KEP-2149's ClusterProperty
//! `cluster.clusterset.k8s.io`), decided by [`cluster_ids`], in the ClusterSet
//! their `clusterset.k8s.io` names ([`cluster_set_property`]).
//!
//! Every object the controller writes into a member carries [`CONTROL_PLANE_LABEL`], the proof
//! that this control plane wrote it; derived EndpointSlices carry [`ENDPOINTSLICE_MANAGED_BY`]
//! too. Nothing without both is ever listed for deletion, so another MCS controller's objects
//! in a member survive.

use hubfed_api::mcs::{
    SERVICE_NAME_LABEL as MCS_SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL as MCS_SOURCE_CLUSTER_LABEL,
};

mod aggregate;
mod derived;
mod membership;
mod ports;
mod sha256;
mod slices;
mod writes;

#[cfg(test)]
mod tests;

pub use aggregate::{
    Aggregate, ConflictReason, ExportCondition, ExportInput, ExportStatus, ImportPort, ImportSpec,
    ValidReason, aggregate,
};
pub use derived::{
    ImportIps, ImportObject, derived_service, derived_service_name, import_ips, is_derived_service,
};
pub use hubfed_api::mcs::ServiceImportType;
pub use membership::{
    ClusterIdDecision, ClusterIdRefusal, DEFAULT_ENDPOINT_TTL, EndpointFate, IdSource,
    ImportMembers, MemberId, NamespaceState, SourcePresence, cluster_ids, import_members,
    source_endpoints,
};
pub use slices::{
    derived_endpoint_slices, derived_slice_name, is_source_slice, leftover_endpoint_slices,
};
pub use writes::{
    ClusterSetProperty, ExportReadiness, cluster_set_property, export_conditions, needs_write,
    refused_export_conditions,
};

/// The `endpointslice.kubernetes.io/managed-by` value of every EndpointSlice hubfed derives.
///
/// Never `endpointslice-controller.k8s.io`: a member's EndpointSlice controller deletes the
/// slices it believes it manages and has no Service selector to rebuild these from.
pub const ENDPOINTSLICE_MANAGED_BY: &str = "mcs-controller.hubfed.io";

/// Label on every object the MCS controller writes into a member: the control plane's UID.
///
/// The value is the UID of the control plane's namespace in the hub. It is hubfed's proof of
/// ownership for MCS objects, and lets the controller watch only its own derived objects with a
/// label selector.
pub const CONTROL_PLANE_LABEL: &str = "hubfed.io/mcs-control-plane";

/// Label on a derived Service: the name of the ServiceImport (the exported Service) it serves.
pub const SERVICE_IMPORT_LABEL: &str = "hubfed.io/service-import";

/// The kind of the member's ServiceImport that owns derived objects.
const SERVICE_IMPORT_KIND: &str = "ServiceImport";

/// `discoveryv1.LabelServiceName`: the Service whose endpoints a slice holds.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// `discoveryv1.LabelManagedBy`.
const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
