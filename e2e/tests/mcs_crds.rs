//! hubfed's Multi-Cluster Services CRDs (`crds/mcs.yaml`) are upstream's, `sigs.k8s.io/mcs-api`
//! v0.5.2's from its Go module, and a real API server accepts them and `crds/about.yaml`.
//!
//! The comparison ([`hubfed_e2e::upstream_crds::crd_differences`]) covers the structural
//! schema of both versions (every keyword, required fields, properties on one side only),
//! served and storage flags, scope, names and short names, subresources, printer columns and
//! the CRDs' labels; every difference must be one of [`DELIBERATE`] (there are none).
//! Descriptions are not compared: hubfed's are its own words. It needs no cluster, and skips,
//! saying why, when Go is missing (the module comes through the Go module proxy,
//! `hack/mcs-api-module.sh`).
//!
//! On a hub alone, objects created through `v1alpha1` read back through `v1beta1` with
//! hubfed's types, the status is a subresource, the printer columns are served, and
//! upstream's validation refuses what it should. The About API's ClusterProperty has no
//! upstream module here to compare with (`hubfed_api::about`); it is tested on the API
//! server the same way.

use anyhow::Context as _;
use hubfed_api::about::{self, CLUSTER_ID_PROPERTY, ClusterProperty};
use hubfed_api::mcs::{self, ServiceExport, ServiceImport};
use hubfed_e2e::helm::{repo_root, start_hub_only};
use hubfed_e2e::upstream_crds::{check_deliberate, crd_differences, crds_in, go_module_dir};
use hubfed_e2e::{create_hub_namespace, install_crds, unique_ns};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, Resource as _};
use serde_json::{Value, json};

/// Upstream's CRD files in its module, under `config/crd/`.
const UPSTREAM_FILES: [&str; 2] = [
    "multicluster.x-k8s.io_serviceexports.yaml",
    "multicluster.x-k8s.io_serviceimports.yaml",
];

/// Differences from upstream's CRDs, as `(CRD, difference, why)`.
const DELIBERATE: &[(&str, &str, &str)] = &[];

/// Upstream's name in the difference lines.
const UPSTREAM: &str = "mcs-api";

#[test]
fn hubfeds_mcs_crds_are_upstreams() -> anyhow::Result<()> {
    let Some(module) = go_module_dir("mcs-api-module.sh", "MCS_API_VERSION", mcs::MCS_API_RELEASE)?
    else {
        eprintln!("skipped: Go is missing, the MCS API's module cannot be read");
        return Ok(());
    };
    let mut theirs = std::collections::BTreeMap::new();
    for file in UPSTREAM_FILES {
        theirs.extend(crds_in(&module.join("config/crd").join(file))?);
    }
    let ours = crds_in(&repo_root().join("crds/mcs.yaml"))?;
    anyhow::ensure!(
        theirs.keys().eq(ours.keys()),
        "CRDs: {UPSTREAM} {:?}, hubfed {:?}",
        theirs.keys().collect::<Vec<_>>(),
        ours.keys().collect::<Vec<_>>()
    );
    let mut found: Vec<(String, bool, String)> = Vec::new();
    for (name, crd) in &theirs {
        let hubfed = &ours[name];
        let mut differences = crd_differences(UPSTREAM, crd, hubfed);
        let labels = (&crd["metadata"]["labels"], &hubfed["metadata"]["labels"]);
        if labels.0 != labels.1 {
            differences.push(format!(
                "metadata.labels: {UPSTREAM} {}, hubfed {}",
                labels.0, labels.1
            ));
        }
        found.extend(differences.into_iter().map(|d| (name.clone(), false, d)));
    }
    check_deliberate(
        &format!("{UPSTREAM} {}", mcs::MCS_API_RELEASE),
        &found,
        DELIBERATE,
    )?;
    Ok(())
}

#[tokio::test]
async fn a_real_api_server_serves_both_versions() -> anyhow::Result<()> {
    let env = start_hub_only()?;
    let hub = env.hub().client().await?;
    let mut crds = Vec::new();
    for file in ["crds/mcs.yaml", "crds/about.yaml"] {
        for crd in crds_in(&repo_root().join(file))?.into_values() {
            crds.push(serde_json::from_value::<CustomResourceDefinition>(crd)?);
        }
    }
    install_crds(&hub, &crds).await?;
    let namespace = unique_ns("mcs");
    create_hub_namespace(&hub, &namespace).await?;
    service_export_through_both_versions(&hub, &namespace).await?;
    service_import_through_both_versions(&hub, &namespace).await?;
    service_import_validation(&hub, &namespace).await?;
    cluster_property_through_both_versions(&hub).await?;
    Ok(())
}

/// A dynamic API of `K`'s kind at `version` (`None`: cluster-scoped).
fn at_version<K: kube::Resource<DynamicType = ()>>(
    hub: &Client,
    version: &str,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let group = K::group(&());
    let resource = ApiResource {
        api_version: format!("{group}/{version}"),
        group: group.into_owned(),
        version: version.to_owned(),
        kind: K::kind(&()).into_owned(),
        plural: K::plural(&()).into_owned(),
    };
    match namespace {
        Some(namespace) => Api::namespaced_with(hub.clone(), namespace, &resource),
        None => Api::all_with(hub.clone(), &resource),
    }
}

async fn create(api: &Api<DynamicObject>, object: Value) -> anyhow::Result<DynamicObject> {
    let object: DynamicObject = serde_json::from_value(object)?;
    api.create(&PostParams::default(), &object)
        .await
        .with_context(|| format!("creating {:?}", object.metadata.name))
}

async fn service_export_through_both_versions(hub: &Client, ns: &str) -> anyhow::Result<()> {
    let old = at_version::<ServiceExport>(hub, mcs::V1ALPHA1, Some(ns));
    create(
        &old,
        json!({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport",
            "metadata": {"name": "serve"},
            "spec": {"exportedLabels": {"tier": "web"}},
            "status": {"conditions": []},
        }),
    )
    .await?;
    let exports: Api<ServiceExport> = Api::namespaced(hub.clone(), ns);
    let export = exports.get("serve").await?;
    anyhow::ensure!(export.spec.exported_labels["tier"] == "web", "{export:?}");
    let condition = json!({"type": "Valid", "status": "True", "reason": "Valid", "message": "",
        "lastTransitionTime": "2025-03-01T10:00:00Z"});
    exports
        .patch_status(
            "serve",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [condition]}})),
        )
        .await
        .context("writing the ServiceExport's status through v1beta1")?;
    let read = old.get("serve").await?;
    anyhow::ensure!(
        read.data["status"]["conditions"][0]["reason"] == "Valid",
        "the status written through v1beta1, read through v1alpha1: {:?}",
        read.data
    );
    Ok(())
}

async fn service_import_through_both_versions(hub: &Client, ns: &str) -> anyhow::Result<()> {
    let old = at_version::<ServiceImport>(hub, mcs::V1ALPHA1, Some(ns));
    let spec = json!({
        "type": "ClusterSetIP",
        "ips": ["10.0.0.10"],
        "ports": [{"name": "http", "protocol": "TCP", "appProtocol": "kubernetes.io/h2c",
            "port": 80}],
        "sessionAffinity": "ClientIP",
        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
        "ipFamilies": ["IPv4"],
        "internalTrafficPolicy": "Cluster",
        "trafficDistribution": "PreferClose",
    });
    let created = create(
        &old,
        json!({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceImport",
            "metadata": {"name": "serve"}, "spec": spec,
            "status": {"clusters": [{"cluster": "ignored"}]},
        }),
    )
    .await?;
    anyhow::ensure!(
        created
            .data
            .get("status")
            .is_none_or(|status| status["clusters"].is_null()),
        "a create ignores the status (a subresource): {:?}",
        created.data
    );
    let imports: Api<ServiceImport> = Api::namespaced(hub.clone(), ns);
    let import = imports.get("serve").await?;
    anyhow::ensure!(
        serde_json::to_value(import.properties())? == spec,
        "v1beta1 reads {:?}",
        import.properties()
    );
    let status = json!({"endpointSliceObjects": "Present",
        "clusters": [{"cluster": "member1"}, {"cluster": "member2"}]});
    imports
        .patch_status(
            "serve",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await?;
    let status_read = old.get("serve").await?.data["status"].clone();
    anyhow::ensure!(status_read == status, "v1alpha1 reads {status_read}");
    let columns = printer_columns(hub, ns).await?;
    anyhow::ensure!(
        columns == ["Name", "Type", "IP", "Age"],
        "serviceimports columns {columns:?}"
    );
    Ok(())
}

/// The column names the API server prints for ServiceImports (a `Table`, as `kubectl get`
/// asks for).
async fn printer_columns(hub: &Client, ns: &str) -> anyhow::Result<Vec<String>> {
    let request = http::Request::get(format!(
        "{}?limit=1",
        ServiceImport::url_path(&(), Some(ns))
    ))
    .header(
        http::header::ACCEPT,
        "application/json;as=Table;v=v1;g=meta.k8s.io",
    )
    .body(Vec::new())?;
    let table: Value = hub.request(request).await?;
    Ok(table["columnDefinitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_owned))
        .collect())
}

/// Upstream's validation, through either version: an unknown type, three IPs, no ports.
async fn service_import_validation(hub: &Client, ns: &str) -> anyhow::Result<()> {
    let cases = [
        ("bad-type", json!({"type": "LoadBalancer", "ports": []})),
        (
            "three-ips",
            json!({"type": "ClusterSetIP", "ports": [], "ips": ["1.1.1.1", "2.2.2.2", "3.3.3.3"]}),
        ),
        ("no-ports", json!({"type": "Headless"})),
    ];
    for version in [mcs::V1ALPHA1, mcs::VERSION] {
        let api = at_version::<ServiceImport>(hub, version, Some(ns));
        for (name, spec) in &cases {
            let object = json!({"apiVersion": format!("{}/{version}", mcs::GROUP),
                "kind": "ServiceImport", "metadata": {"name": name}, "spec": spec});
            refused(&api, object, &format!("{version} {name}")).await?;
        }
    }
    Ok(())
}

/// Creates `object` and expects the API server's 422.
async fn refused(api: &Api<DynamicObject>, object: Value, what: &str) -> anyhow::Result<()> {
    let object: DynamicObject = serde_json::from_value(object)?;
    match api.create(&PostParams::default(), &object).await {
        Err(kube::Error::Api(status)) if status.code == 422 => Ok(()),
        other => anyhow::bail!("{what}: expected a refusal (422), got {other:?}"),
    }
}

async fn cluster_property_through_both_versions(hub: &Client) -> anyhow::Result<()> {
    let old = at_version::<ClusterProperty>(hub, about::V1ALPHA1, None);
    create(
        &old,
        json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
            "metadata": {"name": CLUSTER_ID_PROPERTY}, "spec": {"value": "hub"}}),
    )
    .await?;
    let properties: Api<ClusterProperty> = Api::all(hub.clone());
    let property = properties.get(CLUSTER_ID_PROPERTY).await?;
    anyhow::ensure!(property.spec.value == "hub", "{property:?}");
    for (name, value) in [
        ("empty.example.com", String::new()),
        ("long.example.com", "x".repeat(128_001)),
    ] {
        let object = json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
            "metadata": {"name": name}, "spec": {"value": value}});
        refused(&old, object, name).await?;
    }
    Ok(())
}
