//! Restarting a server of a running environment — its API server or the shared etcd — with
//! the same flags, port and storage, as an upgrade or a crash would.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::process::{GuardedProcess, Spawn};
use crate::{Error, TestEnv, wait_ready};

/// How long a restarted server may take to become ready again.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

impl TestEnv {
    /// Stops cluster `name`'s API server (SIGTERM: a graceful shutdown, requests in flight
    /// end, watches close), starts it again on the same port and storage, and waits until it
    /// is ready. Returns how long the API server was unavailable.
    pub fn restart_apiserver(&mut self, name: &str) -> Result<Duration, Error> {
        self.restarts += 1;
        let restart = self.restarts;
        let pid_dir = self.dir.join("pids");
        let log_dir = self.dir.join("logs");
        let cluster = self
            .clusters
            .iter_mut()
            .find(|c| c.name == name)
            .ok_or_else(|| Error::NotRunning(format!("{name} (no such cluster)")))?;
        let began = Instant::now();
        cluster.apiserver.stop();
        cluster.apiserver = GuardedProcess::spawn(Spawn {
            name: &format!("{name}-kube-apiserver"),
            program: &cluster.apiserver_program,
            args: cluster.apiserver_args.clone(),
            env: vec![],
            pid_dir: &pid_dir,
            log_file: log_dir.join(format!("{name}-kube-apiserver.restart-{restart}.log")),
            grace_seconds: 10,
            outlive_others: false,
            remove_dir_after: None,
        })?;
        wait_ready(cluster, READY_TIMEOUT)?;
        Ok(began.elapsed())
    }

    /// Stops etcd with `signal` (`TERM` for a clean stop, `KILL` for a crash), starts it
    /// again on the same ports and data directory, and waits until every API server is ready
    /// again. Returns how long storage was unavailable (to the last API server's readiness).
    pub fn restart_etcd(&mut self, signal: &str) -> Result<Duration, Error> {
        self.restarts += 1;
        let restart = self.restarts;
        let began = Instant::now();
        self.etcd.stop_now(signal, Duration::from_secs(10))?;
        let dir: PathBuf = self.dir.clone();
        self.etcd = GuardedProcess::spawn(Spawn {
            name: "etcd",
            program: &self.etcd_program,
            args: self.etcd_args.clone(),
            env: vec![],
            pid_dir: &dir.join("pids"),
            log_file: dir.join(format!("logs/etcd.restart-{restart}.log")),
            grace_seconds: 10,
            outlive_others: true,
            remove_dir_after: self.owns_dir.then_some(dir.as_path()),
        })?;
        let url = self
            .etcd_args
            .iter()
            .find_map(|a| a.strip_prefix("--listen-client-urls="))
            .map(str::to_owned)
            .ok_or_else(|| Error::NotRunning("etcd (no client URL)".into()))?;
        self.wait_for_etcd(&url, READY_TIMEOUT)?;
        for cluster in &mut self.clusters {
            wait_ready(cluster, READY_TIMEOUT)?;
        }
        Ok(began.elapsed())
    }
}
