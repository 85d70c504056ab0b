//! `hubfed-controller`: the hubfed control plane.

use std::path::PathBuf;

use clap::Parser;
use hubfed_controller::{ControllerConfig, run};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio_util::sync::CancellationToken;

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
    /// Log format.
    #[arg(long, env = "HUBFED_LOG_FORMAT", value_parser = ["plain", "json"], default_value = "plain")]
    log_format: String,
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
    Ok(kube::Client::try_from(config)?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube_runtime=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if args.log_format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
    let client = hub_client(&args).await?;
    let shutdown = CancellationToken::new();
    tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(term) => term,
                    Err(_) => return,
                };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            tracing::info!("shutting down");
            shutdown.cancel();
        }
    });
    let config = ControllerConfig {
        kubefed_namespace: args.kubefed_namespace,
        member_write_concurrency: args.member_write_concurrency,
        reconcile_concurrency: args.reconcile_concurrency,
    };
    run(client, config, shutdown).await
}
