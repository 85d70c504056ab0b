//! `hubfed-testenv up`: a hub and members on loopback for people (`make clusters-up`) and the
//! demo. Runs until SIGINT/SIGTERM, then stops every server.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use hubfed_testenv::{TestEnv, TestEnvConfig, kube_version};

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
    },
}

fn main() -> anyhow::Result<()> {
    let Command::Up {
        members,
        dir,
        no_controller_manager,
    } = Cli::parse().command;
    std::fs::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;
    let env = TestEnv::start(TestEnvConfig {
        members,
        controller_manager: !no_controller_manager,
        dir: Some(dir.clone()),
        ready_timeout: Duration::from_secs(180),
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let names: Vec<&str> = env.clusters().iter().map(|c| c.name()).collect();
    println!(
        "clusters {} ({}) ready in {:.1}s",
        names.join(", "),
        kube_version(),
        env.startup_time().as_secs_f64()
    );
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
