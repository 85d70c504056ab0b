//! Cluster ids, import members, endpoint TTL.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;

fn ids(members: &[(&'static str, Option<&'static str>)]) -> BTreeMap<String, ClusterIdDecision> {
    let members: Vec<MemberId<'_>> = members
        .iter()
        .map(|(cluster, property)| MemberId {
            cluster,
            property: *property,
        })
        .collect();
    cluster_ids(&members)
}

fn member(id: &str, source: IdSource) -> ClusterIdDecision {
    ClusterIdDecision::Member {
        id: id.into(),
        source,
    }
}

fn refusal(decision: &ClusterIdDecision) -> (ClusterIdRefusal, &str) {
    match decision {
        ClusterIdDecision::Refused {
            refusal, message, ..
        } => (*refusal, message),
        ClusterIdDecision::Member { .. } => panic!("not refused: {decision:?}"),
    }
}

#[test]
fn a_members_existing_cluster_property_is_respected_else_its_name_is_the_id() {
    let decisions = ids(&[("member1", Some("eu-west")), ("member2", None)]);
    assert_eq!(decisions["member1"], member("eu-west", IdSource::Property));
    assert_eq!(
        decisions["member2"],
        member("member2", IdSource::ClusterName)
    );
}

#[test]
fn invalid_ids_are_refused_with_the_reason() {
    let long = Box::leak("a".repeat(64).into_boxed_str());
    let decisions = ids(&[
        ("member.one", None),
        ("member2", Some("EU_West")),
        ("member3", Some(long)),
        ("member4", Some("")),
    ]);

    let (reason, message) = refusal(&decisions["member.one"]);
    assert_eq!(reason, ClusterIdRefusal::Invalid);
    assert_eq!(reason.as_str(), "InvalidClusterID");
    assert_eq!(
        message,
        "The cluster id \"member.one\" (the KubeFedCluster's name) is not valid: a lowercase RFC \
         1123 label must consist of lower case alphanumeric characters or '-', and must start \
         and end with an alphanumeric character. Set the member's ClusterProperty \
         \"cluster.clusterset.k8s.io\" to an RFC 1123 label of at most 63 characters."
    );
    assert!(
        refusal(&decisions["member2"])
            .1
            .contains("(the member's ClusterProperty")
    );
    assert!(
        refusal(&decisions["member3"])
            .1
            .contains("must be no more than 63 characters")
    );
    assert_eq!(refusal(&decisions["member4"]).0, ClusterIdRefusal::Invalid);
}

#[test]
fn two_members_whose_cluster_properties_say_the_same_id_are_both_refused() {
    let decisions = ids(&[("a", Some("east")), ("b", Some("east")), ("c", None)]);

    let (reason, message) = refusal(&decisions["a"]);
    assert_eq!(reason, ClusterIdRefusal::Duplicate);
    assert_eq!(reason.as_str(), "DuplicateClusterID");
    assert_eq!(
        message,
        "The cluster id \"east\" (the member's ClusterProperty \"cluster.clusterset.k8s.io\") is \
         also the id of [\"b\"]. Give the member's ClusterProperty \"cluster.clusterset.k8s.io\" \
         an id of its own."
    );
    assert!(
        refusal(&decisions["b"])
            .1
            .contains("also the id of [\"a\"]")
    );
    assert_eq!(decisions["c"], member("c", IdSource::ClusterName));
}

#[test]
fn a_name_that_another_members_cluster_property_holds_is_refused_and_the_holder_keeps_it() {
    let decisions = ids(&[("east", None), ("west", Some("east"))]);

    assert_eq!(decisions["west"], member("east", IdSource::Property));
    let (reason, message) = refusal(&decisions["east"]);
    assert_eq!(reason, ClusterIdRefusal::Duplicate);
    assert!(message.contains("(the KubeFedCluster's name) is also the id of [\"west\"]"));
}

#[test]
fn every_member_whose_namespace_exists_gets_the_import_and_none_where_it_is_missing() {
    let members = import_members([
        ("c3", NamespaceState::Absent),
        ("c1", NamespaceState::Active),
        ("c4", NamespaceState::Terminating),
        ("c2", NamespaceState::Active),
        ("c5", NamespaceState::Unknown),
    ]);
    assert_eq!(
        members,
        ImportMembers {
            import: vec!["c1".into(), "c2".into()],
            none: vec!["c3".into(), "c4".into()],
            unknown: vec!["c5".into()],
        }
    );
}

#[test]
fn an_online_members_endpoints_stay_and_an_unjoined_ones_go_at_once() {
    let now = at(1_000);
    assert_eq!(
        source_endpoints(SourcePresence::Online, &now, DEFAULT_ENDPOINT_TTL),
        EndpointFate::Keep
    );
    assert_eq!(
        source_endpoints(SourcePresence::Unjoined, &now, DEFAULT_ENDPOINT_TTL),
        EndpointFate::Withdraw
    );
}

#[test]
fn an_offline_members_endpoints_stay_until_the_ttl_has_passed() {
    let since = at(1_000);
    let offline = SourcePresence::Offline { since: &since };
    let ttl = Duration::from_secs(300);

    assert_eq!(
        source_endpoints(offline, &at(1_299), ttl),
        EndpointFate::KeepUntil(at(1_300))
    );
    assert_eq!(
        source_endpoints(offline, &at(1_300), ttl),
        EndpointFate::Withdraw
    );
    assert_eq!(
        source_endpoints(offline, &at(5_000), ttl),
        EndpointFate::Withdraw
    );
    assert_eq!(DEFAULT_ENDPOINT_TTL, ttl);
}
