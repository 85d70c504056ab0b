//! Readiness people can wait on (issue 10): a federated object's `Ready` condition is `True`
//! only when the workload is up in every placed cluster, and `status.ready` counts the ready
//! clusters for `kubectl get`'s READY column.
//!
//! The members run kube-controller-manager, so a propagated Deployment gets a ReplicaSet and
//! Pods and its availability comes from the real controllers. There is no kubelet: the test
//! acts as one, writing the Pods' `Ready` condition through the `pods/status` subresource.

use std::process::Command;

use anyhow::Context as _;
use hubfed_e2e::{
    Federation, MEMBERS, TIMEOUT, Wait, create_federated, deployment_spec, get_value, report,
    unique_ns, wait_for,
};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

/// `(status, message)` of the federated object's `Ready` condition and its `status.ready`.
fn ready_of(object: &Value) -> (String, String, String) {
    let condition = object["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or_default();
    (
        condition["status"].as_str().unwrap_or("absent").to_owned(),
        condition["message"].as_str().unwrap_or("").to_owned(),
        object["status"]["ready"]
            .as_str()
            .unwrap_or("absent")
            .to_owned(),
    )
}

/// Waits until the `Ready` condition has `status`, its message names exactly `not_ready`
/// (of the members), and `status.ready` is `count`.
async fn wait_ready(
    api: &Api<DynamicObject>,
    name: &str,
    status: &str,
    not_ready: &[&str],
    count: &str,
) -> anyhow::Result<()> {
    let what = format!("Ready={status} ({count}), not ready: {not_ready:?}");
    wait_for(&what, TIMEOUT, async || {
        let object = get_value(api, name).await?.context("the object is gone")?;
        let (s, message, c) = ready_of(&object);
        let named: Vec<&str> = MEMBERS
            .into_iter()
            .filter(|m| message.contains(&format!("{m} (")))
            .collect();
        Ok(if s == status && c == count && named == not_ready {
            Wait::Done(())
        } else {
            Wait::Pending(format!("Ready={s} ({c}): {message}"))
        })
    })
    .await
}

/// Marks every Pod of `app` in `namespace` of `cluster` Ready, as a kubelet would.
async fn pods_ready(fed: &Federation, cluster: &str, namespace: &str) -> anyhow::Result<usize> {
    let pods: Api<Pod> = Api::namespaced(fed.client(cluster).await?, namespace);
    let listed = wait_for(&format!("pods of web in {cluster}"), TIMEOUT, async || {
        let listed = pods.list(&ListParams::default().labels("app=web")).await?;
        Ok(if listed.items.is_empty() {
            Wait::Pending("no pod yet".to_owned())
        } else {
            Wait::Done(listed.items)
        })
    })
    .await?;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    for pod in &listed {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let status = json!({"status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            ],
        }});
        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .with_context(|| format!("marking {cluster}/{name} Ready"))?;
    }
    Ok(listed.len())
}

#[tokio::test]
async fn ready_follows_the_workload_in_every_placed_cluster() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let ns = unique_ns("ready");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let name = "web";
    let api = create_federated(
        &fed.hub().await?,
        "Deployment",
        Some(&ns),
        name,
        deployment_spec("web", 1, &MEMBERS),
    )
    .await?;

    // Propagated, but no pod is ready anywhere: not ready, both clusters named.
    wait_ready(&api, name, "False", &["member1", "member2"], "0/2").await?;
    let marked = pods_ready(fed, "member1", &ns).await?;
    wait_ready(&api, name, "False", &["member2"], "1/2").await?;
    pods_ready(fed, "member2", &ns).await?;
    wait_ready(&api, name, "True", &[], "2/2").await?;
    report(format_args!(
        "readiness: Ready False (0/2) → False naming member2 (1/2) → True (2/2) after {marked} pod(s) per member were marked Ready"
    ));

    kubectl_sees_it(fed, &ns, name)?;
    hubfedctl_status_shows_it(fed, &ns, name).await?;

    // A cluster whose pods stop being ready brings the condition back to False, naming it.
    let pods: Api<Pod> = Api::namespaced(fed.client("member2").await?, &ns);
    for pod in pods.list(&ListParams::default().labels("app=web")).await? {
        let not_ready = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        pods.patch_status(
            &pod.metadata.name.unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Strategic(&not_ready),
        )
        .await?;
    }
    wait_ready(&api, name, "False", &["member2"], "1/2").await
}

/// `kubectl wait --for=condition=Ready` returns, and `kubectl get` shows READY 2/2 — when
/// kubectl is installed (it is on the CI machine; a machine without it says so).
fn kubectl_sees_it(fed: &Federation, ns: &str, name: &str) -> anyhow::Result<()> {
    let kubeconfig = fed.env().kubeconfig_path().display().to_string();
    let kubectl = |args: &[&str]| {
        Command::new("kubectl")
            .args(["--kubeconfig", &kubeconfig, "--context", "hub", "-n", ns])
            .args(args)
            .output()
    };
    let waited = match kubectl(&[
        "wait",
        "--for=condition=Ready",
        &format!("federateddeployment/{name}"),
        "--timeout=60s",
    ]) {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            report("readiness: kubectl not installed: kubectl wait and get not checked");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    anyhow::ensure!(
        waited.status.success(),
        "kubectl wait failed: {}",
        String::from_utf8_lossy(&waited.stderr)
    );
    let listed = kubectl(&["get", "federateddeployments"])?;
    let text = String::from_utf8_lossy(&listed.stdout);
    let header = text.lines().next().unwrap_or_default();
    let row = text
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_default();
    anyhow::ensure!(
        header.contains("READY") && row.split_whitespace().any(|cell| cell == "2/2"),
        "kubectl get federateddeployments:\n{text}"
    );
    Ok(())
}

/// Runs `hubfedctl --kubeconfig <env> --host-cluster-context hub <args>` in process:
/// (exit code, stdout, stderr).
async fn hubfedctl(fed: &Federation, args: &[&str]) -> (i32, String, String) {
    let mut full: Vec<String> = [
        "hubfedctl",
        "--kubeconfig",
        &fed.env().kubeconfig_path().display().to_string(),
        "--host-cluster-context",
        "hub",
    ]
    .map(str::to_owned)
    .to_vec();
    full.extend(args.iter().map(|a| (*a).to_owned()));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = hubfedctl::run_async(full, &mut out, &mut err).await;
    (
        code,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

/// `hubfedctl status` prints a row per placed cluster, ready in both, with the versions the
/// PropagatedVersion recorded; `-o json` carries the same; an unknown object is one error line.
async fn hubfedctl_status_shows_it(fed: &Federation, ns: &str, name: &str) -> anyhow::Result<()> {
    let target = format!("deployments/{name}");
    let (code, out, err) = hubfedctl(fed, &["status", &target, "-n", ns]).await;
    anyhow::ensure!(code == 0, "hubfedctl status failed: {err}");
    let first = out.lines().next().unwrap_or_default();
    anyhow::ensure!(
        first.starts_with(&format!(
            "FederatedDeployment {ns}/{name}: propagation True, ready True"
        )) && first.contains("(2/2 clusters)"),
        "{out}"
    );
    for member in MEMBERS {
        let row = out
            .lines()
            .find(|l| l.starts_with(member))
            .with_context(|| format!("no row for {member}:\n{out}"))?;
        let cells: Vec<&str> = row.split_whitespace().collect();
        anyhow::ensure!(
            cells.get(1) == Some(&"OK")
                && cells.get(2) == Some(&"True")
                && cells.get(3).is_some_and(|v| v.starts_with("gen:")),
            "{row}"
        );
    }
    let (code, json, _) = hubfedctl(fed, &["status", &target, "-n", ns, "-o", "json"]).await;
    let summary: Value = serde_json::from_str(&json)?;
    anyhow::ensure!(
        code == 0
            && summary["ready"] == "2/2"
            && summary["clusters"]
                .as_array()
                .is_some_and(|c| c.len() == 2 && c.iter().all(|c| c["ready"] == true)),
        "{json}"
    );
    let (code, _, err) = hubfedctl(fed, &["status", "deployments/nope", "-n", ns]).await;
    anyhow::ensure!(
        code == 1
            && err.lines().count() == 1
            && err.contains("FederatedDeployment")
            && err.contains("not found"),
        "exit {code}: {err}"
    );
    report(format_args!("readiness: hubfedctl status:\n{out}"));
    Ok(())
}
