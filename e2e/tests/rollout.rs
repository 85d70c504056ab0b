//! Staged rollouts on three members that schedule pods: a bad revision (a CPU request no node
//! fits: its pods stay Unschedulable, never Ready) stops after the first stage, the other
//! clusters keep the previous revision and say so (`RolloutPending`), and the fixed template
//! goes stage by stage — order and soaks measured from watches on the members; an apply the
//! member refuses halts its revision only, not the fix; pause freezes everything, abort sends
//! the changed clusters back and the next revision rolls out although the abort was never
//! lifted; a placement change and a deletion go stage by stage
//! too. The strategies and the stored state are in `rollout_state.rs`, the fixture in
//! `hubfed_e2e::staged`.
//!
//! The tests run one at a time (they share the members' capacity and the strategy).
use std::collections::BTreeMap;
use std::time::Duration;

use hubfed_e2e::rollout::{RolloutState, follow_strategy};
use hubfed_e2e::staged::{
    CLUSTERS, SOAK, STRATEGY, WATCH_SLACK, Watches, change, control, create_deployment, everywhere,
    images, rollout_status, setup, spec, spec_on, staged_federation as fed, wait_images,
    wait_phase, wait_statuses,
};
use hubfed_e2e::{
    TIMEOUT, Wait, dynamic_api, federated, get_value, report, unique_name, unique_ns, wait_event,
    wait_for,
};
use kube::api::DeleteParams;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_revision_stops_after_the_first_stage_and_the_fix_goes_in_order() -> anyhow::Result<()>
{
    let (fed, _one) = fed().await?;
    let hub = fed.hub().await?;
    let namespace = unique_ns("rollout-bad");
    let name = unique_name("web");
    setup(fed, &namespace, &name).await?;

    // 100 CPUs: no node fits, the canary's pod stays Unschedulable.
    change(fed, &namespace, &name, spec(&name, "app:v2", "100")).await?;
    wait_event(
        &hub,
        &namespace,
        "RolloutHalted",
        &["stage canary", "member1", "not Ready"],
    )
    .await?;
    let found = images(fed, &namespace, &name).await?;
    assert_eq!(found["member1"].0, "app:v2", "{found:?}");
    assert_eq!(found["member2"], ("app:v1".to_owned(), 1), "{found:?}");
    assert_eq!(found["member3"], ("app:v1".to_owned(), 1), "{found:?}");
    // The clusters held back say so; they were reported Ok.
    wait_statuses(
        fed,
        &namespace,
        &name,
        "held clusters RolloutPending",
        |s| {
            ["member2", "member3"].iter().all(|c| {
                s[*c].0 == "RolloutPending" && s[*c].1.contains("halted (member1: not Ready")
            })
        },
    )
    .await?;
    let status = rollout_status(&namespace, &name).await;
    assert!(
        status.contains("(Halted)") && status.contains("halted: member1: not Ready"),
        "{status}"
    );

    // The fix goes stage by stage; the members' watches say when each got it and was Ready.
    let watches = Watches::start(fed, &namespace, &name).await?;
    change(fed, &namespace, &name, spec(&name, "app:v3", "10m")).await?;
    wait_images(
        fed,
        &namespace,
        &name,
        &everywhere("app:v3"),
        Duration::from_secs(120),
    )
    .await?;
    let order = watches.assert_in_order("app:v3").await?;
    report(format_args!("rollout of the fix: {order}"));
    wait_event(&hub, &namespace, "RolloutCompleted", &[]).await?;
    wait_statuses(fed, &namespace, &name, "every cluster Ok", |s| {
        s.values().all(|(status, _)| status.is_empty())
    })
    .await?;
    Ok(())
}

/// A revision the canary's API server refuses halts at once; the fix is not halted by that
/// failure (it was: the failure was read from the status the bad revision left).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_apply_halts_its_revision_but_not_the_fix() -> anyhow::Result<()> {
    let (fed, _one) = fed().await?;
    let hub = fed.hub().await?;
    let namespace = unique_ns("rollout-refused");
    let name = unique_name("web");
    setup(fed, &namespace, &name).await?;

    // A container name the member's API server refuses (not a DNS label).
    let mut refused = spec(&name, "app:v2", "10m");
    refused["template"]["spec"]["template"]["spec"]["containers"][0]["name"] = json!("Bad_Name");
    change(fed, &namespace, &name, refused).await?;
    wait_event(
        &hub,
        &namespace,
        "RolloutHalted",
        &["stage canary", "member1: apply failed: UpdateFailed"],
    )
    .await?;
    wait_statuses(
        fed,
        &namespace,
        &name,
        "member1 UpdateFailed, the rest pending",
        |s| {
            s["member1"].0 == "UpdateFailed"
                && s["member2"].0 == "RolloutPending"
                && s["member3"].0 == "RolloutPending"
        },
    )
    .await?;
    assert_eq!(
        images(fed, &namespace, &name).await?,
        everywhere("app:v1")
            .iter()
            .map(|(c, i, r)| ((*c).to_owned(), ((*i).to_owned(), *r)))
            .collect::<BTreeMap<_, _>>()
    );

    let watches = Watches::start(fed, &namespace, &name).await?;
    change(fed, &namespace, &name, spec(&name, "app:v3", "10m")).await?;
    wait_images(fed, &namespace, &name, &everywhere("app:v3"), TIMEOUT).await?;
    let order = watches.assert_in_order("app:v3").await?;
    report(format_args!(
        "rollout of the fix after a refused apply: {order}"
    ));
    wait_phase(&namespace, &name, "Completed").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_freezes_abort_goes_back_and_the_next_revision_rolls_out() -> anyhow::Result<()> {
    let (fed, _one) = fed().await?;
    let namespace = unique_ns("rollout-control");
    let name = unique_name("web");
    setup(fed, &namespace, &name).await?;

    // Paused: a new revision reaches no cluster at all, well past a soak.
    let watches = Watches::start(fed, &namespace, &name).await?;
    let out = control(&namespace, &name, "pause").await;
    assert!(out.contains("rollout paused"), "{out}");
    change(fed, &namespace, &name, spec(&name, "app:v2", "10m")).await?;
    wait_statuses(
        fed,
        &namespace,
        &name,
        "every cluster pending: paused",
        |s| {
            s.values()
                .all(|(status, message)| status == "RolloutPending" && message.contains("paused"))
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        watches.holders("app:v2"),
        Vec::<String>::new(),
        "given while paused"
    );
    control(&namespace, &name, "resume").await;
    wait_images(fed, &namespace, &name, &everywhere("app:v2"), TIMEOUT).await?;
    let order = watches.assert_in_order("app:v2").await?;
    report(format_args!("rollout after resume: {order}"));
    wait_phase(&namespace, &name, "Completed").await?;

    // A bad revision reaches the canary; abort sends it back to v2, the stable revision.
    change(fed, &namespace, &name, spec(&name, "app:v3", "100")).await?;
    wait_for("the canary on v3", TIMEOUT, async || {
        let found = images(fed, &namespace, &name).await?;
        Ok(if found["member1"].0 == "app:v3" {
            Wait::Done(())
        } else {
            Wait::Pending(format!("{found:?}"))
        })
    })
    .await?;
    let out = control(&namespace, &name, "abort").await;
    assert!(out.contains("rollout aborted"), "{out}");
    // The abort names the revision it belongs to (v3's).
    let api = dynamic_api(fed.hub().await?, &federated("Deployment"), Some(&namespace));
    let object = get_value(&api, &name).await?.unwrap_or_default();
    let aborted = object["metadata"]["annotations"]["hubfed.io/rollout-aborted-revision"].clone();
    assert!(
        rollout_status(&namespace, &name).await.contains(&format!(
            "revision {} (",
            aborted.as_str().unwrap_or("<none>")
        )),
        "{aborted}"
    );
    wait_images(fed, &namespace, &name, &everywhere("app:v2"), TIMEOUT).await?;
    assert!(
        rollout_status(&namespace, &name)
            .await
            .contains("(Aborted)")
    );

    // The fix, with the abort still asked for: a fresh rollout, stage by stage; the abort
    // that belonged to v3 is removed.
    let watches = Watches::start(fed, &namespace, &name).await?;
    change(fed, &namespace, &name, spec(&name, "app:v4", "10m")).await?;
    wait_images(fed, &namespace, &name, &everywhere("app:v4"), TIMEOUT).await?;
    let order = watches.assert_in_order("app:v4").await?;
    report(format_args!("rollout of the fix after an abort: {order}"));
    wait_phase(&namespace, &name, "Completed").await?;
    let object = get_value(&api, &name).await?.unwrap_or_default();
    let annotations = &object["metadata"]["annotations"];
    assert!(
        annotations["hubfed.io/rollout"].is_null()
            && annotations["hubfed.io/rollout-aborted-revision"].is_null(),
        "{annotations}"
    );
    Ok(())
}

/// A placement change is rolled out stage by stage like a template change: the canary loses
/// its copy first, the member of the last stage gets its copy only after the stages before
/// were done and soaked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placement_change_goes_stage_by_stage() -> anyhow::Result<()> {
    let (fed, _one) = fed().await?;
    let namespace = unique_ns("rollout-placement");
    let name = unique_name("web");
    let first = spec_on(&name, "app:v1", "10m", &["member1", "member2"]);
    let api = create_deployment(fed, &namespace, &name, first).await?;
    follow_strategy(&api, &name, STRATEGY).await?;
    let two = [("member1", "app:v1", 1), ("member2", "app:v1", 1)];
    wait_images(fed, &namespace, &name, &two, TIMEOUT).await?;

    // From member1 + member2 to member2 + member3.
    let watches = Watches::start(fed, &namespace, &name).await?;
    change(
        fed,
        &namespace,
        &name,
        spec_on(&name, "app:v1", "10m", &["member2", "member3"]),
    )
    .await?;
    let moved = [("member2", "app:v1", 1), ("member3", "app:v1", 1)];
    wait_images(fed, &namespace, &name, &moved, TIMEOUT).await?;
    let removed = watches.deleted("member1");
    let (added, _) = watches.times("member3", "app:v1");
    let (Some(removed), Some(added)) = (removed, added) else {
        anyhow::bail!("member1 deleted at {removed:?}, member3 created at {added:?}");
    };
    // canary (member1 removed), soak, second (member2, unchanged), soak, rest (member3).
    anyhow::ensure!(
        added + WATCH_SLACK >= removed + SOAK * 2,
        "member3 got its copy {:?} after member1 lost its copy",
        added.saturating_duration_since(removed)
    );
    report(format_args!(
        "placement change: member1 removed at {:.2}s, member3 created at {:.2}s",
        removed.duration_since(watches.started).as_secs_f64(),
        added.duration_since(watches.started).as_secs_f64()
    ));
    wait_phase(&namespace, &name, "Completed").await?;
    Ok(())
}

/// Deleting the federated object deletes its copies stage by stage, then the object and its
/// rollout state go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_goes_stage_by_stage() -> anyhow::Result<()> {
    let (fed, _one) = fed().await?;
    let namespace = unique_ns("rollout-delete");
    let name = unique_name("web");
    setup(fed, &namespace, &name).await?;
    let hub = fed.hub().await?;
    let (maps, state_name) =
        RolloutState::of(&hub, "FederatedDeployment", Some(&namespace), &name).into_parts();
    anyhow::ensure!(
        maps.get_opt(&state_name).await?.is_some(),
        "no state stored"
    );

    let watches = Watches::start(fed, &namespace, &name).await?;
    let api = dynamic_api(hub.clone(), &federated("Deployment"), Some(&namespace));
    api.delete(&name, &DeleteParams::default()).await?;
    wait_for("the federated object gone", TIMEOUT, async || {
        Ok(match api.get_opt(&name).await? {
            None => Wait::Done(()),
            Some(_) => Wait::Pending(format!("{:?}", watches.timeline)),
        })
    })
    .await?;
    let mut line = Vec::new();
    for pair in CLUSTERS.windows(2) {
        let (Some(before), Some(after)) = (watches.deleted(pair[0]), watches.deleted(pair[1]))
        else {
            anyhow::bail!("deletions: {:?}", watches.timeline);
        };
        anyhow::ensure!(
            after + WATCH_SLACK >= before + SOAK,
            "{} deleted {:?} after {}",
            pair[1],
            after.saturating_duration_since(before),
            pair[0]
        );
        line.push(format!(
            "{} at {:.2}s",
            pair[1],
            after.duration_since(watches.started).as_secs_f64()
        ));
    }
    report(format_args!(
        "staged deletion: member1 at {:.2}s, {}",
        watches
            .deleted("member1")
            .map_or(0.0, |t| t.duration_since(watches.started).as_secs_f64()),
        line.join(", ")
    ));
    anyhow::ensure!(maps.get_opt(&state_name).await?.is_none(), "state left");
    Ok(())
}
