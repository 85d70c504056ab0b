//! A controller a test starts itself, beside [`crate::Federation::shared`]'s (which runs for
//! the whole test binary):
//!
//! - [`ControllerTask`]: `hubfed_controller::run` as a task of the test's runtime, with a
//!   client and configuration of the test's choosing, stopped by the test;
//! - [`ControllerProcess`]: `hubfed-controller` as a process against a test environment's
//!   hub: what a test needs to start, signal, kill and watch one (failover, shutdown and
//!   fault-injection tests).
//!
//! Each process runs under a [`GuardedProcess`]: it cannot outlive the test. Its log is in
//! the environment's `logs/controller-<name>.log`; `HUBFED_E2E_CONTROLLER_LOG` sets its
//! `RUST_LOG`. Build the binary first (`make e2e` does).

use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use hubfed_controller::ControllerConfig;
use hubfed_testenv::TestEnv;
use hubfed_testenv::process::{GuardedProcess, Spawn, alive};
use kube::Client;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{http_get, report};

/// How long [`ControllerTask::stop`] waits for the controller to stop.
const STOP_WAIT: Duration = Duration::from_secs(30);

/// `hubfed_controller::run` as a task of the calling runtime.
pub struct ControllerTask {
    what: String,
    shutdown: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

impl ControllerTask {
    /// Runs the controller with `hub` (its client: an admin's, or a ServiceAccount's) and
    /// `config`; `what` names it in messages ("the controller running as ...").
    pub fn spawn(what: &str, hub: Client, config: ControllerConfig) -> Self {
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(hubfed_controller::run(hub, config, shutdown.clone()));
        Self {
            what: what.to_owned(),
            shutdown,
            task,
        }
    }

    /// Awaits `wait`, failing at once if the controller stops first.
    pub async fn while_running<T>(
        &mut self,
        wait: impl Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        tokio::select! {
            result = wait => result,
            exit = &mut self.task => bail!("{} stopped: {exit:?}", self.what),
        }
    }

    /// Asks the controller to stop and waits for it: fails if it runs on for 30 s; else what
    /// it returned (a panic as an error).
    pub async fn stop(mut self) -> anyhow::Result<anyhow::Result<()>> {
        self.shutdown.cancel();
        match tokio::time::timeout(STOP_WAIT, &mut self.task).await {
            Ok(exit) => Ok(exit.unwrap_or_else(|e| Err(e.into()))),
            Err(_) => bail!(
                "{} did not stop within {}s of being asked to",
                self.what,
                STOP_WAIT.as_secs()
            ),
        }
    }
}

/// How a controller process is started.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// `--identity`, also the name of its log file.
    pub identity: String,
    /// `--leader-elect`.
    pub leader_elect: bool,
    /// Seconds from the guardian's SIGTERM to its SIGKILL when the test ends with the
    /// process still running.
    pub grace_seconds: u32,
    /// A kubeconfig whose context `hub` reaches the hub another way (through a fault proxy);
    /// `None`: the environment's.
    pub kubeconfig: Option<PathBuf>,
}

impl ControllerOptions {
    /// A replica with leader election, as deployed.
    pub fn replica(identity: &str) -> Self {
        Self {
            identity: identity.to_owned(),
            leader_elect: true,
            grace_seconds: 20,
            kubeconfig: None,
        }
    }

    /// The only controller, without leader election: it works from its first second, so a
    /// test can restart it many times without waiting for a Lease.
    pub fn single(identity: &str) -> Self {
        Self {
            leader_elect: false,
            ..Self::replica(identity)
        }
    }
}

/// Writes `path`: a kubeconfig whose context `hub` reaches `server` (its serving certificate
/// verified by `ca_pem`) as `user` with `token`, for [`ControllerOptions::kubeconfig`].
pub fn token_kubeconfig(
    path: &Path,
    server: &str,
    ca_pem: &str,
    user: &str,
    token: &str,
) -> anyhow::Result<()> {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let config = serde_json::json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "hub",
        "clusters": [{"name": "hub", "cluster": {
            "server": server, "certificate-authority-data": ca,
        }}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "hub", "context": {"cluster": "hub", "user": user}}],
    });
    std::fs::write(path, serde_json::to_string(&config)?)
        .with_context(|| format!("writing {}", path.display()))
}

/// A running (or exited, not yet reaped) `hubfed-controller` process.
pub struct ControllerProcess {
    identity: String,
    admin_port: u16,
    pid: u32,
    process: GuardedProcess,
}

/// The `hubfed-controller` binary next to the test binary's target directory.
pub fn controller_binary() -> anyhow::Result<PathBuf> {
    // Tests run from target/<profile>/deps/; binaries live in target/<profile>/.
    let exe = std::env::current_exe()?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .context("target directory")?
        .join("hubfed-controller");
    ensure!(
        bin.is_file(),
        "{} is missing: build it first (`cargo build -p hubfed-controller`; `make e2e` does)",
        bin.display()
    );
    Ok(bin)
}

/// A loopback port nobody listens on now ([`hubfed_testenv::free_port`]).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(hubfed_testenv::free_port()?)
}

impl ControllerProcess {
    /// Starts `hubfed-controller` against `env`'s hub (kubeconfig context `hub`).
    pub fn start(env: &TestEnv, options: &ControllerOptions) -> anyhow::Result<Self> {
        Self::start_with_flags(env, options, &[])
    }

    /// [`Self::start`] with more flags (`--mcs-endpoint-ttl=5s`), after the harness's own.
    pub fn start_with_flags(
        env: &TestEnv,
        options: &ControllerOptions,
        flags: &[&str],
    ) -> anyhow::Result<Self> {
        let identity = &options.identity;
        let admin_port = free_port()?;
        let pid_dir = env.dir().join("controller-pids");
        let (process, pid) = spawn_guarded(
            &options.identity,
            Spawn {
                name: &format!("hubfed-controller-{identity}"),
                program: &controller_binary()?,
                args: vec![
                    format!(
                        "--kubeconfig={}",
                        options
                            .kubeconfig
                            .as_deref()
                            .unwrap_or(env.kubeconfig_path())
                            .display()
                    ),
                    "--context=hub".to_owned(),
                    format!("--admin-addr=127.0.0.1:{admin_port}"),
                    format!("--leader-elect={}", options.leader_elect),
                    format!("--identity={identity}"),
                ]
                .into_iter()
                .chain(flags.iter().map(|flag| (*flag).to_owned()))
                .collect(),
                env: process_env("HUBFED_E2E_CONTROLLER_LOG"),
                pid_dir: &pid_dir,
                log_file: log_path(env, identity),
                grace_seconds: options.grace_seconds,
                outlive_others: false,
                remove_dir_after: None,
            },
        )?;
        Ok(Self {
            identity: identity.clone(),
            admin_port,
            pid,
            process,
        })
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    pub fn admin_port(&self) -> u16 {
        self.admin_port
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn is_alive(&self) -> bool {
        alive(Some(self.pid))
    }

    /// Sends `signal` (`TERM`, `KILL`, `STOP`, ...) to the process.
    pub fn signal(&self, signal: &str) -> anyhow::Result<()> {
        self.process
            .signal(signal)
            .with_context(|| format!("signalling {} with SIG{signal}", self.identity))
    }

    /// `kill -9`, and waits until the process is gone: a crash at whatever it was doing.
    pub async fn kill(&self) -> anyhow::Result<()> {
        self.signal("KILL")?;
        self.wait_exit(Instant::now(), Duration::from_secs(10))
            .await
            .map(|_| ())
    }

    /// Waits for the process to exit, until `wait` after `since` (when a signal was sent);
    /// returns its exit status.
    pub async fn wait_exit(&self, since: Instant, wait: Duration) -> anyhow::Result<ExitStatus> {
        while self.is_alive() {
            if since.elapsed() > wait {
                bail!(
                    "{} still runs {}s after the signal; last log lines:\n{}",
                    self.identity,
                    wait.as_secs(),
                    self.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        exit_status(self.pid)
    }

    pub fn log_file(&self) -> &Path {
        self.process.log_file()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// The admin endpoint's `/metrics` text; `None` while it does not answer.
    pub async fn metrics(&self) -> Option<String> {
        scrape(self.admin_port).await
    }

    /// `hubfed_leader` as this process reports it.
    pub async fn leader_flag(&self) -> Option<f64> {
        sample(&self.metrics().await?, "hubfed_leader", &[])
    }

    /// The sum of `hubfed_member_operations_total` over `operations` (all clusters and
    /// results) as this process reports it.
    pub async fn member_operations(&self, operations: &[&str]) -> Option<f64> {
        let metrics = self.metrics().await?;
        Some(
            operations
                .iter()
                .filter_map(|op| {
                    let label = format!("operation=\"{op}\"");
                    sample(&metrics, "hubfed_member_operations_total", &[&label])
                })
                .sum(),
        )
    }
}

/// Starts `spawn` under a [`GuardedProcess`] (its pid directory created if missing): the
/// process and its pid; fails with the end of its log when it did not start (`what` names it).
pub fn spawn_guarded(what: &str, spawn: Spawn<'_>) -> anyhow::Result<(GuardedProcess, u32)> {
    std::fs::create_dir_all(spawn.pid_dir)?;
    let process = GuardedProcess::spawn(spawn)?;
    let pid = process
        .pid()
        .with_context(|| format!("{what} did not start; log:\n{}", process.log_tail(20)))?;
    Ok((process, pid))
}

/// The tracing filter of a hubfed process a test starts: the variable `log_var`, else
/// `info,kube_runtime=warn`.
pub fn log_filter(log_var: &str) -> String {
    std::env::var(log_var).unwrap_or_else(|_| "info,kube_runtime=warn".to_owned())
}

/// The environment of a hubfed process a test starts: `RUST_LOG` ([`log_filter`] of `log_var`),
/// no colours in its log.
pub fn process_env(log_var: &str) -> Vec<(&'static str, String)> {
    vec![
        ("RUST_LOG", log_filter(log_var)),
        ("NO_COLOR", "1".to_owned()),
    ]
}

/// The log file of controller process `identity` in `env`.
fn log_path(env: &TestEnv, identity: &str) -> PathBuf {
    env.dir().join(format!("logs/controller-{identity}.log"))
}

/// The end of each named controller process's log in `env`, to stderr (the test log is all
/// CI keeps): for a test that failed.
pub fn print_logs(env: &TestEnv, identities: &[&str]) {
    for identity in identities {
        let path = log_path(env, identity);
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = &lines[lines.len().saturating_sub(60)..];
        report(format_args!(
            "--- last {} lines of {} ---\n{}",
            tail.len(),
            path.display(),
            tail.join("\n")
        ));
    }
}

/// The `/metrics` text of the admin endpoint on loopback port `admin_port`; `None` while it
/// does not answer.
pub async fn scrape(admin_port: u16) -> Option<String> {
    http_get(admin_port, "/metrics").await.map(|(_, body)| body)
}

/// The member writes hubfed makes, as `hubfed_member_operations_total` names them.
pub const MEMBER_WRITES: [&str; 4] = ["create", "update", "delete", "remove_label"];

/// The sum of the samples `name{labels} value` whose series contains every one of `parts`
/// (`name value` when the metric has no labels); `None` when there is none.
pub fn sample(metrics: &str, name: &str, parts: &[&str]) -> Option<f64> {
    metrics
        .lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|line| parts.iter().all(|part| line.contains(part)))
        .filter_map(|line| line.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
        .reduce(|a, b| a + b)
}

/// The exit status of a process that has exited but is not reaped yet — its guardian reaps it
/// only when told to stop — from field 52 of `/proc/<pid>/stat` (proc(5)), as waitpid(2)
/// reports it.
pub fn exit_status(pid: u32) -> anyhow::Result<ExitStatus> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("process {pid} was reaped before its exit status was read"))?;
    // Fields after the command name, which is in parentheses, start with field 3.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let raw: i32 = fields
        .get(52 - 3)
        .with_context(|| format!("no exit_code field in /proc/{pid}/stat"))?
        .parse()?;
    Ok(ExitStatus::from_raw(raw))
}
