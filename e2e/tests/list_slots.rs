//! Lists of members' objects take turns (`--member-list-concurrency`), and a member whose lists
//! hang does not hold the others' up: a list that gets nothing for the stall time gives its
//! slot back and goes on without one.
//!
//! member2 is reached through a fault proxy. The controller runs with one list slot and a 1 s
//! stall. Once the federation converged, it is stopped, the proxy holds member2's lists
//! unanswered (member2 stays healthy) and a new controller starts: member2's lists hang, each
//! holding the one slot in turn, and member1's lists — queued behind them — still all run, and
//! a template change reaches member1 — lists were seen waiting for the slot meanwhile. Once
//! the proxy lets them through, member2's lists complete and it converges; no slot is left
//! held. Every list member2 saw asked for pages of `--member-list-page-size` objects.

use anyhow::ensure;
use hubfed_controller::ControllerConfig;
use hubfed_e2e::controller::ControllerTask;
use hubfed_e2e::member_lists::{LISTS, by_type, hold_lists, slots, stalled_lists, waiting};
use hubfed_e2e::proxied::{ProxiedMember2, Versioned};
use hubfed_e2e::{TIMEOUT, Wait, copy_problems, wait_for};
use serde_json::json;

const NAME: &str = "turns";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_take_turns_and_a_hung_member_gives_its_turn_back() -> anyhow::Result<()> {
    let config = ControllerConfig {
        member_list_concurrency: 1,
        member_list_stall: std::time::Duration::from_secs(1),
        member_list_page_size: 7,
        ..ControllerConfig::default()
    };
    let federation = ProxiedMember2::start(config.clone(), "turns").await?;
    let object = Versioned::create(&federation, NAME, "1").await?;
    let ProxiedMember2 {
        env: _env,
        hub,
        proxy,
        mut controller,
        ..
    } = federation;
    controller.while_running(object.converged("1")).await?;
    ensure!(
        slots("limit") == 1,
        "the slots' limit reads {}, expected 1",
        slots("limit")
    );
    controller.stop().await??;
    let lists_before = by_type("hubfed_member_cache_lists_total", "member1");
    ensure!(
        lists_before.len() > 1,
        "member1's lists were counted for {lists_before:?}: expected several federated types"
    );
    let stalls_before: u64 = by_type("hubfed_member_list_stalls_total", "member2")
        .values()
        .sum();

    // member2's lists hang; a new controller lists every type in both members, one at a time.
    proxy.set_faults(hold_lists());
    let mut controller = ControllerTask::spawn("the restarted controller", hub.clone(), config);
    object.change("2").await?;
    let mut most_waiting = 0;
    let mut most_stalled = 0;
    controller
        .while_running(wait_for(
            "every type listed in member1 and v=2 there",
            TIMEOUT,
            async || {
                most_waiting = most_waiting.max(waiting());
                most_stalled = most_stalled.max(stalled_lists("member2"));
                let lists = by_type("hubfed_member_cache_lists_total", "member1");
                let mut problems: Vec<String> = lists_before
                    .iter()
                    .filter(|(kind, before)| lists.get(*kind) <= Some(before))
                    .map(|(kind, _)| format!("{kind} not listed again in member1"))
                    .collect();
                problems.extend(copy_problems(NAME, &object.holding(1, &json!("2"))).await?);
                Ok(Wait::all_or_pending(problems))
            },
        ))
        .await?;
    let stalls: u64 = by_type("hubfed_member_list_stalls_total", "member2")
        .values()
        .sum();
    ensure!(
        most_waiting > 0,
        "no list was seen waiting for the one slot while member2's lists held it in turn"
    );
    ensure!(
        most_stalled > 0,
        "member2's held lists were never counted in hubfed_member_lists_stalled"
    );
    ensure!(
        stalls > stalls_before,
        "no list of member2 gave its slot back ({stalls} stalls): member2's lists did not hang, \
         so this test showed nothing"
    );

    // Let through: member2's lists complete, it converges, and every slot is back.
    proxy.set_faults(Vec::new());
    controller.while_running(object.converged("2")).await?;
    controller
        .while_running(wait_for(
            "no list slot held or waited for, no list of member2 counted stalled",
            TIMEOUT,
            async || {
                Ok(match (slots("used"), waiting(), stalled_lists("member2")) {
                    (0, 0, 0) => Wait::Done(()),
                    (used, waiting, stalled) => Wait::Pending(format!(
                        "{used} list slots used, {waiting} lists waiting, {stalled} of \
                         member2's lists counted stalled"
                    )),
                })
            },
        ))
        .await?;
    controller.stop().await??;

    // Every list asked for pages of `--member-list-page-size` objects (a request's shape: this
    // API server keeps a watch cache, which answers a list from it whole).
    for path in LISTS {
        let lists: Vec<String> = proxy
            .gets(path)
            .into_iter()
            .filter(|query| !query.split('&').any(|pair| pair == "watch=true"))
            .collect();
        ensure!(!lists.is_empty(), "member2 saw no list of {path}");
        let unpaged: Vec<&String> = lists
            .iter()
            .filter(|query| !query.split('&').any(|pair| pair == "limit=7"))
            .collect();
        ensure!(
            unpaged.is_empty(),
            "lists of {path} in member2 not in pages of 7 objects: {unpaged:?}"
        );
    }
    Ok(())
}
