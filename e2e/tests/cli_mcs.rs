//! `hubfedctl get serviceexports` on real clusters: each member's ServiceExports and
//! ServiceImports, read through the kubeconfig's contexts, with their conditions. The test
//! writes the objects and their status itself (no MCS controller runs), so the rows it
//! expects are known; a member without the MCS CRDs is named in a warning and the command
//! exits 3 after printing what it read.

use anyhow::ensure;
use hubfed_api::mcs::{ServiceExport, ServiceImport};
use hubfed_e2e::{bootstrap, hubfedctl, install_crds, unique_ns};
use hubfed_testenv::{TestEnv, TestEnvConfig};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_serviceexports_shows_each_members_exports_and_imports() -> anyhow::Result<()> {
    let env = tokio::task::spawn_blocking(|| {
        TestEnv::start(TestEnvConfig {
            members: 2,
            controller_manager: false,
            ..TestEnvConfig::default()
        })
    })
    .await??;
    bootstrap(&env).await?;
    let member1 = env.cluster("member1").expect("member1").client().await?;
    let crds = [hubfed_api::mcs::crds()?, vec![hubfed_api::about::crd()?]].concat();
    install_crds(&member1, &crds).await?;
    let ns = unique_ns("cli-mcs");
    Api::<Namespace>::all(member1.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await?;

    let exports: Api<ServiceExport> = Api::namespaced(member1.clone(), &ns);
    exports
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "web"}}))?,
        )
        .await?;
    let condition = |kind: &str, status: &str, reason: &str| -> Value {
        json!({"type": kind, "status": status, "reason": reason, "message": "",
            "lastTransitionTime": "2026-12-02T00:00:00Z"})
    };
    let status = json!({"status": {"conditions": [
        condition("Valid", "True", "Valid"),
        condition("Conflict", "True", "PortConflict"),
        condition("Ready", "True", "Exported"),
    ]}});
    exports
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    let imports: Api<ServiceImport> = Api::namespaced(member1.clone(), &ns);
    imports
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "web"},
                "spec": {"type": "ClusterSetIP", "ips": ["10.0.0.12"],
                    "ports": [{"name": "http", "protocol": "TCP", "port": 80}]},
            }))?,
        )
        .await?;
    imports
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"clusters": [{"cluster": "member1"}]}})),
        )
        .await?;

    let (code, out, err) =
        hubfedctl(env.kubeconfig_path(), &["get", "serviceexports", "-n", &ns]).await;
    let row: Vec<&str> = out
        .lines()
        .find(|line| line.contains("member1"))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(
        row == [
            ns.as_str(),
            "web",
            "member1",
            "True",
            "True",
            "(PortConflict)",
            "True",
            "ClusterSetIP",
            "10.0.0.12",
            "member1"
        ],
        "row {row:?} in:\n{out}{err}"
    );
    // member2 has no MCS CRDs: said, and the exit says the view is partial.
    ensure!(
        code == 3
            && err.contains("cluster \"member2\"")
            && err.contains("no MCS CRDs")
            && err.lines().count() == 1,
        "exit {code}, stderr:\n{err}"
    );
    let (code, out, _) = hubfedctl(
        env.kubeconfig_path(),
        &["get", "svcex", "web", "-n", &ns, "-o", "json"],
    )
    .await;
    let list: Value = serde_json::from_str(&out)?;
    ensure!(
        code == 3
            && list["items"][0]["serviceImport"]["spec"]["ips"] == json!(["10.0.0.12"])
            && list["items"][0]["cluster"] == "member1",
        "{out}"
    );
    Ok(())
}
