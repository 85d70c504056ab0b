//! A light member ([`TestEnvConfig::light_members`]) still does what a federation needs of
//! a member: server-side apply and watch of ConfigMaps, a CRD that becomes established, a
//! ServiceAccount token (TokenRequest), RBAC, a Deployment its controller manager turns into
//! a ReplicaSet; the API groups it leaves out are gone, and the hub is not light.

use std::time::Duration;

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};
use hubfed_testenv::{LIGHT_MEMBER_FLAGS, NO_WATCH_CACHE_FLAG, TestEnv, TestEnvConfig};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

async fn eventually<F, Fut>(what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if check().await? {
            return Ok(());
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "{what}: timed out");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn environ_has(pid: u32, var: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|e| e.split(|b| *b == 0).any(|v| v == var.as_bytes()))
        .unwrap_or(false)
}

#[test]
fn a_light_member_serves_what_a_federation_needs() -> anyhow::Result<()> {
    let env = TestEnv::start(TestEnvConfig {
        members: 1,
        light_members: true,
        // As the large-object benchmark runs them: what follows works without it too.
        member_watch_cache: false,
        ..TestEnvConfig::default()
    })?;
    let member = env.cluster("member1").context("member1")?;
    let cmdline = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/cmdline"));
    let member_pid = member.pids()[0];
    let hub_pid = env.hub().pids()[0];
    // Light members keep their watch cache unless asked (TestEnvConfig::member_watch_cache).
    assert!(!LIGHT_MEMBER_FLAGS.contains(&NO_WATCH_CACHE_FLAG));
    assert!(cmdline(member_pid)?.contains(NO_WATCH_CACHE_FLAG));
    assert!(!cmdline(hub_pid)?.contains(NO_WATCH_CACHE_FLAG));
    assert!(environ_has(member_pid, "GOGC=50"));
    assert!(!cmdline(hub_pid)?.contains(LIGHT_MEMBER_FLAGS[0]));
    assert!(!environ_has(hub_pid, "GOGC=50"));

    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(async {
            let client = member.client().await?;

            // Server-side apply and a watch that sees it.
            let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
            let mut events =
                watcher(cms.clone(), watcher::Config::default().labels("light=1")).boxed();
            let apply = PatchParams::apply("light-test").force();
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "light", "labels": {"light": "1"}}, "data": {"k": "v"}});
            cms.patch("light", &apply, &Patch::Apply(&cm)).await?;
            let seen = tokio::time::timeout(WAIT, async {
                while let Some(event) = events.try_next().await? {
                    if let watcher::Event::Apply(cm) | watcher::Event::InitApply(cm) = event
                        && cm
                            .data
                            .as_ref()
                            .and_then(|d| d.get("k"))
                            .map(String::as_str)
                            == Some("v")
                    {
                        return anyhow::Ok(true);
                    }
                }
                anyhow::Ok(false)
            })
            .await??;
            assert!(seen, "the watch saw the applied ConfigMap");

            // A CRD becomes established and serves its kind.
            let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
            let crd: CustomResourceDefinition = serde_json::from_value(json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "widgets.light.example.com"},
                "spec": {"group": "light.example.com", "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object",
                            "x-kubernetes-preserve-unknown-fields": true}}}]}
            }))?;
            crds.create(&PostParams::default(), &crd).await?;
            eventually("the CRD is established", || {
                let crds = crds.clone();
                async move {
                    let crd = crds.get("widgets.light.example.com").await?;
                    Ok(crd.status.and_then(|s| s.conditions).is_some_and(|c| {
                        c.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    }))
                }
            })
            .await?;

            // RBAC, a ServiceAccount and a token for it.
            let roles: Api<ClusterRole> = Api::all(client.clone());
            let role: ClusterRole = serde_json::from_value(json!({
                "metadata": {"name": "light-reader"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]
            }))?;
            roles.create(&PostParams::default(), &role).await?;
            let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
            let sa: ServiceAccount =
                serde_json::from_value(json!({"metadata": {"name": "light"}}))?;
            sas.create(&PostParams::default(), &sa).await?;
            let token = sas
                .create_token_request("light", &PostParams::default(), &TokenRequest::default())
                .await?;
            assert!(
                token
                    .status
                    .and_then(|s| s.token)
                    .is_some_and(|t| !t.is_empty())
            );

            // A Deployment, turned into a ReplicaSet by the member's controller manager.
            let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
            let deployment: Deployment = serde_json::from_value(json!({
                "metadata": {"name": "light"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "light"}},
                    "template": {"metadata": {"labels": {"app": "light"}},
                        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
            }))?;
            deployments
                .create(&PostParams::default(), &deployment)
                .await?;
            let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
            eventually("the Deployment's ReplicaSet", || {
                let replicasets = replicasets.clone();
                async move {
                    let list = replicasets
                        .list(&ListParams::default().labels("app=light"))
                        .await?;
                    Ok(!list.items.is_empty())
                }
            })
            .await?;

            // Groups a federation does not need are not served.
            let groups = client.list_api_groups().await?;
            let names: Vec<&str> = groups.groups.iter().map(|g| g.name.as_str()).collect();
            for gone in [
                "flowcontrol.apiserver.k8s.io",
                "scheduling.k8s.io",
                "autoscaling",
            ] {
                assert!(!names.contains(&gone), "{gone} is served: {names:?}");
            }
            for needed in ["apps", "rbac.authorization.k8s.io", "apiextensions.k8s.io"] {
                assert!(names.contains(&needed), "{needed} is not served");
            }
            anyhow::Ok(())
        })
}
