//! `hubfedctl plan` and `hubfedctl diff` against the harness federation: the object each
//! member's dry run says it would hold (`-o json`) is the object the controller then writes
//! there, field for field but for what the servers set; an immutable change is reported as
//! needing recreation; a member refusing one cluster's dry run is that cluster's error; a plain
//! object with `--placement` is planned; nothing is ever written, by `plan` or by `diff`
//! (member and hub resourceVersions unchanged).

use std::collections::BTreeMap;
use std::path::Path;

use hubfed_e2e::{
    Federation, MEMBERS, TIMEOUT, Wait, create_federated, deployment_spec, dynamic_api, federated,
    target, unique_ns, wait_for,
};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn hubfedctl(args: &[&str]) -> Run {
    let kubeconfig = Federation::shared().env().kubeconfig_path();
    let (code, stdout, stderr) = hubfed_e2e::hubfedctl(kubeconfig, args).await;
    Run {
        code,
        stdout,
        stderr,
    }
}

/// `resourceVersion` of the member Deployments and of the hub object.
/// What a write by anyone but the members' own kube-controller-manager would change: each
/// member Deployment's generation and every other field manager's managedFields entry, and
/// the federated object's generation. (A member's resourceVersion also moves when its
/// Deployment controller updates status or the revision annotation, which it may still be
/// doing while a test runs; the hub object's status is the controller's to write.)
async fn versions(namespace: &str, name: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let fed = Federation::shared();
    let mut found = BTreeMap::new();
    for cluster in MEMBERS {
        let object = fed
            .member_object(cluster, &target("Deployment"), Some(namespace), name)
            .await?;
        found.insert(
            cluster.to_owned(),
            object
                .map(|o| {
                    let others: Vec<&serde_json::Value> = o["metadata"]["managedFields"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|m| m["manager"] != "kube-controller-manager")
                        .collect();
                    format!(
                        "generation {} fields {}",
                        o["metadata"]["generation"],
                        serde_json::Value::from(others.into_iter().cloned().collect::<Vec<_>>())
                    )
                })
                .unwrap_or_default(),
        );
    }
    let hub = dynamic_api(fed.hub().await?, &federated("Deployment"), Some(namespace));
    found.insert(
        "hub".to_owned(),
        format!("generation {:?}", hub.get(name).await?.metadata.generation),
    );
    Ok(found)
}

fn write_file(dir: &Path, name: &str, value: &Value) -> anyhow::Result<String> {
    let path = dir.join(name);
    std::fs::write(&path, serde_yaml_ng::to_string(value)?)?;
    Ok(path.display().to_string())
}

/// Propagated `web` with an override in member2; `changed` is the same object with a new image
/// and another replicas override.
async fn setup(namespace: &str) -> anyhow::Result<Value> {
    let fed = Federation::shared();
    fed.create_federated_namespace(namespace, &MEMBERS).await?;
    let hub = fed.hub().await?;
    let mut spec = deployment_spec("web", 2, &MEMBERS);
    spec["overrides"] = json!([{"clusterName": "member2", "clusterOverrides": [{"path": "/spec/replicas", "value": 5}]}]);
    create_federated(&hub, "Deployment", Some(namespace), "web", spec.clone()).await?;
    wait_for("web propagated", TIMEOUT, async || {
        let mut pending = Vec::new();
        for (cluster, replicas) in [("member1", 2), ("member2", 5)] {
            let object = fed
                .member_object(cluster, &target("Deployment"), Some(namespace), "web")
                .await?;
            if object.as_ref().and_then(|o| o["spec"]["replicas"].as_i64()) != Some(replicas) {
                pending.push(format!(
                    "{cluster}: {:?}",
                    object.map(|o| o["spec"]["replicas"].clone())
                ));
            }
        }
        Ok(Wait::all_or_pending(pending))
    })
    .await?;
    let mut changed = spec;
    changed["template"]["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.27");
    changed["overrides"][0]["clusterOverrides"][0]["value"] = json!(7);
    Ok(json!({
        "apiVersion": "types.kubefed.io/v1beta1",
        "kind": "FederatedDeployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": changed,
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_diffs_match_what_the_controller_applies() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let namespace = unique_ns("plan");
    let changed = setup(&namespace).await?;
    let dir = tempdir()?;
    let file = write_file(&dir, "web.yaml", &changed)?;

    // In step with the hub: diff says nothing would change, and writes nothing.
    let before = versions(&namespace, "web").await?;
    let unchanged = hubfedctl(&["diff", "deployments/web", "-n", &namespace]).await;
    assert_eq!(versions(&namespace, "web").await?, before);
    assert_eq!(
        unchanged.code, 0,
        "{}{}",
        unchanged.stdout, unchanged.stderr
    );
    assert_eq!(unchanged.stdout, "member1: unchanged\nmember2: unchanged\n");

    let before = versions(&namespace, "web").await?;
    let planned = hubfedctl(&["plan", "-f", &file]).await;
    assert_eq!(
        planned.code, 1,
        "changes: exit 1\n{}{}",
        planned.stdout, planned.stderr
    );
    let out = &planned.stdout;
    let (member1, member2) = out
        .split_once("member2: update")
        .ok_or_else(|| anyhow::anyhow!("no member2 update in:\n{out}"))?;
    assert!(member1.starts_with("member1: update\n"), "{out}");
    assert!(
        member1.contains("-      - image: nginx\n")
            && member1.contains("+      - image: nginx:1.27\n"),
        "{out}"
    );
    assert!(
        !member1.contains("replicas"),
        "member1 keeps its replicas: {out}"
    );
    assert!(
        member2.contains("-  replicas: 5\n") && member2.contains("+  replicas: 7\n"),
        "{out}"
    );
    assert!(member2.contains("+      - image: nginx:1.27\n"), "{out}");
    // Nothing written anywhere.
    assert_eq!(versions(&namespace, "web").await?, before);
    // The objects the dry runs returned.
    let planned = hubfedctl(&["plan", "-f", &file, "-o", "json"]).await;
    assert_eq!(planned.code, 1, "{}{}", planned.stdout, planned.stderr);
    let document: Value = serde_json::from_str(&planned.stdout)?;
    let after: BTreeMap<String, Value> = document["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["cluster"].as_str().unwrap_or_default().to_owned(),
                c["after"].clone(),
            )
        })
        .collect();
    assert_eq!(versions(&namespace, "web").await?, before);

    // Apply it for real; once the controller is done, diff finds nothing left: what it applied
    // is what the dry runs showed.
    let hub = dynamic_api(fed.hub().await?, &federated("Deployment"), Some(&namespace));
    hub.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": changed["spec"]})),
    )
    .await?;
    wait_for("the change applied in both members", TIMEOUT, async || {
        let mut pending = Vec::new();
        for (cluster, replicas) in [("member1", 2), ("member2", 7)] {
            let object = fed
                .member_object(cluster, &target("Deployment"), Some(&namespace), "web")
                .await?
                .unwrap_or_default();
            let image = &object["spec"]["template"]["spec"]["containers"][0]["image"];
            if object["spec"]["replicas"] != json!(replicas) || image != "nginx:1.27" {
                pending.push(format!(
                    "{cluster}: replicas {}, image {image}",
                    object["spec"]["replicas"]
                ));
            }
        }
        Ok(Wait::all_or_pending(pending))
    })
    .await?;
    // What the controller wrote is what the dry run said, but for what servers set.
    for cluster in MEMBERS {
        let written = fed
            .member_object(cluster, &target("Deployment"), Some(&namespace), "web")
            .await?
            .unwrap_or_default();
        assert_eq!(
            server_set_removed(&written),
            server_set_removed(&after[cluster]),
            "{cluster}"
        );
    }
    // Once the members' controllers are done writing status, diff writes nothing either.
    let before = settled_versions(&namespace, "web").await?;
    let settled = hubfedctl(&["diff", "deployments/web", "-n", &namespace]).await;
    assert_eq!(settled.code, 0, "{}{}", settled.stdout, settled.stderr);
    assert_eq!(settled.stdout, "member1: unchanged\nmember2: unchanged\n");
    assert_eq!(versions(&namespace, "web").await?, before);
    Ok(())
}

/// [`versions`] once they stay the same for a second (the Deployment controller writes status
/// for a while after a change).
async fn settled_versions(namespace: &str, name: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut last = versions(namespace, name).await?;
    wait_for("resourceVersions settled", TIMEOUT, async || {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let now = versions(namespace, name).await?;
        let settled = now == last;
        last = now.clone();
        Ok(if settled {
            Wait::Done(now)
        } else {
            Wait::Pending(format!("{now:?}"))
        })
    })
    .await
}

/// An object without what the API servers set on every write (and the status, which applies
/// do not write): versions, ownership records, times, the Deployment controller's revision.
fn server_set_removed(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
    if let Some(metadata) = object["metadata"].as_object_mut() {
        for field in [
            "managedFields",
            "resourceVersion",
            "generation",
            "uid",
            "creationTimestamp",
        ] {
            metadata.remove(field);
        }
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.remove("deployment.kubernetes.io/revision");
        }
    }
    object
}

/// A member that refuses its dry run (a ConfigMap key it does not allow, by an override for
/// member2 only) is member2's error: member1 is still planned, and the exit code is 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_dry_run_is_its_clusters_error() -> anyhow::Result<()> {
    let namespace = unique_ns("plan-refused");
    let fed = Federation::shared();
    fed.create_federated_namespace(&namespace, &MEMBERS).await?;
    let dir = tempdir()?;
    let object = json!({
        "apiVersion": "types.kubefed.io/v1beta1",
        "kind": "FederatedConfigMap",
        "metadata": {"name": "settings", "namespace": namespace},
        "spec": {
            "template": {"data": {"mode": "fast"}},
            "placement": {"clusters": [{"name": "member1"}, {"name": "member2"}]},
            "overrides": [{"clusterName": "member2", "clusterOverrides": [
                {"path": "/data/not a key!", "value": "x"},
            ]}],
        },
    });
    let file = write_file(&dir, "refused.yaml", &object)?;
    let planned = hubfedctl(&["plan", "-f", &file]).await;
    assert_eq!(planned.code, 2, "{}{}", planned.stdout, planned.stderr);
    assert!(
        planned.stdout.starts_with("member1: create\n"),
        "{}",
        planned.stdout
    );
    assert!(
        planned.stdout.contains("member2: error (") && planned.stdout.contains("not a key!"),
        "{}",
        planned.stdout
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_reports_immutable_changes_and_plain_objects() -> anyhow::Result<()> {
    let namespace = unique_ns("plan-immutable");
    let mut changed = setup(&namespace).await?;
    let dir = tempdir()?;
    // spec.selector of a Deployment is immutable.
    let template = &mut changed["spec"]["template"]["spec"];
    template["selector"]["matchLabels"]["app"] = json!("web2");
    template["template"]["metadata"]["labels"]["app"] = json!("web2");
    let file = write_file(&dir, "immutable.yaml", &changed)?;
    let before = versions(&namespace, "web").await?;
    let planned = hubfedctl(&["plan", "-f", &file]).await;
    assert_eq!(planned.code, 1, "{}{}", planned.stdout, planned.stderr);
    for cluster in MEMBERS {
        assert!(
            planned.stdout.contains(&format!(
                "{cluster}: needs recreation (an immutable field changes"
            )),
            "{}",
            planned.stdout
        );
    }
    assert!(
        planned.stdout.contains("field is immutable"),
        "{}",
        planned.stdout
    );
    assert_eq!(versions(&namespace, "web").await?, before);

    // A plain ConfigMap placed on member1 only: created there, skipped in member2, not created.
    let plain = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": namespace},
        "data": {"mode": "fast"},
    });
    let file = write_file(&dir, "plain.yaml", &plain)?;
    let planned = hubfedctl(&["plan", "-f", &file, "--placement", "member1"]).await;
    assert_eq!(planned.code, 1, "{}{}", planned.stdout, planned.stderr);
    assert!(
        planned.stdout.starts_with("member1: create\n"),
        "{}",
        planned.stdout
    );
    assert!(
        planned.stdout.contains("+  mode: fast\n"),
        "{}",
        planned.stdout
    );
    assert!(
        planned.stdout.contains("member2: skipped (not placed)\n"),
        "{}",
        planned.stdout
    );
    let fed = Federation::shared();
    let created = fed
        .member_object(
            "member1",
            &target("ConfigMap"),
            Some(&namespace),
            "settings",
        )
        .await?;
    assert!(created.is_none(), "plan created {created:?}");

    // Bad input: one line on stderr, exit 2.
    let missing = hubfedctl(&["plan", "-f", "/nonexistent/file.yaml"]).await;
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    assert_eq!(missing.stderr.lines().count(), 1, "{}", missing.stderr);
    assert!(
        missing
            .stderr
            .starts_with("error: cannot read /nonexistent/file.yaml"),
        "{}",
        missing.stderr
    );
    Ok(())
}

fn tempdir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "hubfed-plan-{}-{}",
        std::process::id(),
        unique_ns("d")
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
