//! Shutdown (issue 18): SIGTERM stops a `hubfed-controller` process promptly, with exit code
//! 0 and the final line `hubfed-controller stopped`, whether the hub answers or not.
//!
//! - hub healthy: the leader exits within [`HEALTHY_EXIT_LIMIT`], releases the Lease, and the
//!   standby takes over without waiting for the Lease to expire;
//! - hub API server stopped (SIGSTOP: requests hang, as with a frozen machine) and
//! - hub partitioned (iptables drops every packet to and from its port): the leader exits
//!   within [`UNREACHABLE_EXIT_LIMIT`] all the same;
//! - a second SIGTERM, while a shutdown waits on the frozen hub, exits at once (143).
//!
//! Each case has its own clusters (the hub is frozen or cut off) and controller processes,
//! started through `hubfed_e2e::controller`: they cannot outlive the test.
//! Their logs are in the environment's `logs/controller-<identity>.log`, printed on failure;
//! `HUBFED_E2E_CONTROLLER_LOG` sets their `RUST_LOG`.

use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use hubfed_e2e::controller::{ControllerOptions, ControllerProcess, print_logs};
use hubfed_e2e::{
    KUBEFED_NAMESPACE, PrivateFederation, Wait, dynamic_api, federated, federated_object, http_get,
    leader_election_spec, placement, report, wait_clusters_ready, wait_for,
};
use hubfed_testenv::{Cluster, TestEnv};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// SIGTERM to exit with the hub healthy.
const HEALTHY_EXIT_LIMIT: Duration = Duration::from_secs(3);
/// SIGTERM to exit with the hub unreachable: the controller's documented shutdown deadline
/// (10 s, docs/operations.md "Shutdown") plus slack for a loaded machine.
const UNREACHABLE_EXIT_LIMIT: Duration = Duration::from_secs(15);
/// The controller's last log line on the way out.
const FINAL_LINE: &str = "hubfed-controller stopped";
/// Lease duration and renew deadline of the test's KubeFedConfig: a leader renews when 10 s
/// are left, so a live leader's Lease is valid for 10 s or more at any time — as long as a
/// standby that waited for it to expire would need.
const LEASE_SECONDS: u64 = 30;
const RENEW_DEADLINE_SECONDS: u64 = 20;
/// A standby that saw the Lease released must lead within this (it polls every second).
const TAKEOVER_LIMIT: Duration = Duration::from_secs(8);
/// Federated ConfigMaps created just before the shutdown (or the outage): work in flight.
const BURST: usize = 20;
/// The member cluster of every case.
const MEMBER: &str = "member1";

/// A hub and one member, the control plane installed with a short leader election retry
/// period, the member joined.
async fn set_up() -> anyhow::Result<TestEnv> {
    PrivateFederation::new()
        .members(1)
        .without_controller_manager()
        .config(leader_election_spec(LEASE_SECONDS, RENEW_DEADLINE_SECONDS))
        .join(&[MEMBER])
        .start()
        .await
}

fn start_controller(env: &TestEnv, identity: &str) -> anyhow::Result<ControllerProcess> {
    ControllerProcess::start(env, &ControllerOptions::replica(identity))
}

/// How a SIGTERM ended a controller.
struct Stopped {
    /// From the signal to the exit.
    took: Duration,
    status: ExitStatus,
    last_line: String,
    log: String,
}

/// Sends SIGTERM and waits for the process to exit, for at most `wait`.
async fn terminate(controller: &ControllerProcess, wait: Duration) -> anyhow::Result<Stopped> {
    let sent = Instant::now();
    controller.signal("TERM")?;
    exited(controller, sent, wait).await
}

/// Waits for the process to exit, until `wait` after `since` (when the signal was sent).
async fn exited(
    controller: &ControllerProcess,
    since: Instant,
    wait: Duration,
) -> anyhow::Result<Stopped> {
    let status = controller.wait_exit(since, wait).await?;
    let took = since.elapsed();
    let log = std::fs::read_to_string(controller.log_file())?;
    let last_line = log
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or_default()
        .to_owned();
    Ok(Stopped {
        took,
        status,
        last_line,
        log,
    })
}

impl Stopped {
    /// Exit code 0, the final line last, within `limit`.
    fn ensure_clean(&self, who: &str, limit: Duration) -> anyhow::Result<()> {
        ensure!(
            self.status.code() == Some(0),
            "{who} exited with {} instead of 0; last line: {}",
            self.status,
            self.last_line
        );
        ensure!(
            self.last_line.contains(FINAL_LINE),
            "{who}: the last log line is not {FINAL_LINE:?} but: {}",
            self.last_line
        );
        ensure!(
            self.log.contains("shutting down"),
            "{who} did not log the signal"
        );
        ensure!(
            self.took <= limit,
            "{who} took {:.1}s to exit after SIGTERM, more than {}s",
            self.took.as_secs_f64(),
            limit.as_secs()
        );
        Ok(())
    }
}

async fn lease_holder(leases: &Api<Lease>) -> anyhow::Result<Option<String>> {
    Ok(leases
        .get_opt(hubfed_controller::LEASE_NAME)
        .await?
        .and_then(|lease| lease.spec)
        .and_then(|spec| spec.holder_identity)
        .filter(|holder| !holder.is_empty()))
}

/// Waits until `controller` holds the Lease and reports itself leader.
async fn wait_leading(
    leases: &Api<Lease>,
    controller: &ControllerProcess,
    limit: Duration,
) -> anyhow::Result<()> {
    wait_for(
        &format!("{} to lead", controller.identity()),
        limit,
        async || {
            let holder = lease_holder(leases).await?;
            let flag = controller.leader_flag().await;
            Ok(
                if holder.as_deref() == Some(controller.identity()) && flag == Some(1.0) {
                    Wait::Done(())
                } else {
                    Wait::Pending(format!("Lease holder {holder:?}, hubfed_leader {flag:?}"))
                },
            )
        },
    )
    .await
}

/// A federated namespace `namespace` placed on the member, and proof the leader works: the
/// namespace reaches the member.
async fn propagate_namespace(env: &TestEnv, hub: &Client, namespace: &str) -> anyhow::Result<()> {
    Api::<Namespace>::all(hub.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": namespace}}))?,
        )
        .await?;
    let resource = federated("Namespace");
    dynamic_api(hub.clone(), &resource, Some(namespace))
        .create(
            &PostParams::default(),
            &federated_object(
                &resource,
                Some(namespace),
                namespace,
                json!({"placement": placement(&[MEMBER])}),
            ),
        )
        .await?;
    let member = env.cluster(MEMBER).context("no member1")?.client().await?;
    let namespaces: Api<Namespace> = Api::all(member);
    wait_for(
        &format!("namespace {namespace} in {MEMBER}"),
        Duration::from_secs(120),
        async || {
            Ok(match namespaces.get_opt(namespace).await? {
                Some(_) => Wait::Done(()),
                None => Wait::Pending("absent".to_owned()),
            })
        },
    )
    .await
}

/// [`BURST`] federated ConfigMaps in `namespace`, without waiting for them: reconciles (member
/// writes, status writes) in flight when the shutdown or the outage comes.
async fn burst(hub: &Client, namespace: &str) -> anyhow::Result<()> {
    let resource = federated("ConfigMap");
    let api = dynamic_api(hub.clone(), &resource, Some(namespace));
    for n in 0..BURST {
        api.create(
            &PostParams::default(),
            &federated_object(
                &resource,
                Some(namespace),
                &format!("burst-{n}"),
                json!({"template": {"data": {"n": n.to_string()}}, "placement": placement(&[MEMBER])}),
            ),
        )
        .await?;
    }
    Ok(())
}

/// Changes the first federated ConfigMap of the burst and waits until the member holds the
/// change.
async fn propagate_change(env: &TestEnv, hub: &Client, value: &str) -> anyhow::Result<()> {
    let resource = federated("ConfigMap");
    dynamic_api(hub.clone(), &resource, Some("shutdown"))
        .patch(
            "burst-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"data": {"n": value}}}})),
        )
        .await?;
    let member = env.cluster(MEMBER).context("no member1")?.client().await?;
    let config_maps: Api<ConfigMap> = Api::namespaced(member, "shutdown");
    wait_for(
        &format!("burst-0 = {value} in {MEMBER}"),
        Duration::from_secs(60),
        async || {
            let seen = config_maps
                .get_opt("burst-0")
                .await?
                .and_then(|cm| cm.data)
                .and_then(|data| data.get("n").cloned());
            Ok(if seen.as_deref() == Some(value) {
                Wait::Done(())
            } else {
                Wait::Pending(format!("n = {seen:?}"))
            })
        },
    )
    .await
}

/// A leader, running and busy: it holds the Lease, the member is Ready, a namespace has
/// propagated; then a burst of work.
async fn busy_leader(env: &TestEnv, identity: &str) -> anyhow::Result<ControllerProcess> {
    let hub = env.hub().client().await?;
    let leases: Api<Lease> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let leader = start_controller(env, identity)?;
    wait_leading(&leases, &leader, Duration::from_secs(120)).await?;
    wait_clusters_ready(&hub, &[MEMBER]).await?;
    propagate_namespace(env, &hub, "shutdown").await?;
    Ok(leader)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_hub_healthy_the_leader_stops_at_once_and_hands_over() -> anyhow::Result<()> {
    let env = set_up().await?;
    let outcome = healthy(&env).await;
    if outcome.is_err() {
        print_logs(&env, &["replica-a", "replica-b"]);
    }
    outcome
}

async fn healthy(env: &TestEnv) -> anyhow::Result<()> {
    let hub = env.hub().client().await?;
    let leases: Api<Lease> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let leader = busy_leader(env, "replica-a").await?;
    let standby = start_controller(env, "replica-b")?;
    // The standby is up (ready after 2 s) and has seen the Lease held by the leader.
    wait_for(
        "replica-b to stand by",
        Duration::from_secs(60),
        async || {
            let ready = http_get(standby.admin_port(), "/readyz")
                .await
                .map(|(s, _)| s);
            let flag = standby.leader_flag().await;
            Ok(match (ready, flag) {
                (Some(200), Some(0.0)) => Wait::Done(()),
                other => Wait::Pending(format!("/readyz, hubfed_leader: {other:?}")),
            })
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    burst(&hub, "shutdown").await?;
    let stopped = terminate(&leader, HEALTHY_EXIT_LIMIT + UNREACHABLE_EXIT_LIMIT).await?;
    let exited = Instant::now();
    report(format_args!(
        "hub healthy: the leader exited {:.2}s after SIGTERM ({})",
        stopped.took.as_secs_f64(),
        stopped.status
    ));
    stopped.ensure_clean("the leader", HEALTHY_EXIT_LIMIT)?;
    ensure!(
        stopped.log.contains("released the leader lease"),
        "the leader did not log the release of the Lease"
    );
    let holder = lease_holder(&leases).await?;
    ensure!(
        holder.as_deref() != Some("replica-a"),
        "the Lease still names the stopped leader"
    );

    wait_leading(&leases, &standby, TAKEOVER_LIMIT + Duration::from_secs(10)).await?;
    let takeover = exited.elapsed();
    report(format_args!(
        "hub healthy: the standby led {:.2}s after the leader exited (Lease {LEASE_SECONDS}s)",
        takeover.as_secs_f64()
    ));
    ensure!(
        takeover <= TAKEOVER_LIMIT,
        "the standby took {:.1}s to take over: it waited for the Lease to expire",
        takeover.as_secs_f64()
    );

    // The new leader works (a change propagates), then, alone, stops as promptly. (Waiting
    // for the change also waits out its start: a sync controller stopped before its cache has
    // loaded is held by kube-runtime until the 5 s drain limit.)
    propagate_change(env, &hub, "after-takeover").await?;
    let stopped = terminate(&standby, HEALTHY_EXIT_LIMIT + UNREACHABLE_EXIT_LIMIT).await?;
    report(format_args!(
        "hub healthy: the new leader exited {:.2}s after SIGTERM ({})",
        stopped.took.as_secs_f64(),
        stopped.status
    ));
    stopped.ensure_clean("the new leader", HEALTHY_EXIT_LIMIT)?;
    ensure!(
        lease_holder(&leases).await?.is_none(),
        "the Lease was not released"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_exits_at_once() -> anyhow::Result<()> {
    let env = set_up().await?;
    let outcome = second_signal(&env).await;
    if outcome.is_err() {
        print_logs(&env, &["impatient"]);
    }
    outcome
}

/// With the hub frozen, SIGTERM to the leader, then another one half a second later, while
/// the first shutdown waits for the work in flight: the process exits at once with 128 + 15
/// and the final line.
async fn second_signal(env: &TestEnv) -> anyhow::Result<()> {
    let hub = env.hub().client().await?;
    let leader = busy_leader(env, "impatient").await?;
    burst(&hub, "shutdown").await?;
    env.hub().pause()?;
    let _frozen = Frozen(env.hub());
    tokio::time::sleep(Duration::from_secs(3)).await;
    leader.signal("TERM")?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = Instant::now();
    leader.signal("TERM")?;
    let stopped = exited(
        &leader,
        second,
        UNREACHABLE_EXIT_LIMIT + Duration::from_secs(30),
    )
    .await?;
    report(format_args!(
        "hub frozen: the leader exited {:.2}s after a second SIGTERM ({})",
        stopped.took.as_secs_f64(),
        stopped.status
    ));
    ensure!(
        stopped.status.code() == Some(128 + 15),
        "after a second SIGTERM the exit status is {}, not 143",
        stopped.status
    );
    ensure!(
        stopped.last_line.contains(FINAL_LINE),
        "after a second SIGTERM the last log line is not {FINAL_LINE:?} but: {}",
        stopped.last_line
    );
    ensure!(
        stopped.log.contains("second signal"),
        "the second signal was not logged"
    );
    ensure!(
        stopped.took <= Duration::from_secs(1),
        "a second SIGTERM took {:.1}s to end the process",
        stopped.took.as_secs_f64()
    );
    Ok(())
}

/// Resumes a hub API server frozen by the test, when dropped.
struct Frozen<'a>(&'a Cluster);

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        let _ = self.0.resume();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_hub_stopped_sigterm_still_stops_the_controller() -> anyhow::Result<()> {
    let env = set_up().await?;
    let outcome = unreachable(&env, Outage::Stopped).await;
    if outcome.is_err() {
        print_logs(&env, &["solo"]);
    }
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_hub_partitioned_sigterm_still_stops_the_controller() -> anyhow::Result<()> {
    let env = set_up().await?;
    let outcome = unreachable(&env, Outage::Partitioned).await;
    if outcome.is_err() {
        print_logs(&env, &["solo"]);
    }
    outcome
}

#[derive(Clone, Copy, Debug)]
enum Outage {
    /// The hub's API server is frozen (SIGSTOP).
    Stopped,
    /// Every packet to or from the hub's API server port is dropped.
    Partitioned,
}

async fn unreachable(env: &TestEnv, outage: Outage) -> anyhow::Result<()> {
    let hub = env.hub().client().await?;
    let leader = busy_leader(env, "solo").await?;
    burst(&hub, "shutdown").await?;
    // What cuts the hub off, undone when dropped.
    let guard: (Option<Frozen>, Option<Partition>) = match outage {
        Outage::Stopped => {
            env.hub().pause()?;
            (Some(Frozen(env.hub())), None)
        }
        Outage::Partitioned => match Partition::start(&env.hub().server_url())? {
            Some(partition) => (None, Some(partition)),
            None => {
                report(
                    "iptables cannot be used here (not installed, or not root): the partition \
                     is simulated by freezing the hub (SIGSTOP) instead",
                );
                env.hub().pause()?;
                (Some(Frozen(env.hub())), None)
            }
        },
    };
    // Everything that talks to the hub now hangs: Lease renewals, status writes, watches.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stopped = terminate(&leader, UNREACHABLE_EXIT_LIMIT + Duration::from_secs(30)).await;
    drop(guard);
    let stopped = stopped?;
    report(format_args!(
        "hub {outage:?}: the leader exited {:.2}s after SIGTERM ({})",
        stopped.took.as_secs_f64(),
        stopped.status
    ));
    stopped.ensure_clean("the leader", UNREACHABLE_EXIT_LIMIT)
}

/// iptables rules dropping every packet to and from a loopback port, removed when dropped
/// (a test that fails still removes them; only a killed test process leaves them behind).
struct Partition {
    rules: Vec<Vec<String>>,
}

impl Partition {
    /// Cuts off the API server at `server_url` (`https://127.0.0.1:<port>`). `None` when
    /// iptables cannot be used.
    fn start(server_url: &str) -> anyhow::Result<Option<Self>> {
        let port = server_url
            .rsplit_once(':')
            .and_then(|(_, port)| port.trim_end_matches('/').parse::<u16>().ok())
            .with_context(|| format!("no port in {server_url}"))?;
        if !iptables(&["-L", "INPUT", "-n"]) {
            return Ok(None);
        }
        let comment = format!("hubfed-e2e-shutdown-{}", std::process::id());
        let rule = |direction: &str| -> Vec<String> {
            [
                "INPUT",
                "-p",
                "tcp",
                "-i",
                "lo",
                direction,
                &port.to_string(),
                "-m",
                "comment",
                "--comment",
                &comment,
                "-j",
                "DROP",
            ]
            .map(str::to_owned)
            .to_vec()
        };
        let mut partition = Self { rules: Vec::new() };
        for rule in [rule("--dport"), rule("--sport")] {
            let mut insert = vec!["-I".to_owned()];
            insert.extend(rule.iter().cloned());
            let args: Vec<&str> = insert.iter().map(String::as_str).collect();
            ensure!(iptables(&args), "iptables {} failed", args.join(" "));
            partition.rules.push(rule);
        }
        Ok(Some(partition))
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        for rule in &self.rules {
            let mut delete = vec!["-D".to_owned()];
            delete.extend(rule.iter().cloned());
            let args: Vec<&str> = delete.iter().map(String::as_str).collect();
            if !iptables(&args) {
                report(format_args!(
                    "could not remove the iptables rule: iptables {}",
                    args.join(" ")
                ));
            }
        }
    }
}

/// Runs `iptables -w <args>`; whether it succeeded.
fn iptables(args: &[&str]) -> bool {
    Command::new("iptables")
        .arg("-w")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
