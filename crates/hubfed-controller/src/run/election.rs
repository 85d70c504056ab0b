//! Leader election: a replica stands for the leader Lease, runs the controllers while it holds
//! it (and can confirm so on the hub), and stands by otherwise.

use std::sync::Arc;
use std::time::Duration;

use hubfed_api::kubefedconfig::KubeFedConfigSpec;
use hubfed_core::lease::{LeaseClock, LeaseRead};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use kube_lease_manager::{LeaseManager, LeaseManagerError};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::plane::{control_plane, drained};
use crate::admin::Health;
use crate::metrics::METRICS;
use crate::settings::ControllerConfig;

/// Name of the leader-election Lease (KubeFed's lock name).
pub const LEASE_NAME: &str = "kubefed-controller-manager";

/// The one attempt to release the leader Lease when stopping. An unreachable hub never holds
/// up a shutdown: the Lease then expires on its own after its duration.
pub(super) const LEASE_RELEASE_TIMEOUT: Duration = Duration::from_secs(2);
/// After losing the lease, how long the controllers may take to stop before the process
/// gives up with an error (a standby must not write).
const LOST_LEASE_STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Limit of one attempt to set up leader election (read or create the Lease).
const ELECTION_SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// A Go duration in whole seconds (at least 1); `default` when unset or unreadable.
fn seconds(value: Option<&String>, default: u64) -> u64 {
    value
        .and_then(|v| hubfed_api::duration::parse_go_duration(v).ok())
        .map(|d| d.as_secs().max(1))
        .unwrap_or(default)
}

/// What a replica stands for election with.
pub(super) struct Candidate<'a> {
    pub(super) hub: &'a Client,
    pub(super) config: &'a ControllerConfig,
    pub(super) identity: &'a str,
    pub(super) kubefed_config: &'a KubeFedConfigSpec,
    /// The KubeFedConfig as it changes (settings applied without a restart).
    pub(super) updates: &'a tokio::sync::watch::Receiver<KubeFedConfigSpec>,
    pub(super) health: &'a Arc<Health>,
}

/// Stands for leader until `stop`: leads while holding the lease, stands by otherwise.
pub(super) async fn campaign(
    candidate: &Candidate<'_>,
    stop: &CancellationToken,
) -> anyhow::Result<()> {
    loop {
        match lead_once(candidate, stop).await? {
            Term::Done => return Ok(()),
            Term::Lost => {
                tracing::error!("lost the leader lease: controllers stopped, back to standby");
            }
            Term::Released => {
                info!("the leader released the lease: standing for it at once");
            }
        }
    }
}

/// How one term as a candidate ended.
enum Term {
    /// Shut down.
    Done,
    /// Led, then lost the lease.
    Lost,
    /// Stood by until the leader released the lease: stand again without waiting for it to
    /// expire.
    Released,
}

impl Candidate<'_> {
    /// The Leases in the control plane's namespace.
    fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.hub.clone(), &self.config.kubefed_namespace)
    }
}

/// The leader election's timing, from KubeFedConfig's `leaderElect` (seconds).
struct LeaseTiming {
    lease_duration: u64,
    renew_deadline: u64,
    retry_period: Duration,
}

impl LeaseTiming {
    fn of(kubefed_config: &KubeFedConfigSpec) -> Self {
        let leader_elect = kubefed_config.leader_elect.clone().unwrap_or_default();
        let lease_duration = seconds(leader_elect.lease_duration.as_ref(), 15);
        let renew_deadline =
            seconds(leader_elect.renew_deadline.as_ref(), 10).min(lease_duration - 1);
        let retry_period = Duration::from_secs(seconds(leader_elect.retry_period.as_ref(), 5));
        Self {
            lease_duration,
            renew_deadline,
            retry_period,
        }
    }

    /// How long a leader may go without a renewal before it must step down (seconds).
    fn grace(&self) -> u64 {
        self.lease_duration - self.renew_deadline
    }
}

/// Waits for the lease, then runs the controllers until the lease is lost or `stop`.
async fn lead_once(candidate: &Candidate<'_>, stop: &CancellationToken) -> anyhow::Result<Term> {
    let timing = LeaseTiming::of(candidate.kubefed_config);
    let Some(manager) = lease_manager(candidate, &timing, stop).await else {
        return Ok(Term::Done);
    };
    let (mut leading, lease_task) = manager.watch().await;
    info!(identity = %candidate.identity, lease = %format!("{}/{LEASE_NAME}", candidate.config.kubefed_namespace), "waiting for the leader lease");
    METRICS.leader.with_label_values::<&str>(&[]).set(0);
    if let Some(outcome) = stand_by(candidate, &timing, &mut leading, stop).await? {
        stop_election(leading, lease_task, false).await;
        return Ok(outcome);
    }
    candidate.health.set_ready(false);
    info!(identity = %candidate.identity, "promoted as leader");
    METRICS.leader.with_label_values::<&str>(&[]).set(1);

    let (term, holds_lease) = lead(candidate, &timing, &mut leading, stop).await;
    METRICS.leader.with_label_values::<&str>(&[]).set(0);
    candidate.health.set_ready(false);
    // Only once the controllers have stopped: releasing lets a standby take over at once. A
    // replica that lost the lease has nothing to release.
    stop_election(leading, lease_task, holds_lease).await;
    term
}

/// Sets up leader election; `None` when stopped first. Replicas starting together race to
/// create the Lease; the loser's build fails with a conflict. Retries (also covers transient
/// API errors and a hub that does not answer) instead of exiting.
async fn lease_manager(
    candidate: &Candidate<'_>,
    timing: &LeaseTiming,
    stop: &CancellationToken,
) -> Option<LeaseManager> {
    let identity = candidate.identity;
    let mut delay = Duration::from_millis(200);
    loop {
        let build = kube_lease_manager::LeaseManagerBuilder::new(candidate.hub.clone(), LEASE_NAME)
            .with_namespace(&candidate.config.kubefed_namespace)
            .with_identity(identity)
            .with_duration(timing.lease_duration)
            .with_grace(timing.grace())
            .with_field_manager(lease_field_manager(identity))
            .build();
        let built = tokio::select! {
            () = stop.cancelled() => return None,
            built = tokio::time::timeout(ELECTION_SETUP_TIMEOUT, build) => built,
        };
        match built {
            Ok(Ok(manager)) => return Some(manager),
            Ok(Err(e)) => warn!(error = %e, "setting up leader election failed; retrying"),
            Err(_) => warn!(
                "setting up leader election failed: no answer from the hub within {}s; retrying",
                ELECTION_SETUP_TIMEOUT.as_secs()
            ),
        }
        tokio::select! {
            () = stop.cancelled() => return None,
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

/// Stands by until this replica leads (`None`), or the term ends without leading: `stop`, or
/// the leader released the lease.
async fn stand_by(
    candidate: &Candidate<'_>,
    timing: &LeaseTiming,
    leading: &mut tokio::sync::watch::Receiver<bool>,
    stop: &CancellationToken,
) -> anyhow::Result<Option<Term>> {
    // A standby is ready: it serves webhooks and metrics and waits its turn.
    let standby_ready = tokio::spawn({
        let health = Arc::clone(candidate.health);
        async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            health.set_ready(true);
        }
    });
    // The lease manager looks at a lease held by another replica again only when it would
    // expire; a release by its holder is noticed here, every retry period.
    let released = released_by_leader(candidate.leases(), candidate.identity, timing.retry_period);
    tokio::pin!(released);
    let outcome = loop {
        if *leading.borrow_and_update() {
            break None;
        }
        break tokio::select! {
            () = stop.cancelled() => Some(Term::Done),
            () = &mut released => Some(Term::Released),
            changed = leading.changed() => if changed.is_err() {
                standby_ready.abort();
                return Err(anyhow::anyhow!("leader election stopped"));
            } else {
                continue;
            },
        };
    };
    standby_ready.abort();
    Ok(outcome)
}

/// Runs the controllers while leading: until they end, `stop` (then drained), or the lease is
/// lost (then stopped). Returns how the term ended and whether the lease is still held.
async fn lead(
    candidate: &Candidate<'_>,
    timing: &LeaseTiming,
    leading: &mut tokio::sync::watch::Receiver<bool>,
    stop: &CancellationToken,
) -> (anyhow::Result<Term>, bool) {
    let controllers = stop.child_token();
    let lost = lease_lost(candidate, timing, leading);
    let mut plane = Box::pin(control_plane(
        candidate.hub.clone(),
        candidate.config.clone(),
        candidate.updates.clone(),
        Arc::clone(candidate.health),
        controllers.clone(),
    ));
    let ended = tokio::select! {
        result = drained(plane.as_mut(), stop) => (result.map(|()| Term::Done), true),
        () = lost => {
            // Stop every controller and wait until they have: a standby must not write.
            controllers.cancel();
            let term = match tokio::time::timeout(LOST_LEASE_STOP_TIMEOUT, &mut plane).await {
                Ok(_) => Ok(Term::Lost),
                Err(_) => Err(anyhow::anyhow!(
                    "lost the leader lease and the controllers did not stop within {}s",
                    LOST_LEASE_STOP_TIMEOUT.as_secs()
                )),
            };
            (term, false)
        }
    };
    // Whatever did not finish in time is cancelled here.
    drop(plane);
    ended
}

/// Completes when the lease is lost: the lease manager says so, or holding it cannot be
/// confirmed on the hub in time (the clock starts now).
fn lease_lost<'a>(
    candidate: &Candidate<'a>,
    timing: &LeaseTiming,
    leading: &'a mut tokio::sync::watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> + 'a {
    let grace = Duration::from_secs(timing.grace());
    let unconfirmed = lease_unconfirmed(
        candidate.leases(),
        candidate.identity,
        LeaseClock::new(
            std::time::Instant::now(),
            Duration::from_secs(timing.lease_duration),
            grace,
        ),
        LeaseClock::read_interval(grace),
        grace,
    );
    async move {
        tokio::select! {
            () = unconfirmed => {}
            () = async {
                loop {
                    if leading.changed().await.is_err() || !*leading.borrow() {
                        return;
                    }
                }
            } => {}
        }
    }
}

/// The field manager of this replica's Lease writes. The lease manager takes the Lease with a
/// server-side apply that must conflict with another holder's: one field manager per identity
/// (two replicas standing at the same moment cannot both win). At most 128 characters.
fn lease_field_manager(identity: &str) -> String {
    let mut manager = format!("hubfed-leader-election-{identity}");
    let mut end = manager.len().min(128);
    while !manager.is_char_boundary(end) {
        end -= 1;
    }
    manager.truncate(end);
    manager
}

/// Returns once this leader can no longer be sure it holds the Lease ([`LeaseClock`]): its
/// renewals are not seen on the hub in time (a hub that does not answer this replica leaves
/// the lease manager waiting on a renewal, still "leading", while the Lease expires and a
/// standby takes it), or the Lease is seen held by another replica. Reads the Lease every
/// `every`; a read may take `read_timeout` (a slow read only delays what it shows).
async fn lease_unconfirmed(
    leases: Api<Lease>,
    identity: &str,
    mut clock: LeaseClock,
    every: Duration,
    read_timeout: Duration,
) {
    loop {
        let sent = std::time::Instant::now();
        // A read that hangs must not hold the decision back: the deadline wins.
        let read = tokio::select! {
            read = tokio::time::timeout(read_timeout, leases.get_opt(LEASE_NAME)) => match read {
                Ok(Ok(lease)) => {
                    let spec = lease.and_then(|lease| lease.spec).unwrap_or_default();
                    match (spec.holder_identity, spec.renew_time) {
                        (Some(holder), Some(renewed)) if holder == identity => LeaseRead::Ours {
                            renew_time: renewed.0.to_string(),
                        },
                        _ => LeaseRead::NotOurs,
                    }
                }
                _ => LeaseRead::Unknown,
            },
            () = tokio::time::sleep_until(clock.step_down_at().into()) => LeaseRead::Unknown,
        };
        clock.observe(sent, read);
        if !clock.must_step_down(std::time::Instant::now()) {
            tokio::select! {
                () = tokio::time::sleep(every) => continue,
                () = tokio::time::sleep_until(clock.step_down_at().into()) => {}
            }
        }
        if clock.must_step_down(std::time::Instant::now()) {
            warn!(
                identity,
                "cannot confirm holding the leader lease in time (is the hub reachable?): stepping down"
            );
            return;
        }
    }
}

/// Returns once the Lease, seen held by another replica, is seen without a holder: its leader
/// released it on the way out. Reads the Lease every `every` (each read limited to the same),
/// which only needs `get` on it.
async fn released_by_leader(leases: Api<Lease>, identity: &str, every: Duration) {
    let mut held_by_another = false;
    loop {
        if let Ok(Ok(lease)) = tokio::time::timeout(every, leases.get_opt(LEASE_NAME)).await {
            let holder = lease
                .and_then(|lease| lease.spec)
                .and_then(|spec| spec.holder_identity)
                .filter(|holder| !holder.is_empty());
            match holder {
                Some(holder) if holder != identity => held_by_another = true,
                Some(_) => {}
                None if held_by_another => return,
                None => {}
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// Stops leader election. When this replica leads (`release`), closing the channel makes the
/// lease manager release the Lease: one attempt, within [`LEASE_RELEASE_TIMEOUT`], after
/// which the manager is abandoned and the Lease left to expire. Otherwise the manager is
/// stopped without writing: its release also clears a Lease it sees expired or free, which
/// could undo another replica's fresh lock.
async fn stop_election(
    leading: tokio::sync::watch::Receiver<bool>,
    mut lease_task: JoinHandle<Result<LeaseManager, LeaseManagerError>>,
    release: bool,
) {
    if !release {
        // Aborted before the channel closes, so it never gets to release.
        lease_task.abort();
        let _ = lease_task.await;
        drop(leading);
        return;
    }
    drop(leading);
    match tokio::time::timeout(LEASE_RELEASE_TIMEOUT, &mut lease_task).await {
        Ok(Ok(Ok(_))) => info!("released the leader lease"),
        Ok(Ok(Err(e))) => {
            warn!(error = %e, "could not release the leader lease; it expires on its own");
        }
        Ok(Err(e)) => warn!(error = %e, "the leader election task failed"),
        Err(_) => {
            lease_task.abort();
            warn!(
                "could not release the leader lease within {}s (is the hub reachable?); it expires on its own",
                LEASE_RELEASE_TIMEOUT.as_secs()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::lease_field_manager;

    #[test]
    fn one_lease_field_manager_per_identity_within_the_limit() {
        assert_eq!(
            lease_field_manager("replica-a"),
            "hubfed-leader-election-replica-a"
        );
        assert_ne!(lease_field_manager("a"), lease_field_manager("b"));
        let long = lease_field_manager(&"é".repeat(100));
        assert!(long.len() <= 128 && long.starts_with("hubfed-leader-election-é"));
    }
}
