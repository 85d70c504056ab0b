//! Derived EndpointSlices: a source cluster's endpoints, mirrored into an importing member.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use hubfed_api::mcs::ServiceImportType;

use super::aggregate::ImportSpec;
use super::derived::{ImportObject, derived_service_name, is_derived_slice_of};
use super::sha256::short_hash;
use super::{ENDPOINTSLICE_MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL};
use super::{MCS_SERVICE_NAME_LABEL, MCS_SOURCE_CLUSTER_LABEL};

/// Longest object name (a DNS-1123 subdomain).
const MAX_NAME_LENGTH: usize = 253;
/// Characters of the hash in a derived slice's name.
const NAME_HASH_LENGTH: usize = 10;

/// Whether a source cluster's EndpointSlice is one to export for `namespace/service`.
///
/// It must be labelled `kubernetes.io/service-name=<service>`, in that namespace, and not
/// being deleted. Slices that are themselves derived are never exported again: those
/// managed by hubfed ([`ENDPOINTSLICE_MANAGED_BY`]) and those carrying an MCS label
/// (`multicluster.kubernetes.io/service-name` or `source-cluster`), which every MCS
/// controller's derived slices carry. Any other managed-by value is the cluster's own: the
/// EndpointSlice controller's, the mirroring controller's, or a user's for a Service without
/// selector.
pub fn is_source_slice(slice: &EndpointSlice, namespace: &str, service: &str) -> bool {
    let meta = &slice.metadata;
    let labels = meta.labels.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
    meta.namespace.as_deref().is_none_or(|ns| ns == namespace)
        && meta.deletion_timestamp.is_none()
        && label(SERVICE_NAME_LABEL) == Some(service)
        && label(MANAGED_BY_LABEL) != Some(ENDPOINTSLICE_MANAGED_BY)
        && label(MCS_SERVICE_NAME_LABEL).is_none()
        && label(MCS_SOURCE_CLUSTER_LABEL).is_none()
}

/// The name of the slice derived from `cluster`'s slice `source_slice` of `namespace/service`.
///
/// `<service>-<cluster>-<hash>`, the hash being 10 base32hex characters of the SHA-256 of
/// `namespace/service/cluster/source_slice`: readable, deterministic, unique per source slice
/// (an even chance of a collision takes about 2^25 slices of one service), and at most 138
/// characters for a Service name and a cluster id of at most 63 each. Longer inputs are cut so that
/// the name stays within 253 characters.
pub fn derived_slice_name(
    namespace: &str,
    service: &str,
    cluster: &str,
    source_slice: &str,
) -> String {
    let hash = short_hash(
        &format!("{namespace}/{service}/{cluster}/{source_slice}"),
        NAME_HASH_LENGTH,
    );
    let mut prefix = format!("{service}-{cluster}");
    let room = MAX_NAME_LENGTH - NAME_HASH_LENGTH - 1;
    if prefix.len() > room {
        // Names are ASCII, so any byte index is a character boundary.
        prefix.truncate(room);
        let kept = prefix.trim_end_matches(['-', '.']).len();
        prefix.truncate(kept);
    }
    format!("{prefix}-{hash}")
}

/// The slices an importing member holds for `cluster`'s endpoints of the import.
///
/// They are sorted by name, one per source slice that [`is_source_slice`] accepts, named by
/// [`derived_slice_name`], with the source's address type and ports, and its endpoints' addresses,
/// conditions, hostname and zone. Node names, target references and hints are dropped: they name
/// nodes, Pods and a topology of another cluster. Labels: `multicluster.kubernetes.io/service-name`
/// and `source-cluster`, managed-by [`ENDPOINTSLICE_MANAGED_BY`], hubfed's [control
/// plane](super::CONTROL_PLANE_LABEL), and, for a ClusterSetIP import only,
/// `kubernetes.io/service-name` = the [derived Service](super::derived_service), so that kube-proxy
/// serves them behind the ClusterSet IP. A Headless import's slices have no
/// `kubernetes.io/service-name`: naming the member's own Service would add other clusters'
/// endpoints to it; MCS DNS finds them by the MCS label.
pub fn derived_endpoint_slices(
    import: &ImportSpec,
    object: &ImportObject<'_>,
    cluster: &str,
    source: &[EndpointSlice],
) -> Vec<EndpointSlice> {
    let mut labels = BTreeMap::from([
        (MCS_SERVICE_NAME_LABEL.to_owned(), object.name.to_owned()),
        (MCS_SOURCE_CLUSTER_LABEL.to_owned(), cluster.to_owned()),
        (
            MANAGED_BY_LABEL.to_owned(),
            ENDPOINTSLICE_MANAGED_BY.to_owned(),
        ),
    ]);
    if import.type_ == ServiceImportType::ClusterSetIp {
        labels.insert(
            SERVICE_NAME_LABEL.to_owned(),
            derived_service_name(object.namespace, object.name),
        );
    }
    let mut slices: Vec<EndpointSlice> = source
        .iter()
        .filter(|slice| is_source_slice(slice, object.namespace, object.name))
        .map(|slice| {
            let source_name = slice.metadata.name.as_deref().unwrap_or_default();
            let name = derived_slice_name(object.namespace, object.name, cluster, source_name);
            EndpointSlice {
                metadata: object.metadata(name, labels.clone()),
                address_type: slice.address_type.clone(),
                endpoints: slice
                    .endpoints
                    .as_ref()
                    .map(|e| e.iter().map(derived_endpoint).collect()),
                ports: slice.ports.clone(),
            }
        })
        .collect();
    slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    slices
}

fn derived_endpoint(endpoint: &Endpoint) -> Endpoint {
    Endpoint {
        addresses: endpoint.addresses.clone(),
        conditions: endpoint.conditions.clone(),
        hostname: endpoint.hostname.clone(),
        zone: endpoint.zone.clone(),
        ..Endpoint::default()
    }
}

/// The member's slices (by metadata) hubfed derived for `object` and no longer wants.
///
/// They are to be deleted; the names are sorted. Only slices managed by
/// [`ENDPOINTSLICE_MANAGED_BY`], labelled with this control plane and with the import's name are
/// ever listed: another MCS controller's slices, a user's, and other imports' survive. With
/// `desired` empty, this is every slice of a withdrawn import or source cluster.
pub fn leftover_endpoint_slices<'m>(
    existing: impl IntoIterator<Item = &'m ObjectMeta>,
    desired: &[EndpointSlice],
    object: &ImportObject<'_>,
) -> Vec<String> {
    let wanted: BTreeSet<&str> = desired
        .iter()
        .filter_map(|s| s.metadata.name.as_deref())
        .collect();
    let mut leftovers: Vec<String> = existing
        .into_iter()
        .filter(|meta| {
            let managed_by = meta
                .labels
                .as_ref()
                .and_then(|l| l.get(MANAGED_BY_LABEL))
                .map(String::as_str);
            managed_by == Some(ENDPOINTSLICE_MANAGED_BY) && is_derived_slice_of(meta, object)
        })
        .filter_map(|meta| meta.name.as_deref())
        .filter(|name| !wanted.contains(name))
        .map(str::to_owned)
        .collect();
    leftovers.sort();
    leftovers
}
