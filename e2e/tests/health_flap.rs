//! A member whose health checks fail while its API works — an API server or etcd too busy to
//! answer `/healthz` in time — goes not Ready like an unreachable one, but the controller keeps
//! its watches of that member: when it is Ready again nothing is listed again (with every
//! member flapping at once under load, the re-lists of all their objects added the load that
//! broke them), and what changed meanwhile, in the hub and in the member, converges from the
//! caches that followed it.
//!
//! member2 is reached through a fault proxy that answers its `/healthz` with 500; health
//! checks every second, not Ready after two failures. Its own clusters and controller.

use anyhow::ensure;
use hubfed_controller::ControllerConfig;
use hubfed_controller::metrics::METRICS;
use hubfed_e2e::fault_proxy::{Fault, FaultResponse};
use hubfed_e2e::proxied::ProxiedMember2;
use hubfed_e2e::{
    Expected, MEMBERS, TIMEOUT, Wait, create_federated, dynamic_api, fast_health_checks, federated,
    get_value, member_mismatch, placement, wait_for, wait_propagated,
};
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

const NAME: &str = "flap";

/// Complete lists of member2's ConfigMaps into the controller's caches, both caches.
fn member2_lists() -> u64 {
    ["managed", "unmanaged"]
        .iter()
        .map(|cache| {
            METRICS
                .member_cache_lists_total
                .with_label_values(&["federatedconfigmap", "member2", cache])
                .get()
        })
        .sum()
}

fn member2_ready() -> i64 {
    METRICS.cluster_ready.with_label_values(&["member2"]).get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_health_checks_fail_keeps_its_watches() -> anyhow::Result<()> {
    let ProxiedMember2 {
        env: _env,
        hub,
        proxy,
        mut controller,
        ns,
        copies,
    } = ProxiedMember2::with_kubefed_config(
        fast_health_checks(),
        ControllerConfig::default(),
        "flap",
    )
    .await?;
    let hub_api = dynamic_api(hub.clone(), &federated("ConfigMap"), Some(&ns));
    let spec = |v: &str| json!({"template": {"data": {"v": v}}, "placement": placement(&MEMBERS)});
    create_federated(&hub, "ConfigMap", Some(&ns), NAME, spec("1")).await?;
    let converged = async |v: &str| {
        let expected = json!(v);
        let copies = Expected::each(
            copies.iter().map(|(c, a)| (*c, a)),
            &[("/data/v", Some(&expected))],
        );
        wait_propagated(
            &format!("v={v} in both members"),
            &hub_api,
            NAME,
            &MEMBERS,
            &copies,
        )
        .await
    };
    controller.while_running(converged("1")).await?;
    let before = member2_lists();
    ensure!(
        before >= 2,
        "member2's caches report {before} lists, expected at least one each"
    );

    // member2's health checks fail; its API still answers.
    proxy.set_faults(vec![Fault {
        path: "/healthz".into(),
        method: None,
        response: FaultResponse::Status(500),
    }]);
    controller
        .while_running(wait_for("member2 not Ready", TIMEOUT, async || {
            Ok(match member2_ready() {
                0 => Wait::Done(()),
                _ => Wait::Pending("member2 is Ready".into()),
            })
        }))
        .await?;
    // Meanwhile the template changes and member2's copy is deleted there.
    hub_api
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"data": {"v": "2"}}}})),
        )
        .await?;
    copies[1].1.delete(NAME, &DeleteParams::default()).await?;
    controller
        .while_running(wait_for("v=2 in member1", TIMEOUT, async || {
            let copy = get_value(&copies[0].1, NAME).await?;
            Ok(
                match member_mismatch("member1", copy.as_ref(), &[("/data/v", Some(&json!("2")))]) {
                    None => Wait::Done(()),
                    Some(problem) => Wait::Pending(problem),
                },
            )
        }))
        .await?;
    ensure!(
        member2_ready() == 0,
        "member2 turned Ready while its /healthz still fails"
    );
    ensure!(
        get_value(&copies[1].1, NAME).await?.is_none(),
        "member2's copy was written while member2 was not Ready"
    );

    // Healthy again: the copy comes back with v=2, and nothing was listed again.
    proxy.set_faults(Vec::new());
    controller.while_running(converged("2")).await?;
    let after = member2_lists();
    ensure!(
        after == before,
        "member2's caches were listed again through its health-check outage: {before} lists \
         before, {after} after"
    );
    controller.stop().await??;
    Ok(())
}
