//! The propagation latency metric's memory: when each federated object's current generation
//! was first seen ([`LatencyTracker`]).

use std::collections::HashMap;

use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;

use super::objects::shrink_when_sparse;

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
