//! Gives the memory a burst of work freed back to the system. glibc's allocator keeps freed
//! pages in its arenas (one per thread that allocated, up to 8 per core): after a cold start
//! or a mass update the controller's RSS stays at the burst's peak although its caches are
//! far smaller. Once per burst, when the reconciles have stopped
//! ([`hubfed_core::quiet::BurstEnd`]), `malloc_trim(0)` returns the free pages of every arena;
//! on other C libraries this does nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use hubfed_core::quiet::{BurstEnd, CHECK_EVERY};
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// Reconciles done so far, by every controller of the process.
static WORK: AtomicU64 = AtomicU64::new(0);

/// Counts one unit of work (a reconcile).
pub fn note_work() {
    WORK.fetch_add(1, Ordering::Relaxed);
}

/// Until `shutdown`: looks at the count of work every [`CHECK_EVERY`] and trims the heap once
/// when a burst has ended.
pub async fn after_bursts(shutdown: CancellationToken) {
    let mut end = BurstEnd::default();
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if !end.check(WORK.load(Ordering::Relaxed)) {
            continue;
        }
        // The walk holds each arena's lock in turn: off the runtime's worker threads.
        let began = Instant::now();
        let released = tokio::task::spawn_blocking(trim).await.unwrap_or(false);
        debug!(
            released,
            took_ms = began.elapsed().as_millis() as u64,
            "a burst of work ended: free heap pages given back"
        );
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)] // a C library call without arguments to check; no safe wrapper exists
fn trim() -> bool {
    // SAFETY: malloc_trim takes the allocator's own locks; it may be called from any thread
    // at any time.
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() -> bool {
    false
}
