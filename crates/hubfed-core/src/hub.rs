//! The hub joined as a member of itself: recognising it, and never deleting its namespaces.
//!
//! When the hub is joined as a member (as KubeFed's tutorials do), a FederatedNamespace placed
//! on it labels the hub's own namespace, the one that holds the FederatedNamespace and every
//! other federated object of that namespace. Deleting that namespace would delete them all, so
//! the sync controller only ever removes its managed label there (KubeFed
//! `IsNamespaceInHostCluster`).
//!
//! Two independent means tell the hub apart, and a namespace is deleted in a member only when
//! both say "not the hub":
//! 1. **Cluster identity**: the UID of `kube-system` read through the member's client, compared
//!    with the hub's ([`identity_from_uids`]). A lookup that failed is [`ClusterIdentity::Unknown`],
//!    never "not the hub", and the controller does not remember a failure as an answer.
//! 2. **Object identity**: the UID of the member's namespace compared with the UID of the hub's
//!    namespace of the same name ([`HubNamespace`]): the same UID is the same object, so the
//!    member *is* the hub whatever the first means said.
//!
//! Anything short of a positive "not the hub" from both blocks the delete with
//! [`crate::status::PropagationStatus::ClusterIdentityUnknown`] (and the deletion of the
//! federated object waits), which the controller retries with backoff.

use std::time::Duration;

/// Whether a joined cluster is the hub itself, as far as it could be established.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterIdentity {
    Hub,
    NotHub,
    /// The lookup failed or has not been made; the message says why.
    Unknown(String),
}

/// Compares the `kube-system` UIDs read on the hub and through a member's client.
///
/// `Err` carries why a lookup failed; an empty UID is no answer either.
pub fn identity_from_uids(hub: Result<&str, &str>, member: Result<&str, &str>) -> ClusterIdentity {
    match (hub, member) {
        (Err(why), _) => ClusterIdentity::Unknown(format!(
            "the hub's kube-system namespace could not be read: {why}"
        )),
        (_, Err(why)) => ClusterIdentity::Unknown(format!(
            "the cluster's kube-system namespace could not be read: {why}"
        )),
        (Ok(""), _) | (_, Ok("")) => {
            ClusterIdentity::Unknown("a kube-system namespace without a UID".to_owned())
        }
        (Ok(hub), Ok(member)) if hub == member => ClusterIdentity::Hub,
        (Ok(_), Ok(_)) => ClusterIdentity::NotHub,
    }
}

/// The hub's own namespace named like the FederatedNamespace being reconciled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HubNamespace<'a> {
    /// Not read: only needed before a namespace is deleted in a member, so the controller reads
    /// it when a plan asks for it ([`crate::plan::Plan::needs_hub_namespace`]).
    #[default]
    NotRead,
    /// The hub has no such namespace.
    Absent,
    /// The hub's namespace has this UID.
    Uid(&'a str),
    /// It could not be read; the message says why.
    Unreadable(&'a str),
}

/// What a member's namespace is, for the decision to delete it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceRole {
    /// The hub's own namespace: unlabel, never delete, never wait for its removal.
    Hub,
    /// Provably another cluster's namespace: may be deleted.
    Member,
    /// Cannot tell: neither delete nor unlabel; the message says why.
    Unknown(String),
    /// Cannot tell until the hub's namespace has been read.
    NeedsHubNamespace,
}

/// Decides whether a member's namespace is the hub's own (see the module doc).
///
/// `member_uid` is the UID of the member's namespace as the member cache shows it.
pub fn namespace_role(
    identity: Option<&ClusterIdentity>,
    member_uid: Option<&str>,
    hub_namespace: HubNamespace<'_>,
) -> NamespaceRole {
    if identity == Some(&ClusterIdentity::Hub) {
        return NamespaceRole::Hub;
    }
    let member_uid = member_uid.filter(|uid| !uid.is_empty());
    match hub_namespace {
        HubNamespace::NotRead => return NamespaceRole::NeedsHubNamespace,
        HubNamespace::Uid(hub) if member_uid == Some(hub) => return NamespaceRole::Hub,
        _ => {}
    }
    match identity {
        None => NamespaceRole::Unknown("whether this cluster is the hub is not known yet".into()),
        Some(ClusterIdentity::Unknown(why)) => NamespaceRole::Unknown(format!(
            "cannot tell whether this cluster is the hub, so its namespace is not deleted: {why}"
        )),
        Some(ClusterIdentity::Hub) => NamespaceRole::Hub,
        Some(ClusterIdentity::NotHub) => match hub_namespace {
            HubNamespace::Absent => NamespaceRole::Member,
            HubNamespace::Uid(_) if member_uid.is_some() => NamespaceRole::Member,
            HubNamespace::Uid(_) | HubNamespace::NotRead => NamespaceRole::Unknown(
                "the cluster's namespace has no UID to compare with the hub's".to_owned(),
            ),
            HubNamespace::Unreadable(why) => NamespaceRole::Unknown(format!(
                "the hub's namespace could not be read to compare with this cluster's: {why}"
            )),
        },
    }
}

/// Joined clusters that reach the same API server as another one (equal `kube-system` UIDs),
/// each with the other names it shares the server with, sorted.
pub fn duplicate_clusters(
    uids: &std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut duplicates = std::collections::BTreeMap::new();
    for (cluster, uid) in uids {
        let others: Vec<String> = uids
            .iter()
            .filter(|(other, other_uid)| *other != cluster && *other_uid == uid && !uid.is_empty())
            .map(|(other, _)| other.clone())
            .collect();
        if !others.is_empty() {
            duplicates.insert(cluster.clone(), others);
        }
    }
    duplicates
}

/// How long to wait before looking up a cluster's identity again after `failures` failed
/// lookups in a row: 1 s doubling to at most 5 minutes.
pub fn identity_retry_delay(failures: u32) -> Duration {
    const MAX: Duration = Duration::from_secs(300);
    let exponent = failures.saturating_sub(1).min(16);
    Duration::from_secs(1u64 << exponent).min(MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_kube_system_uids_are_the_hub() {
        assert_eq!(identity_from_uids(Ok("a"), Ok("a")), ClusterIdentity::Hub);
        assert_eq!(
            identity_from_uids(Ok("a"), Ok("b")),
            ClusterIdentity::NotHub
        );
    }

    #[test]
    fn a_failed_lookup_is_unknown_never_not_the_hub() {
        for (hub, member) in [
            (Ok("a"), Err("403 Forbidden")),
            (Err("connection refused"), Ok("a")),
            (Err("timeout"), Err("timeout")),
            (Ok("a"), Ok("")),
            (Ok(""), Ok("")),
        ] {
            assert!(
                matches!(identity_from_uids(hub, member), ClusterIdentity::Unknown(_)),
                "{hub:?} {member:?}"
            );
        }
        let ClusterIdentity::Unknown(why) = identity_from_uids(Ok("a"), Err("403 Forbidden"))
        else {
            unreachable!()
        };
        assert!(why.contains("403 Forbidden"), "{why}");
    }

    #[test]
    fn the_same_namespace_uid_is_the_hub_whatever_the_identity_says() {
        for identity in [
            None,
            Some(ClusterIdentity::NotHub),
            Some(ClusterIdentity::Unknown("403".into())),
        ] {
            assert_eq!(
                namespace_role(identity.as_ref(), Some("u1"), HubNamespace::Uid("u1")),
                NamespaceRole::Hub,
                "{identity:?}"
            );
        }
    }

    #[test]
    fn a_member_namespace_needs_both_means_to_say_not_the_hub() {
        let not_hub = Some(&ClusterIdentity::NotHub);
        assert_eq!(
            namespace_role(not_hub, Some("u2"), HubNamespace::Uid("u1")),
            NamespaceRole::Member
        );
        assert_eq!(
            namespace_role(not_hub, Some("u2"), HubNamespace::Absent),
            NamespaceRole::Member
        );
        assert_eq!(
            namespace_role(not_hub, Some("u2"), HubNamespace::NotRead),
            NamespaceRole::NeedsHubNamespace
        );
        assert!(matches!(
            namespace_role(not_hub, Some("u2"), HubNamespace::Unreadable("timeout")),
            NamespaceRole::Unknown(why) if why.contains("timeout")
        ));
        assert!(matches!(
            namespace_role(not_hub, None, HubNamespace::Uid("u1")),
            NamespaceRole::Unknown(_)
        ));
    }

    #[test]
    fn unknown_identity_never_allows_a_delete() {
        for identity in [None, Some(ClusterIdentity::Unknown("403 Forbidden".into()))] {
            assert_eq!(
                namespace_role(identity.as_ref(), Some("u2"), HubNamespace::NotRead),
                NamespaceRole::NeedsHubNamespace
            );
        }
        for hub_namespace in [
            HubNamespace::Absent,
            HubNamespace::Uid("u1"),
            HubNamespace::Unreadable("500"),
        ] {
            for identity in [None, Some(ClusterIdentity::Unknown("403 Forbidden".into()))] {
                let role = namespace_role(identity.as_ref(), Some("u2"), hub_namespace);
                assert!(
                    matches!(role, NamespaceRole::Unknown(_)),
                    "{identity:?} {hub_namespace:?}: {role:?}"
                );
            }
        }
    }

    #[test]
    fn the_hub_identity_is_the_hub_namespace() {
        assert_eq!(
            namespace_role(
                Some(&ClusterIdentity::Hub),
                Some("u2"),
                HubNamespace::Absent
            ),
            NamespaceRole::Hub
        );
    }

    #[test]
    fn clusters_sharing_an_api_server_are_found() {
        let uids: std::collections::BTreeMap<String, String> =
            [("a", "u1"), ("b", "u2"), ("c", "u1"), ("d", ""), ("e", "")]
                .into_iter()
                .map(|(c, u)| (c.to_owned(), u.to_owned()))
                .collect();
        let duplicates = duplicate_clusters(&uids);
        assert_eq!(duplicates.len(), 2, "{duplicates:?}");
        assert_eq!(duplicates["a"], ["c"]);
        assert_eq!(duplicates["c"], ["a"]);
    }

    #[test]
    fn identity_retries_back_off_to_five_minutes() {
        let delays: Vec<u64> = [0, 1, 2, 3, 9, 10, 40]
            .into_iter()
            .map(|n| identity_retry_delay(n).as_secs())
            .collect();
        assert_eq!(delays, [1, 1, 2, 4, 256, 300, 300]);
    }
}
