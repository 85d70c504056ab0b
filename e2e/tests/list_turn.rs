//! A member whose first list waits its turn for a list slot (`--member-list-concurrency`) for
//! longer than a cache's grace (`CACHE_SYNC_GRACE`, 30 s) is not reported unreadable: the grace
//! counts from when its list began, not from when its watch started, and while a cluster waits
//! for its turn (up to `CACHE_TURN_GRACE`) an object placed there is neither given a status nor
//! a PropagatedVersion — its writes there are to come. (At 50 members a cold start wrote a
//! second status and a second PropagatedVersion for most objects: `CachedRetrievalFailed`
//! first, for the clusters whose lists came late.)
//!
//! One list slot, a 4 s stall. Once the federation converged, member2 — behind a fault proxy
//! that now holds its lists unanswered — gets new credentials: its caches start again, and its
//! lists queue for the one slot, each holding it for the stall time. Then member1 gets new
//! credentials too: its lists queue behind member2's, and the template changes. member1's
//! ConfigMap list comes more than 30 s later; until then no status is written for the new
//! template and none ever reports member1 `CachedRetrievalFailed`. Once listed, the change
//! reaches member1 — with member2's lists still held. Then the proxy lets them through and
//! both converge.

use std::time::{Duration, Instant};

use anyhow::ensure;
use hubfed_api::kubefedcluster::KubeFedCluster;
use hubfed_api::propagatedversion::{PropagatedVersion, propagated_version_name};
use hubfed_controller::ControllerConfig;
use hubfed_core::conclude::CACHE_SYNC_GRACE;
use hubfed_e2e::member_lists::{by_type, hold_lists, waiting};
use hubfed_e2e::proxied::{ProxiedMember2, Versioned};
use hubfed_e2e::statuses::{Seen, Statuses};
use hubfed_e2e::{
    KUBEFED_NAMESPACE, TIMEOUT, Wait, apply, cluster_status, copy_problems, report, wait_for,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const NAME: &str = "late";
/// What a status shows for a cluster whose cache cannot be read.
const UNREADABLE: &str = "CachedRetrievalFailed";

/// Lists of `cluster`'s ConfigMaps into its caches so far.
fn configmap_lists(cluster: &str) -> u64 {
    by_type("hubfed_member_cache_lists_total", cluster)
        .get("federatedconfigmap")
        .copied()
        .unwrap_or(0)
}

/// Points `cluster`'s KubeFedCluster at a copy of its Secret: new credentials (the same
/// token), so the controller builds new clients and starts the cluster's caches afresh.
async fn new_credentials(hub: &Client, cluster: &str) -> anyhow::Result<()> {
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let secret = secrets
        .get(&clusters.get(cluster).await?.spec.secret_ref.name)
        .await?;
    let name = format!("{cluster}-turn");
    let copy = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(KUBEFED_NAMESPACE.to_owned()),
            ..Default::default()
        },
        data: secret.data,
        ..Default::default()
    };
    apply(&secrets, &copy).await?;
    clusters
        .patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"secretRef": {"name": name}}})),
        )
        .await?;
    Ok(())
}

/// Statuses of `seen` reporting `cluster` unreadable.
fn unreadable<'a>(seen: &'a [Seen], cluster: &str) -> Vec<&'a Value> {
    seen.iter()
        .map(|s| &s.status)
        .filter(|status| {
            cluster_status(&json!({ "status": status }), cluster)
                .is_some_and(|entry| entry["status"] == UNREADABLE)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_waiting_for_its_list_turn_is_not_reported_unreadable() -> anyhow::Result<()> {
    let config = ControllerConfig {
        member_list_concurrency: 1,
        member_list_stall: Duration::from_secs(4),
        ..ControllerConfig::default()
    };
    let federation = ProxiedMember2::start(config, "turn").await?;
    let object = Versioned::create(&federation, NAME, "1").await?;
    let ProxiedMember2 {
        env: _env,
        hub,
        proxy,
        mut controller,
        ns,
        ..
    } = federation;
    let hub_api = &object.hub_api;
    controller.while_running(object.converged("1")).await?;
    let statuses = Statuses::watch(hub_api.clone(), NAME).await?;
    let versions_api: Api<PropagatedVersion> = Api::namespaced(hub.clone(), &ns);
    let versions =
        Statuses::watch(versions_api, &propagated_version_name("ConfigMap", NAME)).await?;

    // member2's caches start again, their lists held: they queue for the one slot.
    proxy.set_faults(hold_lists());
    new_credentials(&hub, "member2").await?;
    let queued = controller
        .while_running(wait_for(
            "member2's lists queued for the one slot",
            TIMEOUT,
            async || {
                Ok(match waiting() {
                    n if n >= 6 => Wait::Done(n),
                    n => Wait::Pending(format!("{n} lists waiting")),
                })
            },
        ))
        .await?;

    // member1's caches start again: its lists queue behind member2's. The template changes.
    let lists_before = configmap_lists("member1");
    new_credentials(&hub, "member1").await?;
    let restarted = Instant::now();
    controller
        .while_running(wait_for(
            "member1's lists queued behind member2's",
            TIMEOUT,
            async || {
                Ok(match waiting() {
                    n if n > queued => Wait::Done(()),
                    n => Wait::Pending(format!("{n} lists waiting")),
                })
            },
        ))
        .await?;
    object.change("2").await?;
    let changed = Instant::now();
    let listed = controller
        .while_running(wait_for(
            "member1's ConfigMaps listed after their turn",
            Duration::from_secs(180),
            async || {
                Ok(if configmap_lists("member1") > lists_before {
                    Wait::Done(Instant::now())
                } else {
                    Wait::Pending(format!("{} lists waiting", waiting()))
                })
            },
        ))
        .await?;
    let waited = listed - restarted;
    report(format_args!(
        "list turn: member1's ConfigMap list came {:.1}s after its caches started again",
        waited.as_secs_f64()
    ));
    ensure!(
        waited > CACHE_SYNC_GRACE + Duration::from_secs(5),
        "member1's ConfigMap list came {:.1}s after its caches started, within a cache's \
         {}s grace (and 5 s): it did not wait behind member2's held lists, so this test \
         showed nothing",
        waited.as_secs_f64(),
        CACHE_SYNC_GRACE.as_secs()
    );

    // Once listed, the change reaches member1; member2's lists are still held.
    controller
        .while_running(wait_for("v=2 in member1", TIMEOUT, async || {
            Ok(Wait::all_or_pending(
                copy_problems(NAME, &object.holding(1, &json!("2"))).await?,
            ))
        }))
        .await?;
    proxy.set_faults(Vec::new());
    controller.while_running(object.converged("2")).await?;
    controller.stop().await??;

    // What was written meanwhile. A status seen within a second of the list (the test looks
    // every 150 ms) may be its consequence; anything earlier was written while member1 waited.
    let before_list = |seen: &Seen| seen.at > changed && seen.at + Duration::from_secs(1) < listed;
    let seen = statuses.stop_timed();
    let reported = unreadable(&seen, "member1");
    ensure!(
        reported.is_empty(),
        "member1 was reported unreadable while its list waited its turn: {reported:#?}"
    );
    let early: Vec<&Value> = seen
        .iter()
        .filter(|s| before_list(s))
        .map(|s| &s.status)
        .collect();
    ensure!(
        early.is_empty(),
        "statuses written for the new template while member1's list waited its turn: {early:#?}"
    );
    let early: Vec<Value> = versions
        .stop_timed()
        .into_iter()
        .filter(before_list)
        .map(|s| s.status)
        .collect();
    ensure!(
        early.is_empty(),
        "PropagatedVersions written while member1's list waited its turn: {early:#?}"
    );
    Ok(())
}
