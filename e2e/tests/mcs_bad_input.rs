//! Multi-cluster services' bad input (issue 48) on real API servers: a hub, three push members
//! with the MCS and About CRDs, one `hubfed-controller`. Beside `mcs.rs`'s ExternalName and
//! missing-Service exports, the inputs that arrive while a service already works:
//!
//! - a Service changed from ClusterIP to ExternalName while it is exported: its export turns
//!   `Valid=False/InvalidServiceType` with an Event, its import and derived slices are
//!   withdrawn everywhere, and it comes back when the type does;
//! - a member's cluster id made invalid by a person (`cluster.clusterset.k8s.io`): a Warning
//!   Event on its KubeFedCluster, `Ready=False/Failed` and an Event on its ServiceExport, what
//!   hubfed wrote into it withdrawn, its exports gone from the others — and back once fixed;
//! - two members holding the same cluster id: both refused, each refusal naming the other,
//!   never merged; the third member goes on.
//!
//! Throughout, another service's slice changes keep reaching the members that take part.

use anyhow::{Context as _, ensure};
use hubfed_api::about::{self, CLUSTER_ID_PROPERTY, ClusterProperty};
use hubfed_api::mcs::{self, ServiceExport, ServiceImport};
use hubfed_e2e::controller::{ControllerOptions, ControllerProcess, print_logs};
use hubfed_e2e::mcs::{
    Members, ports, service, source_slice, wait_derived, wait_export, wait_import,
};
use hubfed_e2e::{
    FIELD_MANAGER, KUBEFED_NAMESPACE, PrivateFederation, TIMEOUT, Wait, create_hub_namespace,
    fast_health_checks, install_crds, wait_clusters_ready, wait_for,
};
use hubfed_testenv::TestEnv;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

const MEMBERS: [&str; 3] = ["member1", "member2", "member3"];
const NS: &str = "mcs-bad";
/// The Event reasons of a member refused a part in the ClusterSet.
const INVALID: &str = "InvalidClusterID";
const DUPLICATE: &str = "DuplicateClusterID";

#[tokio::test]
async fn bad_input_gets_a_condition_and_an_event_and_stalls_nothing() -> anyhow::Result<()> {
    let env = PrivateFederation::new()
        .members(3)
        .without_controller_manager()
        .config(fast_health_checks())
        .start()
        .await?;
    let mut clients = Vec::new();
    let mut crds = mcs::crds()?;
    crds.push(about::crd()?);
    for member in MEMBERS {
        let client = env.cluster(member).context("member")?.client().await?;
        install_crds(&client, &crds).await?;
        create_hub_namespace(&client, NS).await?;
        clients.push((member, client));
    }
    let members = Members { clients };
    let options = ControllerOptions::single("mcs-bad");
    let controller = ControllerProcess::start_with_flags(&env, &options, &[])?;
    let result = scenarios(&env, &members).await;
    if result.is_err() {
        print_logs(&env, &["mcs-bad"]);
    }
    drop(controller);
    result
}

async fn scenarios(env: &TestEnv, members: &Members) -> anyhow::Result<()> {
    let hub = env.hub().client().await?;
    wait_clusters_ready(&hub, &MEMBERS).await?;
    // `steady`, exported by member2, is the service that must never stall.
    let mut steady = Steady::start(members).await?;
    retyped_to_external_name(members, &mut steady).await?;
    invalid_cluster_id(env, members, &mut steady).await?;
    duplicate_cluster_id(env, members, &mut steady).await
}

/// member2's exported `steady`: each [`Steady::moves`] changes its endpoint and waits for the
/// change in the given members.
struct Steady {
    round: u8,
}

impl Steady {
    async fn start(members: &Members) -> anyhow::Result<Self> {
        members
            .export(
                "member2",
                NS,
                "steady",
                json!({"ports": ports(&[("http", 80)])}),
            )
            .await?;
        let mut steady = Self { round: 0 };
        steady.moves(members, &["member1", "member3"]).await?;
        Ok(steady)
    }

    async fn moves(&mut self, members: &Members, to: &[&str]) -> anyhow::Result<()> {
        self.round += 1;
        let address = format!("10.9.0.{}", self.round);
        members
            .apply::<EndpointSlice>(
                "member2",
                NS,
                source_slice("steady-a", "steady", &[&address]),
            )
            .await?;
        for member in to {
            wait_derived(members, member, NS, "steady", "member2", &[&address]).await?;
        }
        Ok(())
    }
}

/// A ServiceImport is absent.
fn absent(import: Option<&ServiceImport>) -> Result<(), String> {
    import.map_or(Ok(()), |i| Err(format!("present: {:?}", i.status)))
}

fn present(import: Option<&ServiceImport>) -> Result<(), String> {
    import.map(|_| ()).ok_or_else(|| "absent".to_owned())
}

/// `web`, exported by member1, becomes an ExternalName Service, then a ClusterIP one again.
async fn retyped_to_external_name(members: &Members, steady: &mut Steady) -> anyhow::Result<()> {
    members
        .export(
            "member1",
            NS,
            "web",
            json!({"ports": ports(&[("http", 80)])}),
        )
        .await?;
    members
        .apply::<EndpointSlice>("member1", NS, source_slice("web-a", "web", &["10.8.0.1"]))
        .await?;
    for member in ["member2", "member3"] {
        wait_derived(members, member, NS, "web", "member1", &["10.8.0.1"]).await?;
    }
    wait_export(members, "member1", NS, "web", &[("Ready", "True/Exported")]).await?;

    let external = json!({"type": "ExternalName", "externalName": "web.example.com",
        "ports": ports(&[("http", 80)])});
    members
        .apply::<Service>("member1", NS, service("web", external))
        .await
        .context("changing web to ExternalName")?;
    wait_export(
        members,
        "member1",
        NS,
        "web",
        &[
            ("Valid", "False/InvalidServiceType"),
            ("Ready", "False/Failed"),
        ],
    )
    .await?;
    for member in MEMBERS {
        wait_import(members, member, NS, "web", "withdrawn", absent).await?;
    }
    for member in ["member2", "member3"] {
        wait_derived(members, member, NS, "web", "member1", &[]).await?;
    }
    wait_event(
        members,
        "member1",
        "web",
        "InvalidServiceType",
        "ExternalName",
    )
    .await?;
    steady.moves(members, &["member1", "member3"]).await?;

    let cluster_ip = json!({"type": "ClusterIP", "ports": ports(&[("http", 80)])});
    members
        .apply::<Service>("member1", NS, service("web", cluster_ip))
        .await
        .context("changing web back to ClusterIP")?;
    wait_export(
        members,
        "member1",
        NS,
        "web",
        &[("Valid", "True/Valid"), ("Ready", "True/Exported")],
    )
    .await?;
    for member in ["member2", "member3"] {
        wait_derived(members, member, NS, "web", "member1", &["10.8.0.1"]).await?;
    }
    Ok(())
}

/// A person sets member3's cluster id to an invalid value, then back.
async fn invalid_cluster_id(
    env: &TestEnv,
    members: &Members,
    steady: &mut Steady,
) -> anyhow::Result<()> {
    members
        .export(
            "member3",
            NS,
            "edge",
            json!({"ports": ports(&[("http", 80)])}),
        )
        .await?;
    members
        .apply::<EndpointSlice>("member3", NS, source_slice("edge-a", "edge", &["10.7.0.1"]))
        .await?;
    wait_derived(members, "member1", NS, "edge", "member3", &["10.7.0.1"]).await?;
    wait_import(members, "member3", NS, "steady", "imported", present).await?;

    set_cluster_id(members, "member3", "Bad_ID").await?;
    let event = wait_cluster_event(env, "member3", INVALID, "Bad_ID").await?;
    ensure!(
        event.contains("not valid"),
        "the refusal says what is wrong: {event}"
    );
    wait_export(members, "member3", NS, "edge", &[("Ready", "False/Failed")]).await?;
    let export = members
        .api::<ServiceExport>("member3", NS)
        .get("edge")
        .await?;
    let conditions = export.status.map(|s| s.conditions).unwrap_or_default();
    ensure!(
        conditions.len() == 1 && conditions[0].message.contains("Bad_ID"),
        "only the refusal, naming the id: {conditions:?}"
    );
    wait_event(members, "member3", "edge", INVALID, "Bad_ID").await?;
    // Nothing of a refused member is merged, and it holds nothing of hubfed's.
    for member in ["member1", "member2"] {
        wait_import(members, member, NS, "edge", "withdrawn", absent).await?;
    }
    wait_import(members, "member3", NS, "steady", "withdrawn", absent).await?;
    wait_derived(members, "member3", NS, "steady", "member2", &[]).await?;
    steady.moves(members, &["member1"]).await?;

    set_cluster_id(members, "member3", "member3").await?;
    wait_export(
        members,
        "member3",
        NS,
        "edge",
        &[("Ready", "True/Exported")],
    )
    .await?;
    wait_derived(members, "member1", NS, "edge", "member3", &["10.7.0.1"]).await?;
    steady.moves(members, &["member1", "member3"]).await
}

/// A person gives member3 member1's id: both are refused, each naming the other; member2
/// goes on alone. Then member3 gets its own id back.
async fn duplicate_cluster_id(
    env: &TestEnv,
    members: &Members,
    steady: &mut Steady,
) -> anyhow::Result<()> {
    set_cluster_id(members, "member3", "member1").await?;
    let on_member3 = wait_cluster_event(env, "member3", DUPLICATE, "member1").await?;
    let on_member1 = wait_cluster_event(env, "member1", DUPLICATE, "member3").await?;
    for message in [&on_member3, &on_member1] {
        ensure!(
            message.contains("member1"),
            "the refusal names the id: {message}"
        );
    }
    wait_export(members, "member1", NS, "web", &[("Ready", "False/Failed")]).await?;
    wait_export(members, "member3", NS, "edge", &[("Ready", "False/Failed")]).await?;
    // Neither refused member's export reaches member2: no merge under the shared id.
    for name in ["web", "edge"] {
        wait_import(members, "member2", NS, name, "withdrawn", absent).await?;
    }
    // member2 still exports steady: its own import holds its endpoints alone.
    wait_export(
        members,
        "member2",
        NS,
        "steady",
        &[("Ready", "True/Exported")],
    )
    .await?;
    wait_import(members, "member2", NS, "steady", "member2's only", |i| {
        let clusters = hubfed_e2e::mcs::import_clusters(i.ok_or("absent")?);
        (clusters == ["member2"])
            .then_some(())
            .ok_or(format!("clusters {clusters:?}"))
    })
    .await?;
    steady.moves(members, &["member2"]).await?;

    set_cluster_id(members, "member3", "member3").await?;
    wait_export(members, "member1", NS, "web", &[("Ready", "True/Exported")]).await?;
    wait_export(
        members,
        "member3",
        NS,
        "edge",
        &[("Ready", "True/Exported")],
    )
    .await?;
    wait_derived(members, "member2", NS, "edge", "member3", &["10.7.0.1"]).await?;
    steady.moves(members, &["member1", "member3"]).await
}

/// Sets `member`'s `cluster.clusterset.k8s.io` as a person would.
async fn set_cluster_id(members: &Members, member: &str, id: &str) -> anyhow::Result<()> {
    let api: Api<ClusterProperty> = Api::all(members.client(member).clone());
    let body = json!({
        "apiVersion": format!("{}/{}", about::GROUP, about::VERSION),
        "kind": "ClusterProperty",
        "metadata": {"name": CLUSTER_ID_PROPERTY},
        "spec": {"value": id},
    });
    api.patch(
        CLUSTER_ID_PROPERTY,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .with_context(|| format!("setting {member}'s cluster id to {id}"))?;
    Ok(())
}

/// Waits for a Warning Event `reason` on `member`'s ServiceExport `name` whose note contains
/// `text`.
async fn wait_event(
    members: &Members,
    member: &str,
    name: &str,
    reason: &str,
    text: &str,
) -> anyhow::Result<String> {
    let events: Api<Event> = members.api(member, NS);
    wait_for(
        &format!("a {reason} Event on {member}'s ServiceExport {name} naming {text}"),
        TIMEOUT,
        async || {
            let found = events
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|e| {
                    e.regarding.as_ref().is_some_and(|r| {
                        r.kind.as_deref() == Some("ServiceExport")
                            && r.name.as_deref() == Some(name)
                    })
                })
                .filter(|e| e.reason.as_deref() == Some(reason))
                .find_map(|e| e.note.filter(|n| n.contains(text)));
            Ok(found.map_or_else(|| Wait::Pending("none yet".into()), Wait::Done))
        },
    )
    .await
}

/// Waits for a Warning Event `reason` on `cluster`'s KubeFedCluster in the hub whose note
/// contains `text`; returns the note.
async fn wait_cluster_event(
    env: &TestEnv,
    cluster: &str,
    reason: &str,
    text: &str,
) -> anyhow::Result<String> {
    let hub = env.hub().client().await?;
    let events: Api<Event> = Api::namespaced(hub, KUBEFED_NAMESPACE);
    wait_for(
        &format!("a {reason} Event on KubeFedCluster {cluster} naming {text}"),
        TIMEOUT,
        async || {
            let found = events
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|e| {
                    e.type_.as_deref() == Some("Warning")
                        && e.reason.as_deref() == Some(reason)
                        && e.regarding.as_ref().is_some_and(|r| {
                            r.kind.as_deref() == Some("KubeFedCluster")
                                && r.name.as_deref() == Some(cluster)
                        })
                })
                .find_map(|e| e.note.filter(|n| n.contains(text)));
            Ok(found.map_or_else(|| Wait::Pending("none yet".into()), Wait::Done))
        },
    )
    .await
}
