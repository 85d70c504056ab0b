//! `KubeFedConfig` (`core.kubefed.io/v1beta1`, docs/kubefed-compatibility.md §1.4): control-plane
//! settings, one object named `kubefed` in the KubeFed namespace. Durations are Go duration strings
//! (`"20s"`, `"1m0s"`); read them with [`crate::duration::parse_go_duration`].

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::federatedtypeconfig::{EnabledDisabled, ResourceScope};

/// Control-plane settings. Every field but `scope` is optional on the wire; unset fields take
/// KubeFed's defaults.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "core.kubefed.io",
    version = "v1beta1",
    kind = "KubeFedConfig",
    namespaced,
    derive = "PartialEq",
    doc = "Settings of the federation control plane; one object named `kubefed` in the KubeFed namespace."
)]
#[serde(rename_all = "camelCase")]
pub struct KubeFedConfigSpec {
    /// `Namespaced` restricts the control plane to the KubeFed namespace. Immutable.
    pub scope: ResourceScope,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_duration: Option<DurationConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_elect: Option<LeaderElectConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feature_gates: Vec<FeatureGatesConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_health_check: Option<ClusterHealthCheckConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_controller: Option<SyncControllerConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_controller: Option<StatusControllerConfig>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DurationConfig {
    /// Wait before reconciling everything after a cluster becomes ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_delay: Option<String>,
    /// Wait before reconciling everything after a cluster becomes unready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_delay: Option<String>,
    /// Limit for informer caches to sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_sync_timeout: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaderElectConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_deadline: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_period: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::condition::optional_enum_schema::<ResourceLockType>")]
    pub resource_lock: Option<ResourceLockType>,
}

/// Object kind used as the leader-election lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ResourceLockType {
    Configmaps,
    Endpoints,
}

/// `featureGates[].configuration`.
pub type ConfigurationMode = EnabledDisabled;
/// `syncController.adoptResources`.
pub type ResourceAdoption = EnabledDisabled;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FeatureGatesConfig {
    /// `PushReconciler`, `RawResourceStatusCollection` or `SchedulerPreferences`.
    pub name: String,
    pub configuration: ConfigurationMode,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterHealthCheckConfig {
    /// How often every cluster is probed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
    /// Consecutive failures before a ready cluster is reported unready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_threshold: Option<i64>,
    /// Consecutive successes before an unready cluster is reported ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_threshold: Option<i64>,
    /// Timeout of one probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncControllerConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_reconciles: Option<i64>,
    /// Whether pre-existing member objects are taken over instead of reported `AlreadyExists`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::condition::optional_enum_schema::<ResourceAdoption>")]
    pub adopt_resources: Option<ResourceAdoption>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusControllerConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_reconciles: Option<i64>,
}

/// Feature gate: run the sync controllers (propagation at all).
pub const FEATURE_PUSH_RECONCILER: &str = "PushReconciler";
/// Feature gate: copy member `.status` into `status.clusters[].remoteStatus`.
pub const FEATURE_RAW_RESOURCE_STATUS_COLLECTION: &str = "RawResourceStatusCollection";
/// Feature gate: run the ReplicaSchedulingPreference controller.
pub const FEATURE_SCHEDULER_PREFERENCES: &str = "SchedulerPreferences";

/// The feature gates KubeFed v0.10.0 knows, with their defaults, sorted by name.
pub const FEATURE_GATES: &[(&str, ConfigurationMode)] = &[
    (FEATURE_PUSH_RECONCILER, EnabledDisabled::Enabled),
    (
        FEATURE_RAW_RESOURCE_STATUS_COLLECTION,
        EnabledDisabled::Disabled,
    ),
    (FEATURE_SCHEDULER_PREFERENCES, EnabledDisabled::Enabled),
];

// Defaults as KubeFed's webhook writes them (Go `time.Duration.String()`).
pub const DEFAULT_AVAILABLE_DELAY: &str = "20s";
pub const DEFAULT_UNAVAILABLE_DELAY: &str = "1m0s";
pub const DEFAULT_CACHE_SYNC_TIMEOUT: &str = "5m0s";
pub const DEFAULT_LEASE_DURATION: &str = "15s";
pub const DEFAULT_RENEW_DEADLINE: &str = "10s";
pub const DEFAULT_RETRY_PERIOD: &str = "5s";
pub const DEFAULT_HEALTH_CHECK_PERIOD: &str = "10s";
pub const DEFAULT_HEALTH_CHECK_TIMEOUT: &str = "3s";
pub const DEFAULT_HEALTH_CHECK_FAILURE_THRESHOLD: i64 = 3;
pub const DEFAULT_HEALTH_CHECK_SUCCESS_THRESHOLD: i64 = 1;
pub const DEFAULT_MAX_CONCURRENT_RECONCILES: i64 = 1;

impl KubeFedConfigSpec {
    /// A fully defaulted spec, what KubeFed creates when no `kubefed` config exists.
    pub fn with_defaults(scope: ResourceScope) -> Self {
        let mut spec = Self {
            scope,
            controller_duration: None,
            leader_elect: None,
            feature_gates: Vec::new(),
            cluster_health_check: None,
            sync_controller: None,
            status_controller: None,
        };
        spec.apply_defaults();
        spec
    }

    /// KubeFed's `SetDefaultKubeFedConfig`: fill every unset field; append the known feature
    /// gates that are missing and sort all gates by name.
    pub fn apply_defaults(&mut self) {
        let durations = self
            .controller_duration
            .get_or_insert_with(Default::default);
        default_str(&mut durations.available_delay, DEFAULT_AVAILABLE_DELAY);
        default_str(&mut durations.unavailable_delay, DEFAULT_UNAVAILABLE_DELAY);
        default_str(
            &mut durations.cache_sync_timeout,
            DEFAULT_CACHE_SYNC_TIMEOUT,
        );

        let election = self.leader_elect.get_or_insert_with(Default::default);
        election
            .resource_lock
            .get_or_insert(ResourceLockType::Configmaps);
        default_str(&mut election.retry_period, DEFAULT_RETRY_PERIOD);
        default_str(&mut election.renew_deadline, DEFAULT_RENEW_DEADLINE);
        default_str(&mut election.lease_duration, DEFAULT_LEASE_DURATION);

        for (name, configuration) in FEATURE_GATES {
            if !self.feature_gates.iter().any(|gate| gate.name == *name) {
                self.feature_gates.push(FeatureGatesConfig {
                    name: (*name).to_owned(),
                    configuration: *configuration,
                });
            }
        }
        // Stable sort, like Go's sort.Slice on distinct names; keeps duplicates in order.
        self.feature_gates.sort_by(|a, b| a.name.cmp(&b.name));

        let health = self
            .cluster_health_check
            .get_or_insert_with(Default::default);
        default_str(&mut health.period, DEFAULT_HEALTH_CHECK_PERIOD);
        default_str(&mut health.timeout, DEFAULT_HEALTH_CHECK_TIMEOUT);
        health
            .failure_threshold
            .get_or_insert(DEFAULT_HEALTH_CHECK_FAILURE_THRESHOLD);
        health
            .success_threshold
            .get_or_insert(DEFAULT_HEALTH_CHECK_SUCCESS_THRESHOLD);

        let sync = self.sync_controller.get_or_insert_with(Default::default);
        sync.max_concurrent_reconciles
            .get_or_insert(DEFAULT_MAX_CONCURRENT_RECONCILES);
        sync.adopt_resources.get_or_insert(EnabledDisabled::Enabled);

        self.status_controller
            .get_or_insert_with(Default::default)
            .max_concurrent_reconciles
            .get_or_insert(DEFAULT_MAX_CONCURRENT_RECONCILES);
    }

    /// Whether the named feature gate is on, falling back to its default when not listed.
    pub fn feature_enabled(&self, name: &str) -> bool {
        self.feature_gates
            .iter()
            .find(|gate| gate.name == name)
            .map(|gate| gate.configuration)
            .or_else(|| {
                FEATURE_GATES
                    .iter()
                    .find(|(known, _)| *known == name)
                    .map(|(_, default)| *default)
            })
            .is_some_and(EnabledDisabled::is_enabled)
    }
}

fn default_str(value: &mut Option<String>, default: &str) {
    if value.is_none() {
        *value = Some(default.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_defaults_matches_kubefed() {
        let spec = KubeFedConfigSpec::with_defaults(ResourceScope::Namespaced);
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "scope": "Namespaced",
                "controllerDuration": {
                    "availableDelay": "20s",
                    "unavailableDelay": "1m0s",
                    "cacheSyncTimeout": "5m0s",
                },
                "leaderElect": {
                    "leaseDuration": "15s",
                    "renewDeadline": "10s",
                    "retryPeriod": "5s",
                    "resourceLock": "configmaps",
                },
                "featureGates": [
                    {"name": "PushReconciler", "configuration": "Enabled"},
                    {"name": "RawResourceStatusCollection", "configuration": "Disabled"},
                    {"name": "SchedulerPreferences", "configuration": "Enabled"},
                ],
                "clusterHealthCheck": {
                    "period": "10s",
                    "failureThreshold": 3,
                    "successThreshold": 1,
                    "timeout": "3s",
                },
                "syncController": {"maxConcurrentReconciles": 1, "adoptResources": "Enabled"},
                "statusController": {"maxConcurrentReconciles": 1},
            })
        );
    }

    #[test]
    fn apply_defaults_keeps_set_values_and_sorts_gates() {
        let mut spec: KubeFedConfigSpec = serde_json::from_value(serde_json::json!({
            "scope": "Cluster",
            "controllerDuration": {"availableDelay": "1s"},
            "leaderElect": {"resourceLock": "endpoints"},
            "featureGates": [{"name": "SchedulerPreferences", "configuration": "Disabled"}],
            "syncController": {"adoptResources": "Disabled"},
        }))
        .unwrap();
        spec.apply_defaults();
        let durations = spec.controller_duration.as_ref().unwrap();
        assert_eq!(durations.available_delay.as_deref(), Some("1s"));
        assert_eq!(durations.unavailable_delay.as_deref(), Some("1m0s"));
        assert_eq!(
            spec.leader_elect.as_ref().unwrap().resource_lock,
            Some(ResourceLockType::Endpoints)
        );
        let gates: Vec<(&str, ConfigurationMode)> = spec
            .feature_gates
            .iter()
            .map(|g| (g.name.as_str(), g.configuration))
            .collect();
        assert_eq!(
            gates,
            [
                ("PushReconciler", EnabledDisabled::Enabled),
                ("RawResourceStatusCollection", EnabledDisabled::Disabled),
                ("SchedulerPreferences", EnabledDisabled::Disabled),
            ]
        );
        assert!(!spec.feature_enabled(FEATURE_SCHEDULER_PREFERENCES));
        let sync = spec.sync_controller.as_ref().unwrap();
        assert_eq!(sync.adopt_resources, Some(EnabledDisabled::Disabled));
        assert_eq!(sync.max_concurrent_reconciles, Some(1));
    }

    #[test]
    fn default_durations_parse() {
        for value in [
            DEFAULT_AVAILABLE_DELAY,
            DEFAULT_UNAVAILABLE_DELAY,
            DEFAULT_CACHE_SYNC_TIMEOUT,
            DEFAULT_LEASE_DURATION,
            DEFAULT_RENEW_DEADLINE,
            DEFAULT_RETRY_PERIOD,
            DEFAULT_HEALTH_CHECK_PERIOD,
            DEFAULT_HEALTH_CHECK_TIMEOUT,
        ] {
            assert!(crate::duration::parse_go_duration(value).is_ok(), "{value}");
        }
    }
}
