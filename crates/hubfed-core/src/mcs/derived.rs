//! The derived Service behind a ClusterSetIP import, and the import's `ips` it yields.

use std::collections::BTreeMap;
use std::net::IpAddr;

use hubfed_api::mcs::{self, ServiceImportType};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::aggregate::ImportSpec;
use super::sha256::short_hash;
use super::{CONTROL_PLANE_LABEL, SERVICE_IMPORT_KIND};
use super::{MCS_SERVICE_NAME_LABEL, SERVICE_IMPORT_LABEL};

/// The ServiceImport in one member that derived objects serve.
#[derive(Clone, Copy, Debug)]
pub struct ImportObject<'a> {
    /// This control plane (the UID of its namespace in the hub): [`CONTROL_PLANE_LABEL`].
    pub control_plane: &'a str,
    pub namespace: &'a str,
    /// The exported Service's name, which the ServiceImport has too.
    pub name: &'a str,
    /// The member's ServiceImport UID, once it exists.
    ///
    /// Derived objects are then owned by it, and the member's garbage collector deletes them
    /// with it.
    pub uid: Option<&'a str>,
}

impl ImportObject<'_> {
    /// Metadata every derived object shares: namespace, [`CONTROL_PLANE_LABEL`], the owner.
    pub(super) fn metadata(&self, name: String, labels: BTreeMap<String, String>) -> ObjectMeta {
        let mut labels = labels;
        labels.insert(
            CONTROL_PLANE_LABEL.to_owned(),
            self.control_plane.to_owned(),
        );
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.to_owned()),
            labels: Some(labels),
            owner_references: self.uid.map(|uid| {
                vec![OwnerReference {
                    api_version: format!("{}/{}", mcs::GROUP, mcs::VERSION),
                    kind: SERVICE_IMPORT_KIND.to_owned(),
                    name: self.name.to_owned(),
                    uid: uid.to_owned(),
                    ..OwnerReference::default()
                }]
            }),
            ..ObjectMeta::default()
        }
    }

    /// Whether `meta` is an object this control plane wrote for this import.
    ///
    /// It must be in the import's namespace, with this control plane's [`CONTROL_PLANE_LABEL`]
    /// and the import's name under `import_label`.
    pub(super) fn wrote(&self, meta: &ObjectMeta, import_label: &str) -> bool {
        let label = |key: &str| {
            meta.labels
                .as_ref()
                .and_then(|l| l.get(key))
                .map(String::as_str)
        };
        meta.namespace
            .as_deref()
            .is_none_or(|ns| ns == self.namespace)
            && label(CONTROL_PLANE_LABEL) == Some(self.control_plane)
            && label(import_label) == Some(self.name)
    }
}

/// The name of the Service derived for the ServiceImport `namespace/name` in each member.
///
/// As sigs.k8s.io/mcs-api's reference controller names it (`controllers/common.go`,
/// `derivedName`): `derived-` and the first 10 characters of the lower-cased, unpadded
/// base32hex encoding of the SHA-256 of `namespace/name`. Tools that know the reference
/// controller find hubfed's derived Services under the same names.
pub fn derived_service_name(namespace: &str, name: &str) -> String {
    format!("derived-{}", short_hash(&format!("{namespace}/{name}"), 10))
}

/// The derived Service a member holds for a ClusterSetIP import; None for a Headless one.
///
/// A ClusterIP Service without selector, named by [`derived_service_name`], with the import's
/// ports, session affinity and IP families, so that the member allocates the ClusterSet IPs
/// and its kube-proxy serves them from the derived EndpointSlices. It carries neither
/// `internalTrafficPolicy` nor `trafficDistribution`: both depend on node names and hints,
/// which derived slices cannot carry truthfully across clusters (the ServiceImport still
/// says them to its consumers). Labels: [`CONTROL_PLANE_LABEL`] and [`SERVICE_IMPORT_LABEL`].
pub fn derived_service(import: &ImportSpec, object: &ImportObject<'_>) -> Option<Service> {
    if import.type_ != ServiceImportType::ClusterSetIp {
        return None;
    }
    let labels = BTreeMap::from([(SERVICE_IMPORT_LABEL.to_owned(), object.name.to_owned())]);
    let name = derived_service_name(object.namespace, object.name);
    let ip_family_policy = match import.ip_families.len() {
        0 => None,
        1 => Some("SingleStack".to_owned()),
        _ => Some("PreferDualStack".to_owned()),
    };
    let ports = import
        .ports
        .iter()
        .map(|p| ServicePort {
            name: (!p.name.is_empty()).then(|| p.name.clone()),
            protocol: Some(p.protocol.clone()),
            app_protocol: p.app_protocol.clone(),
            port: p.port,
            ..ServicePort::default()
        })
        .collect();
    Some(Service {
        metadata: object.metadata(name, labels),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            ports: Some(ports),
            session_affinity: import.session_affinity.clone(),
            session_affinity_config: import.session_affinity_config.clone(),
            ip_families: (!import.ip_families.is_empty()).then(|| import.ip_families.clone()),
            ip_family_policy,
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// A member's `ips` for its ClusterSetIP import.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportIps {
    /// In the order of the import's IP families: `ips[i]` is of family `ipFamilies[i]`.
    pub ips: Vec<String>,
    /// The families the member allocated no IP of.
    ///
    /// The import's `Ready` condition is then `False`, reason `IPFamilyNotSupported`.
    pub unallocated: Vec<String>,
}

/// The import's `ips` from the derived Service's member-allocated `spec.clusterIPs`.
///
/// One IP per family of `ip_families` (at most 2), the first allocated IP of that family.
/// Without IP families, the first two allocated IPs, as the reference controller takes them.
/// `None` and unparsable values are never IPs.
pub fn import_ips(ip_families: &[String], cluster_ips: &[String]) -> ImportIps {
    let parsed: Vec<(&String, IpAddr)> = cluster_ips
        .iter()
        .filter_map(|ip| ip.parse().ok().map(|addr| (ip, addr)))
        .collect();
    if ip_families.is_empty() {
        return ImportIps {
            ips: parsed.iter().take(2).map(|(ip, _)| (*ip).clone()).collect(),
            unallocated: Vec::new(),
        };
    }
    let mut result = ImportIps::default();
    for family in ip_families.iter().take(2) {
        let found = parsed.iter().find(|(_, addr)| match family.as_str() {
            "IPv4" => addr.is_ipv4(),
            "IPv6" => addr.is_ipv6(),
            _ => false,
        });
        match found {
            Some((ip, _)) => result.ips.push((*ip).clone()),
            None => result.unallocated.push(family.clone()),
        }
    }
    result
}

/// Whether a member's Service is the derived Service this control plane wrote for `object`.
///
/// A Service found under [`derived_service_name`] that the import no longer wants (it became
/// Headless) is deleted only then.
pub fn is_derived_service(meta: &ObjectMeta, object: &ImportObject<'_>) -> bool {
    object.wrote(meta, SERVICE_IMPORT_LABEL)
}

/// Whether a slice carries this import's MCS service-name and this control plane's label.
pub(super) fn is_derived_slice_of(meta: &ObjectMeta, object: &ImportObject<'_>) -> bool {
    object.wrote(meta, MCS_SERVICE_NAME_LABEL)
}
