//! Garbage collection of member copies whose federated object is gone.
//!
//! A federated object's deletion never waits on a cluster that is not Ready: its finalizer
//! goes, and every copy that may remain there is recorded as a [`Leftover`] in the hub. When
//! the cluster's cache lists again (and periodically), each managed copy is looked at:
//!
//! - a copy with another control plane's [proof of ownership](OWNER_ANNOTATION) (or a
//!   malformed one) is never touched;
//! - a copy with no proof at all — labelled managed by hand, or by a KubeFed — whose name
//!   no federated object holds loses its managed label and nothing else: KubeFed's rule for
//!   managed objects without a federated object (never delete what cannot be proven ours);
//! - while the hub still holds a federated object of that name, its reconcile decides;
//! - otherwise the copy is deleted, unless its deletion record asks to orphan it: then only
//!   its managed label is removed (KubeFed's rule for "possible orphans").
//!
//! The controller confirms with a live read of the hub that the federated object is gone
//! before it acts on a cached "absent": unknown is never a yes. Whatever [`collect`] decides,
//! [`guard`] keeps the hub's own namespace and control plane out of reach.

use serde::{Deserialize, Serialize};

use crate::hub::NamespaceRole;

pub use hubfed_api::names::OWNER_ANNOTATION;

/// A copy that may remain in a cluster after its federated object was deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Leftover {
    /// The federated object's (and the copy's) namespace, if namespaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    /// The deletion asked to keep the copies (`kubefed.io/orphan: "true"`).
    #[serde(default)]
    pub orphan: bool,
}

/// The key of a [`Leftover`] in its record: `<cluster>.<federated object UID>` (both are
/// valid ConfigMap key characters).
pub fn leftover_key(cluster: &str, federated_uid: &str) -> String {
    format!("{cluster}.{federated_uid}")
}

/// The value of [`OWNER_ANNOTATION`].
pub fn owner(control_plane: &str, federated_uid: &str) -> String {
    format!("{control_plane}/{federated_uid}")
}

/// The federated object UID of a copy owned by `control_plane`, if the proof says so.
pub fn owned_by<'a>(control_plane: &str, owner_annotation: Option<&'a str>) -> Option<&'a str> {
    let (plane, uid) = owner_annotation?.split_once('/')?;
    (plane == control_plane && !uid.is_empty()).then_some(uid)
}

/// What the hub holds under the copy's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HubObject<'a> {
    /// Not known (cache not loaded, read failed).
    Unknown,
    Absent,
    Present {
        uid: &'a str,
    },
}

/// What garbage collection does with one managed copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collect {
    /// Not garbage, or not ours to judge.
    Keep,
    /// Not known yet: confirm with a live read of the hub, then decide again.
    ConfirmAbsent,
    Delete,
    Unlabel,
}

/// Decides about one managed copy (see the module doc). `owner_annotation` is the copy's
/// [`OWNER_ANNOTATION`]; `record` its deletion record, if one was written.
pub fn collect(
    control_plane: &str,
    owner_annotation: Option<&str>,
    hub: HubObject<'_>,
    confirmed: bool,
    record: Option<&Leftover>,
) -> Collect {
    if owned_by(control_plane, owner_annotation).is_none() {
        return match (owner_annotation, hub) {
            (Some(_), _) | (None, HubObject::Unknown | HubObject::Present { .. }) => Collect::Keep,
            (None, HubObject::Absent) if !confirmed => Collect::ConfirmAbsent,
            (None, HubObject::Absent) => Collect::Unlabel,
        };
    }
    match hub {
        HubObject::Unknown | HubObject::Present { .. } => Collect::Keep,
        HubObject::Absent if !confirmed => Collect::ConfirmAbsent,
        HubObject::Absent if record.is_some_and(|r| r.orphan) => Collect::Unlabel,
        HubObject::Absent => Collect::Delete,
    }
}

/// What no garbage collection may do, whatever [`collect`] decided:
/// - a copy of a `Namespace` is deleted only when it is provably not the hub's own namespace
///   (`namespace_role`, see [`crate::hub::namespace_role`]): the hub's is unlabelled at most,
///   one that cannot be told apart yet is left alone;
/// - nothing in the control plane's namespace of a cluster that is, or may be, the hub is
///   touched (`in_hub_control_plane`).
pub fn guard(
    action: Collect,
    namespace_role: Option<&NamespaceRole>,
    in_hub_control_plane: bool,
) -> Collect {
    if in_hub_control_plane {
        return Collect::Keep;
    }
    match (action, namespace_role) {
        (Collect::Delete, Some(NamespaceRole::Hub)) => Collect::Unlabel,
        (Collect::Delete, Some(NamespaceRole::Unknown(_) | NamespaceRole::NeedsHubNamespace)) => {
            Collect::Keep
        }
        (action, _) => action,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLANE: &str = "7d1c";

    #[test]
    fn only_this_control_planes_copies_are_collected() {
        let absent = HubObject::Absent;
        for annotation in [Some("other/u1"), Some("7d1c"), Some("7d1c/"), Some("")] {
            assert_eq!(
                collect(PLANE, annotation, absent, true, None),
                Collect::Keep,
                "{annotation:?}"
            );
        }
        assert_eq!(
            collect(PLANE, Some("7d1c/u1"), absent, true, None),
            Collect::Delete
        );
    }

    #[test]
    fn a_federated_object_of_that_name_decides_itself() {
        let own = Some("7d1c/u1");
        for hub in [
            HubObject::Unknown,
            HubObject::Present { uid: "u1" },
            HubObject::Present { uid: "u2" },
        ] {
            assert_eq!(
                collect(PLANE, own, hub, true, None),
                Collect::Keep,
                "{hub:?}"
            );
        }
    }

    #[test]
    fn a_cached_absence_is_confirmed_before_anything_is_done() {
        assert_eq!(
            collect(PLANE, Some("7d1c/u1"), HubObject::Absent, false, None),
            Collect::ConfirmAbsent
        );
    }

    #[test]
    fn orphaning_deletions_leave_copies_unlabelled() {
        let orphan = Leftover {
            namespace: Some("ns".into()),
            name: "web".into(),
            orphan: true,
        };
        assert_eq!(
            collect(
                PLANE,
                Some("7d1c/u1"),
                HubObject::Absent,
                true,
                Some(&orphan)
            ),
            Collect::Unlabel
        );
        let delete = Leftover {
            orphan: false,
            ..orphan
        };
        assert_eq!(
            collect(
                PLANE,
                Some("7d1c/u1"),
                HubObject::Absent,
                true,
                Some(&delete)
            ),
            Collect::Delete
        );
    }

    #[test]
    fn records_and_proofs_have_stable_shapes() {
        assert_eq!(leftover_key("member2", "u1"), "member2.u1");
        assert_eq!(owner(PLANE, "u1"), "7d1c/u1");
        assert_eq!(owned_by(PLANE, Some("7d1c/u1")), Some("u1"));
        let record = Leftover {
            namespace: None,
            name: "team".into(),
            orphan: false,
        };
        let json = serde_json::to_string(&record).unwrap();
        assert_eq!(json, r#"{"name":"team","orphan":false}"#);
        assert_eq!(serde_json::from_str::<Leftover>(&json).unwrap(), record);
    }

    #[test]
    fn a_managed_object_without_proof_and_without_federated_object_is_unlabelled() {
        assert_eq!(
            collect(PLANE, None, HubObject::Absent, false, None),
            Collect::ConfirmAbsent
        );
        assert_eq!(
            collect(PLANE, None, HubObject::Absent, true, None),
            Collect::Unlabel
        );
        for hub in [HubObject::Unknown, HubObject::Present { uid: "u1" }] {
            assert_eq!(
                collect(PLANE, None, hub, true, None),
                Collect::Keep,
                "{hub:?}"
            );
        }
    }

    #[test]
    fn the_hubs_namespace_is_never_collected() {
        let unknown = NamespaceRole::Unknown("no answer".into());
        for (role, want) in [
            (Some(&NamespaceRole::Hub), Collect::Unlabel),
            (Some(&unknown), Collect::Keep),
            (Some(&NamespaceRole::NeedsHubNamespace), Collect::Keep),
            (Some(&NamespaceRole::Member), Collect::Delete),
            (None, Collect::Delete),
        ] {
            assert_eq!(guard(Collect::Delete, role, false), want, "{role:?}");
        }
        for action in [Collect::Delete, Collect::Unlabel, Collect::ConfirmAbsent] {
            assert_eq!(guard(action, None, true), Collect::Keep);
        }
        assert_eq!(
            guard(Collect::Unlabel, Some(&NamespaceRole::Hub), false),
            Collect::Unlabel
        );
    }
}
