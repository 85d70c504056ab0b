//! Multi-cluster services when the ClusterSet changes: a member that unjoins is withdrawn
//! from the others at once (its endpoints and its `status.clusters` entry, and the import with
//! its last export), and a member without the MCS CRDs takes no part — said with
//! `hubfed_mcs_member_crds` 0 — while the others go on. Hub + 3 members; the test writes the
//! Services and EndpointSlices itself.

use std::time::Instant;

use anyhow::Context as _;
use hubfed_api::about;
use hubfed_api::kubefedcluster::KubeFedCluster;
use hubfed_api::mcs::{self, ServiceImport};
use hubfed_e2e::controller::{ControllerOptions, ControllerProcess, print_logs, sample};
use hubfed_e2e::mcs::{Members, import_clusters, ports, source_slice, wait_derived, wait_import};
use hubfed_e2e::{
    KUBEFED_NAMESPACE, PrivateFederation, TIMEOUT, Wait, create_hub_namespace, fast_health_checks,
    install_crds, report, wait_clusters_ready, wait_for,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use serde_json::json;

const MEMBERS: [&str; 3] = ["member1", "member2", "member3"];
const NS: &str = "mcs-unjoin";

#[tokio::test]
async fn an_unjoined_member_is_withdrawn_and_one_without_crds_takes_no_part() -> anyhow::Result<()>
{
    let env = PrivateFederation::new()
        .members(3)
        .without_controller_manager()
        .config(fast_health_checks())
        .start()
        .await?;
    let mut crds = mcs::crds()?;
    crds.push(about::crd()?);
    let mut clients = Vec::new();
    for member in MEMBERS {
        let client = env.cluster(member).context("member")?.client().await?;
        // member3 gets no MCS CRDs.
        if member != "member3" {
            install_crds(&client, &crds).await?;
        }
        create_hub_namespace(&client, NS).await?;
        clients.push((member, client));
    }
    let members = Members { clients };
    let controller = ControllerProcess::start(&env, &ControllerOptions::single("mcs-unjoin"))?;
    let hub = env.hub().client().await?;
    let result = async {
        wait_clusters_ready(&hub, &MEMBERS).await?;
        let spec = json!({"ports": ports(&[("http", 80)])});
        for member in ["member1", "member2"] {
            members.export(member, NS, "web", spec.clone()).await?;
            let slice = source_slice(&format!("web-{member}"), "web", &[&address(member)]);
            members.apply::<EndpointSlice>(member, NS, slice).await?;
        }
        wait_import(&members, "member1", NS, "web", "both exporters", |i| {
            let clusters = import_clusters(i.ok_or("absent")?);
            (clusters == ["member1", "member2"])
                .then_some(())
                .ok_or_else(|| format!("{clusters:?}"))
        })
        .await?;
        wait_derived(
            &members,
            "member1",
            NS,
            "web",
            "member2",
            &[&address("member2")],
        )
        .await?;

        // member3 lacks the CRDs: said by the gauge, and the others were served meanwhile.
        let metrics = controller.metrics().await.context("metrics")?;
        let gauge = |cluster: &str| {
            sample(
                &metrics,
                "hubfed_mcs_member_crds",
                &[&format!("cluster=\"{cluster}\"")],
            )
        };
        anyhow::ensure!(
            gauge("member3") == Some(0.0) && gauge("member1") == Some(1.0),
            "hubfed_mcs_member_crds: member3 {:?}, member1 {:?}",
            gauge("member3"),
            gauge("member1")
        );

        // member2 unjoins: withdrawn from member1 at once, not after the endpoint TTL (5 m).
        let began = Instant::now();
        Api::<KubeFedCluster>::namespaced(hub.clone(), KUBEFED_NAMESPACE)
            .delete("member2", &Default::default())
            .await?;
        wait_derived(&members, "member1", NS, "web", "member2", &[]).await?;
        wait_import(&members, "member1", NS, "web", "member1 alone", |i| {
            let clusters = import_clusters(i.ok_or("absent")?);
            (clusters == ["member1"])
                .then_some(())
                .ok_or_else(|| format!("{clusters:?}"))
        })
        .await?;
        report(format_args!(
            "mcs_unjoin: member2's endpoints withdrawn from member1 {:.2}s after its unjoin",
            began.elapsed().as_secs_f64()
        ));
        // member1 keeps serving its own endpoints through the import.
        wait_derived(
            &members,
            "member1",
            NS,
            "web",
            "member1",
            &[&address("member1")],
        )
        .await?;

        // The last exporter unexports: the import goes from member1.
        members
            .delete::<mcs::ServiceExport>("member1", NS, "web")
            .await?;
        let imports: Api<ServiceImport> = members.api("member1", NS);
        wait_for("member1's import deleted", TIMEOUT, async || {
            Ok(match imports.get_opt("web").await? {
                None => Wait::Done(()),
                Some(i) => Wait::Pending(format!("{:?}", i.status)),
            })
        })
        .await
    }
    .await;
    if result.is_err() {
        print_logs(&env, &["mcs-unjoin"]);
    }
    result
}

/// The address of `member`'s one endpoint.
fn address(member: &str) -> String {
    format!("10.9.0.{}", member.trim_start_matches("member"))
}
