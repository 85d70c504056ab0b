//! `--mcs`: the multi-cluster services controller at scale.
//!
//! Every member serves the MCS CRDs and holds the namespace [`NAMESPACE`]. Service `i` of
//! `--services` is exported from `--exporters` consecutive members (members `i`, `i + 1`, …
//! modulo the member count), each with a selector-less Service, one source EndpointSlice of
//! two endpoints and a ServiceExport, written as a user's controller would (no kubelet). So
//! every member imports every service and holds one derived slice per exporting member,
//! its own included.
//!
//! # Steps
//!
//! 1. [`baseline`]: a controller on the members without exports; its settled RSS.
//! 2. [`write_sources`]: the sources, with no controller running.
//! 3. [`cold_start`]: a new controller → every member holds every ServiceImport and every
//!    derived slice with its source's addresses (watches of both in each member); the member
//!    writes it took (`hubfed_mcs_member_writes_total`).
//! 4. [`latency`]: endpoint changes at a fixed rate, each one endpoint address of one
//!    source slice → the moment the derived slice in every other member shows it.
//! 5. [`idle`]: a quiet window: member writes from the metric and events of the watches.
//!
//! Memory per exported service × cluster is the settled RSS after the cold start minus the
//! baseline's, over services × members.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use hubfed_api::mcs::{self, ServiceExport, ServiceImport};
use hubfed_core::mcs::ENDPOINTSLICE_MANAGED_BY;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, PartialObjectMeta, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::controller::{ControllerProcess, ControllerSettings, Metrics, wait_unchanged};
use super::procstat::{CpuSnapshot, CpuUsage};
use super::setup::{Federation, QUIET, for_each_concurrent};
use super::stats::Percentiles;
use super::{Args, progress};

/// The members' namespace of every exported service.
pub const NAMESPACE: &str = "bench-mcs";
/// The benchmark's field manager for the sources it writes.
const FIELD_MANAGER: &str = "hubfed-bench-mcs";
/// Source writes in flight while the sources are written.
const WRITE_CONCURRENCY: usize = 64;
/// The controller's counter of MCS member writes.
const MEMBER_WRITES: &str = "hubfed_mcs_member_writes_total";
/// How long the latency phase waits for its last changes once every change was sent.
const LATENCY_DRAIN: Duration = Duration::from_secs(120);

/// What one `--mcs` run measured.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct McsResult {
    pub services: usize,
    pub exporters: usize,
    pub members: usize,
    /// Services × members: the import of each service in each member.
    pub pairs: usize,
    /// Per member: ServiceImports and derived EndpointSlices when converged.
    pub imports_per_member: usize,
    pub derived_slices_per_member: usize,
    /// Services, source slices and ServiceExports written by the benchmark.
    pub source_objects: usize,
    pub source_write_seconds: f64,
    pub baseline: Option<McsBaseline>,
    pub cold_start: Option<McsColdStart>,
    pub latency: Option<McsLatency>,
    pub memory: Option<McsMemory>,
    pub idle: Option<McsIdle>,
}

/// The controller on the members before any export.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct McsBaseline {
    pub rss_bytes: u64,
    pub member_writes: f64,
}

/// A new controller on every source already written.
#[derive(Clone, Debug, serde::Serialize)]
pub struct McsColdStart {
    /// From the controller's start to every import and derived slice in every member.
    pub seconds: f64,
    /// From the controller's start to its `/readyz`.
    pub ready_seconds: f64,
    /// From the controller's start to its last member write (writes unchanged for 3 s).
    pub settled_seconds: f64,
    pub member_writes: f64,
    /// By `kind/operation/result`.
    pub member_writes_by_kind: BTreeMap<String, f64>,
    pub writes_per_pair: f64,
    pub writes_per_second: f64,
    pub controller_cpu_seconds: f64,
    pub cpu: CpuUsage,
}

/// Endpoint changes at a fixed rate.
#[derive(Clone, Debug, serde::Serialize)]
pub struct McsLatency {
    pub changes: usize,
    pub rate: f64,
    /// From sending the source slice's apply to the last other member showing the address.
    pub every_other_member: Percentiles,
    /// … to the first other member showing it.
    pub first_member: Percentiles,
    /// The benchmark's own apply of the source slice (its answer).
    pub source_apply: Percentiles,
    /// Changes some other member never showed within the drain time.
    pub missing: usize,
    pub member_writes: f64,
    pub member_writes_by_kind: BTreeMap<String, f64>,
    pub cpu: CpuUsage,
}

/// Controller memory per exported service × cluster.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct McsMemory {
    pub rss_before_exports_bytes: u64,
    pub rss_after_cold_start_bytes: u64,
    pub rss_at_rest_bytes: u64,
    pub peak_bytes: u64,
    /// (RSS after the cold start − RSS before exports) / pairs.
    pub bytes_per_pair: f64,
    /// The same at rest, after the latency phase and the quiet window.
    pub bytes_per_pair_at_rest: f64,
    pub heap: Option<super::report::Heap>,
}

/// The quiet window.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct McsIdle {
    pub seconds: u64,
    /// `hubfed_mcs_member_writes_total`'s growth.
    pub mcs_member_writes: f64,
    /// `hubfed_member_operations_total`'s growth (the sync controllers').
    pub sync_member_operations: f64,
    /// ServiceImport and derived EndpointSlice events seen by the members' watches.
    pub watch_events: u64,
    pub controller_cpu_seconds: f64,
}

/// The shape of the exported services.
#[derive(Clone, Copy, Debug)]
struct Shape {
    services: usize,
    exporters: usize,
    members: usize,
}

impl Shape {
    fn service(i: usize) -> String {
        format!("svc-{i:05}")
    }

    /// The members (indices) exporting service `i`.
    fn exporters_of(&self, i: usize) -> impl Iterator<Item = usize> + use<> {
        let (members, exporters) = (self.members, self.exporters);
        (0..exporters).map(move |j| (i + j) % members)
    }

    /// The addresses of member `m`'s source slice of service `i` at revision `rev`: one fixed
    /// endpoint and one that each change moves.
    fn addresses(m: usize, i: usize, rev: usize) -> Vec<String> {
        let (hi, lo) = (i >> 8, i & 0xff);
        let mut addresses = vec![
            format!("10.{}.{hi}.{lo}", m + 1),
            format!("100.{}.{hi}.{lo}", 64 + rev),
        ];
        addresses.sort();
        addresses
    }

    /// Change `k`: (service, position among its exporters, revision), spread over services
    /// first; each round moves every service's change to its next exporter.
    fn change(&self, k: usize) -> (usize, usize, usize) {
        let round = k / self.services;
        let service = k % self.services;
        (service, (service + round) % self.exporters, round + 1)
    }
}

fn service_body(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
}

fn export_body(name: &str) -> Value {
    json!({"apiVersion": format!("{}/{}", mcs::GROUP, mcs::VERSION), "kind": "ServiceExport",
        "metadata": {"name": name}})
}

fn slice_name(service: &str) -> String {
    format!("{service}-src")
}

fn slice_body(service: &str, addresses: &[String]) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": slice_name(service), "labels": {
            "kubernetes.io/service-name": service,
            "endpointslice.kubernetes.io/managed-by": "bench.hubfed.io",
        }},
        "addressType": "IPv4",
        "endpoints": addresses.iter().map(|a| json!({"addresses": [a],
            "conditions": {"ready": true}})).collect::<Vec<_>>(),
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    })
}

async fn apply<K>(client: &Client, name: &str, body: &Value) -> anyhow::Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), NAMESPACE)
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .with_context(|| format!("applying {name} in {NAMESPACE}"))?;
    Ok(())
}

/// A derived slice as a member's watch saw it.
#[derive(Clone, Debug)]
struct DerivedSlice {
    service: String,
    source: String,
    addresses: Vec<String>,
}

/// A change not yet seen by every other member.
struct Pending {
    address: String,
    sent: Instant,
    waiting: HashSet<usize>,
    first: Option<Duration>,
}

/// What the members' watches saw.
#[derive(Default)]
struct Observed {
    imports: Vec<HashSet<String>>,
    slices: Vec<HashMap<String, DerivedSlice>>,
    /// Events after each watch's first list.
    events: u64,
    /// By (service, source cluster).
    pending: HashMap<(String, String), Pending>,
    latencies: Vec<Duration>,
    first: Vec<Duration>,
}

impl Observed {
    fn slice_seen(&mut self, member: usize, name: String, slice: DerivedSlice) {
        let key = (slice.service.clone(), slice.source.clone());
        if let Some(pending) = self.pending.get_mut(&key)
            && slice.addresses.contains(&pending.address)
            && pending.waiting.remove(&member)
        {
            pending.first.get_or_insert(pending.sent.elapsed());
            if pending.waiting.is_empty() {
                self.latencies.push(pending.sent.elapsed());
                self.first.extend(pending.first);
                self.pending.remove(&key);
            }
        }
        self.slices[member].insert(name, slice);
    }

    /// Members holding every import and every derived slice with its initial addresses.
    fn converged_members(&self, shape: &Shape, names: &[String]) -> usize {
        (0..shape.members)
            .filter(|&m| {
                self.imports[m].len() >= shape.services
                    && self.slices[m]
                        .values()
                        .filter(|s| initial(shape, names, s))
                        .count()
                        >= shape.services * shape.exporters
            })
            .count()
    }
}

/// Whether `slice` holds its source's initial addresses (a source that exports it).
fn initial(shape: &Shape, names: &[String], slice: &DerivedSlice) -> bool {
    let Some(i) = slice
        .service
        .strip_prefix("svc-")
        .and_then(|n| n.parse::<usize>().ok())
    else {
        return false;
    };
    shape
        .exporters_of(i)
        .any(|m| names[m] == slice.source && slice.addresses == Shape::addresses(m, i, 0))
}

type Shared = Arc<Mutex<Observed>>;

fn lock(observed: &Shared) -> std::sync::MutexGuard<'_, Observed> {
    observed.lock().unwrap_or_else(PoisonError::into_inner)
}

fn derived(slice: &EndpointSlice) -> Option<(String, DerivedSlice)> {
    let labels = slice.metadata.labels.as_ref()?;
    let mut addresses: Vec<String> = slice
        .endpoints
        .iter()
        .flatten()
        .flat_map(|e| e.addresses.iter().cloned())
        .collect();
    addresses.sort();
    Some((
        slice.metadata.name.clone()?,
        DerivedSlice {
            service: labels.get(mcs::SERVICE_NAME_LABEL)?.clone(),
            source: labels.get(mcs::SOURCE_CLUSTER_LABEL)?.clone(),
            addresses,
        },
    ))
}

/// Watches every member's derived slices and ServiceImports until `stop`.
fn watch_members(fed: &Federation, observed: &Shared, stop: &CancellationToken) {
    for (m, member) in fed.members.iter().enumerate() {
        let slices: Api<EndpointSlice> = Api::namespaced(member.clone(), NAMESPACE);
        let config = watcher::Config::default().labels(&format!(
            "endpointslice.kubernetes.io/managed-by={ENDPOINTSLICE_MANAGED_BY}"
        ));
        let (observed_slices, stop_slices) = (observed.clone(), stop.clone());
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher::watcher(slices, config));
            let mut listed = false;
            loop {
                let event = tokio::select! {
                    () = stop_slices.cancelled() => return,
                    event = stream.next() => event,
                };
                let mut observed = lock(&observed_slices);
                match event {
                    Some(Ok(watcher::Event::InitApply(slice) | watcher::Event::Apply(slice))) => {
                        observed.events += u64::from(listed);
                        if let Some((name, slice)) = derived(&slice) {
                            observed.slice_seen(m, name, slice);
                        }
                    }
                    Some(Ok(watcher::Event::Delete(slice))) => {
                        observed.events += 1;
                        if let Some(name) = &slice.metadata.name {
                            observed.slices[m].remove(name);
                        }
                    }
                    Some(Ok(watcher::Event::InitDone)) => listed = true,
                    Some(Ok(watcher::Event::Init)) => observed.slices[m].clear(),
                    Some(Err(_)) => {}
                    None => return,
                }
            }
        });
        let imports: Api<PartialObjectMeta<ServiceImport>> =
            Api::namespaced(member.clone(), NAMESPACE);
        let (observed_imports, stop_imports) = (observed.clone(), stop.clone());
        tokio::spawn(async move {
            let config = watcher::Config::default();
            let mut stream = std::pin::pin!(watcher::watcher(imports, config));
            let mut listed = false;
            loop {
                let event = tokio::select! {
                    () = stop_imports.cancelled() => return,
                    event = stream.next() => event,
                };
                let mut observed = lock(&observed_imports);
                match event {
                    Some(Ok(watcher::Event::InitApply(meta) | watcher::Event::Apply(meta))) => {
                        observed.events += u64::from(listed);
                        if let Some(name) = meta.metadata.name {
                            observed.imports[m].insert(name);
                        }
                    }
                    Some(Ok(watcher::Event::Delete(meta))) => {
                        observed.events += 1;
                        if let Some(name) = &meta.metadata.name {
                            observed.imports[m].remove(name);
                        }
                    }
                    Some(Ok(watcher::Event::InitDone)) => listed = true,
                    Some(Ok(watcher::Event::Init)) => observed.imports[m].clear(),
                    Some(Err(_)) => {}
                    None => return,
                }
            }
        });
    }
}

fn mcs_writes(metrics: &Metrics) -> f64 {
    metrics.sum(MEMBER_WRITES, &[])
}

/// The growth of `hubfed_mcs_member_writes_total` by `kind/operation/result`.
fn writes_by_kind(before: &Metrics, after: &Metrics) -> BTreeMap<String, f64> {
    let labels = ["kind", "operation", "result"];
    let before = before.grouped(MEMBER_WRITES, &labels);
    after
        .grouped(MEMBER_WRITES, &labels)
        .into_iter()
        .map(|(k, v)| {
            let was = before.get(&k).copied().unwrap_or(0.0);
            (k, v - was)
        })
        .filter(|(_, v)| *v != 0.0)
        .collect()
}

/// Waits until the controller's MCS member writes stayed unchanged for [`QUIET`]; returns
/// how long until the last one.
async fn wait_mcs_settled(
    controller: &ControllerProcess,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    wait_unchanged(
        "the MCS controller's member writes did not settle",
        QUIET,
        timeout,
        async || {
            controller.ensure_running()?;
            Ok((mcs_writes(&controller.metrics().await?), false))
        },
    )
    .await
}

/// Runs the `--mcs` steps on the clusters of `fed` (no controller running); what was
/// measured before a failure stays in `slot`.
pub async fn run(
    args: &Args,
    fed: &Federation,
    settings: &ControllerSettings,
    timeout: Duration,
    slot: &mut Option<McsResult>,
) -> anyhow::Result<()> {
    let shape = Shape {
        services: args.services,
        exporters: args.exporters.min(fed.members.len()),
        members: fed.members.len(),
    };
    let result = slot.insert(McsResult {
        services: shape.services,
        exporters: shape.exporters,
        members: shape.members,
        pairs: shape.services * shape.members,
        imports_per_member: shape.services,
        derived_slices_per_member: shape.services * shape.exporters,
        source_objects: 3 * shape.services * shape.exporters,
        ..McsResult::default()
    });
    let crds = mcs::crds()?;
    for member in &fed.members {
        hubfed_e2e::install_crds(member, &crds).await?;
    }
    super::setup::create_member_namespaces(&fed.members, &[NAMESPACE.to_owned()]).await?;
    progress(format_args!(
        "mcs: CRDs and namespace {NAMESPACE} in {} members; {} services, each exported from {} members",
        shape.members, shape.services, shape.exporters
    ));
    let baseline = baseline(fed, settings, timeout).await?;
    let rss_before = baseline.rss_bytes;
    result.baseline = Some(baseline);

    let began = Instant::now();
    write_sources(fed, &shape).await?;
    result.source_write_seconds = began.elapsed().as_secs_f64();
    progress(format_args!(
        "mcs: {} source objects written in {:.1}s",
        result.source_objects, result.source_write_seconds
    ));

    let observed: Shared = Arc::new(Mutex::new(Observed {
        imports: vec![HashSet::new(); shape.members],
        slices: vec![HashMap::new(); shape.members],
        ..Observed::default()
    }));
    let stop = CancellationToken::new();
    let _stop_watches = stop.clone().drop_guard();
    watch_members(fed, &observed, &stop);

    let controller = ControllerProcess::start(&fed.env, settings, "mcs")?;
    let cold = cold_start(fed, &controller, &shape, &observed, timeout).await?;
    result.cold_start = Some(cold);
    let rss_after_cold = controller.rss();
    let pairs = result.pairs as f64;
    result.memory = Some(McsMemory {
        rss_before_exports_bytes: rss_before,
        rss_after_cold_start_bytes: rss_after_cold,
        bytes_per_pair: (rss_after_cold as f64 - rss_before as f64) / pairs,
        ..McsMemory::default()
    });
    progress(format_args!(
        "mcs: controller RSS {:.1} MiB before the exports, {:.1} MiB after the cold start: {:.0} B per exported service × cluster",
        rss_before as f64 / 1048576.0,
        rss_after_cold as f64 / 1048576.0,
        (rss_after_cold as f64 - rss_before as f64) / pairs
    ));

    result.latency = Some(latency(args, fed, &controller, &shape, &observed, timeout).await?);
    result.idle = Some(idle(args, fed, &controller, &observed).await?);
    if let Some(memory) = result.memory.as_mut() {
        memory.rss_at_rest_bytes = controller.rss();
        memory.peak_bytes = controller.peak_rss();
        memory.bytes_per_pair_at_rest =
            (memory.rss_at_rest_bytes as f64 - rss_before as f64) / pairs;
        memory.heap = controller.metrics().await?.heap();
    }
    controller.stop();
    Ok(())
}

/// Step 1: a controller on the members before any export, settled; stopped after.
async fn baseline(
    fed: &Federation,
    settings: &ControllerSettings,
    timeout: Duration,
) -> anyhow::Result<McsBaseline> {
    let controller = ControllerProcess::start(&fed.env, settings, "mcs-baseline")?;
    controller.wait_ready(timeout).await?;
    controller.wait_settled(QUIET, timeout).await?;
    // Settled only once every member's MCS watches have started (it serves the CRDs).
    let members = fed.members.len() as f64;
    wait_unchanged(
        "the MCS controller did not see the CRDs of every member",
        Duration::ZERO,
        timeout,
        async || {
            controller.ensure_running()?;
            let served = controller
                .metrics()
                .await?
                .sum("hubfed_mcs_member_crds", &[]);
            Ok((0.0, served < members))
        },
    )
    .await?;
    wait_mcs_settled(&controller, timeout).await?;
    let baseline = McsBaseline {
        rss_bytes: controller.rss(),
        member_writes: mcs_writes(&controller.metrics().await?),
    };
    progress(format_args!(
        "mcs: controller without exports settled: RSS {:.1} MiB, {} MCS member writes (cluster properties)",
        baseline.rss_bytes as f64 / 1048576.0,
        baseline.member_writes
    ));
    controller.stop();
    Ok(baseline)
}

/// Step 2: every exporting member's Service, source slice and ServiceExport.
async fn write_sources(fed: &Federation, shape: &Shape) -> anyhow::Result<()> {
    let pairs: Vec<(usize, usize)> = (0..shape.services)
        .flat_map(|i| shape.exporters_of(i).map(move |m| (i, m)))
        .collect();
    for_each_concurrent(pairs, WRITE_CONCURRENCY, |(i, m)| async move {
        let client = &fed.members[m];
        let name = Shape::service(i);
        apply::<Service>(client, &name, &service_body(&name)).await?;
        let addresses = Shape::addresses(m, i, 0);
        apply::<EndpointSlice>(client, &slice_name(&name), &slice_body(&name, &addresses)).await?;
        apply::<ServiceExport>(client, &name, &export_body(&name)).await
    })
    .await
}

/// Step 3: a new controller until every member holds every import and derived slice.
async fn cold_start(
    fed: &Federation,
    controller: &ControllerProcess,
    shape: &Shape,
    observed: &Shared,
    timeout: Duration,
) -> anyhow::Result<McsColdStart> {
    let cpu_before = CpuSnapshot::take(&fed.groups(Some(controller)));
    let controller_cpu = super::procstat::cpu_seconds(controller.pid).unwrap_or(0.0);
    let ready = controller.wait_ready(timeout).await?;
    let mut last_report = Instant::now();
    let converged = loop {
        controller.ensure_running()?;
        let done = lock(observed).converged_members(shape, &fed.names);
        if done == shape.members {
            break controller.started.elapsed();
        }
        anyhow::ensure!(
            controller.started.elapsed() < timeout,
            "mcs cold start: {done} of {} members converged within {}s",
            shape.members,
            timeout.as_secs()
        );
        if last_report.elapsed() > Duration::from_secs(10) {
            let o = lock(observed);
            let imports: usize = o.imports.iter().map(HashSet::len).sum();
            let slices: usize = o.slices.iter().map(HashMap::len).sum();
            progress(format_args!(
                "mcs cold start: {done} members converged; {imports} imports, {slices} derived slices so far"
            ));
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let cpu = CpuUsage::between(
        &cpu_before,
        &CpuSnapshot::take(&fed.groups(Some(controller))),
    );
    let wait_began = controller.started.elapsed();
    let last_write = wait_began + wait_mcs_settled(controller, timeout).await?;
    let metrics = controller.metrics().await?;
    let writes = mcs_writes(&metrics);
    let pairs = (shape.services * shape.members) as f64;
    let cold = McsColdStart {
        seconds: converged.as_secs_f64(),
        ready_seconds: ready.as_secs_f64(),
        settled_seconds: last_write.as_secs_f64(),
        member_writes: writes,
        member_writes_by_kind: writes_by_kind(&Metrics::default(), &metrics),
        writes_per_pair: writes / pairs,
        writes_per_second: writes / converged.as_secs_f64(),
        controller_cpu_seconds: super::procstat::cpu_seconds(controller.pid).unwrap_or(0.0)
            - controller_cpu,
        cpu,
    };
    progress(format_args!(
        "mcs cold start: every member holds {} imports and {} derived slices {:.1}s after the controller's start (ready at {:.1}s); {} member writes ({:.2} per service × cluster, {:.0}/s); {}",
        shape.services,
        shape.services * shape.exporters,
        cold.seconds,
        cold.ready_seconds,
        cold.member_writes,
        cold.writes_per_pair,
        cold.writes_per_second,
        cold.cpu.summary()
    ));
    Ok(cold)
}

/// Step 4: `--endpoint-changes` at `--endpoint-change-rate`, each timed to every other member.
async fn latency(
    args: &Args,
    fed: &Federation,
    controller: &ControllerProcess,
    shape: &Shape,
    observed: &Shared,
    timeout: Duration,
) -> anyhow::Result<McsLatency> {
    let before = controller.metrics().await?;
    let cpu_before = CpuSnapshot::take(&fed.groups(Some(controller)));
    let changes = args.endpoint_changes;
    let period = Duration::from_secs_f64(1.0 / args.endpoint_change_rate);
    progress(format_args!(
        "mcs latency: {changes} endpoint changes at {}/s",
        args.endpoint_change_rate
    ));
    let mut sends = tokio::task::JoinSet::new();
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for k in 0..changes {
        ticks.tick().await;
        let (i, j, rev) = shape.change(k);
        let m = shape.exporters_of(i).nth(j).context("an exporter")?;
        let service = Shape::service(i);
        let addresses = Shape::addresses(m, i, rev);
        let moved = Shape::addresses(m, i, rev)
            .into_iter()
            .find(|a| a.starts_with("100."))
            .context("the moving endpoint")?;
        let sent = Instant::now();
        let replaced = lock(observed).pending.insert(
            (service.clone(), fed.names[m].clone()),
            Pending {
                address: moved,
                sent,
                waiting: (0..shape.members).filter(|&o| o != m).collect(),
                first: None,
            },
        );
        anyhow::ensure!(
            replaced.is_none(),
            "change {k} of {service} in {} sent before the previous one converged",
            fed.names[m]
        );
        let client = fed.members[m].clone();
        sends.spawn(async move {
            apply::<EndpointSlice>(
                &client,
                &slice_name(&service),
                &slice_body(&service, &addresses),
            )
            .await
            .map(|()| sent.elapsed())
        });
    }
    let mut source_apply = Vec::new();
    while let Some(sent) = sends.join_next().await {
        source_apply.push(sent??);
    }
    let deadline = Instant::now() + LATENCY_DRAIN.min(timeout);
    while !lock(observed).pending.is_empty() && Instant::now() < deadline {
        controller.ensure_running()?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cpu = CpuUsage::between(
        &cpu_before,
        &CpuSnapshot::take(&fed.groups(Some(controller))),
    );
    wait_mcs_settled(controller, timeout).await?;
    let after = controller.metrics().await?;
    let (latencies, first, missing) = {
        let mut o = lock(observed);
        let missing = o.pending.len();
        o.pending.clear();
        (
            std::mem::take(&mut o.latencies),
            std::mem::take(&mut o.first),
            missing,
        )
    };
    let result = McsLatency {
        changes,
        rate: args.endpoint_change_rate,
        every_other_member: Percentiles::of(&latencies),
        first_member: Percentiles::of(&first),
        source_apply: Percentiles::of(&source_apply),
        missing,
        member_writes: mcs_writes(&after) - mcs_writes(&before),
        member_writes_by_kind: writes_by_kind(&before, &after),
        cpu,
    };
    let l = &result.every_other_member;
    progress(format_args!(
        "mcs latency: every other member p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; first member p50 {:.1} ms; {} missing; {} member writes; {}",
        l.p50_ms,
        l.p99_ms,
        l.max_ms,
        result.first_member.p50_ms,
        missing,
        result.member_writes,
        result.cpu.summary()
    ));
    Ok(result)
}

/// Step 5: `--idle-seconds` with no change.
async fn idle(
    args: &Args,
    fed: &Federation,
    controller: &ControllerProcess,
    observed: &Shared,
) -> anyhow::Result<McsIdle> {
    let _ = fed;
    let before = controller.metrics().await?;
    let events_before = lock(observed).events;
    let cpu_before = super::procstat::cpu_seconds(controller.pid).unwrap_or(0.0);
    progress(format_args!(
        "mcs at rest: {} s with no change",
        args.idle_seconds
    ));
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    controller.ensure_running()?;
    let after = controller.metrics().await?;
    let idle = McsIdle {
        seconds: args.idle_seconds,
        mcs_member_writes: mcs_writes(&after) - mcs_writes(&before),
        sync_member_operations: after.sum("hubfed_member_operations_total", &[])
            - before.sum("hubfed_member_operations_total", &[]),
        watch_events: lock(observed).events - events_before,
        controller_cpu_seconds: super::procstat::cpu_seconds(controller.pid).unwrap_or(0.0)
            - cpu_before,
    };
    progress(format_args!(
        "mcs at rest: {} MCS member writes, {} sync member operations, {} watch events in {} s; controller {:.3} CPU-s",
        idle.mcs_member_writes,
        idle.sync_member_operations,
        idle.watch_events,
        idle.seconds,
        idle.controller_cpu_seconds
    ));
    Ok(idle)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1048576.0)
}

fn kinds(writes: &BTreeMap<String, f64>) -> String {
    if writes.is_empty() {
        return "none".to_owned();
    }
    writes
        .iter()
        .map(|(k, v)| format!("{k} {v:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl McsResult {
    /// The variant's table for result.md.
    pub fn markdown(&self) -> String {
        use std::fmt::Write as _;
        let mut md = String::new();
        let _ = writeln!(
            md,
            "### Multi-cluster services (`--mcs`)\n\n{} services in `{NAMESPACE}`, each exported from {} of {} members (a Service, a source EndpointSlice of 2 endpoints and a ServiceExport each: {} source objects, written in {:.1} s); converged, every member holds {} ServiceImports and {} derived slices.\n",
            self.services,
            self.exporters,
            self.members,
            self.source_objects,
            self.source_write_seconds,
            self.imports_per_member,
            self.derived_slices_per_member
        );
        let _ = writeln!(md, "| figure | value |\n| --- | --- |");
        let mut row = |name: &str, value: String| {
            let _ = writeln!(md, "| {name} | {value} |");
        };
        if let Some(b) = &self.baseline {
            row(
                "controller without exports",
                format!(
                    "RSS {}; {} MCS member writes",
                    mib(b.rss_bytes),
                    b.member_writes
                ),
            );
        }
        if let Some(c) = &self.cold_start {
            row(
                "cold start",
                format!(
                    "**{:.1} s** from the controller's start to every import and derived slice in every member (ready at {:.1} s, last write at {:.1} s); **{:.0} member writes**, {:.2} per service × cluster, {:.0}/s ({}); controller {:.1} CPU-s; {}",
                    c.seconds,
                    c.ready_seconds,
                    c.settled_seconds,
                    c.member_writes,
                    c.writes_per_pair,
                    c.writes_per_second,
                    kinds(&c.member_writes_by_kind),
                    c.controller_cpu_seconds,
                    c.cpu.summary()
                ),
            );
        }
        if let Some(l) = &self.latency {
            let e = &l.every_other_member;
            row(
                "endpoint change → every other member",
                format!(
                    "{} changes at {}/s: p50 **{:.1} ms**, p90 {:.1} ms, p99 **{:.1} ms**, max {:.1} ms; first member p50 {:.1} ms, p99 {:.1} ms; the source apply's answer p50 {:.1} ms, p99 {:.1} ms; {} never seen everywhere; {:.0} member writes ({}); {}",
                    l.changes,
                    l.rate,
                    e.p50_ms,
                    e.p90_ms,
                    e.p99_ms,
                    e.max_ms,
                    l.first_member.p50_ms,
                    l.first_member.p99_ms,
                    l.source_apply.p50_ms,
                    l.source_apply.p99_ms,
                    l.missing,
                    l.member_writes,
                    kinds(&l.member_writes_by_kind),
                    l.cpu.summary()
                ),
            );
        }
        if let Some(m) = &self.memory {
            row(
                "controller memory per exported service × cluster",
                format!(
                    "RSS {} before the exports → {} after the cold start: **{:.0} B** per pair ({} pairs); at rest {} ({:.0} B per pair); VmHWM {}{}",
                    mib(m.rss_before_exports_bytes),
                    mib(m.rss_after_cold_start_bytes),
                    m.bytes_per_pair,
                    self.pairs,
                    mib(m.rss_at_rest_bytes),
                    m.bytes_per_pair_at_rest,
                    mib(m.peak_bytes),
                    m.heap
                        .as_ref()
                        .map(|h| format!(
                            "; allocator {} allocated, {} resident",
                            mib(h.allocated_bytes),
                            mib(h.resident_bytes)
                        ))
                        .unwrap_or_default()
                ),
            );
        }
        if let Some(i) = &self.idle {
            row(
                "writes at rest",
                format!(
                    "**{:.0} MCS member writes** in {} s; {:.0} sync member operations; {} import and derived-slice watch events; controller {:.3} CPU-s",
                    i.mcs_member_writes,
                    i.seconds,
                    i.sync_member_operations,
                    i.watch_events,
                    i.controller_cpu_seconds
                ),
            );
        }
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_service_is_exported_from_consecutive_members() {
        let shape = Shape {
            services: 500,
            exporters: 2,
            members: 10,
        };
        assert_eq!(shape.exporters_of(0).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(shape.exporters_of(9).collect::<Vec<_>>(), vec![9, 0]);
        let mut per_member = vec![0; 10];
        for i in 0..500 {
            for m in shape.exporters_of(i) {
                per_member[m] += 1;
            }
        }
        assert_eq!(per_member, vec![100; 10]);
    }

    #[test]
    fn changes_spread_over_services_then_exporters_and_move_one_address() {
        let shape = Shape {
            services: 3,
            exporters: 2,
            members: 4,
        };
        let changes: Vec<_> = (0..7).map(|k| shape.change(k)).collect();
        assert_eq!(
            changes,
            vec![
                (0, 0, 1),
                (1, 1, 1),
                (2, 0, 1),
                (0, 1, 2),
                (1, 0, 2),
                (2, 1, 2),
                (0, 0, 3)
            ]
        );
        let before = Shape::addresses(3, 300, 0);
        let after = Shape::addresses(3, 300, 1);
        assert_eq!(before, vec!["10.4.1.44", "100.64.1.44"]);
        assert_eq!(after, vec!["10.4.1.44", "100.65.1.44"]);
    }

    #[test]
    fn a_change_is_timed_when_the_last_other_member_shows_it() {
        let shape = Shape {
            services: 1,
            exporters: 1,
            members: 3,
        };
        let names: Vec<String> = ["m1", "m2", "m3"].map(String::from).to_vec();
        let mut o = Observed {
            imports: vec![HashSet::from(["svc-00000".to_owned()]); 3],
            slices: vec![HashMap::new(); 3],
            ..Observed::default()
        };
        let slice = |rev| DerivedSlice {
            service: Shape::service(0),
            source: "m1".into(),
            addresses: Shape::addresses(0, 0, rev),
        };
        for m in 0..3 {
            o.slice_seen(m, "d".into(), slice(0));
        }
        assert_eq!(o.converged_members(&shape, &names), 3);
        o.pending.insert(
            (Shape::service(0), "m1".into()),
            Pending {
                address: "100.65.0.0".into(),
                sent: Instant::now(),
                waiting: HashSet::from([1, 2]),
                first: None,
            },
        );
        o.slice_seen(1, "d".into(), slice(0));
        o.slice_seen(1, "d".into(), slice(1));
        assert_eq!((o.latencies.len(), o.pending.len()), (0, 1));
        o.slice_seen(2, "d".into(), slice(1));
        assert_eq!(
            (o.latencies.len(), o.first.len(), o.pending.len()),
            (1, 1, 0)
        );
        assert_eq!(
            o.converged_members(&shape, &names),
            1,
            "m1 still holds rev 0"
        );
    }
}
