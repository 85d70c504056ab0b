//! `hubfed-bench` (`make bench`): hubfed's performance on real API servers, in one run.
//!
//! It starts a hub and N members (hubfed-testenv: real kube-apiservers, one etcd on tmpfs),
//! joins the members, federates a few namespaces onto all of them, then measures:
//!
//! 1. **Raw apply limit**: the member objects applied (server-side apply) straight to the
//!    members by a plain client, many in flight — objects/s and per-write p50/p99. The ceiling.
//! 2. **Cold start**: M federated objects (ConfigMaps, Secrets, Deployments in turn) placed on
//!    every member already in the hub; a `hubfed-controller` process started → every member
//!    object present (metadata watches of `kubefed.io/managed=true` in each member).
//! 3. **Propagation latency under load**: K template updates at a fixed rate → from sending
//!    the hub write to the last placed member showing the new revision.
//! 4. **Memory and CPU** of the controller process (`/proc`), and of every other process
//!    group, which tells what limits each phase on a small machine.
//! 5. **Writes at rest**: member writes during a quiet window (from the controller's
//!    `hubfed_member_operations_total`, and from the member watches).
//! 6. **Warm restart**: the controller restarted on the converged federation — member writes
//!    (expected none), time to settle, and its RSS without cold-start leftovers.
//!
//! With `--pull` every member is joined in pull mode (`hubfedctl join --mode pull`) and runs a
//! `hubfed-agent` process: the controller writes a `Work` per member object in the hub and
//! the agents apply them. The phases measure the same things; the report adds the agents'
//! memory and CPU and the hub storage the works take.
//!
//! With `--controller kubefed` the controller under test is KubeFed v0.10.0's
//! controller-manager (built on demand by `hack/build-kubefed.sh`) on the same clusters;
//! `hubfed-bench compare A/result.json B/result.json` sets two runs side by side
//! (`make bench-kubefed`).
//!
//! Variants (docs/benchmarks.md, one section each): `--slow-member-ms N` joins the last
//! member through a proxy that holds what its API server sends for N ms (latency to the
//! healthy members and to the slow one); `--unmanaged N` creates N unmanaged objects in
//! member1 after the at-rest window (controller memory per unmanaged object: live heap and RSS);
//! `--object-bytes N` gives every ConfigMap and Secret an N-byte value (MB/s);
//! `--light-members` starts the members with hubfed-testenv's light flags (many members);
//! `--mcs` measures the multi-cluster services controller after the raw phase instead of the
//! federated objects' phases (`--services` exported services: cold start, endpoint change
//! latency to every other member, memory per service × cluster, writes at rest).
//!
//! Results: `<output-dir>/result.json`, `<output-dir>/result.md` (also printed), and the
//! controller logs. Performance is reported, never asserted.

#[path = "../bench/agents.rs"]
mod agents;
#[path = "../bench/compare.rs"]
mod compare;
#[path = "../bench/controller.rs"]
mod controller;
#[path = "../bench/kubefed.rs"]
mod kubefed;
#[path = "../bench/mcs.rs"]
mod mcs;
#[path = "../bench/procstat.rs"]
mod procstat;
#[path = "../bench/raw.rs"]
mod raw;
#[path = "../bench/report.rs"]
mod report;
#[path = "../bench/restart.rs"]
mod restart;
#[path = "../bench/run.rs"]
mod run;
#[path = "../bench/setup.rs"]
mod setup;
#[path = "../bench/stats.rs"]
mod stats;
#[path = "../bench/tracker.rs"]
mod tracker;
#[path = "../bench/unmanaged.rs"]
mod unmanaged;
#[path = "../bench/workload.rs"]
mod workload;

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use anyhow::Context as _;
use clap::Parser;

#[derive(Parser, Debug, Clone)]
#[command(
    version,
    about = "hubfed benchmark: raw apply limit, cold start, propagation latency, memory, writes at rest (push or pull mode)"
)]
pub struct Args {
    /// Member clusters.
    #[arg(long, env = "HUBFED_BENCH_MEMBERS", default_value_t = 10)]
    pub members: usize,
    /// Federated objects (ConfigMaps, Secrets and Deployments in turn), each placed on every
    /// member.
    #[arg(long, env = "HUBFED_BENCH_OBJECTS", default_value_t = 2000)]
    pub objects: usize,
    /// Template updates in the latency phase (distinct objects, spread over all of them).
    #[arg(long, env = "HUBFED_BENCH_UPDATES", default_value_t = 200)]
    pub updates: usize,
    /// Template updates per second in the (first) latency phase.
    #[arg(long, env = "HUBFED_BENCH_RATE", default_value_t = 20.0)]
    pub rate: f64,
    /// Latency phases, one per rate (updates/s), in this order; the phase at `--rate` sends
    /// `--updates` updates, every other `rate × 10 s` of them (at least 20, at most
    /// `--updates`). Default: `--rate`, then 5 and 100.
    #[arg(long, env = "HUBFED_BENCH_RATES", value_delimiter = ',')]
    pub rates: Vec<f64>,
    /// The controller under test: `hubfed` (hubfed-controller) or `kubefed` (KubeFed
    /// v0.10.0's controller-manager, built on demand by hack/build-kubefed.sh).
    #[arg(
        long,
        env = "HUBFED_BENCH_CONTROLLER_KIND",
        value_enum,
        default_value = "hubfed"
    )]
    pub controller: controller::ControllerKind,
    /// KubeFed's controller-manager binary (with `--controller kubefed`); default: built and
    /// cached by hack/build-kubefed.sh.
    #[arg(long, env = "HUBFED_BENCH_KUBEFED_BIN")]
    pub kubefed_bin: Option<PathBuf>,
    /// Length of the at-rest window, in seconds.
    #[arg(long, env = "HUBFED_BENCH_IDLE_SECONDS", default_value_t = 60)]
    pub idle_seconds: u64,
    /// Seconds to wait after the cold start has settled before the first latency phase (0:
    /// none), so that the members finish what the cold start left them (their watch caches,
    /// etcd's compaction) before latencies are measured.
    #[arg(long, env = "HUBFED_BENCH_PAUSE_SECONDS", default_value_t = 0)]
    pub pause_seconds: u64,
    /// Where result.json, result.md and the controller logs go.
    #[arg(long, env = "HUBFED_BENCH_OUTPUT_DIR", default_value = "target/bench")]
    pub output_dir: PathBuf,
    /// Federated namespaces the objects are spread over.
    #[arg(long, env = "HUBFED_BENCH_NAMESPACES", default_value_t = 4)]
    pub namespaces: usize,
    /// Raw apply limit: requests in flight across all members.
    #[arg(long, env = "HUBFED_BENCH_RAW_CONCURRENCY", default_value_t = 64)]
    pub raw_concurrency: usize,
    /// Raw apply limit: requests in flight per member (as the controller's default
    /// --member-write-concurrency).
    #[arg(long, env = "HUBFED_BENCH_RAW_PER_MEMBER", default_value_t = 16)]
    pub raw_per_member: usize,
    /// The controller's --member-write-concurrency.
    #[arg(
        long,
        env = "HUBFED_BENCH_MEMBER_WRITE_CONCURRENCY",
        default_value_t = 16
    )]
    pub member_write_concurrency: usize,
    /// The controller's --reconcile-concurrency.
    #[arg(long, env = "HUBFED_BENCH_RECONCILE_CONCURRENCY", default_value_t = 16)]
    pub reconcile_concurrency: u16,
    /// The controller binary; default: `hubfed-controller` next to this binary (build both
    /// with `--release`; `make bench` does).
    #[arg(long, env = "HUBFED_BENCH_CONTROLLER")]
    pub controller_bin: Option<PathBuf>,
    /// Run a kube-controller-manager per cluster too (Deployments then get ReplicaSets and
    /// Pods, which costs the API servers CPU unrelated to hubfed).
    #[arg(long, env = "HUBFED_BENCH_CONTROLLER_MANAGER", default_value_t = false, action = clap::ArgAction::Set)]
    pub controller_manager: bool,
    /// Restart the controller on the converged federation before the final check (phase 6).
    /// `false`: no restart (at the large-object variant's full size a new controller's first
    /// lists — every member object read from watch-cache-less API servers — can run this
    /// machine out of memory).
    #[arg(long, env = "HUBFED_BENCH_WARM_RESTART", default_value_t = true, action = clap::ArgAction::Set)]
    pub warm_restart: bool,
    /// Collect the copies' status into the federated objects (KubeFedConfig feature gate
    /// `RawResourceStatusCollection` and `statusCollection: Enabled` on every benchmarked
    /// type), to measure its hub writes; best with `--controller-manager true`, so that
    /// Deployments have a status.
    #[arg(long, env = "HUBFED_BENCH_REMOTE_STATUS", default_value_t = false, action = clap::ArgAction::Set)]
    pub remote_status: bool,
    /// Extra environment for the controller process, `KEY=VALUE`, repeatable (e.g.
    /// `MALLOC_ARENA_MAX=2` to see how much of its RSS is allocator arenas).
    #[arg(
        long = "controller-env",
        env = "HUBFED_BENCH_CONTROLLER_ENV",
        value_delimiter = ',',
        value_parser = parse_key_value
    )]
    pub controller_env: Vec<(String, String)>,
    /// Join every member in pull mode (`hubfedctl join --mode pull`) and run one
    /// `hubfed-agent` process per member; the controller delivers through `Work` objects.
    #[arg(long, env = "HUBFED_BENCH_PULL", default_value_t = false)]
    pub pull: bool,
    /// The agent binary (with `--pull`); default: `hubfed-agent` next to this binary (build
    /// it with `cargo build --release -p hubfed-controller --bins`; `make bench` does).
    #[arg(long, env = "HUBFED_BENCH_AGENT")]
    pub agent_bin: Option<PathBuf>,
    /// The agents' `--heartbeat-interval`, in seconds (with `--pull`).
    #[arg(
        long,
        env = "HUBFED_BENCH_AGENT_HEARTBEAT_SECONDS",
        default_value_t = 10
    )]
    pub agent_heartbeat_seconds: u64,
    /// Slow member: join the last member through a `DelayProxy` that holds every byte its
    /// API server sends to the controller this many milliseconds (0: off). The benchmark's
    /// own clients and the raw phase talk to it directly. Push mode only.
    #[arg(long, env = "HUBFED_BENCH_SLOW_MEMBER_MS", default_value_t = 0)]
    pub slow_member_ms: u64,
    /// Unmanaged objects: after the at-rest window, create this many unlabelled objects
    /// (half ConfigMaps, half Secrets) straight in member1's federated namespaces and measure
    /// the controller's memory per object once its `hubfed_unmanaged_objects` gauge shows
    /// them (0: off).
    #[arg(long, env = "HUBFED_BENCH_UNMANAGED", default_value_t = 0)]
    pub unmanaged: usize,
    /// Creates in flight for `--unmanaged`.
    #[arg(long, env = "HUBFED_BENCH_UNMANAGED_CONCURRENCY", default_value_t = 64)]
    pub unmanaged_concurrency: usize,
    /// Large objects: every ConfigMap and Secret template carries a value of this many bytes
    /// (Deployments keep their small template; 0: the default ~0.5 KiB objects). At most
    /// 1,000,000 (a ConfigMap's limit is 1 MiB).
    #[arg(long, env = "HUBFED_BENCH_OBJECT_BYTES", default_value_t = 0)]
    pub object_bytes: usize,
    /// Start the members' API servers with hubfed-testenv's light flags (fewer API groups,
    /// `GOGC=50`): for many members. (`--object-bytes` turns the members' watch cache off.)
    #[arg(long, env = "HUBFED_BENCH_LIGHT_MEMBERS", default_value_t = false)]
    pub light_members: bool,
    /// Put the clusters' directory (etcd's data, certificates, logs) in a fresh directory
    /// under this one instead of /dev/shm — for runs whose etcd would not fit in memory
    /// (raise etcd's quota with `HUBFED_ETCD_QUOTA_BYTES`, default 8 GiB). Removed at the
    /// end of a complete run.
    #[arg(long, env = "HUBFED_BENCH_ENV_DIR")]
    pub env_dir: Option<PathBuf>,
    /// Create the federated objects without hubfed's sync-finalizer admission webhook (the
    /// controller then writes each object's finalizer itself in the cold start, as KubeFed
    /// does). By default the webhook is served and registered as the chart does; never with
    /// `--controller kubefed`.
    #[arg(
        long,
        env = "HUBFED_BENCH_NO_ADMISSION_FINALIZER",
        default_value_t = false
    )]
    pub no_admission_finalizer: bool,
    /// Create and change the federated objects without hubfed's validating admission webhook
    /// for them (`/validate-federated`). By default it is served and registered as the chart
    /// does — every create and update of a `types.kubefed.io` object is validated, and the
    /// benchmark's template changes pay for it —; never with `--controller kubefed` (KubeFed
    /// validates no federated object).
    #[arg(
        long,
        env = "HUBFED_BENCH_NO_ADMISSION_VALIDATION",
        default_value_t = false
    )]
    pub no_admission_validation: bool,
    /// Multi-cluster services: after the raw phase, measure the MCS controller instead of the
    /// federated objects' phases (`--services` exported services; see docs/benchmarks.md).
    #[arg(long, env = "HUBFED_BENCH_MCS", default_value_t = false)]
    pub mcs: bool,
    /// Exported services (with `--mcs`), in the members' namespace `bench-mcs`.
    #[arg(long, env = "HUBFED_BENCH_SERVICES", default_value_t = 500)]
    pub services: usize,
    /// Members exporting each service (with `--mcs`): service i from members i, i+1, ….
    #[arg(long, env = "HUBFED_BENCH_EXPORTERS", default_value_t = 2)]
    pub exporters: usize,
    /// Endpoint changes in the MCS latency phase (one address of one source slice each).
    #[arg(long, env = "HUBFED_BENCH_ENDPOINT_CHANGES", default_value_t = 200)]
    pub endpoint_changes: usize,
    /// Endpoint changes per second in the MCS latency phase.
    #[arg(
        long,
        env = "HUBFED_BENCH_ENDPOINT_CHANGE_RATE",
        default_value_t = 20.0
    )]
    pub endpoint_change_rate: f64,
    /// Deadline of each wait (cluster start-up, cold start, settling), in seconds.
    #[arg(long, env = "HUBFED_BENCH_TIMEOUT_SECONDS", default_value_t = 1800)]
    pub timeout_seconds: u64,
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {text:?}"))
}

impl Args {
    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.members >= 1, "--members must be at least 1");
        anyhow::ensure!(self.objects >= 1, "--objects must be at least 1");
        anyhow::ensure!(self.namespaces >= 1, "--namespaces must be at least 1");
        anyhow::ensure!(
            self.updates >= 1 && self.updates <= self.objects,
            "--updates must be between 1 and --objects ({})",
            self.objects
        );
        anyhow::ensure!(
            self.rate > 0.0 && self.rate.is_finite(),
            "--rate must be positive"
        );
        anyhow::ensure!(
            self.rates.iter().all(|r| *r > 0.0 && r.is_finite()),
            "--rates must be positive"
        );
        if self.controller == controller::ControllerKind::Kubefed {
            anyhow::ensure!(
                !self.pull && !self.remote_status,
                "--pull and --remote-status are hubfed's: not with --controller kubefed"
            );
        }
        anyhow::ensure!(
            self.agent_heartbeat_seconds >= 1,
            "--agent-heartbeat-seconds must be at least 1"
        );
        if self.slow_member_ms > 0 {
            anyhow::ensure!(
                self.members >= 2 && !self.pull,
                "--slow-member-ms needs at least 2 members and push mode (no --pull)"
            );
        }
        anyhow::ensure!(
            self.object_bytes <= 1_000_000,
            "--object-bytes must stay at most 1,000,000 (a ConfigMap holds at most 1 MiB)"
        );
        anyhow::ensure!(
            self.unmanaged < 10_000_000,
            "--unmanaged must stay below 10,000,000 (names have 7 digits)"
        );
        if self.mcs {
            anyhow::ensure!(
                self.controller == controller::ControllerKind::Hubfed
                    && !self.pull
                    && self.slow_member_ms == 0,
                "--mcs measures hubfed's MCS controller over push members: not with --controller kubefed, --pull or --slow-member-ms"
            );
            anyhow::ensure!(
                (1..100_000).contains(&self.services),
                "--services must be between 1 and 99,999 (names have 5 digits)"
            );
            anyhow::ensure!(
                self.exporters >= 1 && self.exporters <= self.members,
                "--exporters must be between 1 and --members ({})",
                self.members
            );
            anyhow::ensure!(
                self.members < 255,
                "--mcs needs fewer than 255 members (one address octet each)"
            );
            anyhow::ensure!(
                self.endpoint_changes >= 1 && self.endpoint_changes / self.services < 190,
                "--endpoint-changes must be at least 1 and below 190 × --services (one address octet per round)"
            );
            anyhow::ensure!(
                self.endpoint_change_rate > 0.0 && self.endpoint_change_rate.is_finite(),
                "--endpoint-change-rate must be positive"
            );
        }
        anyhow::ensure!(
            self.objects < 100_000,
            "--objects must stay below 100,000 (object names have 5 digits)"
        );
        Ok(())
    }

    /// The latency phases: (updates per second, updates), in order.
    pub fn latency_runs(&self) -> Vec<(f64, usize)> {
        let mut rates = self.rates.clone();
        if rates.is_empty() {
            rates = vec![self.rate];
            rates.extend([5.0, 100.0].into_iter().filter(|r| *r != self.rate));
        }
        rates
            .into_iter()
            .map(|rate| {
                let updates = if rate == self.rate {
                    self.updates
                } else {
                    ((rate * 10.0).round() as usize).clamp(20.min(self.updates), self.updates)
                };
                (rate, updates)
            })
            .collect()
    }

    fn controller_binary(&self) -> anyhow::Result<PathBuf> {
        if self.controller == controller::ControllerKind::Kubefed {
            return kubefed::binary(self.kubefed_bin.as_ref());
        }
        let binary = match &self.controller_bin {
            Some(path) => path.clone(),
            None => std::env::current_exe()?
                .parent()
                .context("the benchmark binary has no directory")?
                .join("hubfed-controller"),
        };
        anyhow::ensure!(
            binary.is_file(),
            "{} is missing: build it with `cargo build --release -p hubfed-controller` (`make bench` does) or pass --controller-bin",
            binary.display()
        );
        Ok(binary)
    }
}

/// When the run began, for progress lines.
fn began() -> Instant {
    static BEGAN: OnceLock<Instant> = OnceLock::new();
    *BEGAN.get_or_init(Instant::now)
}

/// A progress line on stderr: `[  12.3s] what happened`.
pub fn progress(line: impl std::fmt::Display) {
    let _ = writeln!(
        std::io::stderr(),
        "[{:>7.1}s] {line}",
        began().elapsed().as_secs_f64()
    );
}

fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("compare") {
        return compare::main(std::env::args().skip(2).collect());
    }
    let args = Args::parse();
    args.validate()?;
    began();
    let controller = args.controller_binary()?;
    if args.object_bytes > 0 {
        workload::set_object_bytes(args.object_bytes);
    }
    let agent = if args.pull {
        Some(agents::binary(args.agent_bin.as_ref())?)
    } else {
        None
    };
    std::fs::create_dir_all(&args.output_dir)
        .with_context(|| format!("creating {}", args.output_dir.display()))?;
    // GOMAXPROCS stays unset: the API servers use every core, as they would in production.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(run::run(&args, controller, agent));
    result.write(&args.output_dir)?;
    let markdown = result.markdown();
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n{markdown}")?;
    writeln!(
        out,
        "results: {}, {}",
        args.output_dir.join("result.json").display(),
        args.output_dir.join("result.md").display()
    )?;
    drop(out);
    match result.error {
        Some(error) => Err(anyhow::anyhow!("the benchmark did not complete: {error}")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let mut argv = vec!["hubfed-bench"];
        argv.extend(extra);
        Args::parse_from(argv)
    }

    #[test]
    fn variants_are_off_by_default_and_validated() {
        let plain = args(&[]);
        assert_eq!(
            (
                plain.slow_member_ms,
                plain.unmanaged,
                plain.object_bytes,
                plain.light_members
            ),
            (0, 0, 0, false)
        );
        assert!(plain.validate().is_ok());
        let all = args(&[
            "--slow-member-ms",
            "500",
            "--unmanaged",
            "100000",
            "--object-bytes",
            "900000",
            "--light-members",
        ]);
        assert_eq!(
            (
                all.slow_member_ms,
                all.unmanaged,
                all.object_bytes,
                all.light_members
            ),
            (500, 100_000, 900_000, true)
        );
        assert!(all.validate().is_ok());
        assert!(
            args(&["--slow-member-ms", "500", "--members", "1"])
                .validate()
                .is_err()
        );
        assert!(
            args(&["--slow-member-ms", "500", "--pull"])
                .validate()
                .is_err()
        );
        assert!(args(&["--object-bytes", "2000000"]).validate().is_err());
        let mcs = args(&["--mcs"]);
        assert_eq!(
            (mcs.services, mcs.exporters, mcs.endpoint_changes),
            (500, 2, 200)
        );
        assert!(mcs.validate().is_ok());
        assert!(args(&["--mcs", "--pull"]).validate().is_err());
        assert!(
            args(&["--mcs", "--members", "2", "--exporters", "3"])
                .validate()
                .is_err()
        );
        assert!(args(&["--mcs", "--services", "0"]).validate().is_err());
    }

    #[test]
    fn latency_runs_default_to_the_rate_then_5_and_100() {
        assert_eq!(
            args(&[]).latency_runs(),
            vec![(20.0, 200), (5.0, 50), (100.0, 200)]
        );
        assert_eq!(
            args(&["--rate", "5", "--updates", "30"]).latency_runs(),
            vec![(5.0, 30), (100.0, 30)]
        );
        assert_eq!(
            args(&["--rates", "1,20"]).latency_runs(),
            vec![(1.0, 20), (20.0, 200)]
        );
        assert_eq!(
            args(&["--rates", "100", "--updates", "10", "--objects", "10"]).latency_runs(),
            vec![(100.0, 10)]
        );
    }
}
