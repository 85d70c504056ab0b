//! A ServiceExport federated with the existing machinery: the MCS CRDs in the hub,
//! `hubfedctl enable serviceexports.multicluster.x-k8s.io`, and one FederatedServiceExport
//! that puts a ServiceExport in every member it is placed on — one object to export a
//! service everywhere it runs. The ServiceExports' status, written in the members by the MCS
//! controller, is the members': the sync controller never writes it back.

use anyhow::ensure;
use hubfed_api::mcs::ServiceExport;
use hubfed_e2e::{
    Federation, MEMBERS, TIMEOUT, Wait, dynamic_api, hubfedctl, install_crds, placement, unique_ns,
    wait_for,
};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_federated_serviceexport_exports_where_it_is_placed() -> anyhow::Result<()> {
    let fed = Federation::shared();
    let crds = [hubfed_api::mcs::crds()?, vec![hubfed_api::about::crd()?]].concat();
    install_crds(&fed.hub().await?, &crds).await?;
    for member in MEMBERS {
        install_crds(&fed.client(member).await?, &crds).await?;
    }
    let (code, out, err) = hubfedctl(
        fed.kubeconfig(),
        &["enable", "serviceexports.multicluster.x-k8s.io"],
    )
    .await;
    ensure!(code == 0, "enable exited {code}:\n{out}{err}");

    let ns = unique_ns("fsvcex");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let federated = ApiResource {
        group: "types.kubefed.io".to_owned(),
        version: "v1beta1".to_owned(),
        api_version: "types.kubefed.io/v1beta1".to_owned(),
        kind: "FederatedServiceExport".to_owned(),
        plural: "federatedserviceexports".to_owned(),
    };
    let hub_api = dynamic_api(fed.hub().await?, &federated, Some(&ns));
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "types.kubefed.io/v1beta1",
        "kind": "FederatedServiceExport",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"template": {}, "placement": placement(&MEMBERS)},
    }))?;
    // The federated CRD was just created: its API may take a moment to be served.
    wait_for("the FederatedServiceExport created", TIMEOUT, async || {
        Ok(
            match hub_api.create(&PostParams::default(), &object).await {
                Ok(_) => Wait::Done(()),
                Err(e) => Wait::Pending(e.to_string()),
            },
        )
    })
    .await?;
    for member in MEMBERS {
        let exports: Api<ServiceExport> = Api::namespaced(fed.client(member).await?, &ns);
        wait_for(
            &format!("ServiceExport web in {member}"),
            TIMEOUT,
            async || {
                Ok(match exports.get_opt("web").await? {
                    Some(_) => Wait::Done(()),
                    None => Wait::Pending("absent".to_owned()),
                })
            },
        )
        .await?;
    }

    // Status the MCS controller would write in member1 stays (not the template's to revert).
    let exports: Api<ServiceExport> = Api::namespaced(fed.client("member1").await?, &ns);
    let status = json!({"status": {"conditions": [{"type": "Valid", "status": "False",
        "reason": "NoService", "message": "no Service web", "lastTransitionTime": "2026-12-02T00:00:00Z"}]}});
    exports
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    let labels = json!({"metadata": {"labels": {"touch": "1"}}});
    hub_api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"template": labels}})),
        )
        .await?;
    wait_for("the template change in member1", TIMEOUT, async || {
        let export = exports.get("web").await?;
        Ok(
            match export.metadata.labels.as_ref().and_then(|l| l.get("touch")) {
                Some(_) => Wait::Done(()),
                None => Wait::Pending("label not there yet".to_owned()),
            },
        )
    })
    .await?;
    // The MCS controller, when it runs, may have rewritten the conditions meanwhile: either
    // way the status is there, not emptied by the sync controller's write.
    let kept = exports.get("web").await?.status.map(|s| s.conditions.len());
    ensure!(
        kept.is_some_and(|n| n >= 1),
        "the member's ServiceExport status was not kept: {kept:?}"
    );
    Ok(())
}
