//! Where a rollout's state is kept: the state ConfigMap in the control plane's namespace, its
//! name, whose it is, what its data holds and how much of it fits.

use std::collections::BTreeMap;

use super::RolloutState;

/// Prefix of the state ConfigMaps' names.
pub const STATE_PREFIX: &str = "hubfed-rollout.";
/// Annotation of a state ConfigMap: the object it belongs to, [`state_key`].
pub const STATE_OBJECT_ANNOTATION: &str = "hubfed.io/rollout-object";

/// Annotation of a state ConfigMap: the UID of the object it belongs to ([`state_belongs`]).
pub const STATE_UID_ANNOTATION: &str = "hubfed.io/rollout-object-uid";

/// Whether a stored state belongs to the object with `uid`: the state of an earlier object of
/// the same name (deleted, then created again) does not — its revisions and stable spec are
/// not this object's, which starts afresh. A state stored without a UID is taken as the
/// object's.
pub fn state_belongs(stored_uid: Option<&str>, uid: Option<&str>) -> bool {
    match (stored_uid, uid) {
        (Some(stored), Some(uid)) => stored == uid,
        _ => true,
    }
}

/// Whether the state ConfigMap, in the control plane's namespace, can name the federated
/// object as its owner, so that Kubernetes' garbage collector deletes it with the object:
/// owner references never cross namespaces, so only a cluster-scoped object or one in the
/// control plane's own namespace. The controller deletes the others' state itself when the
/// object is deleted.
pub fn state_owned_by_object(namespace: Option<&str>, kubefed_namespace: &str) -> bool {
    namespace.is_none_or(|ns| ns == kubefed_namespace)
}

/// The full identity of a federated object's rollout state: `<federated kind>/<namespace>/<name>`
/// (`<federated kind>/<name>` for a cluster-scoped object); kept in the state ConfigMap's
/// [`STATE_OBJECT_ANNOTATION`], since its name may be shortened.
pub fn state_key(federated_kind: &str, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(namespace) => format!("{federated_kind}/{namespace}/{name}"),
        None => format!("{federated_kind}/{name}"),
    }
}

/// The name of the ConfigMap holding a federated object's rollout state, the one spelling the
/// controller and `hubfedctl` share: `hubfed-rollout.<kind>.<namespace>.<name>-<hash>`
/// (`hubfed-rollout.<kind>.<name>-<hash>` for a cluster-scoped object), lower-cased, characters
/// a ConfigMap name cannot hold (`:`, `_`, ...) replaced by `-`, shortened to fit 253
/// characters; `<hash>` (10 hex digits of the md5 of [`state_key`]) keeps distinct objects
/// apart however their names were shortened or rewritten. Always a valid DNS-1123 subdomain.
pub fn state_name(federated_kind: &str, namespace: Option<&str>, name: &str) -> String {
    use md5::{Digest, Md5};
    let key = state_key(federated_kind, namespace, name);
    let hash = hex::encode(Md5::digest(key.as_bytes()));
    let suffix = format!("-{}", &hash[..10]);
    let readable: String = [Some(federated_kind), namespace, Some(name)]
        .into_iter()
        .flatten()
        .map(|part| {
            let part: String = part
                .chars()
                .map(|c| match c.to_ascii_lowercase() {
                    c @ ('a'..='z' | '0'..='9' | '-' | '.') => c,
                    _ => '-',
                })
                .collect();
            // Every label (between dots) starts and ends with a letter or digit.
            part.split('.')
                .map(|label| label.trim_matches('-'))
                .filter(|label| !label.is_empty())
                .collect::<Vec<_>>()
                .join(".")
        })
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(".");
    let room = crate::validation::DNS1123_SUBDOMAIN_MAX_LENGTH - STATE_PREFIX.len() - suffix.len();
    let cut: String = readable.chars().take(room).collect();
    let cut = cut.trim_end_matches(['-', '.']);
    let readable = if cut.is_empty() { "object" } else { cut };
    format!("{STATE_PREFIX}{readable}{suffix}")
}

/// What a state ConfigMap's data holds: the state, and the specs of its revision and of the
/// stable revision.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StoredData {
    pub state: Option<RolloutState>,
    pub current: Option<hubfed_api::federated::FederatedSpec>,
    pub stable: Option<hubfed_api::federated::FederatedSpec>,
}

/// Reads a state ConfigMap's `data` (keys `state`, `current`, `stable`; absent or empty: none).
/// A value that is there but cannot be read is an error, never "no state": the rollout can
/// neither go on nor start afresh (that would send the next revision everywhere at once), so
/// every change is held until the ConfigMap is mended or deleted.
pub fn read_state(data: &BTreeMap<String, String>) -> std::result::Result<StoredData, String> {
    fn read<T: serde::de::DeserializeOwned>(
        data: &BTreeMap<String, String>,
        key: &str,
    ) -> std::result::Result<Option<T>, String> {
        match data.get(key).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => serde_json::from_str(v)
                .map(Some)
                .map_err(|e| format!("{key}: {e}")),
        }
    }
    Ok(StoredData {
        state: read(data, "state")?,
        current: read(data, "current")?,
        stable: read(data, "stable")?,
    })
}

/// How many bytes of data a state ConfigMap may hold: a ConfigMap holds at most 1 MiB
/// (1,048,576 bytes), less room for its metadata.
pub const STATE_DATA_LIMIT: usize = 1_000_000;

/// What of a rollout's state fits in its ConfigMap ([`STATE_DATA_LIMIT`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// The state and both specs.
    All,
    /// The state and the current revision's spec: the stable revision's spec is dropped (an
    /// abort then cannot write it back, and says so).
    WithoutStable,
    /// Not even the state and the current spec: the object is not staged ([`too_large`](super::too_large)).
    TooLarge,
}

/// What of a state of `state` bytes with specs of `current` and `stable` bytes (serialized)
/// fits in its ConfigMap.
pub fn fit(state: usize, current: usize, stable: usize) -> Fit {
    if state + current + stable <= STATE_DATA_LIMIT {
        Fit::All
    } else if state + current <= STATE_DATA_LIMIT {
        Fit::WithoutStable
    } else {
        Fit::TooLarge
    }
}

#[cfg(test)]
mod tests;
