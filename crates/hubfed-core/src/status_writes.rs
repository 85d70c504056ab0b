//! A reconcile's hub writes — the federated object's status and its PropagatedVersion —
//! written after the reconcile has given its slot back.
//!
//! The member writes are what a change waits for; the status writes are what the hub keeps
//! about them. Written inside the reconcile, the two hub writes held a reconcile slot for
//! their round trips, and under load — a cold start, a burst of changes, a hub slowed by
//! them — the slots waited on the hub while the members' writes queued behind them. Now the
//! reconcile decides what to write (that stays a decision of the reconcile, on what it saw)
//! and leaves the writes to a task of their own, bounded by a hub write concurrency.
//!
//! One object's status writes and its next reconcile never overlap, as its reconciles never
//! do: a reconcile that comes while the object's status writes run is put off ([`InFlight`])
//! and the object is queued again when the status writes end ([`next`]).

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use crate::conclude::RETRY_DELAY;

/// The objects whose status writes run, each with whether a reconcile was put off meanwhile.
#[derive(Debug)]
pub struct InFlight<K> {
    running: HashMap<K, bool>,
}

impl<K> Default for InFlight<K> {
    fn default() -> Self {
        Self {
            running: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq> InFlight<K> {
    /// The status writes of `key` starts.
    pub fn begin(&mut self, key: K) {
        self.running.insert(key, false);
    }

    /// Whether a reconcile of `key` is to be put off: its status writes run. The object is
    /// queued again when it ends.
    pub fn put_off(&mut self, key: &K) -> bool {
        match self.running.get_mut(key) {
            Some(asked) => {
                *asked = true;
                true
            }
            None => false,
        }
    }

    /// The status writes of `key` ended: whether a reconcile was put off meanwhile.
    pub fn end(&mut self, key: &K) -> bool {
        self.running.remove(key).unwrap_or(false)
    }

    /// How many objects' status writes run.
    pub fn len(&self) -> usize {
        self.running.len()
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }
}

/// What follows an object's status writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Nothing: the object waits for its next change, as after a reconcile that wrote.
    Done,
    /// Reconcile it now: a reconcile was put off while the status writes ran.
    Reconcile,
    /// Reconcile it after this long: the status write failed, retried as a failed reconcile
    /// is.
    ReconcileAfter(Duration),
}

/// What follows the status writes: `status_failed` — the status write failed; `asked` — a
/// reconcile was put off while it ran. A failed PropagatedVersion write is not retried by
/// itself (the next reconcile that writes records the versions again, and a copy it does not
/// find recorded is applied again, a no-op). A status write the reconcile put off (remote
/// status coalescing) is the reconcile's own requeue, as before.
pub fn next(status_failed: bool, asked: bool) -> Next {
    match (asked, status_failed) {
        // The reconcile that was put off looks at everything again, the failed status too.
        (true, _) => Next::Reconcile,
        (false, true) => Next::ReconcileAfter(RETRY_DELAY),
        (false, false) => Next::Done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reconcile_is_put_off_only_while_the_objects_status_writes_run() {
        let mut in_flight = InFlight::default();
        assert!(!in_flight.put_off(&"a"), "nothing runs");
        in_flight.begin("a");
        assert!(!in_flight.put_off(&"b"), "another object's runs");
        assert!(!in_flight.end(&"a"), "no reconcile came meanwhile");
        assert!(!in_flight.put_off(&"a"), "it has ended");
        assert!(in_flight.is_empty());
    }

    #[test]
    fn a_reconcile_put_off_is_remembered_until_the_end() {
        let mut in_flight = InFlight::default();
        in_flight.begin("a");
        in_flight.begin("b");
        assert!(in_flight.put_off(&"a"));
        assert!(
            in_flight.put_off(&"a"),
            "put off again: still one reconcile owed"
        );
        assert_eq!(in_flight.len(), 2);
        assert!(in_flight.end(&"a"));
        assert!(!in_flight.end(&"b"));
        assert!(!in_flight.end(&"a"), "ended twice: nothing owed");
    }

    #[test]
    fn what_follows_the_status_writes() {
        assert_eq!(next(false, false), Next::Done);
        assert_eq!(next(false, true), Next::Reconcile);
        assert_eq!(
            next(true, true),
            Next::Reconcile,
            "it writes the status again"
        );
        assert_eq!(next(true, false), Next::ReconcileAfter(RETRY_DELAY));
    }
}
