//! The admin HTTP server: `/metrics`, `/healthz`, `/readyz`.

use std::future::IntoFuture as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::metrics::METRICS;

/// What `/readyz` reports: ready once leadership is settled and, on the leader, the caches
/// have synced.
#[derive(Default)]
pub struct Health {
    ready: AtomicBool,
}

impl Health {
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

async fn metrics() -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        METRICS.render(),
    )
}

async fn readyz(State(health): State<Arc<Health>>) -> impl IntoResponse {
    if health.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

pub fn router(health: Arc<Health>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(health)
}

/// Once asked to stop, how long an HTTP server (admin, webhooks) waits for requests in
/// flight before it closes their connections.
pub const HTTP_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves the admin endpoints until `shutdown`: then it stops accepting connections and
/// closes the open ones once their requests are answered, or after [`HTTP_DRAIN_TIMEOUT`].
pub async fn serve(
    addr: SocketAddr,
    health: Arc<Health>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} for the admin server: {e}"))?;
    tracing::info!(%addr, "admin server listening (/metrics, /healthz, /readyz)");
    let server = axum::serve(listener, router(health))
        .with_graceful_shutdown(shutdown.clone().cancelled_owned())
        .into_future();
    let drain_limit = async {
        shutdown.cancelled().await;
        tokio::time::sleep(HTTP_DRAIN_TIMEOUT).await;
    };
    tokio::select! {
        served = server => served?,
        () = drain_limit => tracing::warn!(
            "admin server: connections still open {}s after shutdown; closing them",
            HTTP_DRAIN_TIMEOUT.as_secs()
        ),
    }
    Ok(())
}
