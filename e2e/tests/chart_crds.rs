//! CRDs upgraded by `helm upgrade` on a real hub (`crds.manage=true`): a release installed
//! from an older chart whose KubeFedCluster CRD lacks a field gets the current schema from
//! `helm upgrade` alone, and `helm uninstall` leaves every CRD. Also what the docs say of
//! turning it on: Helm's own `crds/` step created the CRDs without the release's ownership,
//! so that first upgrade needs `--take-ownership`.
//!
//! Needs `helm` (see `chart.rs`). Its own hub: it changes the hub's CRDs.

use std::path::Path;

use anyhow::{Context as _, ensure};
use hubfed_e2e::helm::{chart_dir, helm_on_hub, parse_documents, start_hub_only};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::Api;
use serde_json::Value;

const KUBEFEDCLUSTERS: &str = "kubefedclusters.core.kubefed.io";
/// The field the older chart's KubeFedCluster CRD lacks.
const REMOVED_FIELD: &str = "proxyURL";

/// Copies the chart to `to` (symbolic links followed), with `REMOVED_FIELD` taken out of the
/// KubeFedCluster CRD's schema: the chart as an older release shipped it.
fn write_older_chart(to: &Path) -> anyhow::Result<()> {
    fn copy(from: &Path, to: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            let target = to.join(entry.file_name());
            if std::fs::metadata(entry.path())?.is_dir() {
                copy(&entry.path(), &target)?;
            } else {
                std::fs::copy(entry.path(), &target)?;
            }
        }
        Ok(())
    }
    copy(&chart_dir(), to)?;
    let core = to.join("crds/core.yaml");
    let mut documents = parse_documents(&std::fs::read_to_string(&core)?)?;
    let crd = documents
        .iter_mut()
        .find(|d| d["metadata"]["name"] == KUBEFEDCLUSTERS)
        .context("the KubeFedCluster CRD")?;
    let removed =
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            .as_object_mut()
            .and_then(|properties| properties.remove(REMOVED_FIELD));
    ensure!(removed.is_some(), "the current CRD has {REMOVED_FIELD}");
    let mut text = String::from("# An older chart's CRDs.\n");
    for document in &documents {
        text.push_str("---\n");
        text.push_str(&serde_yaml_ng::to_string(document)?);
    }
    std::fs::write(core, text)?;
    Ok(())
}

/// The KubeFedCluster CRD on the hub: whether its schema has `REMOVED_FIELD`, and its
/// metadata.
async fn kubefedclusters_crd(admin: &Client) -> anyhow::Result<(bool, Value)> {
    let crd = Api::<CustomResourceDefinition>::all(admin.clone())
        .get(KUBEFEDCLUSTERS)
        .await?;
    let crd = serde_json::to_value(crd)?;
    let has_field =
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            .get(REMOVED_FIELD)
            .is_some();
    Ok((has_field, crd["metadata"].clone()))
}

#[tokio::test]
async fn helm_upgrade_upgrades_managed_crds_and_uninstall_keeps_them() -> anyhow::Result<()> {
    let env = start_hub_only()?;
    let admin = env.hub().client().await?;
    let older = tempdir_in_env(env.dir(), "older-chart")?;
    write_older_chart(&older)?;
    let older = older.to_str().context("path is UTF-8")?;
    let current = chart_dir();
    let current = current.to_str().context("chart path is UTF-8")?;
    let namespace = "kube-federation-system";
    let settings = ["--namespace", namespace, "--set", "webhook.enabled=false"];
    let managed = ["--set", "crds.manage=true"];
    let run = |verb: &[&str], extra: &[&str]| -> anyhow::Result<String> {
        helm_on_hub(&env, &[verb, &settings[..], extra].concat())
    };

    // A release of the older chart without crds.manage: Helm's crds/ step creates the CRDs,
    // without the release's ownership metadata.
    run(&["install", "hubfed", older], &["--create-namespace"])?;
    let (has_field, _) = kubefedclusters_crd(&admin).await?;
    assert!(
        !has_field,
        "the older chart's crds/ installed the older CRD"
    );

    let refused = run(&["upgrade", "hubfed", older], &managed)
        .expect_err("without --take-ownership the existing CRDs are not the release's");
    assert!(
        refused
            .to_string()
            .contains("cannot be imported into the current release"),
        "{refused:#}"
    );
    run(
        &["upgrade", "hubfed", older],
        &[&managed[..], &["--take-ownership"]].concat(),
    )?;
    let (has_field, metadata) = kubefedclusters_crd(&admin).await?;
    assert!(!has_field, "the older release holds the older schema");
    assert_eq!(
        metadata["annotations"]["meta.helm.sh/release-name"],
        "hubfed"
    );
    assert_eq!(metadata["annotations"]["helm.sh/resource-policy"], "keep");

    // The upgrade to the current chart, as every later one: no flag beyond the value.
    run(&["upgrade", "hubfed", current], &managed)?;
    let (has_field, _) = kubefedclusters_crd(&admin).await?;
    assert!(has_field, "helm upgrade applied the current schema");

    helm_on_hub(&env, &["uninstall", "hubfed", "--namespace", namespace])?;
    let crds = Api::<CustomResourceDefinition>::all(admin.clone());
    let shipped = parse_documents(&std::fs::read_to_string(
        chart_dir().join("crds/core.yaml"),
    )?)?
    .into_iter()
    .chain(parse_documents(&std::fs::read_to_string(
        chart_dir().join("crds/federated-types.yaml"),
    )?)?);
    for crd in shipped {
        let name = crd["metadata"]["name"].as_str().context("CRD name")?;
        ensure!(
            crds.get_opt(name).await?.is_some(),
            "helm uninstall deleted the CRD {name}"
        );
    }
    Ok(())
}

/// A new directory `name` under `dir`.
fn tempdir_in_env(dir: &Path, name: &str) -> anyhow::Result<std::path::PathBuf> {
    let path = dir.join(name);
    std::fs::create_dir_all(&path)?;
    Ok(path)
}
