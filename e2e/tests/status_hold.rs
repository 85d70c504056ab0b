//! A status waits for a member's write still running (issue 15, target 1). The controller
//! writes to each member one request at a time, and member2 — reached through a fault proxy —
//! never answers the writes of two objects: the third object's write to member2 queues behind
//! both hung writes, each ended by the 30 s dispatch deadline, so it runs about a minute after
//! the object is created — past the 30 s a pull member's report is waited for, within the 2 min
//! a running push write is. The third object's status and its PropagatedVersion's must each be
//! written once, when that write has ended — never first with member2 "not finished yet" and
//! again moments later (two hub writes where one will do, as the objects written last in a
//! long cold start had). Once member2 answers again, the hung objects converge too.
//!
//! Its own clusters and controller: the controller's write concurrency is 1.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use hubfed_api::propagatedversion::{PropagatedVersion, propagated_version_name};
use hubfed_controller::ControllerConfig;
use hubfed_core::conclude::PULL_REPORT_GRACE;
use hubfed_e2e::fault_proxy::{Fault, FaultResponse};
use hubfed_e2e::proxied::ProxiedMember2;
use hubfed_e2e::statuses::Statuses;
use hubfed_e2e::{
    MEMBERS, TIMEOUT, Wait, create_federated, dynamic_api, federated, get_value, member_mismatch,
    placement, propagated_ok, report, wait_for, wait_present,
};
use kube::api::Api;
use serde_json::json;

/// The objects whose writes to member2 hang, in the order they are created.
const HUNG: [&str; 2] = ["hung-first", "hung-second"];
/// The object whose write to member2 queues behind them.
const QUEUED: &str = "queued";
/// What a status shows for a write still running when it is written before the write ends.
const NOT_FINISHED: &str = "not finished yet";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_waits_for_a_write_still_running_and_is_written_once() -> anyhow::Result<()> {
    let config = ControllerConfig {
        member_write_concurrency: 1,
        ..Default::default()
    };
    let ProxiedMember2 {
        env: _env,
        hub,
        proxy,
        mut controller,
        ns,
        copies,
    } = ProxiedMember2::start(config, "hold").await?;

    // Every status the queued object and its PropagatedVersion get, from before they exist.
    let resource = federated("ConfigMap");
    let hub_api = dynamic_api(hub.clone(), &resource, Some(&ns));
    let statuses = Statuses::watch(hub_api.clone(), QUEUED).await?;
    let versions_api: Api<PropagatedVersion> = Api::namespaced(hub.clone(), &ns);
    let versions =
        Statuses::watch(versions_api, &propagated_version_name("ConfigMap", QUEUED)).await?;

    proxy.set_faults(
        HUNG.iter()
            .map(|name| Fault {
                path: format!("/api/v1/namespaces/{ns}/configmaps/{name}"),
                method: None,
                response: FaultResponse::Hang,
            })
            .collect(),
    );
    let spec =
        |name: &str| json!({"template": {"data": {"k": name}}, "placement": placement(&MEMBERS)});
    create_federated(&hub, "ConfigMap", Some(&ns), HUNG[0], spec(HUNG[0])).await?;
    controller
        .while_running(wait_for(
            "the first hung write under way",
            TIMEOUT,
            async || {
                Ok(match proxy.fault_hits() {
                    0 => Wait::Pending("member2 has not been asked yet".into()),
                    _ => Wait::Done(()),
                })
            },
        ))
        .await?;
    // Its copy in member1 shows the second object reconciled: its write to member2 is queued
    // behind the first's, and the queued object's behind both.
    create_federated(&hub, "ConfigMap", Some(&ns), HUNG[1], spec(HUNG[1])).await?;
    controller
        .while_running(wait_present(
            "the second hung object in member1",
            &copies[0].1,
            HUNG[1],
        ))
        .await?;
    let created = Instant::now();
    create_federated(&hub, "ConfigMap", Some(&ns), QUEUED, spec(QUEUED)).await?;

    // Once the second hung write has reached member2, member2 answers again: the queued write
    // runs when the second ends, and the hung objects' retries go through.
    controller
        .while_running(wait_for(
            "the second hung write under way",
            Duration::from_secs(90),
            async || {
                Ok(match proxy.fault_hits() {
                    0 | 1 => Wait::Pending(format!("{} hung so far", proxy.fault_hits())),
                    _ => Wait::Done(()),
                })
            },
        ))
        .await?;
    proxy.set_faults(Vec::new());

    let waited = controller
        .while_running(wait_for(
            "the queued object propagated",
            Duration::from_secs(150),
            async || {
                let object = get_value(&hub_api, QUEUED)
                    .await?
                    .context("the queued FederatedConfigMap disappeared")?;
                Ok(match propagated_ok(&object, &MEMBERS) {
                    Wait::Done(()) => Wait::Done(created.elapsed()),
                    Wait::Pending(problem) => Wait::Pending(problem),
                })
            },
        ))
        .await?;
    report(format_args!(
        "status hold: the queued object's status came {:.1}s after it was created",
        waited.as_secs_f64()
    ));
    // Without the wait past the pull grace there was nothing to hold: the test proved nothing.
    ensure!(
        waited > PULL_REPORT_GRACE,
        "the queued write ended {:.1}s after the object was created, within the {}s a pull \
         report is waited for: the hung writes did not hold it up",
        waited.as_secs_f64(),
        PULL_REPORT_GRACE.as_secs()
    );
    for (cluster, api) in &copies {
        let copy = get_value(api, QUEUED).await?;
        let data = json!(QUEUED);
        if let Some(problem) = member_mismatch(cluster, copy.as_ref(), &[("/data/k", Some(&data))])
        {
            anyhow::bail!("the queued object's copy: {problem}");
        }
    }

    // A moment for a second status, had one been coming, then: one status, one version.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seen = statuses.stop();
    ensure!(
        !seen
            .iter()
            .any(|status| status.to_string().contains(NOT_FINISHED)),
        "the queued object's status showed a write still running: {seen:#?}"
    );
    ensure!(
        seen.len() == 1,
        "the queued object's status was written {} times, not once: {seen:#?}",
        seen.len()
    );
    let seen = versions.stop();
    ensure!(
        seen.len() == 1,
        "the queued object's PropagatedVersion status was written {} times, not once: {seen:#?}",
        seen.len()
    );
    let clusters = seen[0]["clusterVersions"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .filter_map(|e| e["clusterName"].as_str())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    ensure!(
        clusters == MEMBERS,
        "the queued object's PropagatedVersion records {clusters:?}, not both members: {seen:#?}"
    );

    controller
        .while_running(wait_for(
            "the hung objects propagated once member2 answers",
            Duration::from_secs(120),
            async || {
                let mut problems = Vec::new();
                for name in HUNG {
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
    controller.stop().await??;
    Ok(())
}
