//! When a leader must stop leading although its lease manager still says it leads.
//!
//! The lease manager renews the Lease `grace` before it expires and reports a loss only when
//! a renewal is refused. A renewal that is never answered (the hub cut off from this replica
//! alone) leaves it waiting, and the replica leading, while the Lease expires on the hub and
//! a standby takes it: two leaders. [`LeaseClock`] is the replica's own account, fed by
//! reads of the Lease: it knows a lower bound of the last renewal it saw and says when
//! the Lease may have expired — `margin` early, so the controllers have time to stop.

use std::time::{Duration, Instant};

/// A leader's conservative view of its Lease.
#[derive(Debug, Clone)]
pub struct LeaseClock {
    duration: Duration,
    margin: Duration,
    /// The Lease is held at least until then.
    valid_until: Instant,
    /// renewTime of the last read that showed this replica as holder, and when that read
    /// (the latest showing it) was sent.
    last_renewal: Option<(String, Instant)>,
    /// The Lease was seen held by someone else.
    lost: bool,
}

/// What a read of the Lease showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseRead {
    /// Held by this replica, renewed at this `renewTime` (as the hub wrote it).
    Ours { renew_time: String },
    /// Held by another replica, or by nobody.
    NotOurs,
    /// The read failed or was not answered.
    Unknown,
}

impl LeaseClock {
    /// Right after this replica took the Lease (at `acquired`), for a Lease of `duration`
    /// renewed `grace` before it expires. Steps down `grace / 2` before the Lease may expire.
    pub fn new(acquired: Instant, duration: Duration, grace: Duration) -> Self {
        Self {
            duration,
            margin: grace / 2,
            valid_until: acquired + duration,
            last_renewal: None,
            lost: false,
        }
    }

    /// How often to read the Lease: often enough that a renewal is seen well before the
    /// margin runs out (a fifth of `grace`, at least 200 ms).
    pub fn read_interval(grace: Duration) -> Duration {
        (grace / 5).max(Duration::from_millis(200))
    }

    /// Takes in a read of the Lease sent at `sent`.
    pub fn observe(&mut self, sent: Instant, read: LeaseRead) {
        match read {
            LeaseRead::Ours { renew_time } => match &self.last_renewal {
                Some((seen, _)) if *seen == renew_time => {
                    self.last_renewal = Some((renew_time, sent));
                }
                Some((_, last_seen_at)) => {
                    // A new renewal, made after the last read that still showed the old one
                    // was sent.
                    self.valid_until = *last_seen_at + self.duration;
                    self.last_renewal = Some((renew_time, sent));
                }
                None => self.last_renewal = Some((renew_time, sent)),
            },
            LeaseRead::NotOurs => self.lost = true,
            LeaseRead::Unknown => {}
        }
    }

    /// Whether the leader must stop now: the Lease is someone else's, or it may expire within
    /// the margin.
    pub fn must_step_down(&self, now: Instant) -> bool {
        self.lost || now >= self.step_down_at()
    }

    /// When the leader must stop unless a read shows a new renewal first.
    pub fn step_down_at(&self) -> Instant {
        self.valid_until - self.margin
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn ours(renew_time: &str) -> LeaseRead {
        LeaseRead::Ours {
            renew_time: renew_time.to_owned(),
        }
    }

    /// Lease of 15 s renewed 5 s before expiry (KubeFed's defaults): renewals every 10 s.
    fn clock(start: Instant) -> LeaseClock {
        LeaseClock::new(start, 15 * SECOND, 5 * SECOND)
    }

    #[test]
    fn a_leader_renewing_on_time_keeps_leading() {
        let start = Instant::now();
        let mut clock = clock(start);
        let every = LeaseClock::read_interval(5 * SECOND);
        assert_eq!(every, SECOND);
        // Renewals at 10 s, 20 s, ... seen by the next read; reads every second for 60 s.
        for tick in 0..60u32 {
            let sent = start + every * tick;
            let renewal = tick / 10; // the renewal at 10*k s is visible from that second on
            clock.observe(sent, ours(&format!("r{renewal}")));
            assert!(
                !clock.must_step_down(sent + every),
                "stepped down at {tick} s with renewals on time"
            );
        }
    }

    #[test]
    fn a_leader_cut_off_steps_down_before_its_lease_can_expire() {
        let start = Instant::now();
        let mut clock = clock(start);
        for tick in 0..=12u32 {
            clock.observe(
                start + SECOND * tick,
                ours(if tick < 10 { "r0" } else { "r1" }),
            );
        }
        // The renewal at 10 s was seen; the one due at 20 s never comes: nothing answers.
        let mut stepped_down = None;
        for tick in 13..40u32 {
            let now = start + SECOND * tick;
            clock.observe(now, LeaseRead::Unknown);
            if clock.must_step_down(now) {
                stepped_down = Some(tick);
                break;
            }
        }
        // The renewal happened after the read at 9 s: held at least until 24 s; a standby
        // may take over from then on. The leader stops 2.5 s before.
        assert_eq!(stepped_down, Some(22));
    }

    #[test]
    fn without_any_read_the_lease_is_trusted_only_for_its_first_term() {
        let start = Instant::now();
        let clock = clock(start);
        assert!(!clock.must_step_down(start + 12 * SECOND));
        assert!(clock.must_step_down(start + 13 * SECOND));
    }

    #[test]
    fn a_lease_seen_held_by_another_replica_means_stop_at_once() {
        let start = Instant::now();
        let mut clock = clock(start);
        clock.observe(start, ours("r0"));
        clock.observe(start + SECOND, LeaseRead::NotOurs);
        assert!(clock.must_step_down(start + SECOND));
    }
}
