//! `hubfed-agent`: the agent of a pull-mode member. It runs in (or beside) its member with
//! two credentials: its member's, and the hub credential `hubfedctl join --mode pull` gave it,
//! which reaches nothing but the cluster's work namespace in the hub.
//!
//! - It renews its heartbeat Lease in the hub ([`heartbeat`]): the hub's registry reads the
//!   member's health from it.
//! - It carries out each [`Work`] (the hub's plan for one member object) with the push
//!   dispatcher's own code ([`crate::sync::execute`]) and reports the result and the copy it
//!   left in the work's status ([`works`]).
//! - It watches its copies and reports changes (drift, deletions, readiness): the hub plans
//!   again on each ([`copies`]).
//! - With `--mcs` (the default) it takes its member's part in multi-cluster services
//!   ([`crate::mcs::agent`]): it reports the member's exports and carries out its import
//!   works.
//! - It deletes nothing on its own: a copy the hub wants gone while the agent was away comes
//!   as a tombstone work; one that names no copy is checked against the live copy first
//!   ([`hubfed_core::pull::delete_guard`]: only this control plane's managed copies).

mod copies;
mod heartbeat;
mod works;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::admin::Health;

/// The pull-mode member agent.
#[derive(Parser, Debug)]
#[command(
    name = "hubfed-agent",
    version,
    about = "hubfed's pull-mode member agent"
)]
pub struct Args {
    /// Kubeconfig for the hub, as `hubfedctl join --mode pull` wrote it (Secret
    /// `hubfed-agent-hub`, key `kubeconfig`).
    #[arg(long, env = "HUBFED_AGENT_HUB_KUBECONFIG")]
    pub hub_kubeconfig: PathBuf,
    /// The cluster's name in the hub (Secret `hubfed-agent-hub`, key `cluster`).
    #[arg(long, env = "HUBFED_AGENT_CLUSTER")]
    pub cluster: String,
    /// Kubeconfig for the member; default: $KUBECONFIG, ~/.kube/config, then in-cluster.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The member's KubeFed namespace: the agent's own; nothing in it is ever collected.
    #[arg(long, env = "HUBFED_AGENT_KUBEFED_NAMESPACE", default_value = hubfed_api::names::DEFAULT_KUBEFED_NAMESPACE)]
    pub kubefed_namespace: String,
    /// This control plane's identity, the UID of its namespace in the hub (Secret
    /// `hubfed-agent-hub`, key `control-plane`): a tombstone that names no copy deletes only a
    /// copy that carries it. Without it, such tombstones delete nothing.
    #[arg(long, env = "HUBFED_AGENT_CONTROL_PLANE")]
    pub control_plane: Option<String>,
    /// Seconds between heartbeats; the Lease's duration is four of them.
    #[arg(long, env = "HUBFED_AGENT_HEARTBEAT_INTERVAL", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub heartbeat_interval: u64,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "HUBFED_AGENT_ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    pub admin_addr: SocketAddr,
    /// Field managers whose changes to copies are people's and are reverted as drift (as the
    /// controller's `--drift-revert-managers`; a trailing `*` matches any suffix).
    #[arg(
        long,
        env = "HUBFED_AGENT_DRIFT_REVERT_MANAGERS",
        value_delimiter = ',',
        default_value = "kubectl,kubectl-*"
    )]
    pub drift_revert_managers: Vec<String>,
    /// Take part in multi-cluster services: report the member's ServiceExports to the hub and
    /// carry out its import works (needs the control plane's identity).
    #[arg(long, env = "HUBFED_AGENT_MCS", default_value_t = true, action = clap::ArgAction::Set)]
    pub mcs: bool,
    /// The ClusterSet's name, the hub's KubeFed namespace: the member's `clusterset.k8s.io`
    /// ClusterProperty, written when absent.
    #[arg(long, env = "HUBFED_AGENT_CLUSTER_SET", default_value = hubfed_api::names::DEFAULT_KUBEFED_NAMESPACE)]
    pub cluster_set: String,
    /// Log format: `plain` or `json`.
    #[arg(long, env = "HUBFED_LOG_FORMAT", default_value = "plain", value_parser = ["plain", "json"])]
    pub log_format: String,
}

/// Everything the agent's tasks share.
pub struct Agent {
    pub cluster: String,
    /// The cluster's work namespace in the hub.
    pub work_namespace: String,
    pub hub: kube::Client,
    pub member: kube::Client,
    pub kubefed_namespace: String,
    pub control_plane: Option<String>,
    pub heartbeat_interval: Duration,
    pub drift_people: Vec<String>,
    pub(crate) copies: copies::Copies,
}

/// Parses the flags, runs the agent until SIGTERM or Ctrl-C, and exits with its code.
pub fn main() {
    let args = Args::parse();
    crate::process::init_logging(&args.log_format);
    let runtime = crate::process::runtime();
    let code = runtime.block_on(async {
        match serve(args).await {
            Ok(()) => 0,
            Err(e) => {
                error!("{e:#}");
                eprintln!("error: {e:#}");
                1
            }
        }
    });
    std::process::exit(code)
}

async fn clients(args: &Args) -> anyhow::Result<(kube::Client, kube::Client)> {
    let hub = Kubeconfig::read_from(&args.hub_kubeconfig).map_err(|e| {
        anyhow::anyhow!(
            "cannot read the hub kubeconfig {}: {e}",
            args.hub_kubeconfig.display()
        )
    })?;
    let hub = kube::Config::from_custom_kubeconfig(hub, &KubeConfigOptions::default()).await?;
    let member = match &args.kubeconfig {
        Some(path) => {
            let config = Kubeconfig::read_from(path).map_err(|e| {
                anyhow::anyhow!("cannot read the member kubeconfig {}: {e}", path.display())
            })?;
            kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    Ok((
        crate::clusters::hub_client(&hub)?,
        kube::Client::try_from(member)?,
    ))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    if args.cluster.trim().is_empty() {
        anyhow::bail!("--cluster is empty: the agent needs its cluster's name in the hub");
    }
    let (hub, member) = clients(&args).await?;
    let shutdown = CancellationToken::new();
    crate::process::handle_signals(shutdown.clone())?;
    let agent = Arc::new(Agent {
        work_namespace: hubfed_core::pull::cluster_namespace(&args.cluster),
        cluster: args.cluster,
        hub,
        member: member.clone(),
        kubefed_namespace: args.kubefed_namespace,
        control_plane: args.control_plane.filter(|c| !c.is_empty()),
        heartbeat_interval: Duration::from_secs(args.heartbeat_interval),
        drift_people: args.drift_revert_managers,
        copies: copies::Copies::new(member.clone()),
    });
    info!(cluster = %agent.cluster, work_namespace = %agent.work_namespace, "hubfed-agent starting");
    let health = Arc::new(Health::default());
    let admin = tokio::spawn(crate::admin::serve(
        args.admin_addr,
        Arc::clone(&health),
        shutdown.clone(),
    ));
    match (args.mcs, &agent.control_plane) {
        (true, Some(control_plane)) => {
            let settings = crate::mcs::agent::AgentMcs {
                cluster: agent.cluster.clone(),
                work_namespace: agent.work_namespace.clone(),
                hub: agent.hub.clone(),
                member: member.clone(),
                control_plane: control_plane.clone(),
                cluster_set: args.cluster_set.clone(),
                page_size: crate::settings::DEFAULT_MEMBER_LIST_PAGE_SIZE,
            };
            tokio::spawn(crate::mcs::agent::run(settings, shutdown.clone()));
        }
        (true, None) => warn!(
            "multi-cluster services are off: the agent has no control-plane identity \
             (--control-plane, key control-plane of secret hubfed-agent-hub)"
        ),
        (false, _) => {}
    }
    let (trigger_tx, trigger_rx) = tokio::sync::mpsc::unbounded_channel();
    agent
        .copies
        .start(trigger_tx, &agent.work_namespace, shutdown.clone());
    let beat = tokio::spawn(heartbeat::run(Arc::clone(&agent), shutdown.clone()));
    tokio::spawn(crate::hub_crds::report(
        agent.hub.clone(),
        &crate::hub_crds::HubCrd::AGENT,
        shutdown.clone(),
    ));
    works::run(Arc::clone(&agent), health, trigger_rx, shutdown.clone()).await;
    shutdown.cancel();
    let _ = beat.await;
    match admin.await {
        Ok(Err(e)) => Err(e),
        _ => Ok(()),
    }
}
