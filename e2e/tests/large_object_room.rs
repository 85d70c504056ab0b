//! Large objects' writes take room in a budget (issue 15, target 5): a controller with 1 MiB
//! of room, two ~400 KB FederatedConfigMaps (each takes ~780 KiB), and member2 — reached
//! through a fault proxy — never answering the first one's write. While that write hangs (the
//! 30 s dispatch deadline ends it), the second object waits for room: none of its copies is
//! written, not even member1's, and the gauge says one reconcile waits. A small object goes
//! through meanwhile (small objects take no room). Once member2 answers again, both large
//! objects converge, and all the room comes back.
//!
//! Its own clusters and controller.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use hubfed_controller::ControllerConfig;
use hubfed_controller::metrics::METRICS;
use hubfed_e2e::fault_proxy::{Fault, FaultResponse};
use hubfed_e2e::proxied::ProxiedMember2;
use hubfed_e2e::{
    MEMBERS, TIMEOUT, Wait, create_federated, dynamic_api, federated, get_value, member_mismatch,
    placement, propagated_ok, report, wait_for, wait_present,
};
use serde_json::json;

/// The large object whose write to member2 hangs, and the one that waits for its room.
const FIRST: &str = "large-first";
const SECOND: &str = "large-second";
/// A small object, created while the second waits.
const SMALL: &str = "small";
/// Bytes of each large object's value: its spec is a little longer, and takes twice that.
const VALUE_BYTES: usize = 400_000;

fn waiting() -> i64 {
    METRICS
        .large_object_budget_waiting
        .with_label_values::<&str>(&[])
        .get()
}

fn used() -> i64 {
    METRICS
        .large_object_budget_bytes
        .with_label_values(&["used"])
        .get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_object_waits_for_room_while_another_ones_write_hangs() -> anyhow::Result<()> {
    let config = ControllerConfig {
        large_object_budget_mib: 1,
        ..Default::default()
    };
    let ProxiedMember2 {
        env: _env,
        hub,
        proxy,
        mut controller,
        ns,
        copies,
    } = ProxiedMember2::start(config, "room").await?;
    let hub_api = dynamic_api(hub.clone(), &federated("ConfigMap"), Some(&ns));

    proxy.set_faults(vec![Fault {
        path: format!("/api/v1/namespaces/{ns}/configmaps/{FIRST}"),
        method: None,
        response: FaultResponse::Hang,
    }]);
    let value = |name: &str| format!("{name}:{}", "x".repeat(VALUE_BYTES));
    let spec = |name: &str| json!({"template": {"data": {"k": value(name)}}, "placement": placement(&MEMBERS)});
    create_federated(&hub, "ConfigMap", Some(&ns), FIRST, spec(FIRST)).await?;
    controller
        .while_running(wait_for(
            "the first object's write to member2 under way",
            TIMEOUT,
            async || {
                Ok(match proxy.fault_hits() {
                    0 => Wait::Pending("member2 has not been asked yet".into()),
                    _ => Wait::Done(()),
                })
            },
        ))
        .await?;
    controller
        .while_running(wait_present(
            "the first object in member1",
            &copies[0].1,
            FIRST,
        ))
        .await?;
    let one = used();
    ensure!(
        one > 0,
        "the first object's write holds no room while it hangs"
    );

    let created = Instant::now();
    create_federated(&hub, "ConfigMap", Some(&ns), SECOND, spec(SECOND)).await?;
    controller
        .while_running(wait_for(
            "the second object waiting for room",
            TIMEOUT,
            async || {
                Ok(match waiting() {
                    0 => Wait::Pending("no reconcile waits for room".into()),
                    _ => Wait::Done(()),
                })
            },
        ))
        .await?;
    // A small object is not held up by the large ones.
    let small = json!({"template": {"data": {"k": SMALL}}, "placement": placement(&MEMBERS)});
    create_federated(&hub, "ConfigMap", Some(&ns), SMALL, small).await?;
    for (cluster, api) in &copies {
        controller
            .while_running(wait_present(
                &format!("the small object in {cluster}"),
                api,
                SMALL,
            ))
            .await?;
    }
    ensure!(
        waiting() == 1,
        "the second object stopped waiting while the first's write still hangs"
    );
    ensure!(
        used() == one,
        "the room in use moved from {one} to {} bytes while the second object waits",
        used()
    );
    for (cluster, api) in &copies {
        ensure!(
            get_value(api, SECOND).await?.is_none(),
            "the second object was written to {cluster} without room"
        );
    }

    // member2 answers again; the hung write ends at its deadline and gives its room back.
    proxy.set_faults(Vec::new());
    controller
        .while_running(wait_present(
            "the second object in member1",
            &copies[0].1,
            SECOND,
        ))
        .await?;
    let waited = created.elapsed();
    report(format_args!(
        "large-object room: the second object's first copy came {:.1}s after it was created",
        waited.as_secs_f64()
    ));
    controller
        .while_running(wait_for(
            "both large objects propagated",
            Duration::from_secs(120),
            async || {
                let mut problems = Vec::new();
                for name in [FIRST, SECOND] {
                    let object = get_value(&hub_api, name)
                        .await?
                        .with_context(|| format!("{name} disappeared"))?;
                    if let Wait::Pending(problem) = propagated_ok(&object, &MEMBERS) {
                        problems.push(format!("{name}: {problem}"));
                    }
                }
                Ok(Wait::all_or_pending(problems))
            },
        ))
        .await?;
    for (cluster, api) in &copies {
        for name in [FIRST, SECOND] {
            let copy = get_value(api, name).await?;
            let expected = json!(value(name));
            if let Some(problem) =
                member_mismatch(cluster, copy.as_ref(), &[("/data/k", Some(&expected))])
            {
                anyhow::bail!("{name}'s copy: {problem}");
            }
        }
    }
    controller
        .while_running(wait_for("all the room given back", TIMEOUT, async || {
            Ok(match (used(), waiting()) {
                (0, 0) => Wait::Done(()),
                (used, waiting) => {
                    Wait::Pending(format!("{used} bytes in use, {waiting} reconciles waiting"))
                }
            })
        }))
        .await?;
    controller.stop().await??;
    Ok(())
}
