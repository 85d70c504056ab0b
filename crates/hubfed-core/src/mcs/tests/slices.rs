//! Source slices, derived slices, leftovers.

use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

fn object() -> ImportObject<'static> {
    ImportObject {
        control_plane: "cp-uid",
        namespace: "prod",
        name: "web",
        uid: Some("import-uid"),
    }
}

/// A slice of `prod/web` in a source cluster, written by the EndpointSlice controller.
fn source_slice(name: &str) -> Value {
    json!({
        "metadata": {
            "name": name,
            "namespace": "prod",
            "labels": {
                "kubernetes.io/service-name": "web",
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
            },
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "web", "uid": "svc-uid"}],
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
        "endpoints": [{
            "addresses": ["10.244.1.5"],
            "conditions": {"ready": true, "serving": true, "terminating": false},
            "hostname": "web-0",
            "zone": "eu-west-1a",
            "nodeName": "node-1",
            "targetRef": {"kind": "Pod", "namespace": "prod", "name": "web-0", "uid": "pod-uid"},
            "hints": {"forZones": [{"name": "eu-west-1a"}]},
            "deprecatedTopology": {"kubernetes.io/hostname": "node-1"},
        }],
    })
}

fn slice(value: Value) -> EndpointSlice {
    serde_json::from_value(value).unwrap()
}

fn with_label(mut value: Value, key: &str, label: &str) -> Value {
    value["metadata"]["labels"][key] = json!(label);
    value
}

#[test]
fn the_clusters_own_slices_are_source_slices_whoever_manages_them() {
    let controller = slice(source_slice("web-abcde"));
    let by_hand = slice(with_label(
        source_slice("web-manual"),
        "endpointslice.kubernetes.io/managed-by",
        "staff",
    ));
    assert!(is_source_slice(&controller, "prod", "web"));
    assert!(is_source_slice(&by_hand, "prod", "web"));
}

#[test]
fn derived_slices_other_services_namespaces_and_deleted_slices_are_not_source_slices() {
    let hubfeds = with_label(
        source_slice("a"),
        "endpointslice.kubernetes.io/managed-by",
        "mcs-controller.hubfed.io",
    );
    let other_mcs_service = with_label(
        source_slice("b"),
        "multicluster.kubernetes.io/service-name",
        "web",
    );
    let other_mcs_cluster = with_label(
        source_slice("c"),
        "multicluster.kubernetes.io/source-cluster",
        "c9",
    );
    let other_service = with_label(source_slice("d"), "kubernetes.io/service-name", "api");
    let mut other_namespace = source_slice("e");
    other_namespace["metadata"]["namespace"] = json!("dev");
    let mut deleting = source_slice("f");
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");

    for value in [
        hubfeds,
        other_mcs_service,
        other_mcs_cluster,
        other_service,
        other_namespace,
        deleting,
    ] {
        let name = value["metadata"]["name"].clone();
        assert!(!is_source_slice(&slice(value), "prod", "web"), "{name}");
    }
}

#[test]
fn a_derived_slice_carries_the_mcs_labels_and_the_endpoints_without_another_clusters_names() {
    let import = import_of(cluster_ip(json!([tcp("http", 80)])));
    let derived = derived_endpoint_slices(
        &import,
        &object(),
        "c1",
        &[slice(source_slice("web-abcde"))],
    );

    assert_eq!(derived.len(), 1);
    let name = derived_slice_name("prod", "web", "c1", "web-abcde");
    assert_eq!(
        serde_json::to_value(&derived[0]).unwrap(),
        json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name,
                "namespace": "prod",
                "labels": {
                    "multicluster.kubernetes.io/service-name": "web",
                    "multicluster.kubernetes.io/source-cluster": "c1",
                    "endpointslice.kubernetes.io/managed-by": "mcs-controller.hubfed.io",
                    "kubernetes.io/service-name": "derived-074ht363gh",
                    "hubfed.io/mcs-control-plane": "cp-uid",
                },
                "ownerReferences": [{
                    "apiVersion": "multicluster.x-k8s.io/v1beta1",
                    "kind": "ServiceImport",
                    "name": "web",
                    "uid": "import-uid",
                }],
            },
            "addressType": "IPv4",
            "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
            "endpoints": [{
                "addresses": ["10.244.1.5"],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "hostname": "web-0",
                "zone": "eu-west-1a",
            }],
        })
    );
}

#[test]
fn a_headless_imports_slices_name_no_service_of_the_member() {
    let import = import_of(headless(json!([tcp("http", 80)])));
    let derived = derived_endpoint_slices(
        &import,
        &object(),
        "c1",
        &[slice(source_slice("web-abcde"))],
    );

    let labels = derived[0].metadata.labels.as_ref().unwrap();
    assert!(!labels.contains_key("kubernetes.io/service-name"));
    assert_eq!(labels["multicluster.kubernetes.io/service-name"], "web");
}

#[test]
fn only_source_slices_are_derived_and_in_name_order() {
    let import = import_of(cluster_ip(json!([tcp("http", 80)])));
    let source = [
        slice(source_slice("web-1")),
        slice(with_label(
            source_slice("web-2"),
            "kubernetes.io/service-name",
            "api",
        )),
        slice(source_slice("web-3")),
    ];
    let derived = derived_endpoint_slices(&import, &object(), "c1", &source);

    let mut expected = vec![
        derived_slice_name("prod", "web", "c1", "web-1"),
        derived_slice_name("prod", "web", "c1", "web-3"),
    ];
    expected.sort();
    let names: Vec<String> = derived
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, expected);
}

#[test]
fn derived_slice_names_are_deterministic_and_unique_per_cluster_and_source_slice() {
    let name = derived_slice_name("prod", "web", "c1", "web-abcde");
    assert_eq!(name, derived_slice_name("prod", "web", "c1", "web-abcde"));
    assert!(name.starts_with("web-c1-"), "{name}");
    assert_eq!(name.len(), "web-c1-".len() + 10);
    assert_ne!(name, derived_slice_name("prod", "web", "c2", "web-abcde"));
    assert_ne!(name, derived_slice_name("prod", "web", "c1", "web-fghij"));
    assert_ne!(name, derived_slice_name("dev", "web", "c1", "web-abcde"));
}

#[test]
fn a_derived_slice_name_stays_a_valid_name_within_253_characters() {
    let long = "a".repeat(200);
    let name = derived_slice_name("prod", &long, &format!("{}-", "b".repeat(60)), "x");
    assert!(name.len() <= 253, "{}", name.len());
    assert!(!name.contains("--"), "{name}");
    assert!(
        name.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    );
}

fn existing(name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("prod".into()),
        labels: Some(crate::test_support::labels(labels)),
        ..ObjectMeta::default()
    }
}

#[test]
fn leftovers_are_hubfeds_slices_of_this_import_that_are_no_longer_desired() {
    let import = import_of(cluster_ip(json!([tcp("http", 80)])));
    let desired =
        derived_endpoint_slices(&import, &object(), "c1", &[slice(source_slice("web-1"))]);
    let kept = desired[0].metadata.clone();
    let ours = [
        ("multicluster.kubernetes.io/service-name", "web"),
        (
            "endpointslice.kubernetes.io/managed-by",
            "mcs-controller.hubfed.io",
        ),
        ("hubfed.io/mcs-control-plane", "cp-uid"),
    ];
    let gone = existing("web-c2-0123456789", &ours);
    let others_mcs = existing(
        "web-c2-lighthouse",
        &[
            ("multicluster.kubernetes.io/service-name", "web"),
            (
                "endpointslice.kubernetes.io/managed-by",
                "lighthouse-agent.submariner.io",
            ),
            ("hubfed.io/mcs-control-plane", "cp-uid"),
        ],
    );
    let other_plane = existing(
        "web-c2-plane",
        &[ours[0], ours[1], ("hubfed.io/mcs-control-plane", "other")],
    );
    let other_import = existing(
        "api-c2-0123456789",
        &[
            ("multicluster.kubernetes.io/service-name", "api"),
            ours[1],
            ours[2],
        ],
    );
    let controllers = existing(
        "web-abcde",
        &[(
            "endpointslice.kubernetes.io/managed-by",
            "endpointslice-controller.k8s.io",
        )],
    );
    let all = [
        kept,
        gone,
        others_mcs,
        other_plane,
        other_import,
        controllers,
    ];

    assert_eq!(
        leftover_endpoint_slices(&all, &desired, &object()),
        ["web-c2-0123456789"]
    );
}

#[test]
fn with_nothing_desired_every_slice_hubfed_derived_for_the_import_is_left_over() {
    let import = import_of(cluster_ip(json!([tcp("http", 80)])));
    let derived = derived_endpoint_slices(
        &import,
        &object(),
        "c1",
        &[slice(source_slice("web-2")), slice(source_slice("web-1"))],
    );
    let metas: Vec<ObjectMeta> = derived.iter().map(|s| s.metadata.clone()).collect();
    let names: Vec<String> = derived
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect();

    assert_eq!(leftover_endpoint_slices(&metas, &[], &object()), names);
}

fn import_of(spec: Value) -> ImportSpec {
    Fixture::default()
        .export("c1", 100, spec)
        .aggregate()
        .import
        .unwrap()
}
