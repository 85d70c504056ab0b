//! Multi-cluster services (issue 48) on real API servers: a hub and three push members with
//! the MCS and About CRDs, and one `hubfed-controller` process whose Offline endpoint TTL is
//! [`ENDPOINT_TTL`].
//!
//! No kube-controller-manager runs, so no EndpointSlice controller: the Services are
//! selector-less and the test writes every source EndpointSlice itself. Each scenario has its
//! own namespace. In order: a single exporter (conditions, ServiceImport with the member's
//! ClusterSet IP in every member with the namespace, none where it is missing, cluster ids,
//! slices mirrored, updated and withdrawn); conflicts (port number, then a port of another
//! name as a union, then headless against ClusterIP); bad input (ExternalName, no Service)
//! beside a service that works; unexport of one exporter, then the last; objects hubfed did
//! not write surviving; a SIGKILL mid-way and a restart that rewrites nothing; an Offline
//! member's endpoints withdrawn after the TTL.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use hubfed_api::about::{self, CLUSTER_ID_PROPERTY, CLUSTER_SET_PROPERTY, ClusterProperty};
use hubfed_api::kubefedcluster::KubeFedCluster;
use hubfed_api::mcs::{self, ServiceExport, ServiceImport};
use hubfed_core::mcs::{CONTROL_PLANE_LABEL, ENDPOINTSLICE_MANAGED_BY, derived_service_name};
use hubfed_e2e::controller::{ControllerOptions, ControllerProcess, print_logs, sample};
use hubfed_e2e::mcs::{
    Members, derived_addresses, import_clusters, import_ports, ports, service, service_export,
    source_slice, wait_derived, wait_export, wait_import,
};
use hubfed_e2e::{
    KUBEFED_NAMESPACE, PrivateFederation, TIMEOUT, Wait, create_hub_namespace, fast_health_checks,
    install_crds, report, wait_clusters_ready, wait_for,
};
use hubfed_testenv::{Cluster, TestEnv};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::json;

/// The controller's `--mcs-endpoint-ttl`.
const ENDPOINT_TTL: Duration = Duration::from_secs(8);
const MEMBERS: [&str; 3] = ["member1", "member2", "member3"];
/// The ClusterSet's name: the control plane's namespace.
const CLUSTER_SET: &str = KUBEFED_NAMESPACE;
/// How long the members are watched for writes at rest.
const REST: Duration = Duration::from_secs(5);

/// Resumes a frozen API server when dropped, so a failing test never leaves it stopped.
struct Frozen<'a>(&'a Cluster);

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        let _ = self.0.resume();
    }
}

#[tokio::test]
async fn members_services_are_imported_across_the_cluster_set() -> anyhow::Result<()> {
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
        clients.push((member, client));
    }
    let members = Members { clients };
    let ttl = format!("--mcs-endpoint-ttl={}s", ENDPOINT_TTL.as_secs());
    let options = ControllerOptions::single("mcs");
    let controller = ControllerProcess::start_with_flags(&env, &options, &[&ttl])?;
    let result = scenarios(&env, &members, controller, &options, &ttl).await;
    if result.is_err() {
        print_logs(&env, &["mcs", "mcs-restarted"]);
    }
    result
}

async fn scenarios(
    env: &TestEnv,
    members: &Members,
    controller: ControllerProcess,
    options: &ControllerOptions,
    ttl: &str,
) -> anyhow::Result<()> {
    let hub = env.hub().client().await?;
    wait_clusters_ready(&hub, &MEMBERS).await?;
    cluster_ids(members).await?;
    single_exporter(members).await?;
    conflicts(members).await?;
    bad_input(members).await?;
    unexport(members).await?;
    let restarted = restart(env, members, controller, options, ttl).await?;
    offline(env, members, &hub).await?;
    drop(restarted);
    Ok(())
}

/// Every member holds its id (its KubeFedCluster name) and the ClusterSet's name.
async fn cluster_ids(members: &Members) -> anyhow::Result<()> {
    for (member, client) in &members.clients {
        let api: Api<ClusterProperty> = Api::all(client.clone());
        wait_for(
            &format!("{member}'s ClusterProperties"),
            TIMEOUT,
            async || {
                let id = api
                    .get_opt(CLUSTER_ID_PROPERTY)
                    .await?
                    .map(|p| p.spec.value);
                let set = api
                    .get_opt(CLUSTER_SET_PROPERTY)
                    .await?
                    .map(|p| p.spec.value);
                Ok(
                    if id.as_deref() == Some(*member) && set.as_deref() == Some(CLUSTER_SET) {
                        Wait::Done(())
                    } else {
                        Wait::Pending(format!("id {id:?}, set {set:?}"))
                    },
                )
            },
        )
        .await?;
    }
    Ok(())
}

/// Namespace `ns` in each of `clusters`.
async fn namespaces(members: &Members, ns: &str, clusters: &[&str]) -> anyhow::Result<()> {
    for member in clusters {
        create_hub_namespace(members.client(member), ns).await?;
    }
    Ok(())
}

/// member1 exports `web`; member3 lacks the namespace.
async fn single_exporter(members: &Members) -> anyhow::Result<()> {
    let ns = "mcs-single";
    namespaces(members, ns, &["member1", "member2"]).await?;
    let spec = json!({"ports": ports(&[("http", 80)])});
    members.export("member1", ns, "web", spec).await?;
    wait_export(
        members,
        "member1",
        ns,
        "web",
        &[
            ("Valid", "True/Valid"),
            ("Conflict", "False/NoConflicts"),
            ("Ready", "True/Exported"),
        ],
    )
    .await?;
    let derived = derived_service_name(ns, "web");
    for member in ["member1", "member2"] {
        let import = wait_import(members, member, ns, "web", "ClusterSetIP", |i| {
            let i = i.ok_or("absent")?;
            let p = i.properties();
            let ok = p.type_ == "ClusterSetIP"
                && import_ports(i) == ["http/80"]
                && import_clusters(i) == ["member1"]
                && !p.ips.is_empty();
            ok.then_some(())
                .ok_or_else(|| format!("{p:?} {:?}", i.status))
        })
        .await?
        .context("imported")?;
        let service = members.api::<Service>(member, ns).get(&derived).await?;
        let cluster_ips = service.spec.and_then(|s| s.cluster_ips).unwrap_or_default();
        ensure!(
            import.properties().ips == cluster_ips,
            "{member}: ips {:?}, derived Service {cluster_ips:?}",
            import.properties().ips
        );
        let annotations = import.metadata.annotations.unwrap_or_default();
        ensure!(annotations.get(mcs::DERIVED_SERVICE_ANNOTATION) == Some(&derived));
        let labels = import.metadata.labels.unwrap_or_default();
        ensure!(labels.contains_key(CONTROL_PLANE_LABEL), "{labels:?}");
    }
    let absent = members
        .api::<ServiceImport>("member3", ns)
        .get_opt("web")
        .await;
    ensure!(
        !matches!(absent, Ok(Some(_))),
        "member3 lacks the namespace: no import"
    );

    // Objects hubfed did not write, which carry MCS labels all the same.
    let foreign = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "other-mcs", "labels": {
            mcs::SERVICE_NAME_LABEL: "web", mcs::SOURCE_CLUSTER_LABEL: "elsewhere",
            "endpointslice.kubernetes.io/managed-by": "other-mcs-controller"}},
        "addressType": "IPv4", "endpoints": [{"addresses": ["10.9.9.9"]}],
    });
    members
        .apply::<EndpointSlice>("member2", ns, foreign)
        .await?;
    let other_import = json!({
        "apiVersion": format!("{}/{}", mcs::GROUP, mcs::VERSION), "kind": "ServiceImport",
        "metadata": {"name": "other"},
        "spec": {"type": "ClusterSetIP", "ports": [{"port": 1, "protocol": "TCP"}]},
    });
    members
        .apply::<ServiceImport>("member2", ns, other_import)
        .await?;

    let slice = |addresses: &[&str]| source_slice("web-a", "web", addresses);
    members
        .apply::<EndpointSlice>("member1", ns, slice(&["10.1.0.1"]))
        .await?;
    let created = wait_derived(members, "member2", ns, "web", "member1", &["10.1.0.1"]).await?;
    let labels = derived_slice_labels(members, "member2", ns).await?;
    ensure!(
        labels.get("kubernetes.io/service-name") == Some(&derived),
        "{labels:?}"
    );
    members
        .apply::<EndpointSlice>("member1", ns, slice(&["10.1.0.2", "10.1.0.3"]))
        .await?;
    let updated = wait_derived(
        members,
        "member2",
        ns,
        "web",
        "member1",
        &["10.1.0.2", "10.1.0.3"],
    )
    .await?;
    members
        .delete::<EndpointSlice>("member1", ns, "web-a")
        .await?;
    let deleted = wait_derived(members, "member2", ns, "web", "member1", &[]).await?;
    report(format_args!(
        "mcs: source slice to mirrored slice in member2: created {:.2}s, updated {:.2}s, \
         deleted {:.2}s",
        created.as_secs_f64(),
        updated.as_secs_f64(),
        deleted.as_secs_f64()
    ));
    members
        .apply::<EndpointSlice>("member1", ns, slice(&["10.1.0.4"]))
        .await?;
    wait_derived(members, "member2", ns, "web", "member1", &["10.1.0.4"]).await?;
    Ok(())
}

async fn derived_slice_labels(
    members: &Members,
    member: &str,
    ns: &str,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let selector = format!("endpointslice.kubernetes.io/managed-by={ENDPOINTSLICE_MANAGED_BY}");
    let slices = members
        .api::<EndpointSlice>(member, ns)
        .list(&ListParams::default().labels(&selector))
        .await?;
    slices
        .items
        .into_iter()
        .next()
        .and_then(|s| s.metadata.labels)
        .context("a derived slice")
}

/// Port number conflict, then a union, then headless against ClusterIP.
async fn conflicts(members: &Members) -> anyhow::Result<()> {
    let ns = "mcs-conflict";
    namespaces(members, ns, &MEMBERS).await?;
    members
        .export(
            "member1",
            ns,
            "api",
            json!({"ports": ports(&[("http", 80)])}),
        )
        .await?;
    wait_export(members, "member1", ns, "api", &[("Ready", "True/Exported")]).await?;
    // creationTimestamps have seconds: member2's export is younger.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    members
        .export(
            "member2",
            ns,
            "api",
            json!({"ports": ports(&[("http", 8080)])}),
        )
        .await?;
    for member in ["member1", "member2"] {
        let export = wait_export(
            members,
            member,
            ns,
            "api",
            &[("Conflict", "True/PortConflict")],
        )
        .await?;
        let message = export
            .status
            .iter()
            .flat_map(|s| &s.conditions)
            .find(|c| c.type_ == "Conflict")
            .map(|c| c.message.clone())
            .unwrap_or_default();
        ensure!(
            message.contains("\"member1\"") && message.contains("1/2 clusters disagree"),
            "{message}"
        );
    }
    wait_import(members, "member3", ns, "api", "the oldest's port", |i| {
        let ports = import_ports(i.ok_or("absent")?);
        (ports == ["http/80"])
            .then_some(())
            .ok_or(format!("{ports:?}"))
    })
    .await?;

    members
        .apply::<Service>(
            "member2",
            ns,
            service("api", json!({"ports": ports(&[("metrics", 9090)])})),
        )
        .await?;
    wait_import(members, "member3", ns, "api", "the union", |i| {
        let ports = import_ports(i.ok_or("absent")?);
        (ports == ["http/80", "metrics/9090"])
            .then_some(())
            .ok_or(format!("{ports:?}"))
    })
    .await?;
    // As the MCS conformance suite has it: the union, and still a port conflict (the port
    // sets differ), now with no port dropped.
    for member in ["member1", "member2"] {
        let api = members.api::<ServiceExport>(member, ns);
        wait_for(
            &format!("{member}'s conflict without a dropped port"),
            TIMEOUT,
            async || {
                let export = api.get("api").await?;
                let conflict = export
                    .status
                    .iter()
                    .flat_map(|s| &s.conditions)
                    .find(|c| c.type_ == "Conflict");
                Ok(match conflict {
                    Some(c) if c.reason == "PortConflict" && !c.message.contains("Dropped") => {
                        Wait::Done(())
                    }
                    other => Wait::Pending(format!("{other:?}")),
                })
            },
        )
        .await?;
    }

    let headless = json!({"clusterIP": "None", "ports": ports(&[("http", 80)])});
    members.export("member3", ns, "api", headless).await?;
    for member in MEMBERS {
        wait_export(
            members,
            member,
            ns,
            "api",
            &[("Conflict", "True/TypeConflict")],
        )
        .await?;
    }
    wait_import(members, "member3", ns, "api", "still ClusterSetIP", |i| {
        let i = i.ok_or("absent")?;
        let ok = i.properties().type_ == "ClusterSetIP" && import_clusters(i).len() == 3;
        ok.then_some(()).ok_or(format!("{:?}", i.properties()))
    })
    .await?;
    Ok(())
}

/// ExternalName and a missing Service are invalid, with Events; `ok` beside them works.
async fn bad_input(members: &Members) -> anyhow::Result<()> {
    let ns = "mcs-invalid";
    namespaces(members, ns, &MEMBERS).await?;
    let external = json!({"type": "ExternalName", "externalName": "example.com"});
    members.export("member1", ns, "ext", external).await?;
    members
        .apply::<ServiceExport>("member1", ns, service_export("ghost"))
        .await?;
    members
        .export(
            "member1",
            ns,
            "ok",
            json!({"ports": ports(&[("http", 80)])}),
        )
        .await?;
    wait_export(
        members,
        "member1",
        ns,
        "ext",
        &[
            ("Valid", "False/InvalidServiceType"),
            ("Ready", "False/Failed"),
        ],
    )
    .await?;
    wait_export(
        members,
        "member1",
        ns,
        "ghost",
        &[("Valid", "False/NoService")],
    )
    .await?;
    wait_export(members, "member1", ns, "ok", &[("Ready", "True/Exported")]).await?;
    wait_import(members, "member2", ns, "ok", "imported", |i| {
        i.map(|_| ()).ok_or("absent".into())
    })
    .await?;
    for name in ["ext", "ghost"] {
        let import = members
            .api::<ServiceImport>("member2", ns)
            .get_opt(name)
            .await?;
        ensure!(import.is_none(), "{name} contributes nothing: {import:?}");
    }
    let events: Api<Event> = members.api("member1", ns);
    wait_for("Events on the invalid exports", TIMEOUT, async || {
        let reasons: Vec<String> = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("ServiceExport")
            })
            .filter_map(|e| e.reason)
            .collect();
        let wanted = ["InvalidServiceType", "NoService"];
        Ok(if wanted.iter().all(|w| reasons.iter().any(|r| r == w)) {
            Wait::Done(())
        } else {
            Wait::Pending(format!("{reasons:?}"))
        })
    })
    .await
}

/// Two exporters with slices; one unexports (its slices go, the import stays), then the last
/// (the import and everything derived go everywhere).
async fn unexport(members: &Members) -> anyhow::Result<()> {
    let ns = "mcs-unexport";
    namespaces(members, ns, &MEMBERS).await?;
    for (member, address) in [("member1", "10.2.0.1"), ("member2", "10.2.0.2")] {
        members
            .export(member, ns, "db", json!({"ports": ports(&[("sql", 5432)])}))
            .await?;
        members
            .apply::<EndpointSlice>(member, ns, source_slice("db-a", "db", &[address]))
            .await?;
    }
    wait_derived(members, "member3", ns, "db", "member1", &["10.2.0.1"]).await?;
    wait_derived(members, "member3", ns, "db", "member2", &["10.2.0.2"]).await?;
    members.delete::<ServiceExport>("member2", ns, "db").await?;
    wait_derived(members, "member3", ns, "db", "member2", &[]).await?;
    wait_derived(members, "member1", ns, "db", "member2", &[]).await?;
    wait_import(members, "member3", ns, "db", "member1's only", |i| {
        let clusters = import_clusters(i.ok_or("absent")?);
        (clusters == ["member1"])
            .then_some(())
            .ok_or(format!("{clusters:?}"))
    })
    .await?;
    wait_derived(members, "member3", ns, "db", "member1", &["10.2.0.1"]).await?;

    members.delete::<ServiceExport>("member1", ns, "db").await?;
    let derived = derived_service_name(ns, "db");
    for member in MEMBERS {
        wait_import(members, member, ns, "db", "deleted", |i| match i {
            None => Ok(()),
            Some(_) => Err("present".into()),
        })
        .await?;
        wait_derived(members, member, ns, "db", "member1", &[]).await?;
        let service = members.api::<Service>(member, ns).get_opt(&derived).await?;
        ensure!(service.is_none(), "{member}: the derived Service is gone");
    }

    // What hubfed did not write, in mcs-single, survived everything so far.
    let foreign = members
        .api::<EndpointSlice>("member2", "mcs-single")
        .get_opt("other-mcs")
        .await?;
    let other = members
        .api::<ServiceImport>("member2", "mcs-single")
        .get_opt("other")
        .await?;
    ensure!(
        foreign.is_some() && other.is_some(),
        "others' objects survive"
    );
    Ok(())
}

/// The resourceVersion of every object hubfed wrote (and every ServiceExport) in the
/// scenarios' namespaces, as `member/ns/kind/name=version`.
async fn versions(members: &Members) -> anyhow::Result<Vec<String>> {
    let mut versions = Vec::new();
    let all = ListParams::default();
    for (member, _) in &members.clients {
        for ns in ["mcs-single", "mcs-conflict", "mcs-invalid"] {
            let mut metas = Vec::new();
            let imports = members.api::<ServiceImport>(member, ns).list(&all).await?;
            metas.extend(imports.items.into_iter().map(|o| ("import", o.metadata)));
            let exports = members.api::<ServiceExport>(member, ns).list(&all).await?;
            metas.extend(exports.items.into_iter().map(|o| ("export", o.metadata)));
            let services = members.api::<Service>(member, ns).list(&all).await?;
            metas.extend(services.items.into_iter().map(|o| ("service", o.metadata)));
            let slices = members.api::<EndpointSlice>(member, ns).list(&all).await?;
            metas.extend(slices.items.into_iter().map(|o| ("slice", o.metadata)));
            versions.extend(metas.into_iter().map(|(kind, meta)| {
                let name = meta.name.unwrap_or_default();
                let version = meta.resource_version.unwrap_or_default();
                format!("{member}/{ns}/{kind}/{name}={version}")
            }));
        }
    }
    Ok(versions)
}

/// Waits until `controller` has made no MCS write for [`REST`]; returns its writes then.
async fn quiet(controller: &ControllerProcess) -> anyhow::Result<f64> {
    let mut last = None;
    wait_for("the MCS writes to settle", TIMEOUT, async || {
        let now = writes(controller).await;
        let settled = now.is_some() && now == last;
        last = now;
        if settled {
            return Ok(Wait::Done(now.unwrap_or_default()));
        }
        tokio::time::sleep(REST).await;
        Ok(Wait::Pending(format!("writes {now:?}")))
    })
    .await
}

/// The MCS member writes a controller has made, from its metrics.
async fn writes(controller: &ControllerProcess) -> Option<f64> {
    let metrics = controller.metrics().await?;
    Some(sample(&metrics, "hubfed_mcs_member_writes_total", &[]).unwrap_or(0.0))
}

/// SIGKILL right after a new export; the restarted controller exports it and rewrites
/// nothing that was unchanged.
async fn restart(
    env: &TestEnv,
    members: &Members,
    controller: ControllerProcess,
    options: &ControllerOptions,
    ttl: &str,
) -> anyhow::Result<ControllerProcess> {
    quiet(&controller).await?;
    let before = versions(members).await?;
    let ns = "mcs-restart";
    namespaces(members, ns, &MEMBERS).await?;
    members
        .export(
            "member2",
            ns,
            "late",
            json!({"ports": ports(&[("http", 80)])}),
        )
        .await?;
    controller.kill().await?;
    let restarted = ControllerProcess::start_with_flags(
        env,
        &ControllerOptions {
            identity: "mcs-restarted".to_owned(),
            ..options.clone()
        },
        &[ttl],
    )?;
    wait_export(
        members,
        "member2",
        ns,
        "late",
        &[("Ready", "True/Exported")],
    )
    .await?;
    for member in MEMBERS {
        wait_import(members, member, ns, "late", "imported", |i| {
            i.map(|_| ()).ok_or("absent".into())
        })
        .await?;
    }
    let after = versions(members).await?;
    let changed: Vec<&String> = after.iter().filter(|v| !before.contains(v)).collect();
    ensure!(
        changed.is_empty(),
        "the restart rewrote unchanged objects: {changed:?}"
    );
    // Writes at rest: none while nothing changes.
    let settled = quiet(&restarted).await?;
    tokio::time::sleep(REST).await;
    let rest = writes(&restarted).await.context("metrics")? - settled;
    report(format_args!(
        "mcs: restart after SIGKILL: {} objects unchanged (resourceVersions), {settled} writes \
         to converge, {rest} writes in {}s at rest",
        before.len(),
        REST.as_secs()
    ));
    ensure!(rest == 0.0, "{rest} MCS writes at rest");
    Ok(restarted)
}

/// member3's API server stopped: its endpoints stay in member1 until the TTL, then go.
async fn offline(env: &TestEnv, members: &Members, hub: &Client) -> anyhow::Result<()> {
    let ns = "mcs-offline";
    namespaces(members, ns, &MEMBERS).await?;
    members
        .export(
            "member3",
            ns,
            "cache",
            json!({"ports": ports(&[("redis", 6379)])}),
        )
        .await?;
    members
        .apply::<EndpointSlice>(
            "member3",
            ns,
            source_slice("cache-a", "cache", &["10.3.0.1"]),
        )
        .await?;
    wait_derived(members, "member1", ns, "cache", "member3", &["10.3.0.1"]).await?;

    let member3 = env.cluster("member3").context("member3")?;
    member3.pause()?;
    let _frozen = Frozen(member3);
    let paused = Instant::now();
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    wait_for("member3 to be not Ready", TIMEOUT, async || {
        let cluster = clusters.get("member3").await?;
        let ready = cluster
            .status
            .iter()
            .flat_map(|s| &s.conditions)
            .any(|c| c.type_ == "Ready" && c.status == "True");
        Ok(if ready {
            Wait::Pending("Ready".into())
        } else {
            Wait::Done(())
        })
    })
    .await?;
    let offline_after = paused.elapsed();
    let kept = derived_addresses(members, "member1", ns, "cache", "member3").await?;
    ensure!(kept == ["10.3.0.1"], "kept within the TTL: {kept:?}");
    let withdrawn = wait_derived(members, "member1", ns, "cache", "member3", &[]).await?;
    wait_import(members, "member1", ns, "cache", "withdrawn", |i| match i {
        None => Ok(()),
        Some(_) => Err("present".into()),
    })
    .await?;
    report(format_args!(
        "mcs: member3 frozen: not Ready after {:.1}s, its endpoints withdrawn from member1 \
         {:.1}s later (TTL {}s)",
        offline_after.as_secs_f64(),
        withdrawn.as_secs_f64(),
        ENDPOINT_TTL.as_secs()
    ));
    ensure!(
        withdrawn + Duration::from_secs(3) >= ENDPOINT_TTL,
        "withdrawn {withdrawn:?} after member3 was seen Offline: before the TTL"
    );
    Ok(())
}
