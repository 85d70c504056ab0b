//! One benchmark run, phase by phase. See the binary's documentation for what each phase
//! measures.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hubfed_api::kubefedcluster::KubeFedCluster;
use hubfed_api::propagatedversion::PropagatedVersion;
use hubfed_api::work::Work;
use hubfed_testenv::{TestEnv, TestEnvConfig};
use k8s_openapi::api::core::v1::Event;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use tokio_util::sync::CancellationToken;

use super::agents::Agents;
use super::controller::{
    ControllerKind, ControllerProcess, ControllerSettings, Metrics, apiserver_write_counts,
    apiserver_writes, operations_delta,
};
use super::procstat::{CpuSnapshot, CpuUsage, Groups, Machine};
use super::report::{
    AgentResources, BenchResult, ColdStart, HubStorage, Idle, LargeObjects, Latency, ObjectSet,
    Parameters, Resources, Restart, Setup, SlowLatency, SlowMember, Verification,
};
use super::setup::{Federation, QUIET};
use super::stats::Percentiles;
use super::tracker::Tracker;
use super::workload::{KINDS, Workload, federated_object, federated_update, member_matches};
use super::{Args, progress, setup};

/// Hub writes in flight while creating the federated objects.
const HUB_CREATE_CONCURRENCY: usize = 32;

fn parameters(args: &Args) -> Parameters {
    Parameters {
        controller: args.controller,
        members: args.members,
        objects: args.objects,
        pairs: args.members * args.objects,
        updates: args.updates,
        rate: args.rate,
        rates: args.latency_runs(),
        idle_seconds: args.idle_seconds,
        pause_seconds: args.pause_seconds,
        namespaces: args.namespaces,
        raw_concurrency: args.raw_concurrency,
        raw_per_member: args.raw_per_member,
        member_write_concurrency: args.member_write_concurrency,
        reconcile_concurrency: args.reconcile_concurrency,
        controller_manager: args.controller_manager,
        warm_restart: args.warm_restart && args.controller != ControllerKind::Kubefed,
        remote_status: args.remote_status,
        pull: args.pull,
        agent_heartbeat_seconds: args.pull.then_some(args.agent_heartbeat_seconds),
        kube_version: hubfed_testenv::kube_version().to_owned(),
        etcd: hubfed_testenv::Binaries::locate()
            .map(|b| hubfed_testenv::etcd_description(&b.etcd))
            .unwrap_or_else(|e| format!("etcd not found: {e}")),
        member_memory_limit: hubfed_testenv::member_memory_limit(),
        slow_member_ms: (args.slow_member_ms > 0).then_some(args.slow_member_ms),
        unmanaged: (args.unmanaged > 0).then_some(args.unmanaged),
        object_bytes: (args.object_bytes > 0).then_some(args.object_bytes),
        light_members: args.light_members,
        admission_finalizer: admission_finalizer(args),
        admission_validation: admission_validation(args),
        env_dir: args.env_dir.as_ref().map(|d| d.display().to_string()),
    }
}

fn commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(head) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{head} (with uncommitted changes)")
            } else {
                head
            }
        }
        None => "unknown".to_owned(),
    }
}

/// Runs every phase; what was measured before a failure is kept in the result.
pub async fn run(
    args: &Args,
    controller_binary: std::path::PathBuf,
    agent_binary: Option<std::path::PathBuf>,
) -> BenchResult {
    let mut result = BenchResult {
        date: k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%d %H:%M UTC")
            .to_string(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        commit: commit(),
        machine: Machine::describe(),
        parameters: parameters(args),
        setup: Setup::default(),
        raw: None,
        raw_cpu: None,
        cold_start: None,
        latency: None,
        latencies: Vec::new(),
        resources: Resources::default(),
        idle: None,
        verification: None,
        restart: None,
        agents: None,
        hub_storage: None,
        slow_member: None,
        unmanaged: None,
        large_objects: None,
        mcs: None,
        targets: Vec::new(),
        error: None,
    };
    let mut agents = Agents::default();
    let outcome = phases(
        args,
        controller_binary,
        agent_binary,
        &mut agents,
        &mut result,
    )
    .await;
    // Before the clusters go (a failed run leaves them to their guardians).
    agents.stop();
    if let Err(e) = outcome {
        progress(format_args!("the run failed: {e:#}"));
        result.error = Some(format!("{e:#}"));
    }
    result.judge();
    result
}

/// The processes under test: the controller and, in pull mode, the agents.
#[derive(Clone, Copy)]
struct UnderTest<'a> {
    controller: &'a ControllerProcess,
    agents: &'a Agents,
}

/// Member requests, from where they are made: the controller (push) or the agents (pull).
async fn member_metrics(
    controller: &ControllerProcess,
    agents: &Agents,
) -> anyhow::Result<Metrics> {
    if agents.is_empty() {
        controller.metrics().await
    } else {
        agents.metrics().await
    }
}

/// Waits until the controller has nothing left to do and, in pull mode, the agents neither.
async fn wait_settled(
    controller: &ControllerProcess,
    agents: &Agents,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    let mut waited = controller.wait_settled(QUIET, timeout).await?;
    if !agents.is_empty() {
        waited += agents.wait_quiet(QUIET, timeout).await?;
        // The agents' last reports make the controller reconcile once more.
        waited += controller.wait_settled(QUIET, timeout).await?;
    }
    Ok(waited)
}

fn sum(values: &[u64]) -> u64 {
    values.iter().sum()
}

async fn phases(
    args: &Args,
    controller_binary: std::path::PathBuf,
    agent_binary: Option<std::path::PathBuf>,
    agent_slot: &mut Agents,
    result: &mut BenchResult,
) -> anyhow::Result<()> {
    let timeout = Duration::from_secs(args.timeout_seconds);
    let workload = Workload {
        objects: args.objects,
        namespaces: args.namespaces,
    };
    let settings = ControllerSettings {
        kind: args.controller,
        binary: controller_binary,
        member_write_concurrency: args.member_write_concurrency,
        reconcile_concurrency: args.reconcile_concurrency,
        log_dir: args.output_dir.clone(),
        env: args.controller_env.clone(),
    };

    // Clusters.
    progress(format_args!(
        "starting a hub and {} members (Kubernetes {})",
        args.members,
        hubfed_testenv::kube_version()
    ));
    // `--env-dir`: a fresh directory of this run's under it (etcd data on disk), removed at
    // the end of a complete run.
    let env_dir = match &args.env_dir {
        Some(base) => {
            let dir = base.join(format!("hubfed-bench-{}", std::process::id()));
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            Some(dir.canonicalize()?)
        }
        None => None,
    };
    let config = TestEnvConfig {
        members: args.members,
        controller_manager: args.controller_manager,
        dir: env_dir.clone(),
        ready_timeout: timeout,
        light_members: args.light_members,
        // With `--object-bytes` the members hold gigabytes: not a second time in their caches.
        member_watch_cache: args.object_bytes == 0,
        ..TestEnvConfig::default()
    };
    let env = tokio::task::spawn_blocking(move || TestEnv::start(config))
        .await
        .context("the cluster start-up thread")??;
    result.setup.clusters_start_seconds = env.startup_time().as_secs_f64();
    progress(format_args!(
        "clusters ready in {:.1}s ({})",
        result.setup.clusters_start_seconds,
        env.dir().display()
    ));
    let hub = env.hub().client().await?;
    let mut members = Vec::new();
    let mut names = Vec::new();
    for cluster in env.members() {
        members.push(cluster.client().await?);
        names.push(cluster.name().to_owned());
    }
    let mut fed = Federation {
        env,
        hub,
        members,
        names,
        agent_pids: Vec::new(),
        slow_proxy: None,
    };
    // `--slow-member-ms`: the last member is slow in the controller's eyes only.
    let slow_index = (args.slow_member_ms > 0).then(|| fed.members.len() - 1);

    // Control plane, joins, federated namespaces, with a first controller (baseline memory).
    let began = Instant::now();
    let namespaces = workload.namespace_names();
    if args.controller == ControllerKind::Kubefed {
        super::workload::carry_revision_in_label();
    }
    let kubefed_config = (args.controller == ControllerKind::Kubefed)
        .then(|| super::kubefed::config(args.reconcile_concurrency));
    hubfed_e2e::install_control_plane(&fed.hub, kubefed_config).await?;
    if args.remote_status {
        setup::enable_remote_status(&fed.hub).await?;
    }
    match &agent_binary {
        None => {
            for (index, (name, cluster)) in fed.names.iter().zip(fed.env.members()).enumerate() {
                if slow_index == Some(index) {
                    let proxy = cluster
                        .delay_proxy(Duration::from_millis(args.slow_member_ms))
                        .map_err(|e| anyhow::anyhow!("starting the delay proxy of {name}: {e}"))?;
                    hubfed_e2e::register_cluster_at(
                        &fed.hub,
                        name,
                        cluster,
                        &proxy.url(),
                        cluster.ca_pem(),
                    )
                    .await?;
                    progress(format_args!(
                        "{name} joined through a delay proxy ({}): what it sends reaches the controller {} ms late",
                        proxy.url(),
                        args.slow_member_ms
                    ));
                    fed.slow_proxy = Some(proxy);
                } else {
                    setup::join(&fed.hub, name, cluster).await?;
                }
            }
        }
        Some(_) => {
            for name in &fed.names {
                setup::join_pull(&fed.env, &fed.hub, name).await?;
            }
        }
    }
    let first = start_controller(&fed, &settings, "setup", &namespaces).await?;
    first.wait_ready(timeout).await?;
    if let Some(binary) = &agent_binary {
        *agent_slot = Agents::start(
            &fed.env,
            binary,
            &fed.names,
            args.agent_heartbeat_seconds,
            &args.output_dir,
        )
        .await?;
        fed.agent_pids = agent_slot.pids();
        progress(format_args!(
            "{} members joined in pull mode; {} hubfed-agent processes started (heartbeat {}s)",
            fed.names.len(),
            agent_slot.0.len(),
            args.agent_heartbeat_seconds
        ));
    }
    let fed = fed;
    let agents: &Agents = &*agent_slot;
    setup::wait_clusters_ready(&fed.hub, &fed.names, timeout).await?;
    result.setup.join_seconds = began.elapsed().as_secs_f64();
    progress(format_args!(
        "{} members joined and Ready in {:.1}s",
        fed.names.len(),
        result.setup.join_seconds
    ));
    setup::federate_namespaces(&fed.hub, &namespaces, &fed.names()).await?;
    setup::wait_member_namespaces(&fed.members, &namespaces, timeout).await?;
    wait_settled(&first, agents, timeout).await?;
    result.setup.baseline_rss_bytes = first.rss();
    let mut storage = HubStorage {
        hub_apiserver_rss_baseline_bytes: hub_apiserver_rss(&fed),
        ..HubStorage::default()
    };
    if !agents.is_empty() {
        result.agents = Some(AgentResources {
            agents: agents.0.len(),
            heartbeat_seconds: args.agent_heartbeat_seconds,
            baseline_rss_bytes: agents.rss(),
            ..AgentResources::default()
        });
        progress(format_args!(
            "agents' RSS without objects: {:.1} MiB in all",
            sum(&agents.rss()) as f64 / 1048576.0
        ));
    }
    progress(format_args!(
        "namespaces {} federated; controller RSS without objects {:.1} MiB; stopping it",
        namespaces.join(", "),
        result.setup.baseline_rss_bytes as f64 / 1048576.0
    ));
    first.stop();

    // `--object-bytes`: what one member receives, for the MB/s figures.
    let member_bytes_per_member = if args.object_bytes > 0 {
        super::workload::member_bytes(&workload)
    } else {
        0
    };

    // 1. Raw apply limit.
    setup::create_member_namespaces(&fed.members, &workload.raw_namespace_names()).await?;
    progress(format_args!(
        "raw apply limit: {} SSA writes straight to the members ({} in flight, ≤ {} per member)",
        args.objects * args.members,
        args.raw_concurrency,
        args.raw_per_member
    ));
    let cpu_before = CpuSnapshot::take(&fed.groups(None));
    let raw = super::raw::run(
        &fed.members,
        &workload,
        args.raw_concurrency,
        args.raw_per_member,
    )
    .await?;
    let raw_cpu = CpuUsage::between(&cpu_before, &CpuSnapshot::take(&fed.groups(None)));
    progress(format_args!(
        "raw apply limit: {:.0} objects/s, p50 {:.1} ms, p99 {:.1} ms; {}",
        raw.writes_per_second,
        raw.write_latency.p50_ms,
        raw.write_latency.p99_ms,
        raw_cpu.summary()
    ));
    result.raw = Some(raw.clone());
    result.raw_cpu = Some(raw_cpu.clone());
    if args.object_bytes > 0 {
        // Gigabytes in etcd that no later phase reads: gone before the cold start (etcd's
        // history keeps them until the API servers compact it, within 5 minutes).
        let began = Instant::now();
        // Only to spare memory and disk: a failure is reported, the run goes on.
        match super::raw::delete(&fed.members, &workload).await {
            Ok(requests) => progress(format_args!(
                "raw objects deleted ({requests} delete-collection requests) in {:.1}s",
                began.elapsed().as_secs_f64()
            )),
            Err(e) => progress(format_args!("raw objects not all deleted: {e:#}")),
        }
        // And out of etcd's database: its history and free pages kept them resident (a
        // database of ~10 GB at full size, which with the cold start's writes no longer fit
        // the machine's page cache beside the API servers: etcd then read from disk, stalled).
        // Separate clusters would each have their own etcd, not one holding every raw write.
        let began = Instant::now();
        match tokio::task::block_in_place(|| fed.env.compact_etcd()) {
            Ok((before, after)) => progress(format_args!(
                "etcd compacted and defragmented in {:.1}s: database {:.0} MiB -> {:.0} MiB",
                began.elapsed().as_secs_f64(),
                before as f64 / 1_048_576.0,
                after as f64 / 1_048_576.0
            )),
            Err(e) => progress(format_args!("etcd not compacted: {e}")),
        }
    }

    // `--mcs`: the multi-cluster services controller instead of the federated objects.
    if args.mcs {
        super::mcs::run(args, &fed, &settings, timeout, &mut result.mcs).await?;
        progress(format_args!("stopping the clusters"));
        let env = fed.env;
        tokio::task::spawn_blocking(move || env.shutdown()).await?;
        remove_env_dir(env_dir.as_deref());
        return Ok(());
    }

    // The federated objects, with no controller running (hubfed: through its admission
    // webhooks, as installed by the chart).
    let placement = fed.names();
    let hooks = setup::Hooks {
        finalizer: admission_finalizer(args),
        validation: admission_validation(args),
    };
    let _webhook = if hooks.finalizer || hooks.validation {
        let id = workload.id(0);
        let api =
            hubfed_e2e::dynamic_api(fed.hub.clone(), &id.kind.federated(), Some(&id.namespace));
        let probe = federated_object(&id, 0, &placement);
        let guard = setup::admission_webhooks(&fed, hooks, &api, &probe, timeout).await?;
        progress(format_args!("hubfed's admission webhooks serve: {hooks}"));
        Some(guard)
    } else {
        None
    };
    let began = Instant::now();
    setup::for_each_concurrent(workload.ids(), HUB_CREATE_CONCURRENCY, |id| {
        let api =
            hubfed_e2e::dynamic_api(fed.hub.clone(), &id.kind.federated(), Some(&id.namespace));
        let object = federated_object(&id, 0, &placement);
        async move {
            api.create(&PostParams::default(), &object)
                .await
                .with_context(|| format!("creating Federated{} {}", id.kind.name(), id.name))?;
            Ok(())
        }
    })
    .await?;
    result.setup.hub_create_seconds = began.elapsed().as_secs_f64();
    result.setup.hub_creates_per_second = args.objects as f64 / result.setup.hub_create_seconds;
    progress(format_args!(
        "{} federated objects created in the hub in {:.1}s",
        args.objects, result.setup.hub_create_seconds
    ));

    storage.etcd_db_before_bytes = etcd_db_bytes(&fed);

    // 2. Cold start.
    let stop_watches = CancellationToken::new();
    let _stop_watches = stop_watches.clone().drop_guard();
    let healthy = slow_index.unwrap_or(fed.members.len());
    let tracker = Tracker::with_healthy(workload.clone(), fed.members.len(), healthy);
    tracker
        .watch_members(&fed.members, &stop_watches, timeout)
        .await?;
    tracker.watch_hub(&fed.hub, &stop_watches, timeout).await?;
    let pairs = args.objects * args.members;
    progress(format_args!(
        "cold start: starting the controller; waiting for {pairs} member objects"
    ));
    let hub_writes_before = apiserver_writes(&fed.hub).await?;
    // The agents run already (pull): their requests count from here.
    let agent_metrics_before = if agents.is_empty() {
        Metrics::default()
    } else {
        agents.metrics().await?
    };
    // Taken before the controller exists: its CPU counts from zero.
    let cpu_before = CpuSnapshot::take(&fed.groups(None));
    let controller = start_controller(&fed, &settings, "run", &namespaces).await?;
    let groups = fed.groups(Some(&controller));
    let ready = controller.wait_ready(timeout).await?;
    let mut last_report = (Instant::now(), 0usize);
    let converged_at = loop {
        let (present, last) = {
            let state = tracker.state();
            (state.present, state.last_arrival)
        };
        if present >= pairs {
            break last.unwrap_or_else(Instant::now);
        }
        controller.ensure_running()?;
        agents.ensure_running()?;
        anyhow::ensure!(
            controller.started.elapsed() < timeout,
            "cold start: only {present} of {pairs} member objects after {}s",
            timeout.as_secs()
        );
        if last_report.0.elapsed() >= Duration::from_secs(5) {
            let rate = (present - last_report.1.min(present)) as f64
                / last_report.0.elapsed().as_secs_f64();
            let writes = member_metrics(&controller, agents)
                .await
                .map(|m| m.member_writes() - agent_metrics_before.member_writes())
                .unwrap_or(0.0);
            progress(format_args!(
                "cold start: {present}/{pairs} member objects ({:.0} %), {rate:.0}/s, {writes:.0} member writes",
                present as f64 * 100.0 / pairs as f64
            ));
            last_report = (Instant::now(), present);
        }
        tracker.changed(Duration::from_millis(500)).await;
    };
    let cold_cpu = CpuUsage::between(&cpu_before, &CpuSnapshot::take(&groups));
    result.resources.rss_after_cold_start_bytes = controller.rss();
    let peak_after_cold_start = controller.peak_rss();
    let healthy_converged_at = tracker.state().last_arrival_healthy;
    storage.hub_apiserver_rss_after_cold_start_bytes = hub_apiserver_rss(&fed);
    if let Some(a) = result.agents.as_mut() {
        a.rss_after_cold_start_bytes = agents.rss();
        a.cold_start_cpu_seconds = cold_cpu.cpu_seconds.get("agents").copied().unwrap_or(0.0);
    }
    let first_arrival = tracker.state().first_arrival.unwrap_or(converged_at);
    let seconds = converged_at
        .duration_since(controller.started)
        .as_secs_f64();
    let write_phase = converged_at.duration_since(first_arrival).as_secs_f64();
    progress(format_args!(
        "cold start: {pairs} member objects in {seconds:.1}s ({:.0}/s); {}",
        pairs as f64 / seconds,
        cold_cpu.summary()
    ));
    let settle_began = controller.started.elapsed();
    let settled = wait_settled(&controller, agents, timeout).await?;
    let settled_seconds = (settle_began + settled).as_secs_f64();
    // Counted once settled: a member write can show in a member watch before the controller
    // has counted it.
    let cold_metrics = controller.metrics().await?;
    let member_after = member_metrics(&controller, agents).await?;
    let hub_writes = operations_delta(&hub_writes_before, &apiserver_writes(&fed.hub).await?);
    let hub_events = count_hub_events(&fed.hub, &namespaces).await?;
    let operations = operations_delta(
        &agent_metrics_before.member_operations(),
        &member_after.member_operations(),
    );
    let requests: f64 = operations.values().sum();
    let member_request_mean_ms = ["get", "create", "update"]
        .iter()
        .map(|op| {
            let ms = member_after.mean_ms_since(
                &agent_metrics_before,
                "hubfed_member_operation_duration_seconds",
                &[("operation", op)],
            );
            ((*op).to_owned(), ms)
        })
        .filter(|(_, ms)| *ms > 0.0)
        .collect();
    result.resources.cold_start_cpu_seconds = cold_cpu
        .cpu_seconds
        .get("controller")
        .copied()
        .unwrap_or(0.0);
    result.cold_start = Some(ColdStart {
        pairs,
        seconds,
        ready_seconds: ready.as_secs_f64(),
        first_object_seconds: first_arrival
            .duration_since(controller.started)
            .as_secs_f64(),
        write_phase_seconds: write_phase,
        objects_per_second: pairs as f64 / seconds,
        ratio_to_raw: pairs as f64 / seconds / raw.writes_per_second,
        ratio_cpu_normalised: cpu_normalised_ratio(&raw_cpu, raw.writes, &cold_cpu, pairs),
        ratio_to_raw_write_phase: if write_phase > 0.0 {
            pairs as f64 / write_phase / raw.writes_per_second
        } else {
            0.0
        },
        settled_seconds,
        member_operations: operations,
        member_requests_per_pair: requests / pairs as f64,
        member_request_mean_ms,
        reconciles: cold_metrics.sum("controller_runtime_reconcile_total", &[]),
        reconcile_mean_ms: cold_metrics.mean_ms("controller_runtime_reconcile_time_seconds", &[]),
        hub_writes_per_object: hub_writes.values().sum::<f64>() / args.objects as f64,
        hub_writes,
        hub_events,
        cpu: cold_cpu,
    });
    progress(format_args!(
        "cold start: controller settled (statuses written) {settled_seconds:.1}s after start; RSS {:.1} MiB",
        result.resources.rss_after_cold_start_bytes as f64 / 1048576.0
    ));
    if let Some(slow) = slow_index {
        let healthy_seconds = healthy_converged_at.map_or(0.0, |at| {
            at.duration_since(controller.started).as_secs_f64()
        });
        progress(format_args!(
            "slow member: the healthy members held everything after {healthy_seconds:.1}s, {} after {seconds:.1}s",
            fed.names[slow]
        ));
        result.slow_member = Some(SlowMember {
            member: fed.names[slow].clone(),
            delay_ms: args.slow_member_ms,
            cold_start_healthy_seconds: healthy_seconds,
            cold_start_slow_seconds: seconds,
            cold_start_reconciles: cold_metrics.sum("controller_runtime_reconcile_total", &[]),
            latencies: Vec::new(),
        });
    }
    if args.object_bytes > 0 {
        let all = member_bytes_per_member * args.members as u64;
        result.large_objects = Some(LargeObjects {
            object_bytes: args.object_bytes,
            member_bytes_per_member,
            member_bytes: all,
            raw_mb_per_second: all as f64 / 1e6 * (raw.writes as f64 / pairs as f64) / raw.seconds,
            cold_start_mb_per_second: all as f64 / 1e6 / seconds,
            controller_peak_rss_after_cold_start_bytes: peak_after_cold_start,
            controller_peak_rss_bytes: 0,
        });
        progress(format_args!(
            "large objects: {:.1} MB of member objects; raw {:.1} MB/s, cold start {:.1} MB/s; controller VmHWM {:.1} MiB",
            all as f64 / 1e6,
            all as f64 / 1e6 * (raw.writes as f64 / pairs as f64) / raw.seconds,
            all as f64 / 1e6 / seconds,
            peak_after_cold_start as f64 / 1048576.0
        ));
    }

    if args.pause_seconds > 0 {
        progress(format_args!(
            "pause: {}s before the latency phases",
            args.pause_seconds
        ));
        // The pause is what was asked for: the members' time to finish the cold start's tail.
        tokio::time::sleep(Duration::from_secs(args.pause_seconds)).await;
    }

    // 3. Propagation latency under a steady stream of template updates, at every rate; phase
    // i moves its objects to revision i.
    let mut revisions = vec![0u32; args.objects];
    for (phase, (rate, updates)) in args.latency_runs().into_iter().enumerate() {
        let rev = u32::try_from(phase + 1)?;
        let objects = updated_objects(updates, args.objects);
        let (latency, slow) = latency_phase(
            &fed,
            &workload,
            UnderTest {
                controller: &controller,
                agents,
            },
            &tracker,
            &groups,
            Updates {
                rate,
                objects: &objects,
                rev,
            },
            timeout,
        )
        .await?;
        for &index in &objects {
            revisions[index] = rev;
        }
        result.latency.get_or_insert_with(|| latency.clone());
        result.latencies.push(latency);
        if let (Some(all), Some(phase)) = (result.slow_member.as_mut(), slow) {
            all.latencies.push(phase);
        }
    }
    result.resources.rss_after_updates_bytes = controller.rss();
    storage.hub_apiserver_rss_after_updates_bytes = hub_apiserver_rss(&fed);
    if let Some(a) = result.agents.as_mut() {
        a.rss_after_updates_bytes = agents.rss();
        a.cores_updates = result
            .latency
            .as_ref()
            .map_or(0.0, |l| l.cpu.cores_used("agents"));
    }

    // 4 and 5. At rest.
    let idle = idle_phase(
        args,
        &fed,
        &namespaces,
        UnderTest {
            controller: &controller,
            agents,
        },
        &tracker,
        &groups,
        timeout,
    )
    .await?;
    result.resources.rss_at_rest_bytes = controller.rss();
    result.resources.heap_at_rest = controller.metrics().await.ok().and_then(|m| m.heap());
    if let Some(a) = result.agents.as_mut() {
        a.rss_at_rest_bytes = agents.rss();
        a.peak_rss_bytes = agents.peak_rss();
        a.bytes_per_pair = sum(&a.rss_at_rest_bytes) as f64 / pairs as f64;
        a.cores_at_rest = idle.cpu.cores_used("agents");
    }
    result.resources.peak_rss_bytes = controller.peak_rss();
    if let Some(l) = result.large_objects.as_mut() {
        l.controller_peak_rss_bytes = result.resources.peak_rss_bytes;
    }
    result.resources.cores_at_rest = idle.cpu.cores_used("controller");
    let rest = result.resources.rss_at_rest_bytes as f64;
    let marginal = rest - result.setup.baseline_rss_bytes as f64;
    result.resources.bytes_per_object = rest / args.objects as f64;
    result.resources.bytes_per_pair = rest / pairs as f64;
    result.resources.marginal_bytes_per_object = marginal / args.objects as f64;
    result.resources.marginal_bytes_per_pair = marginal / pairs as f64;
    result.idle = Some(idle);

    // `--unmanaged`: objects the controller only counts, in one member.
    if args.unmanaged > 0 {
        let unmanaged =
            super::unmanaged::run(args, &fed, &workload, &controller, &groups, timeout).await?;
        result.unmanaged = Some(unmanaged);
    }

    // Hub storage, after the window (listing every work is not quiet).
    storage.hub_apiserver_rss_at_rest_bytes = hub_apiserver_rss(&fed);
    storage.etcd_db_at_rest_bytes = etcd_db_bytes(&fed);
    storage.works = list_sizes(&fed.hub, &ApiResource::erase::<Work>(&())).await?;
    storage.work_bytes_per_pair = storage.works.bytes as f64 / pairs as f64;
    storage.propagated_versions =
        list_sizes(&fed.hub, &ApiResource::erase::<PropagatedVersion>(&())).await?;
    for kind in KINDS {
        let set = list_sizes(&fed.hub, &kind.federated()).await?;
        let all = &mut storage.federated_objects;
        all.count += set.count;
        all.bytes += set.bytes;
        all.managed_fields_bytes += set.managed_fields_bytes;
        all.status_bytes += set.status_bytes;
        for (generation, count) in set.by_generation {
            *all.by_generation.entry(generation).or_insert(0) += count;
        }
    }
    storage.federated_objects.bytes_per_object =
        storage.federated_objects.bytes as f64 / storage.federated_objects.count.max(1) as f64;
    progress(format_args!(
        "hub storage: {} Works, {:.1} MiB ({:.0} bytes each, {:.0} per pair); {} PropagatedVersions, {:.1} MiB; hub apiserver RSS {:.0} → {:.0} → {:.0} → {:.0} MiB; etcd db {:.0} → {:.0} MiB",
        storage.works.count,
        storage.works.bytes as f64 / 1048576.0,
        storage.works.bytes_per_object,
        storage.work_bytes_per_pair,
        storage.propagated_versions.count,
        storage.propagated_versions.bytes as f64 / 1048576.0,
        storage.hub_apiserver_rss_baseline_bytes as f64 / 1048576.0,
        storage.hub_apiserver_rss_after_cold_start_bytes as f64 / 1048576.0,
        storage.hub_apiserver_rss_after_updates_bytes as f64 / 1048576.0,
        storage.hub_apiserver_rss_at_rest_bytes as f64 / 1048576.0,
        storage.etcd_db_before_bytes as f64 / 1048576.0,
        storage.etcd_db_at_rest_bytes as f64 / 1048576.0,
    ));
    result.hub_storage = Some(storage);

    // 6. Warm restart on the converged federation (hubfed's: it measures what hubfed's
    // metrics and PropagatedVersion store promise; not run for KubeFed), then what the members
    // hold, read back in full — after the restart, which it runs on a machine at rest (a
    // read-back of large objects keeps the test clusters busy for minutes), and checks too.
    if args.controller == ControllerKind::Kubefed || !args.warm_restart {
        result.verification = Some(verify(&fed, &workload, &revisions).await?);
        controller.stop();
        progress(if args.warm_restart {
            "warm restart: skipped for KubeFed"
        } else {
            "warm restart: skipped (--warm-restart false)"
        });
        stop_watches.cancel();
        progress(format_args!("stopping the clusters"));
        let env = fed.env;
        tokio::task::spawn_blocking(move || env.shutdown()).await?;
        remove_env_dir(env_dir.as_deref());
        return Ok(());
    }
    controller.stop();
    let restart = super::restart::run(args, &fed, &settings, agents, &tracker, timeout).await?;
    if let Some(a) = result.agents.as_mut() {
        a.rss_after_restart_bytes = agents.rss();
    }
    result.restart = Some(Restart {
        bytes_per_pair: restart.rss_bytes as f64 / pairs as f64,
        marginal_bytes_per_pair: (restart.rss_bytes as f64
            - result.setup.baseline_rss_bytes as f64)
            / pairs as f64,
        ..restart
    });
    result.verification = Some(verify(&fed, &workload, &revisions).await?);
    stop_watches.cancel();
    std::mem::take(agent_slot).stop();
    progress(format_args!("stopping the clusters"));
    let env = fed.env;
    tokio::task::spawn_blocking(move || env.shutdown()).await?;
    remove_env_dir(env_dir.as_deref());
    Ok(())
}

/// Removes the run's directory under `--env-dir` once the clusters are down.
fn remove_env_dir(dir: Option<&std::path::Path>) {
    if let Some(dir) = dir
        && let Err(e) = std::fs::remove_dir_all(dir)
    {
        progress(format_args!("could not remove {}: {e}", dir.display()));
    }
}

/// CPU per raw write over CPU per cold-start pair, other processes' CPU left out.
fn cpu_normalised_ratio(raw: &CpuUsage, writes: usize, cold: &CpuUsage, pairs: usize) -> f64 {
    let ours = |cpu: &CpuUsage| -> f64 {
        cpu.cpu_seconds
            .iter()
            .filter(|(group, _)| **group != super::procstat::OTHER)
            .map(|(_, seconds)| seconds)
            .sum()
    };
    let raw_per_write = ours(raw) / writes.max(1) as f64;
    let cold_per_pair = ours(cold) / pairs.max(1) as f64;
    if cold_per_pair > 0.0 {
        raw_per_write / cold_per_pair
    } else {
        0.0
    }
}

/// The objects the latency phase updates, in update order: `updates` of them, the kinds in
/// turn, each kind's share spread evenly over that kind's objects (so over every namespace).
fn updated_objects(updates: usize, objects: usize) -> Vec<usize> {
    let kinds = KINDS.len();
    (0..updates)
        .map(|j| {
            let kind = j % kinds;
            let nth = j / kinds;
            // Updates of this kind, and objects of this kind (indices kind, kind + 3, ...).
            let of_kind = (objects - kind).div_ceil(kinds);
            let updates_of_kind = (updates - kind).div_ceil(kinds);
            kind + kinds * (nth * of_kind / updates_of_kind)
        })
        .collect()
}

/// One latency phase: `objects` (indices) moved to revision `rev` at `rate` updates/s.
struct Updates<'a> {
    rate: f64,
    objects: &'a [usize],
    rev: u32,
}

/// Whether the federated objects are created through hubfed's sync-finalizer webhook.
fn admission_finalizer(args: &Args) -> bool {
    args.controller == ControllerKind::Hubfed && !args.no_admission_finalizer
}

/// Whether the federated objects are created and changed through hubfed's validating webhook.
fn admission_validation(args: &Args) -> bool {
    args.controller == ControllerKind::Hubfed && !args.no_admission_validation
}

/// Starts the controller under test; KubeFed's leader-election lock, left by the one before,
/// is released first, and it settles on the hub objects of `namespaces`.
async fn start_controller(
    fed: &Federation,
    settings: &ControllerSettings,
    label: &str,
    namespaces: &[String],
) -> anyhow::Result<ControllerProcess> {
    if settings.kind == ControllerKind::Kubefed {
        super::kubefed::release_lock(&fed.hub).await?;
    }
    Ok(ControllerProcess::start(&fed.env, settings, label)?.with_hub(&fed.hub, namespaces))
}

async fn latency_phase(
    fed: &Federation,
    workload: &Workload,
    under: UnderTest<'_>,
    tracker: &Arc<Tracker>,
    groups: &Groups,
    updates: Updates<'_>,
    timeout: Duration,
) -> anyhow::Result<(Latency, Option<SlowLatency>)> {
    let (controller, agents) = (under.controller, under.agents);
    let Updates { rate, objects, rev } = updates;
    progress(format_args!(
        "propagation latency: {} template updates at {rate}/s (revision {rev})",
        objects.len(),
    ));
    // The tracker keeps every phase's latencies: this phase's are those after these.
    let (offset, offset_healthy, offset_slow, offset_hub, offset_first) = {
        let state = tracker.state();
        (
            state.latencies.len(),
            state.latencies_healthy.len(),
            state.latencies_slow.len(),
            state.hub_watch.len(),
            state.first_member.len(),
        )
    };
    let slow = fed.slow_proxy.is_some();
    let reconciles_before = if slow {
        controller
            .metrics()
            .await?
            .sum("controller_runtime_reconcile_total", &[])
    } else {
        0.0
    };
    let before = member_metrics(controller, agents).await?;
    let webhook_before = validation_answers();
    let cpu_before = CpuSnapshot::take(groups);
    let period = Duration::from_secs_f64(1.0 / rate);
    let mut ticks = tokio::time::interval(period);
    let mut writes = Vec::with_capacity(objects.len());
    let retried = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for &index in objects {
        ticks.tick().await;
        let id = workload.id(index);
        let api =
            hubfed_e2e::dynamic_api(fed.hub.clone(), &id.kind.federated(), Some(&id.namespace));
        let patch = federated_update(&id, rev);
        let sent = Instant::now();
        tracker.expect(index, rev, sent);
        let tracker = Arc::clone(tracker);
        let retried = Arc::clone(&retried);
        writes.push(tokio::spawn(async move {
            // An overloaded hub (etcd timing out at 50 members on 2 cores) may refuse one
            // PATCH: tried again up to twice, the latency still counted from the first send.
            let mut attempt = 0;
            let written = loop {
                let written = api
                    .patch(&id.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                match written {
                    Err(e) if attempt < 2 && transient(&e) => {
                        attempt += 1;
                        retried.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    written => break written,
                }
            };
            match written {
                Ok(_) => Ok(sent.elapsed()),
                Err(e) => {
                    tracker.cancel(index);
                    Err(anyhow::anyhow!(
                        "updating Federated{} {}: {e}",
                        id.kind.name(),
                        id.name
                    ))
                }
            }
        }));
    }
    let mut hub_writes = Vec::new();
    for write in writes {
        hub_writes.push(write.await??);
    }
    let retried = retried.load(std::sync::atomic::Ordering::Relaxed);
    if retried > 0 {
        progress(format_args!(
            "propagation latency: {retried} hub PATCHes of the benchmark sent again after a server error or timeout (latency counted from the first send)"
        ));
    }
    let deadline = Instant::now() + timeout.min(Duration::from_secs(120));
    loop {
        let in_flight = tracker.state().in_flight();
        if in_flight == 0 || Instant::now() >= deadline {
            break;
        }
        controller.ensure_running()?;
        agents.ensure_running()?;
        tracker.changed(Duration::from_millis(500)).await;
    }
    let cpu = CpuUsage::between(&cpu_before, &CpuSnapshot::take(groups));
    wait_settled(controller, agents, timeout).await?;
    let after = member_metrics(controller, agents).await?;
    let webhook_after = validation_answers();
    let (latencies, missing, healthy, slow_latencies, hub_watch, first_member) = {
        let state = tracker.state();
        (
            state.latencies[offset..].to_vec(),
            state.in_flight(),
            state.latencies_healthy[offset_healthy..].to_vec(),
            state.latencies_slow[offset_slow..].to_vec(),
            state.hub_watch[offset_hub..].to_vec(),
            state.first_member[offset_first..].to_vec(),
        )
    };
    let propagation = Percentiles::of(&latencies);
    let slow_phase = if slow {
        let reconciles = controller
            .metrics()
            .await?
            .sum("controller_runtime_reconcile_total", &[])
            - reconciles_before;
        let phase = SlowLatency {
            rate,
            updates: objects.len(),
            healthy: Percentiles::of(&healthy),
            healthy_converged: healthy.len(),
            slow: Percentiles::of(&slow_latencies),
            slow_converged: slow_latencies.len(),
            reconciles,
        };
        progress(format_args!(
            "slow member: to the healthy members p50 {:.0} ms, p99 {:.0} ms ({} converged); to the slow one p50 {:.0} ms, p99 {:.0} ms ({} converged); {reconciles:.0} reconciles",
            phase.healthy.p50_ms,
            phase.healthy.p99_ms,
            phase.healthy_converged,
            phase.slow.p50_ms,
            phase.slow.p99_ms,
            phase.slow_converged
        ));
        Some(phase)
    } else {
        None
    };
    progress(format_args!(
        "propagation latency: p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms; {missing} missing; {}",
        propagation.p50_ms,
        propagation.p90_ms,
        propagation.p99_ms,
        propagation.max_ms,
        cpu.summary()
    ));
    let latency = Latency {
        updates: objects.len(),
        rate,
        converged: latencies.len(),
        missing,
        propagation,
        hub_write: Percentiles::of(&hub_writes),
        hub_watch: Percentiles::of(&hub_watch),
        first_member: Percentiles::of(&first_member),
        member_update_mean_ms: Some(after.mean_ms_since(
            &before,
            "hubfed_member_operation_duration_seconds",
            &[("operation", "update")],
        ))
        .filter(|ms| *ms > 0.0),
        controller_propagation_mean_ms: Some(after.mean_ms_since(
            &before,
            "hubfed_propagation_latency_seconds",
            &[],
        ))
        .filter(|ms| *ms > 0.0),
        webhook_answer_mean_ms: (webhook_after.0 > webhook_before.0).then(|| {
            (webhook_after.1 - webhook_before.1) / (webhook_after.0 - webhook_before.0) as f64 * 1e3
        }),
        member_operations: operations_delta(
            &before.member_operations(),
            &after.member_operations(),
        ),
        cpu,
    };
    Ok((latency, slow_phase))
}

/// The validating webhook of federated objects as this process serves it
/// (`setup::admission_webhooks`): reviews answered and the seconds they took.
fn validation_answers() -> (u64, f64) {
    let answers = hubfed_controller::metrics::METRICS
        .webhook_duration
        .with_label_values(&["validate-federated"]);
    (answers.get_sample_count(), answers.get_sample_sum())
}

/// A hub error worth one more try: the server's own (5xx, `etcdserver: request timed out`)
/// or no answer at all, never a refusal of the request itself.
fn transient(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// A read the benchmark makes of a cluster the run has loaded (a page of ~1 MB member objects,
/// a list of the hub's objects): sent again up to twice after a server error or a connection
/// dropped under load, each retry said in the progress log.
async fn read_retried<T, F, Fut>(what: &str, mut read: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 0;
    loop {
        match read().await {
            Err(e) if attempt < 2 && transient(&e) => {
                attempt += 1;
                progress(format_args!("{what}: {e}; reading again ({attempt} of 2)"));
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            read => return Ok(read?),
        }
    }
}

async fn idle_phase(
    args: &Args,
    fed: &Federation,
    namespaces: &[String],
    under: UnderTest<'_>,
    tracker: &Arc<Tracker>,
    groups: &Groups,
    timeout: Duration,
) -> anyhow::Result<Idle> {
    let (controller, agents) = (under.controller, under.agents);
    let settle = wait_settled(controller, agents, timeout).await?;
    progress(format_args!(
        "at rest: watching member writes for {}s",
        args.idle_seconds
    ));
    let before: Metrics = controller.metrics().await?;
    let member_before = member_metrics(controller, agents).await?;
    let events_before = tracker.state().events;
    let hub_before = hub_versions(&fed.hub, namespaces).await?;
    let (hub_writes_before, leases_before) = apiserver_write_counts(&fed.hub).await?;
    let cpu_before = CpuSnapshot::take(groups);
    let window = Duration::from_secs(args.idle_seconds);
    let began = Instant::now();
    // The window itself is the measurement: sleeping is what it is for.
    loop {
        controller.ensure_running()?;
        agents.ensure_running()?;
        let left = window.saturating_sub(began.elapsed());
        if left.is_zero() {
            break;
        }
        tokio::time::sleep(left.min(Duration::from_secs(15))).await;
        if began.elapsed() < window {
            let writes = member_metrics(controller, agents).await?.member_writes()
                - member_before.member_writes();
            progress(format_args!(
                "at rest: {:.0}s, {writes:.0} member writes so far",
                began.elapsed().as_secs_f64()
            ));
        }
    }
    let cpu = CpuUsage::between(&cpu_before, &CpuSnapshot::take(groups));
    let after = controller.metrics().await?;
    let member_after = member_metrics(controller, agents).await?;
    let events = tracker.state().events - events_before;
    let (hub_writes_after, leases_after) = apiserver_write_counts(&fed.hub).await?;
    let hub_writes = operations_delta(&hub_writes_before, &hub_writes_after);
    let hub_after = hub_versions(&fed.hub, namespaces).await?;
    let changed: Vec<String> = hub_after
        .iter()
        .filter(|(key, version)| hub_before.get(*key) != Some(*version))
        .map(|(key, _)| key.clone())
        .chain(
            hub_before
                .keys()
                .filter(|k| !hub_after.contains_key(*k))
                .map(|k| format!("{k} (gone)")),
        )
        .collect();
    let hub_changed = changed.len();
    if hub_changed > 0 {
        progress(format_args!(
            "at rest: hub objects changed: {}",
            changed
                .iter()
                .take(20)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let seconds = cpu.wall_seconds;
    let member_writes = member_after.member_writes() - member_before.member_writes();
    let reconciles = after.sum("controller_runtime_reconcile_total", &[])
        - before.sum("controller_runtime_reconcile_total", &[]);
    progress(format_args!(
        "at rest: {member_writes:.0} member writes, {events} member watch events, {reconciles:.0} reconciles, {hub_changed} hub objects changed in {seconds:.0}s; controller {:.3} cores",
        cpu.cores_used("controller")
    ));
    Ok(Idle {
        seconds,
        settle_seconds: settle.as_secs_f64(),
        member_writes,
        member_writes_per_minute: member_writes * 60.0 / seconds,
        member_operations: operations_delta(
            &member_before.member_operations(),
            &member_after.member_operations(),
        ),
        member_watch_events: events,
        hub_writes,
        reconciles,
        hub_objects_changed: hub_changed,
        hub_objects_changed_examples: changed.into_iter().take(20).collect(),
        hub_lease_writes: leases_after - leases_before,
        cpu,
    })
}

/// Events on the hub in the benchmark namespaces.
async fn count_hub_events(hub: &Client, namespaces: &[String]) -> anyhow::Result<usize> {
    let mut count = 0;
    for ns in namespaces {
        let events: Api<Event> = Api::namespaced(hub.clone(), ns);
        count += events
            .list_metadata(&ListParams::default())
            .await?
            .items
            .len();
    }
    Ok(count)
}

/// resourceVersion of every hub object the controller writes: in the benchmark namespaces
/// federated objects (their status), FederatedNamespaces and PropagatedVersions; the
/// KubeFedClusters; the Works of pull members (the controller writes them, the agents their
/// status).
async fn hub_versions(
    hub: &Client,
    namespaces: &[String],
) -> anyhow::Result<BTreeMap<String, String>> {
    let all = ListParams::default();
    let mut versions = BTreeMap::new();
    let mut resources: Vec<_> = KINDS.iter().map(|k| k.federated()).collect();
    resources.push(hubfed_e2e::federated("Namespace"));
    for ns in namespaces {
        for resource in &resources {
            let api: Api<DynamicObject> = Api::namespaced_with(hub.clone(), ns, resource);
            for item in read_retried("hub objects", || api.list_metadata(&all))
                .await?
                .items
            {
                versions.insert(
                    format!(
                        "{}/{ns}/{}",
                        resource.kind,
                        item.metadata.name.unwrap_or_default()
                    ),
                    item.metadata.resource_version.unwrap_or_default(),
                );
            }
        }
        let api: Api<PropagatedVersion> = Api::namespaced(hub.clone(), ns);
        for item in read_retried("hub objects", || api.list_metadata(&all))
            .await?
            .items
        {
            versions.insert(
                format!(
                    "PropagatedVersion/{ns}/{}",
                    item.metadata.name.unwrap_or_default()
                ),
                item.metadata.resource_version.unwrap_or_default(),
            );
        }
    }
    let cluster_resource = ApiResource::erase::<KubeFedCluster>(&());
    for resource in [cluster_resource, ApiResource::erase::<Work>(&())] {
        let api: Api<DynamicObject> = Api::all_with(hub.clone(), &resource);
        for item in read_retried("hub objects", || api.list_metadata(&all))
            .await?
            .items
        {
            versions.insert(
                format!(
                    "{}/{}/{}",
                    resource.kind,
                    item.metadata.namespace.unwrap_or_default(),
                    item.metadata.name.unwrap_or_default()
                ),
                item.metadata.resource_version.unwrap_or_default(),
            );
        }
    }
    Ok(versions)
}

/// Count and JSON size of every object of `resource` in the hub, listed in pages.
async fn list_sizes(hub: &Client, resource: &ApiResource) -> anyhow::Result<ObjectSet> {
    let api: Api<DynamicObject> = Api::all_with(hub.clone(), resource);
    let mut set = ObjectSet::default();
    let mut page = ListParams::default().limit(super::workload::list_page());
    loop {
        let list = api
            .list(&page)
            .await
            .with_context(|| format!("listing {}", resource.plural))?;
        for item in &list.items {
            set.count += 1;
            set.bytes += serde_json::to_vec(item)?.len() as u64;
            if let Some(fields) = &item.metadata.managed_fields {
                set.managed_fields_bytes += serde_json::to_vec(fields)?.len() as u64;
            }
            if let Some(status) = item.data.get("status") {
                set.status_bytes += serde_json::to_vec(status)?.len() as u64;
            }
            *set.by_generation
                .entry(item.metadata.generation.unwrap_or(0))
                .or_insert(0) += 1;
        }
        match list.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => page = page.continue_token(&token),
            None => break,
        }
    }
    set.bytes_per_object = set.bytes as f64 / set.count.max(1) as f64;
    Ok(set)
}

/// The hub kube-apiserver's RSS.
fn hub_apiserver_rss(fed: &Federation) -> u64 {
    fed.env
        .hub()
        .pids()
        .into_iter()
        .filter_map(|pid| super::procstat::status_bytes(pid, "VmRSS"))
        .sum()
}

/// Size of etcd's database file (one etcd for every cluster).
fn etcd_db_bytes(fed: &Federation) -> u64 {
    std::fs::metadata(fed.env.dir().join("etcd/member/snap/db")).map_or(0, |m| m.len())
}

/// Reads every managed member object in full and compares it with its template at the
/// revision `revisions[index]`.
async fn verify(
    fed: &Federation,
    workload: &Workload,
    revisions: &[u32],
) -> anyhow::Result<Verification> {
    let mut verification = Verification::default();
    let selector =
        ListParams::default().labels(&format!("{}=true", hubfed_api::names::MANAGED_LABEL));
    for member in &fed.members {
        let mut found = vec![false; workload.objects];
        for kind in KINDS {
            let api: Api<DynamicObject> = Api::all_with(member.clone(), &kind.target());
            // In pages: with `--object-bytes` a member's objects of one kind are gigabytes.
            let mut items = Vec::new();
            let mut page = selector.clone().limit(super::workload::list_page());
            loop {
                let list =
                    read_retried("final check: a page of member objects", || api.list(&page))
                        .await?;
                items.extend(list.items.into_iter().map(|item| {
                    let index = workload.index_of(
                        kind,
                        item.metadata.namespace.as_deref(),
                        item.metadata.name.as_deref().unwrap_or_default(),
                    );
                    let matches = index.map(|index| {
                        serde_json::to_value(&item).is_ok_and(|v| {
                            member_matches(&workload.id(index), revisions[index], &v)
                        })
                    });
                    (index, matches)
                }));
                match list.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(token) => page = page.continue_token(&token),
                    None => break,
                }
            }
            for (index, matches) in items {
                let Some(index) = index else {
                    continue;
                };
                found[index] = true;
                verification.checked += 1;
                if matches == Some(true) {
                    verification.matching += 1;
                } else {
                    verification.wrong += 1;
                }
            }
        }
        verification.missing += found.iter().filter(|f| !**f).count();
    }
    progress(format_args!(
        "final check: {} member objects read back, {} match, {} differ, {} missing",
        verification.checked, verification.matching, verification.wrong, verification.missing
    ));
    Ok(verification)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_cover_every_kind_once_per_object() {
        for (updates, objects) in [(200, 2000), (50, 300), (10, 10), (7, 11), (1, 1), (3, 5)] {
            let chosen = updated_objects(updates, objects);
            assert_eq!(chosen.len(), updates);
            let mut distinct = chosen.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(
                distinct.len(),
                updates,
                "{updates} of {objects}: {chosen:?}"
            );
            assert!(chosen.iter().all(|i| *i < objects));
            for (j, index) in chosen.iter().enumerate() {
                assert_eq!(index % KINDS.len(), j % KINDS.len());
            }
        }
    }
}
