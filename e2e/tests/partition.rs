//! A member cut off by a network partition (issue 9): member2 is reached through a proxy that
//! can drop everything (open connections go silent, new ones are never answered). While it is
//! cut off:
//! - deleting an object placed on member1 only never waits for member2;
//! - deleting an object placed on member2 waits while member2 is merely slow, then — once
//!   member2 is Offline — completes, with an Event saying a copy may remain there;
//! - a placement shrunk away from member2 takes effect when it is back.
//!
//! When the partition heals, garbage collection deletes the copy the deletion left in member2,
//! and the placement change is carried out: member2 then holds exactly what the hub places
//! there.
//!
//! Its own test binary: member2 is re-joined through the proxy, with fast health checks.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use hubfed_api::names::MANAGED_LABEL;
use hubfed_e2e::fault_proxy::FaultProxy;
use hubfed_e2e::{
    Federation, KUBEFED_NAMESPACE, MEMBERS, TIMEOUT, Wait, dynamic_api, federated,
    federated_object, get_value, is_offline, modify, placement, report, target, unique_ns,
    wait_event, wait_for, wait_offline,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use serde_json::json;

/// Objects of the test and where they are placed.
const GONE: &str = "deleted-while-cut"; // member1 + member2, deleted during the partition
const LOCAL: &str = "member1-only"; // member1, deleted during the partition
const SHRUNK: &str = "shrunk"; // member1 + member2, then member1 only during the partition
const KEPT: &str = "kept"; // member1 + member2 throughout

#[tokio::test]
async fn a_partitioned_member_never_holds_up_deletions_and_is_cleaned_up_after()
-> anyhow::Result<()> {
    let fed = Federation::shared();
    let hub = fed.hub().await?;
    // Default health checks (every 10 s, Offline after 3 failures). Faster ones would need a
    // KubeFedConfig change, which restarts the controllers; a restart right after start does
    // not complete yet (issue 18).
    let proxy = rejoin_through_proxy(fed).await?;

    let ns = unique_ns("partition");
    fed.create_federated_namespace(&ns, &MEMBERS).await?;
    let resource = federated("ConfigMap");
    let hub_api = dynamic_api(hub.clone(), &resource, Some(&ns));
    for (name, clusters) in [
        (GONE, &MEMBERS[..]),
        (LOCAL, &["member1"][..]),
        (SHRUNK, &MEMBERS[..]),
        (KEPT, &MEMBERS[..]),
    ] {
        let spec = json!({"template": {"data": {"k": name}}, "placement": placement(clusters)});
        hub_api
            .create(
                &PostParams::default(),
                &federated_object(&resource, Some(&ns), name, spec),
            )
            .await
            .with_context(|| format!("creating {name}"))?;
    }
    let members = [
        dynamic_api(
            fed.client("member1").await?,
            &target("ConfigMap"),
            Some(&ns),
        ),
        dynamic_api(
            fed.client("member2").await?,
            &target("ConfigMap"),
            Some(&ns),
        ),
    ];
    let expected_before = [vec![GONE, LOCAL, SHRUNK, KEPT], vec![GONE, SHRUNK, KEPT]];
    wait_for("every copy in place", TIMEOUT, async || {
        managed_copies_are(&members, &expected_before).await
    })
    .await?;

    // A whole federated namespace, deleted during the cut: its copy in member2 is a leftover
    // too (a namespace's FederatedNamespace lives in it: garbage collection must look there).
    let ns_gone = unique_ns("partition-gone");
    fed.create_federated_namespace(&ns_gone, &MEMBERS).await?;
    let member2_namespaces: Api<Namespace> = Api::all(fed.client("member2").await?);
    wait_for(
        "member2 holding the second namespace",
        TIMEOUT,
        async || {
            Ok(match member2_namespaces.get_opt(&ns_gone).await? {
                Some(_) => Wait::Done(()),
                None => Wait::Pending("absent".into()),
            })
        },
    )
    .await?;

    proxy.partition();
    let cut = Instant::now();
    dynamic_api(hub.clone(), &federated("Namespace"), Some(&ns_gone))
        .delete(&ns_gone, &DeleteParams::default())
        .await
        .context("deleting the second FederatedNamespace")?;
    hub_api.delete(LOCAL, &DeleteParams::default()).await?;
    hub_api.delete(GONE, &DeleteParams::default()).await?;
    modify(&hub_api, SHRUNK, |o| {
        o["spec"]["placement"] = placement(&["member1"])
    })
    .await?;

    wait_for(
        "member1-only deleted without waiting for member2",
        TIMEOUT,
        async || {
            Ok(match get_value(&hub_api, LOCAL).await? {
                None => Wait::Done(()),
                Some(o) => Wait::Pending(format!("finalizers {}", o["metadata"]["finalizers"])),
            })
        },
    )
    .await?;
    report(format_args!(
        "partition: an object not placed on the cut-off member deleted {:.1}s after the cut",
        cut.elapsed().as_secs_f64()
    ));
    // Offline takes 3 failed probes 10 s apart: the deletion above did not wait for it, and the
    // one placed on member2 waits while member2 is merely unresponsive.
    ensure!(
        !is_offline(&hub, "member2").await?,
        "member2 went Offline before the unrelated deletion completed: it waited on member2"
    );
    ensure!(
        get_value(&hub_api, GONE).await?.is_some(),
        "the object placed on member2 was deleted before member2 was Offline"
    );
    // member2 is not Offline yet when the cut begins: the deletion placed there waits.
    let offline = wait_offline(&hub, "member2").await?;
    report(format_args!(
        "partition: member2 Offline {:.1}s after the cut",
        offline.duration_since(cut).as_secs_f64()
    ));
    wait_for(
        "the object placed on member2 deleted once member2 is Offline",
        TIMEOUT,
        async || {
            Ok(match get_value(&hub_api, GONE).await? {
                None => Wait::Done(()),
                Some(o) => Wait::Pending(format!("finalizers {}", o["metadata"]["finalizers"])),
            })
        },
    )
    .await?;
    report(format_args!(
        "partition: deletion completed {:.1}s after member2 went Offline",
        offline.elapsed().as_secs_f64()
    ));
    wait_event(&hub, &ns, "CopiesMayRemain", &["member2"]).await?;
    let record: Api<ConfigMap> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let recorded = record
        .get_opt("hubfed-leftovers.federatedconfigmap")
        .await?
        .and_then(|r| r.data)
        .unwrap_or_default();
    ensure!(
        recorded.keys().any(|k| k.starts_with("member2.")),
        "no leftover recorded for member2: {recorded:?}"
    );

    proxy.heal();
    let healed = Instant::now();
    let expected_after = [vec![SHRUNK, KEPT], vec![KEPT]];
    wait_for(
        "after the heal, member2 holds exactly what the hub places there",
        Duration::from_secs(120),
        async || managed_copies_are(&members, &expected_after).await,
    )
    .await?;
    wait_for(
        "after the heal, member2's copy of the deleted namespace removed",
        Duration::from_secs(120),
        async || {
            Ok(match member2_namespaces.get_opt(&ns_gone).await? {
                None => Wait::Done(()),
                Some(n) if n.metadata.deletion_timestamp.is_some() => Wait::Done(()),
                Some(n) => Wait::Pending(format!("labels {:?}", n.metadata.labels)),
            })
        },
    )
    .await?;
    report(format_args!(
        "partition: leftovers collected {:.1}s after the heal",
        healed.elapsed().as_secs_f64()
    ));
    wait_for("the leftover record emptied", TIMEOUT, async || {
        let data = record
            .get_opt("hubfed-leftovers.federatedconfigmap")
            .await?
            .and_then(|r| r.data)
            .unwrap_or_default();
        Ok(if data.is_empty() {
            Wait::Done(())
        } else {
            Wait::Pending(format!("{data:?}"))
        })
    })
    .await
}

/// Replaces member2's KubeFedCluster by one whose endpoint is a [`FaultProxy`] in front of it.
async fn rejoin_through_proxy(fed: &Federation) -> anyhow::Result<FaultProxy> {
    let member2 = fed.cluster("member2")?;
    let proxy = FaultProxy::start(&member2.server_url(), member2.ca_pem(), None).await?;
    fed.unjoin("member2").await?;
    fed.join_via("member2", member2, &proxy.url(), proxy.ca_pem())
        .await?;
    Ok(proxy)
}

/// `Done` when each member holds exactly the named managed ConfigMaps (member1 first).
async fn managed_copies_are(
    members: &[Api<DynamicObject>; 2],
    expected: &[Vec<&str>; 2],
) -> anyhow::Result<Wait<()>> {
    let mut problems = Vec::new();
    let selector = ListParams::default().labels(&format!("{MANAGED_LABEL}=true"));
    for ((api, expected), cluster) in members.iter().zip(expected).zip(MEMBERS) {
        let copies = api.list(&selector).await?.items;
        // Each copy carries what its template says: data.k is its name.
        for copy in &copies {
            let name = copy.metadata.name.as_deref().unwrap_or_default();
            if copy.data["data"]["k"] != name {
                problems.push(format!("{cluster}: {name} holds {}", copy.data["data"]));
            }
        }
        let mut names: Vec<String> = copies.into_iter().filter_map(|o| o.metadata.name).collect();
        names.sort();
        let mut want: Vec<String> = expected.iter().map(|s| (*s).to_owned()).collect();
        want.sort();
        if names != want {
            problems.push(format!("{cluster}: {names:?}, expected {want:?}"));
        }
    }
    Ok(Wait::all_or_pending(problems))
}
