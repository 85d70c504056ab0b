//! The compact form of one managed member object ([`Cached`]): what decisions read of it,
//! its strings in one allocation.

use hubfed_api::names::MANAGED_LABEL;
use hubfed_core::desired::TargetType;
use hubfed_core::plan::MemberObject;
use hubfed_core::readiness::{Readiness, readiness};
use hubfed_core::version::object_version;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;

use super::ManagedCopy;
use super::packed::{Packed, collect_pairs, pairs};

/// What is kept of one managed member object: its strings in one allocation ([`Packed`]:
/// version, uid, why it is not ready, then label and annotation pairs), 32 bytes beside it.
#[derive(PartialEq, Eq)]
pub(super) struct Cached {
    pub(super) strings: Packed,
    /// The number of label pairs; the annotation pairs follow them to the end.
    pub(super) labels: u32,
    pub(super) terminating: bool,
    /// [`hubfed_core::readiness`]; the reason is the third string.
    pub(super) ready: bool,
    /// The copy's `.status`, kept only when the type's status is collected.
    pub(super) status: Option<Box<serde_json::Value>>,
}

impl Cached {
    pub(super) fn new(meta: &ObjectMeta) -> Self {
        Self::with_readiness(meta, None)
    }

    pub(super) fn with_readiness(meta: &ObjectMeta, not_ready: Option<&str>) -> Self {
        let version = object_version(
            meta.generation.unwrap_or(0),
            meta.resource_version.as_deref().unwrap_or(""),
        );
        let fixed = [
            version.as_str(),
            meta.uid.as_deref().unwrap_or(""),
            not_ready.unwrap_or(""),
        ];
        Self {
            strings: Packed::new(
                fixed
                    .into_iter()
                    .chain(pairs(meta.labels.as_ref()))
                    .chain(pairs(meta.annotations.as_ref())),
            ),
            labels: meta
                .labels
                .as_ref()
                .map_or(0, |l| u32::try_from(l.len()).unwrap_or(u32::MAX)),
            terminating: meta.deletion_timestamp.is_some(),
            ready: not_ready.is_none(),
            status: None,
        }
    }

    /// From a whole object: its readiness, and its status when `collect_status`.
    pub(super) fn with_status(
        object: &DynamicObject,
        target: &TargetType,
        collect_status: bool,
    ) -> Self {
        let json = serde_json::to_value(object).unwrap_or_default();
        let not_ready = match readiness(&target.group, &target.kind, &json) {
            Readiness::Ready => None,
            Readiness::NotReady(why) => Some(why),
        };
        let status = collect_status
            .then(|| object.data.get("status").cloned())
            .flatten()
            .map(Box::new);
        Self {
            status,
            ..Self::with_readiness(&object.metadata, not_ready.as_deref())
        }
    }

    /// The uid, empty when the object had none.
    pub(super) fn uid(&self) -> &str {
        self.strings.iter().nth(1).unwrap_or_default()
    }

    /// The value of annotation `key`.
    pub(super) fn annotation(&self, key: &str) -> Option<&str> {
        let mut strings = self.strings.iter().skip(3 + 2 * self.labels as usize);
        while let (Some(k), Some(v)) = (strings.next(), strings.next()) {
            if k == key {
                return Some(v);
            }
        }
        None
    }

    pub(super) fn observation(&self) -> MemberObject {
        let mut strings = self.strings.iter();
        let version = strings.next().unwrap_or_default().to_owned();
        let uid = strings.next().unwrap_or_default();
        let not_ready = strings.next().unwrap_or_default();
        let labels = collect_pairs(&mut strings, self.labels as usize);
        let annotations = collect_pairs(&mut strings, usize::MAX);
        MemberObject {
            managed_label: labels.get(MANAGED_LABEL).cloned(),
            terminating: self.terminating,
            version,
            uid: (!uid.is_empty()).then(|| uid.to_owned()),
            labels,
            annotations,
            readiness: if self.ready {
                Readiness::Ready
            } else {
                Readiness::NotReady(not_ready.to_owned())
            },
            remote_status: self.status.as_deref().cloned(),
        }
    }
}

/// The copy a managed objects' cache holds under `key`.
pub(super) fn managed_copy(key: &str, cached: &Cached) -> ManagedCopy {
    let (namespace, name) = match key.split_once('/') {
        Some((ns, name)) => (Some(ns.to_owned()), name.to_owned()),
        None => (None, key.to_owned()),
    };
    ManagedCopy {
        name,
        namespace,
        uid: Some(cached.uid())
            .filter(|uid| !uid.is_empty())
            .map(str::to_owned),
        owner: cached
            .annotation(hubfed_api::names::OWNER_ANNOTATION)
            .map(str::to_owned),
    }
}

/// A member object's `kubefed.io/managed` label.
pub(super) fn managed_label(meta: &ObjectMeta) -> Option<&str> {
    meta.labels.as_ref()?.get(MANAGED_LABEL).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::{Cached, Readiness};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use std::collections::BTreeMap;

    pub(super) fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    pub(super) fn the_compact_form_keeps_what_decisions_read() {
        let meta = ObjectMeta {
            name: Some("x".into()),
            generation: Some(3),
            resource_version: Some("41".into()),
            labels: Some(map(&[("kubefed.io/managed", "true"), ("app", "web")])),
            annotations: Some(map(&[("note", "n")])),
            ..Default::default()
        };
        let member = Cached::new(&meta).observation();
        assert_eq!(member.version, "gen:3");
        assert_eq!(member.managed_label.as_deref(), Some("true"));
        assert!(!member.terminating);
        assert_eq!(
            member.labels,
            map(&[("kubefed.io/managed", "true"), ("app", "web")])
        );
        assert_eq!(member.annotations, map(&[("note", "n")]));

        let terminating = ObjectMeta {
            resource_version: Some("42".into()),
            deletion_timestamp: Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            ..Default::default()
        };
        let member = Cached::new(&terminating).observation();
        assert_eq!(member.version, "rv:42");
        assert!(member.terminating);
        assert!(member.labels.is_empty() && member.managed_label.is_none());
        assert!(member.annotations.is_empty() && member.uid.is_none());
    }

    #[test]
    pub(super) fn packed_strings_come_back_whole_long_empty_or_not_ascii() {
        let long = "x".repeat(300) + "é";
        let very_long = "y".repeat(70_000);
        let owner = format!("ns/{long}");
        let meta = ObjectMeta {
            uid: Some("0b8f6a2e-1c3d-4e5f-8a9b-0c1d2e3f4a5b".into()),
            resource_version: Some("7".into()),
            labels: Some(map(&[("empty", ""), ("kubefed.io/managed", "true")])),
            annotations: Some(map(&[
                ("hubfed.io/owner", &owner),
                ("big", &very_long),
                ("ünïcode", "värde"),
            ])),
            ..Default::default()
        };
        let cached = Cached::with_readiness(&meta, Some("0 of 3 replicas available"));
        assert_eq!(cached.uid(), "0b8f6a2e-1c3d-4e5f-8a9b-0c1d2e3f4a5b");
        assert_eq!(cached.annotation("hubfed.io/owner"), Some(owner.as_str()));
        // A label of the same name is not an annotation.
        assert_eq!(cached.annotation("empty"), None);
        let member = cached.observation();
        assert_eq!(member.version, "rv:7");
        assert_eq!(member.uid.as_deref(), Some(cached.uid()));
        assert_eq!(member.labels, meta.labels.clone().unwrap());
        assert_eq!(member.annotations, meta.annotations.clone().unwrap());
        assert_eq!(
            member.readiness,
            Readiness::NotReady("0 of 3 replicas available".into())
        );
        // Not ready with no reason stays not ready.
        let member = Cached::with_readiness(&meta, Some("")).observation();
        assert_eq!(member.readiness, Readiness::NotReady(String::new()));
        assert_eq!(Cached::new(&meta).observation().readiness, Readiness::Ready);
    }
}
