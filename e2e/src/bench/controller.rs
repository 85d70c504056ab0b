//! The controller process under test: `hubfed-controller` started from its release binary with
//! leader election off, or KubeFed's controller-manager (`--controller kubefed`, see
//! `kubefed.rs`); stopped by its guardian even if the benchmark dies, observed through `/proc`
//! and its `/metrics`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hubfed_e2e::controller::{log_filter, spawn_guarded};
use hubfed_e2e::http_get;
use hubfed_testenv::TestEnv;
use hubfed_testenv::process::{GuardedProcess, Spawn};

use super::procstat;

/// Member requests that change something (`hubfed_member_operations_total{operation}`).
pub const WRITE_OPERATIONS: [&str; 4] = ["create", "update", "delete", "remove_label"];
/// KubeFed's member writes: its dispatcher's calls by `action` (create, update, delete).
const KUBEFED_DISPATCH_COUNT: &str = "dispatch_operation_duration_seconds_count";
/// KubeFed requeues with delays and has no queue gauge: it must be quiet this long at least.
pub const KUBEFED_QUIET: Duration = Duration::from_secs(5);

/// Which controller is under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ControllerKind {
    /// `hubfed-controller`.
    Hubfed,
    /// KubeFed v0.10.0's controller-manager (`hack/build-kubefed.sh`).
    Kubefed,
}

/// How the controller is started.
pub struct ControllerSettings {
    pub kind: ControllerKind,
    pub binary: PathBuf,
    pub member_write_concurrency: usize,
    pub reconcile_concurrency: u16,
    pub log_dir: PathBuf,
    /// Extra environment (`KEY=VALUE`), e.g. allocator settings for a diagnosis.
    pub env: Vec<(String, String)>,
}

/// A running controller.
pub struct ControllerProcess {
    process: GuardedProcess,
    pub pid: u32,
    pub admin_port: u16,
    /// Where readiness is asked: hubfed's `/readyz` on the admin port, KubeFed's `/healthz`
    /// on its own port (it answers as soon as the process serves).
    ready: (u16, &'static str),
    pub kind: ControllerKind,
    /// KubeFed: the hub, and the namespaces whose objects must stay unchanged to be settled.
    hub: Option<(kube::Client, Vec<String>)>,
    pub started: Instant,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(hubfed_testenv::free_port()?)
}

impl ControllerProcess {
    /// Starts the controller against the hub of `env`; `label` names its log file.
    pub fn start(
        env: &TestEnv,
        settings: &ControllerSettings,
        label: &str,
    ) -> anyhow::Result<Self> {
        let admin_port = free_port()?;
        let pid_dir = env.dir().join("bench-pids");
        let log_file = settings.log_dir.join(format!("controller-{label}.log"));
        let mut environment = vec![("RUST_LOG", log_filter("HUBFED_BENCH_CONTROLLER_LOG"))];
        environment.extend(settings.env.iter().map(|(k, v)| (k.as_str(), v.clone())));
        let (name, args, ready) = match settings.kind {
            ControllerKind::Hubfed => (
                format!("hubfed-controller-{label}"),
                vec![
                    format!("--kubeconfig={}", env.kubeconfig_path().display()),
                    "--context=hub".to_owned(),
                    format!("--admin-addr=127.0.0.1:{admin_port}"),
                    "--leader-elect=false".to_owned(),
                    format!(
                        "--member-write-concurrency={}",
                        settings.member_write_concurrency
                    ),
                    format!("--reconcile-concurrency={}", settings.reconcile_concurrency),
                ],
                (admin_port, "/readyz"),
            ),
            ControllerKind::Kubefed => {
                let healthz_port = free_port()?;
                (
                    format!("kubefed-controller-manager-{label}"),
                    super::kubefed::args(env, admin_port, healthz_port),
                    (healthz_port, "/healthz"),
                )
            }
        };
        let started = Instant::now();
        let (process, pid) = spawn_guarded(
            "the controller",
            Spawn {
                name: &name,
                program: &settings.binary,
                args,
                env: environment,
                pid_dir: &pid_dir,
                log_file,
                grace_seconds: 10,
                outlive_others: false,
                remove_dir_after: None,
            },
        )?;
        Ok(Self {
            process,
            pid,
            admin_port,
            ready,
            kind: settings.kind,
            hub: None,
            started,
        })
    }

    /// Settled (KubeFed) also means: no object in the hub's `namespaces` changed for the quiet
    /// time, as KubeFed has no work-queue gauge.
    pub fn with_hub(mut self, hub: &kube::Client, namespaces: &[String]) -> Self {
        self.hub = Some((hub.clone(), namespaces.to_vec()));
        self
    }

    /// Fails with the end of the log when the controller has exited.
    pub fn ensure_running(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.process.is_alive(),
            "the controller exited; last log lines:\n{}",
            self.process.log_tail(30)
        );
        Ok(())
    }

    /// Resident memory now, in bytes.
    pub fn rss(&self) -> u64 {
        procstat::status_bytes(self.pid, "VmRSS").unwrap_or(0)
    }

    /// Peak resident memory, in bytes.
    pub fn peak_rss(&self) -> u64 {
        procstat::status_bytes(self.pid, "VmHWM").unwrap_or(0)
    }

    /// Polls `/readyz` (KubeFed: `/healthz`) until it answers 200.
    pub async fn wait_ready(&self, timeout: Duration) -> anyhow::Result<Duration> {
        let deadline = Instant::now() + timeout;
        loop {
            self.ensure_running()?;
            if let Some((status, _)) = http_get(self.ready.0, self.ready.1).await
                && status == 200
            {
                return Ok(self.started.elapsed());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the controller was not ready within {}s",
                timeout.as_secs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The current metrics.
    pub async fn metrics(&self) -> anyhow::Result<Metrics> {
        let (status, body) = http_get(self.admin_port, "/metrics")
            .await
            .context("scraping the controller's /metrics")?;
        anyhow::ensure!(status == 200, "/metrics answered {status}");
        Ok(Metrics::parse(&body))
    }

    /// Waits until the controller has nothing left to do: no reconcile queued or running and
    /// the reconcile count unchanged for `quiet`. Returns how long that took.
    ///
    /// KubeFed counts its reconciles under the same name but has no queue gauge (and requeues
    /// with delays): it is settled when its reconcile count and every hub object of the
    /// benchmark (federated objects, FederatedNamespaces, PropagatedVersions) stayed unchanged
    /// for `quiet`, at least [`KUBEFED_QUIET`].
    pub async fn wait_settled(
        &self,
        quiet: Duration,
        timeout: Duration,
    ) -> anyhow::Result<Duration> {
        if self.kind == ControllerKind::Kubefed {
            let (hub, namespaces) = self
                .hub
                .as_ref()
                .context("KubeFed settles on hub objects: no hub given")?;
            let mut previous = None;
            return wait_unchanged(
                "KubeFed did not settle",
                quiet.max(KUBEFED_QUIET),
                timeout,
                async || {
                    self.ensure_running()?;
                    let reconciles = self
                        .metrics()
                        .await?
                        .sum("controller_runtime_reconcile_total", &[]);
                    let versions = super::kubefed::hub_fingerprint(hub, namespaces).await?;
                    let moved = previous.replace(versions) != Some(versions);
                    Ok((reconciles, moved))
                },
            )
            .await;
        }
        // A member not Ready is not settled either: its objects are reconciled again (and
        // their status rewritten) once it is back, and a restart whose members' probes
        // failed for a while (a saturated machine) must not pass for settled meanwhile.
        wait_unchanged(
            "the controller did not settle (reconciles queued, or a member cluster not Ready)",
            quiet,
            timeout,
            async || {
                self.ensure_running()?;
                let metrics = self.metrics().await?;
                let reconciles = metrics.sum("controller_runtime_reconcile_total", &[]);
                let depth = metrics.sum("hubfed_workqueue_depth", &[]);
                let unready = metrics
                    .samples
                    .iter()
                    .any(|s| s.name == "hubfed_cluster_ready" && s.value == 0.0);
                Ok((reconciles, depth > 0.0 || unready))
            },
        )
        .await
    }

    /// Waits until at least `count` reconciles have run (a fresh controller is quiet while
    /// its caches fill, which must not pass for settled).
    pub async fn wait_reconciles(&self, count: f64, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            self.ensure_running()?;
            let done = self
                .metrics()
                .await?
                .sum("controller_runtime_reconcile_total", &[]);
            if done >= count {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "only {done} of {count} reconciles within {}s",
                timeout.as_secs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops the controller (SIGTERM, SIGKILL after 10 s) and waits for it.
    pub fn stop(mut self) {
        self.process.stop();
    }
}

/// One Prometheus sample.
#[derive(Clone, Debug)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// A parsed text exposition.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    samples: Vec<Sample>,
}

impl Metrics {
    pub fn parse(text: &str) -> Self {
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|line| {
                let (series, value) = line.rsplit_once(' ')?;
                let value: f64 = value.parse().ok()?;
                let (name, labels) = match series.split_once('{') {
                    Some((name, rest)) => (name, rest.trim_end_matches('}')),
                    None => (series, ""),
                };
                let labels = labels
                    .split(',')
                    .filter_map(|pair| {
                        let (k, v) = pair.split_once('=')?;
                        Some((k.trim().to_owned(), v.trim().trim_matches('"').to_owned()))
                    })
                    .collect();
                Some(Sample {
                    name: name.to_owned(),
                    labels,
                    value,
                })
            })
            .collect();
        Self { samples }
    }

    /// Sum of the series of `name` carrying every label pair of `with`.
    pub fn sum(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                with.iter()
                    .all(|(k, v)| s.labels.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|s| s.value)
            .sum::<f64>()
            // An empty float sum is -0.0, which prints as "-0".
            + 0.0
    }

    /// The series of `name` summed by the values of `labels`, joined by `/`.
    pub fn grouped(&self, name: &str, labels: &[&str]) -> std::collections::BTreeMap<String, f64> {
        let mut groups = std::collections::BTreeMap::new();
        for sample in self.samples.iter().filter(|s| s.name == name) {
            let key: Vec<&str> = labels
                .iter()
                .map(|label| {
                    sample
                        .labels
                        .iter()
                        .find(|(k, _)| k == label)
                        .map_or("", |(_, v)| v.as_str())
                })
                .collect();
            *groups.entry(key.join("/")).or_insert(0.0) += sample.value;
        }
        groups
    }

    /// The allocator's figures (`hubfed_heap_bytes`), when the controller exports them.
    pub fn heap(&self) -> Option<super::report::Heap> {
        let state = |state| self.sum("hubfed_heap_bytes", &[("state", state)]) as u64;
        let heap = super::report::Heap {
            allocated_bytes: state("allocated"),
            resident_bytes: state("resident"),
        };
        (heap.resident_bytes > 0).then_some(heap)
    }

    /// Mean of histogram `name` (from `<name>_sum` / `<name>_count`), in milliseconds.
    pub fn mean_ms(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        let count = self.sum(&format!("{name}_count"), with);
        if count == 0.0 {
            return 0.0;
        }
        self.sum(&format!("{name}_sum"), with) / count * 1e3
    }

    /// [`Metrics::mean_ms`] of the observations made since `before`.
    pub fn mean_ms_since(&self, before: &Metrics, name: &str, with: &[(&str, &str)]) -> f64 {
        let count_name = format!("{name}_count");
        let sum_name = format!("{name}_sum");
        let count = self.sum(&count_name, with) - before.sum(&count_name, with);
        if count <= 0.0 {
            return 0.0;
        }
        (self.sum(&sum_name, with) - before.sum(&sum_name, with)) / count * 1e3
    }

    /// Member requests that change something, over all clusters and results (KubeFed:
    /// `dispatch_operation_duration_seconds_count{action}`, its dispatcher's create, update and
    /// delete calls).
    pub fn member_writes(&self) -> f64 {
        let count = |metric: &str, label: &str| -> f64 {
            WRITE_OPERATIONS
                .iter()
                .map(|op| self.sum(metric, &[(label, op)]))
                .sum()
        };
        // hubfed also serves KubeFed's dispatch histogram, counting the same writes.
        if self.is_hubfed() {
            count("hubfed_member_operations_total", "operation")
        } else {
            count(KUBEFED_DISPATCH_COUNT, "action")
        }
    }

    /// The scraped controller is hubfed (it serves `hubfed_member_operations_total`).
    fn is_hubfed(&self) -> bool {
        self.samples
            .iter()
            .any(|s| s.name == "hubfed_member_operations_total")
    }

    /// `hubfed_member_operations_total` by `operation/result`.
    pub fn member_operations(&self) -> std::collections::BTreeMap<String, f64> {
        let mut by = std::collections::BTreeMap::new();
        for s in self
            .samples
            .iter()
            .filter(|s| s.name == "hubfed_member_operations_total")
        {
            let label = |k: &str| {
                s.labels
                    .iter()
                    .find(|(lk, _)| lk == k)
                    .map_or("", |(_, v)| v.as_str())
            };
            *by.entry(format!("{}/{}", label("operation"), label("result")))
                .or_insert(0.0) += s.value;
        }
        // KubeFed's dispatch histogram only for KubeFed: hubfed's counts the same writes.
        let kubefed = !self.is_hubfed();
        for s in self
            .samples
            .iter()
            .filter(|s| kubefed && s.name == KUBEFED_DISPATCH_COUNT)
        {
            let action = s
                .labels
                .iter()
                .find(|(k, _)| k == "action")
                .map_or("", |(_, v)| v.as_str());
            *by.entry(format!("{action}/dispatched")).or_insert(0.0) += s.value;
        }
        by
    }
}

/// Write requests an API server has served, by `VERB resource[/subresource]`
/// (`apiserver_request_total`), from its `/metrics`.
pub async fn apiserver_writes(
    client: &kube::Client,
) -> anyhow::Result<std::collections::BTreeMap<String, f64>> {
    Ok(apiserver_write_counts(client).await?.0)
}

/// [`apiserver_writes`], and apart from them the writes of Leases (the API server's own
/// identity heartbeat, and with `--pull` the agents' heartbeats).
pub async fn apiserver_write_counts(
    client: &kube::Client,
) -> anyhow::Result<(std::collections::BTreeMap<String, f64>, f64)> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client
        .request_text(request)
        .await
        .context("scraping the hub API server's /metrics")?;
    let metrics = Metrics::parse(&text);
    let mut by = std::collections::BTreeMap::new();
    let mut leases = 0.0;
    for s in metrics
        .samples
        .iter()
        .filter(|s| s.name == "apiserver_request_total")
    {
        let label = |k: &str| {
            s.labels
                .iter()
                .find(|(lk, _)| lk == k)
                .map_or("", |(_, v)| v.as_str())
        };
        let verb = label("verb");
        if matches!(verb, "GET" | "LIST" | "WATCH" | "CONNECT" | "") {
            continue;
        }
        // Leases: the API server's own identity heartbeat (the controller runs without
        // leader election) and the agents' heartbeats, counted apart.
        if label("resource") == "leases" {
            leases += s.value;
            continue;
        }
        let subresource = label("subresource");
        let mut key = if subresource.is_empty() {
            format!("{verb} {}", label("resource"))
        } else {
            format!("{verb} {}/{subresource}", label("resource"))
        };
        // Refused writes (e.g. 409 for a create of an existing object) are told apart.
        let code = label("code");
        if !code.starts_with('2') {
            key = format!("{key} ({code})");
        }
        *by.entry(key).or_insert(0.0) += s.value;
    }
    Ok((by, leases))
}

/// Differences `after - before` of two `member_operations` maps, dropping zeros.
pub fn operations_delta(
    before: &std::collections::BTreeMap<String, f64>,
    after: &std::collections::BTreeMap<String, f64>,
) -> std::collections::BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v != 0.0)
        .collect()
}

/// Polls `sample` (a count, and whether work is still queued) every 250 ms until the count
/// has stayed the same, with nothing queued, for `quiet`; returns how long until it last
/// changed. Fails with `failure` after `timeout`.
pub async fn wait_unchanged(
    failure: &str,
    quiet: Duration,
    timeout: Duration,
    mut sample: impl AsyncFnMut() -> anyhow::Result<(f64, bool)>,
) -> anyhow::Result<Duration> {
    let began = Instant::now();
    let mut last = (f64::NAN, Instant::now());
    loop {
        let (count, busy) = sample().await?;
        if count != last.0 || busy {
            last = (count, Instant::now());
        } else if last.1.elapsed() >= quiet {
            return Ok(last.1.duration_since(began));
        }
        anyhow::ensure!(
            began.elapsed() < timeout,
            "{failure} within {}s",
            timeout.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_sums_samples() {
        let m = Metrics::parse(
            "# HELP x\n\
             hubfed_member_operations_total{cluster=\"member1\",operation=\"create\",result=\"success\"} 3\n\
             hubfed_member_operations_total{cluster=\"member2\",operation=\"create\",result=\"success\"} 4\n\
             hubfed_member_operations_total{cluster=\"member2\",operation=\"get\",result=\"success\"} 7\n\
             hubfed_member_operations_total{cluster=\"member2\",operation=\"update\",result=\"error\"} 1\n\
             hubfed_leader 1\n",
        );
        assert_eq!(m.member_writes(), 8.0);
        assert_eq!(m.sum("hubfed_leader", &[]), 1.0);
        assert_eq!(m.member_operations()["create/success"], 7.0);
        assert_eq!(m.member_operations()["get/success"], 7.0);
        let by_operation = m.grouped("hubfed_member_operations_total", &["operation", "result"]);
        assert_eq!(by_operation["create/success"], 7.0);
        assert_eq!(by_operation["update/error"], 1.0);
    }

    #[test]
    fn mean_since_takes_only_the_new_observations() {
        let series = |sum: f64, count: f64| {
            Metrics::parse(&format!(
                "d_seconds_sum{{operation=\"get\"}} {sum}\nd_seconds_count{{operation=\"get\"}} {count}\n"
            ))
        };
        let (before, after) = (series(10.0, 100.0), series(12.0, 110.0));
        assert!(
            (after.mean_ms_since(&before, "d_seconds", &[("operation", "get")]) - 200.0).abs()
                < 1e-9
        );
        assert_eq!(after.mean_ms_since(&after, "d_seconds", &[]), 0.0);
        assert!(
            (after.mean_ms_since(&Metrics::default(), "d_seconds", &[]) - 109.090_909).abs() < 1e-3
        );
    }
}
