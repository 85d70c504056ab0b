//! Propagation by the sync controller (docs/kubefed-compatibility.md §1.6, §2.4), against a real
//! hub and two real members: every default type through its whole life, retention of member-owned
//! fields, orphaning, overrides that cannot apply, bad placements, and a type enabled at run time.
//!
//! Each test has its own namespace or uniquely named cluster-scoped objects.

use std::time::Instant;

use anyhow::{Context as _, bail, ensure};
use base64::Engine as _;
use hubfed_api::federatedcrd::{FederatedTypeDescription, federated_crd};
use hubfed_api::federatedtypeconfig::{
    ApiResource as TypeResource, FederatedTypeConfig, ResourceScope,
};
use hubfed_api::names::{FTC_FINALIZER, MANAGED_LABEL, ORPHAN_ANNOTATION};
use hubfed_e2e::{
    Federation, KUBEFED_NAMESPACE, MEMBERS, TIMEOUT, Wait, cluster_status, default_ftc,
    dynamic_api, federated, federated_object, get_value, install_crds, is_managed, labels,
    member_mismatch, modify, modify_as, placement, propagated_ok, propagation_condition, report,
    set_pointer, show, status_is_current, target, unique_name, unique_ns, wait_for,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// One default type's part in [`propagation_lifecycle`].
struct Fixture {
    /// Target kind, e.g. `ConfigMap`.
    kind: &'static str,
    /// `spec.template` of the federated object.
    template: Value,
    /// The override for member1: `(op, path, value)`.
    member1_override: (&'static str, &'static str, Value),
    /// A template change: the JSON pointer (the same in template and member object) and its
    /// new value. Must not touch the override's path.
    update: (&'static str, Value),
    /// A hand edit of a templated field in member2's copy: pointer and a value the template
    /// does not have.
    drift: (&'static str, Value),
}

fn b64(text: &str) -> Value {
    json!(base64::engine::general_purpose::STANDARD.encode(text))
}

/// The life of one federated object of `fixture.kind`:
/// 1. placed on both members with an override on member1 → both hold it, managed, member1
///    overridden, status `Propagation=True`;
/// 2. template update → both get it (timed);
/// 3. placement shrunk to member2 → member1's copy deleted;
/// 4. member2's copy edited by hand → restored;
/// 5. member2's copy deleted by hand → recreated;
/// 6. federated object deleted → copies deleted, then the federated object released.
async fn propagation_lifecycle(fixture: Fixture) -> anyhow::Result<()> {
    let fed = Federation::shared();
    let kind = fixture.kind;
    let ftc = default_ftc(kind);
    let target_resource = target(kind);
    let federated_resource = federated(kind);
    let lower = kind.to_lowercase();

    // Where the federated object lives, its name, and the member objects' namespace.
    let (namespace, name) = if kind == "Namespace" {
        // A FederatedNamespace is named like its namespace and lives in it.
        let ns = unique_ns("fns");
        fed.create_hub_namespace(&ns).await?;
        (Some(ns.clone()), ns)
    } else if ftc.federated_namespaced() {
        let ns = unique_ns(&lower);
        fed.create_federated_namespace(&ns, &MEMBERS).await?;
        (Some(ns), unique_name(&lower))
    } else {
        (None, unique_name(&format!("e2e-{lower}")))
    };
    let member_namespace = if ftc.target_namespaced() {
        namespace.as_deref()
    } else {
        None
    };
    let what = format!("{kind} {}", qualified(namespace.as_deref(), &name));

    let hub_api = dynamic_api(fed.hub().await?, &federated_resource, namespace.as_deref());
    let member1 = dynamic_api(
        fed.client("member1").await?,
        &target_resource,
        member_namespace,
    );
    let member2 = dynamic_api(
        fed.client("member2").await?,
        &target_resource,
        member_namespace,
    );

    let mut template = fixture.template.clone();
    let (op, override_path, override_value) = fixture.member1_override.clone();
    let spec = json!({
        "template": template,
        "placement": placement(&MEMBERS),
        "overrides": [{
            "clusterName": "member1",
            "clusterOverrides": [{ "op": op, "path": override_path, "value": override_value }],
        }],
    });
    let created_at = Instant::now();
    hub_api
        .create(
            &PostParams::default(),
            &federated_object(&federated_resource, namespace.as_deref(), &name, spec),
        )
        .await
        .with_context(|| format!("creating the federated {what}"))?;

    // 1. Both members, managed; the override in member1 only.
    let (update_path, update_value) = fixture.update.clone();
    wait_for(
        &format!("{what} in both members, overridden in member1"),
        TIMEOUT,
        async || {
            let in1 = get_value(&member1, &name).await?;
            let in2 = get_value(&member2, &name).await?;
            let problems: Vec<String> = [
                member_mismatch(
                    "member1",
                    in1.as_ref(),
                    &[
                        (override_path, Some(&override_value)),
                        (update_path, template.pointer(update_path)),
                    ],
                ),
                member_mismatch(
                    "member2",
                    in2.as_ref(),
                    &[
                        (override_path, template.pointer(override_path)),
                        (update_path, template.pointer(update_path)),
                    ],
                ),
            ]
            .into_iter()
            .flatten()
            .collect();
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;
    report(format_args!(
        "{kind}: created in both members after {:.2}s",
        created_at.elapsed().as_secs_f64()
    ));
    wait_for(
        &format!("the federated {what}: finalizer, Propagation=True, both clusters OK"),
        TIMEOUT,
        async || {
            let Some(object) = get_value(&hub_api, &name).await? else {
                bail!("the federated {what} disappeared");
            };
            Ok(propagated_ok(&object, &MEMBERS))
        },
    )
    .await?;

    // 2. A template update reaches both members; member1 keeps its override.
    let changed_at = Instant::now();
    modify(&hub_api, &name, |object| {
        set_pointer(
            &mut object["spec"]["template"],
            update_path,
            update_value.clone(),
        );
    })
    .await?;
    set_pointer(&mut template, update_path, update_value.clone());
    wait_for(
        &format!("the template update of {what} in both members"),
        TIMEOUT,
        async || {
            let in1 = get_value(&member1, &name).await?;
            let in2 = get_value(&member2, &name).await?;
            let problems: Vec<String> = [
                member_mismatch(
                    "member1",
                    in1.as_ref(),
                    &[
                        (update_path, Some(&update_value)),
                        (override_path, Some(&override_value)),
                    ],
                ),
                member_mismatch(
                    "member2",
                    in2.as_ref(),
                    &[(update_path, Some(&update_value))],
                ),
            ]
            .into_iter()
            .flatten()
            .collect();
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;
    report(format_args!(
        "{kind}: template update reached both members in {:.2}s",
        changed_at.elapsed().as_secs_f64()
    ));

    // 3. Placement shrunk to member2: member1's copy goes, member2's stays.
    modify(&hub_api, &name, |object| {
        object["spec"]["placement"] = placement(&["member2"]);
    })
    .await?;
    wait_for(
        &format!("{what} removed from member1 only"),
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            if let Some(left) = get_value(&member1, &name).await? {
                let state = if left["metadata"]["deletionTimestamp"].is_string() {
                    "terminating"
                } else {
                    "present"
                };
                problems.push(format!("member1: still {state}"));
            }
            let in2 = get_value(&member2, &name).await?;
            problems.extend(member_mismatch(
                "member2",
                in2.as_ref(),
                &[(update_path, Some(&update_value))],
            ));
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;

    // 4. A hand edit (`kubectl edit`) of a templated field in member2 is reverted.
    let (drift_path, drift_value) = fixture.drift.clone();
    let wanted = template.pointer(drift_path).cloned();
    ensure!(
        wanted.as_ref() != Some(&drift_value),
        "fixture error: the drift value of {kind} equals the template's"
    );
    let edited = modify_as(&member2, &name, "kubectl-edit", |object| {
        set_pointer(object, drift_path, drift_value.clone());
    })
    .await?;
    ensure!(
        edited.pointer(drift_path) == Some(&drift_value),
        "member2 refused the hand edit of {drift_path}: {}",
        edited.pointer(drift_path).unwrap_or(&Value::Null)
    );
    wait_for(
        &format!("the hand edit of {drift_path} in member2's {what} to be reverted"),
        TIMEOUT,
        async || {
            let in2 = get_value(&member2, &name).await?;
            Ok(Wait::all_or_pending(
                member_mismatch("member2", in2.as_ref(), &[(drift_path, wanted.as_ref())])
                    .into_iter()
                    .collect(),
            ))
        },
    )
    .await?;

    // 5. member2's copy deleted by hand is recreated.
    let old_uid = get_value(&member2, &name)
        .await?
        .and_then(|object| object["metadata"]["uid"].as_str().map(str::to_owned))
        .context("member2's copy has no uid")?;
    member2
        .delete(&name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting member2's {what} by hand"))?;
    wait_for(
        &format!("member2's {what} to be recreated after a hand deletion"),
        TIMEOUT,
        async || {
            let in2 = get_value(&member2, &name).await?;
            let mut problems: Vec<String> = member_mismatch(
                "member2",
                in2.as_ref(),
                &[(update_path, Some(&update_value))],
            )
            .into_iter()
            .collect();
            if let Some(object) = &in2
                && object["metadata"]["uid"] == old_uid.as_str()
            {
                problems.push("member2: still the deleted object".to_owned());
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;

    // 6. Deleting the federated object deletes the copies, then releases the object.
    hub_api
        .delete(&name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting the federated {what}"))?;
    wait_for(
        &format!("{what} deleted from both members"),
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            for (cluster, api) in [("member1", &member1), ("member2", &member2)] {
                if get_value(api, &name).await?.is_some() {
                    problems.push(format!("{cluster}: still there"));
                }
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;
    wait_for(
        &format!("the federated {what} to be released and gone"),
        TIMEOUT,
        async || match get_value(&hub_api, &name).await? {
            None => Ok(Wait::Done(())),
            Some(object) => Ok(Wait::Pending(format!(
                "still there, finalizers {}",
                object["metadata"]["finalizers"]
            ))),
        },
    )
    .await
}

fn qualified(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    }
}

fn pod_template(app: &str, image: &str) -> Value {
    json!({
        "metadata": { "labels": { "app": app } },
        "spec": { "containers": [{ "name": app, "image": image }] },
    })
}

#[tokio::test]
async fn cluster_role_lifecycle() -> anyhow::Result<()> {
    propagation_lifecycle(Fixture {
        kind: "ClusterRole",
        template: json!({
            "rules": [{ "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"] }],
        }),
        member1_override: ("replace", "/rules/0/verbs", json!(["get", "list", "watch"])),
        update: ("/rules/0/resources", json!(["configmaps", "secrets"])),
        drift: ("/rules/0/verbs", json!(["*"])),
    })
    .await
}

#[tokio::test]
async fn config_map_lifecycle() -> anyhow::Result<()> {
    propagation_lifecycle(Fixture {
        kind: "ConfigMap",
        template: json!({ "data": { "color": "blue", "size": "m" } }),
        member1_override: ("replace", "/data/color", json!("red")),
        update: ("/data/size", json!("l")),
        drift: ("/data/size", json!("xl")),
    })
    .await
}

#[tokio::test]
async fn deployment_lifecycle() -> anyhow::Result<()> {
    propagation_lifecycle(Fixture {
        kind: "Deployment",
        template: json!({
            "metadata": { "labels": { "app": "web" } },
            "spec": {
                "replicas": 1,
                "selector": { "matchLabels": { "app": "web" } },
                "template": pod_template("web", "registry.example/web:1.0"),
            },
        }),
        member1_override: ("replace", "/spec/replicas", json!(2)),
        update: (
            "/spec/template/spec/containers/0/image",
            json!("registry.example/web:1.1"),
        ),
        drift: (
            "/spec/template/spec/containers/0/image",
            json!("registry.example/web:tampered"),
        ),
    })
    .await
}

#[tokio::test]
async fn ingress_lifecycle() -> anyhow::Result<()> {
    propagation_lifecycle(Fixture {
        kind: "Ingress",
        template: json!({
            "spec": {
                "defaultBackend": { "service": { "name": "web", "port": { "number": 80 } } },
            },
        }),
        member1_override: (
            "replace",
            "/spec/defaultBackend/service/port/number",
            json!(8080),
        ),
        update: ("/spec/defaultBackend/service/name", json!("web-v2")),
        drift: ("/spec/defaultBackend/service/name", json!("hijacked")),
    })
    .await
}

#[tokio::test]
async fn job_lifecycle() -> anyhow::Result<()> {
    // A Job's pod template is immutable: the update changes a label, the drift parallelism.
    propagation_lifecycle(Fixture {
        kind: "Job",
        template: json!({
            "metadata": { "labels": { "revision": "1" } },
            "spec": {
                "parallelism": 1,
                "backoffLimit": 2,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{
                            "name": "task",
                            "image": "registry.example/task:1.0",
                            "command": ["true"],
                        }],
                    },
                },
            },
        }),
        member1_override: ("replace", "/spec/parallelism", json!(2)),
        update: ("/metadata/labels/revision", json!("2")),
        drift: ("/spec/parallelism", json!(3)),
    })
    .await
}

#[tokio::test]
async fn namespace_lifecycle() -> anyhow::Result<()> {
    propagation_lifecycle(Fixture {
        kind: "Namespace",
        template: json!({ "metadata": { "labels": { "team": "payments" } } }),
        member1_override: ("add", "/metadata/labels/tier", json!("gold")),
        update: ("/metadata/labels/team", json!("billing")),
        drift: ("/metadata/labels/team", json!("hijacked")),
    })
    .await
}

#[tokio::test]
async fn replica_set_lifecycle() -> anyhow::Result<()> {
    propagation_lifecycle(Fixture {
        kind: "ReplicaSet",
        template: json!({
            "spec": {
                "replicas": 1,
                "selector": { "matchLabels": { "app": "cache" } },
                "template": pod_template("cache", "registry.example/cache:7.0"),
            },
        }),
        member1_override: ("replace", "/spec/replicas", json!(2)),
        update: (
            "/spec/template/spec/containers/0/image",
            json!("registry.example/cache:7.2"),
        ),
        drift: (
            "/spec/template/spec/containers/0/image",
            json!("registry.example/cache:tampered"),
        ),
    })
    .await
}

#[tokio::test]
async fn secret_lifecycle() -> anyhow::Result<()> {
    propagation_lifecycle(Fixture {
        kind: "Secret",
        template: json!({
            "type": "Opaque",
            "data": { "username": b64("admin"), "password": b64("s3cret") },
        }),
        member1_override: ("replace", "/data/password", b64("member1-only")),
        update: ("/data/username", b64("root")),
        drift: ("/data/username", b64("intruder")),
    })
    .await
}

#[tokio::test]
async fn service_account_lifecycle() -> anyhow::Result<()> {
    propagation_lifecycle(Fixture {
        kind: "ServiceAccount",
        template: json!({
            "automountServiceAccountToken": true,
            "imagePullSecrets": [{ "name": "registry-a" }],
        }),
        member1_override: ("replace", "/automountServiceAccountToken", json!(false)),
        update: ("/imagePullSecrets/0/name", json!("registry-b")),
        drift: ("/imagePullSecrets/0/name", json!("registry-tampered")),
    })
    .await
}

#[tokio::test]
async fn service_lifecycle() -> anyhow::Result<()> {
    propagation_lifecycle(Fixture {
        kind: "Service",
        template: json!({
            "spec": {
                "type": "ClusterIP",
                "selector": { "app": "web" },
                "ports": [{ "name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080 }],
            },
        }),
        member1_override: ("replace", "/spec/selector/app", json!("web-member1")),
        update: ("/spec/ports/0/targetPort", json!(9090)),
        drift: ("/spec/ports/0/targetPort", json!(7070)),
    })
    .await
}

/// Creates `Federated<kind>` `name` in `namespace` with `spec`; returns the hub API.
async fn create_federated(
    fed: &Federation,
    kind: &str,
    namespace: &str,
    name: &str,
    spec: Value,
) -> anyhow::Result<Api<DynamicObject>> {
    hubfed_e2e::create_federated(&fed.hub().await?, kind, Some(namespace), name, spec).await
}

/// The `kind` APIs of both members in `namespace`, member1 first.
async fn member_apis(
    fed: &Federation,
    kind: &str,
    namespace: &str,
) -> anyhow::Result<[Api<DynamicObject>; 2]> {
    let resource = target(kind);
    Ok([
        dynamic_api(fed.client("member1").await?, &resource, Some(namespace)),
        dynamic_api(fed.client("member2").await?, &resource, Some(namespace)),
    ])
}

#[tokio::test]
async fn orphaned_copies_stay_unmanaged() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("orphan");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let name = "kept";
    let hub_api = create_federated(
        fed,
        "ConfigMap",
        &ns,
        name,
        json!({ "template": { "data": { "k": "v" } }, "placement": placement(&MEMBERS) }),
    )
    .await?;
    let members = member_apis(fed, "ConfigMap", &ns).await?;
    wait_for("the ConfigMap in both members", TIMEOUT, async || {
        let mut problems = Vec::new();
        for (cluster, api) in MEMBERS.iter().zip(&members) {
            let found = get_value(api, name).await?;
            problems.extend(member_mismatch(cluster, found.as_ref(), &[]));
        }
        Ok(Wait::all_or_pending(problems))
    })
    .await?;

    hub_api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": { ORPHAN_ANNOTATION: "true" } } })),
        )
        .await?;
    hub_api.delete(name, &DeleteParams::default()).await?;
    wait_for(
        "the federated ConfigMap gone, its copies kept without the managed label",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            if get_value(&hub_api, name).await?.is_some() {
                problems.push("the federated ConfigMap still exists".to_owned());
            }
            for (cluster, api) in MEMBERS.iter().zip(&members) {
                let Some(copy) = get_value(api, name).await? else {
                    bail!("{cluster}: the orphaned copy was deleted");
                };
                if copy["metadata"]["labels"].get(MANAGED_LABEL).is_some() {
                    problems.push(format!("{cluster}: labels {:?}", labels(&copy)));
                }
                if copy["data"]["k"] != "v" {
                    problems.push(format!("{cluster}: data {}", copy["data"]));
                }
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await
}

#[tokio::test]
async fn service_cluster_ip_and_node_ports_survive_template_updates() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("nodeport");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let name = "web";
    let hub_api = create_federated(
        fed,
        "Service",
        &ns,
        name,
        json!({
            "template": {
                "metadata": { "labels": { "revision": "1" } },
                "spec": {
                    "type": "NodePort",
                    "selector": { "app": "web" },
                    "ports": [{ "name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080 }],
                },
            },
            "placement": placement(&MEMBERS),
        }),
    )
    .await?;
    let members = member_apis(fed, "Service", &ns).await?;

    // uid, clusterIP and nodePort of each member's Service once allocated.
    let allocated: Vec<(Value, Value, Value)> = wait_for(
        "the NodePort Service in both members",
        TIMEOUT,
        async || {
            let mut found = Vec::new();
            let mut problems = Vec::new();
            for (cluster, api) in MEMBERS.iter().zip(&members) {
                let copy = get_value(api, name).await?;
                match (member_mismatch(cluster, copy.as_ref(), &[]), copy) {
                    (None, Some(copy)) => found.push((
                        copy["metadata"]["uid"].clone(),
                        copy["spec"]["clusterIP"].clone(),
                        copy["spec"]["ports"][0]["nodePort"].clone(),
                    )),
                    (problem, _) => problems.extend(problem),
                }
            }
            Ok(if problems.is_empty() {
                Wait::Done(found)
            } else {
                Wait::Pending(problems.join("; "))
            })
        },
    )
    .await?;
    for (cluster, (_, cluster_ip, node_port)) in MEMBERS.iter().zip(&allocated) {
        ensure!(
            cluster_ip.is_string() && node_port.is_u64(),
            "{cluster}: no clusterIP/nodePort allocated ({cluster_ip}, {node_port})"
        );
    }

    modify(&hub_api, name, |object| {
        let template = &mut object["spec"]["template"];
        set_pointer(template, "/metadata/labels/revision", json!("2"));
        set_pointer(template, "/spec/ports/0/targetPort", json!(9090));
    })
    .await?;
    wait_for(
        "the template update in both members, clusterIP and nodePort unchanged",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            for ((cluster, api), (uid, cluster_ip, node_port)) in
                MEMBERS.iter().zip(&members).zip(&allocated)
            {
                let copy = get_value(api, name).await?;
                if let Some(copy) = &copy {
                    // Once allocated these never change back: a difference is final.
                    if copy["metadata"]["uid"] != *uid {
                        bail!("{cluster}: the Service was recreated");
                    }
                    if copy["spec"]["clusterIP"] != *cluster_ip
                        || copy["spec"]["ports"][0]["nodePort"] != *node_port
                    {
                        bail!(
                            "{cluster}: clusterIP/nodePort changed from {cluster_ip}/{node_port} to {}/{}",
                            copy["spec"]["clusterIP"],
                            copy["spec"]["ports"][0]["nodePort"]
                        );
                    }
                }
                problems.extend(member_mismatch(
                    cluster,
                    copy.as_ref(),
                    &[
                        ("/metadata/labels/revision", Some(&json!("2"))),
                        ("/spec/ports/0/targetPort", Some(&json!(9090))),
                    ],
                ));
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await
}

#[tokio::test]
async fn retained_replicas_survive_template_updates() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("retain");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let name = "api";
    let hub_api = create_federated(
        fed,
        "Deployment",
        &ns,
        name,
        json!({
            "template": {
                "metadata": { "labels": { "app": "api", "revision": "1" } },
                "spec": {
                    "replicas": 2,
                    "selector": { "matchLabels": { "app": "api" } },
                    "template": pod_template("api", "registry.example/api:1.0"),
                },
            },
            "placement": placement(&MEMBERS),
            "retainReplicas": true,
        }),
    )
    .await?;
    let [member1, member2] = member_apis(fed, "Deployment", &ns).await?;
    wait_for("the Deployment in both members", TIMEOUT, async || {
        let mut problems = Vec::new();
        for (cluster, api) in [("member1", &member1), ("member2", &member2)] {
            let copy = get_value(api, name).await?;
            problems.extend(member_mismatch(
                cluster,
                copy.as_ref(),
                &[("/spec/replicas", Some(&json!(2)))],
            ));
        }
        Ok(Wait::all_or_pending(problems))
    })
    .await?;

    // An HPA or a person scales member1 (its own field manager, as kubectl does).
    member1
        .patch(
            name,
            &PatchParams {
                field_manager: Some("kubectl-scale".to_owned()),
                ..Default::default()
            },
            &Patch::Merge(json!({ "spec": { "replicas": 5 } })),
        )
        .await?;
    modify(&hub_api, name, |object| {
        set_pointer(
            &mut object["spec"]["template"],
            "/metadata/labels/revision",
            json!("2"),
        );
    })
    .await?;
    wait_for(
        "the template update in both members, member1 keeping 5 replicas",
        TIMEOUT,
        async || {
            let in1 = get_value(&member1, name).await?;
            let in2 = get_value(&member2, name).await?;
            let revision = json!("2");
            let problems: Vec<String> = [
                member_mismatch(
                    "member1",
                    in1.as_ref(),
                    &[
                        ("/metadata/labels/revision", Some(&revision)),
                        ("/spec/replicas", Some(&json!(5))),
                    ],
                ),
                member_mismatch(
                    "member2",
                    in2.as_ref(),
                    &[
                        ("/metadata/labels/revision", Some(&revision)),
                        ("/spec/replicas", Some(&json!(2))),
                    ],
                ),
            ]
            .into_iter()
            .flatten()
            .collect();
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await
}

#[tokio::test]
async fn invalid_overrides_fail_only_their_cluster() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("badoverride");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let members = member_apis(fed, "ConfigMap", &ns).await?;
    // KubeFed refuses overrides of name, namespace, generateName and kind; and a patch
    // operation that does not apply fails the same way.
    let cases = [
        (
            "rename",
            json!({ "path": "/metadata/name", "value": "renamed" }),
        ),
        (
            "remove-missing",
            json!({ "op": "remove", "path": "/data/missing" }),
        ),
    ];
    for (name, bad_override) in &cases {
        create_federated(
            fed,
            "ConfigMap",
            &ns,
            name,
            json!({
                "template": { "data": { "k": "v" } },
                "placement": placement(&MEMBERS),
                "overrides": [{ "clusterName": "member1", "clusterOverrides": [bad_override] }],
            }),
        )
        .await?;
    }
    let hub_api = dynamic_api(fed.hub().await?, &federated("ConfigMap"), Some(&ns));
    for (name, bad_override) in &cases {
        let path = bad_override["path"].as_str().unwrap_or_default();
        wait_for(
            &format!("{name}: member1 ApplyOverridesFailed naming {path}, member2 propagated"),
            TIMEOUT,
            async || {
                let mut problems = Vec::new();
                let object = get_value(&hub_api, name)
                    .await?
                    .with_context(|| format!("the federated ConfigMap {name} disappeared"))?;
                match cluster_status(&object, "member1") {
                    Some(entry)
                        if entry["status"] == "ApplyOverridesFailed"
                            && entry["message"].as_str().is_some_and(|m| m.contains(path)) => {}
                    other => problems.push(format!("status.clusters[member1] {}", show(other))),
                }
                match propagation_condition(&object) {
                    Some(c) if c["status"] == "False" && c["reason"] == "CheckClusters" => {}
                    other => problems.push(format!("Propagation condition {}", show(other))),
                }
                if get_value(&members[0], name).await?.is_some() {
                    problems.push("member1 holds the object".to_owned());
                }
                let in2 = get_value(&members[1], name).await?;
                problems.extend(member_mismatch(
                    "member2",
                    in2.as_ref(),
                    &[("/data/k", Some(&json!("v")))],
                ));
                Ok(Wait::all_or_pending(problems))
            },
        )
        .await?;
    }
    Ok(())
}

/// A KubeFed user's label override on a template without labels: `replace` (op omitted) of a
/// missing `/metadata/labels`, which KubeFed's JSON patch library applies as an add (issue 10).
#[tokio::test]
async fn label_overrides_on_templates_without_labels_reach_members() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("labeloverride");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let templates = [
        ("ConfigMap", json!({"data": {"k": "v"}})),
        ("Secret", json!({"stringData": {"k": "v"}})),
        (
            "Service",
            json!({"spec": {"ports": [{"port": 80}], "selector": {"app": "web"}}}),
        ),
    ];
    for (kind, template) in &templates {
        let overrides: Vec<Value> = MEMBERS
            .iter()
            .map(|cluster| {
                json!({"clusterName": cluster, "clusterOverrides": [
                    {"path": "/metadata/labels", "value": {"region": format!("{cluster}-region")}},
                ]})
            })
            .collect();
        create_federated(
            fed,
            kind,
            &ns,
            "labelled",
            json!({"template": template, "placement": placement(&MEMBERS), "overrides": overrides}),
        )
        .await?;
    }
    for (kind, _) in &templates {
        let members = member_apis(fed, kind, &ns).await?;
        wait_for(
            &format!("{kind}: the override's labels in both members"),
            TIMEOUT,
            async || {
                let mut problems = Vec::new();
                for (api, cluster) in members.iter().zip(MEMBERS) {
                    let region = json!(format!("{cluster}-region"));
                    let copy = get_value(api, "labelled").await?;
                    problems.extend(member_mismatch(
                        cluster,
                        copy.as_ref(),
                        &[
                            ("/metadata/labels/region", Some(&region)),
                            ("/metadata/labels/kubefed.io~1managed", Some(&json!("true"))),
                        ],
                    ));
                }
                Ok(Wait::all_or_pending(problems))
            },
        )
        .await?;
    }
    Ok(())
}

#[tokio::test]
async fn template_annotations_reach_members() -> anyhow::Result<()> {
    // KubeFed stripped template annotations; hubfed propagates them, and leaves alone the
    // annotations that others put on member objects.
    let fed = Federation::shared();
    let ns = unique_ns("annotations");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let name = "annotated";
    let hub_api = create_federated(
        fed,
        "ConfigMap",
        &ns,
        name,
        json!({
            "template": {
                "metadata": { "annotations": { "example.com/owner": "team-a" } },
                "data": { "k": "v" },
            },
            "placement": placement(&MEMBERS),
        }),
    )
    .await?;
    let members = member_apis(fed, "ConfigMap", &ns).await?;
    let owner_path = "/metadata/annotations/example.com~1owner";
    let local_path = "/metadata/annotations/example.com~1local-note";
    let team_a = json!("team-a");
    wait_for(
        "the template annotation in both members",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            for (cluster, api) in MEMBERS.iter().zip(&members) {
                let copy = get_value(api, name).await?;
                problems.extend(member_mismatch(
                    cluster,
                    copy.as_ref(),
                    &[(owner_path, Some(&team_a))],
                ));
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;

    members[0]
        .patch(
            name,
            &PatchParams {
                field_manager: Some("kubectl-annotate".to_owned()),
                ..Default::default()
            },
            &Patch::Merge(
                json!({ "metadata": { "annotations": { "example.com/local-note": "keep me" } } }),
            ),
        )
        .await?;
    modify(&hub_api, name, |object| {
        set_pointer(&mut object["spec"]["template"], owner_path, json!("team-b"));
    })
    .await?;
    let team_b = json!("team-b");
    let note = json!("keep me");
    wait_for(
        "the annotation update in both members, member1's own annotation kept",
        TIMEOUT,
        async || {
            let in1 = get_value(&members[0], name).await?;
            let in2 = get_value(&members[1], name).await?;
            let problems: Vec<String> = [
                member_mismatch(
                    "member1",
                    in1.as_ref(),
                    &[(owner_path, Some(&team_b)), (local_path, Some(&note))],
                ),
                member_mismatch("member2", in2.as_ref(), &[(owner_path, Some(&team_b))]),
            ]
            .into_iter()
            .flatten()
            .collect();
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await
}

#[tokio::test]
async fn bad_placements_get_status_and_do_not_stall_others() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("badplacement");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let template = json!({ "data": { "k": "v" } });
    create_federated(
        fed,
        "ConfigMap",
        &ns,
        "unknown-cluster",
        json!({ "template": template, "placement": placement(&["member1", "no-such-cluster"]) }),
    )
    .await?;
    create_federated(
        fed,
        "ConfigMap",
        &ns,
        "bad-selector",
        json!({
            "template": template,
            "placement": { "clusterSelector": { "matchExpressions": [
                { "key": "region", "operator": "Sideways", "values": ["north"] },
            ] } },
        }),
    )
    .await?;
    create_federated(
        fed,
        "ConfigMap",
        &ns,
        "valid",
        json!({ "template": template, "placement": placement(&MEMBERS) }),
    )
    .await?;
    let hub_api = dynamic_api(fed.hub().await?, &federated("ConfigMap"), Some(&ns));
    let members = member_apis(fed, "ConfigMap", &ns).await?;

    wait_for("the valid ConfigMap in both members", TIMEOUT, async || {
        let mut problems = Vec::new();
        for (cluster, api) in MEMBERS.iter().zip(&members) {
            let copy = get_value(api, "valid").await?;
            problems.extend(member_mismatch(
                cluster,
                copy.as_ref(),
                &[("/data/k", Some(&json!("v")))],
            ));
        }
        Ok(Wait::all_or_pending(problems))
    })
    .await?;

    wait_for(
        "unknown-cluster: in member1, status naming no-such-cluster or Propagation=False",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            let in1 = get_value(&members[0], "unknown-cluster").await?;
            problems.extend(member_mismatch("member1", in1.as_ref(), &[]));
            let object = get_value(&hub_api, "unknown-cluster")
                .await?
                .context("the federated ConfigMap unknown-cluster disappeared")?;
            let condition = propagation_condition(&object);
            let reflected = cluster_status(&object, "no-such-cluster").is_some()
                || condition.is_some_and(|c| {
                    c["status"] == "False"
                        || c["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("no-such-cluster"))
                });
            if !(status_is_current(&object) && reflected) {
                problems.push(format!("status {}", object["status"]));
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;

    wait_for(
        "bad-selector: Propagation=False with reason ComputePlacementFailed",
        TIMEOUT,
        async || {
            let object = get_value(&hub_api, "bad-selector")
                .await?
                .context("the federated ConfigMap bad-selector disappeared")?;
            Ok(match propagation_condition(&object) {
                Some(c) if c["status"] == "False" && c["reason"] == "ComputePlacementFailed" => {
                    Wait::Done(())
                }
                _ => Wait::Pending(format!("status {}", object["status"])),
            })
        },
    )
    .await?;
    // Nothing can have been placed by an invalid selector.
    for (cluster, api) in MEMBERS.iter().zip(&members) {
        ensure!(
            get_value(api, "bad-selector").await?.is_none(),
            "{cluster} holds bad-selector"
        );
    }
    // Both problems are also Warning events on their objects.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(fed.hub().await?, &ns);
    wait_for(
        "Warning events for both bad placements",
        TIMEOUT,
        async || {
            let seen: Vec<(String, String)> = events
                .list(&Default::default())
                .await?
                .items
                .into_iter()
                .filter(|e| e.type_.as_deref() == Some("Warning"))
                .filter_map(|e| Some((e.regarding?.name?, e.reason?)))
                .collect();
            let want = [
                ("unknown-cluster", "UnknownClusters"),
                ("bad-selector", "ComputePlacementFailed"),
            ];
            let missing: Vec<String> = want
                .iter()
                .filter(|(n, r)| !seen.iter().any(|(sn, sr)| sn == n && sr == r))
                .map(|(n, r)| format!("no {r} event for {n}"))
                .collect();
            Ok(Wait::all_or_pending(missing))
        },
    )
    .await
}

#[tokio::test]
async fn a_type_enabled_at_run_time_propagates() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let widget = TypeResource {
        group: "example.hubfed.io".to_owned(),
        version: "v1".to_owned(),
        kind: "Widget".to_owned(),
        plural_name: "widgets".to_owned(),
        scope: ResourceScope::Namespaced,
    };
    let widget_crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "widgets.example.hubfed.io" },
        "spec": {
            "group": "example.hubfed.io",
            "scope": "Namespaced",
            "names": { "kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList" },
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                    },
                } },
            }],
        },
    }))?;
    for cluster in ["hub", "member1", "member2"] {
        install_crds(
            &fed.client(cluster).await?,
            std::slice::from_ref(&widget_crd),
        )
        .await?;
    }
    let ftc = FederatedTypeConfig::for_target(widget.clone(), KUBEFED_NAMESPACE);
    let federated_widget_crd =
        federated_crd(&FederatedTypeDescription::for_ftc(&ftc, &[], false), None)?;
    let hub = fed.hub().await?;
    install_crds(&hub, &[federated_widget_crd]).await?;
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    ftcs.create(&PostParams::default(), &ftc).await?;

    let ns = unique_ns("widgets");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let name = "gizmo";
    create_federated(
        fed,
        "Widget",
        &ns,
        name,
        json!({
            "template": { "spec": { "size": 3, "color": "teal" } },
            "placement": placement(&MEMBERS),
        }),
    )
    .await?;
    let resource = widget.to_dynamic();
    let members = [
        dynamic_api(fed.client("member1").await?, &resource, Some(&ns)),
        dynamic_api(fed.client("member2").await?, &resource, Some(&ns)),
    ];
    wait_for("the Widget in both members", TIMEOUT, async || {
        let mut problems = Vec::new();
        for (cluster, api) in MEMBERS.iter().zip(&members) {
            let copy = get_value(api, name).await?;
            problems.extend(member_mismatch(
                cluster,
                copy.as_ref(),
                &[
                    ("/spec/size", Some(&json!(3))),
                    ("/spec/color", Some(&json!("teal"))),
                ],
            ));
        }
        Ok(Wait::all_or_pending(problems))
    })
    .await?;
    wait_for(
        "FTC widgets.example.hubfed.io: propagationController Running",
        TIMEOUT,
        async || {
            let ftc = ftcs.get("widgets.example.hubfed.io").await?;
            Ok(ftc_running(&serde_json::to_value(&ftc)?))
        },
    )
    .await
}

/// `Done` when an FTC carries the FTC finalizer and a current status with the sync controller
/// `Running`.
fn ftc_running(ftc: &Value) -> Wait<()> {
    let mut problems = Vec::new();
    let finalizers = &ftc["metadata"]["finalizers"];
    if !finalizers
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f == FTC_FINALIZER))
    {
        problems.push(format!("finalizers {finalizers}"));
    }
    if !status_is_current(ftc) || ftc["status"]["propagationController"] != "Running" {
        problems.push(format!(
            "status {} at generation {}",
            ftc["status"], ftc["metadata"]["generation"]
        ));
    }
    Wait::all_or_pending(problems)
}

#[tokio::test]
async fn default_ftcs_report_running_sync_controllers() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(fed.hub().await?, KUBEFED_NAMESPACE);
    let names: Vec<String> =
        hubfed_api::defaulttypes::default_federated_type_configs(KUBEFED_NAMESPACE)
            .into_iter()
            .filter_map(|ftc| ftc.metadata.name)
            .collect();
    wait_for(
        "the ten default FTCs: observedGeneration current, propagationController Running",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            for name in &names {
                let ftc = serde_json::to_value(ftcs.get(name).await?)?;
                if let Wait::Pending(problem) = ftc_running(&ftc) {
                    problems.push(format!("{name}: {problem}"));
                }
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await
}

// Keep the managed-label helper honest: it is what every wait above relies on.
#[test]
fn managed_label_is_read_from_labels() {
    assert!(is_managed(
        &json!({ "metadata": { "labels": { MANAGED_LABEL: "true" } } })
    ));
    assert!(!is_managed(
        &json!({ "metadata": { "labels": { MANAGED_LABEL: "false" } } })
    ));
    assert!(!is_managed(&json!({ "metadata": {} })));
}

#[tokio::test]
async fn immutable_field_changes_are_reported_then_recreated_on_request() -> anyhow::Result<()> {
    // A Job's pod template cannot change: the member refuses, and the cluster reports
    // UpdateFailed with the API server's message. With the opt-in annotation hubfed deletes
    // and recreates the member Job instead.
    let fed = Federation::shared();
    let ns = unique_ns("immutable");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let name = "batch";
    let template = |image: &str| {
        json!({"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": image}],
        }}}})
    };
    let hub_api = create_federated(
        fed,
        "Job",
        &ns,
        name,
        json!({"template": template("busybox:1"), "placement": placement(&MEMBERS)}),
    )
    .await?;
    wait_for("the Job propagated", TIMEOUT, async || {
        Ok(match get_value(&hub_api, name).await? {
            Some(object) => propagated_ok(&object, &MEMBERS),
            None => Wait::Pending("federated Job absent".into()),
        })
    })
    .await?;
    let members = member_apis(fed, "Job", &ns).await?;
    let image_path = "/spec/template/spec/containers/0/image";
    let mut first_uids = Vec::new();
    for api in &members {
        let job = get_value(api, name).await?.context("member Job")?;
        first_uids.push(job["metadata"]["uid"].clone());
    }

    modify(&hub_api, name, |object| {
        object["spec"]["template"] = template("busybox:2");
    })
    .await?;
    wait_for(
        "UpdateFailed naming the immutable field",
        TIMEOUT,
        async || {
            let object = get_value(&hub_api, name).await?.context("federated Job")?;
            let mut problems = Vec::new();
            for cluster in MEMBERS {
                match cluster_status(&object, cluster) {
                    Some(entry)
                        if entry["status"] == "UpdateFailed"
                            && entry["message"]
                                .as_str()
                                .is_some_and(|m| m.contains("immutable")) => {}
                    other => problems.push(format!("status.clusters[{cluster}] {}", show(other))),
                }
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;
    for api in &members {
        let job = get_value(api, name).await?.context("member Job")?;
        ensure!(
            job.pointer(image_path) == Some(&json!("busybox:1")),
            "member Job changed: {job}"
        );
    }

    modify(&hub_api, name, |object| {
        object["metadata"]["annotations"] =
            json!({hubfed_api::names::RECREATE_ON_IMMUTABLE_ANNOTATION: "true"});
    })
    .await?;
    let new_image = json!("busybox:2");
    wait_for(
        "the member Jobs recreated with the new template",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            for ((cluster, api), old_uid) in MEMBERS.iter().zip(&members).zip(&first_uids) {
                let job = get_value(api, name).await?;
                problems.extend(member_mismatch(
                    cluster,
                    job.as_ref(),
                    &[(image_path, Some(&new_image))],
                ));
                if let Some(job) = &job
                    && &job["metadata"]["uid"] == old_uid
                {
                    problems.push(format!("{cluster}: same uid, not recreated"));
                }
            }
            if let Some(object) = get_value(&hub_api, name).await?
                && let Wait::Pending(p) = propagated_ok(&object, &MEMBERS)
            {
                problems.push(p);
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await
}

#[tokio::test]
async fn propagated_versions_carry_kubefed_names_and_hashes() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("versions");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let name = "versioned";
    let template = json!({"data": {"k": "v", "html": "<a&b>"}});
    let overrides = json!([{"clusterName": "member1", "clusterOverrides": [{"path": "/data/k", "value": "one"}]}]);
    create_federated(
        fed,
        "ConfigMap",
        &ns,
        name,
        json!({"template": template, "placement": placement(&MEMBERS), "overrides": overrides}),
    )
    .await?;
    let overrides: Vec<hubfed_api::federated::ClusterOverrides> =
        serde_json::from_value(overrides)?;
    let want_template = hubfed_core::version::template_version(Some(&template));
    let want_overrides = hubfed_core::version::overrides_version(Some(&overrides));
    let versions: Api<hubfed_api::propagatedversion::PropagatedVersion> =
        Api::namespaced(fed.hub().await?, &ns);
    wait_for(
        "PropagatedVersion configmap-versioned",
        TIMEOUT,
        async || {
            let Some(pv) = versions.get_opt(&format!("configmap-{name}")).await? else {
                return Ok(Wait::Pending("absent".into()));
            };
            let status = pv.status.clone().unwrap_or_default();
            let clusters: Vec<&str> = status
                .cluster_versions
                .iter()
                .map(|v| v.cluster_name.as_str())
                .collect();
            Ok(
                if status.template_version == want_template
                    && status.override_version == want_overrides
                    && clusters == MEMBERS
                    && status
                        .cluster_versions
                        .iter()
                        .all(|v| v.version.starts_with("rv:"))
                    && pv
                        .metadata
                        .owner_references
                        .as_ref()
                        .is_some_and(|o| o.iter().any(|o| o.name == name))
                {
                    Wait::Done(())
                } else {
                    Wait::Pending(format!(
                        "{:?} {:?}",
                        pv.metadata.owner_references, pv.status
                    ))
                },
            )
        },
    )
    .await
}

#[tokio::test]
async fn member_writes_are_recorded_as_events() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("events");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let name = "eventful";
    create_federated(
        fed,
        "ConfigMap",
        &ns,
        name,
        json!({"template": {"data": {"k": "v"}}, "placement": placement(&MEMBERS)}),
    )
    .await?;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(fed.hub().await?, &ns);
    wait_for(
        "CreateInCluster events for both members",
        TIMEOUT,
        async || {
            let notes: Vec<String> = events
                .list(&Default::default())
                .await?
                .items
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
                .filter(|e| e.reason.as_deref() == Some("CreateInCluster"))
                .filter_map(|e| e.note)
                .collect();
            let missing: Vec<String> = MEMBERS
                .iter()
                .filter(|m| !notes.iter().any(|n| n.contains(&format!("{m:?}"))))
                .map(|m| format!("no CreateInCluster event for {m}; notes {notes:?}"))
                .collect();
            Ok(Wait::all_or_pending(missing))
        },
    )
    .await
}
