//! What carrying out one cluster's action needs besides the member API ([`ExecEnv`]): its own
//! module so that the executor ([`super::execute`]) and the apply it calls ([`super::apply`])
//! both depend on it, not on each other.

use parking_lot::Mutex;
use std::collections::HashMap;

use hubfed_core::plan::FederatedObject;
use kube::runtime::events::EventType;

use super::AppliedMap;
use super::members::Unmanaged;

/// Where an action's Events go: the hub's Event recorder for the push dispatcher, the work's
/// status (republished by the hub) for the agent.
pub trait EventSink: Send + Sync {
    fn publish(&self, type_: EventType, reason: &str, message: &str);
}

/// Remembers the drift last reported of each copy, so the same drift seen again (a change
/// left in place under `hubfed.io/drift: report`) is not an Event and a count each time.
pub trait DriftMemory: Send + Sync {
    /// Records `what` as the drift last reported of `object`'s copy in `cluster`; whether it
    /// differs from the one reported before.
    fn report(&self, object: &FederatedObject, cluster: &str, what: &str) -> bool;
}

/// The agent's memory: `<namespace>/<name>@<cluster>` → what.
impl DriftMemory for Mutex<HashMap<String, String>> {
    fn report(&self, object: &FederatedObject, cluster: &str, what: &str) -> bool {
        let copy = format!(
            "{}/{}@{cluster}",
            object.namespace.as_deref().unwrap_or_default(),
            object.name
        );
        self.lock().insert(copy, what.to_owned()).as_deref() != Some(what)
    }
}

/// What carrying out an action needs besides the member API.
pub struct ExecEnv<'a> {
    /// The member object's kind, for messages (`ConfigMap "ns/name"`).
    pub target_kind: &'a str,
    /// Its API group (`""` for the core group), for its readiness.
    pub target_group: &'a str,
    pub namespaced: bool,
    /// The `type` label of the drift metrics: the federated kind, lowercased.
    pub type_label: String,
    /// Field managers whose changes are people's (drift to revert).
    pub drift_people: &'a [String],
    /// The last drift reported per copy, so the same drift is one Event, not one per apply.
    pub drift_reported: &'a dyn DriftMemory,
    /// Memory of successful applies, kept by the push controller (the agent reports them).
    pub applied: Option<&'a AppliedMap>,
    /// What the cache of unmanaged names knows of a name: (cluster, name, namespace).
    pub unmanaged: &'a (dyn Fn(&str, &str, Option<&str>) -> Unmanaged + Send + Sync),
    pub events: &'a dyn EventSink,
}

impl ExecEnv<'_> {
    /// "Kind "namespace/name"", for messages.
    pub fn what(&self, object: &FederatedObject) -> String {
        let key = match &object.namespace {
            Some(ns) if self.namespaced => format!("{ns}/{}", object.name),
            _ => object.name.clone(),
        };
        format!("{} {key:?}", self.target_kind)
    }
}
