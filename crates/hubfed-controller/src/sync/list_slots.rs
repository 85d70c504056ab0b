//! Slots for member lists. A sync controller's watch of a member lists the member's objects of
//! its type when it starts, and again when the watch's history is lost (410 Gone, an error).
//! Those lists come all at once when the controller starts, or when every member's watches
//! broke together (the controller's own network, a hub failover): members × types lists, each
//! holding a page of objects in the controller and costing its member a read of every object
//! of the type (from etcd, when the API server keeps no watch cache). At most
//! `--member-list-concurrency` of them run at a time, shared by every type and member, in the
//! order they asked; the others wait their turn before their first request.
//!
//! A list that gets no page for `ControllerConfig::member_list_stall` (30 s) — a member that stopped answering, a
//! request hanging on a half-open connection — gives its slot back and goes on without one, so
//! it never holds up the other members' lists for longer than that.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::metrics::{GaugeHeld, METRICS};

/// The slots of member lists; see the [module documentation](self).
pub struct ListSlots {
    /// `None`: no limit (`--member-list-concurrency 0`).
    slots: Option<Arc<Semaphore>>,
    stall: Duration,
    /// Objects per page (`--member-list-page-size`).
    page_size: u32,
}

/// A slot held by a list, given back when dropped (and counted as used until then).
struct Slot {
    _permit: Option<OwnedSemaphorePermit>,
    _used: GaugeHeld,
}

fn slots_gauge(state: &str) -> prometheus::IntGauge {
    METRICS.member_list_slots.with_label_values(&[state])
}

impl ListSlots {
    /// `concurrency` lists at a time (0: no limit), of `page_size` objects a page; a list
    /// holding a slot without a page for `stall` gives it back.
    pub fn new(concurrency: usize, stall: Duration, page_size: u32) -> Self {
        slots_gauge("limit").set(i64::try_from(concurrency).unwrap_or(i64::MAX));
        Self {
            slots: (concurrency > 0).then(|| Arc::new(Semaphore::new(concurrency))),
            stall,
            page_size,
        }
    }

    /// A member watch's configuration: its lists' page size.
    pub(crate) fn watcher_config(&self) -> watcher::Config {
        watcher::Config::default().page_size(self.page_size)
    }

    /// A slot, waited for as long as it takes (in the order asked).
    async fn take(&self) -> Slot {
        let permit = match &self.slots {
            Some(slots) => {
                let _waiting =
                    GaugeHeld::new(METRICS.member_lists_waiting.with_label_values::<&str>(&[]));
                // The semaphore is never closed.
                Arc::clone(slots).acquire_owned().await.ok()
            }
            None => None,
        };
        Slot {
            _permit: permit,
            _used: GaugeHeld::new(slots_gauge("used")),
        }
    }
}

/// One watch's use of the slots. [`ListTurn::next`] does it for a watcher stream; the steps
/// are: enter before each list ([`ListTurn::enter`], at the watcher's `Init`, which comes
/// before the list's first request), report each object listed ([`ListTurn::progress`]),
/// leave when the list ends or fails ([`ListTurn::leave`]), and give the slot back when
/// [`ListTurn::stalled`] resolves ([`ListTurn::give_back`]).
pub(crate) struct ListTurn<'a> {
    slots: &'a ListSlots,
    slot: Option<Slot>,
    /// Counted in `hubfed_member_lists_stalled` from its stall to its end.
    stalled_gauge: Option<GaugeHeld>,
    /// The current list's stall clock: when it took its slot or last got an object.
    last_page: Instant,
    /// The cache's progress, kept by the managed objects' watch.
    noted: Option<&'a ListProgress>,
    /// The watch's member, type and type label, for the stall's warning and counter.
    watch: [&'a str; 3],
}

impl<'a> ListTurn<'a> {
    /// The turn of `kind`'s watch (`type_label`: the metrics' `type`) of `cluster`.
    pub(crate) fn new(
        slots: &'a ListSlots,
        cluster: &'a str,
        kind: &'a str,
        type_label: &'a str,
    ) -> Self {
        Self {
            slots,
            slot: None,
            stalled_gauge: None,
            last_page: Instant::now(),
            noted: None,
            watch: [cluster, kind, type_label],
        }
    }

    /// Its lists' beginnings and objects also noted in `progress` (a cache's, read by
    /// [`hubfed_core::conclude::cache_warming`]): a list begins when it took its slot, so the
    /// time it waited for its turn is not counted against it.
    pub(crate) fn noting(mut self, progress: &'a ListProgress) -> Self {
        self.noted = Some(progress);
        self
    }

    /// The watch's next event, its slot taken at `Init` (before the list's first request),
    /// its progress noted at each object listed, the slot given back at `InitDone`, at an
    /// error, or when the list stalls; `None` once `stop` is cancelled or the stream ended.
    pub(crate) async fn next<K, S>(
        &mut self,
        stream: &mut S,
        stop: &CancellationToken,
    ) -> Option<watcher::Result<watcher::Event<K>>>
    where
        S: Stream<Item = watcher::Result<watcher::Event<K>>> + Unpin,
    {
        loop {
            let event = tokio::select! {
                () = stop.cancelled() => return None,
                () = self.stalled() => {
                    self.give_back();
                    continue;
                }
                event = stream.next() => event?,
            };
            match &event {
                Ok(watcher::Event::Init) => tokio::select! {
                    () = stop.cancelled() => return None,
                    () = self.enter() => {}
                },
                Ok(watcher::Event::InitApply(_)) => self.progress(),
                Ok(watcher::Event::InitDone) | Err(_) => self.leave(),
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {}
            }
            return Some(event);
        }
    }

    /// Waits for a slot (a list about to start).
    pub(crate) async fn enter(&mut self) {
        self.leave();
        self.slot = Some(self.slots.take().await);
        self.last_page = Instant::now();
        if let Some(progress) = self.noted {
            progress.began();
        }
    }

    /// The list got something.
    pub(crate) fn progress(&mut self) {
        self.last_page = Instant::now();
        if let Some(progress) = self.noted {
            progress.note();
        }
    }

    /// The list ended, or failed.
    pub(crate) fn leave(&mut self) {
        self.slot = None;
        self.stalled_gauge = None;
    }

    /// Resolves when the list holding a slot has got nothing for the stall time; never while
    /// no slot is held.
    pub(crate) async fn stalled(&self) {
        if self.slot.is_some() {
            tokio::time::sleep_until(self.last_page + self.slots.stall).await;
        } else {
            std::future::pending::<()>().await;
        }
    }

    /// After [`Self::stalled`]: the slot goes back, the list goes on without one.
    pub(crate) fn give_back(&mut self) {
        let [cluster, kind, type_label] = self.watch;
        warn!(
            cluster,
            kind,
            stall = ?self.slots.stall,
            "member list got nothing for the stall time; it goes on without its list slot"
        );
        METRICS
            .member_list_stalls_total
            .with_label_values(&[type_label, cluster])
            .inc();
        self.slot = None;
        self.stalled_gauge = Some(GaugeHeld::new(
            METRICS
                .member_lists_stalled
                .with_label_values(&[type_label, cluster]),
        ));
    }
}

/// When a cache's watch started, and when its first list began (took its list slot) or a list
/// last got an object ([`ListTurn::noting`] keeps it): a first list still getting pages is not
/// failing, however long it takes; one whose attempts fail gets nothing, however often it
/// starts again.
pub(crate) struct ListProgress {
    pub(crate) started: Instant,
    /// Milliseconds after `started`; [`Self::WAITING`] until a list began.
    last: AtomicU64,
}

impl ListProgress {
    const WAITING: u64 = u64::MAX;

    pub(crate) fn new() -> Self {
        Self {
            started: Instant::now(),
            last: AtomicU64::new(Self::WAITING),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(Self::WAITING - 1)
    }

    /// A list began; only the first one counts.
    fn began(&self) {
        let _ = self.last.compare_exchange(
            Self::WAITING,
            self.now(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    fn note(&self) {
        self.last.store(self.now(), Ordering::Relaxed);
    }

    /// How long since the list began or last got an object; `None` while none began.
    pub(crate) fn quiet_for(&self) -> Option<Duration> {
        match self.last.load(Ordering::Relaxed) {
            Self::WAITING => None,
            ms => Some(
                self.started
                    .elapsed()
                    .saturating_sub(Duration::from_millis(ms)),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn lists_wait_for_a_slot_in_turn() {
        let slots = ListSlots::new(1, Duration::from_secs(30), 500);
        let mut first = ListTurn::new(&slots, "member1", "ConfigMap", "federatedconfigmap");
        first.enter().await;
        let mut second = ListTurn::new(&slots, "member1", "ConfigMap", "federatedconfigmap");
        let waited = tokio::time::timeout(Duration::from_secs(1), second.enter()).await;
        assert!(waited.is_err(), "a second list got the only slot");
        first.leave();
        tokio::time::timeout(Duration::from_secs(1), second.enter())
            .await
            .expect("the slot given back goes to the list waiting");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_list_is_found_after_the_stall_time_since_its_last_page() {
        let slots = ListSlots::new(1, Duration::from_secs(10), 500);
        let mut turn = ListTurn::new(&slots, "stalling", "ConfigMap", "federatedconfigmap");
        let stalled = METRICS
            .member_lists_stalled
            .with_label_values(&["federatedconfigmap", "stalling"]);
        assert!(
            tokio::time::timeout(Duration::from_secs(60), turn.stalled())
                .await
                .is_err(),
            "a watch not listing was found stalled"
        );
        turn.enter().await;
        tokio::time::sleep(Duration::from_secs(8)).await;
        turn.progress();
        let start = Instant::now();
        turn.stalled().await;
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        assert_eq!(
            stalled.get(),
            0,
            "counted stalled before it gave its slot back"
        );
        turn.give_back();
        assert_eq!(
            stalled.get(),
            1,
            "a list gone on without its slot is counted stalled"
        );
        let mut other = ListTurn::new(&slots, "member1", "ConfigMap", "federatedconfigmap");
        tokio::time::timeout(Duration::from_secs(1), other.enter())
            .await
            .expect("a stalled list's slot goes to the next list");
        turn.progress();
        assert_eq!(
            stalled.get(),
            1,
            "a stalled list's page ended its stall count"
        );
        turn.leave();
        assert_eq!(
            stalled.get(),
            0,
            "a stalled list that ended is still counted"
        );
    }

    #[test]
    fn a_list_progresses_from_its_first_start_and_with_each_object() {
        let progress = ListProgress::new();
        assert_eq!(progress.quiet_for(), None, "waiting for its slot");
        progress.began();
        std::thread::sleep(Duration::from_millis(30));
        // A list starting again (after its attempt failed) is no progress.
        progress.began();
        let quiet = progress.quiet_for().expect("a list began");
        assert!(quiet >= Duration::from_millis(30), "quiet for {quiet:?}");
        progress.note();
        let quiet = progress.quiet_for().expect("a list began");
        assert!(quiet < Duration::from_millis(30), "quiet for {quiet:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cache_list_begins_when_it_takes_its_slot() {
        let slots = ListSlots::new(1, Duration::from_secs(30), 500);
        let mut first = ListTurn::new(&slots, "member2", "Secret", "federatedsecret");
        first.enter().await;
        let progress = ListProgress::new();
        let mut waiting =
            ListTurn::new(&slots, "member1", "ConfigMap", "federatedconfigmap").noting(&progress);
        let waited = tokio::time::timeout(Duration::from_secs(45), waiting.enter()).await;
        assert!(waited.is_err(), "a second list got the only slot");
        assert_eq!(
            progress.quiet_for(),
            None,
            "the time a list waited for its turn counted against it"
        );
        first.leave();
        waiting.enter().await;
        assert_eq!(progress.quiet_for(), Some(Duration::ZERO), "its list began");
        tokio::time::sleep(Duration::from_secs(20)).await;
        waiting.progress();
        assert_eq!(
            progress.quiet_for(),
            Some(Duration::ZERO),
            "an object listed is progress"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_limit_never_waits() {
        let slots = ListSlots::new(0, Duration::from_secs(10), 500);
        let mut turns: Vec<_> = (0..100)
            .map(|_| ListTurn::new(&slots, "member1", "ConfigMap", "federatedconfigmap"))
            .collect();
        for turn in &mut turns {
            tokio::time::timeout(Duration::from_millis(1), turn.enter())
                .await
                .expect("waited with no limit");
        }
    }
}
