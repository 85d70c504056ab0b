//! What a sync controller keeps in memory between reconciles — only what saves work or
//! feeds a metric; every decision can be re-derived without it (a restart loses nothing).

use std::collections::HashMap;

use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The top-level fields the sync controller's cache of federated objects keeps as JSON text.
const PACKED: [&str; 2] = ["spec", "status"];

/// Packs a federated object for the sync controller's cache: its `spec` and `status` as JSON
/// text. As a `serde_json::Value` every JSON object is a B-tree node of ~640 bytes however
/// few its keys, so a federated object with 10 clusters took ~25 KiB in the cache — its
/// placement and status one node per cluster, the template one per nested map — of which a
/// few KiB are text. Read them back with [`field`]: a reconcile decodes the spec once, as it
/// did before (from a clone of the tree), and nothing reads the fields otherwise. Only the
/// cache's copy is packed; what the controller writes to the hub never comes from it.
pub(crate) fn pack(object: &mut DynamicObject) {
    for name in PACKED {
        if let Some(value) = object.data.get_mut(name)
            && !value.is_string()
        {
            *value = Value::String(value.to_string());
        }
    }
}

/// A federated object's top-level `name` (`spec`, `status`), decoded — packed by [`pack`] or
/// not; `None` when the object has no such field.
pub(crate) fn field<T: DeserializeOwned>(
    object: &DynamicObject,
    name: &str,
) -> Option<Result<T, serde_json::Error>> {
    let value = object.data.get(name)?;
    Some(match value {
        Value::String(text) if PACKED.contains(&name) => serde_json::from_str(text),
        value => T::deserialize(value),
    })
}

/// What the last successful apply per (federated object, cluster) sent and got back.
///
/// Kept compact, one entry per object with a short list of clusters: it holds an entry for
/// most object×cluster pairs.
#[derive(Default)]
pub struct AppliedMap(parking_lot::Mutex<AppliedByObject>);

/// Object key (`namespace/name` or `name`) → (cluster, recorded apply).
type AppliedByObject = HashMap<Box<str>, Vec<(Box<str>, hubfed_core::version::RecordedApply)>>;

impl AppliedMap {
    fn key(namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_owned(),
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, AppliedByObject> {
        self.0.lock()
    }

    /// The recorded applies of one object, by cluster.
    pub fn get(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> HashMap<String, hubfed_core::version::RecordedApply> {
        self.lock()
            .get(Self::key(namespace, name).as_str())
            .into_iter()
            .flatten()
            .map(|(cluster, recorded)| (cluster.to_string(), recorded.clone()))
            .collect()
    }

    pub fn insert(
        &self,
        namespace: Option<&str>,
        name: &str,
        cluster: &str,
        recorded: hubfed_core::version::RecordedApply,
    ) {
        let mut map = self.lock();
        let clusters = map.entry(Self::key(namespace, name).into()).or_default();
        match clusters.iter_mut().find(|(c, _)| &**c == cluster) {
            Some((_, entry)) => *entry = recorded,
            None => {
                clusters.push((cluster.into(), recorded));
                clusters.shrink_to_fit();
            }
        }
    }

    pub fn remove(&self, namespace: Option<&str>, name: &str, cluster: &str) {
        let mut map = self.lock();
        let key = Self::key(namespace, name);
        if let Some(clusters) = map.get_mut(key.as_str()) {
            clusters.retain(|(c, _)| &**c != cluster);
            if clusters.is_empty() {
                map.remove(key.as_str());
            }
        }
    }

    /// Forgets every cluster of one object.
    pub fn forget(&self, namespace: Option<&str>, name: &str) {
        self.lock().remove(Self::key(namespace, name).as_str());
    }
}

/// A PropagatedVersion status written by this controller, kept until the PropagatedVersion
/// store shows that write or a later one. Without it, a reconcile queued by the previous
/// one's own writes reads the store before the watch has delivered them (or has delivered
/// only the creation of the PropagatedVersion, without its status) and writes the versions
/// again.
pub struct WrittenVersions {
    /// The resourceVersion the status write returned.
    pub resource_version: String,
    pub status: hubfed_core::version::PropagatedVersionStatus,
}

/// A federated object's status written by this controller, kept until the federated objects'
/// store shows that write or a later one (`hub_writes::write_status`).
pub struct WrittenStatus {
    /// The resourceVersion the status write returned.
    pub resource_version: String,
    pub status: hubfed_api::federated::FederatedStatus,
}

/// Gives a map's spare room back once it is mostly empty. A `HashMap` never shrinks by itself,
/// so one a burst filled kept its table for good: the writes left running during a cold start
/// ([`super::detach`], one entry per copy at its height) held 3.3 MB of empty table at rest at
/// 10 × 2,000, heap a warm restart never allocates (docs/benchmarks.md). Asks for room for
/// twice the entries: the table is rebuilt only when half its buckets would hold that (the
/// entries fill less than about a fifth of it), else nothing happens — so a map that fills and
/// empties again costs amortized O(1) per entry. (`capacity()` cannot tell: removed entries
/// leave tombstones it does not count as room.)
pub(crate) fn shrink_when_sparse<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V>) {
    /// Room kept however few the entries.
    const KEEP: usize = 64;
    map.shrink_to((map.len() * 2).max(KEEP));
}

/// Keeps the entries of the map behind `map` that `keep` accepts, gives back the room of
/// the others ([`shrink_when_sparse`]) and returns how many are left.
pub(crate) fn prune<K: Eq + std::hash::Hash, V>(
    map: &parking_lot::Mutex<HashMap<K, V>>,
    mut keep: impl FnMut(&K, &V) -> bool,
) -> usize {
    let mut map = map.lock();
    map.retain(|key, value| keep(key, value));
    shrink_when_sparse(&mut map);
    map.len()
}

/// Whether a cached copy at `cached` predates the write that returned `written`. Kubernetes
/// resourceVersions are comparable decimal numbers (KEP-5504); anything else counts as
/// caught up, which at worst costs one redundant write.
pub fn store_is_behind(cached: Option<&str>, written: &str) -> bool {
    let Ok(written) = written.parse::<u64>() else {
        return false;
    };
    match cached {
        None => true,
        Some(cached) => cached.parse::<u64>().is_ok_and(|cached| cached < written),
    }
}

/// When each federated object's current generation was first seen, until every placed
/// cluster has converged to it.
#[derive(Default)]
pub struct LatencyTracker {
    pending: HashMap<ObjectRef<DynamicObject>, Pending>,
    converged: HashMap<ObjectRef<DynamicObject>, i64>,
}

struct Pending {
    generation: i64,
    since: std::time::Instant,
    wrote: bool,
}

impl LatencyTracker {
    pub fn observe_start(&mut self, object: &ObjectRef<DynamicObject>, generation: i64) {
        if self.converged.get(object) == Some(&generation) {
            return;
        }
        let fresh = self
            .pending
            .get(object)
            .is_none_or(|p| p.generation != generation);
        if fresh {
            self.pending.insert(
                object.clone(),
                Pending {
                    generation,
                    since: std::time::Instant::now(),
                    wrote: false,
                },
            );
        }
    }

    /// The latency to report when this reconcile completed propagation of `generation`.
    /// Generations that needed no member write (already in place, e.g. after a restart)
    /// report nothing.
    pub fn observe_end(
        &mut self,
        object: &ObjectRef<DynamicObject>,
        generation: i64,
        wrote: bool,
        converged: bool,
    ) -> Option<std::time::Duration> {
        let pending = self
            .pending
            .get_mut(object)
            .filter(|p| p.generation == generation)?;
        pending.wrote |= wrote;
        if !converged {
            return None;
        }
        let pending = self.pending.remove(object)?;
        self.converged.insert(object.clone(), generation);
        pending.wrote.then(|| pending.since.elapsed())
    }

    pub fn forget(&mut self, object: &ObjectRef<DynamicObject>) {
        self.pending.remove(object);
        self.converged.remove(object);
    }

    /// Gives back the room of generations no longer pending ([`shrink_when_sparse`]).
    pub fn shrink(&mut self) {
        shrink_when_sparse(&mut self.pending);
        shrink_when_sparse(&mut self.converged);
    }
}

#[cfg(test)]
mod tests {
    use hubfed_api::federated::{FederatedSpec, FederatedStatus};
    use serde_json::json;

    use super::*;

    /// A map a burst filled gives its table back once nearly emptied; one still half full
    /// keeps it, and an empty one keeps a small table.
    #[test]
    fn a_sparse_map_gives_its_room_back() {
        let mut map: HashMap<u32, [u8; 200]> = (0..10_000).map(|i| (i, [0; 200])).collect();
        map.retain(|i, _| *i < 5_000);
        let half = map.capacity();
        shrink_when_sparse(&mut map);
        assert_eq!(map.capacity(), half, "half full: the table is kept");
        map.retain(|i, _| *i < 10);
        shrink_when_sparse(&mut map);
        assert!(
            map.capacity() < 200,
            "capacity {} for 10 entries",
            map.capacity()
        );
        assert_eq!(map.len(), 10);
        assert!(map.contains_key(&9));
        let locked = parking_lot::Mutex::new(map);
        assert_eq!(
            prune(&locked, |i, _| i % 2 == 0),
            5,
            "prune keeps what it is told to"
        );
        let mut map = locked.into_inner();
        assert!(map.contains_key(&8) && !map.contains_key(&9));
        map.clear();
        shrink_when_sparse(&mut map);
        assert!(map.capacity() >= 64, "a small table is kept");
        map.extend((0..1_000).map(|i| (i, [0; 200])));
        assert_eq!(map.len(), 1_000, "grows again");
    }

    fn federated() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "types.kubefed.io/v1beta1",
            "kind": "FederatedConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "labels": {"x": "y"}},
            "spec": {
                "template": {"data": {"k": "v"}},
                "placement": {"clusters": [{"name": "m1"}, {"name": "m2"}]},
                "overrides": [{"clusterName": "m2", "clusterOverrides": [
                    {"path": "/data/k", "value": "w"}]}],
            },
            "status": {
                "conditions": [{"type": "Propagation", "status": "True"}],
                "clusters": [{"name": "m1"}, {"name": "m2", "status": "CreationFailed"}],
            },
        }))
        .unwrap()
    }

    /// Packed or not, the fields read back the same; the rest of the object is untouched.
    #[test]
    fn packed_fields_read_back_as_they_were() {
        let plain = federated();
        let mut packed = plain.clone();
        pack(&mut packed);
        assert!(packed.data["spec"].is_string() && packed.data["status"].is_string());
        assert_eq!(packed.metadata, plain.metadata);
        for object in [&plain, &packed] {
            let spec: FederatedSpec = field(object, "spec").unwrap().unwrap();
            let expected: FederatedSpec =
                serde_json::from_value(plain.data["spec"].clone()).unwrap();
            assert_eq!(spec, expected);
            let status: FederatedStatus = field(object, "status").unwrap().unwrap();
            assert_eq!(status.clusters.len(), 2);
            assert_eq!(status.conditions[0].type_, "Propagation");
        }
        // Packing twice changes nothing.
        let mut twice = packed.clone();
        pack(&mut twice);
        assert_eq!(twice.data, packed.data);
    }

    /// A missing field is `None`; one that does not decode is an error, packed or not (a spec
    /// that cannot be read is refused, never taken for an empty one).
    #[test]
    fn missing_and_unreadable_fields() {
        let mut object = federated();
        object.data.as_object_mut().unwrap().remove("status");
        object.data["spec"]["placement"] = json!("not a placement");
        assert!(field::<FederatedStatus>(&object, "status").is_none());
        assert!(field::<FederatedSpec>(&object, "spec").unwrap().is_err());
        pack(&mut object);
        assert!(field::<FederatedStatus>(&object, "status").is_none());
        assert!(field::<FederatedSpec>(&object, "spec").unwrap().is_err());
    }
}
