//! The test environment itself: a hub and two members, real API servers at the pinned version.

use std::io::Write as _;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

#[tokio::test]
async fn every_cluster_serves_the_pinned_version_and_stores_objects() -> anyhow::Result<()> {
    let env = hubfed_testenv::shared();
    assert!(env.members().len() >= 2, "a hub and at least two members");
    for cluster in env.clusters() {
        let client = cluster.client().await?;
        let version = client.apiserver_version().await?;
        // Straight to stderr: the test harness captures print macros, and CI's log should
        // show which real servers answered.
        writeln!(
            std::io::stderr(),
            "{}: kube-apiserver {} at {}",
            cluster.name(),
            version.git_version,
            cluster.server_url()
        )?;
        assert_eq!(version.git_version, hubfed_testenv::kube_version());

        let cms: Api<ConfigMap> = Api::namespaced(client, "default");
        let name = "testenv-roundtrip";
        let _ = cms.delete(name, &DeleteParams::default()).await;
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "data": {"cluster": cluster.name()},
        }))?;
        cms.create(&PostParams::default(), &cm).await?;
        let back = cms.get(name).await?;
        assert_eq!(
            back.data
                .unwrap_or_default()
                .get("cluster")
                .map(String::as_str),
            Some(cluster.name())
        );
    }
    Ok(())
}

#[tokio::test]
async fn kubeconfig_has_a_context_per_cluster() -> anyhow::Result<()> {
    let env = hubfed_testenv::shared();
    let text = std::fs::read_to_string(env.kubeconfig_path())?;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&text)?;
    let contexts: Vec<&str> = kubeconfig
        .contexts
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(contexts, ["hub", "member1", "member2"]);
    assert_eq!(kubeconfig.current_context.as_deref(), Some("hub"));
    Ok(())
}
