//! The cluster registry: KubeFedClusters, their credentials, health and clients.
//!
//! [`MemberClientPool`] watches the KubeFedClusters of the KubeFed namespace and the Secrets
//! holding their tokens, keeps one client per cluster, probes every cluster's health and
//! publishes it in the KubeFedCluster status as KubeFed's cluster controller does
//! (docs/kubefed-compatibility.md §1.3, §2.6). Decisions live in `hubfed_core::health` and `config`; only `pool`
//! does IO. `tls` builds the clients: the members' (HTTP/2 watches, idle connections closed,
//! single TLS checks skipped for `disabledTLSValidations`) and the hub's (HTTP/2).

mod config;
mod pool;
mod probe;
mod tls;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hubfed_api::duration::parse_go_duration;
use hubfed_api::kubefedconfig::{
    DEFAULT_HEALTH_CHECK_FAILURE_THRESHOLD, DEFAULT_HEALTH_CHECK_PERIOD,
    DEFAULT_HEALTH_CHECK_SUCCESS_THRESHOLD, DEFAULT_HEALTH_CHECK_TIMEOUT, KubeFedConfigSpec,
};
use tokio::sync::Semaphore;

pub use pool::MemberClientPool;
pub use tls::hub_client;

/// One registered member cluster as the sync controllers see it.
pub struct MemberCluster {
    pub name: String,
    /// The KubeFedCluster's labels (placement selectors match on them).
    pub labels: BTreeMap<String, String>,
    /// KubeFed's notion: a `Ready=True` condition is present in the KubeFedCluster status
    /// (as the registry publishes it, after the health thresholds).
    pub ready: bool,
    /// Unix seconds since which `ready` has been what it is (the `Ready` condition's
    /// `lastTransitionTime` when the registry started, else when this process saw it change).
    pub ready_since: Option<i64>,
    /// `syncMode: Pull`: no client; its work goes through Works in the hub, to its agent.
    pub pull: bool,
    /// Built from apiEndpoint, caBundle, the token Secret, proxyURL and TLS settings;
    /// `None` when the configuration is malformed. Requests time out when the member stops
    /// answering (connect 10s, silence 60s); use [`Self::watch_client`] for watches.
    pub client: Option<kube::Client>,
    /// The same member connection settings without a read timeout, for long-lived watches
    /// (kube-runtime's watcher has its own idle timeout). `None` exactly when `client` is.
    pub watch_client: Option<kube::Client>,
    /// Changes whenever the clients are rebuilt (spec or Secret change); watches started
    /// with an older id use stale credentials or endpoints.
    pub client_id: usize,
    /// Bounds concurrent writes to this member; kept across client rebuilds.
    pub writes: Arc<Semaphore>,
}

/// KubeFedConfig `spec.clusterHealthCheck`, resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthCheckSettings {
    /// How often every cluster is probed.
    pub period: Duration,
    /// Limit of each probe request (`/healthz`, then `/version`).
    pub timeout: Duration,
    /// Consecutive failed probes before a ready cluster is published as not ready.
    pub failure_threshold: u32,
    /// Consecutive healthy probes before an unready cluster is published as ready.
    pub success_threshold: u32,
}

impl Default for HealthCheckSettings {
    fn default() -> Self {
        Self {
            period: default_duration(DEFAULT_HEALTH_CHECK_PERIOD, 10),
            timeout: default_duration(DEFAULT_HEALTH_CHECK_TIMEOUT, 3),
            failure_threshold: threshold(None, DEFAULT_HEALTH_CHECK_FAILURE_THRESHOLD),
            success_threshold: threshold(None, DEFAULT_HEALTH_CHECK_SUCCESS_THRESHOLD),
        }
    }
}

impl HealthCheckSettings {
    /// Reads `clusterHealthCheck`; unset, unparsable or non-positive values take KubeFed's
    /// defaults (10s, 3s, 3, 1), which is what KubeFed's validation would have enforced.
    pub fn from_config(spec: &KubeFedConfigSpec) -> Self {
        let defaults = Self::default();
        let Some(health) = spec.cluster_health_check.as_ref() else {
            return defaults;
        };
        let duration = |value: Option<&String>, default: Duration| {
            value
                .and_then(|v| parse_go_duration(v).ok())
                .filter(|d| !d.is_zero())
                .unwrap_or(default)
        };
        Self {
            period: duration(health.period.as_ref(), defaults.period),
            timeout: duration(health.timeout.as_ref(), defaults.timeout),
            failure_threshold: threshold(
                health.failure_threshold,
                DEFAULT_HEALTH_CHECK_FAILURE_THRESHOLD,
            ),
            success_threshold: threshold(
                health.success_threshold,
                DEFAULT_HEALTH_CHECK_SUCCESS_THRESHOLD,
            ),
        }
    }
}

fn default_duration(value: &str, fallback_secs: u64) -> Duration {
    parse_go_duration(value).unwrap_or(Duration::from_secs(fallback_secs))
}

fn threshold(value: Option<i64>, default: i64) -> u32 {
    value
        .filter(|v| *v > 0)
        .or(Some(default))
        .and_then(|v| u32::try_from(v).ok())
        .unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hubfed_api::federatedtypeconfig::ResourceScope;
    use hubfed_api::kubefedconfig::ClusterHealthCheckConfig;

    #[test]
    fn health_settings_default_like_kubefed() {
        let expected = HealthCheckSettings {
            period: Duration::from_secs(10),
            timeout: Duration::from_secs(3),
            failure_threshold: 3,
            success_threshold: 1,
        };
        assert_eq!(HealthCheckSettings::default(), expected);
        let defaulted = KubeFedConfigSpec::with_defaults(ResourceScope::Cluster);
        assert_eq!(HealthCheckSettings::from_config(&defaulted), expected);
        let mut bare = defaulted.clone();
        bare.cluster_health_check = None;
        assert_eq!(HealthCheckSettings::from_config(&bare), expected);
    }

    #[test]
    fn health_settings_read_config_and_reject_nonsense() {
        let mut spec = KubeFedConfigSpec::with_defaults(ResourceScope::Cluster);
        spec.cluster_health_check = Some(ClusterHealthCheckConfig {
            period: Some("1m30s".to_owned()),
            failure_threshold: Some(5),
            success_threshold: Some(2),
            timeout: Some("500ms".to_owned()),
        });
        assert_eq!(
            HealthCheckSettings::from_config(&spec),
            HealthCheckSettings {
                period: Duration::from_secs(90),
                timeout: Duration::from_millis(500),
                failure_threshold: 5,
                success_threshold: 2,
            }
        );
        spec.cluster_health_check = Some(ClusterHealthCheckConfig {
            period: Some("soon".to_owned()),
            failure_threshold: Some(0),
            success_threshold: Some(-1),
            timeout: Some("0".to_owned()),
        });
        assert_eq!(
            HealthCheckSettings::from_config(&spec),
            HealthCheckSettings::default()
        );
    }
}
