//! The MCS controller's work queue: keys by `namespace/name`, debounced, a bounded number at
//! a time, never one key twice at once.

use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::index::Key;

/// How long a key waits after its first change before it is reconciled: a burst of changes
/// (a slice and its Service, a relist) is one reconcile.
const DEBOUNCE: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
struct QueueState {
    pending: BTreeSet<Key>,
    running: BTreeSet<Key>,
    /// Keys changed while they were being reconciled: queued again when that ends.
    again: BTreeSet<Key>,
}

/// Keys waiting for a reconcile.
#[derive(Debug, Default)]
pub(super) struct WorkQueue {
    state: Mutex<QueueState>,
    notify: Notify,
}

impl WorkQueue {
    /// Queues `key`.
    pub(super) fn add(&self, key: Key) {
        {
            let mut state = self.state.lock();
            if state.running.contains(&key) {
                state.again.insert(key);
                return;
            }
            state.pending.insert(key);
        }
        self.notify.notify_one();
    }

    /// Queues every key of `keys`.
    pub(super) fn add_all(&self, keys: impl IntoIterator<Item = Key>) {
        for key in keys {
            self.add(key);
        }
    }

    /// Queues `key` after `delay`, unless `shutdown` comes first.
    pub(super) fn add_after(
        self: &Arc<Self>,
        key: Key,
        delay: Duration,
        shutdown: &CancellationToken,
    ) {
        let queue = Arc::clone(self);
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = tokio::time::sleep(delay) => queue.add(key),
            }
        });
    }

    /// Takes up to `room` pending keys and marks them running.
    fn take(&self, room: usize) -> Vec<Key> {
        let mut state = self.state.lock();
        let mut taken = Vec::new();
        while taken.len() < room {
            let Some(key) = state.pending.pop_first() else {
                break;
            };
            state.running.insert(key.clone());
            taken.push(key);
        }
        taken
    }

    /// Marks `key` done; queues it again if it changed meanwhile.
    fn done(&self, key: &Key) {
        let again = {
            let mut state = self.state.lock();
            state.running.remove(key);
            let again = state.again.remove(key);
            if again {
                state.pending.insert(key.clone());
            }
            again
        };
        if again {
            self.notify.notify_one();
        }
    }

    /// Runs `reconcile` for every queued key, `concurrency` at a time, until `shutdown`.
    pub(super) async fn run<F, Fut>(
        self: Arc<Self>,
        concurrency: usize,
        reconcile: F,
        shutdown: CancellationToken,
    ) where
        F: Fn(Key) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut running: JoinSet<()> = JoinSet::new();
        loop {
            let room = concurrency.saturating_sub(running.len());
            let keys = if room > 0 {
                self.take(room)
            } else {
                Vec::new()
            };
            let idle = keys.is_empty();
            for key in keys {
                let work = reconcile(key.clone());
                let done = Done {
                    queue: Arc::clone(&self),
                    key,
                };
                running.spawn(async move {
                    work.await;
                    drop(done);
                });
            }
            if !idle {
                continue;
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                Some(_) = running.join_next(), if !running.is_empty() => {}
                () = self.notify.notified(), if room > 0 => {
                    tokio::time::sleep(DEBOUNCE).await;
                }
            }
        }
    }
}

/// Marks its key done when dropped: when its reconcile ended, panicked or was aborted.
struct Done {
    queue: Arc<WorkQueue>,
    key: Key,
}

impl Drop for Done {
    fn drop(&mut self) {
        self.queue.done(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        ("ns".to_owned(), name.to_owned())
    }

    #[test]
    fn a_key_changed_while_running_runs_again_after() {
        let queue = WorkQueue::default();
        queue.add(key("a"));
        queue.add(key("a"));
        assert_eq!(queue.take(8), [key("a")], "queued once");
        queue.add(key("a"));
        assert!(queue.take(8).is_empty(), "never twice at once");
        queue.done(&key("a"));
        assert_eq!(queue.take(8), [key("a")], "again, once it ended");
        queue.done(&key("a"));
        assert!(queue.take(8).is_empty());
    }
}
