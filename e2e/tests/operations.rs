//! Operating hubfed: two `hubfed-controller` processes with leader election against a real
//! hub, failover after `kill -9`, and the `/metrics` endpoint.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use hubfed_api::kubefedconfig::{KubeFedConfig, KubeFedConfigSpec};
use hubfed_e2e::controller::{
    ControllerOptions, ControllerProcess, print_logs, sample, token_kubeconfig,
};
use hubfed_e2e::fault_proxy::FaultProxy;
use hubfed_e2e::{
    KUBEFED_NAMESPACE, PrivateFederation, TIMEOUT, Wait, create_federated, create_hub_namespace,
    leader_election_spec, placement, report, service_account_token, wait_clusters_ready, wait_for,
};
use hubfed_testenv::TestEnv;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

/// The test's lease duration: short, so failover is quick to observe, with 2 s of slack for
/// renewals on a loaded machine.
const LEASE_SECONDS: i32 = 6;

/// Short leases so failover is quick to observe.
fn short_leases() -> KubeFedConfigSpec {
    leader_election_spec(LEASE_SECONDS as u64, LEASE_SECONDS as u64 - 2)
}

/// Waits until `replica` reports `hubfed_leader` = `wanted`.
async fn wait_leader_flag(
    what: &str,
    replica: &ControllerProcess,
    wanted: f64,
    limit: Duration,
) -> anyhow::Result<()> {
    wait_for(what, limit, async || {
        Ok(match replica.leader_flag().await {
            Some(flag) if flag == wanted => Wait::Done(()),
            other => Wait::Pending(format!("hubfed_leader {other:?}")),
        })
    })
    .await
}

#[tokio::test]
async fn one_leader_fails_over_and_exposes_metrics() -> anyhow::Result<()> {
    let env = PrivateFederation::new()
        .config(short_leases())
        .start()
        .await?;
    let outcome = failover(&env).await;
    if outcome.is_err() {
        print_logs(&env, &["replica-a", "replica-b"]);
    }
    outcome
}

async fn failover(env: &TestEnv) -> anyhow::Result<()> {
    let hub = env.hub().client().await?;

    let mut controllers = vec![
        ControllerProcess::start(env, &ControllerOptions::replica("replica-a"))?,
        ControllerProcess::start(env, &ControllerOptions::replica("replica-b"))?,
    ];
    wait_clusters_ready(&hub, &["member1", "member2"]).await?;

    // Exactly one leads, and the Lease names it.
    let leases: Api<Lease> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let leader = wait_for(
        "exactly one replica leading",
        Duration::from_secs(180),
        async || {
            let mut flags = Vec::new();
            for controller in &controllers {
                flags.push(controller.leader_flag().await);
            }
            let leading: Vec<usize> = (0..flags.len())
                .filter(|i| flags[*i] == Some(1.0))
                .collect();
            let holder = leases
                .get_opt(hubfed_controller::LEASE_NAME)
                .await?
                .and_then(|l| l.spec.and_then(|s| s.holder_identity));
            Ok(
                match (leading.as_slice(), flags.iter().all(Option::is_some)) {
                    ([one], true) => Wait::Done((*one, holder)),
                    _ => Wait::Pending(format!(
                        "hubfed_leader per replica: {flags:?}; lease holder {holder:?}"
                    )),
                },
            )
        },
    )
    .await?;
    let (leader_index, holder) = leader;
    assert_eq!(
        holder.as_deref(),
        Some(controllers[leader_index].identity())
    );
    report(format_args!(
        "{} leads",
        controllers[leader_index].identity()
    ));

    // Propagation works under the leader.
    let ns = "ops-failover";
    create_hub_namespace(&hub, ns).await?;
    let spec = json!({"template": {}, "placement": placement(&["member1", "member2"])});
    create_federated(&hub, "Namespace", Some(ns), ns, spec).await?;
    let spec = json!({"template": {"data": {"round": "1"}}, "placement": placement(&["member1", "member2"])});
    let fcm = create_federated(&hub, "ConfigMap", Some(ns), "settings", spec).await?;
    let members = [
        env.cluster("member1").unwrap(),
        env.cluster("member2").unwrap(),
    ];
    let wait_round = |round: &'static str| {
        let members = members
            .iter()
            .map(|c| c.name().to_string())
            .collect::<Vec<_>>();
        async move {
            wait_for(
                &format!("round {round} in both members"),
                Duration::from_secs(120),
                || {
                    let members = members.clone();
                    async move {
                        let mut pending = Vec::new();
                        for m in &members {
                            let client = env.cluster(m).expect("member").client().await?;
                            let cms: Api<ConfigMap> = Api::namespaced(client, ns);
                            let round_now = cms
                                .get_opt("settings")
                                .await?
                                .and_then(|c| c.data)
                                .and_then(|d| d.get("round").cloned());
                            if round_now.as_deref() != Some(round) {
                                pending.push(format!("{m}: round {round_now:?}"));
                            }
                        }
                        Ok(Wait::all_or_pending(pending))
                    }
                },
            )
            .await
        }
    };
    wait_round("1").await?;
    // A template change, then wait until both members hold it.
    let next_round = |round: &'static str| {
        let fcm = fcm.clone();
        async move {
            fcm.patch(
                "settings",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"template": {"data": {"round": round}}}})),
            )
            .await?;
            wait_round(round).await
        }
    };

    // The standby wrote nothing to the members; the leader did.
    let standby_index = 1 - leader_index;
    let standby_metrics = controllers[standby_index]
        .metrics()
        .await
        .unwrap_or_default();
    assert_eq!(
        sample(&standby_metrics, "hubfed_member_operations_total", &[]).unwrap_or(0.0),
        0.0,
        "the standby made member requests"
    );
    // The member objects can be in place a moment before the reconcile that wrote them ends
    // and records its metrics: wait for the series rather than read them once.
    let leader = &controllers[leader_index];
    let leader_metrics = wait_for(
        "the leader's metrics of the propagation",
        Duration::from_secs(30),
        async || {
            let metrics = leader.metrics().await.unwrap_or_default();
            let missing: Vec<String> = [
                (
                    "hubfed_member_operations_total",
                    &["result=\"success\""][..],
                ),
                (
                    "hubfed_propagation_latency_seconds_count",
                    &["type=\"federatedconfigmap\""][..],
                ),
                (
                    "controller_runtime_reconcile_total",
                    &["controller=\"federatedconfigmap\""][..],
                ),
                ("dispatch_operation_duration_seconds_count", &[][..]),
                (
                    "kubefedcluster_state",
                    &["state=\"ready\"", "cluster=\"member1\""][..],
                ),
            ]
            .into_iter()
            .filter(|(name, parts)| sample(&metrics, name, parts).unwrap_or(0.0) <= 0.0)
            .map(|(name, parts)| format!("{name}{parts:?}"))
            .collect();
            Ok(if missing.is_empty() {
                Wait::Done(metrics)
            } else {
                Wait::Pending(format!("not above 0: {}", missing.join(", ")))
            })
        },
    )
    .await?;
    promtool_check_metrics(&leader_metrics)?;
    // The allocator's figures are the process's heap (jemalloc is the global allocator: a
    // controller with a member and objects holds megabytes), live objects within the
    // allocator's resident pages.
    let heap = |state: &str| {
        sample(
            &leader_metrics,
            "hubfed_heap_bytes",
            &[&format!("state=\"{state}\"")],
        )
        .unwrap_or(0.0)
    };
    let (allocated, resident) = (heap("allocated"), heap("resident"));
    anyhow::ensure!(
        1048576.0 < allocated && allocated <= resident,
        "hubfed_heap_bytes: allocated {allocated}, resident {resident}"
    );

    // kill -9 the leader: the standby takes over and propagation continues.
    let killed = std::time::Instant::now();
    let leader_process = controllers.remove(leader_index);
    leader_process.kill().await?;
    let survivor = &controllers[0];
    wait_leader_flag(
        "the standby to take over",
        survivor,
        1.0,
        Duration::from_secs(180),
    )
    .await?;
    report(format_args!(
        "{} took over {:.1}s after kill -9 of the leader",
        survivor.identity(),
        killed.elapsed().as_secs_f64()
    ));
    next_round("2").await?;

    // One field manager wrote the member objects: no conflicting writers.
    for member in members {
        let cms: Api<ConfigMap> = Api::namespaced(member.client().await?, ns);
        let cm = cms.get("settings").await?;
        let managers: Vec<String> = cm
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| m.manager)
            .collect();
        assert_eq!(
            managers,
            ["hubfed"],
            "{}: field managers {managers:?}",
            member.name()
        );
    }

    // The lease is taken away (another holder, as after a renewal that came too late): the
    // leader stops its controllers and stays up as a standby, then leads again once the
    // other holder's lease runs out.
    let taken = std::time::Instant::now();
    leases
        .patch(
            hubfed_controller::LEASE_NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "holderIdentity": "intruder",
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                    k8s_openapi::jiff::Timestamp::now()
                ),
            }})),
        )
        .await?;
    let survivor = &controllers[0];
    wait_leader_flag(
        "the replica to step down",
        survivor,
        0.0,
        Duration::from_secs(60),
    )
    .await?;
    anyhow::ensure!(
        survivor.is_alive(),
        "{} exited after losing the lease instead of standing by",
        survivor.identity()
    );
    wait_leader_flag(
        "the replica to lead again",
        survivor,
        1.0,
        Duration::from_secs(60),
    )
    .await?;
    report(format_args!(
        "{} stepped down when its lease was taken and led again {:.1}s later",
        survivor.identity(),
        taken.elapsed().as_secs_f64()
    ));
    next_round("3").await?;

    // A KubeFedConfig change takes effect without a restart of the process: a longer lease
    // shows in the Lease the (restarted) leader writes, and propagation goes on.
    let longer = LEASE_SECONDS + 3;
    Api::<KubeFedConfig>::namespaced(env.hub().client().await?, KUBEFED_NAMESPACE)
        .patch(
            hubfed_api::names::KUBEFED_CONFIG_NAME,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"leaderElect": {"leaseDuration": format!("{longer}s")}}}),
            ),
        )
        .await?;
    wait_for(
        "the Lease to carry the new lease duration",
        Duration::from_secs(60),
        || {
            let leases = leases.clone();
            async move {
                let lease = leases.get_opt(hubfed_controller::LEASE_NAME).await?;
                let spec = lease.and_then(|l| l.spec);
                let duration = spec.as_ref().and_then(|s| s.lease_duration_seconds);
                let holder = spec.and_then(|s| s.holder_identity);
                Ok(match (duration, holder.as_deref()) {
                    (Some(d), Some("replica-a" | "replica-b")) if d == longer => Wait::Done(()),
                    other => Wait::Pending(format!("leaseDurationSeconds, holder: {other:?}")),
                })
            }
        },
    )
    .await?;
    anyhow::ensure!(
        controllers[0].is_alive(),
        "{} exited on a KubeFedConfig change",
        controllers[0].identity()
    );
    next_round("4").await?;
    report("a KubeFedConfig change was applied without restarting the process");

    drop(controllers);
    drop(leader_process);
    Ok(())
}

/// `promtool check metrics` on the exposition (Debian's `prometheus` package ships promtool).
fn promtool_check_metrics(metrics: &str) -> anyhow::Result<()> {
    let promtool = std::env::var("HUBFED_PROMTOOL").unwrap_or_else(|_| "promtool".into());
    let mut child = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot run {promtool} (install Debian's prometheus package; .ci/run does): {e}"
            )
        })?;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(metrics.as_bytes())?;
    let out = child.wait_with_output()?;
    anyhow::ensure!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A leader cut off from the hub (every packet between them dropped, the standby unaffected)
/// cannot renew its Lease, and its lease manager waits on a renewal that is never answered.
/// It must stop leading before the Lease can expire and the standby takes over: never two
/// leaders. (Before, it went on "leading" for as long as the cut lasted.)
#[tokio::test]
async fn a_leader_cut_off_from_the_hub_steps_down_before_the_standby_leads() -> anyhow::Result<()> {
    let env = PrivateFederation::new()
        .members(1)
        .without_controller_manager()
        .config(short_leases())
        .unjoined()
        .start()
        .await?;
    let hub = env.hub().client().await?;

    // replica-a reaches the hub through a proxy that can cut it off; replica-b directly.
    let proxy = FaultProxy::start(&env.hub().server_url(), env.hub().ca_pem(), None).await?;
    let token = service_account_token(&hub, "replica-a", "cluster-admin").await?;
    let kubeconfig = env.dir().join("replica-a.kubeconfig");
    token_kubeconfig(
        &kubeconfig,
        &proxy.url(),
        proxy.ca_pem(),
        "replica-a",
        &token,
    )?;
    let a = ControllerProcess::start(
        &env,
        &ControllerOptions {
            kubeconfig: Some(kubeconfig),
            ..ControllerOptions::replica("replica-a")
        },
    )?;
    wait_leader_flag("replica-a to lead", &a, 1.0, TIMEOUT).await?;
    let b = ControllerProcess::start(&env, &ControllerOptions::replica("replica-b"))?;
    wait_leader_flag("replica-b to stand by", &b, 0.0, TIMEOUT).await?;

    proxy.partition();
    let cut = std::time::Instant::now();
    let (mut a_stepped_down, mut b_led) = (None, None);
    while b_led.is_none() && cut.elapsed() < Duration::from_secs(60) {
        if a_stepped_down.is_none()
            && std::fs::read_to_string(a.log_file())?.contains("stepping down")
        {
            a_stepped_down = Some(cut.elapsed());
        }
        if b.leader_flag().await == Some(1.0) {
            b_led = Some(cut.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.heal();
    report(format_args!(
        "hub cut off from the leader: it stepped down after {:?}, the standby led after {:?} (Lease {LEASE_SECONDS}s)",
        a_stepped_down, b_led
    ));
    let b_led = b_led.context("the standby never took over")?;
    let a_stepped_down = a_stepped_down.with_context(|| {
        format!(
            "replica-a never stepped down although replica-b leads since {b_led:?}:\n{}",
            a.log_tail(30)
        )
    })?;
    anyhow::ensure!(
        a_stepped_down < b_led,
        "two leaders: replica-b led {b_led:?} after the cut, replica-a stepped down only after {a_stepped_down:?}"
    );
    Ok(())
}
