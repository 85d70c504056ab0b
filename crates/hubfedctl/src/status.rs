//! `status KIND/NAME` (or `status KIND` for all objects of a type): per placed cluster,
//! whether the object propagated, whether its copy is ready, the copy's version and why not.

use hubfed_api::federated::{FederatedStatus, PROPAGATION_CONDITION_TYPE, READY_CONDITION_TYPE};
use hubfed_api::propagatedversion::{
    ClusterPropagatedVersion, PropagatedVersion, PropagatedVersionStatus, propagated_version_name,
};
use hubfed_api::scheduling::PlacementPolicy;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::{Value, json};

use crate::cli::StatusArgs;
use crate::error::{Error, Result};
use crate::get::table;
use crate::kubeconfig::Target;
use crate::ops;
use crate::session::Session;
use crate::types::resolve_enabled;

pub async fn status(session: &mut Session<'_>, args: StatusArgs) -> Result<()> {
    let (type_name, name) = match args.target.split_once('/') {
        Some((kind, name)) if !name.is_empty() => (kind, Some(name)),
        Some(_) => {
            return Err(Error::Usage(format!(
                "{:?}: no name after '/'",
                args.target
            )));
        }
        None => (args.target.as_str(), None),
    };
    if name.is_some() && args.all_namespaces {
        return Err(Error::Usage(
            "-A lists every object of a type: give KIND, not KIND/NAME".to_owned(),
        ));
    }
    let kubefed_ns = session.kubefed_namespace().to_owned();
    let hub = session.hub().await?;
    let ftc = resolve_enabled(&hub, &kubefed_ns, type_name).await?;
    let resource = ftc.spec.federated_type.to_dynamic();
    let namespaced = ftc.federated_namespaced();
    let namespace = namespaced.then(|| args.namespace.clone().unwrap_or_else(|| "default".into()));
    let api: Api<DynamicObject> = match (&namespace, args.all_namespaces) {
        (Some(ns), false) => Api::namespaced_with(hub.client.clone(), ns, &resource),
        _ => Api::all_with(hub.client.clone(), &resource),
    };
    let objects = match name {
        Some(name) => match api.get_opt(name).await.map_err(|e| hub.err(e))? {
            Some(object) => vec![object],
            None => {
                let place = namespace.map(|ns| format!("{ns}/")).unwrap_or_default();
                return Err(Error::NotFound(format!(
                    "{} {place}{name} not found in the hub",
                    resource.kind
                )));
            }
        },
        None => {
            api.list(&ListParams::default())
                .await
                .map_err(|e| hub.err(e))?
                .items
        }
    };
    let mut reports = Vec::new();
    for object in &objects {
        let versions = versions(&hub, &ftc.spec.target_type.kind, object).await?;
        let mut report = report(&resource.kind, object, versions.as_ref());
        report["placementPolicy"] = placement_policy(&hub, &resource.kind, object).await?;
        reports.push(report);
    }
    if let Some(format) = args.output {
        let text = match name {
            Some(_) => ops::render(&reports, format)?,
            None => ops::render(&[ops::list(reports)], format)?,
        };
        return session.print(&text);
    }
    if reports.is_empty() {
        return session.note(format_args!("no {} objects", resource.kind));
    }
    let text: Vec<String> = reports.iter().map(render_report).collect();
    session.print(&text.join("\n"))
}

/// The choice of the PlacementPolicy of the same namespace and name targeting `kind`, if
/// there is one (its CRD may not be installed: then none).
async fn placement_policy(hub: &Target, kind: &str, object: &DynamicObject) -> Result<Value> {
    let (Some(namespace), Some(name)) = (
        object.metadata.namespace.as_deref(),
        object.metadata.name.as_deref(),
    ) else {
        return Ok(Value::Null);
    };
    let api: Api<PlacementPolicy> = Api::namespaced(hub.client.clone(), namespace);
    let policy = match api.get_opt(name).await {
        Ok(policy) => policy,
        Err(kube::Error::Api(e)) if e.code == 404 => None,
        Err(e) => return Err(hub.err(e)),
    };
    Ok(policy
        .filter(|p| p.spec.target_kind == kind)
        .map(|p| {
            let status = p.status.unwrap_or_default();
            json!({
                "name": name,
                "clusters": status.clusters,
                "failedOver": status.failed_over,
                "conditions": status.conditions,
            })
        })
        .unwrap_or(Value::Null))
}

/// The PropagatedVersion status of `object` (cluster-scoped objects: the
/// ClusterPropagatedVersion), if written yet.
async fn versions(
    hub: &Target,
    target_kind: &str,
    object: &DynamicObject,
) -> Result<Option<PropagatedVersionStatus>> {
    let name = propagated_version_name(target_kind, object.metadata.name.as_deref().unwrap_or(""));
    let status = match object.metadata.namespace.as_deref() {
        Some(ns) => Api::<PropagatedVersion>::namespaced(hub.client.clone(), ns)
            .get_opt(&name)
            .await
            .map_err(|e| hub.err(e))?
            .and_then(|v| v.status),
        None => Api::<ClusterPropagatedVersion>::all(hub.client.clone())
            .get_opt(&name)
            .await
            .map_err(|e| hub.err(e))?
            .and_then(|v| v.status),
    };
    Ok(status)
}

/// One object's status as a JSON document (what `-o json|yaml` prints, and the table's
/// source).
pub fn report(
    kind: &str,
    object: &DynamicObject,
    versions: Option<&PropagatedVersionStatus>,
) -> Value {
    let status: FederatedStatus = object
        .data
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok())
        .unwrap_or_default();
    let condition = |type_: &str| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| {
                json!({
                    "status": c.status,
                    "reason": c.reason,
                    "message": c.message,
                    "lastUpdateTime": c.last_update_time,
                })
            })
            .unwrap_or(Value::Null)
    };
    let clusters: Vec<Value> = status
        .clusters
        .iter()
        .map(|c| {
            let version = versions.and_then(|v| {
                v.cluster_versions
                    .iter()
                    .find(|cv| cv.cluster_name == c.name)
                    .map(|cv| cv.version.clone())
            });
            json!({
                "name": c.name,
                "propagation": c.status.clone().unwrap_or_else(|| "OK".to_owned()),
                "ready": c.ready,
                "version": version,
                "lastDrift": c.last_drift,
                "message": c.message.clone().or_else(|| c.ready_message.clone()),
            })
        })
        .collect();
    json!({
        "kind": kind,
        "namespace": object.metadata.namespace,
        "name": object.metadata.name,
        "generation": object.metadata.generation,
        "observedGeneration": status.observed_generation,
        "ready": status.ready,
        "propagation": condition(PROPAGATION_CONDITION_TYPE),
        "readiness": condition(READY_CONDITION_TYPE),
        "clusters": clusters,
    })
}

/// The table of one report: a line for the object, a row per cluster.
pub fn render_report(report: &Value) -> String {
    let text = |v: &Value| v.as_str().map(str::to_owned);
    let place = match text(&report["namespace"]) {
        Some(ns) => format!("{ns}/{}", report["name"].as_str().unwrap_or("")),
        None => report["name"].as_str().unwrap_or("").to_owned(),
    };
    let condition = |c: &Value| match (text(&c["status"]), text(&c["reason"])) {
        (Some(status), Some(reason)) if !reason.is_empty() => format!("{status} ({reason})"),
        (Some(status), _) => status,
        (None, _) => "unknown".to_owned(),
    };
    let stale = report["observedGeneration"] != report["generation"];
    let mut out = format!(
        "{} {place}: propagation {}, ready {} ({} clusters), last change {}{}\n",
        report["kind"].as_str().unwrap_or(""),
        condition(&report["propagation"]),
        condition(&report["readiness"]),
        text(&report["ready"]).unwrap_or_else(|| "-".to_owned()),
        text(&report["propagation"]["lastUpdateTime"]).unwrap_or_else(|| "-".to_owned()),
        if stale {
            " (the controller has not seen the latest change yet)"
        } else {
            ""
        },
    );
    let rows: Vec<[String; 6]> = report["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            [
                text(&c["name"]).unwrap_or_default(),
                text(&c["propagation"]).unwrap_or_default(),
                match c["ready"].as_bool() {
                    Some(true) => "True".to_owned(),
                    Some(false) => "False".to_owned(),
                    None => "-".to_owned(),
                },
                text(&c["version"]).unwrap_or_else(|| "-".to_owned()),
                drift(&c["lastDrift"]),
                text(&c["message"]).unwrap_or_default(),
            ]
        })
        .collect();
    out.push_str(&policy_lines(&report["placementPolicy"]));
    if rows.is_empty() {
        out.push_str("no clusters\n");
    } else {
        out.push_str(&table(
            &[
                "CLUSTER",
                "PROPAGATION",
                "READY",
                "VERSION",
                "DRIFT",
                "MESSAGE",
            ],
            &rows,
        ));
    }
    out
}

/// `placed by PlacementPolicy web: member1 (Replacement: replaces member2)` and its failovers.
fn policy_lines(policy: &Value) -> String {
    let Some(name) = policy["name"].as_str() else {
        return String::new();
    };
    let chosen: Vec<String> = policy["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let (name, reason) = (
                c["name"].as_str().unwrap_or(""),
                c["reason"].as_str().unwrap_or(""),
            );
            match c["message"].as_str() {
                Some(message) if !message.is_empty() => format!("{name} ({reason}: {message})"),
                _ => format!("{name} ({reason})"),
            }
        })
        .collect();
    let chosen = if chosen.is_empty() {
        "no cluster".to_owned()
    } else {
        chosen.join(", ")
    };
    let mut out = format!("placed by PlacementPolicy {name}: {chosen}\n");
    for failed in policy["failedOver"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "  failed over from {} at {}{}\n",
            failed["cluster"].as_str().unwrap_or(""),
            failed["time"].as_str().unwrap_or(""),
            failed["replacedBy"]
                .as_str()
                .map(|r| format!(" to {r}"))
                .unwrap_or_default(),
        ));
    }
    if let Some(condition) = policy["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["status"] == "False"))
    {
        out.push_str(&format!(
            "  not placed as asked: {} ({})\n",
            condition["message"].as_str().unwrap_or(""),
            condition["reason"].as_str().unwrap_or("")
        ));
    }
    out
}

/// The last drift in a few words: `Reverted 01:04:55 (kubectl-edit)`, or `-`.
fn drift(last: &Value) -> String {
    let Some(action) = last["action"].as_str() else {
        return "-".to_owned();
    };
    let time = last["time"].as_str().unwrap_or_default();
    let time = time
        .split_once('T')
        .map_or(time, |(_, t)| t.trim_end_matches('Z'));
    let managers: Vec<&str> = last["managers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    format!("{action} {time} ({})", managers.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hubfed_api::propagatedversion::ClusterObjectVersion;

    #[test]
    fn a_report_per_cluster_and_its_table() {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "types.kubefed.io/v1beta1",
            "kind": "FederatedDeployment",
            "metadata": {"name": "web", "namespace": "shop", "generation": 3},
            "status": {
                "observedGeneration": 3,
                "ready": "1/2",
                "conditions": [
                    {"type": "Propagation", "status": "True", "lastUpdateTime": "2026-11-24T01:00:00Z"},
                    {"type": "Ready", "status": "False", "reason": "ClustersNotReady",
                     "message": "1 of 2 placed clusters not ready: member2 (0 of 2 replicas available)"},
                ],
                "clusters": [
                    {"name": "member1", "ready": true},
                    {"name": "member2", "ready": false, "readyMessage": "0 of 2 replicas available",
                     "lastDrift": {"time": "2026-11-24T01:04:55Z", "action": "Reverted",
                                   "managers": ["kubectl-edit"], "fields": [".spec.paused"]}},
                ],
            },
        }))
        .expect("an object");
        let versions = PropagatedVersionStatus {
            cluster_versions: vec![ClusterObjectVersion {
                cluster_name: "member1".into(),
                version: "gen:2".into(),
            }],
            ..Default::default()
        };
        let report = report("FederatedDeployment", &object, Some(&versions));
        assert_eq!(report["clusters"][0]["version"], "gen:2");
        assert_eq!(
            report["clusters"][1]["message"],
            "0 of 2 replicas available"
        );
        assert_eq!(
            render_report(&report),
            "FederatedDeployment shop/web: propagation True, ready False (ClustersNotReady) (1/2 clusters), last change 2026-11-24T01:00:00Z\n\
             CLUSTER   PROPAGATION   READY   VERSION   DRIFT                              MESSAGE\n\
             member1   OK            True    gen:2     -\n\
             member2   OK            False   -         Reverted 01:04:55 (kubectl-edit)   0 of 2 replicas available\n"
        );
    }

    #[test]
    fn a_placement_policy_shows_its_choice_and_failovers() {
        let mut report = json!({"kind": "FederatedDeployment", "namespace": "shop", "name": "web", "clusters": []});
        report["placementPolicy"] = json!({
            "name": "web",
            "clusters": [{"name": "member1", "reason": "Replacement", "message": "replaces member2"}],
            "failedOver": [{"cluster": "member2", "replacedBy": "member1", "time": "2026-11-25T04:01:37Z"}],
            "conditions": [{"type": "Placed", "status": "True"}],
        });
        let text = render_report(&report);
        assert!(
            text.contains(
                "placed by PlacementPolicy web: member1 (Replacement: replaces member2)\n  failed over from member2 at 2026-11-25T04:01:37Z to member1\n"
            ),
            "{text}"
        );
        report["placementPolicy"]["conditions"] = json!([{"type": "Placed", "status": "False", "reason": "ConstraintUnsatisfied", "message": "region=us: 0 of at least 1 clusters chosen"}]);
        assert!(render_report(&report).contains("not placed as asked: region=us: 0 of at least 1 clusters chosen (ConstraintUnsatisfied)"));
    }
}
