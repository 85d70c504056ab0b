//! Health probes: a push member's `/healthz` and `/version`, a pull member's heartbeat Lease
//! in the hub; what they found, as [`ProbeOutcome`]s for the thresholds of
//! `hubfed_core::health`.

use std::time::Duration;

use hubfed_api::work::{AGENT_KUBERNETES_VERSION_ANNOTATION, AGENT_LEASE_NAME};
use hubfed_core::health::{ProbeOutcome, healthz_ok};
use hubfed_core::pull::{HeartbeatSeen, HeartbeatVerdict, heartbeat_verdict, observe_heartbeat};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::Api;
use tracing::debug;

use super::HealthCheckSettings;
use super::config::error_chain;

/// What a probe found: a push member's own answer, or a pull member's heartbeat Lease in the
/// hub (its `resourceVersion`, its lease duration and the Kubernetes version the agent
/// reports; `None` when there is no Lease yet).
pub(super) enum Probed {
    Member(ProbeOutcome),
    Heartbeat(Result<Option<HeartbeatLease>, HeartbeatReadError>),
}

/// Why the heartbeat Lease could not be read.
pub(super) enum HeartbeatReadError {
    /// The hub itself is in trouble (no answer, a server error, throttling): nothing is known
    /// of the member, and nothing is concluded — an overloaded hub must not turn every pull
    /// member Offline at once.
    Hub(String),
    /// The hub refused the read (RBAC, a missing namespace ...): a problem to show.
    Refused(String),
}

pub(super) struct HeartbeatLease {
    resource_version: String,
    duration: Option<Duration>,
    kubernetes_version: Option<String>,
}

/// Reads a pull member's heartbeat Lease in the hub, limited to `timeout`.
pub(super) async fn read_heartbeat(
    leases: &Api<Lease>,
    timeout: Duration,
) -> Result<Option<HeartbeatLease>, HeartbeatReadError> {
    let lease = match tokio::time::timeout(timeout, leases.get_opt(AGENT_LEASE_NAME)).await {
        Err(_) => {
            return Err(HeartbeatReadError::Hub(format!(
                "the hub did not answer within {}",
                format_duration(timeout)
            )));
        }
        Ok(Err(kube::Error::Api(status)))
            if hubfed_core::rollout::is_refusal(Some(status.code)) =>
        {
            return Err(HeartbeatReadError::Refused(status.message));
        }
        Ok(Err(error)) => return Err(HeartbeatReadError::Hub(error_chain(&error))),
        Ok(Ok(lease)) => lease,
    };
    Ok(lease.map(|lease| HeartbeatLease {
        resource_version: lease.resource_version().unwrap_or_default(),
        duration: lease
            .spec
            .as_ref()
            .and_then(|spec| spec.lease_duration_seconds)
            .and_then(|seconds| u64::try_from(seconds).ok())
            .map(Duration::from_secs),
        kubernetes_version: lease
            .annotations()
            .get(AGENT_KUBERNETES_VERSION_ANNOTATION)
            .cloned(),
    }))
}

/// A pull member's health from its heartbeat ([`heartbeat_verdict`]): renewed within the
/// Lease's duration (default: four probe periods) is healthy, otherwise unreachable with the
/// reason; `None` while a Lease has been seen only once (after a restart), or when the hub
/// itself did not answer — what was published stands. The thresholds then apply as to a push
/// member's probes.
pub(super) fn heartbeat_outcome(
    heartbeat: &mut Option<HeartbeatSeen>,
    lease: Result<Option<HeartbeatLease>, HeartbeatReadError>,
    settings: HealthCheckSettings,
) -> Option<ProbeOutcome> {
    let now_ms = u64::try_from(process_clock().elapsed().as_millis()).unwrap_or(u64::MAX);
    let lease = match lease {
        Ok(lease) => lease,
        Err(HeartbeatReadError::Hub(error)) => {
            debug!(%error, "cannot read a heartbeat: the hub is in trouble; no verdict");
            return None;
        }
        Err(HeartbeatReadError::Refused(error)) => {
            return Some(ProbeOutcome::Unreachable {
                error: format!("cannot read the agent's heartbeat in the hub: {error}"),
            });
        }
    };
    let duration = lease
        .as_ref()
        .and_then(|l| l.duration)
        .unwrap_or(settings.period * 4);
    if let Some(lease) = &lease {
        *heartbeat = Some(observe_heartbeat(
            heartbeat.as_ref(),
            &lease.resource_version,
            now_ms,
        ));
    }
    match heartbeat_verdict(heartbeat.as_ref(), duration, now_ms) {
        HeartbeatVerdict::Alive => Some(ProbeOutcome::Healthy {
            kubernetes_version: lease.and_then(|l| l.kubernetes_version),
        }),
        HeartbeatVerdict::Silent(error) => Some(ProbeOutcome::Unreachable { error }),
        HeartbeatVerdict::Unsettled => None,
    }
}

/// The monotonic clock heartbeats are timed on.
fn process_clock() -> &'static std::time::Instant {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now)
}

/// KubeFed's `GetClusterStatus`: `GET /healthz`, and `GET /version` when healthy, each
/// limited to `timeout`.
pub(super) async fn probe_cluster(client: &kube::Client, timeout: Duration) -> ProbeOutcome {
    let request = match http::Request::get("/healthz").body(Vec::new()) {
        Ok(request) => request,
        Err(error) => {
            return ProbeOutcome::Unreachable {
                error: error.to_string(),
            };
        }
    };
    match tokio::time::timeout(timeout, client.request_text(request)).await {
        Err(_) => ProbeOutcome::Unreachable {
            error: format!("no answer within {}", format_duration(timeout)),
        },
        Ok(Err(error)) => ProbeOutcome::Unreachable {
            error: error_chain(&error),
        },
        Ok(Ok(body)) if !healthz_ok(&body) => ProbeOutcome::NotOk,
        Ok(Ok(_)) => {
            let kubernetes_version =
                match tokio::time::timeout(timeout, client.apiserver_version()).await {
                    Ok(Ok(info)) => Some(info.git_version),
                    Ok(Err(error)) => {
                        debug!(error = %error_chain(&error), "cannot read member version");
                        None
                    }
                    Err(_) => None,
                };
            ProbeOutcome::Healthy { kubernetes_version }
        }
    }
}

/// Now, truncated to whole seconds: the API server stores `metav1.Time` with second
/// precision, and comparisons against what it returns must not differ in sub-seconds.
pub(super) fn now() -> Time {
    let now = k8s_openapi::jiff::Timestamp::now();
    Time(k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now))
}

fn format_duration(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_has_whole_seconds() {
        assert_eq!(now().0.subsec_nanosecond(), 0);
    }

    #[test]
    fn durations_format_for_messages() {
        assert_eq!(format_duration(Duration::from_secs(3)), "3s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }
}
