//! When a burst of work has ended. The controller's memory allocator keeps the pages a burst
//! freed (a cold start, a mass update) until it is asked to give them back; asking costs a
//! walk over the heap, so it is done once per burst, when the work has stopped — not while
//! it goes on, and not again while nothing happens.
//!
//! The caller counts units of work (reconciles) and looks at the count every
//! [`CHECK_EVERY`]; [`BurstEnd::check`] says when the count moved before and has stopped now,
//! after at least [`MIN_WORK`] units since the last time.

use std::time::Duration;

/// How often the count of work is looked at: a burst has ended when it did not move for this
/// long.
pub const CHECK_EVERY: Duration = Duration::from_secs(5);

/// Units of work since the last trim below which a stop is not worth a walk over the heap:
/// a trickle of reconciles (one every few seconds) frees next to nothing.
pub const MIN_WORK: u64 = 100;

/// What the last look saw.
#[derive(Debug, Default)]
pub struct BurstEnd {
    last_count: u64,
    /// The count at the last burst's end.
    ended_at: u64,
}

impl BurstEnd {
    /// Looks at the count of work done so far (monotonic); true once per burst, at the first
    /// look that finds the count unchanged after it had moved by at least [`MIN_WORK`] since
    /// the last burst ended.
    pub fn check(&mut self, count: u64) -> bool {
        let moved = count != self.last_count;
        self.last_count = count;
        if moved || count.saturating_sub(self.ended_at) < MIN_WORK {
            return false;
        }
        self.ended_at = count;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_ends_once_when_the_count_stops_moving() {
        let mut end = BurstEnd::default();
        // Nothing done yet: nothing to give back.
        assert!(!end.check(0));
        assert!(!end.check(0));
        // Work going on: not while it goes on.
        assert!(!end.check(10));
        assert!(!end.check(250));
        // It stopped: once.
        assert!(end.check(250));
        assert!(!end.check(250));
        assert!(!end.check(250));
        // The next burst ends once too.
        assert!(!end.check(400));
        assert!(end.check(400));
        assert!(!end.check(400));
    }

    #[test]
    fn a_trickle_of_work_is_not_a_burst() {
        let mut end = BurstEnd::default();
        // One reconcile now and then: stops every time, but too little work to trim for …
        let mut count = 0;
        for _ in 0..(MIN_WORK - 1) {
            count += 1;
            assert!(!end.check(count));
            assert!(!end.check(count));
        }
        // … until enough has been done since the last trim.
        count += 1;
        assert!(!end.check(count));
        assert!(end.check(count));
        assert!(!end.check(count + 1));
        assert!(!end.check(count + 1));
    }

    #[test]
    fn steady_work_never_ends_a_burst() {
        let mut end = BurstEnd::default();
        for count in (1..100).map(|n| n * 3) {
            assert!(!end.check(count));
        }
    }
}
