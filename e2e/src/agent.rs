//! `hubfed-agent` as a process for a pull-mode member of a test environment: started with
//! only its member's kubeconfig and what `hubfedctl join --mode pull` put in the member's
//! Secret `hubfed-agent-hub` (the hub kubeconfig bound to the cluster's work namespace, the
//! cluster's name, the control plane's identity) — as the Helm chart runs it.
//!
//! Its log is the environment's `logs/agent-<cluster>-<start>.log`; `HUBFED_E2E_AGENT_LOG` sets its
//! `RUST_LOG`. Build the binary first (`make e2e` does).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use hubfed_testenv::TestEnv;
use hubfed_testenv::process::{GuardedProcess, Spawn, alive};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use crate::KUBEFED_NAMESPACE;
use crate::controller::{free_port, process_env, spawn_guarded};

/// The member Secret `hubfedctl join --mode pull` writes for the agent.
pub const AGENT_HUB_SECRET: &str = "hubfed-agent-hub";

/// A running `hubfed-agent`.
pub struct AgentProcess {
    cluster: String,
    admin_port: u16,
    pid: u32,
    process: GuardedProcess,
}

/// The `hubfed-agent` binary next to the test binary's target directory.
pub fn agent_binary() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .context("target directory")?
        .join("hubfed-agent");
    ensure!(
        bin.is_file(),
        "{} is missing: build it first (`cargo build -p hubfed-controller --bins`; `make e2e` does)",
        bin.display()
    );
    Ok(bin)
}

/// What an agent is started with: its cluster's name, and its arguments — the hub kubeconfig
/// and the control plane's identity from the member's Secret `hubfed-agent-hub`, the member's
/// own kubeconfig — with both kubeconfigs written to `dir`.
pub struct AgentLaunch {
    pub cluster: String,
    pub args: Vec<String>,
}

impl AgentLaunch {
    /// Reads `member`'s agent Secret (as join wrote it) and prepares the arguments of its agent
    /// (heartbeat every `heartbeat` seconds, admin server on `admin_port`).
    pub async fn prepare(
        env: &TestEnv,
        member: &str,
        dir: &Path,
        heartbeat: u64,
        admin_port: u16,
    ) -> anyhow::Result<Self> {
        let member_cluster = env.cluster(member).context(member.to_owned())?;
        let secrets: Api<Secret> =
            Api::namespaced(member_cluster.client().await?, KUBEFED_NAMESPACE);
        let secret = secrets
            .get(AGENT_HUB_SECRET)
            .await
            .with_context(|| format!("{member}: secret {KUBEFED_NAMESPACE}/{AGENT_HUB_SECRET}"))?;
        let data = secret.data.unwrap_or_default();
        let field = |key: &str| -> anyhow::Result<String> {
            data.get(key)
                .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                .with_context(|| format!("{member}: no {key} in the agent's secret"))
        };
        let (cluster, control_plane) = (field("cluster")?, field("control-plane")?);
        std::fs::create_dir_all(dir)?;
        let hub_kubeconfig = dir.join("hub-kubeconfig");
        std::fs::write(&hub_kubeconfig, field("kubeconfig")?)?;
        let member_kubeconfig = dir.join("member-kubeconfig");
        let kubeconfig = member_cluster.kubeconfig()?;
        std::fs::write(&member_kubeconfig, serde_json::to_string(&kubeconfig)?)?;
        let args = vec![
            format!("--hub-kubeconfig={}", hub_kubeconfig.display()),
            format!("--kubeconfig={}", member_kubeconfig.display()),
            format!("--cluster={cluster}"),
            format!("--control-plane={control_plane}"),
            format!("--heartbeat-interval={heartbeat}"),
            format!("--admin-addr=127.0.0.1:{admin_port}"),
        ];
        Ok(Self { cluster, args })
    }
}

impl AgentProcess {
    /// Starts the agent of pull cluster `cluster` in `member` (a cluster of `env`), with a
    /// heartbeat every `heartbeat` seconds.
    pub async fn start(env: &TestEnv, member: &str, heartbeat: u64) -> anyhow::Result<Self> {
        // Each start its own guardian name and log: a guardian dropped later (the agent it
        // watched was killed) must not take a new agent's pid file for its own.
        static STARTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let start = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let admin_port = free_port()?;
        let dir = env.dir().join(format!("agent-{member}"));
        let AgentLaunch { cluster, args } =
            AgentLaunch::prepare(env, member, &dir, heartbeat, admin_port).await?;
        let pid_dir = env.dir().join("agent-pids");
        let (process, pid) = spawn_guarded(
            &format!("the agent of {cluster}"),
            Spawn {
                name: &format!("hubfed-agent-{cluster}-{start}"),
                program: &agent_binary()?,
                args,
                env: process_env("HUBFED_E2E_AGENT_LOG"),
                pid_dir: &pid_dir,
                log_file: env
                    .dir()
                    .join("logs")
                    .join(format!("agent-{cluster}-{start}.log")),
                grace_seconds: 10,
                outlive_others: false,
                remove_dir_after: None,
            },
        )?;
        Ok(Self {
            cluster,
            admin_port,
            pid,
            process,
        })
    }

    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    pub fn admin_port(&self) -> u16 {
        self.admin_port
    }

    pub fn is_alive(&self) -> bool {
        alive(Some(self.pid))
    }

    /// `kill -9`, and waits until the process is gone.
    pub async fn kill(&self) -> anyhow::Result<()> {
        self.process
            .signal("KILL")
            .with_context(|| format!("killing the agent of {}", self.cluster))?;
        let since = Instant::now();
        while self.is_alive() {
            if since.elapsed() > Duration::from_secs(10) {
                bail!("the agent of {} still runs 10s after SIGKILL", self.cluster);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }
}
