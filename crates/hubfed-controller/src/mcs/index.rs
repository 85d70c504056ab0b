//! What the MCS controller knows of one member: its caches, fed by its watches.
//!
//! One [`MemberIndex`] per member, behind one lock, changed only through [`MemberIndex::apply`],
//! [`MemberIndex::delete`] and [`MemberIndex::reset`]. Every cached object sits under a
//! [`Slot`]: its namespace, the exported name it belongs to (its reconcile key) and its own
//! name, so that one key's objects are one range of each map.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use hubfed_api::about::ClusterProperty;
use hubfed_api::mcs::{self, ServiceExport, ServiceImport};
use hubfed_api::pull_mcs::ServiceImportWork;
use hubfed_core::mcs::{NamespaceState, SERVICE_IMPORT_LABEL};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Resource;

/// A reconcile key: the namespace and name of an exported Service.
pub(super) type Key = (String, String);

/// A cached object's place: namespace, the exported name it belongs to, its own name.
pub(super) type Slot = (String, String, String);

/// `discoveryv1.LabelServiceName`.
pub(super) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// One watch of a member, by what it feeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Feed {
    Exports,
    Services,
    SourceSlices,
    DerivedSlices,
    Imports,
    Namespaces,
    Properties,
    /// A pull member's import works in the hub (its agent carries them out).
    Works,
}

impl Feed {
    /// The feeds of a push member (or of an agent's own member): its watches.
    pub(super) const MEMBER: [Self; 7] = [
        Self::Exports,
        Self::Services,
        Self::SourceSlices,
        Self::DerivedSlices,
        Self::Imports,
        Self::Namespaces,
        Self::Properties,
    ];
    /// The feeds of a pull member: its agent's reports (exports, their Services and source
    /// slices; namespaces and properties) and the works the hub wrote for it.
    pub(super) const PULL: [Self; 6] = [
        Self::Exports,
        Self::Services,
        Self::SourceSlices,
        Self::Namespaces,
        Self::Properties,
        Self::Works,
    ];

    /// The feeds of the MCS CRDs: without them the member takes no part.
    pub(super) fn needs_mcs_crds(self) -> bool {
        matches!(self, Self::Exports | Self::Imports)
    }

    /// The feeds of every Service, source slice and namespace, started only once the member
    /// serves the MCS CRDs: a member without them costs no watch of its whole cluster.
    pub(super) fn waits_for_mcs_crds(self) -> bool {
        matches!(self, Self::Services | Self::SourceSlices | Self::Namespaces)
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Exports => "ServiceExport",
            Self::Services => "Service",
            Self::SourceSlices | Self::DerivedSlices => "EndpointSlice",
            Self::Imports => "ServiceImport",
            Self::Namespaces => "Namespace",
            Self::Properties => "ClusterProperty",
            Self::Works => "ServiceImportWork",
        }
    }
}

/// One cached object of any feed.
#[derive(Clone, Debug)]
pub(super) enum Cached {
    Export(Arc<ServiceExport>),
    Service(Arc<Service>),
    Slice(Arc<EndpointSlice>),
    Import(Arc<ServiceImport>),
    Namespace(Arc<Namespace>),
    Property(Arc<ClusterProperty>),
    Work(Arc<ServiceImportWork>),
}

/// Where a watched object of `feed` is cached; None for one the feed does not keep.
pub(super) fn slot_of<K: Resource>(feed: Feed, object: &K) -> Option<Slot> {
    let meta = object.meta();
    let name = meta.name.clone()?;
    let namespace = meta.namespace.clone().unwrap_or_default();
    let label = |key: &str| meta.labels.as_ref().and_then(|l| l.get(key)).cloned();
    let group = match feed {
        Feed::Exports | Feed::Imports | Feed::Namespaces | Feed::Properties => name.clone(),
        // A derived Service belongs to its import's key; any other to its own name.
        Feed::Services => label(SERVICE_IMPORT_LABEL).unwrap_or_else(|| name.clone()),
        Feed::SourceSlices => label(SERVICE_NAME_LABEL)?,
        Feed::DerivedSlices => label(mcs::SERVICE_NAME_LABEL)?,
        // `<namespace>.<name>`: neither holds a dot (DNS labels).
        Feed::Works => {
            let (namespace, group) = name.split_once('.')?;
            return Some((namespace.to_owned(), group.to_owned(), name.clone()));
        }
    };
    Some((namespace, group, name))
}

/// The caches of one member and which of its watches have listed.
#[derive(Debug, Default)]
pub(super) struct MemberIndex {
    caches: BTreeMap<Feed, BTreeMap<Slot, Cached>>,
    listed: BTreeSet<Feed>,
    /// Feeds whose resource the member does not serve (404).
    unserved: BTreeSet<Feed>,
    /// Fed by a pull member's reports and works ([`Feed::PULL`]), not by watches of it.
    pull: bool,
}

impl MemberIndex {
    /// The index of a pull member.
    pub(super) fn pull() -> Self {
        Self {
            pull: true,
            ..Self::default()
        }
    }

    fn feeds(&self) -> &'static [Feed] {
        if self.pull {
            &Feed::PULL
        } else {
            &Feed::MEMBER
        }
    }

    /// Replaces the objects of `feed` under `key` with `objects`.
    pub(super) fn replace_key(&mut self, feed: Feed, key: &Key, objects: Vec<(Slot, Cached)>) {
        let cache = self.caches.entry(feed).or_default();
        let start = (key.0.clone(), key.1.clone(), String::new());
        let old: Vec<Slot> = cache
            .range(start..)
            .take_while(|(slot, _)| slot.0 == key.0 && slot.1 == key.1)
            .map(|(slot, _)| slot.clone())
            .collect();
        for slot in old {
            cache.remove(&slot);
        }
        cache.extend(objects);
    }

    /// Records whether the member serves `feed`'s resource (a pull member's report says).
    pub(super) fn set_served(&mut self, feed: Feed, served: bool) {
        if served {
            self.unserved.remove(&feed);
        } else {
            self.unserved.insert(feed);
        }
    }

    /// The member's namespaces, and whether each is terminating.
    pub(super) fn namespaces(&self) -> impl Iterator<Item = (&str, bool)> {
        self.caches
            .get(&Feed::Namespaces)
            .into_iter()
            .flat_map(|cache| cache.iter())
            .map(|(slot, cached)| {
                let terminating = matches!(cached, Cached::Namespace(ns)
                    if ns.metadata.deletion_timestamp.is_some());
                (slot.2.as_str(), terminating)
            })
    }

    /// Caches `object` under `slot`.
    pub(super) fn apply(&mut self, feed: Feed, slot: Slot, object: Cached) {
        self.caches.entry(feed).or_default().insert(slot, object);
    }

    /// Forgets the object under `slot`.
    pub(super) fn delete(&mut self, feed: Feed, slot: &Slot) {
        if let Some(cache) = self.caches.get_mut(&feed) {
            cache.remove(slot);
        }
    }

    /// Replaces the feed's cache with a whole list; returns the keys of both, old and new.
    pub(super) fn reset(&mut self, feed: Feed, objects: Vec<(Slot, Cached)>) -> BTreeSet<Slot> {
        let old = self.caches.remove(&feed).unwrap_or_default();
        let mut touched: BTreeSet<Slot> = old.into_keys().collect();
        let new: BTreeMap<Slot, Cached> = objects.into_iter().collect();
        touched.extend(new.keys().cloned());
        self.caches.insert(feed, new);
        self.listed.insert(feed);
        self.unserved.remove(&feed);
        touched
    }

    /// Records that the member does not serve the feed's resource; true the first time.
    pub(super) fn set_unserved(&mut self, feed: Feed) -> bool {
        self.unserved.insert(feed)
    }

    /// Whether every watch has listed, or found its resource unserved. A pull member without
    /// the MCS CRDs takes no part: nothing else of it is waited for.
    pub(super) fn listed(&self) -> bool {
        let lacks = self.lacks_mcs_crds();
        self.feeds().iter().all(|f| {
            self.listed.contains(f)
                || self.unserved.contains(f)
                || (lacks && (self.pull || f.waits_for_mcs_crds()))
        })
    }

    /// Whether the member lacks the MCS CRDs.
    pub(super) fn lacks_mcs_crds(&self) -> bool {
        self.unserved.iter().any(|f| f.needs_mcs_crds())
    }

    /// Whether the member serves ClusterProperties.
    pub(super) fn serves_properties(&self) -> bool {
        !self.unserved.contains(&Feed::Properties)
    }

    /// The objects of `feed` that belong to `key`.
    pub(super) fn of_key<'a>(
        &'a self,
        feed: Feed,
        key: &'a Key,
    ) -> impl Iterator<Item = (&'a Slot, &'a Cached)> + 'a {
        self.caches
            .get(&feed)
            .into_iter()
            .flat_map(move |cache| {
                let start = (key.0.clone(), key.1.clone(), String::new());
                cache.range(start..)
            })
            .take_while(move |(slot, _)| slot.0 == key.0 && slot.1 == key.1)
    }

    /// The object of `feed` named `name` in `key`'s namespace, under `key`.
    pub(super) fn get(&self, feed: Feed, key: &Key, name: &str) -> Option<&Cached> {
        let slot = (key.0.clone(), key.1.clone(), name.to_owned());
        self.caches.get(&feed)?.get(&slot)
    }

    /// Whether the member's namespace `namespace` exists.
    pub(super) fn namespace(&self, namespace: &str) -> NamespaceState {
        if !self.listed.contains(&Feed::Namespaces) {
            return NamespaceState::Unknown;
        }
        let slot = (String::new(), namespace.to_owned(), namespace.to_owned());
        match self
            .caches
            .get(&Feed::Namespaces)
            .and_then(|c| c.get(&slot))
        {
            Some(Cached::Namespace(ns)) if ns.metadata.deletion_timestamp.is_some() => {
                NamespaceState::Terminating
            }
            Some(_) => NamespaceState::Active,
            None => NamespaceState::Absent,
        }
    }

    /// The value of the member's ClusterProperty `name`.
    pub(super) fn property(&self, name: &str) -> Option<&str> {
        let slot = (String::new(), name.to_owned(), name.to_owned());
        match self.caches.get(&Feed::Properties)?.get(&slot)? {
            Cached::Property(p) => Some(p.spec.value.as_str()),
            _ => None,
        }
    }

    /// Every key this member exports or holds an import (or an import work) of.
    pub(super) fn keys(&self) -> BTreeSet<Key> {
        [
            Feed::Exports,
            Feed::Imports,
            Feed::DerivedSlices,
            Feed::Works,
        ]
        .iter()
        .filter_map(|f| self.caches.get(f))
        .flat_map(|cache| cache.keys())
        .map(|(ns, group, _)| (ns.clone(), group.clone()))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(ns: &str, name: &str, service: &str) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": name,
                "labels": {SERVICE_NAME_LABEL: service}},
            "addressType": "IPv4", "endpoints": [],
        }))
        .unwrap()
    }

    fn put(index: &mut MemberIndex, s: EndpointSlice) {
        let slot = slot_of(Feed::SourceSlices, &s).unwrap();
        index.apply(Feed::SourceSlices, slot, Cached::Slice(Arc::new(s)));
    }

    #[test]
    fn a_keys_objects_are_its_range_only() {
        let mut index = MemberIndex::default();
        put(&mut index, slice("a", "web-1", "web"));
        put(&mut index, slice("a", "web-2", "web"));
        put(&mut index, slice("a", "webx-1", "webx"));
        put(&mut index, slice("b", "web-1", "web"));
        let key = ("a".to_owned(), "web".to_owned());
        let names: Vec<&str> = index
            .of_key(Feed::SourceSlices, &key)
            .map(|(slot, _)| slot.2.as_str())
            .collect();
        assert_eq!(names, ["web-1", "web-2"]);
    }

    #[test]
    fn a_relist_reports_what_went_and_what_came() {
        let mut index = MemberIndex::default();
        put(&mut index, slice("a", "old", "web"));
        let new = slice("a", "new", "api");
        let slot = slot_of(Feed::SourceSlices, &new).unwrap();
        let touched = index.reset(
            Feed::SourceSlices,
            vec![(slot.clone(), Cached::Slice(Arc::new(new)))],
        );
        assert_eq!(touched.len(), 2);
        assert!(touched.contains(&slot));
        assert!(!index.listed(), "the other feeds have not listed");
    }

    #[test]
    fn namespaces_are_unknown_until_listed() {
        let mut index = MemberIndex::default();
        assert_eq!(index.namespace("a"), NamespaceState::Unknown);
        index.reset(Feed::Namespaces, Vec::new());
        assert_eq!(index.namespace("a"), NamespaceState::Absent);
    }

    #[test]
    fn a_pull_member_lists_from_its_reports_and_works() {
        let mut index = MemberIndex::pull();
        for feed in [
            Feed::Exports,
            Feed::Services,
            Feed::SourceSlices,
            Feed::Works,
        ] {
            index.reset(feed, Vec::new());
        }
        assert!(!index.listed(), "no cluster report yet");
        index.reset(Feed::Namespaces, Vec::new());
        index.reset(Feed::Properties, Vec::new());
        assert!(index.listed(), "imports and derived slices are its agent's");
        index.set_served(Feed::Imports, false);
        assert!(index.lacks_mcs_crds());
        index.set_served(Feed::Imports, true);
        assert!(!index.lacks_mcs_crds());
    }

    #[test]
    fn a_pull_member_without_the_crds_is_waited_for_no_more() {
        let mut index = MemberIndex::pull();
        index.set_served(Feed::Imports, false);
        assert!(
            index.listed(),
            "it takes no part: nothing of it is waited for"
        );
    }

    #[test]
    fn works_sit_under_their_key() {
        let work: ServiceImportWork = serde_json::from_value(json!({
            "metadata": {"namespace": "hubfed-cluster-m3", "name": "a.web"},
            "spec": {"namespace": "a", "name": "web"},
        }))
        .unwrap();
        let slot = slot_of(Feed::Works, &work).unwrap();
        assert_eq!(slot, ("a".into(), "web".into(), "a.web".into()));
        let mut index = MemberIndex::pull();
        index.apply(Feed::Works, slot, Cached::Work(Arc::new(work)));
        assert!(index.keys().contains(&("a".to_owned(), "web".to_owned())));
        let key = ("a".to_owned(), "web".to_owned());
        index.replace_key(Feed::Works, &key, Vec::new());
        assert!(index.keys().is_empty());
    }
}
