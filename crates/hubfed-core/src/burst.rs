//! Normal Events in a burst. Each successful write to members is one Event on its federated
//! object — until many objects change at once (a cold start, a namespace federated with its
//! contents, a mass update), when one Event per object would be a large share of the hub's
//! writes. A token bucket per federated type decides: while it has tokens, Events go on the
//! objects; once it is empty, the writes are summed up in one Event per reason every
//! [`SUMMARY_EVERY`], on the type's FederatedTypeConfig, naming the first objects.
//!
//! A controller that starts over more than [`BURST`] objects of a type catches up with all of
//! them at once (every member object, in a cold start): that is one batch from the first
//! write ([`EventBudget::started_with`]). Its writes are summed up from the start, the periods
//! between summaries double (5 s, 10 s, 20 s, ... up to [`BATCH_SUMMARY_MAX`]) and the bucket
//! does not refill until every object listed at the start has been reconciled with no write
//! left running ([`EventBudget::caught_up`]) — or no listed object caught up for
//! [`START_STALL`]. The batch's end is the queue's, not a lull in Events: writes to slow
//! members finish after their reconcile and are admitted only at the object's next one.
//! A cold start of 2,000 objects took ~120 Events per type (the burst and the refill), 0.18
//! hub writes per object beside its status and PropagatedVersion; now a few summaries.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, Instant};

/// Events on objects a type may record at once.
pub const BURST: f64 = 50.0;
/// Events on objects a type may record per second, after a burst.
pub const REFILL_PER_SECOND: f64 = 2.0;
/// How long writes are summed up before their summary is recorded.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(5);
/// Objects named in a summary.
const NAMED: usize = 10;
/// The longest period between two summaries of a start's batch.
pub const BATCH_SUMMARY_MAX: Duration = Duration::from_secs(60);
/// A start's batch during which no listed object caught up for this long is over (an object
/// deleted before its first reconcile never catches up).
pub const START_STALL: Duration = Duration::from_secs(60);

/// One type's bucket and the writes held for its next summaries.
#[derive(Debug)]
pub struct EventBudget {
    tokens: f64,
    last: Option<Instant>,
    held: BTreeMap<(String, String), Held>,
    /// When the summary of what is held is due.
    due_at: Option<Instant>,
    start: Option<Start>,
}

impl Default for EventBudget {
    fn default() -> Self {
        Self {
            tokens: BURST,
            last: None,
            held: BTreeMap::new(),
            due_at: None,
            start: None,
        }
    }
}

/// A start's batch under way.
#[derive(Debug)]
struct Start {
    /// The objects listed at the start that have not caught up yet.
    waiting: HashSet<String>,
    /// When one last caught up (at first: the start).
    progress: Instant,
    /// The period before the batch's next summary.
    every: Duration,
}

#[derive(Debug, Default)]
struct Held {
    objects: usize,
    named: Vec<String>,
    clusters: BTreeSet<String>,
}

/// What becomes of one object's Event.
#[derive(Debug, PartialEq, Eq)]
pub enum Admit {
    /// Recorded on the object.
    Record,
    /// Held for a summary; `Some(at)`: the first one held, its summary is due `at` (the caller
    /// arranges to ask [`EventBudget::due`] then).
    Held(Option<Instant>),
}

/// One summary Event.
#[derive(Debug, PartialEq, Eq)]
pub struct Summary {
    pub reason: String,
    pub message: String,
}

impl EventBudget {
    /// Decides about the Event `reason` for a write described as `verb` (`Creating ConfigMap`)
    /// of `object` (`"ns/name"`) in `clusters`, at `now`.
    pub fn admit(
        &mut self,
        now: Instant,
        (reason, verb): (&str, &str),
        object: &str,
        clusters: &[&str],
    ) -> Admit {
        if self
            .start
            .as_ref()
            .is_some_and(|start| now.saturating_duration_since(start.progress) >= START_STALL)
        {
            self.end_start(now);
        }
        if let Some(last) = self.last
            && self.start.is_none()
        {
            let refill = now.saturating_duration_since(last).as_secs_f64() * REFILL_PER_SECOND;
            self.tokens = (self.tokens + refill).min(BURST);
        }
        self.last = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Admit::Record;
        }
        let held = self
            .held
            .entry((reason.to_owned(), verb.to_owned()))
            .or_default();
        held.objects += 1;
        if held.named.len() < NAMED {
            held.named.push(object.to_owned());
        }
        held.clusters
            .extend(clusters.iter().map(|c| (*c).to_owned()));
        if self.due_at.is_some() {
            return Admit::Held(None);
        }
        let due = now
            + self
                .start
                .as_ref()
                .map_or(SUMMARY_EVERY, |start| start.every);
        self.due_at = Some(due);
        Admit::Held(Some(due))
    }

    /// The type's controller starts and has listed `objects` (their keys): more than
    /// [`BURST`] of them, and what it writes catching up is one batch.
    pub fn started_with(&mut self, objects: impl IntoIterator<Item = String>, now: Instant) {
        let waiting: HashSet<String> = objects.into_iter().collect();
        if waiting.len() as f64 > BURST {
            self.tokens = 0.0;
            self.start = Some(Start {
                waiting,
                progress: now,
                every: SUMMARY_EVERY,
            });
        }
    }

    /// Whether a start's batch is under way (whose objects' reconciles should say when they
    /// catch up).
    pub fn in_start(&self) -> bool {
        self.start.is_some()
    }

    /// `object` was reconciled and left no write running: it has caught up. The last of the
    /// objects listed at the start ends the batch; `Some(at)`: the summary of what is held is
    /// now due earlier, `at` (a batch's period may have grown to a minute), and the caller
    /// arranges to ask [`EventBudget::due`] then.
    pub fn caught_up(&mut self, object: &str, now: Instant) -> Option<Instant> {
        let start = self.start.as_mut()?;
        if start.waiting.remove(object) {
            start.progress = now;
        }
        if !start.waiting.is_empty() {
            return None;
        }
        self.end_start(now);
        let sooner = now + SUMMARY_EVERY;
        let due = self.due_at.as_mut().filter(|due| **due > sooner)?;
        *due = sooner;
        Some(sooner)
    }

    /// The batch is over; the bucket, empty, refills from `now`.
    fn end_start(&mut self, now: Instant) {
        self.start = None;
        self.last = Some(now);
    }

    /// The summaries of everything held, when they are due at `now`, and when the next are
    /// due if more are held meanwhile (never: the next held write reports its own).
    pub fn due(&mut self, now: Instant) -> Vec<Summary> {
        match self.due_at {
            Some(due) if now >= due => {}
            _ => return Vec::new(),
        }
        self.due_at = None;
        if let Some(start) = &mut self.start {
            start.every = (start.every * 2).min(BATCH_SUMMARY_MAX);
        }
        std::mem::take(&mut self.held)
            .into_iter()
            .map(|((reason, verb), held)| Summary {
                reason,
                message: summary_message(&verb, &held),
            })
            .collect()
    }
}

fn summary_message(verb: &str, held: &Held) -> String {
    let clusters: Vec<String> = held.clusters.iter().map(|c| format!("{c:?}")).collect();
    let noun = if clusters.len() == 1 {
        "cluster"
    } else {
        "clusters"
    };
    let more = held.objects - held.named.len();
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "{verb} in {noun} {} (one Event for {} objects changed at once): {}{tail}",
        clusters.join(", "),
        held.objects,
        held.named.join(", "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const CREATE: (&str, &str) = ("CreateInCluster", "Creating ConfigMap");

    #[test]
    fn events_go_on_objects_until_a_burst_then_one_summary_per_period() {
        let mut budget = EventBudget::default();
        let t0 = Instant::now();
        for i in 0..50 {
            let what = format!("\"ns/o{i}\"");
            assert_eq!(budget.admit(t0, CREATE, &what, &["a"]), Admit::Record);
        }
        let due = t0 + SUMMARY_EVERY;
        assert_eq!(
            budget.admit(t0, CREATE, "\"ns/o50\"", &["a", "b"]),
            Admit::Held(Some(due))
        );
        for i in 51..80 {
            let what = format!("\"ns/o{i}\"");
            assert_eq!(budget.admit(t0, CREATE, &what, &["b"]), Admit::Held(None));
        }
        assert!(
            budget.due(t0 + Duration::from_secs(1)).is_empty(),
            "not yet"
        );
        let summaries = budget.due(due);
        assert_eq!(summaries.len(), 1);
        assert_eq!(summaries[0].reason, "CreateInCluster");
        assert_eq!(
            summaries[0].message,
            "Creating ConfigMap in clusters \"a\", \"b\" (one Event for 30 objects changed at \
             once): \"ns/o50\", \"ns/o51\", \"ns/o52\", \"ns/o53\", \"ns/o54\", \"ns/o55\", \
             \"ns/o56\", \"ns/o57\", \"ns/o58\", \"ns/o59\" and 20 more"
        );
        assert!(
            budget.due(due + SUMMARY_EVERY).is_empty(),
            "nothing held since"
        );
    }

    #[test]
    fn the_bucket_refills_at_light_load() {
        let mut budget = EventBudget::default();
        let t0 = Instant::now();
        for _ in 0..50 {
            budget.admit(t0, CREATE, "x", &["a"]);
        }
        assert!(matches!(
            budget.admit(t0, CREATE, "x", &["a"]),
            Admit::Held(_)
        ));
        // Half a second later: one token back.
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(budget.admit(t1, CREATE, "y", &["a"]), Admit::Record);
        // A quiet minute refills it all, never beyond the burst.
        let t2 = t1 + Duration::from_secs(60);
        for _ in 0..50 {
            assert_eq!(budget.admit(t2, CREATE, "z", &["a"]), Admit::Record);
        }
        assert!(matches!(
            budget.admit(t2, CREATE, "z", &["a"]),
            Admit::Held(_)
        ));
    }

    fn keys(n: usize) -> impl Iterator<Item = String> {
        (0..n).map(|i| format!("o{i}"))
    }

    /// A start over more than a burst of objects: summed up from the first write, periods
    /// doubling, no refill however long the catch-up takes; the last listed object to catch
    /// up ends it and the bucket refills from then.
    #[test]
    fn a_start_over_many_objects_is_one_batch() {
        let t0 = Instant::now();
        let mut budget = EventBudget::default();
        budget.started_with(keys(2_000), t0);
        assert!(budget.in_start());
        assert_eq!(
            budget.admit(t0, CREATE, "o0", &["a"]),
            Admit::Held(Some(t0 + SUMMARY_EVERY))
        );
        // 2,000 objects over 100 s, 20 a second, each caught up as it is written.
        let (mut recorded, mut summaries_at) = (0, Vec::new());
        budget.caught_up("o0", t0);
        for i in 1..2_000u64 {
            let at = t0 + Duration::from_millis(50 * i);
            if !budget.due(at).is_empty() {
                summaries_at.push((at - t0).as_secs());
            }
            let object = format!("o{i}");
            if budget.admit(at, CREATE, &object, &["a"]) == Admit::Record {
                recorded += 1;
            }
            let sooner = budget.caught_up(&object, at);
            assert_eq!(sooner.is_some(), i == 1_999, "{i}");
        }
        assert_eq!(recorded, 0, "no refill while the batch goes on");
        assert_eq!(summaries_at, [5, 15, 35, 75], "periods of 5, 10, 20, 40 s");
        assert!(!budget.in_start(), "the last object ended the batch");
        // The rest is summed up 5 s after the batch's end (not the 60 s period's end); the
        // bucket refills from the batch's end.
        let end = t0 + Duration::from_millis(50 * 1_999);
        assert!(budget.due(end + SUMMARY_EVERY / 2).is_empty());
        assert_eq!(budget.due(end + SUMMARY_EVERY).len(), 1);
        let later = end + Duration::from_secs(1);
        assert_eq!(budget.admit(later, CREATE, "x", &["a"]), Admit::Record);
        assert_eq!(budget.admit(later, CREATE, "y", &["a"]), Admit::Record);
        assert!(matches!(
            budget.admit(later, CREATE, "z", &["a"]),
            Admit::Held(_)
        ));
    }

    /// Writes finishing after their reconcile: a quiet stretch does not end the batch while
    /// objects are still to catch up; an object's other writes or unknown keys do not either.
    #[test]
    fn a_start_batch_outlasts_a_lull_until_every_object_caught_up() {
        let t0 = Instant::now();
        let mut budget = EventBudget::default();
        budget.started_with(keys(60), t0);
        for i in 0..59 {
            budget.caught_up(&format!("o{i}"), t0);
        }
        budget.caught_up("o0", t0);
        budget.caught_up("elsewhere", t0);
        assert!(budget.in_start());
        // 30 s without any write: still the batch, nothing refilled.
        let t1 = t0 + Duration::from_secs(30);
        assert!(matches!(
            budget.admit(t1, CREATE, "o59", &["a"]),
            Admit::Held(_)
        ));
        assert_eq!(
            budget.caught_up("o59", t1),
            None,
            "its summary is due in 5 s anyway"
        );
        assert!(!budget.in_start());
        let t2 = t1 + Duration::from_millis(500);
        assert_eq!(budget.admit(t2, CREATE, "o1", &["a"]), Admit::Record);
    }

    /// An object listed at the start that never catches up (deleted before its reconcile)
    /// holds the batch only until no object caught up for [`START_STALL`].
    #[test]
    fn a_stalled_start_batch_ends() {
        let t0 = Instant::now();
        let mut budget = EventBudget::default();
        budget.started_with(keys(100), t0);
        for i in 0..99 {
            budget.caught_up(&format!("o{i}"), t0 + Duration::from_secs(1));
        }
        let stalled = t0 + Duration::from_secs(1) + START_STALL;
        assert!(matches!(
            budget.admit(stalled - Duration::from_millis(1), CREATE, "x", &["a"]),
            Admit::Held(_)
        ));
        assert!(budget.in_start());
        // The stall ends the batch; the refill starts from then.
        assert!(matches!(
            budget.admit(stalled, CREATE, "x", &["a"]),
            Admit::Held(_)
        ));
        assert!(!budget.in_start());
        let later = stalled + Duration::from_secs(1);
        assert_eq!(budget.admit(later, CREATE, "y", &["a"]), Admit::Record);
    }

    /// A start over at most a burst of objects changes nothing.
    #[test]
    fn a_start_over_few_objects_keeps_the_burst() {
        let t0 = Instant::now();
        let mut budget = EventBudget::default();
        budget.started_with(keys(50), t0);
        assert!(!budget.in_start());
        for _ in 0..50 {
            assert_eq!(budget.admit(t0, CREATE, "x", &["a"]), Admit::Record);
        }
        assert!(matches!(
            budget.admit(t0, CREATE, "x", &["a"]),
            Admit::Held(_)
        ));
    }

    #[test]
    fn each_reason_has_its_summary() {
        let mut budget = EventBudget {
            tokens: 0.0,
            ..EventBudget::default()
        };
        let t0 = Instant::now();
        budget.admit(t0, CREATE, "a", &["m1"]);
        budget.admit(t0, ("UpdateInCluster", "Updating ConfigMap"), "b", &["m1"]);
        let summaries = budget.due(t0 + SUMMARY_EVERY);
        let reasons: Vec<&str> = summaries.iter().map(|s| s.reason.as_str()).collect();
        assert_eq!(reasons, ["CreateInCluster", "UpdateInCluster"]);
        assert!(
            summaries[0].message.ends_with("at once): a"),
            "{}",
            summaries[0].message
        );
    }
}
