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

pub mod bins;
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

use base64::Engine as _;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::config::{KubeConfigOptions, Kubeconfig};

pub use bins::{Binaries, kube_version};
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
}

impl Default for TestEnvConfig {
    fn default() -> Self {
        Self {
            members: 2,
            controller_manager: true,
            dir: None,
            ready_timeout: Duration::from_secs(120),
            scheduling: None,
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

    /// A new admin client. Create one per tokio runtime: clients are bound to the runtime
    /// that created them.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let options = KubeConfigOptions {
            context: Some(self.name.clone()),
            ..Default::default()
        };
        let config = kube::Config::from_custom_kubeconfig(self.kubeconfig()?, &options).await?;
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
    etcd_program: PathBuf,
    etcd_args: Vec<String>,
    /// Servers restarted so far: numbers the log file of each new incarnation.
    restarts: u32,
    startup: Duration,
}

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

/// A loopback port nobody listens on now, outside the ephemeral range (see [`SERVER_PORTS`]).
/// Different processes start at different points of the range, so parallel test binaries
/// rarely try the same ports.
pub fn free_port() -> Result<u16, Error> {
    let span = u32::from(SERVER_PORTS.end - SERVER_PORTS.start);
    let start = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let step = PORT_CURSOR.fetch_add(1, Ordering::Relaxed);
        let offset = start.wrapping_add(step.wrapping_mul(7)) % span;
        let port = SERVER_PORTS.start + u16::try_from(offset).unwrap_or(0);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    // Everything taken: let the kernel choose.
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io_err("finding a free port"))?;
    let port = listener
        .local_addr()
        .map_err(io_err("finding a free port"))?
        .port();
    Ok(port)
}

fn write(path: &Path, contents: &str) -> Result<(), Error> {
    std::fs::write(path, contents).map_err(io_err(format!("writing {}", path.display())))
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn kubeconfig_yaml(clusters: &[&Cluster], current: &str) -> String {
    let clusters_json: Vec<_> = clusters
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name,
                "cluster": {"server": c.server_url(), "certificate-authority-data": b64(&c.pki.ca_cert)},
            })
        })
        .collect();
    let users: Vec<_> = clusters
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": format!("{}-admin", c.name),
                "user": {
                    "client-certificate-data": b64(&c.pki.admin_cert),
                    "client-key-data": b64(&c.pki.admin_key),
                },
            })
        })
        .collect();
    let contexts: Vec<_> = clusters
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name,
                "context": {"cluster": c.name, "user": format!("{}-admin", c.name)},
            })
        })
        .collect();
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": clusters_json,
        "users": users,
        "contexts": contexts,
        "current-context": current,
        "preferences": {},
    });
    serde_yaml_ng::to_string(&doc).unwrap_or_default()
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

fn etcd_supports_no_fsync(etcd: &Path) -> bool {
    std::process::Command::new(etcd)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            let v = text.lines().next()?.rsplit(' ').next()?.to_string();
            let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
            Some((parts.next()?, parts.next()?))
        })
        .is_some_and(|(major, minor)| (major, minor) >= (3, 5))
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

        let etcd_port = free_port()?;
        let peer_port = free_port()?;
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let mut etcd_args = vec![
            "--name=hubfed-testenv".to_string(),
            format!("--data-dir={}", dir.join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=hubfed-testenv={peer_url}"),
            "--log-level=warn".to_string(),
            // Generous quota for benchmarks with many objects.
            "--quota-backend-bytes=8589934592".to_string(),
        ];
        if etcd_supports_no_fsync(&bins.etcd) {
            etcd_args.push("--unsafe-no-fsync=true".to_string());
        }
        let etcd = GuardedProcess::spawn(Spawn {
            name: "etcd",
            program: &bins.etcd,
            args: etcd_args.clone(),
            env: vec![],
            pid_dir: &dir.join("pids"),
            log_file: dir.join("logs/etcd.log"),
            grace_seconds: 10,
            outlive_others: true,
            remove_dir_after: owns_dir.then_some(dir.as_path()),
        })?;

        let mut env = TestEnv {
            kubeconfig_path: dir.join("kubeconfig"),
            dir,
            owns_dir,
            clusters: Vec::new(),
            etcd,
            etcd_program: bins.etcd.clone(),
            etcd_args,
            restarts: 0,
            startup: Duration::ZERO,
        };
        env.wait_for_etcd(&etcd_url, config.ready_timeout)?;

        let names = std::iter::once(HUB.to_string())
            .chain((1..=config.members).map(|i| format!("member{i}")));
        for name in names {
            let cluster = env.start_cluster(&bins, &name, &etcd_url, &config)?;
            env.clusters.push(cluster);
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

    fn wait_for_etcd(&mut self, url: &str, timeout: Duration) -> Result<(), Error> {
        let addr = url.trim_start_matches("http://").to_string();
        let deadline = Instant::now() + timeout;
        let pid = self.etcd.pid();
        while Instant::now() < deadline && alive(pid) {
            if std::net::TcpStream::connect(&addr).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(Error::NotReady {
            component: "etcd".into(),
            seconds: timeout.as_secs(),
            log: self.etcd.log_tail(20),
        })
    }

    fn start_cluster(
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
        let args = apiserver_args(&cdir, name, etcd_url, port);
        let apiserver = self.spawn_component(
            name,
            "kube-apiserver",
            &bins.kube_apiserver,
            args.clone(),
            10,
        )?;
        let mut cluster = Cluster {
            name: name.to_string(),
            port,
            pki,
            apiserver,
            apiserver_program: bins.kube_apiserver.clone(),
            apiserver_args: args,
            controller_manager: None,
            scheduler: None,
            scheduler_port: 0,
            kubelet: None,
            nodes: Vec::new(),
        };
        wait_ready(&mut cluster, config.ready_timeout)?;
        if config.controller_manager {
            cluster.controller_manager =
                Some(self.start_controller_manager(bins, &cluster, &cdir)?);
        }
        Ok(cluster)
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
        self.spawn_component(&cluster.name, "kube-controller-manager", program, args, 5)
    }

    /// Spawns one of a cluster's components, logging to `logs/<cluster>-<component>.log`.
    fn spawn_component(
        &self,
        cluster: &str,
        component: &str,
        program: &Path,
        args: Vec<String>,
        grace_seconds: u32,
    ) -> Result<GuardedProcess, Error> {
        GuardedProcess::spawn(Spawn {
            name: &format!("{cluster}-{component}"),
            program,
            args,
            env: vec![],
            pid_dir: &self.dir.join("pids"),
            log_file: self.dir.join(format!("logs/{cluster}-{component}.log")),
            grace_seconds,
            outlive_others: false,
            remove_dir_after: None,
        })
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
        for c in &mut self.clusters {
            for process in [&mut c.controller_manager, &mut c.scheduler]
                .into_iter()
                .flatten()
            {
                process.begin_stop();
            }
            c.apiserver.begin_stop();
        }
        for c in &mut self.clusters {
            for process in [&mut c.controller_manager, &mut c.scheduler]
                .into_iter()
                .flatten()
            {
                process.stop();
            }
            c.apiserver.stop();
        }
        self.etcd.stop();
        if self.owns_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn wait_ready(cluster: &mut Cluster, timeout: Duration) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    let pid = cluster.apiserver.pid();
    let ready = block_on(async {
        let Ok(client) = cluster.client().await else {
            return false;
        };
        while Instant::now() < deadline && alive(pid) {
            let req = http::Request::get("/readyz").body(Vec::new());
            if let Ok(req) = req
                && let Ok(body) = client.request_text(req).await
                && body.trim() == "ok"
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    });
    if ready {
        Ok(())
    } else {
        Err(Error::NotReady {
            component: format!("{} kube-apiserver", cluster.name),
            seconds: timeout.as_secs(),
            log: cluster.apiserver.log_tail(30),
        })
    }
}

/// Writes a cluster's CA, serving certificate and service-account keys into `cdir`.
fn write_pki(cdir: &Path, pki: &ClusterPki) -> Result<(), Error> {
    write(&cdir.join("ca.crt"), &pki.ca_cert)?;
    write(&cdir.join("serving.crt"), &pki.serving_cert)?;
    write(&cdir.join("serving.key"), &pki.serving_key)?;
    write(&cdir.join("sa.key"), &pki.service_account_key)?;
    write(&cdir.join("sa.pub"), &pki.service_account_public_key)
}

/// The kube-apiserver's flags: cluster `name`'s objects under its own etcd prefix, served on
/// loopback `port` with the certificates in `cdir`.
fn apiserver_args(cdir: &Path, name: &str, etcd_url: &str, port: u16) -> Vec<String> {
    let d = |f: &str| cdir.join(f).display().to_string();
    vec![
        format!("--etcd-servers={etcd_url}"),
        format!("--etcd-prefix=/{name}/registry"),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        // A loopback advertise address is refused by Endpoints validation, and without
        // one the server needs a default route; no endpoint reconciler avoids both.
        "--advertise-address=127.0.0.1".into(),
        "--endpoint-reconciler-type=none".into(),
        format!("--cert-dir={}", d("certs")),
        format!("--tls-cert-file={}", d("serving.crt")),
        format!("--tls-private-key-file={}", d("serving.key")),
        format!("--client-ca-file={}", d("ca.crt")),
        "--authorization-mode=Node,RBAC".into(),
        format!("--service-account-issuer=https://127.0.0.1:{port}"),
        format!("--service-account-key-file={}", d("sa.pub")),
        format!("--service-account-signing-key-file={}", d("sa.key")),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        "--allow-privileged=true".into(),
        "--profiling=false".into(),
        "--v=0".into(),
    ]
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
