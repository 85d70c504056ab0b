//! Multi-cluster services for pull members: the reports an agent writes of its member, the
//! import work the hub writes for it, and when either needs a write.
//!
//! A report holds only what the hub's decisions read ([`crate::mcs::aggregate`] and the
//! derived slices): an export's identity and spec, its Service's spec, its source slices'
//! endpoints and ports. Everything else the API server adds (managedFields, resourceVersion,
//! status) is left out, so a report changes only when a decision's input does.

use std::collections::BTreeMap;

use hubfed_api::mcs::{ServiceExport, ServiceImportProperties, ServicePort};
use hubfed_api::pull_mcs::{
    ClusterReportSpec, ReportedNamespace, ServiceExportReportSpec, ServiceImportWorkSpec,
    SourceEndpoints,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::Serialize;

use crate::mcs::{ImportPort, ImportSpec, ServiceImportType};

/// The identity a report keeps of a member object.
fn lean_meta(meta: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        creation_timestamp: meta.creation_timestamp.clone(),
        generation: meta.generation,
        labels: meta.labels.clone(),
        ..ObjectMeta::default()
    }
}

/// The report of one exported name: the export, its Service (spec only) and its source
/// slices, sorted by name.
pub fn export_report(
    export: &ServiceExport,
    service: Option<&Service>,
    slices: &[&EndpointSlice],
) -> ServiceExportReportSpec {
    let mut slices: Vec<EndpointSlice> = slices
        .iter()
        .map(|s| EndpointSlice {
            metadata: lean_meta(&s.metadata),
            ..EndpointSlice::clone(s)
        })
        .collect();
    slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    ServiceExportReportSpec {
        export: ServiceExport {
            metadata: lean_meta(&export.metadata),
            spec: export.spec.clone(),
            status: None,
        },
        service: service.map(|s| Service {
            metadata: lean_meta(&s.metadata),
            spec: s.spec.clone(),
            status: None,
        }),
        slices,
    }
}

/// The report of the member as a whole. `namespaces`: name and whether it is terminating.
pub fn cluster_report<'a>(
    mcs_crds: bool,
    properties_served: bool,
    namespaces: impl IntoIterator<Item = (&'a str, bool)>,
    properties: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> ClusterReportSpec {
    let mut namespaces: Vec<ReportedNamespace> = namespaces
        .into_iter()
        .map(|(name, terminating)| ReportedNamespace {
            name: name.to_owned(),
            terminating,
        })
        .collect();
    namespaces.sort_by(|a, b| a.name.cmp(&b.name));
    ClusterReportSpec {
        mcs_crds,
        properties_served,
        namespaces,
        properties: properties
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect::<BTreeMap<_, _>>(),
    }
}

/// Whether `desired` differs from the spec the hub holds (`live`, as read back): compared as
/// JSON, so that what the API server keeps as written compares equal.
pub fn spec_needs_write<T: Serialize>(live: Option<&T>, desired: &T) -> bool {
    let Some(live) = live else {
        return true;
    };
    serde_json::to_value(live).ok() != serde_json::to_value(desired).ok()
}

/// The ServiceImport's spec of `import`, `ips` left empty (the member allocates them).
pub fn import_properties(import: &ImportSpec) -> ServiceImportProperties {
    ServiceImportProperties {
        ports: import
            .ports
            .iter()
            .map(|p| ServicePort {
                name: p.name.clone(),
                protocol: p.protocol.clone(),
                app_protocol: p.app_protocol.clone(),
                port: p.port,
            })
            .collect(),
        ips: Vec::new(),
        type_: import.type_.as_str().to_owned(),
        session_affinity: import.session_affinity.clone().unwrap_or_default(),
        session_affinity_config: import.session_affinity_config.clone(),
        ip_families: import.ip_families.clone(),
        internal_traffic_policy: import.internal_traffic_policy.clone(),
        traffic_distribution: import.traffic_distribution.clone(),
    }
}

/// The import a work asks for, back as the hub decided it; None when the work withdraws it
/// or names a type this agent does not know.
pub fn work_import(spec: &ServiceImportWorkSpec) -> Option<ImportSpec> {
    let properties = spec.import.as_ref()?;
    Some(ImportSpec {
        type_: ServiceImportType::parse(&properties.type_)?,
        ports: properties
            .ports
            .iter()
            .map(|p| ImportPort {
                name: p.name.clone(),
                protocol: p.protocol.clone(),
                app_protocol: p.app_protocol.clone(),
                port: p.port,
            })
            .collect(),
        session_affinity: Some(properties.session_affinity.clone()).filter(|s| !s.is_empty()),
        session_affinity_config: properties.session_affinity_config.clone(),
        ip_families: properties.ip_families.clone(),
        internal_traffic_policy: properties.internal_traffic_policy.clone(),
        traffic_distribution: properties.traffic_distribution.clone(),
        clusters: spec.clusters.clone(),
    })
}

/// The work for one exported name in one pull member; None when it has nothing to do there
/// (no import, no export of its own): the work is deleted then.
pub fn import_work(
    namespace: &str,
    name: &str,
    import: Option<&ImportSpec>,
    endpoints: &[(String, Vec<EndpointSlice>)],
    export_conditions: Vec<Condition>,
) -> Option<ServiceImportWorkSpec> {
    if import.is_none() && export_conditions.is_empty() {
        return None;
    }
    Some(ServiceImportWorkSpec {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        import: import.map(import_properties),
        clusters: import.map(|i| i.clusters.clone()).unwrap_or_default(),
        endpoints: match import {
            Some(_) => endpoints
                .iter()
                .map(|(cluster, slices)| SourceEndpoints {
                    cluster: cluster.clone(),
                    slices: slices.clone(),
                })
                .collect(),
            None => Vec::new(),
        },
        export_conditions,
    })
}

/// The sources' endpoints a work carries, as the import code takes them.
pub fn work_endpoints(spec: &ServiceImportWorkSpec) -> Vec<(String, Vec<EndpointSlice>)> {
    spec.endpoints
        .iter()
        .map(|e| (e.cluster.clone(), e.slices.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn export() -> ServiceExport {
        serde_json::from_value(json!({
            "metadata": {"namespace": "a", "name": "web", "uid": "u1",
                "resourceVersion": "7", "creationTimestamp": "2026-01-01T00:00:00Z",
                "managedFields": [{"manager": "kubectl"}]},
            "status": {"conditions": [{"type": "Valid", "status": "True", "reason": "Valid",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
        .unwrap()
    }

    fn slice(name: &str, rv: &str, ip: &str) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"namespace": "a", "name": name, "resourceVersion": rv,
                "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [ip]}],
        }))
        .unwrap()
    }

    #[test]
    fn a_report_keeps_only_what_decisions_read() {
        let report = export_report(&export(), None, &[]);
        let wire = serde_json::to_value(&report).unwrap();
        assert_eq!(wire["export"]["metadata"]["uid"], "u1");
        assert!(wire["export"]["metadata"].get("resourceVersion").is_none());
        assert!(wire["export"]["metadata"].get("managedFields").is_none());
        assert!(wire["export"].get("status").is_none(), "{wire}");
        assert!(wire.get("service").is_none(), "absent Service: no Service");
    }

    #[test]
    fn a_new_resource_version_alone_is_no_change() {
        let (a1, b1) = (
            slice("web-b", "1", "10.0.0.2"),
            slice("web-a", "2", "10.0.0.1"),
        );
        let first = export_report(&export(), None, &[&a1, &b1]);
        let (a2, b2) = (
            slice("web-b", "9", "10.0.0.2"),
            slice("web-a", "8", "10.0.0.1"),
        );
        let second = export_report(&export(), None, &[&b2, &a2]);
        assert!(!spec_needs_write(Some(&first), &second));
        assert_eq!(first.slices[0].metadata.name.as_deref(), Some("web-a"));
        let moved = slice("web-a", "8", "10.0.0.9");
        let third = export_report(&export(), None, &[&moved, &a2]);
        assert!(spec_needs_write(Some(&first), &third), "an endpoint moved");
        assert!(spec_needs_write(None, &first), "no report yet");
    }

    #[test]
    fn a_report_read_back_compares_equal() {
        let report = export_report(&export(), None, &[&slice("web-a", "1", "10.0.0.1")]);
        let wire = serde_json::to_value(&report).unwrap();
        let read: ServiceExportReportSpec = serde_json::from_value(wire).unwrap();
        assert!(!spec_needs_write(Some(&read), &report));
    }

    #[test]
    fn the_cluster_report_is_sorted() {
        let report = cluster_report(
            true,
            true,
            [("b", false), ("a", true)],
            [("cluster.clusterset.k8s.io", "m3")],
        );
        assert_eq!(report.namespaces[0].name, "a");
        assert!(report.namespaces[0].terminating);
        assert_eq!(report.properties["cluster.clusterset.k8s.io"], "m3");
    }

    fn import() -> ImportSpec {
        ImportSpec {
            type_: ServiceImportType::ClusterSetIp,
            ports: vec![ImportPort {
                name: "http".into(),
                protocol: "TCP".into(),
                app_protocol: None,
                port: 80,
            }],
            session_affinity: None,
            session_affinity_config: None,
            ip_families: vec!["IPv4".into()],
            internal_traffic_policy: None,
            traffic_distribution: None,
            clusters: vec!["m1".into(), "m3".into()],
        }
    }

    #[test]
    fn an_import_survives_its_work() {
        let endpoints = vec![("m1".to_owned(), vec![slice("web-a", "1", "10.0.0.1")])];
        let work = import_work("a", "web", Some(&import()), &endpoints, Vec::new()).unwrap();
        assert!(work.import.as_ref().unwrap().ips.is_empty());
        let wire = serde_json::to_value(&work).unwrap();
        let read: ServiceImportWorkSpec = serde_json::from_value(wire).unwrap();
        assert_eq!(work_import(&read), Some(import()));
        assert_eq!(work_endpoints(&read), endpoints);
    }

    #[test]
    fn nothing_to_do_is_no_work() {
        assert!(import_work("a", "web", None, &[], Vec::new()).is_none());
        let condition = Condition {
            type_: "Valid".into(),
            status: "False".into(),
            reason: "NoService".into(),
            message: String::new(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
            observed_generation: None,
        };
        let work = import_work("a", "web", None, &[], vec![condition]).unwrap();
        assert!(work_import(&work).is_none(), "an export's conditions only");
        assert!(work.endpoints.is_empty());
    }
}
