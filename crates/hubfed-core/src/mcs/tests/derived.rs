//! The derived Service and the import's IPs.

use super::*;

fn object(uid: Option<&'static str>) -> ImportObject<'static> {
    ImportObject {
        control_plane: "cp-uid",
        namespace: "prod",
        name: "web",
        uid,
    }
}

fn import_of(spec: Value) -> ImportSpec {
    Fixture::default()
        .export("c1", 100, spec)
        .aggregate()
        .import
        .unwrap()
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| (*v).to_owned()).collect()
}

#[test]
fn the_derived_service_name_matches_the_upstream_reference_controllers() {
    // Computed with the reference controller's derivedName (controllers/common.go) in Go.
    assert_eq!(
        derived_service_name("default", "hello"),
        "derived-k5cuvo1ge4"
    );
    assert_eq!(derived_service_name("demo", "web"), "derived-scaifns3gd");
    assert_eq!(derived_service_name("prod", "web"), "derived-074ht363gh");
}

#[test]
fn a_cluster_set_ip_import_gets_a_selectorless_cluster_ip_service_owned_by_the_import() {
    let spec = with(
        cluster_ip(
            json!([tcp("http", 80), {"name": "grpc", "protocol": "TCP", "appProtocol": "kubernetes.io/h2c", "port": 9090}]),
        ),
        "sessionAffinity",
        json!("ClientIP"),
    );
    let spec = with(spec, "internalTrafficPolicy", json!("Local"));
    let service = derived_service(&import_of(spec), &object(Some("import-uid"))).unwrap();

    assert_eq!(
        serde_json::to_value(&service).unwrap(),
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "derived-074ht363gh",
                "namespace": "prod",
                "labels": {
                    "hubfed.io/mcs-control-plane": "cp-uid",
                    "hubfed.io/service-import": "web",
                },
                "ownerReferences": [{
                    "apiVersion": "multicluster.x-k8s.io/v1beta1",
                    "kind": "ServiceImport",
                    "name": "web",
                    "uid": "import-uid",
                }],
            },
            "spec": {
                "type": "ClusterIP",
                "ports": [
                    {"name": "http", "protocol": "TCP", "port": 80},
                    {"name": "grpc", "protocol": "TCP", "appProtocol": "kubernetes.io/h2c", "port": 9090},
                ],
                "sessionAffinity": "ClientIP",
                "ipFamilies": ["IPv4"],
                "ipFamilyPolicy": "SingleStack",
            },
        })
    );
    assert!(is_derived_service(&service.metadata, &object(None)));
}

#[test]
fn a_derived_service_has_no_owner_before_the_import_exists_and_keeps_an_unnamed_port_unnamed() {
    let import = import_of(with(
        cluster_ip(json!([{"port": 80}])),
        "ipFamilies",
        json!(["IPv4", "IPv6"]),
    ));
    let service = serde_json::to_value(derived_service(&import, &object(None)).unwrap()).unwrap();

    assert_eq!(service["metadata"].get("ownerReferences"), None);
    assert_eq!(
        service["spec"]["ports"],
        json!([{"protocol": "TCP", "port": 80}])
    );
    assert_eq!(service["spec"]["ipFamilyPolicy"], json!("PreferDualStack"));
}

#[test]
fn a_headless_import_gets_no_derived_service() {
    let import = import_of(headless(json!([tcp("http", 80)])));
    assert_eq!(derived_service(&import, &object(None)), None);
}

#[test]
fn another_control_planes_or_imports_service_is_not_hubfeds_derived_service() {
    let import = import_of(cluster_ip(json!([tcp("http", 80)])));
    let service = derived_service(&import, &object(None)).unwrap();
    let other_plane = ImportObject {
        control_plane: "other",
        ..object(None)
    };
    let other_import = ImportObject {
        name: "api",
        ..object(None)
    };

    assert!(!is_derived_service(&service.metadata, &other_plane));
    assert!(!is_derived_service(&service.metadata, &other_import));
    assert!(!is_derived_service(&Default::default(), &object(None)));
}

#[test]
fn import_ips_follow_the_order_of_the_ip_families() {
    let ips = import_ips(
        &strings(&["IPv6", "IPv4"]),
        &strings(&["10.96.0.10", "fd00::10"]),
    );
    assert_eq!(
        ips,
        ImportIps {
            ips: strings(&["fd00::10", "10.96.0.10"]),
            unallocated: Vec::new(),
        }
    );
}

#[test]
fn a_family_the_member_allocated_no_ip_of_is_reported_unallocated() {
    let ips = import_ips(&strings(&["IPv4", "IPv6"]), &strings(&["10.96.0.10"]));
    assert_eq!(ips.ips, ["10.96.0.10"]);
    assert_eq!(ips.unallocated, ["IPv6"]);
}

#[test]
fn without_ip_families_the_first_two_allocated_ips_are_taken_and_none_is_never_an_ip() {
    assert_eq!(import_ips(&[], &strings(&["None"])), ImportIps::default());
    assert_eq!(
        import_ips(&[], &strings(&["10.0.0.1", "fd00::1", "10.0.0.2"])).ips,
        ["10.0.0.1", "fd00::1"]
    );
}
