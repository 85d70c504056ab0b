//! Real Kubernetes clusters on loopback for hubfed's tests and the local demo.
//!
//! [`TestEnv::start`] runs one etcd (each cluster under its own `--etcd-prefix`), then a hub
//! and N members, each a real `kube-apiserver` plus a trimmed `kube-controller-manager`
//! (namespace, garbage-collector, service-account, token, deployment and replicaset
//! controllers), with generated TLS certificates and an admin credential. It writes a
//! kubeconfig with one context per cluster (`hub`, `member1`, ...). Everything stops when
//! the [`TestEnv`] is dropped, and — through the guardians in [`process`] — also when the
//! process that started it dies without dropping it.
//!
//! Opt-in ([`TestEnvConfig::scheduling`]), members also schedule pods: a real
//! `kube-scheduler`, Node objects, and a fake kubelet that reports bound pods running (see
//! [`Scheduling`]).

mod apiserver;
pub mod bins;
mod delay;
mod etcd;
mod kubeconfig;
mod kubelet;
mod pki;
pub mod process;
mod restart;
mod scheduling;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::config::{KubeConfigOptions, Kubeconfig};

use apiserver::{LIGHT_MEMBER_ENV, apiserver_args, wait_ready, write_pki};
pub use apiserver::{LIGHT_MEMBER_FLAGS, NO_WATCH_CACHE_FLAG, member_memory_limit};
pub use bins::{Binaries, kube_version};
pub use delay::DelayProxy;
use etcd::EtcdLaunch;
pub use etcd::etcd_description;
use kubeconfig::kubeconfig_yaml;
use kubelet::FakeKubelet;
use pki::ClusterPki;
use process::{GuardedProcess, Spawn, alive};
pub use scheduling::Scheduling;

/// Name of the hub cluster's kubeconfig context.
pub const HUB: &str = "hub";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path} not found: {hint}")]
    MissingBinary { path: PathBuf, hint: &'static str },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("generating the {what}: {source}")]
    Pki {
        what: &'static str,
        #[source]
        source: rcgen::Error,
    },
    #[error("{component} did not become ready within {seconds}s; last log lines:\n{log}")]
    NotReady {
        component: String,
        seconds: u64,
        log: String,
    },
    #[error("{0} is not running")]
    NotRunning(String),
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// A request that sets a cluster up failed (creating the nodes of a member).
    #[error("{what}: {message}")]
    Setup { what: String, message: String },
}

/// What to start.
#[derive(Clone, Debug)]
pub struct TestEnvConfig {
    /// Number of member clusters (`member1` ... `memberN`).
    pub members: usize,
    /// Run a trimmed kube-controller-manager per cluster.
    pub controller_manager: bool,
    /// Where certificates, logs, etcd data and the kubeconfig go. Default: a fresh directory
    /// under /dev/shm (tmpfs keeps etcd fast), removed on drop.
    pub dir: Option<PathBuf>,
    /// How long one component may take to become ready.
    pub ready_timeout: Duration,
    /// Make the members (not the hub) schedule pods: nodes, a kube-scheduler and a fake
    /// kubelet per member. Default `None`: no nodes, pods stay unbound.
    pub scheduling: Option<Scheduling>,
    /// Start the members' API servers (not the hub's) with the lighter flags of
    /// [`LIGHT_MEMBER_FLAGS`] and `GOGC=50`: ~20 % less memory and less CPU at rest, for
    /// environments with many members (see docs/development.md, "Light members"). They
    /// serve fewer API groups: no `autoscaling`, `certificates.k8s.io`,
    /// `flowcontrol.apiserver.k8s.io`, `node.k8s.io` or `scheduling.k8s.io`.
    pub light_members: bool,
    /// Members' API servers keep their watch cache (default). Off
    /// ([`NO_WATCH_CACHE_FLAG`]) for members holding gigabytes (the large-object benchmark):
    /// lists and watches are then served by etcd, which costs etcd CPU for every watcher.
    pub member_watch_cache: bool,
}

impl Default for TestEnvConfig {
    fn default() -> Self {
        Self {
            members: 2,
            controller_manager: true,
            dir: None,
            ready_timeout: Duration::from_secs(120),
            scheduling: None,
            light_members: false,
            member_watch_cache: true,
        }
    }
}

/// One cluster: a kube-apiserver and optionally its kube-controller-manager.
pub struct Cluster {
    name: String,
    port: u16,
    pki: ClusterPki,
    apiserver: GuardedProcess,
    /// How the API server was started, to start it again ([`TestEnv::restart_apiserver`]).
    apiserver_program: PathBuf,
    apiserver_args: Vec<String>,
    apiserver_env: Vec<(&'static str, String)>,
    controller_manager: Option<GuardedProcess>,
    /// With [`TestEnvConfig::scheduling`], members only: the kube-scheduler, the port of its
    /// HTTPS server, the fake kubelet and the node names.
    scheduler: Option<GuardedProcess>,
    scheduler_port: u16,
    kubelet: Option<FakeKubelet>,
    nodes: Vec<String>,
}

impl Cluster {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// PEM of the CA that signed the API server's serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.pki.ca_cert
    }

    /// A kubeconfig with this cluster only, as context and cluster `name`.
    pub fn kubeconfig(&self) -> Result<Kubeconfig, Error> {
        Kubeconfig::from_yaml(&kubeconfig_yaml(&[self], &self.name))
            .map_err(|e| Error::Kubeconfig(e.to_string()))
    }

    /// The API server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// [`Cluster::kubeconfig`] with another server URL, such as a [`DelayProxy::url`] in
    /// front of this cluster (same CA and admin credential).
    pub fn kubeconfig_via(&self, server_url: &str) -> Result<Kubeconfig, Error> {
        let mut kubeconfig = self.kubeconfig()?;
        for named in &mut kubeconfig.clusters {
            if let Some(cluster) = &mut named.cluster {
                cluster.server = Some(server_url.to_string());
            }
        }
        Ok(kubeconfig)
    }

    /// A [`DelayProxy`] in front of this cluster's API server: its responses arrive `delay`
    /// late. Reach the cluster through it with [`Cluster::client_via`] or
    /// [`Cluster::kubeconfig_via`] and [`DelayProxy::url`].
    pub fn delay_proxy(&self, delay: Duration) -> Result<DelayProxy, Error> {
        DelayProxy::start(
            std::net::SocketAddr::from(([127, 0, 0, 1], self.port)),
            delay,
        )
    }

    /// A new admin client. Create one per tokio runtime: clients are bound to the runtime
    /// that created them.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        self.client_from(self.kubeconfig()?).await
    }

    /// A new admin client that reaches the API server at `server_url` (a [`DelayProxy::url`]).
    pub async fn client_via(&self, server_url: &str) -> anyhow::Result<kube::Client> {
        self.client_from(self.kubeconfig_via(server_url)?).await
    }

    async fn client_from(&self, kubeconfig: Kubeconfig) -> anyhow::Result<kube::Client> {
        let options = KubeConfigOptions {
            context: Some(self.name.clone()),
            ..Default::default()
        };
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// Freezes the API server (SIGSTOP): requests hang as with an unreachable cluster.
    pub fn pause(&self) -> Result<(), Error> {
        self.apiserver.signal("STOP")
    }

    /// Resumes an API server frozen by [`Cluster::pause`].
    pub fn resume(&self) -> Result<(), Error> {
        self.apiserver.signal("CONT")
    }

    /// Pids of this cluster's server processes (API server, controller manager, scheduler).
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.apiserver.pid().into_iter().collect();
        for process in [&self.controller_manager, &self.scheduler]
            .into_iter()
            .flatten()
        {
            pids.extend(process.pid());
        }
        pids
    }

    /// This cluster's servers in the order they stop: the API server's clients (controller
    /// manager, scheduler) first.
    fn servers(&mut self) -> impl Iterator<Item = &mut GuardedProcess> {
        [&mut self.controller_manager, &mut self.scheduler]
            .into_iter()
            .flatten()
            .chain(std::iter::once(&mut self.apiserver))
    }

    /// Names of this cluster's nodes (`<name>-node-1`, ...): empty unless the environment
    /// schedules pods ([`TestEnvConfig::scheduling`]) and this is a member.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }
}

/// A running hub and its members. Dropping it stops every process and removes its directory.
pub struct TestEnv {
    dir: PathBuf,
    owns_dir: bool,
    kubeconfig_path: PathBuf,
    // Field order is drop order: clusters (API servers) go before etcd.
    clusters: Vec<Cluster>,
    etcd: GuardedProcess,
    /// How etcd was started, to start it again ([`TestEnv::restart_etcd`]).
    etcd_launch: EtcdLaunch,
    /// Servers restarted so far: numbers the log file of each new incarnation.
    restarts: u32,
    startup: Duration,
}

/// API servers started side by side by [`TestEnv::start`].
const PARALLEL_STARTS: usize = 4;

static ENV_COUNTER: AtomicU32 = AtomicU32::new(0);

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// Ports servers listen on are taken from here, below Linux's ephemeral range (32768–60999 by
/// default): a port chosen by `bind(0)` lies in that range, and once its server stops (a
/// restart test), any outgoing connection may get it as its local port and the restarted
/// server cannot bind it again.
const SERVER_PORTS: std::ops::Range<u16> = 20_000..32_000;
static PORT_CURSOR: AtomicU32 = AtomicU32::new(0);

/// A loopback port nobody listens on now and no other test process holds, outside the
/// ephemeral range (see [`SERVER_PORTS`]). Different processes start at different points of the
/// range, and each port handed out stays reserved to this process until it exits
/// ([`reserve_port`]): a server stopped for a restart test keeps its port even when test
/// binaries run side by side (the e2e lanes), where another process could otherwise bind it
/// while it is down.
pub fn free_port() -> Result<u16, Error> {
    let span = u32::from(SERVER_PORTS.end - SERVER_PORTS.start);
    let start = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let step = PORT_CURSOR.fetch_add(1, Ordering::Relaxed);
        let offset = start.wrapping_add(step.wrapping_mul(7)) % span;
        let port = SERVER_PORTS.start + u16::try_from(offset).unwrap_or(0);
        // Reserve before probing: a probe's `bind` holds the port for a moment, and a port
        // another process reserved may be one whose server is restarting right now.
        let Some(lock) = reserve_port(port)? else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            HELD_PORTS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(lock);
            return Ok(port);
        }
        // Somebody outside the scheme listens there: the lock goes with `lock`.
    }
    // Everything taken: let the kernel choose.
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io_err("finding a free port"))?;
    let port = listener
        .local_addr()
        .map_err(io_err("finding a free port"))?
        .port();
    Ok(port)
}

/// Lock files of the ports this process holds; their locks go with the process.
static HELD_PORTS: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());

/// Reserves `port`: an exclusive `flock` on `<tmp>/hubfed-ports/<port>`, held as long as the
/// returned file is (in [`HELD_PORTS`], until the process exits: the kernel drops it then,
/// however the process ends, so no stale reservation outlives a crash). `None` when another
/// process, or this one, holds it.
fn reserve_port(port: u16) -> Result<Option<std::fs::File>, Error> {
    let dir = std::env::temp_dir().join("hubfed-ports");
    std::fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
    let path = dir.join(port.to_string());
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io_err(format!("opening {}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(source)) => Err(Error::Io {
            what: format!("locking {}", path.display()),
            source,
        }),
    }
}

fn write(path: &Path, contents: &str) -> Result<(), Error> {
    std::fs::write(path, contents).map_err(io_err(format!("writing {}", path.display())))
}

/// Runs a future to completion on a private runtime in a scoped thread, so blocking start-up
/// code works whether or not the caller is inside a tokio runtime.
fn block_on<F>(future: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|rt| rt.block_on(future))
        })
        .join()
    })
    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    .unwrap_or_else(|e| panic!("cannot build a tokio runtime: {e}"))
}

/// The environment's directory, and whether it owns it (made it, removes it).
fn env_dir(config: &TestEnvConfig) -> (PathBuf, bool) {
    match &config.dir {
        Some(d) => (d.clone(), false),
        None => {
            let base = if Path::new("/dev/shm").is_dir() {
                PathBuf::from("/dev/shm")
            } else {
                std::env::temp_dir()
            };
            let n = ENV_COUNTER.fetch_add(1, Ordering::Relaxed);
            (
                base.join(format!("hubfed-testenv-{}-{n}", std::process::id())),
                true,
            )
        }
    }
}

impl TestEnv {
    /// Starts etcd, the hub and the members, and waits until all are ready. Blocking.
    pub fn start(config: TestEnvConfig) -> Result<Self, Error> {
        let began = Instant::now();
        let bins = Binaries::locate()?;
        // Checked before anything starts; only environments that schedule pods need it.
        let scheduler = match config.scheduling {
            Some(_) => Some(bins.require_scheduler()?),
            None => None,
        };
        let (dir, owns_dir) = env_dir(&config);
        // Only what this environment writes is cleared: `dir` may be a person's directory.
        for sub in ["logs", "pids", "etcd"] {
            let _ = std::fs::remove_dir_all(dir.join(sub));
            std::fs::create_dir_all(dir.join(sub))
                .map_err(io_err(format!("creating {}", dir.display())))?;
        }

        let etcd_launch = EtcdLaunch::new(&bins.etcd, &dir)?;
        let etcd = etcd_launch.spawn(&dir, owns_dir, "etcd.log")?;

        let mut env = TestEnv {
            kubeconfig_path: dir.join("kubeconfig"),
            dir,
            owns_dir,
            clusters: Vec::new(),
            etcd,
            etcd_launch,
            restarts: 0,
            startup: Duration::ZERO,
        };
        env.etcd_launch
            .wait_serving(&env.etcd, config.ready_timeout)?;
        let etcd_url = env.etcd_launch.url.clone();

        let names: Vec<String> = std::iter::once(HUB.to_string())
            .chain((1..=config.members).map(|i| format!("member{i}")))
            .collect();
        // A few API servers start side by side: most of a start is waiting, and a wave
        // no larger than this keeps 2 cores from thrashing.
        for wave in names.chunks(PARALLEL_STARTS) {
            let mut started = Vec::new();
            for name in wave {
                started.push(env.spawn_cluster(&bins, name, &etcd_url, &config)?);
            }
            for mut cluster in started {
                env.finish_cluster(&bins, &mut cluster, &config)?;
                env.clusters.push(cluster);
            }
        }
        write(&env.kubeconfig_path, &env.kubeconfig_yaml())?;
        if config.controller_manager {
            env.wait_for_controller_managers(config.ready_timeout)?;
        }
        if let (Some(scheduling), Some(scheduler)) = (&config.scheduling, scheduler) {
            env.start_scheduling(scheduler, scheduling, config.ready_timeout)?;
        }
        env.startup = began.elapsed();
        Ok(env)
    }

    /// Writes a cluster's certificates and starts its API server, without waiting for it.
    fn spawn_cluster(
        &self,
        bins: &Binaries,
        name: &str,
        etcd_url: &str,
        config: &TestEnvConfig,
    ) -> Result<Cluster, Error> {
        let cdir = self.dir.join(name);
        std::fs::create_dir_all(&cdir).map_err(io_err(format!("creating {}", cdir.display())))?;
        let pki = ClusterPki::generate(name)?;
        write_pki(&cdir, &pki)?;
        let port = free_port()?;
        let mut args = apiserver_args(&cdir, name, etcd_url, port);
        let light = config.light_members && name != HUB;
        let mut env: Vec<(&'static str, String)> = if light {
            args.extend(LIGHT_MEMBER_FLAGS.iter().map(|f| f.to_string()));
            LIGHT_MEMBER_ENV
                .iter()
                .map(|(k, v)| (*k, v.to_string()))
                .collect()
        } else {
            Vec::new()
        };
        if !config.member_watch_cache && name != HUB {
            args.push(NO_WATCH_CACHE_FLAG.to_string());
        }
        if name != HUB
            && let Some(limit) = apiserver::member_memory_limit()
        {
            env.push(("GOMEMLIMIT", limit));
        }
        let apiserver = spawn_component(
            &self.dir,
            name,
            "kube-apiserver",
            &bins.kube_apiserver,
            args.clone(),
            env.clone(),
            None,
        )?;
        let cluster = Cluster {
            name: name.to_string(),
            port,
            pki,
            apiserver,
            apiserver_program: bins.kube_apiserver.clone(),
            apiserver_args: args,
            apiserver_env: env,
            controller_manager: None,
            scheduler: None,
            scheduler_port: 0,
            kubelet: None,
            nodes: Vec::new(),
        };
        Ok(cluster)
    }

    /// Waits until a cluster's API server is ready, then starts its controller manager.
    fn finish_cluster(
        &self,
        bins: &Binaries,
        cluster: &mut Cluster,
        config: &TestEnvConfig,
    ) -> Result<(), Error> {
        wait_ready(cluster, config.ready_timeout)?;
        if config.controller_manager {
            let cdir = self.dir.join(&cluster.name);
            cluster.controller_manager = Some(self.start_controller_manager(bins, cluster, &cdir)?);
        }
        Ok(())
    }

    /// The cluster's kube-controller-manager: namespaces, garbage collection, deployments and
    /// service accounts with their tokens.
    fn start_controller_manager(
        &self,
        bins: &Binaries,
        cluster: &Cluster,
        cdir: &Path,
    ) -> Result<GuardedProcess, Error> {
        let d = |f: &str| cdir.join(f).display().to_string();
        let kubeconfig = cdir.join("kcm.kubeconfig");
        write(&kubeconfig, &kubeconfig_yaml(&[cluster], &cluster.name))?;
        let args = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            "--controllers=namespace-controller,garbage-collector-controller,\
             deployment-controller,replicaset-controller,serviceaccount-controller,\
             serviceaccount-token-controller,root-ca-certificate-publisher-controller"
                .into(),
            format!("--service-account-private-key-file={}", d("sa.key")),
            format!("--root-ca-file={}", d("ca.crt")),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            "--v=0".into(),
        ];
        let program = &bins.kube_controller_manager;
        let name = &cluster.name;
        spawn_component(
            &self.dir,
            name,
            "kube-controller-manager",
            program,
            args,
            Vec::new(),
            None,
        )
    }

    /// The namespace controllers' `default` ServiceAccount appears once the controller
    /// manager runs: proof it is up (join relies on its token controller).
    fn wait_for_controller_managers(&mut self, timeout: Duration) -> Result<(), Error> {
        for cluster in &mut self.clusters {
            let deadline = Instant::now() + timeout;
            let ok = block_on(async {
                let Ok(client) = cluster.client().await else {
                    return false;
                };
                let sa: kube::Api<ServiceAccount> = kube::Api::namespaced(client, "default");
                let pid = cluster.controller_manager.as_ref().and_then(|k| k.pid());
                while Instant::now() < deadline && alive(pid) {
                    if let Ok(Some(_)) = sa.get_opt("default").await {
                        return true;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                false
            });
            if !ok {
                let kcm = cluster.controller_manager.as_ref();
                return Err(Error::NotReady {
                    component: format!("{} kube-controller-manager", cluster.name),
                    seconds: timeout.as_secs(),
                    log: kcm.map(|k| k.log_tail(20)).unwrap_or_default(),
                });
            }
        }
        Ok(())
    }

    fn kubeconfig_yaml(&self) -> String {
        let all: Vec<&Cluster> = self.clusters.iter().collect();
        kubeconfig_yaml(&all, HUB)
    }

    /// The hub cluster.
    pub fn hub(&self) -> &Cluster {
        &self.clusters[0]
    }

    /// The member clusters, `member1` first.
    pub fn members(&self) -> &[Cluster] {
        &self.clusters[1..]
    }

    /// A cluster by name.
    pub fn cluster(&self, name: &str) -> Option<&Cluster> {
        self.clusters.iter().find(|c| c.name == name)
    }

    /// All clusters, the hub first.
    pub fn clusters(&self) -> &[Cluster] {
        &self.clusters
    }

    /// The kubeconfig with contexts `hub`, `member1`, ...
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The environment's directory; every server's command line names it.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How long [`TestEnv::start`] took.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// Pids of every server process, etcd included.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.clusters.iter().flat_map(Cluster::pids).collect();
        pids.extend(self.etcd.pid());
        pids
    }

    /// Stops the fake kubelets, then controller managers and schedulers, then API servers,
    /// then etcd, and removes the directory.
    pub fn shutdown(mut self) {
        self.stop_all();
    }

    fn stop_all(&mut self) {
        for c in &mut self.clusters {
            if let Some(kubelet) = &mut c.kubelet {
                kubelet.stop();
            }
        }
        // Every server is signalled before any is waited for: they stop side by side.
        for c in &mut self.clusters {
            c.servers().for_each(GuardedProcess::begin_stop);
        }
        for c in &mut self.clusters {
            c.servers().for_each(GuardedProcess::stop);
        }
        self.etcd.stop();
        if self.owns_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Spawns one of a cluster's components, logging to `logs/<cluster>-<component>.log`, or
/// `.restart-<n>.log` for its `n`th restart.
fn spawn_component(
    dir: &Path,
    cluster: &str,
    component: &str,
    program: &Path,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    restart: Option<u32>,
) -> Result<GuardedProcess, Error> {
    let incarnation = restart.map(|n| format!(".restart-{n}")).unwrap_or_default();
    // Seconds between SIGTERM and SIGKILL: an API server drains its requests first.
    let grace_seconds = if component == "kube-apiserver" { 10 } else { 5 };
    GuardedProcess::spawn(Spawn {
        name: &format!("{cluster}-{component}"),
        program,
        args,
        env,
        pid_dir: &dir.join("pids"),
        log_file: dir.join(format!("logs/{cluster}-{component}{incarnation}.log")),
        grace_seconds,
        outlive_others: false,
        remove_dir_after: None,
    })
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// One environment per test binary, started on first use with `HUBFED_TEST_MEMBERS`
/// members (default 2). It is never dropped: when the test binary exits, the guardians stop
/// every server (see [`process`]).
pub fn shared() -> &'static TestEnv {
    static ENV: OnceLock<TestEnv> = OnceLock::new();
    ENV.get_or_init(|| {
        let members = std::env::var("HUBFED_TEST_MEMBERS")
            .ok()
            .and_then(|m| m.parse().ok())
            .unwrap_or(2);
        match TestEnv::start(TestEnvConfig {
            members,
            ..Default::default()
        }) {
            Ok(env) => {
                // Not eprintln!: the test harness would capture it.
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "hubfed-testenv: hub + {members} members ({}) ready in {:.1}s, kubeconfig {}",
                    kube_version(),
                    env.startup_time().as_secs_f64(),
                    env.kubeconfig_path().display()
                );
                env
            }
            Err(e) => panic!("cannot start the test clusters: {e}"),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_handed_out_stays_reserved_while_the_process_lives() {
        let port = free_port().expect("a free port");
        assert!(
            SERVER_PORTS.contains(&port),
            "{port} outside the server range"
        );
        // Nobody listens on it (a stopped server), yet a second reservation fails: the lock
        // file's lock conflicts across open files, as it would in another process.
        assert!(TcpListener::bind(("127.0.0.1", port)).is_ok());
        assert!(reserve_port(port).expect("the lock file opens").is_none());
        assert_ne!(free_port().expect("another free port"), port);
    }
}
