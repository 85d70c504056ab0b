//! Restarting a server of a running environment — its API server or the shared etcd — with
//! the same flags, port and storage, as an upgrade or a crash would.

use std::time::{Duration, Instant};

use crate::apiserver::wait_ready;
use crate::{Error, TestEnv, spawn_component};

/// How long a restarted server may take to become ready again.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// How often a restarted server is started again when it exits because its port is taken.
/// The test environment's ports are reserved ([`crate::free_port`]), but a process outside
/// it may still hold one for a moment, as a probe or an outgoing connection.
const BIND_ATTEMPTS: u32 = 5;

/// Starts a server again with `start`, given the number of the environment's restart it is
/// (its log's name), up to [`BIND_ATTEMPTS`] times while it exits because its port is taken.
fn start_again(
    restarts: &mut u32,
    mut start: impl FnMut(u32) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut attempt = 1;
    loop {
        *restarts += 1;
        match start(*restarts) {
            Err(e) if attempt < BIND_ATTEMPTS && port_taken(&e) => {
                attempt += 1;
                std::thread::sleep(Duration::from_secs(1));
            }
            result => return result,
        }
    }
}

/// Whether a server failed to start again because another socket held its port.
fn port_taken(error: &Error) -> bool {
    matches!(error, Error::NotReady { component, log, .. }
        if component.contains("exited") && log.contains("address already in use"))
}

impl TestEnv {
    /// Stops cluster `name`'s API server (SIGTERM: a graceful shutdown, requests in flight
    /// end, watches close), starts it again on the same port and storage, and waits until it
    /// is ready. Returns how long the API server was unavailable.
    pub fn restart_apiserver(&mut self, name: &str) -> Result<Duration, Error> {
        let dir = self.dir.clone();
        let cluster = self
            .clusters
            .iter_mut()
            .find(|c| c.name == name)
            .ok_or_else(|| Error::NotRunning(format!("{name} (no such cluster)")))?;
        let began = Instant::now();
        cluster.apiserver.stop();
        start_again(&mut self.restarts, |restart| {
            cluster.apiserver = spawn_component(
                &dir,
                name,
                "kube-apiserver",
                &cluster.apiserver_program,
                cluster.apiserver_args.clone(),
                cluster.apiserver_env.clone(),
                Some(restart),
            )?;
            wait_ready(cluster, READY_TIMEOUT)
        })?;
        Ok(began.elapsed())
    }

    /// Compacts etcd's history to its current revision and defragments its database: the
    /// benchmark's cold start then begins without the raw phase's deleted objects in etcd
    /// (with ~1 MB objects, gigabytes). Returns the database size before and after, in bytes.
    pub fn compact_etcd(&self) -> Result<(u64, u64), Error> {
        self.etcd_launch.compact()
    }

    /// Stops etcd with `signal` (`TERM` for a clean stop, `KILL` for a crash), starts it
    /// again on the same ports and data directory, and waits until every API server is ready
    /// again. Returns how long storage was unavailable (to the last API server's readiness).
    pub fn restart_etcd(&mut self, signal: &str) -> Result<Duration, Error> {
        let began = Instant::now();
        self.etcd.stop_now(signal, Duration::from_secs(10))?;
        let (etcd, launch) = (&mut self.etcd, &self.etcd_launch);
        let (dir, owns_dir) = (&self.dir, self.owns_dir);
        start_again(&mut self.restarts, |restart| {
            *etcd = launch.spawn(dir, owns_dir, &format!("etcd.restart-{restart}.log"))?;
            launch.wait_serving(etcd, READY_TIMEOUT)
        })?;
        for cluster in &mut self.clusters {
            wait_ready(cluster, READY_TIMEOUT).map_err(|mut e| {
                // What etcd did meanwhile belongs in the report.
                if let Error::NotReady { log, .. } = &mut e {
                    let state = if self.etcd.is_alive() {
                        "running"
                    } else {
                        "exited"
                    };
                    log.push_str(&format!(
                        "\n--- etcd ({state}), last lines:\n{}",
                        self.etcd.log_tail(20)
                    ));
                }
                e
            })?;
        }
        Ok(began.elapsed())
    }
}
