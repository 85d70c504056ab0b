//! Wiring: KubeFedConfig, the cluster registry, shared caches and the FTC controller.

use std::sync::Arc;
use std::time::Duration;

use hubfed_api::federatedtypeconfig::ResourceScope;
use hubfed_api::kubefedconfig::{KubeFedConfig, KubeFedConfigSpec};
use hubfed_api::names::KUBEFED_CONFIG_NAME;
use hubfed_core::lease::{LeaseClock, LeaseRead};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, PostParams};
use kube_lease_manager::{LeaseManager, LeaseManagerError};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::admin::Health;
use crate::clusters::{HealthCheckSettings, MemberClientPool};
use crate::metrics::METRICS;
use crate::settings::ControllerConfig;
use crate::sync::Shared;

/// Name of the leader-election Lease (KubeFed's lock name).
pub const LEASE_NAME: &str = "kubefed-controller-manager";

/// Once asked to stop, how long the controllers may take to finish the work in flight
/// (member writes, status writes); whatever is still running then is cancelled. A lost lease
/// is different: see [`LOST_LEASE_STOP_TIMEOUT`].
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// The one attempt to release the leader Lease when stopping. An unreachable hub never holds
/// up a shutdown: the Lease then expires on its own after its duration.
pub const LEASE_RELEASE_TIMEOUT: Duration = Duration::from_secs(2);
/// After losing the lease, how long the controllers may take to stop before the process
/// gives up with an error (a standby must not write).
const LOST_LEASE_STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Limit of one attempt to set up leader election (read or create the Lease).
const ELECTION_SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads the KubeFedConfig, creating it with defaults when missing (as KubeFed does).
async fn load_kubefed_config(hub: &Client, namespace: &str) -> anyhow::Result<KubeFedConfigSpec> {
    let api: Api<KubeFedConfig> = Api::namespaced(hub.clone(), namespace);
    let mut spec = match api.get_opt(KUBEFED_CONFIG_NAME).await? {
        Some(existing) => existing.spec,
        None => {
            let spec = KubeFedConfigSpec::with_defaults(ResourceScope::Cluster);
            let mut object = KubeFedConfig::new(KUBEFED_CONFIG_NAME, spec.clone());
            object.metadata.namespace = Some(namespace.to_string());
            match api.create(&PostParams::default(), &object).await {
                Ok(_) => info!(namespace, "created KubeFedConfig with defaults"),
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
            spec
        }
    };
    spec.apply_defaults();
    Ok(spec)
}

/// How often an invalid KubeFedConfig is read again while the controllers wait for a valid one.
const INVALID_CONFIG_RETRY: Duration = Duration::from_secs(5);

/// The KubeFedConfig, once it is valid. KubeFed stopped the controller on an invalid one; the
/// webhooks then went down with it and, with `failurePolicy: Fail`, refused the very fix. hubfed
/// keeps the process (and so admission) running and waits: the error is logged and recorded as
/// a Warning Event on the KubeFedConfig, once per distinct problem, and the config is read
/// again every [`INVALID_CONFIG_RETRY`].
async fn valid_kubefed_config(
    hub: &Client,
    namespace: &str,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<KubeFedConfigSpec>> {
    let mut reported = String::new();
    loop {
        let loaded = tokio::select! {
            () = shutdown.cancelled() => return Ok(None),
            loaded = load_kubefed_config(hub, namespace) => loaded,
        };
        // A hub that does not answer, or a stored object that does not even decode, must not
        // end the process (and the webhooks with it) either: the same wait.
        let problem = match loaded {
            Ok(spec) => {
                let errors = hubfed_core::validation::validate_kubefed_config(&spec, None);
                if errors.is_empty() {
                    return Ok(Some(spec));
                }
                format!(
                    "KubeFedConfig {namespace}/{KUBEFED_CONFIG_NAME} is invalid, the controllers wait for a valid one: {}",
                    hubfed_core::validation::summary(&errors)
                )
            }
            Err(e) => format!(
                "KubeFedConfig {namespace}/{KUBEFED_CONFIG_NAME} cannot be read, the controllers wait for it: {e:#}"
            ),
        };
        if problem != reported {
            tracing::error!("{problem}");
            report_invalid_config(hub, namespace, &problem).await;
            reported = problem;
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(None),
            () = tokio::time::sleep(INVALID_CONFIG_RETRY) => {}
        }
    }
}

/// A Warning Event `InvalidConfiguration` on the KubeFedConfig; failures are only logged.
async fn report_invalid_config(hub: &Client, namespace: &str, message: &str) {
    use kube::Resource as _;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let api: Api<KubeFedConfig> = Api::namespaced(hub.clone(), namespace);
    // Its metadata only: a spec that does not decode still gets its Event.
    let Ok(Ok(config)) = tokio::time::timeout(
        Duration::from_secs(10),
        api.get_metadata(KUBEFED_CONFIG_NAME),
    )
    .await
    else {
        return;
    };
    let reporter = Reporter {
        controller: "hubfed-controller".to_owned(),
        instance: std::env::var("HOSTNAME").ok(),
    };
    let event = Event {
        type_: EventType::Warning,
        reason: "InvalidConfiguration".to_owned(),
        note: Some(message.chars().take(1024).collect()),
        action: "Validate".to_owned(),
        secondary: None,
    };
    let recorder = Recorder::new(hub.clone(), reporter);
    let published = recorder.publish(&event, &config.object_ref(&())).await;
    if let Err(e) = published {
        warn!(error = %e, "recording the InvalidConfiguration event failed");
    }
}

/// Runs the control plane until `shutdown` is cancelled.
pub async fn run(
    hub: Client,
    config: ControllerConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    run_with(hub, config, Arc::new(Health::default()), shutdown).await
}

fn identity(config: &ControllerConfig) -> String {
    config.identity.clone().unwrap_or_else(|| {
        let host = std::env::var("HOSTNAME")
            .or_else(|_| std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()))
            .unwrap_or_else(|_| "hubfed".to_string());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        format!("{host}_{:08x}{:08x}", std::process::id(), nanos)
    })
}

fn seconds(value: Option<&String>, default: u64) -> u64 {
    value
        .and_then(|v| hubfed_api::duration::parse_go_duration(v).ok())
        .map(|d| d.as_secs().max(1))
        .unwrap_or(default)
}

/// Like [`run`], reporting readiness in `health`. With leader election, waits for the lease
/// and runs the controllers while holding it. A replica that loses the lease (it could not
/// renew in time: an overloaded machine, a slow hub) stops its controllers and goes back to
/// standby; it does not exit, so no supervisor is needed to bring it back.
///
/// Cancelling `shutdown` stops everything within bounds, whether or not the hub answers: no
/// new work is taken, work in flight gets [`DRAIN_TIMEOUT`] and is then cancelled, and a
/// leader makes one attempt of at most [`LEASE_RELEASE_TIMEOUT`] to release the Lease so a
/// standby takes over at once.
///
/// A change of the KubeFedConfig restarts the controllers in the process with the new
/// settings (scope, health checks, leader election, concurrency, feature gates); only
/// `adoptResources` is applied without a restart. An invalid change is ignored with an error
/// in the log: the admission webhook refuses those before they are stored.
pub async fn run_with(
    hub: Client,
    config: ControllerConfig,
    health: Arc<Health>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    // One identity for the life of the process: a lease it still holds after a restart of
    // the controllers is recognised as its own.
    let identity = identity(&config);
    loop {
        let Some(kubefed_config) =
            valid_kubefed_config(&hub, &config.kubefed_namespace, &shutdown).await?
        else {
            return Ok(());
        };
        info!(
            namespace = %config.kubefed_namespace,
            "Using valid KubeFedConfig \"{}/{}\"",
            config.kubefed_namespace,
            KUBEFED_CONFIG_NAME
        );
        let restart = shutdown.child_token();
        // The one KubeFedConfig watch: a change that needs a restart cancels `restart`; every
        // valid change reaches the running controllers through `updates`.
        let (specs, updates) = tokio::sync::watch::channel(kubefed_config.clone());
        let follower = tokio::spawn(follow_config(
            hub.clone(),
            config.kubefed_namespace.clone(),
            kubefed_config.clone(),
            specs,
            restart.clone(),
        ));
        let result = if config.leader_elect {
            let candidate = Candidate {
                hub: &hub,
                config: &config,
                identity: &identity,
                kubefed_config: &kubefed_config,
                updates: &updates,
                health: &health,
            };
            campaign(&candidate, &restart).await
        } else {
            METRICS.leader.with_label_values::<&str>(&[]).set(1);
            let plane = control_plane(
                hub.clone(),
                config.clone(),
                updates,
                Arc::clone(&health),
                restart.clone(),
            );
            drained(plane, &restart).await
        };
        follower.abort();
        result?;
        if shutdown.is_cancelled() || !restart.is_cancelled() {
            return Ok(());
        }
        info!("restarting the controllers with the changed KubeFedConfig");
    }
}

/// Whether a KubeFedConfig change needs the controllers restarted: any change of the
/// defaulted spec except `syncController.adoptResources`, which the sync controllers follow
/// themselves.
fn needs_restart(running: &KubeFedConfigSpec, changed: &KubeFedConfigSpec) -> bool {
    let comparable = |spec: &KubeFedConfigSpec| {
        let mut spec = spec.clone();
        if let Some(sync) = spec.sync_controller.as_mut() {
            sync.adopt_resources = None;
        }
        spec
    };
    comparable(running) != comparable(changed)
}

/// Cancels `restart` when the KubeFedConfig changes in a way [`needs_restart`].
async fn follow_config(
    hub: Client,
    namespace: String,
    running: KubeFedConfigSpec,
    specs: tokio::sync::watch::Sender<KubeFedConfigSpec>,
    restart: CancellationToken,
) {
    use futures::StreamExt as _;
    use kube::runtime::{WatchStreamExt as _, watcher};
    let api: Api<KubeFedConfig> = Api::namespaced(hub, &namespace);
    let selector = format!("metadata.name={KUBEFED_CONFIG_NAME}");
    let stream = watcher(api, watcher::Config::default().fields(&selector))
        .default_backoff()
        .applied_objects();
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        let mut spec = match item {
            Ok(config) => config.spec,
            Err(e) => {
                tracing::warn!(error = %e, "KubeFedConfig watch error");
                continue;
            }
        };
        spec.apply_defaults();
        if spec == *specs.borrow() {
            continue;
        }
        let errors = hubfed_core::validation::validate_kubefed_config(&spec, None);
        if !errors.is_empty() {
            tracing::error!(
                "KubeFedConfig {namespace}/{KUBEFED_CONFIG_NAME} changed but is invalid, keeping the running settings: {}",
                hubfed_core::validation::summary(&errors)
            );
            continue;
        }
        let restart_needed = needs_restart(&running, &spec);
        specs.send_replace(spec);
        if restart_needed {
            info!("KubeFedConfig changed");
            restart.cancel();
            return;
        }
    }
}

/// What a replica stands for election with.
struct Candidate<'a> {
    hub: &'a Client,
    config: &'a ControllerConfig,
    identity: &'a str,
    kubefed_config: &'a KubeFedConfigSpec,
    /// The KubeFedConfig as it changes (settings applied without a restart).
    updates: &'a tokio::sync::watch::Receiver<KubeFedConfigSpec>,
    health: &'a Arc<Health>,
}

/// Stands for leader until `stop`: leads while holding the lease, stands by otherwise.
async fn campaign(candidate: &Candidate<'_>, stop: &CancellationToken) -> anyhow::Result<()> {
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

/// Runs the controllers until they end by themselves or `stop` is cancelled; then they stop
/// taking work and get [`DRAIN_TIMEOUT`] to finish what is in flight, after which it is
/// cancelled (the controllers are dropped; their tasks observe `stop` or are aborted).
async fn drained(
    plane: impl std::future::Future<Output = anyhow::Result<()>>,
    stop: &CancellationToken,
) -> anyhow::Result<()> {
    tokio::pin!(plane);
    tokio::select! {
        result = &mut plane => return result,
        () = stop.cancelled() => {}
    }
    info!(
        "stopping the controllers: no new work; work in flight has {}s to finish",
        DRAIN_TIMEOUT.as_secs()
    );
    match tokio::time::timeout(DRAIN_TIMEOUT, plane).await {
        Ok(result) => {
            info!("controllers stopped");
            result
        }
        Err(_) => {
            warn!(
                "the controllers did not finish their work in flight within {}s: cancelled",
                DRAIN_TIMEOUT.as_secs()
            );
            Ok(())
        }
    }
}

/// The controllers proper: registry, shared caches and the FTC controller.
async fn control_plane(
    hub: Client,
    config: ControllerConfig,
    kubefed: tokio::sync::watch::Receiver<KubeFedConfigSpec>,
    health: Arc<Health>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let kubefed_config = kubefed.borrow().clone();
    let pool = MemberClientPool::new(
        hub.clone(),
        config.kubefed_namespace.clone(),
        HealthCheckSettings::from_config(&kubefed_config),
        config.member_write_concurrency,
    );
    let pool_task = tokio::spawn(pool.clone().run(shutdown.clone()));
    pool.wait_until_synced().await;
    tokio::spawn(export_cluster_gauges(Arc::clone(&pool), shutdown.clone()));

    let shared = Shared::start(hub.clone(), pool, &config, kubefed, shutdown.clone());
    let rsp_scheduler =
        kubefed_config.feature_enabled(hubfed_api::kubefedconfig::FEATURE_SCHEDULER_PREFERENCES);
    if rsp_scheduler {
        let scheduler = crate::schedule::Scheduler {
            hub: hub.clone(),
            pool: Arc::clone(&shared.pool),
            scope: shared.scope,
            kubefed_namespace: config.kubefed_namespace.clone(),
            unschedulable_threshold: config.unschedulable_threshold,
        };
        tokio::spawn(scheduler.run(shutdown.clone()));
    }
    let policies = crate::policy::PolicyController {
        hub: hub.clone(),
        pool: Arc::clone(&shared.pool),
        scope: shared.scope,
        kubefed_namespace: config.kubefed_namespace.clone(),
        rsp_scheduler,
    };
    tokio::spawn(policies.run(shutdown.clone()));
    health.set_ready(true);
    let ftcs = crate::ftc::run(Arc::clone(&shared), shutdown.clone());
    let result = ftcs.await;
    health.set_ready(false);
    shutdown.cancel();
    let _ = pool_task.await;
    result
}

/// Keeps `hubfed_cluster_ready` and `kubefedcluster_state` in step with the registry.
async fn export_cluster_gauges(pool: Arc<MemberClientPool>, shutdown: CancellationToken) {
    let mut changes = pool.subscribe();
    let mut known: Vec<String> = Vec::new();
    loop {
        let clusters = pool.clusters();
        for gone in known
            .iter()
            .filter(|k| !clusters.iter().any(|c| &c.name == *k))
        {
            let _ = METRICS.cluster_ready.remove_label_values(&[gone.as_str()]);
            for state in ["ready", "notready", "offline"] {
                let _ = METRICS
                    .kubefedcluster_state
                    .remove_label_values(&[state, gone.as_str()]);
            }
        }
        known = clusters.iter().map(|c| c.name.clone()).collect();
        for c in &clusters {
            let state = match (c.ready, c.client.is_some()) {
                (true, _) => "ready",
                (false, true) => "notready",
                (false, false) => "offline",
            };
            METRICS
                .cluster_ready
                .with_label_values(&[c.name.as_str()])
                .set(i64::from(c.ready));
            for s in ["ready", "notready", "offline"] {
                METRICS
                    .kubefedcluster_state
                    .with_label_values(&[s, c.name.as_str()])
                    .set(i64::from(s == state));
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{drained, lease_field_manager, needs_restart};
    use std::time::Duration;
    use tokio_util::sync::CancellationToken;

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

    #[tokio::test]
    async fn controllers_that_end_or_stop_in_time_are_waited_for() {
        let stop = CancellationToken::new();
        let ended = drained(async { Err(anyhow::anyhow!("failed")) }, &stop).await;
        assert!(ended.is_err(), "the controllers' own end is passed on");

        // Asked to stop, the controllers finish their work in flight.
        let (finished_tx, finished_rx) = tokio::sync::oneshot::channel();
        let plane = {
            let stop = stop.clone();
            async move {
                stop.cancelled().await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = finished_tx.send(());
                Ok(())
            }
        };
        stop.cancel();
        let began = std::time::Instant::now();
        drained(plane, &stop).await.expect("stopped");
        assert!(finished_rx.await.is_ok(), "the work in flight was finished");
        assert!(began.elapsed() < super::DRAIN_TIMEOUT);
    }

    use hubfed_api::federatedtypeconfig::ResourceScope;
    use hubfed_api::kubefedconfig::{KubeFedConfigSpec, ResourceAdoption};

    #[test]
    fn every_setting_but_adoption_restarts_the_controllers() {
        let running = KubeFedConfigSpec::with_defaults(ResourceScope::Cluster);
        assert!(!needs_restart(&running, &running.clone()));

        let mut adoption = running.clone();
        adoption
            .sync_controller
            .get_or_insert_with(Default::default)
            .adopt_resources = Some(ResourceAdoption::Disabled);
        assert!(
            !needs_restart(&running, &adoption),
            "adoptResources is followed live"
        );

        let mut health = running.clone();
        health
            .cluster_health_check
            .get_or_insert_with(Default::default)
            .failure_threshold = Some(7);
        assert!(needs_restart(&running, &health));

        let scope = KubeFedConfigSpec::with_defaults(ResourceScope::Namespaced);
        assert!(needs_restart(&running, &scope));

        let mut lease = running.clone();
        lease
            .leader_elect
            .get_or_insert_with(Default::default)
            .lease_duration = Some("31s".into());
        assert!(needs_restart(&running, &lease));
    }
}
