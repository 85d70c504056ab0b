//! A real API server behind a [`DelayProxy`]: TLS passes through (the cluster's certificate
//! verifies against the proxy's 127.0.0.1 address), every answer arrives at least the delay
//! late with the same body, and `set_delay` takes effect on an open connection.

use std::time::{Duration, Instant};

use hubfed_testenv::{TestEnv, TestEnvConfig};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};

const DELAY: Duration = Duration::from_millis(300);

async fn readyz(client: &kube::Client) -> anyhow::Result<(String, Duration)> {
    let began = Instant::now();
    let body = client
        .request_text(http::Request::get("/readyz").body(Vec::new())?)
        .await?;
    Ok((body, began.elapsed()))
}

#[test]
fn an_api_server_through_a_delay_proxy() -> anyhow::Result<()> {
    let env = TestEnv::start(TestEnvConfig {
        members: 0,
        controller_manager: false,
        ..TestEnvConfig::default()
    })?;
    let hub = env.hub();
    let proxy = hub.delay_proxy(DELAY)?;
    assert_eq!(proxy.target().port(), hub.port());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let direct = hub.client().await?;
            let delayed = hub.client_via(&proxy.url()).await?;
            let (body, fast) = readyz(&direct).await?;
            // The first request through the proxy also pays for the TLS handshake (one more
            // round trip); the second one reuses the connection.
            for _ in 0..2 {
                let (delayed_body, took) = readyz(&delayed).await?;
                assert_eq!(delayed_body, body);
                assert!(took >= DELAY, "/readyz through the proxy took {took:?}");
            }
            let began = Instant::now();
            let direct_ns = Api::<Namespace>::all(direct)
                .list(&ListParams::default())
                .await?;
            let delayed_ns = Api::<Namespace>::all(delayed.clone())
                .list(&ListParams::default())
                .await?;
            assert!(began.elapsed() >= DELAY);
            let names = |l: &kube::api::ObjectList<Namespace>| -> Vec<String> {
                l.items
                    .iter()
                    .filter_map(|n| n.metadata.name.clone())
                    .collect()
            };
            assert_eq!(names(&delayed_ns), names(&direct_ns));
            assert!(names(&delayed_ns).contains(&"kube-system".to_string()));

            proxy.set_delay(Duration::ZERO);
            let (_, after) = readyz(&delayed).await?;
            assert!(
                after < DELAY,
                "after set_delay(0) /readyz took {after:?} (directly {fast:?})"
            );
            anyhow::Ok(())
        })
}
