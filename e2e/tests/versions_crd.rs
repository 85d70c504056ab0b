//! PropagatedVersions under either CRD (docs/kubefed-compatibility.md §1.7): KubeFed's and
//! hubfed's serve the status through a subresource (a create and a status write), hubfed's
//! CRDs before 2026-12 as an ordinary field (one write). The controller finds out from its
//! writes which one the hub holds, and follows a change of the CRD while it runs, whichever
//! object it writes first after the change.
//!
//! Its own binary: the test changes the hub's PropagatedVersion CRD.

use anyhow::Context as _;
use hubfed_api::propagatedversion::PropagatedVersion;
use hubfed_e2e::{Federation, MEMBERS, TIMEOUT, Wait, placement, unique_ns, wait_for};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceSubresourceStatus, CustomResourceSubresources,
};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const CRD: &str = "propagatedversions.core.kubefed.io";

/// Gives the CRD a status subresource (`true`, KubeFed's) or none (hubfed's), and waits until
/// the hub serves it so.
async fn status_subresource(hub: &Client, on: bool) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(hub.clone());
    let mut crd = crds.get(CRD).await?;
    for version in &mut crd.spec.versions {
        version.subresources = on.then(|| CustomResourceSubresources {
            status: Some(CustomResourceSubresourceStatus(json!({}))),
            scale: None,
        });
    }
    crds.replace(CRD, &PostParams::default(), &crd)
        .await
        .with_context(|| format!("setting the status subresource of {CRD} to {on}"))?;
    wait_for("the hub serving the CRD as changed", TIMEOUT, async || {
        let group = hub
            .list_api_group_resources("core.kubefed.io/v1alpha1")
            .await?;
        let served = group
            .resources
            .iter()
            .any(|r| r.name == "propagatedversions/status");
        Ok(if served == on {
            Wait::Done(())
        } else {
            Wait::Pending(format!("status subresource served: {served}"))
        })
    })
    .await
}

/// Waits until the PropagatedVersion of FederatedConfigMap `name` records `template` in every
/// member.
async fn wait_versions(
    versions: &Api<PropagatedVersion>,
    name: &str,
    template: &serde_json::Value,
) -> anyhow::Result<()> {
    let want = hubfed_core::version::template_version(Some(template));
    wait_for(
        &format!("PropagatedVersion configmap-{name} with the template's version"),
        TIMEOUT,
        async || {
            let status = versions
                .get_opt(&format!("configmap-{name}"))
                .await?
                .and_then(|pv| pv.status);
            let Some(status) = status else {
                return Ok(Wait::Pending("no status".into()));
            };
            let clusters: Vec<&str> = status
                .cluster_versions
                .iter()
                .map(|v| v.cluster_name.as_str())
                .collect();
            Ok(if status.template_version == want && clusters == MEMBERS {
                Wait::Done(())
            } else {
                Wait::Pending(format!("{status:?}"))
            })
        },
    )
    .await
}

#[tokio::test]
async fn propagated_versions_are_recorded_under_either_crd() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let hub = fed.hub().await?;
    let ns = unique_ns("versions-crd");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let versions: Api<PropagatedVersion> = Api::namespaced(hub.clone(), &ns);
    let update = async |api: &Api<DynamicObject>, name: &str, template: &serde_json::Value| {
        let patch = json!({ "spec": { "template": template } });
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(drop)
    };
    let spec = |rev: u32| {
        let template = json!({ "data": { "rev": rev.to_string() } });
        let spec = json!({ "template": template, "placement": placement(&MEMBERS) });
        (template, spec)
    };

    // hubfed's and KubeFed's CRD: a create, then a status write.
    let (template, body) = spec(1);
    let federated = fed
        .create_federated("ConfigMap", Some(&ns), "subresource", body)
        .await?;
    wait_versions(&versions, "subresource", &template).await?;

    // A CRD without the subresource (hubfed's older one), applied while the controller runs:
    // the status write is answered 404 and the object written instead, for existing objects
    // and new ones.
    status_subresource(&hub, false).await?;
    let (template, _) = spec(2);
    update(&federated, "subresource", &template).await?;
    wait_versions(&versions, "subresource", &template).await?;
    let (template, body) = spec(3);
    fed.create_federated("ConfigMap", Some(&ns), "no-subresource", body)
        .await?;
    wait_versions(&versions, "no-subresource", &template).await?;

    // Back to the subresource, an existing object written first: the object write's answer
    // keeps the old status, so the status is written through the subresource.
    status_subresource(&hub, true).await?;
    let (template, _) = spec(4);
    update(&federated, "no-subresource", &template).await?;
    wait_versions(&versions, "no-subresource", &template).await?;
    let (template, body) = spec(5);
    fed.create_federated("ConfigMap", Some(&ns), "subresource-again", body)
        .await?;
    wait_versions(&versions, "subresource-again", &template).await
}
