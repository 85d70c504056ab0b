//! Multi-cluster DNS (issue 49) on real API servers: a hub and three push members, one
//! `hubfed-controller` process writing DNSEndpoints in both groups
//! (`--dns-endpoint-groups=both`).
//!
//! No kube-controller-manager and no kubelet: each member's Service is selector-less, and the
//! test writes its `status.loadBalancer` and its EndpointSlices itself, as KubeFed's own e2e
//! did. Regions and zones are set on the KubeFedClusters' status directly (member1 `us`/`us1`,
//! member2 `eu`/`eu1`, member3 none). In order: a ServiceDNSRecord's status and records, with
//! the never-silent condition and Event about member3; the members' DNSEndpoints untouched at
//! rest; endpoints removed in member1 (its zone and region become CNAMEs) and
//! `allowServiceWithoutEndpoints`; an IngressDNSRecord of two hosts; a record naming no
//! Domain; a deleted record's DNSEndpoints; a real DNS answer through external-dns and CoreDNS
//! that follows a load-balancer change (when the tools are there); member2 stopped (its entry
//! kept, its load balancer empty).

use std::time::Duration;

use anyhow::{Context as _, ensure};
use hickory_client::proto::rr::RecordType;
use hubfed_api::kubefedcluster::KubeFedCluster;
use hubfed_api::multiclusterdns::{self, IngressDnsRecord, ServiceDnsRecord};
use hubfed_e2e::controller::{ControllerOptions, ControllerProcess, print_logs};
use hubfed_e2e::dns::{self as chain, DnsAnswer, DnsChain, DnsChainOptions, DnsTools};
use hubfed_e2e::mcs::{Members, source_slice};
use hubfed_e2e::{
    KUBEFED_NAMESPACE, PrivateFederation, TIMEOUT, Wait, create_hub_namespace, fast_health_checks,
    install_crds, report, wait_clusters_ready, wait_event, wait_for,
};
use hubfed_testenv::{Cluster, TestEnv};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

const MEMBERS: [&str; 3] = ["member1", "member2", "member3"];
const NS: &str = "dns-records";
const ZONE: &str = "dns-records.test";
const LB: [&str; 3] = ["127.0.1.1", "127.0.2.1", "127.0.3.1"];

const GLOBAL: &str = "web.dns-records.galactic.svc.dns-records.test";
const US: &str = "web.dns-records.galactic.svc.us.dns-records.test";
const US1: &str = "web.dns-records.galactic.svc.us1.us.dns-records.test";
const EU: &str = "web.dns-records.galactic.svc.eu.dns-records.test";
const EU1: &str = "web.dns-records.galactic.svc.eu1.eu.dns-records.test";

/// A status entry: cluster, region, zones, load-balancer IPs.
type Entry = (String, String, Vec<String>, Vec<String>);

/// Resumes a frozen API server when dropped, so a failing test never leaves it stopped.
struct Frozen<'a>(&'a Cluster);

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        let _ = self.0.resume();
    }
}

#[tokio::test]
async fn dns_records_follow_the_members_services_and_ingresses() -> anyhow::Result<()> {
    let env = PrivateFederation::new()
        .members(3)
        .without_controller_manager()
        .config(fast_health_checks())
        .start()
        .await?;
    let hub = env.hub().client().await?;
    let tools = DnsTools::locate()?;
    let mut crds = multiclusterdns::crds()?;
    crds.push(match &tools {
        Ok(tools) => tools.dns_endpoint_crd()?,
        Err(_) => stand_in_external_dns_crd()?,
    });
    install_crds(&hub, &crds).await?;
    let mut clients = Vec::new();
    for member in MEMBERS {
        clients.push((
            member,
            env.cluster(member).context("member")?.client().await?,
        ));
    }
    let members = Members { clients };
    let options = ControllerOptions::single("dns");
    let controller =
        ControllerProcess::start_with_flags(&env, &options, &["--dns-endpoint-groups=both"])?;
    let result = scenarios(&env, &hub, &members, tools).await;
    if result.is_err() {
        print_logs(&env, &["dns"]);
    }
    drop(controller);
    result
}

async fn scenarios(
    env: &TestEnv,
    hub: &Client,
    members: &Members,
    tools: Result<DnsTools, String>,
) -> anyhow::Result<()> {
    wait_clusters_ready(hub, &MEMBERS).await?;
    set_topology(hub).await?;
    create_hub_namespace(hub, NS).await?;
    for (_, client) in &members.clients {
        create_hub_namespace(client, NS).await?;
    }
    let domains: Api<DynamicObject> = Api::namespaced_with(
        hub.clone(),
        KUBEFED_NAMESPACE,
        &ApiResource::erase::<multiclusterdns::Domain>(&()),
    );
    domains
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "multiclusterdns.kubefed.io/v1alpha1", "kind": "Domain",
                "metadata": {"name": "galactic"}, "domain": ZONE,
            }))?,
        )
        .await?;
    service_record(hub, members).await?;
    at_rest(hub).await?;
    without_endpoints(hub, members).await?;
    ingress_record(hub, members).await?;
    missing_domain(hub).await?;
    match tools {
        Ok(tools) => real_answer(env, hub, members, &tools).await?,
        Err(why) => eprintln!("the real DNS answer is skipped: {why}"),
    }
    offline(env, hub).await?;
    Ok(())
}

/// A stand-in for external-dns's DNSEndpoint CRD when its module is not at hand: the group,
/// kind and names it has, with an open schema.
fn stand_in_external_dns_crd() -> anyhow::Result<CustomResourceDefinition> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "dnsendpoints.externaldns.k8s.io"},
        "spec": {
            "group": "externaldns.k8s.io", "scope": "Namespaced",
            "names": {"kind": "DNSEndpoint", "plural": "dnsendpoints", "singular": "dnsendpoint",
                      "listKind": "DNSEndpointList"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))?)
}

/// member1 `us`/`us1`, member2 `eu`/`eu1`, member3 neither, on the KubeFedClusters' status.
async fn set_topology(hub: &Client) -> anyhow::Result<()> {
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    for (member, region, zones) in [("member1", "us", ["us1"]), ("member2", "eu", ["eu1"])] {
        // The status may be patched once the registry wrote its conditions (required).
        wait_for(
            &format!("{member}'s KubeFedCluster status"),
            TIMEOUT,
            async || {
                let probed = clusters
                    .get_opt(member)
                    .await?
                    .and_then(|c| c.status)
                    .is_some_and(|s| !s.conditions.is_empty());
                Ok(if probed {
                    Wait::Done(())
                } else {
                    Wait::Pending("not yet probed".into())
                })
            },
        )
        .await?;
        clusters
            .patch_status(
                member,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"region": region, "zones": zones}})),
            )
            .await?;
    }
    Ok(())
}

/// `web` in member `i`: a selector-less LoadBalancer Service with load balancer `ip` and, when
/// `ready`, an EndpointSlice with a ready endpoint.
async fn web_service(members: &Members, i: usize, ip: &str) -> anyhow::Result<()> {
    let member = MEMBERS[i];
    members
        .apply::<Service>(
            member,
            NS,
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                   "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80}]}}),
        )
        .await?;
    set_load_balancer::<Service>(members, member, "web", ip).await?;
    members
        .apply::<EndpointSlice>(
            member,
            NS,
            source_slice("web-a", "web", &[&format!("10.{i}.0.1")]),
        )
        .await
}

/// Writes the load balancer `ip` into `name`'s status in `member`.
async fn set_load_balancer<K>(
    members: &Members,
    member: &str,
    name: &str,
    ip: &str,
) -> anyhow::Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    members
        .api::<K>(member, NS)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}})),
        )
        .await
        .with_context(|| format!("{name}'s load balancer in {member}"))?;
    Ok(())
}

/// The record's status entries as `(cluster, region, zones, ips)`.
fn entries(record: &ServiceDnsRecord) -> Vec<Entry> {
    record
        .status
        .iter()
        .flat_map(|s| &s.dns)
        .map(|c| {
            let ips = c
                .load_balancer
                .ingress
                .iter()
                .flatten()
                .filter_map(|i| i.ip.clone())
                .collect();
            (c.cluster.clone(), c.region.clone(), c.zones.clone(), ips)
        })
        .collect()
}

/// The `RecordsComplete` condition of a record's status, as `status/reason: message`.
fn complete(conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]) -> String {
    conditions
        .iter()
        .find(|c| c.type_ == "RecordsComplete")
        .map(|c| format!("{}/{}: {}", c.status, c.reason, c.message))
        .unwrap_or_default()
}

/// The endpoints of the DNSEndpoint `name` in `group`'s resource, as `name type targets`,
/// sorted; `None` when absent.
async fn endpoint_lines(
    hub: &Client,
    resource: &ApiResource,
    name: &str,
) -> anyhow::Result<Option<Vec<String>>> {
    let api: Api<DynamicObject> = Api::namespaced_with(hub.clone(), NS, resource);
    let Some(object) = api.get_opt(name).await? else {
        return Ok(None);
    };
    let mut lines: Vec<String> = object.data["spec"]["endpoints"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let mut targets: Vec<String> = e["targets"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect();
            targets.sort();
            format!(
                "{} {} {} ttl={}",
                e["dnsName"].as_str().unwrap_or_default(),
                e["recordType"].as_str().unwrap_or_default(),
                targets.join(","),
                e["recordTTL"]
            )
        })
        .collect();
    lines.sort();
    Ok(Some(lines))
}

fn groups() -> [ApiResource; 2] {
    [
        chain::dns_endpoint_resource(),
        ApiResource::erase::<multiclusterdns::DnsEndpoint>(&()),
    ]
}

/// Waits until the DNSEndpoint `name` holds `want` (sorted lines) in both groups.
async fn wait_endpoints(hub: &Client, name: &str, want: &[String]) -> anyhow::Result<()> {
    let mut want = want.to_vec();
    want.sort();
    for resource in groups() {
        wait_for(
            &format!("DNSEndpoint {name} ({})", resource.group),
            TIMEOUT,
            async || {
                let got = endpoint_lines(hub, &resource, name).await?;
                Ok(if got.as_ref() == Some(&want) {
                    Wait::Done(())
                } else {
                    Wait::Pending(format!("{got:?}, want {want:?}"))
                })
            },
        )
        .await?;
    }
    Ok(())
}

fn line(name: &str, record_type: &str, targets: &[&str]) -> String {
    let mut targets: Vec<&str> = targets.to_vec();
    targets.sort_unstable();
    format!("{name} {record_type} {} ttl=30", targets.join(","))
}

/// Waits until the ServiceDNSRecord `name` satisfies `check`.
async fn wait_record(
    hub: &Client,
    name: &str,
    what: &str,
    check: impl Fn(&ServiceDnsRecord) -> Result<(), String>,
) -> anyhow::Result<ServiceDnsRecord> {
    let api: Api<ServiceDnsRecord> = Api::namespaced(hub.clone(), NS);
    wait_for(
        &format!("ServiceDNSRecord {name}: {what}"),
        TIMEOUT,
        async || {
            let record = api.get(name).await?;
            Ok(match check(&record) {
                Ok(()) => Wait::Done(record),
                Err(why) => Wait::Pending(why),
            })
        },
    )
    .await
}

fn entry(cluster: &str, region: &str, zones: &[&str], ips: &[&str]) -> Entry {
    (
        cluster.to_owned(),
        region.to_owned(),
        zones.iter().map(|z| (*z).to_owned()).collect(),
        ips.iter().map(|i| (*i).to_owned()).collect(),
    )
}

/// The records of `web` while every member's Service has a ready endpoint.
fn all_ready() -> Vec<String> {
    vec![
        line(GLOBAL, "A", &LB),
        line(US, "A", &[LB[0]]),
        line(US1, "A", &[LB[0]]),
        line(EU, "A", &[LB[1]]),
        line(EU1, "A", &[LB[1]]),
    ]
}

/// A ServiceDNSRecord for `web`: every member listed, the records of each level, member3's
/// missing region said by a condition and an Event, the others unaffected.
async fn service_record(hub: &Client, members: &Members) -> anyhow::Result<()> {
    for (i, ip) in LB.iter().enumerate() {
        web_service(members, i, ip).await?;
    }
    let records: Api<ServiceDnsRecord> = Api::namespaced(hub.clone(), NS);
    records
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "multiclusterdns.kubefed.io/v1alpha1", "kind": "ServiceDNSRecord",
                "metadata": {"name": "web"},
                "spec": {"domainRef": "galactic", "recordTTL": 30},
            }))?,
        )
        .await?;
    let want = vec![
        entry("member1", "us", &["us1"], &[LB[0]]),
        entry("member2", "eu", &["eu1"], &[LB[1]]),
        entry("member3", "", &[], &[LB[2]]),
    ];
    let record = wait_record(hub, "web", "every member", |r| {
        let got = entries(r);
        let domain = r.status.as_ref().map(|s| s.domain.as_str());
        (got == want && domain == Some(ZONE))
            .then_some(())
            .ok_or_else(|| format!("{domain:?} {got:?}"))
    })
    .await?;
    let condition = complete(&record.status.unwrap_or_default().conditions);
    ensure!(
        condition.starts_with("False/ClusterWithoutRegion") && condition.contains("\"member3\""),
        "member3 without a region is said: {condition}"
    );
    wait_event(hub, NS, "ClusterWithoutRegion", &["member3"]).await?;
    wait_endpoints(hub, "service-web", &all_ready()).await?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(hub.clone(), NS, &chain::dns_endpoint_resource());
    let owners = api.get("service-web").await?.metadata.owner_references;
    ensure!(
        owners
            .iter()
            .flatten()
            .any(|o| o.kind == "ServiceDNSRecord" && o.name == "web"),
        "owned by its record: {owners:?}"
    );
    report("dns_records: status of 3 members, 5 names in both groups, member3 said");
    Ok(())
}

/// Nothing is written while nothing changes (the health checks touch the KubeFedClusters
/// every second, which wakes the controller).
async fn at_rest(hub: &Client) -> anyhow::Result<()> {
    let versions = async || -> anyhow::Result<Vec<Option<String>>> {
        let mut versions = vec![
            Api::<ServiceDnsRecord>::namespaced(hub.clone(), NS)
                .get("web")
                .await?
                .metadata
                .resource_version,
        ];
        for resource in groups() {
            let api: Api<DynamicObject> = Api::namespaced_with(hub.clone(), NS, &resource);
            versions.push(api.get("service-web").await?.metadata.resource_version);
        }
        Ok(versions)
    };
    let before = versions().await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = versions().await?;
    ensure!(before == after, "written at rest: {before:?} -> {after:?}");
    Ok(())
}

/// member1's endpoints removed: its entry has no load balancer, its zone and region are
/// CNAMEs; `allowServiceWithoutEndpoints` brings its addresses back.
async fn without_endpoints(hub: &Client, members: &Members) -> anyhow::Result<()> {
    members
        .delete::<EndpointSlice>("member1", NS, "web-a")
        .await?;
    wait_record(hub, "web", "member1 without a load balancer", |r| {
        let got = entries(r);
        (got.first() == Some(&entry("member1", "us", &["us1"], &[])))
            .then_some(())
            .ok_or_else(|| format!("{got:?}"))
    })
    .await?;
    wait_endpoints(
        hub,
        "service-web",
        &[
            line(GLOBAL, "A", &LB[1..]),
            line(US, "CNAME", &[GLOBAL]),
            line(US1, "CNAME", &[US]),
            line(EU, "A", &[LB[1]]),
            line(EU1, "A", &[LB[1]]),
        ],
    )
    .await?;
    Api::<ServiceDnsRecord>::namespaced(hub.clone(), NS)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"allowServiceWithoutEndpoints": true}})),
        )
        .await?;
    wait_endpoints(hub, "service-web", &all_ready()).await?;
    report("dns_records: no endpoints -> CNAMEs up; allowServiceWithoutEndpoints -> back");
    Ok(())
}

/// An IngressDNSRecord of two hosts: each an A record of member1's and member2's Ingress load
/// balancers; deleted, its DNSEndpoints go.
async fn ingress_record(hub: &Client, members: &Members) -> anyhow::Result<()> {
    for (member, ip) in [("member1", "127.0.1.9"), ("member2", "127.0.2.9")] {
        members
            .apply::<Ingress>(
                member,
                NS,
                json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                    "metadata": {"name": "shop"},
                    "spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}}),
            )
            .await?;
        set_load_balancer::<Ingress>(members, member, "shop", ip).await?;
    }
    let records: Api<IngressDnsRecord> = Api::namespaced(hub.clone(), NS);
    records
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "multiclusterdns.kubefed.io/v1alpha1", "kind": "IngressDNSRecord",
                "metadata": {"name": "shop"},
                "spec": {"hosts": [format!("shop.{ZONE}"), format!("www.shop.{ZONE}")],
                         "recordTTL": 30},
            }))?,
        )
        .await?;
    let ips = ["127.0.1.9", "127.0.2.9"];
    wait_endpoints(
        hub,
        "ingress-shop",
        &[
            line(&format!("shop.{ZONE}"), "A", &ips),
            line(&format!("www.shop.{ZONE}"), "A", &ips),
        ],
    )
    .await?;
    let record = records.get("shop").await?;
    let clusters: Vec<String> = record
        .status
        .iter()
        .flat_map(|s| &s.dns)
        .map(|c| c.cluster.clone())
        .collect();
    ensure!(clusters == MEMBERS, "every member listed: {clusters:?}");

    records.delete("shop", &DeleteParams::default()).await?;
    for resource in groups() {
        wait_for(
            &format!("ingress-shop ({}) deleted", resource.group),
            TIMEOUT,
            async || {
                Ok(
                    match endpoint_lines(hub, &resource, "ingress-shop").await? {
                        None => Wait::Done(()),
                        Some(lines) => Wait::Pending(format!("{lines:?}")),
                    },
                )
            },
        )
        .await?;
    }
    report("dns_records: IngressDNSRecord of 2 hosts written, then deleted with its record");
    Ok(())
}

/// A ServiceDNSRecord whose `domainRef` names no Domain: a condition and an Event, no
/// DNSEndpoint, and `web` goes on.
async fn missing_domain(hub: &Client) -> anyhow::Result<()> {
    let records: Api<ServiceDnsRecord> = Api::namespaced(hub.clone(), NS);
    records
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "multiclusterdns.kubefed.io/v1alpha1", "kind": "ServiceDNSRecord",
                "metadata": {"name": "lost"},
                "spec": {"domainRef": "nowhere"},
            }))?,
        )
        .await?;
    wait_record(hub, "lost", "DomainNotFound", |r| {
        let condition = complete(&r.status.clone().unwrap_or_default().conditions);
        (condition.starts_with("False/DomainNotFound") && condition.contains("\"nowhere\""))
            .then_some(())
            .ok_or(condition)
    })
    .await?;
    wait_event(hub, NS, "DomainNotFound", &["nowhere"]).await?;
    for resource in groups() {
        let got = endpoint_lines(hub, &resource, "service-lost").await?;
        ensure!(got.is_none(), "no DNSEndpoint without a Domain: {got:?}");
    }
    wait_endpoints(hub, "service-web", &all_ready()).await?;
    Ok(())
}

/// A real DNS answer for the controller's records through external-dns and CoreDNS, which
/// follows a load-balancer change in member2.
async fn real_answer(
    env: &TestEnv,
    hub: &Client,
    members: &Members,
    tools: &DnsTools,
) -> anyhow::Result<()> {
    let options = DnsChainOptions {
        namespace: Some(NS.to_owned()),
        ..DnsChainOptions::zone(ZONE)
    };
    let dns = DnsChain::start(env, tools, &options).await?;
    let a = |ips: &[&str]| {
        let records: Vec<String> = ips.iter().map(|ip| format!("A {ip}")).collect();
        DnsAnswer::records(&records.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let took = dns.wait_answer(GLOBAL, RecordType::A, &a(&LB)).await?;
    dns.wait_answer(EU, RecordType::A, &a(&[LB[1]])).await?;
    report(format_args!(
        "dns_records: the controller's global record answered by CoreDNS in {:.2}s",
        took.as_secs_f64()
    ));
    set_load_balancer::<Service>(members, "member2", "web", "127.0.2.2").await?;
    let changed = dns
        .wait_answer(GLOBAL, RecordType::A, &a(&[LB[0], "127.0.2.2", LB[2]]))
        .await?;
    dns.wait_answer(EU1, RecordType::A, &a(&["127.0.2.2"]))
        .await?;
    report(format_args!(
        "dns_records: member2's new load balancer answered in {:.2}s",
        changed.as_secs_f64()
    ));
    set_load_balancer::<Service>(members, "member2", "web", LB[1]).await?;
    wait_endpoints(hub, "service-web", &all_ready()).await?;
    Ok(())
}

/// member2 stopped: Offline, its entry stays with an empty load balancer and its levels are
/// CNAMEs up; the others are unaffected.
async fn offline(env: &TestEnv, hub: &Client) -> anyhow::Result<()> {
    let member2 = env.cluster("member2").context("member2")?;
    member2.pause()?;
    let _frozen = Frozen(member2);
    hubfed_e2e::wait_offline(hub, "member2").await?;
    wait_record(hub, "web", "member2 kept, no load balancer", |r| {
        let got = entries(r);
        (got.get(1) == Some(&entry("member2", "eu", &["eu1"], &[])) && got.len() == 3)
            .then_some(())
            .ok_or_else(|| format!("{got:?}"))
    })
    .await?;
    wait_endpoints(
        hub,
        "service-web",
        &[
            line(GLOBAL, "A", &[LB[0], LB[2]]),
            line(US, "A", &[LB[0]]),
            line(US1, "A", &[LB[0]]),
            line(EU, "CNAME", &[GLOBAL]),
            line(EU1, "CNAME", &[EU]),
        ],
    )
    .await?;
    report("dns_records: member2 Offline -> entry kept, eu names CNAMEs up");
    Ok(())
}
