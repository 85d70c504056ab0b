//! Golden hashes. Provenance: each expected value was produced outside this code base by
//! a throwaway Go 1.26 program (not in the repository) that decodes the same JSON text the
//! way KubeFed does (apimachinery number conversion for templates; the Go override structs
//! for overrides), encodes with `json.NewEncoder(..).Encode` and prints
//! `hex(md5.Sum(..))`. Two values were also computed by hand: the expected bytes written
//! with `printf '%s\n' '...' | md5sum`, which agreed with Go. The `\b`/`\f` case is
//! hand-computed only, since Go >= 1.22 escapes those differently from the Go KubeFed used.

use serde_json::json;

use super::*;
use hubfed_api::federated::FederatedSpec;

const TEMPLATE_JSON: &str = r#"{"metadata":{"labels":{"app":"web","tier":"<front&end>"}},"spec":{"replicas":3,"ratio":0.5,"big":1e21,"small":1.5e-7,"whole":100.0,"neg":-42,"list":[1,"two",true,null,{"z":1,"a":2}],"text":"line\nbreak\ttab\r\"quote\" back\\slash \u0001 \u001f \u007f \u2028 \u2029 é 日本"}}"#;

const OVERRIDES_SPEC_JSON: &str = r#"{"overrides":[{"clusterName":"c1","clusterOverrides":[{"path":"/spec/replicas","value":5},{"op":"add","path":"/metadata/labels/x","value":"a&b"},{"op":"remove","path":"/spec/x"},{"path":"/spec/y","value":null},{"path":"/spec/z","value":false},{"path":"/spec/f","value":1.5},{"path":"/spec/big","value":9007199254740993}]},{"clusterName":"c2"},{"clusterName":"c3","clusterOverrides":[]}]}"#;

fn spec(text: &str) -> FederatedSpec {
    serde_json::from_str(text).unwrap()
}

#[test]
fn template_version_matches_go() {
    let template: Value = serde_json::from_str(TEMPLATE_JSON).unwrap();
    assert_eq!(
        template_version(Some(&template)),
        "25595ab7c91fed23dcaa48e347efb8c4"
    );
    assert_eq!(
        template_version(Some(&json!({}))),
        "8a80554c91d9fca8acb82f023de02f11"
    );
    assert_eq!(template_version(None), "");
}

#[test]
fn number_table_hash_matches_go() {
    let v: Value = serde_json::from_str(crate::test_support::GO_NUMBER_TABLE).unwrap();
    assert_eq!(
        template_version(Some(&v)),
        "d186e9dc3b51f853c549adb4042d5d28"
    );
}

#[test]
fn hand_computed_hashes() {
    let v: Value = serde_json::from_str(r#"{"b":[1,2.5,1e-7,1e21],"a":"<x>"}"#).unwrap();
    assert_eq!(
        template_version(Some(&v)),
        "ccc718021b2674bde9ed8412b4d80825"
    );
    assert_eq!(
        template_version(Some(&json!({"s": "\u{8}\u{c}"}))),
        "1751e2c3a84c4c02348a7c827e0eadec"
    );
}

#[test]
fn overrides_version_matches_go() {
    let s = spec(OVERRIDES_SPEC_JSON);
    assert_eq!(
        encode_overrides(s.overrides.as_deref()),
        "{\"overrides\":[{\"clusterName\":\"c1\",\"clusterOverrides\":[{\"path\":\"/spec/replicas\",\"value\":5},{\"op\":\"add\",\"path\":\"/metadata/labels/x\",\"value\":\"a\\u0026b\"},{\"op\":\"remove\",\"path\":\"/spec/x\"},{\"path\":\"/spec/y\"},{\"path\":\"/spec/z\",\"value\":false},{\"path\":\"/spec/f\",\"value\":1.5},{\"path\":\"/spec/big\",\"value\":9007199254740992}]},{\"clusterName\":\"c2\"},{\"clusterName\":\"c3\"}]}\n"
    );
    assert_eq!(
        overrides_version(s.overrides.as_deref()),
        "e2353dc8fb66f6934d3097a30207beb4"
    );
}

#[test]
fn absent_and_empty_overrides() {
    assert_eq!(
        overrides_version(spec("{}").overrides.as_deref()),
        "2979b7538b527abe06492021841caf47"
    );
    assert_eq!(
        overrides_version(spec(r#"{"overrides":null}"#).overrides.as_deref()),
        "2979b7538b527abe06492021841caf47"
    );
    assert_eq!(
        overrides_version(spec(r#"{"overrides":[]}"#).overrides.as_deref()),
        "fd97e6d9a670c7dcdc2477764f78b459"
    );
}

#[test]
fn object_versions() {
    assert_eq!(object_version(3, "100"), "gen:3");
    assert_eq!(object_version(0, "100"), "rv:100");
    assert_eq!(
        object_version_of(&json!({"metadata": {"generation": 2, "resourceVersion": "9"}})),
        "gen:2"
    );
    assert_eq!(
        object_version_of(&json!({"metadata": {"resourceVersion": "9"}})),
        "rv:9"
    );
    assert_eq!(object_version_of(&json!({})), "rv:");
}

#[test]
fn propagated_version_names() {
    assert_eq!(
        propagated_version_name("Deployment", "web"),
        "deployment-web"
    );
    assert_eq!(
        propagated_version_name("Namespace", "team"),
        "namespace-team"
    );
    assert_eq!(propagated_version_name("ClusterRole", "r"), "clusterrole-r");
}

#[test]
fn propagated_version_status_wire_shape() {
    let status = PropagatedVersionStatus {
        template_version: "t".into(),
        override_version: "o".into(),
        cluster_versions: vec![ClusterObjectVersion {
            cluster_name: "c1".into(),
            version: "gen:1".into(),
        }],
    };
    assert_eq!(
        serde_json::to_value(&status).unwrap(),
        json!({"templateVersion": "t", "overridesVersion": "o",
               "clusterVersions": [{"clusterName": "c1", "version": "gen:1"}]})
    );
}

fn stored(tv: &str, ov: &str, versions: &[(&str, &str)]) -> PropagatedVersionStatus {
    PropagatedVersionStatus {
        template_version: tv.into(),
        override_version: ov.into(),
        cluster_versions: versions
            .iter()
            .map(|(c, v)| ClusterObjectVersion {
                cluster_name: (*c).into(),
                version: (*v).into(),
            })
            .collect(),
    }
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

#[test]
fn recorded_versions_require_matching_hashes() {
    let s = stored("t", "o", &[("a", "gen:1")]);
    assert_eq!(
        recorded_cluster_versions(Some(&s), "t", "o"),
        map(&[("a", "gen:1")])
    );
    assert!(recorded_cluster_versions(Some(&s), "t2", "o").is_empty());
    assert!(recorded_cluster_versions(Some(&s), "t", "o2").is_empty());
    assert!(recorded_cluster_versions(None, "t", "o").is_empty());
}

#[test]
fn update_merges_kept_versions_of_selected_clusters() {
    let s = stored(
        "t",
        "o",
        &[("a", "gen:1"), ("b", "rv:5"), ("gone", "gen:9")],
    );
    let updated = update_propagated_version(
        Some(&s),
        "t",
        "o",
        &set(&["a", "b", "c"]),
        &map(&[("c", "gen:1"), ("b", "rv:6"), ("d", "")]),
    )
    .unwrap();
    assert_eq!(
        updated,
        stored("t", "o", &[("a", "gen:1"), ("b", "rv:6"), ("c", "gen:1")])
    );
}

#[test]
fn update_replaces_versions_when_hashes_change() {
    let s = stored("t", "o", &[("a", "gen:1"), ("b", "gen:2")]);
    let updated = update_propagated_version(
        Some(&s),
        "t2",
        "o",
        &set(&["a", "b"]),
        &map(&[("a", "gen:2")]),
    )
    .unwrap();
    assert_eq!(updated, stored("t2", "o", &[("a", "gen:2")]));
}

#[test]
fn update_is_none_when_nothing_changed() {
    let s = stored("t", "o", &[("a", "gen:1")]);
    assert_eq!(
        update_propagated_version(Some(&s), "t", "o", &set(&["a"]), &BTreeMap::new()),
        None
    );
    assert_eq!(
        update_propagated_version(None, "t", "o", &set(&[]), &BTreeMap::new()),
        Some(stored("t", "o", &[]))
    );
}

#[test]
fn kubefed_object_needs_update() {
    let desired = json!({"metadata": {"name": "x", "namespace": "n", "labels": {"a": "1"}}});
    let member = json!({"metadata": {"name": "x", "namespace": "n", "labels": {"a": "1"},
                                      "generation": 4, "resourceVersion": "10"}});
    assert!(!object_needs_update(&desired, &member, "gen:4"));
    assert!(object_needs_update(&desired, &member, "gen:3"));
    assert!(object_needs_update(&desired, &member, ""));

    let relabelled = json!({"metadata": {"name": "x", "namespace": "n", "labels": {"a": "2"},
                                          "generation": 4}});
    assert!(object_needs_update(&desired, &relabelled, "gen:4"));

    let annotated = json!({"metadata": {"name": "x", "namespace": "n", "labels": {"a": "1"},
                                         "annotations": {"k": "v"}, "generation": 4}});
    assert!(object_needs_update(&desired, &annotated, "gen:4"));

    // Resource-version based: metadata is not compared.
    let rv_member = json!({"metadata": {"name": "x", "namespace": "n", "resourceVersion": "10"}});
    assert!(!object_needs_update(&desired, &rv_member, "rv:10"));

    // Empty and missing label maps are equivalent.
    let bare = json!({"metadata": {"name": "x", "labels": {}}});
    let bare_member = json!({"metadata": {"name": "x", "generation": 1}});
    assert!(!object_needs_update(&bare, &bare_member, "gen:1"));
}

#[test]
fn hubfed_needs_apply() {
    let desired = json!({"metadata": {"labels": {"a": "1"}, "annotations": {"n": "x"}}});
    let hash = desired_hash(&desired);
    let labels = map(&[("a", "1"), ("extra", "z")]);
    let annotations = map(&[("n", "x"), ("deployment.kubernetes.io/revision", "3")]);
    let recorded = RecordedApply {
        version: "gen:2".into(),
        desired_hash: Some(hash.clone()),
    };

    assert!(!needs_apply(
        Some(&recorded),
        "gen:2",
        &desired,
        &hash,
        &labels,
        &annotations
    ));
    assert!(needs_apply(
        None,
        "gen:2",
        &desired,
        &hash,
        &labels,
        &annotations
    ));
    assert!(needs_apply(
        Some(&recorded),
        "gen:3",
        &desired,
        &hash,
        &labels,
        &annotations
    ));
    assert!(needs_apply(
        Some(&recorded),
        "gen:2",
        &desired,
        "other",
        &labels,
        &annotations
    ));
    assert!(needs_apply(
        Some(&recorded),
        "gen:2",
        &desired,
        &hash,
        &map(&[("a", "2")]),
        &annotations
    ));
    assert!(needs_apply(
        Some(&recorded),
        "gen:2",
        &desired,
        &hash,
        &labels,
        &BTreeMap::new()
    ));

    // Unknown desired hash: KubeFed semantics (versions + metadata) only.
    let legacy = RecordedApply {
        version: "gen:2".into(),
        desired_hash: None,
    };
    assert!(!needs_apply(
        Some(&legacy),
        "gen:2",
        &desired,
        "anything",
        &labels,
        &annotations
    ));

    // Resource-version based objects: metadata drift changes the resourceVersion anyway.
    let rv = RecordedApply {
        version: "rv:7".into(),
        desired_hash: Some(hash.clone()),
    };
    assert!(!needs_apply(
        Some(&rv),
        "rv:7",
        &desired,
        &hash,
        &BTreeMap::new(),
        &BTreeMap::new()
    ));
}

#[test]
fn desired_hash_is_order_independent() {
    let a: Value = serde_json::from_str(r#"{"a":1,"b":{"c":2,"d":3}}"#).unwrap();
    let b: Value = serde_json::from_str(r#"{"b":{"d":3,"c":2},"a":1}"#).unwrap();
    assert_eq!(desired_hash(&a), desired_hash(&b));
    assert_ne!(desired_hash(&a), desired_hash(&json!({"a": 2})));
}
