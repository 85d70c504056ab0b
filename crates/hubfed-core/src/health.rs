//! Cluster health decisions (docs/kubefed-compatibility.md §2.6): what a probe means, when a changed
//! result is published (thresholds), the conditions KubeFed writes for it, and whether the status
//! on the hub (its conditions, version, region and zones) needs a write at all.

use hubfed_api::condition::ConditionStatus;
use hubfed_api::kubefedcluster::{
    ClusterCondition, ClusterConditionReason, ClusterConditionType, KubeFedClusterStatus,
    MESSAGE_CLUSTER_NOT_REACHABLE, MESSAGE_CLUSTER_REACHABLE, MESSAGE_CONFIG_MALFORMED,
    MESSAGE_HEALTHZ_NOT_OK, MESSAGE_HEALTHZ_OK,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::dns::ClusterTopology;

/// The result of one health probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// `/healthz` answered `ok`; `kubernetes_version` is `/version`'s `gitVersion` when that
    /// call succeeded too.
    Healthy { kubernetes_version: Option<String> },
    /// `/healthz` answered, but not `ok`.
    NotOk,
    /// `/healthz` failed (connection, TLS, timeout, or an error status).
    Unreachable { error: String },
    /// No client could be built.
    ConfigMalformed,
}

impl ProbeOutcome {
    /// KubeFed's readiness: only a healthy probe yields `Ready=True`.
    pub fn is_ready(&self) -> bool {
        matches!(self, Self::Healthy { .. })
    }

    /// `status.kubernetesVersion` for this outcome: set only while ready.
    pub fn kubernetes_version(&self) -> Option<&str> {
        match self {
            Self::Healthy { kubernetes_version } => kubernetes_version.as_deref(),
            _ => None,
        }
    }

    /// `(type, status, reason, message)` of every condition KubeFed writes for this outcome,
    /// in KubeFed's order.
    fn condition_templates(
        &self,
    ) -> Vec<(
        ClusterConditionType,
        ConditionStatus,
        ClusterConditionReason,
        String,
    )> {
        use ClusterConditionReason as Reason;
        use ClusterConditionType as Type;
        use ConditionStatus as Status;
        match self {
            Self::Healthy { .. } => vec![(
                Type::Ready,
                Status::True,
                Reason::ClusterReady,
                MESSAGE_HEALTHZ_OK.to_owned(),
            )],
            Self::NotOk => vec![
                (
                    Type::Ready,
                    Status::False,
                    Reason::ClusterNotReady,
                    MESSAGE_HEALTHZ_NOT_OK.to_owned(),
                ),
                (
                    Type::Offline,
                    Status::False,
                    Reason::ClusterReachable,
                    MESSAGE_CLUSTER_REACHABLE.to_owned(),
                ),
            ],
            Self::Unreachable { error } => vec![(
                Type::Offline,
                Status::True,
                Reason::ClusterNotReachable,
                format!("{MESSAGE_CLUSTER_NOT_REACHABLE}: {error}"),
            )],
            Self::ConfigMalformed => vec![(
                Type::ConfigMalformed,
                Status::True,
                Reason::ClusterConfigMalformed,
                MESSAGE_CONFIG_MALFORMED.to_owned(),
            )],
        }
    }
}

/// The probe body KubeFed accepts as healthy: `ok`, compared case-insensitively, untrimmed.
pub fn healthz_ok(body: &str) -> bool {
    body.eq_ignore_ascii_case("ok")
}

/// Publishes a probe result whose readiness differs from the published one only after
/// `threshold` consecutive such results (`failureThreshold` towards unready,
/// `successThreshold` towards ready). Results with the published readiness are published at
/// once (e.g. `Offline` → `/healthz` not ok) and reset the count.
///
/// KubeFed's `thresholdAdjustedClusterStatus` counts probes since the last published change
/// instead, so a long-ready cluster flips on its first failure; this implements the
/// documented intent.
#[derive(Clone, Debug, Default)]
pub struct HealthTracker {
    published: Option<ProbeOutcome>,
    /// Consecutive results whose readiness differs from the published one.
    contrary: u32,
}

impl HealthTracker {
    /// The currently published outcome, `None` before the first probe.
    pub fn published(&self) -> Option<&ProbeOutcome> {
        self.published.as_ref()
    }

    /// Feeds one probe result; returns the outcome to publish now.
    pub fn observe(
        &mut self,
        outcome: ProbeOutcome,
        failure_threshold: u32,
        success_threshold: u32,
    ) -> &ProbeOutcome {
        let published = match self.published.take() {
            // The first result after start or after a new client is published as is.
            None => outcome,
            Some(previous) if previous.is_ready() == outcome.is_ready() => {
                self.contrary = 0;
                merge_same_readiness(previous, outcome)
            }
            Some(previous) => {
                self.contrary = self.contrary.saturating_add(1);
                let threshold = if outcome.is_ready() {
                    success_threshold
                } else {
                    failure_threshold
                };
                if self.contrary >= threshold.max(1) {
                    self.contrary = 0;
                    outcome
                } else {
                    previous
                }
            }
        };
        self.published.insert(published)
    }
}

/// A healthy probe whose `/version` call failed keeps the version already known.
fn merge_same_readiness(previous: ProbeOutcome, outcome: ProbeOutcome) -> ProbeOutcome {
    match (previous, outcome) {
        (
            ProbeOutcome::Healthy {
                kubernetes_version: Some(known),
            },
            ProbeOutcome::Healthy {
                kubernetes_version: None,
            },
        ) => ProbeOutcome::Healthy {
            kubernetes_version: Some(known),
        },
        (_, outcome) => outcome,
    }
}

/// The conditions to publish for `outcome`, probed at `probe_time`. A condition keeps its
/// `lastTransitionTime` from `previous` when a condition of the same type had the same
/// status there; otherwise it transitions at `probe_time`.
pub fn desired_conditions(
    outcome: &ProbeOutcome,
    previous: &[ClusterCondition],
    probe_time: &Time,
) -> Vec<ClusterCondition> {
    outcome
        .condition_templates()
        .into_iter()
        .map(|(type_, status, reason, message)| {
            let last_transition_time = previous
                .iter()
                .find(|p| p.type_ == type_.as_str() && p.status == status.as_str())
                .and_then(|p| p.last_transition_time.clone())
                .unwrap_or_else(|| probe_time.clone());
            ClusterCondition {
                type_: type_.as_str().to_owned(),
                status: status.as_str().to_owned(),
                last_probe_time: probe_time.clone(),
                last_transition_time: Some(last_transition_time),
                reason: Some(reason.as_str().to_owned()),
                message: Some(message),
            }
        })
        .collect()
}

/// Whether the hub's status differs from the desired one in anything but `lastProbeTime`:
/// its conditions, its version, and its region and zones when `topology` is known (`None`
/// leaves them to people). KubeFed rewrote the status every period; hubfed writes only real
/// changes.
pub fn status_needs_write(
    current: Option<&KubeFedClusterStatus>,
    conditions: &[ClusterCondition],
    kubernetes_version: Option<&str>,
    topology: Option<&ClusterTopology>,
) -> bool {
    let Some(current) = current else {
        return true;
    };
    if topology.is_some_and(|topology| topology_needs_write(Some(current), topology)) {
        return true;
    }
    let current_version = current
        .kubernetes_version
        .as_deref()
        .filter(|v| !v.is_empty());
    if current_version != kubernetes_version.filter(|v| !v.is_empty()) {
        return true;
    }
    current.conditions.len() != conditions.len()
        || current
            .conditions
            .iter()
            .zip(conditions)
            .any(|(have, want)| !same_beyond_probe_time(have, want))
}

fn same_beyond_probe_time(a: &ClusterCondition, b: &ClusterCondition) -> bool {
    a.type_ == b.type_
        && a.status == b.status
        && a.reason == b.reason
        && a.message == b.message
        && a.last_transition_time == b.last_transition_time
}

/// The merge patch for the status subresource. Conditions replace the list wholesale;
/// `kubernetesVersion: null` removes a version once the cluster is no longer ready. Region and
/// zones are written only when `topology` is known.
pub fn status_patch(
    conditions: &[ClusterCondition],
    kubernetes_version: Option<&str>,
    topology: Option<&ClusterTopology>,
) -> serde_json::Value {
    let mut patch = serde_json::json!({
        "status": {
            "conditions": conditions,
            "kubernetesVersion": kubernetes_version,
        }
    });
    if let Some(topology) = topology {
        patch["status"]["region"] = serde_json::json!(topology.region);
        patch["status"]["zones"] = serde_json::json!(topology.zones);
    }
    patch
}

/// Whether the hub's `region` or `zones` differ from `topology` (an empty region is none).
pub fn topology_needs_write(
    current: Option<&KubeFedClusterStatus>,
    topology: &ClusterTopology,
) -> bool {
    let region = current
        .and_then(|status| status.region.as_deref())
        .filter(|region| !region.is_empty());
    let zones = current.map_or(&[][..], |status| status.zones.as_slice());
    region != topology.region.as_deref() || zones != topology.zones.as_slice()
}

/// The merge patch that writes only `region` and `zones`, for a change of the nodes between
/// probes: the conditions stay as they are.
pub fn topology_patch(topology: &ClusterTopology) -> serde_json::Value {
    serde_json::json!({
        "status": {
            "region": topology.region,
            "zones": topology.zones,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(second).unwrap())
    }

    fn healthy(version: Option<&str>) -> ProbeOutcome {
        ProbeOutcome::Healthy {
            kubernetes_version: version.map(str::to_owned),
        }
    }

    fn unreachable(error: &str) -> ProbeOutcome {
        ProbeOutcome::Unreachable {
            error: error.to_owned(),
        }
    }

    #[test]
    fn healthz_body_match_is_case_insensitive_and_exact() {
        assert!(healthz_ok("ok"));
        assert!(healthz_ok("OK"));
        assert!(healthz_ok("Ok"));
        assert!(!healthz_ok("ok\n"));
        assert!(!healthz_ok("[-]etcd failed"));
        assert!(!healthz_ok(""));
    }

    #[test]
    fn first_result_is_published_immediately() {
        let mut tracker = HealthTracker::default();
        assert_eq!(tracker.published(), None);
        assert_eq!(tracker.observe(unreachable("x"), 3, 1), &unreachable("x"));
        let mut tracker = HealthTracker::default();
        assert_eq!(tracker.observe(healthy(None), 3, 5), &healthy(None));
    }

    #[test]
    fn failure_threshold_needs_consecutive_failures() {
        let mut tracker = HealthTracker::default();
        tracker.observe(healthy(Some("v1")), 3, 1);
        for _ in 0..10 {
            tracker.observe(healthy(Some("v1")), 3, 1);
        }
        // A long-ready cluster still needs three failures in a row.
        assert!(tracker.observe(unreachable("a"), 3, 1).is_ready());
        assert!(tracker.observe(ProbeOutcome::NotOk, 3, 1).is_ready());
        assert_eq!(tracker.observe(unreachable("b"), 3, 1), &unreachable("b"));
    }

    #[test]
    fn an_intervening_success_resets_the_failure_count() {
        let mut tracker = HealthTracker::default();
        tracker.observe(healthy(None), 3, 1);
        tracker.observe(unreachable("a"), 3, 1);
        tracker.observe(unreachable("a"), 3, 1);
        assert!(tracker.observe(healthy(None), 3, 1).is_ready());
        assert!(tracker.observe(unreachable("a"), 3, 1).is_ready());
        assert!(tracker.observe(unreachable("a"), 3, 1).is_ready());
        assert!(!tracker.observe(unreachable("a"), 3, 1).is_ready());
    }

    #[test]
    fn success_threshold_applies_towards_ready() {
        let mut tracker = HealthTracker::default();
        tracker.observe(unreachable("a"), 3, 2);
        assert!(!tracker.observe(healthy(None), 3, 2).is_ready());
        assert!(tracker.observe(healthy(None), 3, 2).is_ready());

        let mut tracker = HealthTracker::default();
        tracker.observe(ProbeOutcome::ConfigMalformed, 3, 1);
        assert!(tracker.observe(healthy(None), 3, 1).is_ready());
    }

    #[test]
    fn zero_thresholds_act_as_one() {
        let mut tracker = HealthTracker::default();
        tracker.observe(healthy(None), 0, 0);
        assert!(!tracker.observe(ProbeOutcome::NotOk, 0, 0).is_ready());
    }

    #[test]
    fn held_results_keep_the_published_outcome() {
        let mut tracker = HealthTracker::default();
        tracker.observe(healthy(Some("v1.30.0")), 3, 1);
        assert_eq!(
            tracker.observe(unreachable("a"), 3, 1),
            &healthy(Some("v1.30.0"))
        );
    }

    #[test]
    fn same_readiness_results_are_published_at_once() {
        let mut tracker = HealthTracker::default();
        tracker.observe(unreachable("a"), 3, 1);
        assert_eq!(
            tracker.observe(ProbeOutcome::NotOk, 3, 1),
            &ProbeOutcome::NotOk
        );
        assert_eq!(
            tracker.observe(ProbeOutcome::ConfigMalformed, 3, 1),
            &ProbeOutcome::ConfigMalformed
        );
        let mut tracker = HealthTracker::default();
        tracker.observe(healthy(Some("v1")), 3, 1);
        assert_eq!(
            tracker.observe(healthy(Some("v2")), 3, 1),
            &healthy(Some("v2"))
        );
        // A failed /version call does not forget the known version.
        assert_eq!(tracker.observe(healthy(None), 3, 1), &healthy(Some("v2")));
    }

    fn summary(conditions: &[ClusterCondition]) -> Vec<(&str, &str, &str, &str)> {
        conditions
            .iter()
            .map(|c| {
                (
                    c.type_.as_str(),
                    c.status.as_str(),
                    c.reason.as_deref().unwrap_or_default(),
                    c.message.as_deref().unwrap_or_default(),
                )
            })
            .collect()
    }

    #[test]
    fn condition_sets_match_kubefed() {
        let t = at(100);
        assert_eq!(
            summary(&desired_conditions(&healthy(Some("v1")), &[], &t)),
            [(
                "Ready",
                "True",
                "ClusterReady",
                "/healthz responded with ok"
            )]
        );
        assert_eq!(
            summary(&desired_conditions(&ProbeOutcome::NotOk, &[], &t)),
            [
                (
                    "Ready",
                    "False",
                    "ClusterNotReady",
                    "/healthz responded without ok"
                ),
                (
                    "Offline",
                    "False",
                    "ClusterReachable",
                    "cluster is reachable"
                ),
            ]
        );
        assert_eq!(
            summary(&desired_conditions(
                &unreachable("connection refused"),
                &[],
                &t
            )),
            [(
                "Offline",
                "True",
                "ClusterNotReachable",
                "cluster is not reachable: connection refused"
            )]
        );
        assert_eq!(
            summary(&desired_conditions(&ProbeOutcome::ConfigMalformed, &[], &t)),
            [(
                "ConfigMalformed",
                "True",
                "ClusterConfigMalformed",
                "cluster's configuration may be malformed"
            )]
        );
        for condition in desired_conditions(&ProbeOutcome::NotOk, &[], &t) {
            assert_eq!(condition.last_probe_time, t);
            assert_eq!(condition.last_transition_time, Some(t.clone()));
        }
    }

    #[test]
    fn transition_time_is_kept_while_status_is_unchanged() {
        let first = desired_conditions(&unreachable("a"), &[], &at(100));
        // Same status, new message: the transition time stays.
        let second = desired_conditions(&unreachable("b"), &first, &at(200));
        assert_eq!(second[0].last_transition_time, Some(at(100)));
        assert_eq!(second[0].last_probe_time, at(200));
        // Offline flips True -> False and Ready appears: both transition now.
        let third = desired_conditions(&ProbeOutcome::NotOk, &second, &at(300));
        assert!(
            third
                .iter()
                .all(|c| c.last_transition_time == Some(at(300)))
        );
        let fourth = desired_conditions(&ProbeOutcome::NotOk, &third, &at(400));
        assert!(
            fourth
                .iter()
                .all(|c| c.last_transition_time == Some(at(300)))
        );
    }

    fn status(conditions: Vec<ClusterCondition>, version: Option<&str>) -> KubeFedClusterStatus {
        KubeFedClusterStatus {
            conditions,
            kubernetes_version: version.map(str::to_owned),
            ..Default::default()
        }
    }

    #[test]
    fn probe_time_alone_needs_no_write() {
        let written = desired_conditions(&healthy(Some("v1")), &[], &at(100));
        let current = status(written.clone(), Some("v1"));
        let again = desired_conditions(&healthy(Some("v1")), &written, &at(200));
        assert!(!status_needs_write(
            Some(&current),
            &again,
            Some("v1"),
            None
        ));
    }

    #[test]
    fn real_changes_need_a_write() {
        let written = desired_conditions(&healthy(Some("v1")), &[], &at(100));
        let current = status(written.clone(), Some("v1"));
        assert!(status_needs_write(None, &written, Some("v1"), None));
        // Version change.
        assert!(status_needs_write(
            Some(&current),
            &written,
            Some("v2"),
            None
        ));
        assert!(status_needs_write(Some(&current), &written, None, None));
        // Condition change.
        let offline = desired_conditions(&unreachable("x"), &written, &at(200));
        assert!(status_needs_write(
            Some(&current),
            &offline,
            Some("v1"),
            None
        ));
        // Message change within the same status.
        let current = status(offline.clone(), None);
        let other = desired_conditions(&unreachable("y"), &offline, &at(300));
        assert!(status_needs_write(Some(&current), &other, None, None));
        // An empty version on the hub equals none.
        let current = status(offline.clone(), Some(""));
        assert!(!status_needs_write(Some(&current), &offline, None, None));
    }

    #[test]
    fn patch_sets_or_clears_version() {
        let conditions = desired_conditions(&ProbeOutcome::NotOk, &[], &at(0));
        let patch = status_patch(&conditions, None, None);
        assert_eq!(
            patch["status"]["kubernetesVersion"],
            serde_json::Value::Null
        );
        assert_eq!(patch["status"]["conditions"][0]["type"], "Ready");
        assert_eq!(
            patch["status"]["conditions"][0]["lastProbeTime"],
            "1970-01-01T00:00:00Z"
        );
        let patch = status_patch(&conditions, Some("v1.36.0"), None);
        assert_eq!(patch["status"]["kubernetesVersion"], "v1.36.0");
        assert!(patch["status"].get("region").is_none(), "{patch}");
        assert!(patch["status"].get("zones").is_none(), "{patch}");
    }

    fn topology(region: Option<&str>, zones: &[&str]) -> ClusterTopology {
        ClusterTopology {
            region: region.map(str::to_owned),
            zones: zones.iter().map(|z| (*z).to_owned()).collect(),
            other_regions: Vec::new(),
        }
    }

    #[test]
    fn region_and_zones_are_written_only_when_they_change() {
        let written = desired_conditions(&healthy(Some("v1")), &[], &at(100));
        let mut current = status(written.clone(), Some("v1"));
        current.region = Some("eu".to_owned());
        current.zones = vec!["eu-a".to_owned(), "eu-b".to_owned()];
        let same = topology(Some("eu"), &["eu-a", "eu-b"]);
        assert!(!topology_needs_write(Some(&current), &same));
        assert!(!status_needs_write(
            Some(&current),
            &written,
            Some("v1"),
            Some(&same)
        ));
        // Unknown nodes leave the status's values alone.
        assert!(!status_needs_write(
            Some(&current),
            &written,
            Some("v1"),
            None
        ));
        for changed in [
            topology(Some("us"), &["eu-a", "eu-b"]),
            topology(Some("eu"), &["eu-a"]),
            topology(None, &["eu-a", "eu-b"]),
        ] {
            assert!(
                topology_needs_write(Some(&current), &changed),
                "{changed:?}"
            );
            assert!(
                status_needs_write(Some(&current), &written, Some("v1"), Some(&changed)),
                "{changed:?}"
            );
        }
        // An empty region on the hub is none.
        current.region = Some(String::new());
        assert!(!topology_needs_write(
            Some(&current),
            &topology(None, &["eu-a", "eu-b"])
        ));
        assert!(topology_needs_write(None, &topology(Some("eu"), &[])));
        assert!(!topology_needs_write(None, &topology(None, &[])));
    }

    #[test]
    fn patches_carry_region_and_zones_when_known() {
        let conditions = desired_conditions(&ProbeOutcome::NotOk, &[], &at(0));
        let known = topology(Some("eu"), &["eu-a"]);
        let patch = status_patch(&conditions, None, Some(&known));
        assert_eq!(patch["status"]["region"], "eu");
        assert_eq!(patch["status"]["zones"], serde_json::json!(["eu-a"]));
        assert_eq!(
            topology_patch(&known),
            serde_json::json!({"status": {"region": "eu", "zones": ["eu-a"]}})
        );
    }
}
