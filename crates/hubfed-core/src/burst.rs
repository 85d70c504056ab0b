//! Normal Events in a burst. Each successful write to members is one Event on its federated
//! object — until many objects change at once (a cold start, a namespace federated with its
//! contents, a mass update), when one Event per object would be a large share of the hub's
//! writes. A token bucket per federated type decides: while it has tokens, Events go on the
//! objects; once it is empty, the writes are summed up in one Event per reason every
//! [`SUMMARY_EVERY`], on the type's FederatedTypeConfig, naming the first objects.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Events on objects a type may record at once.
pub const BURST: f64 = 50.0;
/// Events on objects a type may record per second, after a burst.
pub const REFILL_PER_SECOND: f64 = 2.0;
/// How long writes are summed up before their summary is recorded.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(5);
/// Objects named in a summary.
const NAMED: usize = 10;

/// One type's bucket and the writes held for its next summaries.
#[derive(Debug)]
pub struct EventBudget {
    tokens: f64,
    last: Option<Instant>,
    held: BTreeMap<(String, String), Held>,
    since: Option<Instant>,
}

impl Default for EventBudget {
    fn default() -> Self {
        Self {
            tokens: BURST,
            last: None,
            held: BTreeMap::new(),
            since: None,
        }
    }
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
        if let Some(last) = self.last {
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
        if self.since.is_some() {
            return Admit::Held(None);
        }
        self.since = Some(now);
        Admit::Held(Some(now + SUMMARY_EVERY))
    }

    /// The summaries of everything held, when they are due at `now`, and when the next are
    /// due if more are held meanwhile (never: the next held write reports its own).
    pub fn due(&mut self, now: Instant) -> Vec<Summary> {
        match self.since {
            Some(since) if now.saturating_duration_since(since) >= SUMMARY_EVERY => {}
            _ => return Vec::new(),
        }
        self.since = None;
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
