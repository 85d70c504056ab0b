//! Hostile inputs (issue 9): malformed and adversarial objects of every kind the controller
//! reads — federated objects, FederatedTypeConfigs, KubeFedClusters and their Secrets, the
//! KubeFedConfig — each refused at admission with a message naming the field, or stored and
//! reported in that object's status. They are all created at once and left in place while a
//! well-formed federated ConfigMap propagates to both members: none of them crashes or stalls
//! the controller.
//!
//! Its own test binary: it registers the admission webhooks on the shared hub.

use std::time::Duration;

use anyhow::{Context as _, bail};
use futures::future::join_all;
use hubfed_e2e::webhooks::{core_api, refusal, with_webhooks};
use hubfed_e2e::{
    Federation, KUBEFED_NAMESPACE, MEMBERS, TIMEOUT, Wait, cluster_status, dynamic_api, federated,
    federated_object, get_value, placement, propagated_ok, propagation_condition, report,
    unique_ns, wait_for, wait_propagated,
};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};

/// What must happen to a hostile object.
enum Expect {
    /// Refused at admission (webhook or API server) with a message containing this.
    Refused(&'static str),
    /// Stored; its `status.clusters[cluster].status` becomes this.
    ClusterStatus(&'static str, &'static str),
    /// Stored; its `Propagation` condition's message comes to contain this.
    ConditionMessage(&'static str),
    /// Stored and propagated to member1 (large or deep but valid).
    Propagated,
    /// A KubeFedCluster stored and reported not ready, with a condition of this type.
    ClusterNotReady(&'static str),
    /// Stored (a type that does not exist, ...): the controller must simply carry on.
    Stored,
}

struct Case {
    name: &'static str,
    api: Api<DynamicObject>,
    object: Value,
    expect: Expect,
}

/// A `Federated<kind>` in `ns` named `name` with `spec`.
fn fed(kind: &str, ns: &str, name: &str, spec: Value) -> Value {
    serde_json::to_value(federated_object(&federated(kind), Some(ns), name, spec))
        .expect("serializable")
}

fn on_member1(template: Value) -> Value {
    json!({"template": template, "placement": placement(&["member1"])})
}

fn with_override(template: Value, path: &str, value: Value) -> Value {
    json!({
        "template": template,
        "placement": placement(&["member1"]),
        "overrides": [{"clusterName": "member1", "clusterOverrides": [{"path": path, "value": value}]}],
    })
}

/// An object nested `depth` levels deep.
fn nested(depth: usize) -> Value {
    (0..depth).fold(json!("bottom"), |inner, _| json!({ "n": inner }))
}

fn deployment_template() -> Value {
    json!({"spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "h"}},
        "template": {"metadata": {"labels": {"app": "h"}},
                     "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
    }})
}

fn ftc(name: &str, target: Value, federated_type: Value) -> Value {
    json!({
        "apiVersion": "core.kubefed.io/v1beta1", "kind": "FederatedTypeConfig",
        "metadata": {"name": name, "namespace": KUBEFED_NAMESPACE},
        "spec": {"targetType": target, "federatedType": federated_type, "propagation": "Enabled"},
    })
}

fn widget_types(group: &str, fed_group: &str, version: &str, scope: &str) -> (Value, Value) {
    (
        json!({"group": group, "version": version, "kind": "Widget", "pluralName": "widgets", "scope": scope}),
        json!({"group": fed_group, "version": "v1beta1", "kind": "FederatedWidget", "pluralName": "federatedwidgets", "scope": scope}),
    )
}

fn cluster(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedCluster",
        "metadata": {"name": name, "namespace": KUBEFED_NAMESPACE},
        "spec": spec,
    })
}

fn cases(
    fed_api: &Api<DynamicObject>,
    deploy_api: &Api<DynamicObject>,
    secret_api: &Api<DynamicObject>,
    ns: &str,
    hub: &kube::Client,
) -> Vec<Case> {
    let ftcs = core_api(hub.clone(), "FederatedTypeConfig", "federatedtypeconfigs");
    let clusters = core_api(hub.clone(), "KubeFedCluster", "kubefedclusters");
    let configs = core_api(hub.clone(), "KubeFedConfig", "kubefedconfigs");
    let cm = |name, spec| Case {
        name,
        api: fed_api.clone(),
        object: fed("ConfigMap", ns, name, spec),
        expect: Expect::Stored,
    };
    let secret = |name, spec, expect| Case {
        name,
        api: secret_api.clone(),
        object: fed("Secret", ns, name, spec),
        expect,
    };
    let data = |d: Value| json!({ "data": d });
    let kilobytes = |k: usize| "x".repeat(k * 1024);
    let long_name = format!("h{}", "a".repeat(252));
    let endpoint = "https://127.0.0.1:1";
    let config = |spec: Value| {
        json!({
            "apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedConfig",
            "metadata": {"name": "kubefed", "namespace": KUBEFED_NAMESPACE},
            "spec": spec,
        })
    };
    let mut all = vec![
        // Federated objects refused at admission.
        Case {
            expect: Expect::Refused("spec"),
            ..cm("no-spec", Value::Null)
        },
        Case {
            expect: Expect::Refused("spec.placement"),
            ..cm(
                "placement-string",
                json!({"template": {}, "placement": "everywhere"}),
            )
        },
        Case {
            expect: Expect::Refused("spec.placement.clusters[0].name"),
            ..cm(
                "placement-no-name",
                json!({"template": {}, "placement": {"clusters": [{}]}}),
            )
        },
        Case {
            expect: Expect::Refused("operator"),
            ..cm(
                "selector-operator",
                json!({"template": {}, "placement": {"clusterSelector": {"matchExpressions": [{"key": "a", "operator": "Sometimes", "values": ["b"]}]}}}),
            )
        },
        Case {
            expect: Expect::Refused("spec.placement.clusterSelector"),
            ..cm(
                "selector-label-value",
                json!({"template": {}, "placement": {"clusterSelector": {"matchLabels": {"a": "not a label value!"}}}}),
            )
        },
        Case {
            expect: Expect::Refused("op"),
            ..cm(
                "override-op-move",
                json!({"template": {}, "placement": placement(&["member1"]), "overrides": [{"clusterName": "member1", "clusterOverrides": [{"op": "move", "path": "/data/a", "value": "b"}]}]}),
            )
        },
        Case {
            // KubeFed's JSON patch reads `data/a` as `/a` (accepted), but a path without any
            // `/` never applies.
            expect: Expect::Refused("path"),
            ..cm(
                "override-path-without-slash",
                with_override(json!({}), "data", json!("b")),
            )
        },
        Case {
            expect: Expect::Refused("/metadata/name"),
            ..cm(
                "override-name",
                with_override(json!({}), "/metadata/name", json!("other")),
            )
        },
        Case {
            expect: Expect::Refused("/metadata/namespace"),
            ..cm(
                "override-namespace",
                with_override(json!({}), "/metadata/namespace", json!("kube-system")),
            )
        },
        Case {
            expect: Expect::Refused("clusterName"),
            ..cm(
                "override-no-cluster",
                json!({"template": {}, "placement": placement(&["member1"]), "overrides": [{"clusterOverrides": [{"path": "/data/a", "value": "b"}]}]}),
            )
        },
        Case {
            expect: Expect::Refused("member1"),
            ..cm(
                "override-cluster-twice",
                json!({"template": {}, "placement": placement(&["member1"]), "overrides": [
            {"clusterName": "member1", "clusterOverrides": [{"path": "/data/a", "value": "b"}]},
            {"clusterName": "member1", "clusterOverrides": [{"path": "/data/c", "value": "d"}]}]}),
            )
        },
        Case {
            expect: Expect::Refused("253"),
            ..cm("name-too-long", on_member1(data(json!({"a": "b"}))))
        },
        Case {
            expect: Expect::Refused("larger than max"),
            ..cm(
                "over-the-storage-limit",
                on_member1(data(json!({"big": kilobytes(2 * 1024)}))),
            )
        },
        // Federated objects stored, and reported where they cannot propagate.
        Case {
            expect: Expect::ConditionMessage("nowhere"),
            ..cm(
                "unknown-cluster",
                json!({"template": data(json!({"a": "b"})), "placement": placement(&["member1", "nowhere"])}),
            )
        },
        Case {
            expect: Expect::ClusterStatus("member1", "ApplyOverridesFailed"),
            ..cm(
                "override-into-a-string",
                with_override(json!({"data": {"a": "b"}}), "/data/a/7", json!("c")),
            )
        },
        Case {
            expect: Expect::ClusterStatus("member1", "ApplyOverridesFailed"),
            ..cm(
                "override-missing-parent",
                with_override(json!({}), "/data/deep/deeper", json!("c")),
            )
        },
        Case {
            expect: Expect::ClusterStatus("member1", "CreationFailed"),
            ..cm("data-of-wrong-type", on_member1(data(json!({"a": 1}))))
        },
        Case {
            expect: Expect::Refused("spec.template.deep.n.n.n.…: nested more than 100 levels"),
            ..cm(
                "deeply-nested",
                on_member1(json!({"data": {"a": "b"}, "deep": nested(200)})),
            )
        },
        Case {
            expect: Expect::ClusterStatus("member1", "CreationFailed"),
            ..cm(
                "nested-but-readable",
                on_member1(json!({"data": {"a": "b"}, "deep": nested(60)})),
            )
        },
        Case {
            expect: Expect::ClusterStatus("member1", "CreationFailed"),
            ..cm(
                "bad-label",
                on_member1(json!({"metadata": {"labels": {"bad key!": "v"}}})),
            )
        },
        Case {
            expect: Expect::Propagated,
            ..cm(
                "near-the-limit",
                on_member1(data(json!({"big": kilobytes(1000)}))),
            )
        },
        Case {
            expect: Expect::Propagated,
            ..cm("longest-name", on_member1(data(json!({"a": "b"}))))
        },
        // Stored in the hub (under its 1.5 MiB limit), too large for a member ConfigMap (1 MiB).
        Case {
            expect: Expect::ClusterStatus("member1", "CreationFailed"),
            ..cm(
                "over-a-members-limit",
                on_member1(data(json!({"big": kilobytes(1400)}))),
            )
        },
        // Federated Secrets: what only the member can judge is reported per cluster.
        secret(
            "secret-data-not-base64",
            on_member1(json!({"data": {"k": "not base64!"}})),
            Expect::ClusterStatus("member1", "CreationFailed"),
        ),
        secret(
            "secret-unknown-type-field",
            on_member1(json!({"type": 7, "stringData": {"k": "v"}})),
            Expect::ClusterStatus("member1", "CreationFailed"),
        ),
        secret(
            "secret-override-of-wrong-type",
            with_override(
                json!({"stringData": {"k": "v"}}),
                "/stringData",
                json!("flat"),
            ),
            Expect::ClusterStatus("member1", "CreationFailed"),
        ),
        secret(
            "secret-override-into-missing-data",
            with_override(json!({"type": "Opaque"}), "/data/k", json!("dg==")),
            Expect::ClusterStatus("member1", "ApplyOverridesFailed"),
        ),
        Case {
            name: "replicas-of-wrong-type",
            api: deploy_api.clone(),
            object: fed(
                "Deployment",
                ns,
                "replicas-of-wrong-type",
                with_override(deployment_template(), "/spec/replicas", json!("three")),
            ),
            expect: Expect::ClusterStatus("member1", "CreationFailed"),
        },
        Case {
            name: "override-index-out-of-range",
            api: deploy_api.clone(),
            object: fed(
                "Deployment",
                ns,
                "override-index-out-of-range",
                with_override(
                    deployment_template(),
                    "/spec/template/spec/containers/5/image",
                    json!("x"),
                ),
            ),
            expect: Expect::ClusterStatus("member1", "ApplyOverridesFailed"),
        },
        Case {
            name: "deployment-without-selector",
            api: deploy_api.clone(),
            object: fed(
                "Deployment",
                ns,
                "deployment-without-selector",
                on_member1(
                    json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
                ),
            ),
            expect: Expect::ClusterStatus("member1", "CreationFailed"),
        },
    ];
    // Names: the longest valid one and one over the limit (253).
    for case in &mut all {
        match case.name {
            "longest-name" => case.object["metadata"]["name"] = json!(long_name.clone()),
            "name-too-long" => case.object["metadata"]["name"] = json!(format!("{long_name}b")),
            "no-spec" => {
                case.object.as_object_mut().map(|o| o.remove("spec"));
            }
            _ => {}
        }
    }
    // FederatedTypeConfigs.
    let (target, federated_type) =
        widget_types("example.io", "types.kubefed.io", "v1", "Namespaced");
    let ftc_case = |name: &'static str, object: Value, expect| Case {
        name,
        api: ftcs.clone(),
        object,
        expect,
    };
    all.extend([
        ftc_case(
            "ftc-misnamed",
            ftc("gadgets.example.io", target.clone(), federated_type.clone()),
            Expect::Refused("metadata.name"),
        ),
        {
            let (t, f) = widget_types("example.io", "nodots", "v1", "Namespaced");
            ftc_case(
                "ftc-group-without-dot",
                ftc("widgets.example.io", t, f),
                Expect::Refused("spec.federatedType.group"),
            )
        },
        {
            let (t, f) = widget_types("example.io", "types.kubefed.io", "", "Namespaced");
            ftc_case(
                "ftc-no-version",
                ftc("widgets.example.io", t, f),
                Expect::Refused("spec.targetType.version"),
            )
        },
        {
            let (t, f) = widget_types("example.io", "types.kubefed.io", "v1", "Sideways");
            ftc_case(
                "ftc-scope",
                ftc("widgets.example.io", t, f),
                Expect::Refused("scope"),
            )
        },
        {
            let mut object = ftc("widgets.example.io", target.clone(), federated_type.clone());
            object["spec"]["propagation"] = json!("Sometimes");
            ftc_case(
                "ftc-propagation",
                object,
                Expect::Refused("spec.propagation"),
            )
        },
        {
            let (t, f) = widget_types("nowhere.example.io", "types.kubefed.io", "v1", "Namespaced");
            ftc_case(
                "ftc-type-that-does-not-exist",
                ftc("widgets.nowhere.example.io", t, f),
                Expect::Stored,
            )
        },
    ]);
    // KubeFedClusters and their Secrets.
    let cluster_case = |name: &'static str, object: Value, expect| Case {
        name,
        api: clusters.clone(),
        object,
        expect,
    };
    all.extend([
        cluster_case("cluster-endpoint-not-a-url", cluster("hostile-a", json!({"apiEndpoint": "not a url", "secretRef": {"name": "s"}})), Expect::Refused("spec.apiEndpoint")),
        cluster_case("cluster-endpoint-ftp", cluster("hostile-b", json!({"apiEndpoint": "ftp://127.0.0.1:1", "secretRef": {"name": "s"}})), Expect::Refused("spec.apiEndpoint")),
        cluster_case("cluster-no-endpoint", cluster("hostile-c", json!({"secretRef": {"name": "s"}})), Expect::Refused("spec.apiEndpoint")),
        cluster_case("cluster-no-secret-name", cluster("hostile-d", json!({"apiEndpoint": endpoint, "secretRef": {}})), Expect::Refused("spec.secretRef.name")),
        cluster_case("cluster-tls-validations", cluster("hostile-e", json!({"apiEndpoint": endpoint, "secretRef": {"name": "s"}, "disabledTLSValidations": ["Everything"]})), Expect::Refused("spec.disabledTLSValidations")),
        cluster_case("cluster-proxy-url", cluster("hostile-f", json!({"apiEndpoint": endpoint, "secretRef": {"name": "s"}, "proxyURL": "gopher://x"})), Expect::Refused("proxyURL")),
        cluster_case("cluster-secret-missing", cluster("hostile-g", json!({"apiEndpoint": endpoint, "secretRef": {"name": "hostile-nothing-here"}})), Expect::ClusterNotReady("ConfigMalformed")),
        cluster_case("cluster-secret-without-token", cluster("hostile-h", json!({"apiEndpoint": endpoint, "secretRef": {"name": "hostile-no-token"}})), Expect::ClusterNotReady("ConfigMalformed")),
        cluster_case("cluster-garbage-ca", cluster("hostile-i", json!({"apiEndpoint": endpoint, "secretRef": {"name": "hostile-binary-token"}, "caBundle": "bm90IGEgY2VydGlmaWNhdGU="})), Expect::ClusterNotReady("ConfigMalformed")),
    ]);
    // The KubeFedConfig: every bad update refused.
    let config_case = |name: &'static str, spec: Value, expect| Case {
        name,
        api: configs.clone(),
        object: config(spec),
        expect,
    };
    all.extend([
        config_case("config-lease-duration", json!({"scope": "Cluster", "leaderElect": {"leaseDuration": "fast"}}), Expect::Refused("spec.leaderElect.leaseDuration")),
        config_case("config-negative-period", json!({"scope": "Cluster", "clusterHealthCheck": {"period": "-1s"}}), Expect::Refused("spec.clusterHealthCheck.period")),
        config_case("config-feature-gate", json!({"scope": "Cluster", "featureGates": [{"name": "Teleport", "configuration": "Enabled"}]}), Expect::Refused("Teleport")),
        config_case("config-scope", json!({"scope": "Everywhere"}), Expect::Refused("spec.scope")),
    ]);
    all
}

/// Secrets the hostile KubeFedClusters point at: one without a token, one whose token is
/// binary garbage.
async fn secrets(hub: &kube::Client) -> anyhow::Result<()> {
    let api: Api<Secret> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    for (name, data) in [
        ("hostile-no-token", json!({"ca.crt": "bm90aGluZw=="})),
        ("hostile-binary-token", json!({"token": "/wD+AAEC/f8="})),
    ] {
        let secret: Secret =
            serde_json::from_value(json!({"metadata": {"name": name}, "data": data}))?;
        api.create(&PostParams::default(), &secret).await?;
    }
    Ok(())
}

/// The KubeFedConfig cases update the existing object: refusals on `replace`.
async fn attempt(case: &Case) -> anyhow::Result<Option<String>> {
    if case.object["kind"] == "KubeFedConfig" {
        let mut current = case.api.get("kubefed").await?;
        let patched: DynamicObject = serde_json::from_value(case.object.clone())?;
        current.data["spec"] = patched.data["spec"].clone();
        return match case
            .api
            .replace("kubefed", &PostParams::default(), &current)
            .await
        {
            Ok(_) => Ok(None),
            Err(kube::Error::Api(e)) => Ok(Some(e.message)),
            Err(e) => Err(e.into()),
        };
    }
    refusal(&case.api, case.object.clone(), false).await
}

async fn check(case: &Case) -> anyhow::Result<()> {
    let refused = attempt(case).await.with_context(|| case.name)?;
    let name = case.object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    match (&case.expect, refused) {
        (Expect::Refused(field), Some(message)) if message.contains(field) => Ok(()),
        (Expect::Refused(field), Some(message)) => bail!(
            "{}: refused, but the message does not name {field:?}: {message}",
            case.name
        ),
        (Expect::Refused(field), None) => bail!(
            "{}: accepted, expected a refusal naming {field:?}",
            case.name
        ),
        (_, Some(message)) => bail!("{}: refused unexpectedly: {message}", case.name),
        (Expect::Stored, None) => Ok(()),
        (expect, None) => {
            wait_for(case.name, TIMEOUT, async || {
                let object = get_value(&case.api, &name)
                    .await?
                    .context("the object is gone")?;
                Ok(verdict(expect, &object))
            })
            .await
        }
    }
}

fn verdict(expect: &Expect, object: &Value) -> Wait<()> {
    match expect {
        Expect::ClusterStatus(cluster, status) => match cluster_status(object, cluster) {
            Some(entry) if entry["status"] == *status => Wait::Done(()),
            other => Wait::Pending(format!("status.clusters[{cluster}] {other:?}")),
        },
        Expect::ConditionMessage(text) => match propagation_condition(object) {
            Some(c) if c["message"].as_str().is_some_and(|m| m.contains(text)) => Wait::Done(()),
            other => Wait::Pending(format!("Propagation {other:?}")),
        },
        Expect::Propagated => propagated_ok(object, &["member1"]),
        Expect::ClusterNotReady(condition) => {
            let conditions = object["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let named = conditions
                .iter()
                .any(|c| c["type"] == *condition && c["status"] == "True");
            let ready = conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            if named && !ready {
                Wait::Done(())
            } else {
                Wait::Pending(format!("conditions {conditions:?}"))
            }
        }
        Expect::Refused(_) | Expect::Stored => Wait::Done(()),
    }
}

#[tokio::test]
async fn hostile_inputs_are_refused_or_reported_and_stall_nothing() -> anyhow::Result<()> {
    let federation: &Federation = with_webhooks().await?;
    let hub = federation.hub().await?;
    let ns = unique_ns("hostile");
    federation.create_federated_namespace(&ns, &MEMBERS).await?;
    secrets(&hub).await?;
    let fed_api = dynamic_api(hub.clone(), &federated("ConfigMap"), Some(&ns));
    let deploy_api = dynamic_api(hub.clone(), &federated("Deployment"), Some(&ns));
    let secret_api = dynamic_api(hub.clone(), &federated("Secret"), Some(&ns));
    let cases = cases(&fed_api, &deploy_api, &secret_api, &ns, &hub);
    anyhow::ensure!(cases.len() >= 30, "{} cases", cases.len());

    let results = join_all(cases.iter().map(check)).await;
    let failures: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| format!("{e:#}")))
        .collect();
    let refused = cases
        .iter()
        .filter(|c| matches!(c.expect, Expect::Refused(_)))
        .count();
    report(format_args!(
        "hostile inputs: {} cases, {refused} refused at admission, {} stored and reported; {} failed",
        cases.len(),
        cases.len() - refused,
        failures.len()
    ));
    if !failures.is_empty() {
        bail!("{}", failures.join("\n"));
    }

    // Everything hostile is still there: a well-formed object propagates all the same.
    let well_formed = "well-formed";
    fed_api
        .create(
            &PostParams::default(),
            &serde_json::from_value(fed(
                "ConfigMap",
                &ns,
                well_formed,
                json!({"template": {"data": {"ok": "yes"}}, "placement": placement(&MEMBERS)}),
            ))?,
        )
        .await?;
    let began = std::time::Instant::now();
    wait_propagated(
        "the well-formed object propagated",
        &fed_api,
        well_formed,
        &MEMBERS,
        &[],
    )
    .await?;
    report(format_args!(
        "hostile inputs: a well-formed object propagated {:.1}s after its creation, beside them",
        began.elapsed().as_secs_f64()
    ));

    // Every stored federated object can be deleted: no finalizer stays, whatever it held.
    let apis = [&fed_api, &deploy_api, &secret_api];
    let began = std::time::Instant::now();
    for api in apis {
        api.delete_collection(&Default::default(), &Default::default())
            .await
            .context("deleting the hostile federated objects")?;
    }
    wait_for(
        "every hostile federated object deleted",
        TIMEOUT,
        async || {
            let mut left = Vec::new();
            for api in apis {
                for object in api.list_metadata(&Default::default()).await?.items {
                    left.push(format!(
                        "{} (finalizers {:?})",
                        object.metadata.name.unwrap_or_default(),
                        object.metadata.finalizers.unwrap_or_default()
                    ));
                }
            }
            Ok(Wait::all_or_pending(left))
        },
    )
    .await?;
    report(format_args!(
        "hostile inputs: all deleted {:.1}s after the deletion began",
        began.elapsed().as_secs_f64()
    ));
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(())
}
