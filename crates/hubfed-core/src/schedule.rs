//! One ReplicaSchedulingPreference decision, from what the members report to the replicas
//! per cluster to write (KubeFed `pkg/schedulingtypes/replicascheduler.go` and
//! `pkg/controller/util/podanalyzer`, docs/kubefed-compatibility.md §2.7).
//!
//! The controller reads the RSP, the federated object, the registry and each member's
//! Deployment/ReplicaSet (and, when not all its replicas are ready, its pods); everything it
//! decides from them is here: which clusters take part ([`candidate_clusters`]), what each
//! member runs and can hold ([`analyze_pods`], [`replica_state`]) and the schedule
//! ([`decide`]), which [`crate::planner::write_schedule`] writes into the federated object.

use std::collections::BTreeMap;

use hubfed_api::federated::Placement;
use hubfed_api::scheduling::ReplicaSchedulingPreferenceSpec;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::placement::{ClusterInfo, ControlPlaneScope, NamespaceFederation, compute_placement};
use crate::planner::{plan, schedule_result, with_default_preferences};
use crate::selector::Selector;
use crate::{CoreError, Result};

/// KubeFed's `UnschedulableThreshold`: a pod counts as unschedulable once its `PodScheduled`
/// condition has said `Unschedulable` this long, so replicas do not move on every scheduling
/// hiccup.
pub const UNSCHEDULABLE_THRESHOLD_SECONDS: i64 = 60;

/// The target kinds an RSP can schedule.
pub const TARGET_KINDS: [&str; 2] = ["FederatedDeployment", "FederatedReplicaSet"];

/// Why the scheduler refuses an RSP: the reason of its Warning Event and a message naming
/// every offending field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// [`INVALID_TARGET_KIND`] or [`INVALID_PREFERENCE`].
    pub reason: &'static str,
    pub message: String,
}

/// The Event reason of an RSP whose `targetKind` is not one of [`TARGET_KINDS`].
pub const INVALID_TARGET_KIND: &str = "InvalidTargetKind";
/// The Event reason of an RSP with a negative number.
pub const INVALID_PREFERENCE: &str = "InvalidPreference";

/// Whether the scheduler may act on `spec`: a [`TARGET_KINDS`] target, and no negative
/// `totalReplicas`, `minReplicas`, `maxReplicas` or `weight` (KubeFed's CRD has no minimums
/// and KubeFed's planner never ends on a negative weight; hubfed's CRD accepts what KubeFed's
/// does, and the scheduler refuses such a preference instead of scheduling by it). Any other
/// number is valid: the planner computes in 128 bits, so no weight is too large, and a
/// `minReplicas` above `maxReplicas` wins, as in KubeFed.
pub fn validate(spec: &ReplicaSchedulingPreferenceSpec) -> std::result::Result<(), Refusal> {
    if !TARGET_KINDS.contains(&spec.target_kind.as_str()) {
        return Err(Refusal {
            reason: INVALID_TARGET_KIND,
            message: format!(
                "spec.targetKind {:?} is not one of {}",
                spec.target_kind,
                TARGET_KINDS.join(", ")
            ),
        });
    }
    let mut problems = Vec::new();
    if spec.total_replicas < 0 {
        problems.push(format!(
            "spec.totalReplicas: {} is negative",
            spec.total_replicas
        ));
    }
    for (cluster, preference) in &spec.clusters {
        let mut negative = |field: &str, value: i64| {
            if value < 0 {
                problems.push(format!(
                    "spec.clusters[{cluster:?}].{field}: {value} is negative"
                ));
            }
        };
        negative("minReplicas", preference.min_replicas);
        if let Some(max) = preference.max_replicas {
            negative("maxReplicas", max);
        }
        negative("weight", preference.weight);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Refusal {
            reason: INVALID_PREFERENCE,
            message: format!("not scheduled: {}", problems.join("; ")),
        })
    }
}

/// Whether the ReplicaSchedulingPreference `rsp` of the same name as a PlacementPolicy
/// writes the placement of the policy's target (spreading replicas over the policy's choice),
/// so that the policy must not: only when the RSP scheduler runs (`scheduler_running`, the
/// feature gate `SchedulerPreferences`), the RSP targets the policy's `target_kind` and the
/// scheduler acts on it ([`validate`]). Otherwise nothing else writes the placement.
pub fn rsp_writes_placement(
    target_kind: &str,
    rsp: Option<&ReplicaSchedulingPreferenceSpec>,
    scheduler_running: bool,
) -> bool {
    scheduler_running
        && rsp.is_some_and(|rsp| rsp.target_kind == target_kind && validate(rsp).is_ok())
}

/// What the pods of one member workload are doing (KubeFed `PodAnalysisResult`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodAnalysis {
    pub total: i64,
    /// Pods in phase `Running` with a `Ready` condition.
    pub running_and_ready: i64,
    /// Pods unschedulable for longer than the threshold.
    pub unschedulable: i64,
    /// Pods unschedulable right now, however recently.
    pub unschedulable_now: i64,
    /// Seconds until the next of the recently unschedulable pods passes the threshold: look
    /// again then (KubeFed's `StatusNeedsRecheck`).
    pub recheck_in: Option<i64>,
}

/// Counts the pods as KubeFed's `AnalyzePods` does. `now` is Unix seconds. As in KubeFed, a
/// `Running` pod counts as running and ready when it has a `Ready` condition, whatever its
/// status (KubeFed checks the condition's type only).
pub fn analyze_pods(pods: &[Pod], now: i64, threshold_seconds: i64) -> PodAnalysis {
    let mut result = PodAnalysis::default();
    for pod in pods {
        result.total += 1;
        let Some(status) = &pod.status else { continue };
        let running = status.phase.as_deref() == Some("Running");
        for condition in status.conditions.iter().flatten() {
            if running {
                if condition.type_ == "Ready" {
                    result.running_and_ready += 1;
                }
            } else if condition.type_ == "PodScheduled"
                && condition.status == "False"
                && condition.reason.as_deref() == Some("Unschedulable")
            {
                result.unschedulable_now += 1;
                let since = condition
                    .last_transition_time
                    .as_ref()
                    .map_or(now, |t| t.0.as_second());
                let remaining = since + threshold_seconds - now;
                if remaining < 0 {
                    result.unschedulable += 1;
                } else {
                    // KubeFed compares with `Before`: exactly at the threshold is not yet.
                    let wait = remaining + 1;
                    result.recheck_in = Some(result.recheck_in.map_or(wait, |r| r.min(wait)));
                }
            }
        }
    }
    result
}

/// The pods of a member workload: those its `spec.selector` selects — `matchLabels` and
/// `matchExpressions`, with apimachinery's semantics ([`Selector`]), as KubeFed's pod
/// analysis listed them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSelector {
    query: String,
    selector: Selector,
}

impl PodSelector {
    /// Validates `selector`; the message says what is wrong.
    pub fn new(selector: &LabelSelector) -> std::result::Result<Self, String> {
        let validated = Selector::new(Some(selector)).map_err(|e| match e {
            CoreError::InvalidSelector(message) => message,
            other => other.to_string(),
        })?;
        let labels = selector
            .match_labels
            .iter()
            .flatten()
            .map(|(key, value)| format!("{key}={value}"));
        // Validated above: a known operator, label keys and values (no `,`, `(`, `)` or
        // spaces), values for `In`/`NotIn` only. An empty value is written as nothing
        // (`key in (,a)`), which the API server's parser reads back as "".
        let expressions = selector.match_expressions.iter().flatten().map(|e| {
            let values = || e.values.as_deref().unwrap_or_default().join(",");
            match e.operator.as_str() {
                "In" => format!("{} in ({})", e.key, values()),
                "NotIn" => format!("{} notin ({})", e.key, values()),
                "DoesNotExist" => format!("!{}", e.key),
                _ => e.key.clone(),
            }
        });
        let query = labels.chain(expressions).collect::<Vec<_>>().join(",");
        Ok(Self {
            query,
            selector: validated,
        })
    }

    /// The label query of the list request, so that the API server filters: the
    /// `matchLabels` (`app=web,tier=front`) then the `matchExpressions` in label-selector
    /// syntax (`track in (a,b)`, `track notin (canary)`, `debug`, `!debug`), empty for an
    /// empty selector; the listed pods still go through [`PodSelector::matches`].
    pub fn query(&self) -> &str {
        &self.query
    }

    /// Whether `pod` is one of the workload's.
    pub fn matches(&self, pod: &Pod) -> bool {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        self.selector.matches(&labels)
    }
}

/// A member's copy of the scheduled workload, as the scheduler reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberWorkload {
    /// `spec.replicas` (0 when absent, as in KubeFed).
    pub replicas: i64,
    /// `status.readyReplicas` (0 when absent).
    pub ready_replicas: i64,
    /// The pods matching its selector, read only when [`needs_pods`] says so.
    pub pods: Option<PodAnalysis>,
}

impl MemberWorkload {
    /// Whether its pods must be read: not every replica is ready.
    pub fn needs_pods(&self) -> bool {
        self.replicas != self.ready_replicas
    }
}

/// What the members run now and what the full ones can hold (KubeFed
/// `clustersReplicaState`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaState {
    /// Replicas each cluster that has the workload runs: its ready replicas when all are,
    /// else the larger of its running and ready pods and its replicas that are not
    /// unschedulable (see [`replica_state`]).
    pub current: BTreeMap<String, i64>,
    /// Estimated capacity of clusters with unschedulable pods: replicas − unschedulable.
    pub capacity: BTreeMap<String, i64>,
    /// Seconds until a recently unschedulable pod counts: decide again then.
    pub recheck_in: Option<i64>,
    /// Some member has not all its replicas ready.
    pub unsettled: bool,
}

/// Current replicas and capacity estimates from the members that have the workload. A member
/// with all its replicas ready runs `readyReplicas`; one with some not ready runs its running
/// and ready pods or, when more, its replicas that are not unschedulable right now — replicas
/// on their way count as placed, so that the schedule does not depend on when in a rollout
/// the scheduler looks (KubeFed counts only the running pods: see the comment below).
pub fn replica_state(members: &BTreeMap<String, MemberWorkload>) -> ReplicaState {
    let mut state = ReplicaState::default();
    for (cluster, workload) in members {
        if !workload.needs_pods() {
            state
                .current
                .insert(cluster.clone(), workload.ready_replicas);
            continue;
        }
        state.unsettled = true;
        let pods = workload.pods.clone().unwrap_or_default();
        // KubeFed counts only the running and ready pods here. hubfed counts the replicas on
        // their way too (scheduled, not unschedulable): otherwise a look in the middle of
        // a rollout (3 of 6 running in one cluster, 0 of 4 in the other) keeps the 3 and
        // spreads the rest by weight again — 7/3 instead of the 6/4 just written — and
        // without `rebalance` that skew is kept for good.
        let on_their_way = workload.replicas - pods.unschedulable_now;
        state
            .current
            .insert(cluster.clone(), pods.running_and_ready.max(on_their_way));
        if pods.unschedulable > 0 {
            state
                .capacity
                .insert(cluster.clone(), workload.replicas - pods.unschedulable);
        }
        if let Some(wait) = pods.recheck_in {
            state.recheck_in = Some(state.recheck_in.map_or(wait, |r| r.min(wait)));
        }
    }
    state
}

/// The clusters an RSP schedules over: the Ready ones, and with
/// `intersectWithClusterSelector` only those the federated object's (and its
/// FederatedNamespace's) `clusterSelector` selects — the `clusters` lists are ignored there,
/// since the scheduler writes them (KubeFed `GetResourceClusters`, selector only).
pub fn candidate_clusters(
    spec: &ReplicaSchedulingPreferenceSpec,
    placement: Option<&Placement>,
    namespace: NamespaceFederation<'_>,
    scope: ControlPlaneScope,
    clusters: &[ClusterInfo],
) -> Result<Vec<String>> {
    let ready: Vec<ClusterInfo> = clusters.iter().filter(|c| c.ready).cloned().collect();
    if !spec.intersect_with_cluster_selector {
        return Ok(ready.into_iter().map(|c| c.name).collect());
    }
    let selector_only = |p: Option<&Placement>| Placement {
        clusters: None,
        cluster_selector: p.and_then(|p| p.cluster_selector.clone()),
    };
    let own = selector_only(placement);
    let namespace_placement;
    let namespace = match namespace {
        NamespaceFederation::Federated(p) => {
            namespace_placement = selector_only(p);
            NamespaceFederation::Federated(Some(&namespace_placement))
        }
        other => other,
    };
    let decision = compute_placement(Some(&own), namespace, scope, &ready)?;
    Ok(decision.clusters.into_iter().collect())
}

/// The replicas per cluster to write for `key` (`namespace/name`): the plan over `available`
/// plus a 0 for every cluster that runs the workload now but is not planned.
pub fn decide(
    spec: &ReplicaSchedulingPreferenceSpec,
    available: &[String],
    state: &ReplicaState,
    key: &str,
) -> BTreeMap<String, i64> {
    let spec = with_default_preferences(spec);
    let available: Vec<&str> = available.iter().map(String::as_str).collect();
    let planned = plan(&spec, &available, &state.current, &state.capacity, key);
    schedule_result(&planned, &state.current)
}

/// `member1: 6, member2: 4`, for Events and logs.
pub fn describe(result: &BTreeMap<String, i64>) -> String {
    if result.is_empty() {
        return "no cluster".to_owned();
    }
    result
        .iter()
        .map(|(cluster, replicas)| format!("{cluster}: {replicas}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests;
