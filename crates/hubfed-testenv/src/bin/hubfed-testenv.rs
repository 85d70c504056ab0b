//! `hubfed-testenv up`: a hub and members on loopback for people (`make clusters-up`) and the
//! demo. Runs until SIGINT/SIGTERM, then stops every server.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use hubfed_testenv::{Scheduling, TestEnv, TestEnvConfig, kube_version};

#[derive(Parser)]
#[command(version, about = "Real Kubernetes clusters on loopback for hubfed")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a hub and members, write the kubeconfig, and run until interrupted.
    Up {
        /// Number of member clusters.
        #[arg(long, default_value_t = 2, env = "HUBFED_MEMBERS")]
        members: usize,
        /// Directory for certificates, logs, etcd data and the kubeconfig.
        #[arg(long, env = "HUBFED_TESTENV_DIR")]
        dir: PathBuf,
        /// Do not run kube-controller-manager.
        #[arg(long)]
        no_controller_manager: bool,
        /// Members run lighter API servers (fewer API groups, GOGC=50).
        #[arg(long, env = "HUBFED_LIGHT_MEMBERS")]
        light_members: bool,
        /// Members' API servers run without their watch cache (etcd serves lists and watches).
        #[arg(long, env = "HUBFED_NO_MEMBER_WATCH_CACHE")]
        no_member_watch_cache: bool,
        /// Members schedule pods: nodes, a kube-scheduler and a fake kubelet per member.
        #[arg(long, env = "HUBFED_SCHEDULING")]
        scheduling: bool,
        /// Nodes per member, with --scheduling.
        #[arg(
            long,
            default_value_t = 1,
            requires = "scheduling",
            env = "HUBFED_NODES_PER_MEMBER"
        )]
        nodes_per_member: usize,
        /// Pods one node takes, with --scheduling.
        #[arg(
            long,
            default_value_t = 10,
            requires = "scheduling",
            env = "HUBFED_PODS_PER_NODE"
        )]
        pods_per_node: u32,
    },
}

fn main() -> anyhow::Result<()> {
    let Command::Up {
        members,
        dir,
        no_controller_manager,
        light_members,
        no_member_watch_cache,
        scheduling,
        nodes_per_member,
        pods_per_node,
    } = Cli::parse().command;
    let scheduling = scheduling.then(|| Scheduling {
        nodes_per_member,
        pods_per_node,
        ..Scheduling::default()
    });
    std::fs::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;
    let env = TestEnv::start(TestEnvConfig {
        members,
        controller_manager: !no_controller_manager,
        dir: Some(dir.clone()),
        ready_timeout: Duration::from_secs(180),
        scheduling,
        light_members,
        member_watch_cache: !no_member_watch_cache,
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let names: Vec<&str> = env.clusters().iter().map(|c| c.name()).collect();
    println!(
        "clusters {} ({}) ready in {:.1}s",
        names.join(", "),
        kube_version(),
        env.startup_time().as_secs_f64()
    );
    let nodes: Vec<&str> = env
        .members()
        .iter()
        .flat_map(|m| m.nodes())
        .map(String::as_str)
        .collect();
    if !nodes.is_empty() {
        println!("nodes:      {}", nodes.join(", "));
    }
    println!("kubeconfig: {}", env.kubeconfig_path().display());
    println!("logs:       {}", dir.join("logs").display());
    std::fs::write(dir.join("ready"), format!("{}\n", std::process::id()))?;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        anyhow::Ok(())
    })?;
    println!("stopping clusters");
    let _ = std::fs::remove_file(dir.join("ready"));
    env.shutdown();
    Ok(())
}
