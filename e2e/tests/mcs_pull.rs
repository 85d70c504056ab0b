//! Multi-cluster services with a pull member, on real API servers: a hub, two push members
//! (member1, member2) and a pull member (member3) whose `hubfed-agent` (with `--mcs`) reports
//! its exports to the hub and carries out the `ServiceImportWork`s the hub writes for it.
//!
//! No EndpointSlice controller runs: the Services are selector-less and the test writes the
//! source slices. Each scenario has its own namespace in all members. In order: member3
//! exports (imports in the push members and in member3 itself, conditions written by the
//! agent, report and work in the hub); member1 exports into member3; member3's slice update
//! and deletion mirrored; a SIGKILL of the agent, then of the controller, and restarts that
//! rewrite nothing (resourceVersions in the members and the hub); unexport in member3; the
//! agent's hub credentials confined to its work namespace.

use anyhow::{Context as _, ensure};
use std::collections::BTreeMap;
use std::time::Duration;

use hubfed_api::mcs::{ServiceExport, ServiceImport};
use hubfed_api::pull_mcs::{
    ClusterReport, ServiceExportReport, ServiceImportWork, mcs_object_name,
};
use hubfed_core::mcs::CONTROL_PLANE_LABEL;
use hubfed_core::pull::cluster_namespace;
use hubfed_e2e::agent::{AGENT_HUB_SECRET, AgentProcess};
use hubfed_e2e::controller::{ControllerOptions, ControllerProcess};
use hubfed_e2e::mcs::{
    Members, import_clusters, ports, source_slice, wait_derived, wait_export, wait_import,
};
use hubfed_e2e::{
    KUBEFED_NAMESPACE, PrivateFederation, TIMEOUT, Wait, create_hub_namespace, hubfedctl,
    install_crds, pull_health_checks, report, wait_clusters_ready, wait_for,
};
use hubfed_testenv::TestEnv;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

const MEMBERS: [&str; 3] = ["member1", "member2", "member3"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_member_takes_part_in_multi_cluster_services() -> anyhow::Result<()> {
    let env = PrivateFederation::new()
        .members(3)
        .config(pull_health_checks())
        .unjoined()
        .start()
        .await?;
    let mut crds = hubfed_api::mcs::crds()?;
    crds.push(hubfed_api::about::crd()?);
    let mut clients = Vec::new();
    for member in MEMBERS {
        let client = env.cluster(member).context("member")?.client().await?;
        install_crds(&client, &crds).await?;
        clients.push((member, client));
    }
    let controller = ControllerProcess::start(&env, &ControllerOptions::single("mcs-pull"))?;
    for args in [
        &["join", "member1", "--cluster-context", "member1"][..],
        &["join", "member2", "--cluster-context", "member2"][..],
        &[
            "join",
            "member3",
            "--mode",
            "pull",
            "--cluster-context",
            "member3",
        ][..],
    ] {
        let (code, out, err) = hubfedctl(env.kubeconfig_path(), args).await;
        ensure!(code == 0, "{args:?}: exit {code}\n{out}\n{err}");
    }
    let mut agent = AgentProcess::start(&env, "member3", 1).await?;
    let mut controller = controller;
    let members = Members { clients };
    let result = scenarios(&env, &members, &mut agent, &mut controller).await;
    if result.is_err() {
        report(format!("agent log:\n{}", agent.log_tail(60)));
        report(format!("controller log:\n{}", controller.log_tail(60)));
    }
    result
}

async fn scenarios(
    env: &TestEnv,
    members: &Members,
    agent: &mut AgentProcess,
    controller: &mut ControllerProcess,
) -> anyhow::Result<()> {
    let hub = env.hub().client().await?;
    wait_clusters_ready(&hub, &MEMBERS).await?;
    pull_exports(members, &hub).await?;
    report("mcs-pull: member3's export imported everywhere");
    push_exports(members).await?;
    report("mcs-pull: member1's export imported in member3");
    restarts(env, members, &hub, agent, controller).await?;
    unexport(members, &hub).await?;
    report("mcs-pull: member3's unexport withdrawn");
    credentials(env).await?;
    report("mcs-pull: the agent's hub credentials are confined");
    Ok(())
}

/// How long the restarted processes are watched for writes.
const SETTLE: Duration = Duration::from_secs(8);

/// The resourceVersions of what this control plane wrote: ServiceImports, Services and
/// EndpointSlices with its label in every member, reports and works in member3's work
/// namespace.
async fn versions(members: &Members, hub: &Client) -> anyhow::Result<BTreeMap<String, String>> {
    let mut versions = BTreeMap::new();
    let own = ListParams::default().labels(CONTROL_PLANE_LABEL);
    fn record<K: kube::Resource<DynamicType = ()>>(
        versions: &mut BTreeMap<String, String>,
        place: &str,
        items: Vec<K>,
    ) {
        for item in items {
            let meta = item.meta();
            let name = format!(
                "{place} {}/{}/{}",
                K::kind(&()),
                meta.namespace.clone().unwrap_or_default(),
                meta.name.clone().unwrap_or_default()
            );
            versions.insert(name, meta.resource_version.clone().unwrap_or_default());
        }
    }
    for member in MEMBERS {
        let client = members.client(member);
        let imports: Api<ServiceImport> = Api::all(client.clone());
        record(&mut versions, member, imports.list(&own).await?.items);
        let services: Api<Service> = Api::all(client.clone());
        record(&mut versions, member, services.list(&own).await?.items);
        let slices: Api<EndpointSlice> = Api::all(client.clone());
        record(&mut versions, member, slices.list(&own).await?.items);
        let exports: Api<ServiceExport> = Api::all(client.clone());
        record(
            &mut versions,
            member,
            exports.list(&ListParams::default()).await?.items,
        );
    }
    let work_ns = cluster_namespace("member3");
    let reports: Api<ServiceExportReport> = Api::namespaced(hub.clone(), &work_ns);
    record(
        &mut versions,
        "hub",
        reports.list(&ListParams::default()).await?.items,
    );
    let works: Api<ServiceImportWork> = Api::namespaced(hub.clone(), &work_ns);
    record(
        &mut versions,
        "hub",
        works.list(&ListParams::default()).await?.items,
    );
    let cluster: Api<ClusterReport> = Api::namespaced(hub.clone(), &work_ns);
    record(
        &mut versions,
        "hub",
        cluster.list(&ListParams::default()).await?.items,
    );
    Ok(versions)
}

/// SIGKILL of the agent, a new one; then of the controller, a new one: nothing unchanged
/// is written again.
async fn restarts(
    env: &TestEnv,
    members: &Members,
    hub: &Client,
    agent: &mut AgentProcess,
    controller: &mut ControllerProcess,
) -> anyhow::Result<()> {
    // Settled first: the last writes of the scenarios before have landed.
    tokio::time::sleep(SETTLE).await;
    let before = versions(members, hub).await?;
    ensure!(
        before
            .keys()
            .any(|k| k.starts_with("hub ServiceImportWork"))
            && before
                .keys()
                .any(|k| k.starts_with("member3 ServiceImport/")),
        "nothing to compare: {before:?}"
    );
    agent.kill().await?;
    *agent = AgentProcess::start(env, "member3", 1).await?;
    controller.kill().await?;
    *controller = ControllerProcess::start(env, &ControllerOptions::single("mcs-pull"))?;
    wait_clusters_ready(hub, &MEMBERS).await?;
    tokio::time::sleep(SETTLE).await;
    let after = versions(members, hub).await?;
    let changed: Vec<&String> = before
        .iter()
        .filter(|(name, version)| after.get(*name) != Some(*version))
        .map(|(name, _)| name)
        .collect();
    ensure!(
        changed.is_empty() && before.len() == after.len(),
        "the restarts rewrote {changed:?} ({} objects before, {} after)",
        before.len(),
        after.len()
    );
    report(format!(
        "mcs-pull: agent and controller restarted (SIGKILL): {} objects unchanged (resourceVersions)",
        before.len()
    ));
    Ok(())
}

async fn namespaces(members: &Members, ns: &str) -> anyhow::Result<()> {
    for member in MEMBERS {
        create_hub_namespace(members.client(member), ns).await?;
    }
    Ok(())
}

/// member3 exports `web`: imported in all three, conditions, report and work in the hub;
/// its slice updates and deletion mirrored.
async fn pull_exports(members: &Members, hub: &Client) -> anyhow::Result<()> {
    let ns = "mcs-pull-web";
    namespaces(members, ns).await?;
    members
        .export(
            "member3",
            ns,
            "web",
            json!({"ports": ports(&[("http", 80)])}),
        )
        .await?;
    let slice = |addresses: &[&str]| source_slice("web-a", "web", addresses);
    members
        .apply::<EndpointSlice>("member3", ns, slice(&["10.3.0.1"]))
        .await?;
    for member in MEMBERS {
        wait_import(members, member, ns, "web", "member3's", |i| {
            let i = i.ok_or("absent")?;
            let ok = import_clusters(i) == ["member3"] && !i.properties().ips.is_empty();
            ok.then_some(()).ok_or_else(|| format!("{:?}", i.status))
        })
        .await?;
    }
    for member in ["member1", "member2"] {
        wait_derived(members, member, ns, "web", "member3", &["10.3.0.1"]).await?;
    }
    wait_export(
        members,
        "member3",
        ns,
        "web",
        &[("Valid", "True/Valid"), ("Ready", "True/Exported")],
    )
    .await?;
    let work_ns = cluster_namespace("member3");
    let name = mcs_object_name(ns, "web");
    let reports: Api<ServiceExportReport> = Api::namespaced(hub.clone(), &work_ns);
    ensure!(reports.get_opt(&name).await?.is_some(), "report {name}");
    let works: Api<ServiceImportWork> = Api::namespaced(hub.clone(), &work_ns);
    let work = works.get_opt(&name).await?.context("the import work")?;
    ensure!(work.spec.namespace == ns && work.spec.name == "web");

    members
        .apply::<EndpointSlice>("member3", ns, slice(&["10.3.0.2"]))
        .await?;
    wait_derived(members, "member1", ns, "web", "member3", &["10.3.0.2"]).await?;
    members
        .delete::<EndpointSlice>("member3", ns, "web-a")
        .await?;
    wait_derived(members, "member1", ns, "web", "member3", &[]).await?;
    Ok(())
}

/// member1 exports `api`: member3 imports it with member1's slices.
async fn push_exports(members: &Members) -> anyhow::Result<()> {
    let ns = "mcs-pull-api";
    namespaces(members, ns).await?;
    members
        .export(
            "member1",
            ns,
            "api",
            json!({"ports": ports(&[("http", 80)])}),
        )
        .await?;
    members
        .apply::<EndpointSlice>("member1", ns, source_slice("api-a", "api", &["10.1.0.1"]))
        .await?;
    wait_import(members, "member3", ns, "api", "member1's", |i| {
        let clusters = import_clusters(i.ok_or("absent")?);
        (clusters == ["member1"])
            .then_some(())
            .ok_or(format!("{clusters:?}"))
    })
    .await?;
    wait_derived(members, "member3", ns, "api", "member1", &["10.1.0.1"]).await?;
    Ok(())
}

/// member3 unexports `web`: the imports go, and the report from the hub.
async fn unexport(members: &Members, hub: &Client) -> anyhow::Result<()> {
    let ns = "mcs-pull-web";
    members
        .delete::<ServiceExport>("member3", ns, "web")
        .await?;
    for member in ["member1", "member2"] {
        wait_import(members, member, ns, "web", "deleted", |i| match i {
            None => Ok(()),
            Some(_) => Err("present".into()),
        })
        .await?;
    }
    let reports: Api<ServiceExportReport> =
        Api::namespaced(hub.clone(), &cluster_namespace("member3"));
    let name = mcs_object_name(ns, "web");
    wait_for("the report to be gone", TIMEOUT, async || {
        Ok(match reports.get_opt(&name).await? {
            None => Wait::Done(()),
            Some(_) => Wait::Pending("present".into()),
        })
    })
    .await?;
    Ok(())
}

/// The agent's hub client, from member3's Secret.
async fn agent_client(env: &TestEnv) -> anyhow::Result<Client> {
    let member = env.cluster("member3").context("member3")?.client().await?;
    let secrets: Api<Secret> = Api::namespaced(member, KUBEFED_NAMESPACE);
    let secret = secrets.get(AGENT_HUB_SECRET).await?;
    let data = secret.data.unwrap_or_default();
    let text = data
        .get("kubeconfig")
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .context("no kubeconfig in the agent's secret")?;
    let config = Config::from_custom_kubeconfig(
        Kubeconfig::from_yaml(&text)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    Ok(Client::try_from(config)?)
}

fn forbidden<T>(result: Result<T, kube::Error>) -> bool {
    matches!(result, Err(kube::Error::Api(e)) if e.code == 403)
}

/// Its own works readable; others' namespaces and cluster-wide lists forbidden.
async fn credentials(env: &TestEnv) -> anyhow::Result<()> {
    let agent = agent_client(env).await?;
    let all = ListParams::default();
    let own: Api<ServiceImportWork> = Api::namespaced(agent.clone(), &cluster_namespace("member3"));
    own.list(&all).await.context("its own works")?;
    let other_works: Api<ServiceImportWork> = Api::namespaced(agent.clone(), KUBEFED_NAMESPACE);
    ensure!(forbidden(other_works.list(&all).await), "others' works");
    let other_reports: Api<ServiceExportReport> = Api::namespaced(agent.clone(), KUBEFED_NAMESPACE);
    ensure!(forbidden(other_reports.list(&all).await), "others' reports");
    let every_work: Api<ServiceImportWork> = Api::all(agent.clone());
    ensure!(forbidden(every_work.list(&all).await), "all works");
    let every_report: Api<ServiceExportReport> = Api::all(agent);
    ensure!(forbidden(every_report.list(&all).await), "all reports");
    Ok(())
}
