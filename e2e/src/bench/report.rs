//! The result of one run: `result.json` (everything measured) and `result.md` (the tables
//! docs/benchmarks.md quotes).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;

use super::procstat::{CpuUsage, Machine};
use super::raw::RawResult;
use super::stats::Percentiles;

/// Target (issue 15): cold start at least this share of the raw apply limit (10 × 2,000).
pub const TARGET_COLD_START_RATIO: f64 = 0.80;
/// Target (issue 15): hub writes per federated object in a cold start, Events aside (they
/// may be one batch for the whole cold start: at most [`TARGET_EVENT_WRITES_PER_OBJECT`]).
pub const TARGET_HUB_WRITES_PER_OBJECT: f64 = 2.0;
pub const TARGET_EVENT_WRITES_PER_OBJECT: f64 = 0.05;
/// Target (issue 15): propagation at light load ([`TARGET_LIGHT_RATE`] updates/s) with
/// 4–10 members, p50 and p99.
pub const TARGET_LIGHT_RATE: f64 = 5.0;
pub const TARGET_LIGHT_MEMBERS: std::ops::RangeInclusive<usize> = 4..=10;
pub const TARGET_LIGHT_P50_MS: f64 = 15.0;
pub const TARGET_LIGHT_P99_MS: f64 = 30.0;
/// Target: propagation p99 at [`TARGET_BUSY_RATE`] updates/s — at most the first (10
/// clusters × 2,000 objects), or the second from [`TARGET_FLEET_MEMBERS`] members on
/// (issue 15: 50 × 1,000).
pub const TARGET_BUSY_RATE: f64 = 20.0;
pub const TARGET_PROPAGATION_P99_MS: f64 = 250.0;
pub const TARGET_FLEET_P99_MS: f64 = 500.0;
pub const TARGET_FLEET_MEMBERS: usize = 50;
/// Target (issue 15): controller RSS at rest at most this per object×cluster pair, judged
/// from [`TARGET_MEMORY_MIN_PAIRS`] pairs on (below, the controller's fixed ~57 MiB
/// outweighs the pairs).
pub const TARGET_BYTES_PER_PAIR: f64 = 4.0 * 1024.0;
pub const TARGET_MEMORY_MIN_PAIRS: usize = 20_000;
/// Target (`--unmanaged`): controller RSS at most this per unmanaged member object.
pub const TARGET_BYTES_PER_UNMANAGED: f64 = 64.0;
/// Target (`--slow-member-ms`): propagation p99 to the healthy members at most this times the
/// p99 of an all-healthy run of the same size.
pub const TARGET_SLOW_MEMBER_P99_FACTOR: f64 = 1.5;
/// Targets beside KubeFed (`hubfed-bench compare`): the 100/s p99 at most this share of
/// KubeFed's, the cold start at least this many times KubeFed's objects/s.
pub const TARGET_BURST_SHARE_OF_KUBEFED: f64 = 0.2;
pub const TARGET_COLD_START_FACTOR_OVER_KUBEFED: f64 = 10.0;

#[derive(Clone, Debug, serde::Serialize)]
pub struct Parameters {
    /// The controller under test: `hubfed` or `kubefed`.
    pub controller: super::controller::ControllerKind,
    pub members: usize,
    pub objects: usize,
    pub pairs: usize,
    pub updates: usize,
    pub rate: f64,
    /// Every latency phase: (updates per second, updates).
    pub rates: Vec<(f64, usize)>,
    pub idle_seconds: u64,
    /// Seconds waited between the cold start and the first latency phase.
    pub pause_seconds: u64,
    pub namespaces: usize,
    pub raw_concurrency: usize,
    pub raw_per_member: usize,
    pub member_write_concurrency: usize,
    pub reconcile_concurrency: u16,
    pub controller_manager: bool,
    /// Phase 6 (`--warm-restart`) ran.
    pub warm_restart: bool,
    pub remote_status: bool,
    /// Members joined in pull mode, each with a `hubfed-agent` process.
    pub pull: bool,
    /// The agents' heartbeat interval (pull mode).
    pub agent_heartbeat_seconds: Option<u64>,
    pub kube_version: String,
    /// The environment's etcd: version and the settings `HUBFED_ETCD_*` change.
    pub etcd: String,
    /// The member API servers' Go memory limit (`HUBFED_MEMBER_APISERVER_GOMEMLIMIT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_memory_limit: Option<String>,
    /// `--slow-member-ms`: the last member is joined through a proxy delaying what it sends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slow_member_ms: Option<u64>,
    /// `--unmanaged`: unmanaged objects created in one member after the at-rest window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unmanaged: Option<usize>,
    /// `--object-bytes`: size of the large value of every ConfigMap and Secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_bytes: Option<usize>,
    /// `--light-members`: the members' API servers run with hubfed-testenv's light flags.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub light_members: bool,
    /// Federated objects created through hubfed's sync-finalizer admission webhook (not with
    /// `--no-admission-finalizer` or `--controller kubefed`).
    pub admission_finalizer: bool,
    /// Federated objects created and changed through hubfed's validating admission webhook
    /// (not with `--no-admission-validation` or `--controller kubefed`).
    pub admission_validation: bool,
    /// `--env-dir`: where the clusters' directory (etcd data included) was, instead of tmpfs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env_dir: Option<String>,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Setup {
    pub clusters_start_seconds: f64,
    pub join_seconds: f64,
    /// Controller RSS with every member joined and the namespaces federated, no objects.
    pub baseline_rss_bytes: u64,
    pub hub_create_seconds: f64,
    pub hub_creates_per_second: f64,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct ColdStart {
    pub pairs: usize,
    /// Controller process started → last member object present.
    pub seconds: f64,
    /// Controller started → `/readyz` answers 200.
    pub ready_seconds: f64,
    /// Controller started → first member object present.
    pub first_object_seconds: f64,
    /// First → last member object.
    pub write_phase_seconds: f64,
    /// pairs / seconds.
    pub objects_per_second: f64,
    /// objects_per_second / raw writes per second.
    pub ratio_to_raw: f64,
    /// pairs / write_phase_seconds over raw writes per second.
    pub ratio_to_raw_write_phase: f64,
    /// CPU per raw write over CPU per cold-start pair, both without other processes' CPU:
    /// the ratio on a quiet machine where both phases are CPU-bound.
    pub ratio_cpu_normalised: f64,
    /// Controller started → no reconcile queued and none for 3 s (statuses written).
    pub settled_seconds: f64,
    pub member_operations: BTreeMap<String, f64>,
    /// Member requests (reads included) per object×cluster pair.
    pub member_requests_per_pair: f64,
    /// Mean duration of member requests by operation, in milliseconds.
    pub member_request_mean_ms: BTreeMap<String, f64>,
    /// Reconciles until settled, and their mean duration.
    pub reconciles: f64,
    pub reconcile_mean_ms: f64,
    /// Writes the hub API server served until settled, by `VERB resource`, and per object.
    pub hub_writes: BTreeMap<String, f64>,
    pub hub_writes_per_object: f64,
    /// Events recorded on the hub in the benchmark namespaces.
    pub hub_events: usize,
    pub cpu: CpuUsage,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Latency {
    pub updates: usize,
    pub rate: f64,
    pub converged: usize,
    pub missing: usize,
    /// Hub write sent → the last placed member shows the new revision.
    pub propagation: Percentiles,
    /// Duration of the hub write itself (the PATCH request).
    pub hub_write: Percentiles,
    /// Hub write sent → a metadata watch of the hub's federated objects gets the change.
    pub hub_watch: Percentiles,
    /// Hub write sent → the first placed member shows the new revision.
    pub first_member: Percentiles,
    /// Mean duration of one member update (apply) as the controller timed it (its
    /// histogram), without the wait for the member's write permit; `None` for KubeFed.
    pub member_update_mean_ms: Option<f64>,
    /// Mean of the controller's `hubfed_propagation_latency_seconds` (its reconcile planned
    /// → the last placed member's write answered); `None` for KubeFed.
    pub controller_propagation_mean_ms: Option<f64>,
    /// Mean time the validating webhook of federated objects (served in the benchmark's
    /// process, on a runtime of its own) took to answer a review of this phase's template
    /// changes — its own share of the hub PATCH, the API server's round trip left out; `None`
    /// when it was not registered (or not called).
    pub webhook_answer_mean_ms: Option<f64>,
    pub member_operations: BTreeMap<String, f64>,
    pub cpu: CpuUsage,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Resources {
    pub rss_after_cold_start_bytes: u64,
    pub rss_after_updates_bytes: u64,
    pub rss_at_rest_bytes: u64,
    pub peak_rss_bytes: u64,
    /// RSS at rest / objects and / pairs.
    pub bytes_per_object: f64,
    pub bytes_per_pair: f64,
    /// (RSS at rest − baseline without objects) / objects and / pairs.
    pub marginal_bytes_per_object: f64,
    pub marginal_bytes_per_pair: f64,
    /// The controller's allocator at rest (`hubfed_heap_bytes`; not exported by KubeFed).
    pub heap_at_rest: Option<Heap>,
    /// Controller CPU seconds for the cold start.
    pub cold_start_cpu_seconds: f64,
    /// Controller cores used during the at-rest window.
    pub cores_at_rest: f64,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Idle {
    pub seconds: f64,
    /// Quiet time waited for before the window (no reconcile for 3 s).
    pub settle_seconds: f64,
    pub member_writes: f64,
    pub member_writes_per_minute: f64,
    pub member_operations: BTreeMap<String, f64>,
    /// Changes to benchmark objects the member watches saw.
    pub member_watch_events: u64,
    /// Writes the hub API server served in the window, by `VERB resource`.
    pub hub_writes: BTreeMap<String, f64>,
    pub reconciles: f64,
    /// Hub objects (federated objects, FederatedNamespaces, PropagatedVersions,
    /// KubeFedClusters, Works) whose resourceVersion changed in the window, and the first of
    /// them (`Kind/namespace/name`).
    pub hub_objects_changed: usize,
    pub hub_objects_changed_examples: Vec<String>,
    /// Lease writes the hub API server served in the window: its own identity Lease and,
    /// in pull mode, the agents' heartbeats (not in `hub_writes`).
    pub hub_lease_writes: f64,
    pub cpu: CpuUsage,
}

/// The `hubfed-agent` processes of a pull run (bytes, in member order).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct AgentResources {
    pub agents: usize,
    pub heartbeat_seconds: u64,
    /// Joined, namespaces delivered, no objects.
    pub baseline_rss_bytes: Vec<u64>,
    pub rss_after_cold_start_bytes: Vec<u64>,
    pub rss_after_updates_bytes: Vec<u64>,
    pub rss_at_rest_bytes: Vec<u64>,
    pub peak_rss_bytes: Vec<u64>,
    /// Sum of the agents' RSS at rest / pairs (each agent holds its member's pairs).
    pub bytes_per_pair: f64,
    /// Agents' CPU seconds (all together) in the cold start, and cores during updates and at
    /// rest.
    pub cold_start_cpu_seconds: f64,
    pub cores_updates: f64,
    pub cores_at_rest: f64,
    /// Agent RSS after the controller's warm restart.
    pub rss_after_restart_bytes: Vec<u64>,
}

/// A set of hub objects as listed from the hub API server (JSON as served).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ObjectSet {
    pub count: usize,
    pub bytes: u64,
    /// Of `bytes`: `metadata.managedFields`, and `status`.
    pub managed_fields_bytes: u64,
    pub status_bytes: u64,
    pub bytes_per_object: f64,
    /// Objects by `metadata.generation` (how often their spec was written).
    pub by_generation: BTreeMap<i64, usize>,
}

/// What the federation takes in the hub, at rest after the updates.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct HubStorage {
    /// `Work`s (pull mode: one per object×pull cluster).
    pub works: ObjectSet,
    /// Works' bytes / object×cluster pairs.
    pub work_bytes_per_pair: f64,
    pub propagated_versions: ObjectSet,
    /// The benchmark's federated objects (templates and status).
    pub federated_objects: ObjectSet,
    /// Hub kube-apiserver RSS with the members joined and no objects, after the cold start,
    /// after the updates, and at rest (after the at-rest window, whose two listings of every
    /// hub object the controller writes are the benchmark's own).
    pub hub_apiserver_rss_baseline_bytes: u64,
    pub hub_apiserver_rss_after_cold_start_bytes: u64,
    pub hub_apiserver_rss_after_updates_bytes: u64,
    pub hub_apiserver_rss_at_rest_bytes: u64,
    /// Size of etcd's database file (every cluster's data and its history until compaction)
    /// before the federated objects are created and at rest.
    pub etcd_db_before_bytes: u64,
    pub etcd_db_at_rest_bytes: u64,
}

/// What the controller's allocator holds (its `hubfed_heap_bytes`): live objects, and the
/// allocator's pages in RAM. RSS minus `resident` is code, stacks and other mappings;
/// `resident` minus `allocated` is the allocator's free pages and metadata.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Heap {
    pub allocated_bytes: u64,
    pub resident_bytes: u64,
}

impl Heap {
    /// "; allocator: N allocated, M resident", or nothing when not exported.
    fn describe(heap: Option<Heap>) -> String {
        heap.map_or(String::new(), |h| {
            format!(
                "; allocator: {} allocated, {} resident",
                mib(h.allocated_bytes),
                mib(h.resident_bytes)
            )
        })
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Restart {
    /// Controller started → every object reconciled and no reconcile for 3 s.
    pub settled_seconds: f64,
    pub member_writes: f64,
    pub member_operations: BTreeMap<String, f64>,
    pub member_watch_events: u64,
    /// Of those: older revisions written back, and spec (generation) changes.
    pub member_regressions: u64,
    pub member_generation_changes: u64,
    pub member_deletions: u64,
    pub hub_writes: BTreeMap<String, f64>,
    pub reconciles: f64,
    /// Status writes with a `Propagation` condition other than `True` (a flap on a converged
    /// federation), and one of them.
    pub propagation_flaps: usize,
    pub propagation_flap_example: Option<serde_json::Value>,
    /// Before the restart: PropagatedVersions recording fewer clusters than placed, with a
    /// templateVersion other than the template's hash, and recorded cluster versions behind
    /// the member object (each makes a restarted controller apply again); one of them.
    pub incomplete_versions: usize,
    pub template_mismatched_versions: usize,
    pub stale_cluster_versions: usize,
    pub version_example: Option<serde_json::Value>,
    /// Federated objects whose status the restarted controller rewrote, and one of them.
    pub status_changes: usize,
    pub status_change_example: Option<serde_json::Value>,
    /// Member clusters whose `Ready` condition changed during the restart (probes that failed
    /// on a saturated machine explain statuses rewritten to `ClusterNotReady` and back).
    pub clusters_flapped: Vec<String>,
    pub rss_bytes: u64,
    /// The restarted controller's allocator once settled.
    pub heap: Option<Heap>,
    pub bytes_per_pair: f64,
    pub marginal_bytes_per_pair: f64,
    pub cpu: CpuUsage,
}

/// `--slow-member-ms`: what the controller's slow view of one member costs the others.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SlowMember {
    /// The slow member (the last one), and the delay its proxy adds to what it sends.
    pub member: String,
    pub delay_ms: u64,
    /// Controller started → every healthy member holds every object.
    pub cold_start_healthy_seconds: f64,
    /// Controller started → the slow member holds every object too.
    pub cold_start_slow_seconds: f64,
    /// Reconciles of the cold start (until settled).
    pub cold_start_reconciles: f64,
    /// Every latency phase, in order.
    pub latencies: Vec<SlowLatency>,
}

/// One latency phase seen from the healthy members and from the slow one.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SlowLatency {
    pub rate: f64,
    pub updates: usize,
    /// Hub write → the last healthy member shows the revision.
    pub healthy: Percentiles,
    pub healthy_converged: usize,
    /// Hub write → the slow member shows the revision.
    pub slow: Percentiles,
    pub slow_converged: usize,
    /// Reconciles during the phase (sending the updates until settled).
    pub reconciles: f64,
}

/// `--unmanaged`: objects the controller does not manage, created in one member.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Unmanaged {
    pub member: String,
    /// Objects asked for, created (half ConfigMaps, half Secrets), failed creates.
    pub requested: usize,
    pub created: usize,
    pub create_errors: usize,
    pub concurrency: usize,
    /// First create sent → last create answered.
    pub create_seconds: f64,
    pub creates_per_second: f64,
    /// `hubfed_unmanaged_objects{cluster=member}` summed over types: before, and when
    /// reached (before + created); first create → gauge reached.
    pub gauge_before: f64,
    pub gauge_after: f64,
    pub gauge_reached_seconds: f64,
    /// Waited after the gauge was reached before measuring.
    pub settle_seconds: f64,
    /// Controller `VmRSS`/`VmHWM` before the creates and after the gauge was reached (and
    /// `settle_seconds`).
    pub rss_before_bytes: u64,
    pub rss_after_bytes: u64,
    pub hwm_before_bytes: u64,
    pub hwm_after_bytes: u64,
    /// (rss_after − rss_before) / created.
    pub bytes_per_object: f64,
    /// The allocator's live heap (`hubfed_heap_bytes{state="allocated"}`) before and after,
    /// and its growth / created: what the controller keeps, without the pages the allocator
    /// holds or gives back meanwhile (which move RSS either way). `None` when not exported.
    pub heap_before_bytes: Option<u64>,
    pub heap_after_bytes: Option<u64>,
    pub heap_bytes_per_object: Option<f64>,
    /// Controller CPU seconds from the first create until measured.
    pub controller_cpu_seconds: f64,
    /// Member requests of the controller meanwhile (expected: no write), and reconciles.
    pub member_writes: f64,
    pub member_operations: BTreeMap<String, f64>,
    pub reconciles: f64,
    pub cpu: CpuUsage,
}

impl Unmanaged {
    /// "**N B** each (A → B)": the live heap's growth per unmanaged object, when exported.
    fn heap_growth(&self) -> Option<String> {
        let (per_object, before, after) = (
            self.heap_bytes_per_object?,
            self.heap_before_bytes?,
            self.heap_after_bytes?,
        );
        Some(format!(
            "**{per_object:.0} B** each ({} → {})",
            mib(before),
            mib(after)
        ))
    }
}

/// `--object-bytes`: throughput in bytes.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct LargeObjects {
    /// Size of each ConfigMap's and Secret's large value.
    pub object_bytes: usize,
    /// JSON bytes of every member object of one member (as applied; Secrets' data in
    /// base64), and of all members.
    pub member_bytes_per_member: u64,
    pub member_bytes: u64,
    /// Raw phase and cold start: member bytes / seconds, in MB/s (10^6 bytes).
    pub raw_mb_per_second: f64,
    pub cold_start_mb_per_second: f64,
    /// Controller `VmHWM` when the cold start converged, and at the end of the run.
    pub controller_peak_rss_after_cold_start_bytes: u64,
    pub controller_peak_rss_bytes: u64,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Verification {
    pub checked: usize,
    pub matching: usize,
    pub wrong: usize,
    pub missing: usize,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Target {
    pub name: String,
    pub goal: String,
    pub measured: String,
    pub met: Option<bool>,
    /// What limited the phase the figure comes from: the machine's CPU, by process group
    /// ([`CpuUsage::limit`]); none for figures no phase's CPU decides (memory, writes at rest).
    pub limited_by: Option<String>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchResult {
    pub date: String,
    pub command: String,
    pub commit: String,
    pub machine: Machine,
    pub parameters: Parameters,
    pub setup: Setup,
    pub raw: Option<RawResult>,
    pub raw_cpu: Option<CpuUsage>,
    pub cold_start: Option<ColdStart>,
    /// The phase at `--rate` (the first).
    pub latency: Option<Latency>,
    /// Every latency phase, in order (the first is `latency`).
    pub latencies: Vec<Latency>,
    pub resources: Resources,
    pub idle: Option<Idle>,
    pub verification: Option<Verification>,
    pub restart: Option<Restart>,
    pub agents: Option<AgentResources>,
    pub hub_storage: Option<HubStorage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slow_member: Option<SlowMember>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unmanaged: Option<Unmanaged>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub large_objects: Option<LargeObjects>,
    /// `--mcs`: the multi-cluster services controller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcs: Option<super::mcs::McsResult>,
    pub targets: Vec<Target>,
    pub error: Option<String>,
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1024.0 / 1024.0)
}

fn kib(bytes: f64) -> String {
    format!("{:.2} KiB", bytes / 1024.0)
}

fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl BenchResult {
    /// Fills `targets` from the figures: issue 15's for a run of this size and kind (and the
    /// first wave's 20/s p99 below 50 members); those beside KubeFed are `compare`'s.
    pub fn judge(&mut self) {
        let p = &self.parameters;
        let mut targets = Vec::new();
        targets.push(match (&self.cold_start, &self.raw) {
            (Some(cold), Some(raw)) => Target {
                name: "Cold start throughput vs raw apply limit".into(),
                goal: format!("≥ {:.0} % (10 × 2,000)", TARGET_COLD_START_RATIO * 100.0),
                measured: format!(
                    "{:.0} % ({:.0} vs {:.0} objects/s; write phase alone {:.0} %; by CPU per object {:.0} %)",
                    cold.ratio_to_raw * 100.0,
                    cold.objects_per_second,
                    raw.writes_per_second,
                    cold.ratio_to_raw_write_phase * 100.0,
                    cold.ratio_cpu_normalised * 100.0
                ),
                met: Some(cold.ratio_to_raw >= TARGET_COLD_START_RATIO),
                limited_by: Some(cold.cpu.limit()),
            },
            _ => not_run("Cold start throughput vs raw apply limit"),
        });
        if let Some(cold) = &self.cold_start {
            targets.push(hub_writes_target(&cold.hub_writes, p.objects));
        }
        let phase = |rate: f64| self.latencies.iter().find(|l| l.rate == rate);
        if TARGET_LIGHT_MEMBERS.contains(&p.members)
            && let Some(l) = phase(TARGET_LIGHT_RATE)
        {
            targets.push(Target {
                name: format!(
                    "Propagation at light load ({TARGET_LIGHT_RATE} updates/s), p50 / p99"
                ),
                goal: format!(
                    "≤ {TARGET_LIGHT_P50_MS:.0} / {TARGET_LIGHT_P99_MS:.0} ms with 4–10 members"
                ),
                measured: format!(
                    "{:.1} / {:.1} ms ({} members, {} updates{})",
                    l.propagation.p50_ms,
                    l.propagation.p99_ms,
                    p.members,
                    l.updates,
                    never_converged(l)
                ),
                met: Some(
                    l.propagation.p50_ms <= TARGET_LIGHT_P50_MS
                        && l.propagation.p99_ms <= TARGET_LIGHT_P99_MS
                        && l.missing == 0,
                ),
                limited_by: Some(l.cpu.limit()),
            });
        }
        let (goal_ms, size) = if p.members >= TARGET_FLEET_MEMBERS {
            (TARGET_FLEET_P99_MS, "50 clusters × 1,000 objects")
        } else {
            (TARGET_PROPAGATION_P99_MS, "10 clusters × 2,000 objects")
        };
        let name = format!("Propagation p99 at {TARGET_BUSY_RATE} updates/s");
        targets.push(match phase(TARGET_BUSY_RATE) {
            Some(l) => Target {
                goal: format!("≤ {goal_ms:.0} ms ({size})"),
                measured: format!(
                    "{:.0} ms (p50 {:.0}, p90 {:.0}; {} clusters × {} objects{})",
                    l.propagation.p99_ms,
                    l.propagation.p50_ms,
                    l.propagation.p90_ms,
                    p.members,
                    thousands(p.objects),
                    never_converged(l)
                ),
                met: Some(l.propagation.p99_ms <= goal_ms && l.missing == 0),
                limited_by: Some(l.cpu.limit()),
                name,
            },
            None => not_run(&name),
        });
        let r = &self.resources;
        targets.push(if r.rss_at_rest_bytes > 0 {
            Target {
                name: "Controller RSS per object×cluster pair".into(),
                goal: format!(
                    "≤ {} at rest (50 × 1,000; judged from {} pairs)",
                    kib(TARGET_BYTES_PER_PAIR),
                    thousands(TARGET_MEMORY_MIN_PAIRS)
                ),
                measured: format!(
                    "{} ({} RSS at rest after the cold start for {} pairs; {} above the no-object baseline){}",
                    kib(r.bytes_per_pair),
                    mib(r.rss_at_rest_bytes),
                    thousands(p.pairs),
                    kib(r.marginal_bytes_per_pair),
                    self.restart.as_ref().map_or(String::new(), |restart| format!(
                        "; after a warm restart {} ({} per pair)",
                        mib(restart.rss_bytes),
                        kib(restart.bytes_per_pair)
                    ))
                ),
                met: (p.pairs >= TARGET_MEMORY_MIN_PAIRS)
                    .then_some(r.bytes_per_pair <= TARGET_BYTES_PER_PAIR),
                limited_by: None,
            }
        } else {
            not_run("Controller RSS per object×cluster pair")
        });
        targets.push(match &self.idle {
            Some(idle) => Target {
                name: "Member writes at rest".into(),
                goal: "0".into(),
                measured: format!(
                    "{:.0} in {:.0} s ({:.1}/min; {} member watch events, {} hub objects changed)",
                    idle.member_writes,
                    idle.seconds,
                    idle.member_writes_per_minute,
                    idle.member_watch_events,
                    idle.hub_objects_changed
                ),
                met: Some(idle.member_writes == 0.0 && idle.member_watch_events == 0),
                limited_by: None,
            },
            None => not_run("Member writes at rest"),
        });
        if let Some(slow) = &self.slow_member {
            targets.push(match slow.latencies.first() {
                Some(l) => Target {
                    name: "Propagation p99 to the healthy members, one member slow".into(),
                    goal: format!(
                        "≤ {TARGET_SLOW_MEMBER_P99_FACTOR} × the p99 of an all-healthy run of the same size (`hubfed-bench compare` this run with that one)"
                    ),
                    measured: format!(
                        "{:.0} ms at {}/s (p50 {:.0}); to the slow member {} ({} ms late): p99 {:.0} ms",
                        l.healthy.p99_ms,
                        l.rate,
                        l.healthy.p50_ms,
                        slow.member,
                        slow.delay_ms,
                        l.slow.p99_ms
                    ),
                    met: None,
                    limited_by: phase(l.rate).map(|phase| phase.cpu.limit()),
                },
                None => not_run("Propagation p99 to the healthy members, one member slow"),
            });
        }
        if let Some(u) = &self.unmanaged {
            let heap = u
                .heap_growth()
                .map_or_else(String::new, |growth| format!("{growth} of live heap, "));
            targets.push(Target {
                name: "Controller memory per unmanaged object".into(),
                goal: format!(
                    "≤ {TARGET_BYTES_PER_UNMANAGED:.0} B (live heap and RSS), no member write"
                ),
                measured: format!(
                    "{heap}{:.0} B by RSS ({} → {}) for {} unmanaged objects in {}; {:.0} member writes",
                    u.bytes_per_object,
                    mib(u.rss_before_bytes),
                    mib(u.rss_after_bytes),
                    thousands(u.created),
                    u.member,
                    u.member_writes
                ),
                // The larger of the two: RSS alone can fall while the heap grows.
                met: Some(
                    u.bytes_per_object.max(u.heap_bytes_per_object.unwrap_or(f64::MIN))
                        <= TARGET_BYTES_PER_UNMANAGED
                        && u.member_writes == 0.0
                        && u.gauge_after >= u.gauge_before + u.created as f64,
                ),
                limited_by: None,
            });
        }
        if let Some(large) = &self.large_objects {
            targets.push(large_objects_target(
                large,
                self.cold_start.as_ref().map(|cold| &cold.cpu),
                self.verification.as_ref(),
            ));
        }
        self.targets = targets;
    }

    pub fn markdown(&self) -> String {
        let p = &self.parameters;
        let mut md = String::new();
        let _ = writeln!(
            md,
            "## hubfed benchmark: {} members × {} objects ({} object×cluster pairs)\n",
            p.members,
            thousands(p.objects),
            thousands(p.pairs)
        );
        let memory_limit = p
            .member_memory_limit
            .as_ref()
            .map(|limit| format!("member API servers with GOMEMLIMIT={limit}, "))
            .unwrap_or_default();
        let _ = writeln!(
            md,
            "- date: {}\n- machine: {} cores ({}), {:.1} GiB RAM, Linux {}\n- command: `{}`\n- commit: {}\n- clusters: Kubernetes {} API servers, one etcd ({}; {}), {}{}\n- remote status collection: {}\n- mode: {}\n",
            self.date,
            self.machine.cores,
            self.machine.cpu_model,
            self.machine.memory_gib,
            self.machine.kernel,
            self.command,
            self.commit,
            p.kube_version,
            if p.env_dir.is_some() {
                "on disk"
            } else {
                "tmpfs"
            },
            p.etcd,
            memory_limit,
            if p.controller_manager {
                "kube-controller-manager per cluster"
            } else {
                "no kube-controller-manager"
            },
            if p.remote_status { "on" } else { "off" },
            match p.agent_heartbeat_seconds {
                Some(beat) if p.pull => format!(
                    "**pull** (`hubfedctl join --mode pull`, one hubfed-agent process per member, heartbeat {beat} s; member requests are the agents')"
                ),
                _ => "push".to_owned(),
            }
        );
        let mut variants = Vec::new();
        if let Some(ms) = p.slow_member_ms {
            variants.push(format!(
                "**slow member**: the last member joined through a proxy holding what its API server sends {ms} ms"
            ));
        }
        if let Some(n) = p.unmanaged {
            variants.push(format!(
                "**unmanaged objects**: {} created in member1 after the at-rest window",
                thousands(n)
            ));
        }
        if let Some(bytes) = p.object_bytes {
            variants.push(format!(
                "**large objects**: every ConfigMap and Secret carries a {} byte value (Deployments keep their small template); the members' watch cache off; the raw phase's objects deleted before the cold start",
                thousands(bytes)
            ));
        }
        if p.light_members {
            variants.push("**light members** (hubfed-testenv's light API server flags)".to_owned());
        }
        if let Some(dir) = &p.env_dir {
            variants.push(format!("clusters' directory (etcd data) under {dir}"));
        }
        if p.controller == super::controller::ControllerKind::Hubfed && !p.admission_finalizer {
            variants.push(
                "**no admission finalizer**: the federated objects created without the sync-finalizer webhook (the controller writes each finalizer)"
                    .to_owned(),
            );
        }
        if p.controller == super::controller::ControllerKind::Hubfed && !p.admission_validation {
            variants.push(
                "**no admission validation**: the federated objects created and changed without hubfed's validating webhook"
                    .to_owned(),
            );
        }
        if !variants.is_empty() {
            let _ = writeln!(md, "- variant: {}\n", variants.join("; "));
        }
        if p.controller == super::controller::ControllerKind::Kubefed {
            let _ = writeln!(
                md,
                "**Controller under test: KubeFed {}'s controller-manager** (hubfed's own CRDs and FTCs; KubeFedConfig with `maxConcurrentReconciles` {}; no warm-restart phase; member writes from its `dispatch_operation_duration_seconds` counts)\n",
                super::kubefed::VERSION,
                p.reconcile_concurrency
            );
        }
        if let Some(error) = &self.error {
            let _ = writeln!(md, "**The run stopped early:** {error}\n");
        }
        md.push_str(
            "| target | goal | measured | met | what limited it |\n| --- | --- | --- | --- | --- |\n",
        );
        for t in &self.targets {
            let met = match (t.met, t.measured.as_str()) {
                (Some(true), _) => "yes",
                (Some(false), _) => "**no**",
                (None, "not measured") => "not run",
                (None, _) => "not judged",
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {met} | {} |",
                t.name,
                t.goal,
                t.measured,
                t.limited_by.as_deref().unwrap_or("–")
            );
        }
        md.push('\n');

        md.push_str("| phase | figure |\n| --- | --- |\n");
        let mut row = |phase: &str, figure: String| {
            let _ = writeln!(md, "| {phase} | {figure} |");
        };
        if let Some(raw) = &self.raw {
            row(
                "raw apply limit",
                format!(
                    "{} SSA writes in {:.1} s = **{:.0} objects/s**; per write p50 {:.1} ms, p99 {:.1} ms ({} in flight, ≤ {} per member, {} errors)",
                    thousands(raw.writes),
                    raw.seconds,
                    raw.writes_per_second,
                    raw.write_latency.p50_ms,
                    raw.write_latency.p99_ms,
                    raw.concurrency,
                    raw.per_member_concurrency,
                    raw.errors
                ),
            );
        }
        if let Some(c) = &self.cold_start {
            row(
                "cold start",
                format!(
                    "{} member objects in **{:.1} s** = {:.0} objects/s ({:.0} % of raw); ready after {:.1} s, first object {:.1} s, write phase {:.1} s ({:.0} % of raw); statuses settled after {:.1} s",
                    thousands(c.pairs),
                    c.seconds,
                    c.objects_per_second,
                    c.ratio_to_raw * 100.0,
                    c.ready_seconds,
                    c.first_object_seconds,
                    c.write_phase_seconds,
                    c.ratio_to_raw_write_phase * 100.0,
                    c.settled_seconds
                ),
            );
            row(
                "cold start member requests",
                format!(
                    "{} ({:.2} per pair); mean duration {}",
                    ops(&c.member_operations),
                    c.member_requests_per_pair,
                    c.member_request_mean_ms
                        .iter()
                        .map(|(op, ms)| format!("{op} {ms:.0} ms"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
            row(
                "cold start hub writes",
                format!(
                    "{} ({:.1} per object); {} Events left on the hub; {:.0} reconciles, mean {:.0} ms",
                    ops(&c.hub_writes),
                    c.hub_writes_per_object,
                    thousands(c.hub_events),
                    c.reconciles,
                    c.reconcile_mean_ms
                ),
            );
        }
        if let Some(l) = &self.latency {
            row(
                "propagation latency",
                format!(
                    "{} updates at {}/s: p50 **{:.0} ms**, p90 {:.0} ms, p99 **{:.0} ms**, max {:.0} ms ({} converged, {} missing); hub PATCH p50 {:.1} ms, p99 {:.1} ms",
                    l.updates,
                    l.rate,
                    l.propagation.p50_ms,
                    l.propagation.p90_ms,
                    l.propagation.p99_ms,
                    l.propagation.max_ms,
                    l.converged,
                    l.missing,
                    l.hub_write.p50_ms,
                    l.hub_write.p99_ms
                ),
            );
            row("where an update's time goes", breakdown(l));
            row("update member requests", ops(&l.member_operations));
        }
        for l in self.latencies.iter().skip(1) {
            row(
                &format!("propagation latency at {}/s", l.rate),
                format!(
                    "{} updates: p50 **{:.0} ms**, p90 {:.0} ms, p99 **{:.0} ms**, max {:.0} ms ({} converged, {} missing); hub PATCH p99 {:.1} ms; {}",
                    l.updates,
                    l.propagation.p50_ms,
                    l.propagation.p90_ms,
                    l.propagation.p99_ms,
                    l.propagation.max_ms,
                    l.converged,
                    l.missing,
                    l.hub_write.p99_ms,
                    ops(&l.member_operations)
                ),
            );
            row(
                &format!("where an update's time goes at {}/s", l.rate),
                breakdown(l),
            );
        }
        let r = &self.resources;
        if r.rss_at_rest_bytes > 0 {
            row(
                "controller memory",
                format!(
                    "RSS {} without objects, {} after cold start, {} after updates, **{} at rest** (peak {}); {} per object, **{} per pair** ({} / {} above baseline){}",
                    mib(self.setup.baseline_rss_bytes),
                    mib(r.rss_after_cold_start_bytes),
                    mib(r.rss_after_updates_bytes),
                    mib(r.rss_at_rest_bytes),
                    mib(r.peak_rss_bytes),
                    kib(r.bytes_per_object),
                    kib(r.bytes_per_pair),
                    kib(r.marginal_bytes_per_object),
                    kib(r.marginal_bytes_per_pair),
                    Heap::describe(r.heap_at_rest)
                ),
            );
            row(
                "controller CPU",
                format!(
                    "{:.1} CPU-s for the cold start ({:.2} cores); {:.2} cores during updates; {:.3} cores at rest",
                    r.cold_start_cpu_seconds,
                    self.cold_start
                        .as_ref()
                        .map_or(0.0, |c| c.cpu.cores_used("controller")),
                    self.latency
                        .as_ref()
                        .map_or(0.0, |l| l.cpu.cores_used("controller")),
                    r.cores_at_rest
                ),
            );
        }
        if let Some(a) = &self.agents {
            let all = |v: &[u64]| mib(v.iter().sum());
            let spread = |v: &[u64]| {
                format!(
                    "{}–{}",
                    mib(v.iter().copied().min().unwrap_or(0)),
                    mib(v.iter().copied().max().unwrap_or(0))
                )
            };
            row(
                "agents memory",
                format!(
                    "{} agents, RSS in all (per agent): {} ({}) without objects, {} ({}) after cold start, {} ({}) after updates, **{} ({}) at rest**, {} after the controller's restart; peak per agent {}; **{} per pair**",
                    a.agents,
                    all(&a.baseline_rss_bytes),
                    spread(&a.baseline_rss_bytes),
                    all(&a.rss_after_cold_start_bytes),
                    spread(&a.rss_after_cold_start_bytes),
                    all(&a.rss_after_updates_bytes),
                    spread(&a.rss_after_updates_bytes),
                    all(&a.rss_at_rest_bytes),
                    spread(&a.rss_at_rest_bytes),
                    all(&a.rss_after_restart_bytes),
                    spread(&a.peak_rss_bytes),
                    kib(a.bytes_per_pair)
                ),
            );
            row(
                "agents CPU",
                format!(
                    "{:.1} CPU-s for the cold start (all agents); {:.2} cores during updates; {:.3} cores at rest",
                    a.cold_start_cpu_seconds, a.cores_updates, a.cores_at_rest
                ),
            );
        }
        if let Some(h) = &self.hub_storage {
            let set = |name: &str, s: &ObjectSet| {
                let n = s.count.max(1) as f64;
                format!(
                    "{} {name}, {} ({:.0} bytes each: {:.0} managedFields, {:.0} status; by generation {})",
                    thousands(s.count),
                    mib(s.bytes),
                    s.bytes_per_object,
                    s.managed_fields_bytes as f64 / n,
                    s.status_bytes as f64 / n,
                    s.by_generation
                        .iter()
                        .map(|(g, c)| format!("{g}: {}", thousands(*c)))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            let works = if h.works.count > 0 {
                format!(
                    "{}; **{:.0} bytes of Works per pair**; ",
                    set("Works", &h.works),
                    h.work_bytes_per_pair
                )
            } else {
                String::new()
            };
            row(
                "hub storage at rest",
                format!(
                    "{works}{}; {}; hub apiserver RSS {} without objects, {} after cold start, {} after updates, {} at rest; etcd db file {} → {} (all clusters, history included)",
                    set("PropagatedVersions", &h.propagated_versions),
                    set("federated objects", &h.federated_objects),
                    mib(h.hub_apiserver_rss_baseline_bytes),
                    mib(h.hub_apiserver_rss_after_cold_start_bytes),
                    mib(h.hub_apiserver_rss_after_updates_bytes),
                    mib(h.hub_apiserver_rss_at_rest_bytes),
                    mib(h.etcd_db_before_bytes),
                    mib(h.etcd_db_at_rest_bytes)
                ),
            );
        }
        if let Some(i) = &self.idle {
            row(
                "at rest",
                format!(
                    "{:.0} s window after {:.1} s quiet: {:.0} member writes, {} member watch events, {:.0} reconciles, {} hub objects changed{}, hub API writes: {}; Lease writes (heartbeats): {:.0}",
                    i.seconds,
                    i.settle_seconds,
                    i.member_writes,
                    i.member_watch_events,
                    i.reconciles,
                    i.hub_objects_changed,
                    if i.hub_objects_changed_examples.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", i.hub_objects_changed_examples.join(", "))
                    },
                    ops(&i.hub_writes),
                    i.hub_lease_writes
                ),
            );
        }
        if let Some(w) = &self.restart {
            row(
                "warm restart",
                format!(
                    "PropagatedVersions before: {} incomplete, {} with another template hash, {} cluster versions behind the member; settled after {:.1} s, {:.0} reconciles; member requests: {}; {} member watch events ({} older revisions, {} spec changes, {} deletions); hub writes: {} ({} statuses changed, {} written without Propagation=True){}; RSS **{}** ({} per pair, {} above baseline){}",
                    w.incomplete_versions,
                    w.template_mismatched_versions,
                    w.stale_cluster_versions,
                    w.settled_seconds,
                    w.reconciles,
                    ops(&w.member_operations),
                    w.member_watch_events,
                    w.member_regressions,
                    w.member_generation_changes,
                    w.member_deletions,
                    ops(&w.hub_writes),
                    w.status_changes,
                    w.propagation_flaps,
                    if w.clusters_flapped.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; **{} members' Ready changed during it** ({}: probes failed, then passed)",
                            w.clusters_flapped.len(),
                            w.clusters_flapped.join(", ")
                        )
                    },
                    mib(w.rss_bytes),
                    kib(w.bytes_per_pair),
                    kib(w.marginal_bytes_per_pair),
                    Heap::describe(w.heap)
                ),
            );
        }
        if let Some(v) = &self.verification {
            row(
                "final check",
                format!(
                    "{} member objects read back: {} match their template, {} differ, {} missing",
                    thousands(v.checked),
                    thousands(v.matching),
                    v.wrong,
                    v.missing
                ),
            );
        }
        if let Some(slow) = &self.slow_member {
            row(
                "slow member: cold start",
                format!(
                    "every healthy member holds every object after **{:.1} s**, the slow member ({}, {} ms) after **{:.1} s**; {:.0} reconciles until settled",
                    slow.cold_start_healthy_seconds,
                    slow.member,
                    slow.delay_ms,
                    slow.cold_start_slow_seconds,
                    slow.cold_start_reconciles
                ),
            );
            for l in &slow.latencies {
                row(
                    &format!("slow member: propagation at {}/s", l.rate),
                    format!(
                        "to the healthy members p50 **{:.0} ms**, p90 {:.0} ms, p99 **{:.0} ms**, max {:.0} ms ({} of {} converged); to the slow member p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms ({} converged); {:.0} reconciles",
                        l.healthy.p50_ms,
                        l.healthy.p90_ms,
                        l.healthy.p99_ms,
                        l.healthy.max_ms,
                        l.healthy_converged,
                        l.updates,
                        l.slow.p50_ms,
                        l.slow.p90_ms,
                        l.slow.p99_ms,
                        l.slow_converged,
                        l.reconciles
                    ),
                );
            }
        }
        if let Some(u) = &self.unmanaged {
            row(
                "unmanaged objects",
                format!(
                    "{} created in {} in {:.1} s ({:.0}/s, {} in flight, {} failed); gauge {:.0} → {:.0} after {:.1} s; controller RSS {} → {} (+{:.0} s) = **{:.0} B per unmanaged object**{}, VmHWM {} → {}; controller {:.1} CPU-s; member requests: {}; {:.0} reconciles",
                    thousands(u.created),
                    u.member,
                    u.create_seconds,
                    u.creates_per_second,
                    u.concurrency,
                    u.create_errors,
                    u.gauge_before,
                    u.gauge_after,
                    u.gauge_reached_seconds,
                    mib(u.rss_before_bytes),
                    mib(u.rss_after_bytes),
                    u.settle_seconds,
                    u.bytes_per_object,
                    u.heap_growth()
                        .map_or_else(String::new, |growth| format!("; live heap {growth}")),
                    mib(u.hwm_before_bytes),
                    mib(u.hwm_after_bytes),
                    u.controller_cpu_seconds,
                    ops(&u.member_operations),
                    u.reconciles
                ),
            );
        }
        if let Some(l) = &self.large_objects {
            row(
                "large objects",
                format!(
                    "{} bytes per ConfigMap/Secret value; {:.1} MB of member objects per member, {:.1} MB in all; raw apply **{:.1} MB/s**, cold start **{:.1} MB/s**; controller VmHWM {} after the cold start, {} at the end",
                    thousands(l.object_bytes),
                    l.member_bytes_per_member as f64 / 1e6,
                    l.member_bytes as f64 / 1e6,
                    l.raw_mb_per_second,
                    l.cold_start_mb_per_second,
                    mib(l.controller_peak_rss_after_cold_start_bytes),
                    mib(l.controller_peak_rss_bytes)
                ),
            );
        }
        row(
            "set-up",
            format!(
                "clusters started in {:.1} s, joined in {:.1} s; {} federated objects created in {:.1} s ({:.0}/s)",
                self.setup.clusters_start_seconds,
                self.setup.join_seconds,
                thousands(p.objects),
                self.setup.hub_create_seconds,
                self.setup.hub_creates_per_second
            ),
        );
        md.push('\n');

        let phases: Vec<(&str, &CpuUsage)> = [
            ("raw apply", self.raw_cpu.as_ref()),
            ("cold start", self.cold_start.as_ref().map(|c| &c.cpu)),
            ("updates", self.latency.as_ref().map(|l| &l.cpu)),
            ("at rest", self.idle.as_ref().map(|i| &i.cpu)),
            ("warm restart", self.restart.as_ref().map(|w| &w.cpu)),
        ]
        .into_iter()
        .filter_map(|(name, cpu)| cpu.map(|c| (name, c)))
        .collect();
        if let Some((_, first)) = phases.first() {
            let groups: Vec<&str> = first.cpu_seconds.keys().copied().collect();
            let _ = writeln!(
                md,
                "CPU by process group (cores used on average; the machine has {}):\n",
                first.cores
            );
            let _ = writeln!(
                md,
                "| phase | seconds | machine busy | {} |",
                groups.join(" | ")
            );
            let _ = writeln!(md, "| --- | --- | --- |{}", " --- |".repeat(groups.len()));
            for (name, cpu) in &phases {
                let cells: Vec<String> = groups
                    .iter()
                    .map(|g| format!("{:.2}", cpu.cores_used(g)))
                    .collect();
                let _ = writeln!(
                    md,
                    "| {name} | {:.1} | {:.0} % | {} |",
                    cpu.wall_seconds,
                    cpu.machine_busy * 100.0,
                    cells.join(" | ")
                );
            }
            // The same CPU per member object written: why a phase is slower than another
            // on a machine that is busy in both.
            let per_object: Vec<(&str, &CpuUsage, usize)> = [
                (
                    "raw apply",
                    self.raw_cpu.as_ref(),
                    self.raw.as_ref().map(|r| r.writes),
                ),
                (
                    "cold start",
                    self.cold_start.as_ref().map(|c| &c.cpu),
                    self.cold_start.as_ref().map(|c| c.pairs),
                ),
            ]
            .into_iter()
            .filter_map(|(name, cpu, n)| Some((name, cpu?, n?)))
            .filter(|(_, _, n)| *n > 0)
            .collect();
            if !per_object.is_empty() {
                let _ = writeln!(
                    md,
                    "\nCPU milliseconds per member object written:\n\n| phase | total | {} |",
                    groups.join(" | ")
                );
                let _ = writeln!(md, "| --- | --- |{}", " --- |".repeat(groups.len()));
                for (name, cpu, n) in per_object {
                    let ms = |seconds: f64| seconds * 1e3 / n as f64;
                    let total: f64 = cpu.cpu_seconds.values().sum();
                    let cells: Vec<String> = groups
                        .iter()
                        .map(|g| {
                            format!("{:.2}", ms(cpu.cpu_seconds.get(g).copied().unwrap_or(0.0)))
                        })
                        .collect();
                    let _ = writeln!(md, "| {name} | {:.2} | {} |", ms(total), cells.join(" | "));
                }
            }
        }
        if let Some(mcs) = &self.mcs {
            let _ = writeln!(md, "\n{}", mcs.markdown());
        }
        md
    }

    /// Writes `result.json` and `result.md` into `dir`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(
            dir.join("result.json"),
            serde_json::to_string_pretty(self)? + "\n",
        )?;
        std::fs::write(dir.join("result.md"), self.markdown())?;
        Ok(())
    }
}

fn not_run(name: &str) -> Target {
    Target {
        name: name.into(),
        goal: String::new(),
        measured: "not measured".into(),
        met: None,
        limited_by: None,
    }
}

/// ", N updates never converged", or nothing.
fn never_converged(l: &Latency) -> String {
    if l.missing > 0 {
        format!(", {} updates never converged", l.missing)
    } else {
        String::new()
    }
}

/// Issue 15's hub writes per federated object in a cold start: the writes other than Events
/// at most two per object, the Events a batch for the whole cold start.
fn hub_writes_target(hub_writes: &BTreeMap<String, f64>, objects: usize) -> Target {
    let objects = objects.max(1) as f64;
    let events: f64 = hub_writes
        .iter()
        .filter(|(write, _)| write.ends_with(" events"))
        .map(|(_, count)| count)
        .sum();
    let all: f64 = hub_writes.values().sum();
    let others = all - events;
    Target {
        name: "Hub writes per federated object, cold start".into(),
        goal: format!(
            "≤ {TARGET_HUB_WRITES_PER_OBJECT:.0} (Events may be one batch: ≤ {TARGET_EVENT_WRITES_PER_OBJECT} per object)"
        ),
        measured: format!(
            "{:.3} ({:.3} per object besides Events; Events {} writes in all)",
            all / objects,
            others / objects,
            thousands(events as usize)
        ),
        met: Some(
            others / objects <= TARGET_HUB_WRITES_PER_OBJECT
                && events / objects <= TARGET_EVENT_WRITES_PER_OBJECT,
        ),
        limited_by: None,
    }
}

/// Issue 15's large objects: every copy converges and reads back equal; the throughput
/// beside the raw limit and the controller's peak RSS are the figures.
/// `cold_start_cpu`: the cold start's CPU, when it converged.
fn large_objects_target(
    large: &LargeObjects,
    cold_start_cpu: Option<&CpuUsage>,
    verification: Option<&Verification>,
) -> Target {
    let checked = verification.map_or_else(
        || "not read back".to_owned(),
        |v| {
            format!(
                "{} of {} read back equal",
                thousands(v.matching),
                thousands(v.checked)
            )
        },
    );
    Target {
        name: "Large objects converge".into(),
        goal: "every copy converges and reads back equal; MB/s beside the raw limit, peak RSS"
            .into(),
        measured: format!(
            "{:.1} MB/s in the cold start ({:.0} % of the raw {:.1} MB/s) for {:.0} MB of member objects; controller VmHWM {} after the cold start, {} in all; {checked}",
            large.cold_start_mb_per_second,
            if large.raw_mb_per_second > 0.0 {
                large.cold_start_mb_per_second / large.raw_mb_per_second * 100.0
            } else {
                0.0
            },
            large.raw_mb_per_second,
            large.member_bytes as f64 / 1e6,
            mib(large.controller_peak_rss_after_cold_start_bytes),
            mib(large.controller_peak_rss_bytes)
        ),
        met: Some(
            cold_start_cpu.is_some()
                && verification
                    .is_some_and(|v| v.checked > 0 && v.matching == v.checked && v.missing == 0),
        ),
        limited_by: cold_start_cpu.map(CpuUsage::limit),
    }
}

/// `create/success 20,000, get/success 20,000`.
/// An update's path in p50s, each from the benchmark's hub PATCH being sent: the PATCH
/// answered, a hub watcher told, the first and the last placed member showing the revision;
/// and the controller's mean member apply.
fn breakdown(l: &Latency) -> String {
    let mut apply = l.member_update_mean_ms.map_or_else(String::new, |ms| {
        format!("; a member apply {ms:.1} ms on average (controller's histogram)")
    });
    if let Some(ms) = l.controller_propagation_mean_ms {
        apply += &format!(", planned → last apply answered {ms:.1} ms on average");
    }
    let webhook = l.webhook_answer_mean_ms.map_or_else(String::new, |ms| {
        format!(" (the validating webhook's own answer {ms:.2} ms on average)")
    });
    format!(
        "p50 from the hub PATCH sent: answered {:.1} ms{webhook}, hub watch event {:.1} ms, first member {:.1} ms, last member {:.1} ms ({} of {} updates seen by the hub watch before their last member){apply}",
        l.hub_write.p50_ms,
        l.hub_watch.p50_ms,
        l.first_member.p50_ms,
        l.propagation.p50_ms,
        l.hub_watch.count,
        l.updates,
    )
}

fn ops(operations: &BTreeMap<String, f64>) -> String {
    if operations.is_empty() {
        return "none".into();
    }
    operations
        .iter()
        .map(|(k, v)| format!("{k} {}", thousands(*v as usize)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writes(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    #[test]
    fn hub_writes_count_events_as_one_batch() {
        // hubfed at 10 × 2,000: a status and a PropagatedVersion per object, nine Event writes.
        let batch = hub_writes_target(
            &writes(&[
                ("PATCH events", 6.0),
                ("PATCH federatedconfigmaps/status", 1000.0),
                ("PATCH federatedsecrets/status", 1000.0),
                ("POST events", 3.0),
                ("POST propagatedversions", 2000.0),
            ]),
            2000,
        );
        assert_eq!(batch.met, Some(true));
        assert!(
            batch
                .measured
                .starts_with("2.005 (2.000 per object besides Events; Events 9"),
            "{}",
            batch.measured
        );
        // KubeFed's protocol: PropagatedVersion create and status, an Event per object and more.
        let kubefed = hub_writes_target(
            &writes(&[
                ("POST events", 2000.0),
                ("POST propagatedversions", 2000.0),
                ("PUT federatedconfigmaps/status", 2000.0),
                ("PUT propagatedversions/status", 2000.0),
            ]),
            2000,
        );
        assert_eq!(kubefed.met, Some(false));
        // Two writes per object, but an Event for each: not a batch.
        let events = hub_writes_target(
            &writes(&[("POST events", 2000.0), ("POST propagatedversions", 2000.0)]),
            2000,
        );
        assert_eq!(events.met, Some(false));
        // A third write for some objects.
        let third = hub_writes_target(
            &writes(&[
                ("PATCH federatedconfigmaps/status", 2100.0),
                ("POST propagatedversions", 2000.0),
            ]),
            2000,
        );
        assert_eq!(third.met, Some(false));
    }

    #[test]
    fn large_objects_converge_only_when_every_copy_reads_back_equal() {
        let large = LargeObjects {
            object_bytes: 900_000,
            member_bytes_per_member: 700_000_000,
            member_bytes: 7_000_000_000,
            raw_mb_per_second: 46.0,
            cold_start_mb_per_second: 32.2,
            controller_peak_rss_after_cold_start_bytes: 1000 << 20,
            controller_peak_rss_bytes: 1010 << 20,
        };
        let equal = Verification {
            checked: 10_000,
            matching: 10_000,
            wrong: 0,
            missing: 0,
        };
        let target = large_objects_target(&large, None, Some(&equal));
        // No cold start converged: not met, whatever was read back.
        assert_eq!(target.met, Some(false));
        assert!(
            target
                .measured
                .starts_with("32.2 MB/s in the cold start (70 % of the raw 46.0 MB/s) for 7000 MB"),
            "{}",
            target.measured
        );
        assert!(target.measured.contains("VmHWM 1000.0 MiB after the cold start, 1010.0 MiB in all; 10,000 of 10,000 read back equal"), "{}", target.measured);
        let one_wrong = Verification {
            matching: 9_999,
            wrong: 1,
            ..equal.clone()
        };
        // The cold start converged: met when every copy read back equal, and no sooner.
        let cold_start = CpuUsage {
            wall_seconds: 200.0,
            cores: 2,
            machine_busy: 1.0,
            cpu_seconds: BTreeMap::from([("member apiservers", 288.0)]),
        };
        let converged = large_objects_target(&large, Some(&cold_start), Some(&equal));
        assert_eq!(converged.met, Some(true));
        assert_eq!(
            converged.limited_by.as_deref(),
            Some("machine 100 % busy of 2 cores: member apiservers 72 %")
        );
        let wrong = large_objects_target(&large, Some(&cold_start), Some(&one_wrong));
        assert_eq!(wrong.met, Some(false));
        assert!(
            wrong.measured.contains("9,999 of 10,000"),
            "{}",
            wrong.measured
        );
        assert_eq!(
            large_objects_target(&large, Some(&cold_start), None).met,
            Some(false)
        );
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(20000), "20,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }
}
