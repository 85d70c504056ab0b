//! The `hubfed-controller` process: flags, logging, signals, and the parts it runs (the
//! controllers, the admin and webhook servers); `main.rs` only calls [`main`].
//!
//! Shutdown (docs/operations.md, "Shutdown"): the first SIGTERM or SIGINT cancels one token
//! that every part observes — the controllers stop taking work and get 5 s for the work in
//! flight, the leader makes one attempt of at most 2 s to release its Lease, the HTTP servers
//! close — and the process exits 0 with the line `hubfed-controller stopped` within
//! [`SHUTDOWN_DEADLINE`], whether the hub answers or not: what has not stopped by then is
//! abandoned. A second signal exits at once, with 128 + the signal's number.

use std::collections::HashMap;
use std::future::Future;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use crate::{ControllerConfig, run_with};
use clap::Parser;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

/// From the first SIGTERM/SIGINT to the exit, at most (plus [`LOG_FLUSH_TIMEOUT`]).
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);
/// Limit of the final flush of the logs: a blocked stdout must not hold up the exit.
const LOG_FLUSH_TIMEOUT: Duration = Duration::from_secs(1);
/// Names of the parts, as logged when one does not stop in time.
const CONTROLLERS: &str = "controllers";
const ADMIN_SERVER: &str = "admin server";
const WEBHOOK_SERVER: &str = "webhook server";

#[derive(Parser, Debug)]
#[command(
    version,
    about = "hubfed control plane: propagates federated objects to member clusters"
)]
struct Args {
    /// Kubeconfig of the hub; default: $KUBECONFIG, ~/.kube/config, then in-cluster.
    #[arg(long, env = "HUBFED_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Context of the kubeconfig to use.
    #[arg(long, env = "HUBFED_CONTEXT")]
    context: Option<String>,
    /// Namespace of FederatedTypeConfigs, KubeFedClusters and the KubeFedConfig.
    #[arg(long, env = "HUBFED_KUBEFED_NAMESPACE", default_value = hubfed_api::names::DEFAULT_KUBEFED_NAMESPACE)]
    kubefed_namespace: String,
    /// Concurrent writes to one member cluster.
    #[arg(long, env = "HUBFED_MEMBER_WRITE_CONCURRENCY", default_value_t = 16)]
    member_write_concurrency: usize,
    /// Concurrent reconciles per federated type.
    #[arg(long, env = "HUBFED_RECONCILE_CONCURRENCY", default_value_t = 16)]
    reconcile_concurrency: u16,
    /// Field managers whose changes to member copies are people's and are reverted as drift;
    /// every other manager's are kept (comma-separated; a trailing `*` matches any suffix).
    #[arg(
        long,
        env = "HUBFED_DRIFT_REVERT_MANAGERS",
        value_delimiter = ',',
        default_value = "kubectl,kubectl-*"
    )]
    drift_revert_managers: Vec<String>,
    /// Seconds a pod must have been unschedulable before a ReplicaSchedulingPreference with
    /// `rebalance: true` moves its replica to another cluster (KubeFed: 60).
    #[arg(long, env = "HUBFED_UNSCHEDULABLE_THRESHOLD", default_value_t = hubfed_core::schedule::UNSCHEDULABLE_THRESHOLD_SECONDS, value_parser = clap::value_parser!(i64).range(0..=86_400))]
    unschedulable_threshold: i64,
    /// MiB of memory for large objects' writes in flight: a reconcile of an object whose spec
    /// is 64 KiB or more takes twice the spec's size and waits when there is no room; 0: no
    /// limit.
    #[arg(long, env = "HUBFED_LARGE_OBJECT_BUDGET_MIB", default_value_t = hubfed_core::large_objects::DEFAULT_BUDGET_MIB)]
    large_object_budget_mib: u32,
    /// Lists of members' objects running at a time, every type and member together (a start,
    /// or every watch re-listing at once after an outage of the controller's network); the
    /// others wait their turn. 0: no limit.
    #[arg(long, env = "HUBFED_MEMBER_LIST_CONCURRENCY", default_value_t = crate::settings::DEFAULT_MEMBER_LIST_CONCURRENCY)]
    member_list_concurrency: usize,
    /// Objects per page of a member list. Lower it for members holding large objects whose API
    /// servers serve lists from etcd (no watch cache): each page is read whole, by the member
    /// and by etcd, however little of it the controller keeps.
    #[arg(long, env = "HUBFED_MEMBER_LIST_PAGE_SIZE", default_value_t = crate::settings::DEFAULT_MEMBER_LIST_PAGE_SIZE, value_parser = clap::value_parser!(u32).range(1..))]
    member_list_page_size: u32,
    /// Run the multi-cluster services controller: members' ServiceExports become
    /// ServiceImports and derived EndpointSlices in every member.
    #[arg(long, env = "HUBFED_MCS", default_value_t = true, action = clap::ArgAction::Set)]
    mcs: bool,
    /// How long an Offline member's exported endpoints stay in the other members before they
    /// are withdrawn (a Go duration).
    #[arg(long, env = "HUBFED_MCS_ENDPOINT_TTL", default_value = "5m", value_parser = parse_duration)]
    mcs_endpoint_ttl: Duration,
    /// Run the multi-cluster DNS controller: ServiceDNSRecords and IngressDNSRecords get
    /// their status from the members and DNSEndpoints for external-dns.
    #[arg(long, env = "HUBFED_DNS", default_value_t = true, action = clap::ArgAction::Set)]
    dns: bool,
    /// The groups the DNSEndpoints are written in: `externaldns` (externaldns.k8s.io, read by
    /// external-dns v0.21 and later), `kubefed` (multiclusterdns.kubefed.io, KubeFed's) or
    /// `both`.
    #[arg(long, env = "HUBFED_DNS_ENDPOINT_GROUPS", value_enum, default_value_t = crate::dns::EndpointGroups::Externaldns)]
    dns_endpoint_groups: crate::dns::EndpointGroups,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "HUBFED_ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    admin_addr: std::net::SocketAddr,
    /// Elect a leader through the Lease `kubefed-controller-manager`; only the leader writes.
    #[arg(long, env = "HUBFED_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// Identity in the leader Lease; default `<hostname>_<random>`.
    #[arg(long, env = "HUBFED_IDENTITY")]
    identity: Option<String>,
    /// Address of the admission webhook server (HTTPS).
    #[arg(long, env = "HUBFED_WEBHOOK_ADDR", default_value = "0.0.0.0:8443")]
    webhook_addr: std::net::SocketAddr,
    /// Directory holding the webhook's `tls.crt` and `tls.key`; the webhook server runs only
    /// when it is set.
    #[arg(long, env = "HUBFED_WEBHOOK_CERT_DIR")]
    webhook_cert_dir: Option<PathBuf>,
    /// Log format.
    #[arg(long, env = "HUBFED_LOG_FORMAT", value_parser = ["plain", "json"], default_value = "plain")]
    log_format: String,
}

/// A Go duration flag (`30s`, `5m`).
fn parse_duration(value: &str) -> Result<Duration, String> {
    hubfed_api::duration::parse_go_duration(value).map_err(|e| e.to_string())
}

async fn hub_client(args: &Args) -> anyhow::Result<kube::Client> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            kube::Config::from_custom_kubeconfig(Kubeconfig::read_from(path)?, &options).await?
        }
        None if args.context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer().await?,
    };
    Ok(crate::clusters::hub_client(&config)?)
}

/// The multi-threaded tokio runtime a binary runs in; the process exits when it cannot start.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the tokio runtime: {e}");
            exit(1);
        }
    }
}

/// Parses the flags, runs the process and exits with its code.
pub fn main() {
    let args = Args::parse();
    init_logging(&args.log_format);
    let runtime = runtime();
    let code = runtime.block_on(serve(args));
    // The runtime is not dropped: that would wait for every blocking task, and abandoned tasks
    // may still wait on an unreachable hub. Exiting ends them all.
    exit(code)
}

pub(crate) fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube_runtime=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Flushes the logs (stdout; stderr is unbuffered) for at most [`LOG_FLUSH_TIMEOUT`], then
/// exits with `code`.
fn exit(code: i32) -> ! {
    let (flushed, done) = std::sync::mpsc::channel();
    let flush = std::thread::Builder::new()
        .name("flush-logs".to_owned())
        .spawn(move || {
            let _ = std::io::stdout().flush();
            let _ = std::io::stderr().flush();
            let _ = flushed.send(());
        });
    if flush.is_ok() {
        let _ = done.recv_timeout(LOG_FLUSH_TIMEOUT);
    }
    std::process::exit(code)
}

/// The exit code of a process ended by signal `number` (as a shell reports it).
fn signal_exit_code(number: i32) -> i32 {
    128 + number
}

/// Cancels `shutdown` on the first SIGTERM or SIGINT; exits at once on the second.
pub(crate) fn handle_signals(shutdown: CancellationToken) -> anyhow::Result<()> {
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        let first = tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        };
        info!(
            signal = first,
            deadline_seconds = SHUTDOWN_DEADLINE.as_secs(),
            "shutting down; a second SIGTERM or SIGINT exits at once"
        );
        shutdown.cancel();
        let (second, number) = tokio::select! {
            _ = terminate.recv() => ("SIGTERM", 15),
            _ = interrupt.recv() => ("SIGINT", 2),
        };
        let code = signal_exit_code(number);
        warn!(
            signal = second,
            "second signal: exiting at once, without waiting for the shutdown to finish"
        );
        info!(exit_code = code, "hubfed-controller stopped");
        exit(code)
    });
    Ok(())
}

/// The long-running parts of the process, each a task.
#[derive(Default)]
struct Parts {
    tasks: JoinSet<anyhow::Result<()>>,
    names: HashMap<tokio::task::Id, &'static str>,
}

impl Parts {
    fn spawn(
        &mut self,
        name: &'static str,
        task: impl Future<Output = anyhow::Result<()>> + Send + 'static,
    ) {
        let handle = self.tasks.spawn(task);
        self.names.insert(handle.id(), name);
    }

    /// The next part to end and how it ended; `None` once none is left.
    async fn next(&mut self) -> Option<(&'static str, anyhow::Result<()>)> {
        let (id, result) = match self.tasks.join_next_with_id().await? {
            Ok((id, result)) => (id, result),
            Err(e) => (e.id(), Err(anyhow::anyhow!("panicked: {e}"))),
        };
        Some((self.names.remove(&id).unwrap_or("a task"), result))
    }

    /// The parts still running, sorted.
    fn running(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = self.names.values().copied().collect();
        names.sort_unstable();
        names
    }
}

/// Runs until the first signal or until a part fails, then stops everything within
/// [`SHUTDOWN_DEADLINE`]. Returns the exit code, after the final log line.
async fn serve(args: Args) -> i32 {
    let shutdown = CancellationToken::new();
    if let Err(e) = handle_signals(shutdown.clone()) {
        return stopped(Some(anyhow::anyhow!("cannot handle signals: {e}")));
    }
    let client = tokio::select! {
        () = shutdown.cancelled() => return stopped(None),
        client = hub_client(&args) => match client {
            Ok(client) => client,
            Err(e) => return stopped(Some(e)),
        },
    };
    let mut parts = start_parts(args, client, &shutdown);
    let failure = run_until_stopped(&mut parts, &shutdown).await;
    stop_parts(parts, &shutdown).await;
    stopped(failure)
}

/// Starts the admin server, the webhook server (when it has certificates) and the
/// controllers.
fn start_parts(args: Args, client: kube::Client, shutdown: &CancellationToken) -> Parts {
    let health = std::sync::Arc::new(crate::admin::Health::default());
    let mut parts = Parts::default();
    parts.spawn(
        ADMIN_SERVER,
        crate::admin::serve(
            args.admin_addr,
            std::sync::Arc::clone(&health),
            shutdown.clone(),
        ),
    );
    if let Some(dir) = args.webhook_cert_dir.clone() {
        parts.spawn(
            WEBHOOK_SERVER,
            crate::webhook::serve(
                args.webhook_addr,
                dir,
                client.clone(),
                args.kubefed_namespace.clone(),
                shutdown.clone(),
            ),
        );
    }
    let config = ControllerConfig {
        leader_elect: args.leader_elect,
        identity: args.identity,
        kubefed_namespace: args.kubefed_namespace,
        member_write_concurrency: args.member_write_concurrency,
        reconcile_concurrency: args.reconcile_concurrency,
        drift_revert_managers: args.drift_revert_managers,
        unschedulable_threshold: args.unschedulable_threshold,
        large_object_budget_mib: args.large_object_budget_mib,
        member_list_concurrency: args.member_list_concurrency,
        member_list_page_size: args.member_list_page_size,
        mcs: args.mcs,
        mcs_endpoint_ttl: args.mcs_endpoint_ttl,
        dns: args.dns,
        dns_endpoint_groups: args.dns_endpoint_groups,
        ..ControllerConfig::default()
    };
    parts.spawn(
        CONTROLLERS,
        run_with(client, config, health, shutdown.clone()),
    );
    parts
}

/// Running: until asked to stop, or until the controllers or the admin server end. Returns
/// the failure that ended the run, if any.
async fn run_until_stopped(
    parts: &mut Parts,
    shutdown: &CancellationToken,
) -> Option<anyhow::Error> {
    loop {
        let (name, result) = tokio::select! {
            () = shutdown.cancelled() => return None,
            next = parts.next() => next?,
        };
        match result {
            Ok(()) if shutdown.is_cancelled() => return None,
            Ok(()) => return Some(anyhow::anyhow!("the {name} stopped without being asked to")),
            // As before: a webhook server that cannot serve is reported, the rest goes on.
            Err(e) if name == WEBHOOK_SERVER => {
                error!(error = %format!("{e:#}"), "webhook server failed");
            }
            Err(e) => return Some(e.context(format!("the {name} failed"))),
        }
    }
}

/// Stopping: every part observes the token; what has not stopped by the deadline is
/// abandoned.
async fn stop_parts(mut parts: Parts, shutdown: &CancellationToken) {
    shutdown.cancel();
    let deadline = tokio::time::Instant::now() + SHUTDOWN_DEADLINE;
    let stopping = async {
        while let Some((name, result)) = parts.next().await {
            match result {
                Ok(()) => tracing::debug!(part = name, "stopped"),
                Err(e) => warn!(part = name, error = %format!("{e:#}"), "failed while stopping"),
            }
        }
    };
    if tokio::time::timeout_at(deadline, stopping).await.is_err() {
        warn!(
            not_stopped = ?parts.running(),
            "not stopped within {}s of the shutdown request: exiting anyway",
            SHUTDOWN_DEADLINE.as_secs()
        );
    }
}

/// Logs the final line; returns the exit code: 0, or 1 after a failure.
fn stopped(failure: Option<anyhow::Error>) -> i32 {
    match failure {
        None => {
            info!(exit_code = 0, "hubfed-controller stopped");
            0
        }
        Some(e) => {
            error!(error = %format!("{e:#}"), exit_code = 1, "hubfed-controller stopped");
            eprintln!("error: {e:#}");
            1
        }
    }
}
