//! Tests of the MCS decisions: aggregation here, the rest by subject.

use k8s_openapi::api::core::v1::ServiceSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::*;

mod derived;
mod membership;
mod slices;
mod writes;

fn at(second: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(second).unwrap())
}

/// Exports of one name, each with its cluster, creation time and Service spec.
#[derive(Default)]
struct Fixture {
    exports: Vec<(String, Time, Option<ServiceSpec>)>,
}

impl Fixture {
    fn export(mut self, cluster: &str, created: i64, spec: Value) -> Self {
        let spec = serde_json::from_value(spec).unwrap();
        self.exports.push((cluster.into(), at(created), Some(spec)));
        self
    }

    fn export_without_service(mut self, cluster: &str, created: i64) -> Self {
        self.exports.push((cluster.into(), at(created), None));
        self
    }

    fn aggregate(&self) -> Aggregate {
        let inputs: Vec<ExportInput<'_>> = self
            .exports
            .iter()
            .map(|(cluster, created, service)| ExportInput {
                cluster,
                created,
                service: service.as_ref(),
            })
            .collect();
        aggregate(&inputs)
    }
}

/// A ClusterIP Service's spec as the API server returns it, with these ports.
fn cluster_ip(ports: Value) -> Value {
    json!({
        "type": "ClusterIP",
        "clusterIP": "10.96.0.10",
        "clusterIPs": ["10.96.0.10"],
        "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
        "internalTrafficPolicy": "Cluster",
        "sessionAffinity": "None",
        "selector": {"app": "web"},
        "ports": ports,
    })
}

fn headless(ports: Value) -> Value {
    let mut spec = cluster_ip(ports);
    spec["clusterIP"] = json!("None");
    spec["clusterIPs"] = json!(["None"]);
    spec
}

fn with(mut spec: Value, field: &str, value: Value) -> Value {
    spec[field] = value;
    spec
}

fn tcp(name: &str, port: i32) -> Value {
    json!({"name": name, "protocol": "TCP", "port": port, "targetPort": port})
}

fn import_port(name: &str, protocol: &str, port: i32) -> ImportPort {
    ImportPort {
        name: name.into(),
        protocol: protocol.into(),
        app_protocol: None,
        port,
    }
}

fn conflict(result: &Aggregate, cluster: &str) -> (bool, String, String) {
    let condition = &result.exports[cluster].conflict;
    (
        condition.status,
        condition.reason.clone(),
        condition.message.clone(),
    )
}

fn valid(result: &Aggregate, cluster: &str) -> (bool, String) {
    let condition = &result.exports[cluster].valid;
    (condition.status, condition.reason.clone())
}

#[test]
fn a_single_exporter_yields_an_import_of_its_service_without_conflict() {
    let spec = with(
        cluster_ip(json!([tcp("http", 80), {"name": "dns", "protocol": "UDP", "port": 53}])),
        "sessionAffinity",
        json!("ClientIP"),
    );
    let spec = with(
        spec,
        "sessionAffinityConfig",
        json!({"clientIP": {"timeoutSeconds": 10}}),
    );
    let spec = with(spec, "trafficDistribution", json!("PreferClose"));
    let result = Fixture::default().export("c1", 100, spec).aggregate();

    let import = result.import.clone().unwrap();
    assert_eq!(import.type_, ServiceImportType::ClusterSetIp);
    assert_eq!(
        import.ports,
        [
            import_port("http", "TCP", 80),
            import_port("dns", "UDP", 53)
        ]
    );
    assert_eq!(import.session_affinity.as_deref(), Some("ClientIP"));
    assert_eq!(
        serde_json::to_value(&import.session_affinity_config).unwrap(),
        json!({"clientIP": {"timeoutSeconds": 10}})
    );
    assert_eq!(import.ip_families, ["IPv4"]);
    assert_eq!(import.internal_traffic_policy.as_deref(), Some("Cluster"));
    assert_eq!(import.traffic_distribution.as_deref(), Some("PreferClose"));
    assert_eq!(import.clusters, ["c1"]);
    assert_eq!(valid(&result, "c1"), (true, "Valid".into()));
    assert_eq!(
        conflict(&result, "c1"),
        (
            false,
            "NoConflicts".into(),
            "No conflicts: one cluster exports a valid service.".into()
        )
    );
    assert!(result.conflicts.is_empty());
}

#[test]
fn a_second_exporter_with_the_same_port_name_and_another_number_conflicts_on_both_and_the_oldests_port_stays()
 {
    let result = Fixture::default()
        .export("c2", 200, cluster_ip(json!([tcp("http", 8080)])))
        .export("c1", 100, cluster_ip(json!([tcp("http", 80)])))
        .aggregate();

    let import = result.import.clone().unwrap();
    assert_eq!(import.ports, [import_port("http", "TCP", 80)]);
    assert_eq!(import.clusters, ["c1", "c2"]);
    for cluster in ["c1", "c2"] {
        let (status, reason, message) = conflict(&result, cluster);
        assert!(status);
        assert_eq!(reason, "PortConflict");
        assert_eq!(
            message,
            "Conflicting ports. Using the union of ports, starting from oldest service export \
             in \"c1\". 1/2 clusters disagree. Dropped port \"http\" (TCP/8080) of \"c2\": \
             \"c1\" has port \"http\" (TCP/80)."
        );
    }
}

#[test]
fn exporters_with_different_port_names_get_the_union_and_a_port_conflict() {
    // As the conformance suite's "union of the constituent service ports and raise a
    // conflict": ports that are not identical everywhere are a conflict even when all fit.
    let result = Fixture::default()
        .export("c1", 100, cluster_ip(json!([tcp("http", 80)])))
        .export(
            "c2",
            200,
            cluster_ip(json!([tcp("http", 80), {"name": "sctp", "protocol": "SCTP", "port": 142}])),
        )
        .aggregate();

    let import = result.import.clone().unwrap();
    assert_eq!(
        import.ports,
        [
            import_port("http", "TCP", 80),
            import_port("sctp", "SCTP", 142)
        ]
    );
    assert_eq!(result.conflicts, [ConflictReason::Port]);
    assert!(!conflict(&result, "c2").2.contains("Dropped"));
}

#[test]
fn the_same_protocol_and_number_under_another_name_is_dropped() {
    let result = Fixture::default()
        .export("c1", 100, cluster_ip(json!([tcp("http", 80)])))
        .export(
            "c2",
            200,
            cluster_ip(json!([tcp("web", 80), tcp("admin", 81)])),
        )
        .aggregate();

    let import = result.import.clone().unwrap();
    assert_eq!(
        import.ports,
        [
            import_port("http", "TCP", 80),
            import_port("admin", "TCP", 81)
        ]
    );
    assert!(
        conflict(&result, "c1").2.contains(
            "Dropped port \"web\" (TCP/80) of \"c2\": \"c1\" has port \"http\" (TCP/80)."
        )
    );
}

#[test]
fn the_same_number_with_another_protocol_is_another_port() {
    let result = Fixture::default()
        .export("c1", 100, cluster_ip(json!([tcp("dns-tcp", 53)])))
        .export(
            "c2",
            200,
            cluster_ip(json!([{"name": "dns", "protocol": "UDP", "port": 53}])),
        )
        .aggregate();

    assert_eq!(
        result.import.clone().unwrap().ports,
        [
            import_port("dns-tcp", "TCP", 53),
            import_port("dns", "UDP", 53)
        ]
    );
}

#[test]
fn identical_unnamed_single_ports_merge_without_conflict() {
    let unnamed = json!([{"protocol": "TCP", "port": 80}]);
    let result = Fixture::default()
        .export("c1", 100, cluster_ip(unnamed.clone()))
        .export("c2", 200, cluster_ip(unnamed))
        .aggregate();

    assert_eq!(
        result.import.clone().unwrap().ports,
        [import_port("", "TCP", 80)]
    );
    assert!(!conflict(&result, "c1").0);
}

#[test]
fn a_named_port_never_joins_the_oldests_unnamed_port() {
    // The Service API requires every port to be named when there are several.
    let result = Fixture::default()
        .export("c1", 100, cluster_ip(json!([{"port": 80}])))
        .export("c2", 200, cluster_ip(json!([tcp("admin", 9090)])))
        .aggregate();

    assert_eq!(
        result.import.clone().unwrap().ports,
        [import_port("", "TCP", 80)]
    );
    let (status, reason, message) = conflict(&result, "c2");
    assert!(status);
    assert_eq!(reason, "PortConflict");
    assert!(message.contains(
        "Dropped port \"admin\" (TCP/9090) of \"c2\": \"c1\" has unnamed port (TCP/80), and an \
         unnamed port cannot be one of several."
    ));
}

#[test]
fn an_unnamed_port_never_joins_the_oldests_named_ports() {
    let result = Fixture::default()
        .export("c1", 100, cluster_ip(json!([tcp("http", 80)])))
        .export(
            "c2",
            200,
            cluster_ip(json!([{"protocol": "TCP", "port": 9090}])),
        )
        .aggregate();

    assert_eq!(
        result.import.clone().unwrap().ports,
        [import_port("http", "TCP", 80)]
    );
    assert_eq!(result.conflicts, [ConflictReason::Port]);
}

#[test]
fn headless_next_to_an_older_cluster_ip_keeps_cluster_set_ip_with_a_type_conflict_in_the_keps_words()
 {
    let result = Fixture::default()
        .export("c1", 100, cluster_ip(json!([tcp("http", 80)])))
        .export("c2", 200, headless(json!([tcp("http", 80)])))
        .aggregate();

    assert_eq!(
        result.import.clone().unwrap().type_,
        ServiceImportType::ClusterSetIp
    );
    for cluster in ["c1", "c2"] {
        assert_eq!(
            conflict(&result, cluster),
            (
                true,
                "TypeConflict".into(),
                "Conflicting type. Using \"ClusterSetIP\" from oldest service export in \"c1\". \
                 1/2 clusters disagree."
                    .into()
            )
        );
    }
}

#[test]
fn an_older_headless_export_makes_the_import_headless() {
    let result = Fixture::default()
        .export("c1", 300, cluster_ip(json!([tcp("http", 80)])))
        .export("c2", 200, headless(json!([tcp("http", 80)])))
        .aggregate();

    assert_eq!(
        result.import.clone().unwrap().type_,
        ServiceImportType::Headless
    );
    assert_eq!(result.conflicts, [ConflictReason::Type]);
}

#[test]
fn node_port_and_load_balancer_services_are_cluster_set_ip() {
    let ports = json!([tcp("http", 80)]);
    for type_ in ["NodePort", "LoadBalancer"] {
        let spec = with(cluster_ip(ports.clone()), "type", json!(type_));
        let result = Fixture::default().export("c1", 100, spec).aggregate();
        assert_eq!(
            result.import.clone().unwrap().type_,
            ServiceImportType::ClusterSetIp,
            "{type_}"
        );
    }
}

#[test]
fn an_external_name_service_alone_is_invalid_and_yields_no_import() {
    let spec = json!({"type": "ExternalName", "externalName": "example.com"});
    let result = Fixture::default().export("c1", 100, spec).aggregate();

    assert_eq!(result.import, None);
    assert_eq!(valid(&result, "c1"), (false, "InvalidServiceType".into()));
    assert_eq!(
        result.exports["c1"].valid.message,
        "The Service is of type \"ExternalName\", which cannot be exported."
    );
    assert!(!conflict(&result, "c1").0);
}

#[test]
fn an_external_name_export_contributes_nothing_beside_a_valid_one() {
    let external = json!({"type": "ExternalName", "externalName": "example.com"});
    let result = Fixture::default()
        .export("c1", 100, external)
        .export("c2", 200, cluster_ip(json!([tcp("http", 80)])))
        .aggregate();

    let import = result.import.clone().unwrap();
    assert_eq!(import.clusters, ["c2"]);
    assert_eq!(import.type_, ServiceImportType::ClusterSetIp);
    assert_eq!(valid(&result, "c1"), (false, "InvalidServiceType".into()));
    assert_eq!(valid(&result, "c2"), (true, "Valid".into()));
    assert!(!conflict(&result, "c2").0);
}

#[test]
fn an_export_without_its_service_is_invalid_with_no_service() {
    let result = Fixture::default()
        .export_without_service("c1", 100)
        .export("c2", 200, cluster_ip(json!([tcp("http", 80)])))
        .aggregate();

    assert_eq!(valid(&result, "c1"), (false, "NoService".into()));
    assert_eq!(result.import.clone().unwrap().clusters, ["c2"]);
}

#[test]
fn no_import_when_every_export_is_invalid() {
    let result = Fixture::default()
        .export_without_service("c1", 100)
        .export(
            "c2",
            200,
            json!({"type": "ExternalName", "externalName": "example.com"}),
        )
        .aggregate();

    assert_eq!(result.import, None);
    assert_eq!(result.exports.len(), 2);
    assert_eq!(
        conflict(&result, "c1"),
        (
            false,
            "NoConflicts".into(),
            "No valid service export to compare.".into()
        )
    );
}

#[test]
fn a_session_affinity_conflict_keeps_the_oldests_affinity_and_config() {
    let client_ip = with(
        with(
            cluster_ip(json!([tcp("http", 80)])),
            "sessionAffinity",
            json!("ClientIP"),
        ),
        "sessionAffinityConfig",
        json!({"clientIP": {"timeoutSeconds": 10800}}),
    );
    let result = Fixture::default()
        .export("c1", 100, client_ip)
        .export("c2", 200, cluster_ip(json!([tcp("http", 80)])))
        .export("c3", 300, cluster_ip(json!([tcp("http", 80)])))
        .aggregate();

    let import = result.import.clone().unwrap();
    assert_eq!(import.session_affinity.as_deref(), Some("ClientIP"));
    assert!(import.session_affinity_config.is_some());
    // The configs differ too, but only because the affinities do.
    assert_eq!(result.conflicts, [ConflictReason::SessionAffinity]);
    assert_eq!(
        conflict(&result, "c3").2,
        "Conflicting session affinity. Using \"ClientIP\" from oldest service export in \"c1\". \
         2/3 clusters disagree."
    );
}

#[test]
fn a_session_affinity_config_conflict_is_raised_when_the_affinities_agree() {
    let client_ip = |timeout: i32| {
        with(
            with(
                cluster_ip(json!([tcp("http", 80)])),
                "sessionAffinity",
                json!("ClientIP"),
            ),
            "sessionAffinityConfig",
            json!({"clientIP": {"timeoutSeconds": timeout}}),
        )
    };
    let result = Fixture::default()
        .export("c1", 100, client_ip(10))
        .export("c2", 200, client_ip(20))
        .aggregate();

    assert_eq!(result.conflicts, [ConflictReason::SessionAffinityConfig]);
    assert_eq!(
        conflict(&result, "c1").2,
        "Conflicting session affinity config. Using clientIP timeoutSeconds 10 from oldest \
         service export in \"c1\". 1/2 clusters disagree."
    );
}

#[test]
fn equal_timestamps_rank_by_cluster_id_whatever_the_input_order() {
    let older_port = cluster_ip(json!([tcp("http", 80)]));
    let other_port = cluster_ip(json!([tcp("http", 8080)]));
    let forward = Fixture::default()
        .export("b", 100, older_port.clone())
        .export("a", 100, other_port.clone())
        .aggregate();
    let backward = Fixture::default()
        .export("a", 100, other_port)
        .export("b", 100, older_port)
        .aggregate();

    assert_eq!(forward, backward);
    assert_eq!(
        forward.import.clone().unwrap().ports,
        [import_port("http", "TCP", 8080)]
    );
    assert!(
        conflict(&backward, "b")
            .2
            .contains("oldest service export in \"a\"")
    );
}

#[test]
fn several_conflicts_join_their_reasons_by_commas_in_a_fixed_order() {
    let dual = with(
        headless(json!([tcp("http", 80)])),
        "ipFamilies",
        json!(["IPv4", "IPv6"]),
    );
    let local = with(
        cluster_ip(json!([tcp("http", 8080)])),
        "internalTrafficPolicy",
        json!("Local"),
    );
    let result = Fixture::default()
        .export("c1", 100, dual)
        .export(
            "c2",
            200,
            with(local, "trafficDistribution", json!("PreferClose")),
        )
        .aggregate();

    let (status, reason, message) = conflict(&result, "c1");
    assert!(status);
    assert_eq!(
        reason,
        "PortConflict,TypeConflict,InternalTrafficPolicyConflict,TrafficDistributionConflict,\
         IPFamilyConflict"
    );
    assert!(message.contains(
        "Conflicting type. Using \"Headless\" from oldest service export in \"c1\". 1/2 clusters \
         disagree. Conflicting internal traffic policy. Using \"Cluster\" from oldest service \
         export in \"c1\". 1/2 clusters disagree. Conflicting traffic distribution. Using none \
         from oldest service export in \"c1\". 1/2 clusters disagree. Conflicting IP families. \
         Using [\"IPv4\", \"IPv6\"] from oldest service export in \"c1\". 1/2 clusters disagree."
    ));
    assert_eq!(conflict(&result, "c2"), (status, reason, message));
}

#[test]
fn ip_families_conflict_only_when_an_export_lacks_one_of_the_imports() {
    let v4 = cluster_ip(json!([tcp("http", 80)]));
    let dual = with(v4.clone(), "ipFamilies", json!(["IPv6", "IPv4"]));
    let superset = Fixture::default()
        .export("c1", 100, v4.clone())
        .export("c2", 200, dual.clone())
        .aggregate();
    let missing = Fixture::default()
        .export("c1", 100, dual)
        .export("c2", 200, v4)
        .aggregate();

    assert!(superset.conflicts.is_empty());
    assert_eq!(superset.import.clone().unwrap().ip_families, ["IPv4"]);
    assert_eq!(missing.conflicts, [ConflictReason::IpFamily]);
    assert_eq!(
        missing.import.clone().unwrap().ip_families,
        ["IPv6", "IPv4"]
    );
}

#[test]
fn unset_defaults_agree_with_the_api_servers_defaults() {
    let defaulted = cluster_ip(json!([tcp("http", 80)]));
    let mut bare = defaulted.clone();
    bare.as_object_mut().unwrap().remove("sessionAffinity");
    bare.as_object_mut()
        .unwrap()
        .remove("internalTrafficPolicy");
    bare["ports"] = json!([{"name": "http", "port": 80}]);
    let result = Fixture::default()
        .export("c1", 100, defaulted)
        .export("c2", 200, bare)
        .aggregate();

    assert!(result.conflicts.is_empty(), "{:?}", result.conflicts);
}

#[test]
fn the_imports_clusters_are_sorted_by_id_not_by_age() {
    let spec = cluster_ip(json!([tcp("http", 80)]));
    let result = Fixture::default()
        .export("zeta", 100, spec.clone())
        .export("alpha", 300, spec.clone())
        .export("mid", 200, spec)
        .aggregate();

    let (status, _, message) = conflict(&result, "alpha");
    assert!(!status);
    assert_eq!(
        message,
        "No conflicts among the 3 clusters exporting a valid service."
    );
    assert_eq!(
        result.import.clone().unwrap().clusters,
        ["alpha", "mid", "zeta"]
    );
}

#[test]
fn an_invalid_export_gets_the_conflict_condition_of_the_valid_ones() {
    let result = Fixture::default()
        .export("c1", 100, cluster_ip(json!([tcp("http", 80)])))
        .export("c2", 200, headless(json!([tcp("http", 80)])))
        .export_without_service("c3", 50)
        .aggregate();

    assert_eq!(conflict(&result, "c3"), conflict(&result, "c1"));
    assert!(conflict(&result, "c3").2.contains("1/2 clusters disagree"));
}
