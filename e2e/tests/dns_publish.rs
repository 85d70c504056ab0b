//! The DNS chain of the multi-cluster DNS tests on its own, no hubfed controller involved: a
//! DNSEndpoint written to a hub is published by a real external-dns (CRD source, coredns
//! provider) into etcd, and a real CoreDNS answers for it on loopback. Its records appear, a
//! changed target changes the answer, and a deleted DNSEndpoint's names go away (NXDOMAIN).
//! Skips, saying why, when Go is missing (external-dns and CoreDNS are built from their Go
//! modules, `make tools`).

use hickory_client::proto::rr::RecordType;
use hubfed_e2e::dns::{self, DnsAnswer, DnsChain, DnsChainOptions, DnsTools};
use hubfed_e2e::{report, unique_ns};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const ZONE: &str = "dns-publish.test";

/// The DNSEndpoint: `app` with two A records, `www` a CNAME to `app`.
fn endpoint(name: &str, app_targets: &[&str]) -> anyhow::Result<DynamicObject> {
    let value = json!({
        "apiVersion": "externaldns.k8s.io/v1alpha1",
        "kind": "DNSEndpoint",
        "metadata": {"name": name},
        "spec": {"endpoints": [
            {"dnsName": format!("app.{ZONE}"), "recordType": "A", "recordTTL": 30,
             "targets": app_targets},
            {"dnsName": format!("www.{ZONE}"), "recordType": "CNAME", "recordTTL": 30,
             "targets": [format!("app.{ZONE}")]},
        ]},
    });
    Ok(serde_json::from_value(value)?)
}

/// The answer for `app`'s A records.
fn a_records(addresses: &[&str]) -> DnsAnswer {
    let records: Vec<String> = addresses.iter().map(|a| format!("A {a}")).collect();
    DnsAnswer::records(&records.iter().map(String::as_str).collect::<Vec<_>>())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dns_endpoint_is_answered_changed_and_removed_by_a_real_dns_server() -> anyhow::Result<()>
{
    let tools = match DnsTools::locate()? {
        Ok(tools) => tools,
        Err(why) => {
            eprintln!("skipped: {why}");
            return Ok(());
        }
    };
    let env = tokio::task::spawn_blocking(hubfed_e2e::helm::start_hub_only).await??;
    let hub = env.hub().client().await?;
    dns::install_dns_endpoint_crd(&hub, &tools).await?;
    let chain = DnsChain::start(&env, &tools, &DnsChainOptions::zone(ZONE)).await?;

    let ns = unique_ns("dns-publish");
    Api::<Namespace>::all(hub.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await?;
    let endpoints: Api<DynamicObject> =
        Api::namespaced_with(hub.clone(), &ns, &dns::dns_endpoint_resource());

    let (app, www) = (format!("app.{ZONE}"), format!("www.{ZONE}"));
    endpoints
        .create(
            &PostParams::default(),
            &endpoint("web", &["127.0.1.1", "127.0.1.2"])?,
        )
        .await?;
    let first = chain
        .wait_answer(&app, RecordType::A, &a_records(&["127.0.1.1", "127.0.1.2"]))
        .await?;
    report(format_args!(
        "dns_publish: DNSEndpoint created -> A answer in {:.2}s",
        first.as_secs_f64()
    ));
    // `www` asked for its A records: the CNAME and the addresses it leads to. (CoreDNS's etcd
    // plugin answers a CNAME question only from the name's own key; external-dns writes each
    // target one label below it, so a CNAME question gets NXDOMAIN.)
    let www_answer = |addresses: &[&str]| {
        let mut records = vec![format!("CNAME {app}.")];
        records.extend(addresses.iter().map(|a| format!("A {a}")));
        DnsAnswer::records(&records.iter().map(String::as_str).collect::<Vec<_>>())
    };
    chain
        .wait_answer(
            &www,
            RecordType::A,
            &www_answer(&["127.0.1.1", "127.0.1.2"]),
        )
        .await?;

    let changed: Value =
        json!({"spec": endpoint("web", &["127.0.1.1", "127.0.1.3"])?.data["spec"]});
    endpoints
        .patch("web", &PatchParams::default(), &Patch::Merge(&changed))
        .await?;
    let change = chain
        .wait_answer(&app, RecordType::A, &a_records(&["127.0.1.1", "127.0.1.3"]))
        .await?;
    report(format_args!(
        "dns_publish: target changed -> new A answer in {:.2}s",
        change.as_secs_f64()
    ));
    chain
        .wait_answer(
            &www,
            RecordType::A,
            &www_answer(&["127.0.1.1", "127.0.1.3"]),
        )
        .await?;

    endpoints.delete("web", &DeleteParams::default()).await?;
    let gone = chain
        .wait_answer(&app, RecordType::A, &DnsAnswer::NxDomain)
        .await?;
    chain
        .wait_answer(&www, RecordType::A, &DnsAnswer::NxDomain)
        .await?;
    report(format_args!(
        "dns_publish: DNSEndpoint deleted -> NXDOMAIN in {:.2}s",
        gone.as_secs_f64()
    ));
    Ok(())
}
