//! What the last successful apply per (federated object, cluster) sent and got back
//! ([`AppliedMap`]).

use std::collections::HashMap;

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
