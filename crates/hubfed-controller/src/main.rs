//! `hubfed-controller`: the hubfed control plane.

use std::path::PathBuf;

use clap::Parser;
use hubfed_controller::{ControllerConfig, run_with};
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
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    init_logging(&args.log_format);
    match serve(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "hubfed-controller stopped");
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube_runtime=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn serve(args: Args) -> anyhow::Result<()> {
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
    let health = std::sync::Arc::new(hubfed_controller::admin::Health::default());
    let admin = tokio::spawn(hubfed_controller::admin::serve(
        args.admin_addr,
        std::sync::Arc::clone(&health),
        shutdown.clone(),
    ));
    let webhook = args.webhook_cert_dir.clone().map(|dir| {
        tokio::spawn(hubfed_controller::webhook::serve(
            args.webhook_addr,
            dir,
            args.kubefed_namespace.clone(),
            shutdown.clone(),
        ))
    });
    let config = ControllerConfig {
        leader_elect: args.leader_elect,
        identity: args.identity,
        kubefed_namespace: args.kubefed_namespace,
        member_write_concurrency: args.member_write_concurrency,
        reconcile_concurrency: args.reconcile_concurrency,
    };
    let controller = run_with(client, config, health, shutdown.clone());
    tokio::pin!(controller);
    let result = tokio::select! {
        result = &mut controller => result,
        served = admin => match served {
            // The admin server ends first on a normal shutdown: let the controllers finish.
            Ok(Ok(())) if shutdown.is_cancelled() => controller.await,
            Ok(Ok(())) => Err(anyhow::anyhow!("the admin server stopped")),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(e.into()),
        },
    };
    shutdown.cancel();
    if let Some(webhook) = webhook {
        match webhook.await {
            Ok(Err(e)) => tracing::error!(error = %format!("{e:#}"), "webhook server failed"),
            Err(e) => tracing::error!(error = %e, "webhook server task failed"),
            Ok(Ok(())) => {}
        }
    }
    result
}
