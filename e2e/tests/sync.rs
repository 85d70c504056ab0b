//! Propagation by the sync controller (docs/kubefed-compatibility.md §1.6, §2.4), against a real
//! hub and two real members: every default type through its whole life — created with an
//! override, updated, placed elsewhere, edited and deleted by hand in a member, deleted.
//!
//! Each test has its own namespace or uniquely named cluster-scoped objects. What members'
//! copies keep and get is in `sync_members.rs`, what the hub reports in `sync_status.rs`.

use std::time::Instant;

use anyhow::{Context as _, bail, ensure};
use base64::Engine as _;
use hubfed_api::names::MANAGED_LABEL;
use hubfed_e2e::{
    Expected, Federation, MEMBERS, TIMEOUT, Wait, copy_problems, default_ftc, dynamic_api,
    federated, federated_object, get_value, is_managed, member_mismatch, modify, modify_as,
    placement, pod_template, propagated_ok, report, set_pointer, target, unique_name, unique_ns,
    wait_copies, wait_for,
};
use kube::api::{DeleteParams, PostParams};
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
    wait_copies(
        &format!("{what} in both members, overridden in member1"),
        &name,
        &[
            Expected::copy("member1", &member1).with(&[
                (override_path, Some(&override_value)),
                (update_path, template.pointer(update_path)),
            ]),
            Expected::copy("member2", &member2).with(&[
                (override_path, template.pointer(override_path)),
                (update_path, template.pointer(update_path)),
            ]),
        ],
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
    wait_copies(
        &format!("the template update of {what} in both members"),
        &name,
        &[
            Expected::copy("member1", &member1).with(&[
                (update_path, Some(&update_value)),
                (override_path, Some(&override_value)),
            ]),
            Expected::copy("member2", &member2).with(&[(update_path, Some(&update_value))]),
        ],
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
            let member2_copy = Expected::copy("member2", &member2);
            let member2_copy = member2_copy.with(&[(update_path, Some(&update_value))]);
            problems.extend(copy_problems(&name, &[member2_copy]).await?);
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
    wait_copies(
        &format!("the hand edit of {drift_path} in member2's {what} to be reverted"),
        &name,
        &[Expected::copy("member2", &member2).with(&[(drift_path, wanted.as_ref())])],
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
