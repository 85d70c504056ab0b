//! A real DNS answer for the multi-cluster DNS tests: external-dns publishing a hub's
//! DNSEndpoints to an etcd that CoreDNS serves, all on loopback.
//!
//! [`DnsTools::locate`] finds (building them the first time, `make tools` does it ahead)
//! external-dns [`EXTERNAL_DNS_VERSION`] and CoreDNS [`COREDNS_VERSION`], built from their Go
//! modules by `hack/build-external-dns.sh` and `hack/build-coredns.sh`; without Go it says
//! why, and the caller skips. [`install_dns_endpoint_crd`] installs external-dns's own
//! `externaldns.k8s.io/v1alpha1` DNSEndpoint CRD, read from its module.
//!
//! [`DnsChain::start`] then starts three processes, each on free loopback ports and under a
//! guardian ([`GuardedProcess`]: none outlives the test):
//!
//! - an etcd of its own (not the test environment's: its URL is not exposed, and a chain
//!   that is stopped takes its records with it);
//! - CoreDNS serving the chain's zone from that etcd (its `etcd` plugin, SkyDNS keys under
//!   `/skydns`) on UDP `127.0.0.1`;
//! - external-dns with its CRD source (DNSEndpoints of the hub, through a kubeconfig holding
//!   the hub alone), its `coredns` provider (`ETCD_URLS`), the TXT registry, `--policy=sync`
//!   (deletions are published too), `--domain-filter` of the zone and a one-second interval.
//!
//! [`DnsChain::query`] asks that CoreDNS directly (no cache, no system resolver) and returns
//! the whole answer as a [`DnsAnswer`]; [`DnsChain::wait_answer`] polls until the answer is
//! the expected one and returns how long that took.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr as _;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hickory_client::client::{Client as DnsClient, ClientHandle as _};
use hickory_client::proto::op::ResponseCode;
use hickory_client::proto::rr::{DNSClass, Name, RData, RecordType};
use hickory_client::proto::runtime::TokioRuntimeProvider;
use hickory_client::proto::udp::UdpClientStream;
use hubfed_testenv::TestEnv;
use hubfed_testenv::process::{GuardedProcess, Spawn};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::discovery::ApiResource;

use crate::controller::{free_port, spawn_guarded};
use crate::upstream_crds::hack_script;
use crate::{Wait, http_get, install_crds, unique_name, wait_for};

/// The external-dns release the tests publish with (`sigs.k8s.io/external-dns`).
pub const EXTERNAL_DNS_VERSION: &str = "v0.23.0";

/// The CoreDNS release that answers (`github.com/coredns/coredns`).
pub const COREDNS_VERSION: &str = "v1.15.0";

/// external-dns's DNSEndpoint CRD in its module.
const DNS_ENDPOINT_CRD: &str = "config/crd/standard/dnsendpoints.externaldns.k8s.io.yaml";

/// How long a chain's processes may take to serve, and an answer to become the expected one.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one DNS query may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// external-dns's `DNSEndpoint`, `externaldns.k8s.io/v1alpha1`.
pub fn dns_endpoint_resource() -> ApiResource {
    ApiResource {
        group: "externaldns.k8s.io".to_owned(),
        version: "v1alpha1".to_owned(),
        api_version: "externaldns.k8s.io/v1alpha1".to_owned(),
        kind: "DNSEndpoint".to_owned(),
        plural: "dnsendpoints".to_owned(),
    }
}

/// The external-dns and CoreDNS binaries, and external-dns's Go module.
#[derive(Clone, Debug)]
pub struct DnsTools {
    pub external_dns: PathBuf,
    pub coredns: PathBuf,
    /// external-dns's module directory in the Go module cache (its CRDs).
    pub external_dns_module: PathBuf,
}

impl DnsTools {
    /// The tools, built and cached the first time; `Ok(Err(why))` when Go is missing (the
    /// caller skips, saying why).
    pub fn locate() -> anyhow::Result<Result<Self, String>> {
        let run = |script: &str, args: &[&str]| tool_path(script, args);
        let (Some(external_dns), Some(external_dns_module), Some(coredns)) = (
            run("build-external-dns.sh", &[])?,
            run("build-external-dns.sh", &["module"])?,
            run("build-coredns.sh", &[])?,
        ) else {
            return Ok(Err(
                "Go is missing: external-dns, its DNSEndpoint CRD (in its Go module) and CoreDNS \
                 cannot be had (make tools)"
                    .to_owned(),
            ));
        };
        Ok(Ok(Self {
            external_dns,
            coredns,
            external_dns_module,
        }))
    }

    /// external-dns's own DNSEndpoint CRD, read from its module.
    pub fn dns_endpoint_crd(&self) -> anyhow::Result<CustomResourceDefinition> {
        let path = self.external_dns_module.join(DNS_ENDPOINT_CRD);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        serde_yaml_ng::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }
}

/// What `hack/<script> <args>` prints (a path), or `None` when it exits 3 (Go is missing).
fn tool_path(script: &str, args: &[&str]) -> anyhow::Result<Option<PathBuf>> {
    let path = hack_script(script);
    let output = Command::new(&path)
        .args(args)
        .env("EXTERNAL_DNS_VERSION", EXTERNAL_DNS_VERSION)
        .env("COREDNS_VERSION", COREDNS_VERSION)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", path.display()))?;
    if output.status.code() == Some(3) {
        return Ok(None);
    }
    anyhow::ensure!(output.status.success(), "{} failed", path.display());
    let printed = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    anyhow::ensure!(
        printed.exists(),
        "{} printed {}, which does not exist",
        path.display(),
        printed.display()
    );
    Ok(Some(printed))
}

/// Installs external-dns's DNSEndpoint CRD in `hub` and waits until it is served.
pub async fn install_dns_endpoint_crd(hub: &kube::Client, tools: &DnsTools) -> anyhow::Result<()> {
    install_crds(hub, &[tools.dns_endpoint_crd()?]).await
}

/// What a chain publishes.
#[derive(Clone, Debug)]
pub struct DnsChainOptions {
    /// The zone CoreDNS serves and external-dns's `--domain-filter`, e.g. `example.test`.
    pub zone: String,
    /// Only this namespace's DNSEndpoints (`--namespace`); `None`: every namespace.
    pub namespace: Option<String>,
}

impl DnsChainOptions {
    /// `zone`, DNSEndpoints of every namespace.
    pub fn zone(zone: &str) -> Self {
        Self {
            zone: zone.trim_end_matches('.').to_owned(),
            namespace: None,
        }
    }
}

/// A running etcd, CoreDNS and external-dns; stopped (in that order reversed) on drop.
pub struct DnsChain {
    // Dropped in declaration order: the writer first, etcd last.
    external_dns: GuardedProcess,
    coredns: GuardedProcess,
    etcd: GuardedProcess,
    zone: String,
    dns_addr: SocketAddr,
    etcd_port: u16,
    dir: PathBuf,
}

/// The free loopback ports of one chain.
struct ChainPorts {
    etcd_client: u16,
    etcd_peer: u16,
    dns: u16,
    coredns_ready: u16,
    external_dns_metrics: u16,
}

impl ChainPorts {
    fn pick() -> anyhow::Result<Self> {
        Ok(Self {
            etcd_client: free_port()?,
            etcd_peer: free_port()?,
            dns: free_udp_port()?,
            coredns_ready: free_port()?,
            external_dns_metrics: free_port()?,
        })
    }
}

/// A loopback UDP port nobody has bound now (CoreDNS serves DNS over UDP and TCP; TCP's is
/// checked when it binds).
fn free_udp_port() -> anyhow::Result<u16> {
    for _ in 0..20 {
        let port = free_port()?;
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    anyhow::bail!("no free loopback port for UDP and TCP found in 20 tries")
}

impl DnsChain {
    /// Starts etcd, CoreDNS and external-dns for `env`'s hub, each once it serves, in a
    /// directory of `env`'s (logs: `dns-<n>/*.log`). external-dns's DNSEndpoint CRD must be
    /// installed first ([`install_dns_endpoint_crd`]): its CRD source needs it to start.
    pub async fn start(
        env: &TestEnv,
        tools: &DnsTools,
        options: &DnsChainOptions,
    ) -> anyhow::Result<Self> {
        let dir = env.dir().join(unique_name("dns"));
        std::fs::create_dir_all(&dir)?;
        let ports = ChainPorts::pick()?;
        let etcd = start_etcd(&dir, &ports).await?;
        let coredns = start_coredns(&dir, tools, &options.zone, &ports).await?;
        let kubeconfig = dir.join("hub.kubeconfig");
        std::fs::write(
            &kubeconfig,
            serde_yaml_ng::to_string(&env.hub().kubeconfig()?)?,
        )?;
        let external_dns = start_external_dns(&dir, tools, options, &ports, &kubeconfig).await?;
        Ok(Self {
            external_dns,
            coredns,
            etcd,
            zone: options.zone.clone(),
            dns_addr: SocketAddr::from(([127, 0, 0, 1], ports.dns)),
            etcd_port: ports.etcd_client,
            dir,
        })
    }

    /// The zone served, without its final dot.
    pub fn zone(&self) -> &str {
        &self.zone
    }

    /// Where CoreDNS answers (UDP and TCP).
    pub fn dns_addr(&self) -> SocketAddr {
        self.dns_addr
    }

    /// The URL of the chain's etcd (what external-dns writes and CoreDNS reads).
    pub fn etcd_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.etcd_port)
    }

    /// The directory holding the chain's logs and data.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Asks CoreDNS for `name`'s records of `record_type`.
    pub async fn query(&self, name: &str, record_type: RecordType) -> anyhow::Result<DnsAnswer> {
        query(self.dns_addr, name, record_type).await
    }

    /// Polls until CoreDNS answers `expected` for `name` and `record_type`; returns how long
    /// that took. A timeout fails with the last answer and the end of external-dns's log.
    pub async fn wait_answer(
        &self,
        name: &str,
        record_type: RecordType,
        expected: &DnsAnswer,
    ) -> anyhow::Result<Duration> {
        let began = Instant::now();
        let what = format!("{name} {record_type} to be {expected}");
        let waited = wait_for(&what, READY_TIMEOUT, async || {
            let answer = self.query(name, record_type).await?;
            Ok(if &answer == expected {
                Wait::Done(began.elapsed())
            } else {
                Wait::Pending(answer.to_string())
            })
        })
        .await;
        waited.with_context(|| format!("the chain's logs end:\n{}", self.log_tails(20)))
    }

    /// The last `lines` lines of each process's log, for a failure message.
    pub fn log_tails(&self, lines: usize) -> String {
        [&self.external_dns, &self.coredns, &self.etcd]
            .iter()
            .map(|p| format!("--- {} ---\n{}", p.name(), p.log_tail(lines)))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A guarded process of a chain, its log `<dir>/<name>.log`.
fn spawn_in(
    dir: &Path,
    name: &str,
    program: &Path,
    args: Vec<String>,
    env: Vec<(&str, String)>,
) -> anyhow::Result<GuardedProcess> {
    let (process, _) = spawn_guarded(
        name,
        Spawn {
            name,
            program,
            args,
            env,
            pid_dir: &dir.join("pids"),
            log_file: dir.join(format!("{name}.log")),
            grace_seconds: 5,
            outlive_others: false,
            remove_dir_after: None,
        },
    )?;
    Ok(process)
}

/// Waits until `GET 127.0.0.1:<port><path>` answers 200, failing at once if `process` exits.
async fn wait_serving(process: &GuardedProcess, port: u16, path: &str) -> anyhow::Result<()> {
    let what = format!("{} to answer {path} on port {port}", process.name());
    wait_for(&what, READY_TIMEOUT, async || {
        anyhow::ensure!(
            process.is_alive(),
            "{} exited; its log ends:\n{}",
            process.name(),
            process.log_tail(20)
        );
        Ok(match http_get(port, path).await {
            Some((200, _)) => Wait::Done(()),
            other => Wait::Pending(format!("{other:?}")),
        })
    })
    .await
}

/// The chain's etcd: one member, loopback only, data in `<dir>/etcd`.
async fn start_etcd(dir: &Path, ports: &ChainPorts) -> anyhow::Result<GuardedProcess> {
    let etcd = hubfed_testenv::bins::Binaries::locate()?.etcd;
    let client = format!("http://127.0.0.1:{}", ports.etcd_client);
    let peer = format!("http://127.0.0.1:{}", ports.etcd_peer);
    let args = vec![
        "--name=dns".to_owned(),
        format!("--data-dir={}", dir.join("etcd").display()),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster=dns={peer}"),
        "--unsafe-no-fsync".to_owned(),
        "--log-level=warn".to_owned(),
    ];
    let process = spawn_in(dir, "dns-etcd", &etcd, args, Vec::new())?;
    wait_serving(&process, ports.etcd_client, "/health").await?;
    Ok(process)
}

/// CoreDNS answering for `zone` from the chain's etcd, `ready` on its own port.
async fn start_coredns(
    dir: &Path,
    tools: &DnsTools,
    zone: &str,
    ports: &ChainPorts,
) -> anyhow::Result<GuardedProcess> {
    let corefile = dir.join("Corefile");
    std::fs::write(&corefile, corefile_text(zone, ports))?;
    let args = vec!["-conf".to_owned(), corefile.display().to_string()];
    let process = spawn_in(dir, "coredns", &tools.coredns, args, Vec::new())?;
    wait_serving(&process, ports.coredns_ready, "/ready").await?;
    Ok(process)
}

/// The Corefile: `zone` from etcd's `/skydns` keys, on `127.0.0.1` only, queries logged.
fn corefile_text(zone: &str, ports: &ChainPorts) -> String {
    format!(
        "{zone}.:{dns} {{\n\
         \x20   bind 127.0.0.1\n\
         \x20   etcd {zone}. {{\n\
         \x20       path /skydns\n\
         \x20       endpoint http://127.0.0.1:{etcd}\n\
         \x20   }}\n\
         \x20   ready 127.0.0.1:{ready}\n\
         \x20   errors\n\
         \x20   log\n\
         }}\n",
        dns = ports.dns,
        etcd = ports.etcd_client,
        ready = ports.coredns_ready,
    )
}

/// external-dns: the hub's DNSEndpoints to the chain's etcd, once a second.
async fn start_external_dns(
    dir: &Path,
    tools: &DnsTools,
    options: &DnsChainOptions,
    ports: &ChainPorts,
    kubeconfig: &Path,
) -> anyhow::Result<GuardedProcess> {
    let mut args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        "--source=crd".to_owned(),
        "--crd-source-apiversion=externaldns.k8s.io/v1alpha1".to_owned(),
        "--crd-source-kind=DNSEndpoint".to_owned(),
        "--provider=coredns".to_owned(),
        "--registry=txt".to_owned(),
        format!("--txt-owner-id=hubfed-e2e-{}", ports.dns),
        "--policy=sync".to_owned(),
        format!("--domain-filter={}", options.zone),
        "--interval=1s".to_owned(),
        "--events".to_owned(),
        "--min-event-sync-interval=1s".to_owned(),
        format!("--metrics-address=127.0.0.1:{}", ports.external_dns_metrics),
        "--log-level=debug".to_owned(),
    ];
    if let Some(namespace) = &options.namespace {
        args.push(format!("--namespace={namespace}"));
    }
    let env = vec![(
        "ETCD_URLS",
        format!("http://127.0.0.1:{}", ports.etcd_client),
    )];
    let process = spawn_in(dir, "external-dns", &tools.external_dns, args, env)?;
    wait_serving(&process, ports.external_dns_metrics, "/healthz").await?;
    Ok(process)
}

/// A DNS server's answer to one question.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DnsAnswer {
    /// NOERROR with answer records, each as `TYPE data` (`A 10.0.0.1`,
    /// `CNAME www.example.test.`), sorted.
    Records(Vec<String>),
    /// NOERROR without answer records (the name exists, the type does not).
    NoRecords,
    /// NXDOMAIN: the name does not exist.
    NxDomain,
    /// Another response code (`SERVFAIL`, `REFUSED`, ...).
    Failed(String),
}

impl DnsAnswer {
    /// The answer holding `records` (`["A 10.0.0.1", ...]`), in any order.
    pub fn records(records: &[&str]) -> Self {
        let mut records: Vec<String> = records.iter().map(|r| (*r).to_owned()).collect();
        records.sort();
        Self::Records(records)
    }
}

impl std::fmt::Display for DnsAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Records(records) => write!(f, "[{}]", records.join(", ")),
            Self::NoRecords => f.write_str("no records"),
            Self::NxDomain => f.write_str("NXDOMAIN"),
            Self::Failed(code) => f.write_str(code),
        }
    }
}

/// One question to the DNS server at `server` over UDP (a client per question: nothing is
/// cached between two).
pub async fn query(
    server: SocketAddr,
    name: &str,
    record_type: RecordType,
) -> anyhow::Result<DnsAnswer> {
    let fqdn = Name::from_str(&format!("{}.", name.trim_end_matches('.')))
        .with_context(|| format!("{name} is not a DNS name"))?;
    let stream = UdpClientStream::builder(server, TokioRuntimeProvider::default())
        .with_timeout(Some(QUERY_TIMEOUT))
        .build();
    let (mut client, background) = DnsClient::connect(stream).await?;
    let exchange = tokio::spawn(background);
    let response = client.query(fqdn, DNSClass::IN, record_type).await;
    exchange.abort();
    let response = response.with_context(|| format!("asking {server} for {name} {record_type}"))?;
    Ok(match response.response_code() {
        ResponseCode::NXDomain => DnsAnswer::NxDomain,
        ResponseCode::NoError if response.answers().is_empty() => DnsAnswer::NoRecords,
        ResponseCode::NoError => {
            let mut records: Vec<String> = response
                .answers()
                .iter()
                .map(|record| record_text(record.data()))
                .collect();
            records.sort();
            DnsAnswer::Records(records)
        }
        code => DnsAnswer::Failed(code.to_string()),
    })
}

/// A record's data as `TYPE data`.
fn record_text(data: &RData) -> String {
    format!("{} {data}", data.record_type())
}
