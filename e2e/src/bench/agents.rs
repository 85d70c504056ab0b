//! Pull mode (`--pull`): one `hubfed-agent` process per member, started from its release
//! binary with only its member's kubeconfig and what `hubfedctl join --mode pull` put in the
//! member's Secret `hubfed-agent-hub` — as `e2e/src/agent.rs` starts it for the tests, but
//! from the benchmark's binary directory (`target/release`), with its pid (for `/proc`) and
//! its `/metrics` (the agent counts its member requests as the controller does, in
//! `hubfed_member_operations_total`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use hubfed_e2e::agent::AgentLaunch;
use hubfed_e2e::controller::{process_env, spawn_guarded};
use hubfed_e2e::http_get;
use hubfed_testenv::TestEnv;
use hubfed_testenv::process::{GuardedProcess, Spawn};

use super::controller::{Metrics, wait_unchanged};
use super::procstat;

/// A running agent.
pub struct AgentProcess {
    process: GuardedProcess,
    pub cluster: String,
    pub pid: u32,
    pub admin_port: u16,
}

impl AgentProcess {
    /// Starts the agent of pull member `member` (a cluster of `env`), its log in `log_dir`.
    pub async fn start(
        env: &TestEnv,
        binary: &Path,
        member: &str,
        heartbeat_seconds: u64,
        log_dir: &Path,
    ) -> anyhow::Result<Self> {
        let admin_port = hubfed_testenv::free_port()?;
        let dir = env.dir().join(format!("bench-agent-{member}"));
        let AgentLaunch { cluster, args } =
            AgentLaunch::prepare(env, member, &dir, heartbeat_seconds, admin_port).await?;
        let pid_dir = env.dir().join("bench-pids");
        let (process, pid) = spawn_guarded(
            &format!("the agent of {cluster}"),
            Spawn {
                name: &format!("hubfed-agent-{cluster}"),
                program: binary,
                args,
                env: process_env("HUBFED_BENCH_AGENT_LOG"),
                pid_dir: &pid_dir,
                log_file: log_dir.join(format!("agent-{cluster}.log")),
                grace_seconds: 10,
                outlive_others: false,
                remove_dir_after: None,
            },
        )?;
        Ok(Self {
            process,
            cluster,
            pid,
            admin_port,
        })
    }

    pub fn rss(&self) -> u64 {
        procstat::status_bytes(self.pid, "VmRSS").unwrap_or(0)
    }

    pub fn peak_rss(&self) -> u64 {
        procstat::status_bytes(self.pid, "VmHWM").unwrap_or(0)
    }
}

/// The agents of every pull member.
#[derive(Default)]
pub struct Agents(pub Vec<AgentProcess>);

impl Agents {
    /// Starts one agent per member of `members`.
    pub async fn start(
        env: &TestEnv,
        binary: &Path,
        members: &[String],
        heartbeat_seconds: u64,
        log_dir: &Path,
    ) -> anyhow::Result<Self> {
        let mut agents = Vec::new();
        for member in members {
            agents
                .push(AgentProcess::start(env, binary, member, heartbeat_seconds, log_dir).await?);
        }
        Ok(Self(agents))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn pids(&self) -> Vec<u32> {
        self.0.iter().map(|a| a.pid).collect()
    }

    /// Fails with the end of its log when an agent has exited.
    pub fn ensure_running(&self) -> anyhow::Result<()> {
        for agent in &self.0 {
            anyhow::ensure!(
                agent.process.is_alive(),
                "the agent of {} exited; last log lines:\n{}",
                agent.cluster,
                agent.process.log_tail(30)
            );
        }
        Ok(())
    }

    /// Every agent's RSS now, in bytes, in member order.
    pub fn rss(&self) -> Vec<u64> {
        self.0.iter().map(AgentProcess::rss).collect()
    }

    pub fn peak_rss(&self) -> Vec<u64> {
        self.0.iter().map(AgentProcess::peak_rss).collect()
    }

    /// The agents' metrics together (the series of every agent; sums add up).
    pub async fn metrics(&self) -> anyhow::Result<Metrics> {
        let mut text = String::new();
        for agent in &self.0 {
            let (status, body) = http_get(agent.admin_port, "/metrics")
                .await
                .with_context(|| format!("scraping the /metrics of {}'s agent", agent.cluster))?;
            anyhow::ensure!(
                status == 200,
                "{}'s agent: /metrics answered {status}",
                agent.cluster
            );
            text.push_str(&body);
            text.push('\n');
        }
        Ok(Metrics::parse(&text))
    }

    /// Waits until the agents' member requests stay unchanged for `quiet` (they carry out
    /// works after the controller has written them). Returns how long that took.
    pub async fn wait_quiet(&self, quiet: Duration, timeout: Duration) -> anyhow::Result<Duration> {
        let failure = "the agents did not go quiet";
        wait_unchanged(failure, quiet, timeout, async || {
            self.ensure_running()?;
            let requests: f64 = self.metrics().await?.member_operations().values().sum();
            Ok((requests, false))
        })
        .await
    }

    /// Stops every agent (SIGTERM, all at once) and waits for them.
    pub fn stop(self) {
        let mut agents = self.0;
        for agent in &mut agents {
            agent.process.begin_stop();
        }
        for mut agent in agents {
            agent.process.stop();
        }
    }
}

/// `hubfed-agent` next to the benchmark binary (`target/release`), or `explicit`.
pub fn binary(explicit: Option<&PathBuf>) -> anyhow::Result<PathBuf> {
    let binary = match explicit {
        Some(path) => path.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("the benchmark binary has no directory")?
            .join("hubfed-agent"),
    };
    anyhow::ensure!(
        binary.is_file(),
        "{} is missing: build it with `cargo build --release -p hubfed-controller --bins` (`make bench` does) or pass --agent-bin",
        binary.display()
    );
    Ok(binary)
}
