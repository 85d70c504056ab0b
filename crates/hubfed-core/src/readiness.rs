//! Whether a member copy is ready: its workload is up, not merely written (beyond KubeFed).
//!
//! The rules follow kstatus (the library `kubectl wait`, Flux and Argo CD build on): a copy is
//! ready when its controller has seen its current generation and has done what it asks —
//!
//! - Deployment: every replica updated and available, no old replica left, and the
//!   `Available` condition not `False`;
//! - ReplicaSet: every replica available; StatefulSet: every replica ready and on the update
//!   revision; DaemonSet: every scheduled pod updated and available;
//! - Job: `Complete` (a `Failed` Job is not ready, and says why);
//! - Service of type LoadBalancer: an ingress address; other Services: at once;
//! - Pod: the `Ready` condition; PersistentVolumeClaim: `Bound`;
//! - anything else with a status: its `Ready` condition, else its `Available` condition, else
//!   `status.observedGeneration` caught up with `metadata.generation`; without any of
//!   those, or without a status at all (ConfigMap, Secret, RBAC), existing is being ready.
//!
//! [`needs_status`] says which types need the member copy's status at all: the others are
//! ready by existence, and their member watches stay metadata-only.

use serde_json::Value;

/// A member copy's readiness.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Readiness {
    #[default]
    Ready,
    /// Not ready; why, for the condition message (e.g. "1 of 3 replicas available").
    NotReady(String),
}

impl Readiness {
    pub fn is_ready(&self) -> bool {
        matches!(self, Readiness::Ready)
    }
}

/// Built-in kinds that carry no status worth reading: ready once they exist.
const STATUSLESS: [(&str, &str); 12] = [
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "ServiceAccount"),
    ("", "Endpoints"),
    ("", "LimitRange"),
    ("", "Namespace"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("scheduling.k8s.io", "PriorityClass"),
];

/// Whether readiness of `group`/`kind` depends on the object's status (else: existence).
pub fn needs_status(group: &str, kind: &str) -> bool {
    !STATUSLESS.contains(&(group, kind))
}

/// The readiness of member object `object` (as JSON) of type `group`/`kind`.
pub fn readiness(group: &str, kind: &str, object: &Value) -> Readiness {
    if !needs_status(group, kind) {
        return Readiness::Ready;
    }
    let status = &object["status"];
    let generation = object["metadata"]["generation"].as_i64();
    let observed = status["observedGeneration"].as_i64();
    let behind = matches!((generation, observed), (Some(g), Some(o)) if o < g)
        || (generation.is_some() && observed.is_none() && workload(group, kind));
    if behind {
        return not_ready("its controller has not seen the current generation yet");
    }
    match (group, kind) {
        ("apps", "Deployment") => deployment(object, status),
        ("apps", "ReplicaSet") => replicas(object, status, "availableReplicas", "available"),
        ("apps", "StatefulSet") => statefulset(object, status),
        ("apps", "DaemonSet") => daemonset(status),
        ("batch", "Job") => job(status),
        ("", "Service") => service(object, status),
        ("", "Pod") => match condition(status, "Ready") {
            Some(("True", _)) => Readiness::Ready,
            Some((_, message)) => not_ready(&format!("pod not ready{}", suffix(message))),
            None => not_ready("pod not ready"),
        },
        ("", "PersistentVolumeClaim") => match status["phase"].as_str() {
            Some("Bound") => Readiness::Ready,
            phase => not_ready(&format!("claim {}", phase.unwrap_or("not bound"))),
        },
        _ => generic(status),
    }
}

fn workload(group: &str, kind: &str) -> bool {
    group == "apps"
        && matches!(
            kind,
            "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet"
        )
}

pub(crate) fn not_ready(why: &str) -> Readiness {
    Readiness::NotReady(why.to_owned())
}

fn suffix(message: &str) -> String {
    if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    }
}

/// `(status, message)` of condition `type_`, if present.
fn condition<'a>(status: &'a Value, type_: &str) -> Option<(&'a str, &'a str)> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("Unknown"),
                c["message"].as_str().unwrap_or(""),
            )
        })
}

fn count(value: &Value) -> i64 {
    value.as_i64().unwrap_or(0)
}

/// `spec.replicas`, 1 when unset (the API default).
fn desired(object: &Value) -> i64 {
    object["spec"]["replicas"].as_i64().unwrap_or(1)
}

fn replicas(object: &Value, status: &Value, field: &str, word: &str) -> Readiness {
    let want = desired(object);
    let have = count(&status[field]);
    if have >= want {
        Readiness::Ready
    } else {
        not_ready(&format!("{have} of {want} replicas {word}"))
    }
}

fn deployment(object: &Value, status: &Value) -> Readiness {
    let want = desired(object);
    let updated = count(&status["updatedReplicas"]);
    let total = count(&status["replicas"]);
    let available = count(&status["availableReplicas"]);
    if let Some(("False", message)) = condition(status, "Available") {
        return not_ready(&format!("not available{}", suffix(message)));
    }
    if updated < want {
        return not_ready(&format!("{updated} of {want} replicas updated"));
    }
    if total > updated {
        return not_ready(&format!(
            "{} old replicas pending termination",
            total - updated
        ));
    }
    if available < want {
        return not_ready(&format!("{available} of {want} replicas available"));
    }
    Readiness::Ready
}

fn statefulset(object: &Value, status: &Value) -> Readiness {
    let ready = replicas(object, status, "readyReplicas", "ready");
    if !ready.is_ready() {
        return ready;
    }
    match (
        status["currentRevision"].as_str(),
        status["updateRevision"].as_str(),
    ) {
        (Some(current), Some(update)) if current != update => {
            not_ready("rolling update in progress")
        }
        _ => Readiness::Ready,
    }
}

fn daemonset(status: &Value) -> Readiness {
    let want = count(&status["desiredNumberScheduled"]);
    let updated = count(&status["updatedNumberScheduled"]);
    let available = count(&status["numberAvailable"]);
    if updated < want {
        not_ready(&format!("{updated} of {want} pods updated"))
    } else if available < want {
        not_ready(&format!("{available} of {want} pods available"))
    } else {
        Readiness::Ready
    }
}

fn job(status: &Value) -> Readiness {
    if let Some(("True", _)) = condition(status, "Complete") {
        return Readiness::Ready;
    }
    match condition(status, "Failed") {
        Some(("True", message)) => not_ready(&format!("job failed{}", suffix(message))),
        _ => not_ready("job not complete"),
    }
}

fn service(object: &Value, status: &Value) -> Readiness {
    if object["spec"]["type"] != "LoadBalancer" {
        return Readiness::Ready;
    }
    let ingress = status["loadBalancer"]["ingress"]
        .as_array()
        .is_some_and(|i| !i.is_empty());
    if ingress {
        Readiness::Ready
    } else {
        not_ready("load balancer has no ingress yet")
    }
}

fn generic(status: &Value) -> Readiness {
    for type_ in ["Ready", "Available"] {
        match condition(status, type_) {
            Some(("True", _)) => return Readiness::Ready,
            Some((_, message)) => {
                return not_ready(&format!("{type_} condition not True{}", suffix(message)));
            }
            None => {}
        }
    }
    Readiness::Ready
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment_with(replicas: i64, status: Value) -> Value {
        json!({"metadata": {"generation": 2}, "spec": {"replicas": replicas}, "status": status})
    }

    #[test]
    fn a_deployment_is_ready_when_every_replica_is_updated_and_available() {
        let ready = deployment_with(
            3,
            json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3,
                   "availableReplicas": 3,
                   "conditions": [{"type": "Available", "status": "True"}]}),
        );
        assert_eq!(readiness("apps", "Deployment", &ready), Readiness::Ready);
        let cases = [
            (
                json!({"observedGeneration": 1, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 3}),
                "its controller has not seen the current generation yet",
            ),
            (json!({"observedGeneration": 2}), "0 of 3 replicas updated"),
            (
                json!({"observedGeneration": 2, "replicas": 4, "updatedReplicas": 3, "availableReplicas": 3}),
                "1 old replicas pending termination",
            ),
            (
                json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 1}),
                "1 of 3 replicas available",
            ),
            (
                json!({"observedGeneration": 2, "conditions": [{"type": "Available", "status": "False", "message": "MinimumReplicasUnavailable"}]}),
                "not available: MinimumReplicasUnavailable",
            ),
        ];
        for (status, why) in cases {
            assert_eq!(
                readiness("apps", "Deployment", &deployment_with(3, status.clone())),
                Readiness::NotReady(why.to_owned()),
                "{status}"
            );
        }
        // A new Deployment its controller has not looked at yet.
        let fresh = json!({"metadata": {"generation": 1}, "spec": {"replicas": 1}});
        assert!(!readiness("apps", "Deployment", &fresh).is_ready());
    }

    #[test]
    fn statefulsets_daemonsets_and_replicasets() {
        let sts = |status: Value| json!({"metadata": {"generation": 1}, "spec": {"replicas": 2}, "status": status});
        assert!(
            readiness(
                "apps",
                "StatefulSet",
                &sts(json!({"observedGeneration": 1, "readyReplicas": 2, "currentRevision": "a", "updateRevision": "a"}))
            )
            .is_ready()
        );
        assert_eq!(
            readiness(
                "apps",
                "StatefulSet",
                &sts(
                    json!({"observedGeneration": 1, "readyReplicas": 2, "currentRevision": "a", "updateRevision": "b"})
                )
            ),
            Readiness::NotReady("rolling update in progress".into())
        );
        let ds = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
            "desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 2}});
        assert_eq!(
            readiness("apps", "DaemonSet", &ds),
            Readiness::NotReady("2 of 3 pods available".into())
        );
        let rs = json!({"metadata": {"generation": 1}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 1, "availableReplicas": 2}});
        assert!(readiness("apps", "ReplicaSet", &rs).is_ready());
    }

    #[test]
    fn jobs_services_pods_claims() {
        let job = |conditions: Value| json!({"status": {"conditions": conditions}});
        assert!(
            readiness(
                "batch",
                "Job",
                &job(json!([{"type": "Complete", "status": "True"}]))
            )
            .is_ready()
        );
        assert_eq!(
            readiness(
                "batch",
                "Job",
                &job(
                    json!([{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}])
                )
            ),
            Readiness::NotReady("job failed: BackoffLimitExceeded".into())
        );
        let lb = json!({"spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {}}});
        assert!(!readiness("", "Service", &lb).is_ready());
        let ip = json!({"spec": {"type": "ClusterIP"}});
        assert!(readiness("", "Service", &ip).is_ready());
        let pod = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        assert!(!readiness("", "Pod", &pod).is_ready());
        let pvc = json!({"status": {"phase": "Pending"}});
        assert_eq!(
            readiness("", "PersistentVolumeClaim", &pvc),
            Readiness::NotReady("claim Pending".into())
        );
    }

    #[test]
    fn other_types_by_conditions_or_existence() {
        assert!(readiness("", "ConfigMap", &json!({})).is_ready());
        assert!(!needs_status("", "Secret") && needs_status("example.com", "Widget"));
        let widget = |status: Value| json!({"metadata": {"generation": 3}, "status": status});
        assert!(
            readiness(
                "example.com",
                "Widget",
                &widget(json!({"conditions": [{"type": "Ready", "status": "True"}]}))
            )
            .is_ready()
        );
        assert_eq!(
            readiness(
                "example.com",
                "Widget",
                &widget(
                    json!({"conditions": [{"type": "Available", "status": "False", "message": "no quota"}]})
                )
            ),
            Readiness::NotReady("Available condition not True: no quota".into())
        );
        assert!(
            !readiness(
                "example.com",
                "Widget",
                &widget(json!({"observedGeneration": 2}))
            )
            .is_ready()
        );
        // No status at all: a CRD without a controller is ready once it exists.
        assert!(
            readiness(
                "example.com",
                "Widget",
                &json!({"metadata": {"generation": 1}})
            )
            .is_ready()
        );
    }
}
