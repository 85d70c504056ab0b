//! The environment's one etcd (each cluster keeps its objects under its own prefix): its
//! flags, starting it, again after a restart, and waiting until it serves.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::process::{GuardedProcess, Spawn, alive};
use crate::{Error, free_port};

/// How etcd is started, kept to start it again ([`crate::TestEnv::restart_etcd`]).
pub(crate) struct EtcdLaunch {
    program: PathBuf,
    args: Vec<String>,
    /// The client URL, `http://127.0.0.1:<port>`.
    pub(crate) url: String,
}

impl EtcdLaunch {
    /// etcd `program` on two free loopback ports, its data in `dir/etcd`.
    pub(crate) fn new(program: &Path, dir: &Path) -> Result<Self, Error> {
        let etcd_port = free_port()?;
        let peer_port = free_port()?;
        let url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let mut args = vec![
            "--name=hubfed-testenv".to_string(),
            format!("--data-dir={}", dir.join("etcd").display()),
            format!("--listen-client-urls={url}"),
            format!("--advertise-client-urls={url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=hubfed-testenv={peer_url}"),
            "--log-level=warn".to_string(),
            // Generous quota for benchmarks with many objects; HUBFED_ETCD_QUOTA_BYTES raises
            // it (benchmarks with large objects, with the environment's directory on disk).
            format!("--quota-backend-bytes={}", quota_bytes()),
            // etcd keeps its raft log in memory: the entries since the last snapshot plus
            // 5,000 more. 3.5's default (a snapshot every 100,000 entries) holds 100,000
            // writes — 10 GB with large objects; 10,000 is 3.6's default.
            // HUBFED_ETCD_SNAPSHOT_COUNT lowers it (benchmarks with large objects).
            format!("--snapshot-count={}", snapshot_count()),
        ];
        if let Some(entries) = catchup_entries() {
            // 3.6 and later only (hack/build-etcd.sh): the entries kept after each snapshot.
            args.push(format!("--snapshot-catchup-entries={entries}"));
        }
        if etcd_supports_no_fsync(program) {
            args.push("--unsafe-no-fsync=true".to_string());
        }
        Ok(Self {
            program: program.to_owned(),
            args,
            url,
        })
    }

    /// Starts etcd, logging to `dir/logs/<log_name>`. Its guardian waits for the API servers'
    /// and, when the environment owns `dir`, removes it last.
    pub(crate) fn spawn(
        &self,
        dir: &Path,
        owns_dir: bool,
        log_name: &str,
    ) -> Result<GuardedProcess, Error> {
        GuardedProcess::spawn(Spawn {
            name: "etcd",
            program: &self.program,
            args: self.args.clone(),
            env: vec![],
            pid_dir: &dir.join("pids"),
            log_file: dir.join("logs").join(log_name),
            grace_seconds: 10,
            outlive_others: true,
            remove_dir_after: owns_dir.then_some(dir),
        })
    }

    /// Waits until `etcd` answers its health check (`GET /health`: a leader, no alarm). A
    /// connection alone proves little: etcd listens before it has read its data back, and
    /// may still fail then.
    pub(crate) fn wait_serving(
        &self,
        etcd: &GuardedProcess,
        timeout: Duration,
    ) -> Result<(), Error> {
        let addr = self.url.trim_start_matches("http://").to_string();
        let deadline = Instant::now() + timeout;
        let pid = etcd.pid();
        let mut last = String::from("no answer yet");
        while Instant::now() < deadline && alive(pid) {
            match health(&addr) {
                Ok(body) if body.contains(r#""health":"true""#) => return Ok(()),
                Ok(body) => last = format!("/health answered {body:?}"),
                Err(e) => last = format!("/health: {e}"),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let state = if alive(pid) { "running" } else { "exited" };
        Err(Error::NotReady {
            component: format!("etcd ({state}; {last})"),
            seconds: timeout.as_secs(),
            log: etcd.log_tail(20),
        })
    }
}

/// The body of etcd's `GET /health` on `addr` (plain HTTP/1.0, a few seconds at most).
fn health(addr: &str) -> std::io::Result<String> {
    request(addr, "GET /health", None, Duration::from_secs(3))
}

/// The body of etcd's answer to `request_line` (`METHOD /path`) on `addr`, over plain
/// HTTP/1.0 with `body` as JSON, waiting up to `read_timeout` for it.
fn request(
    addr: &str,
    request_line: &str,
    body: Option<&str>,
    read_timeout: Duration,
) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let addr: std::net::SocketAddr = addr
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(read_timeout))?;
    stream.set_write_timeout(Some(Duration::from_secs(1)))?;
    let mut message = format!("{request_line} HTTP/1.0\r\nHost: 127.0.0.1\r\n");
    if let Some(body) = body {
        message.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ));
    } else {
        message.push_str("\r\n");
    }
    stream.write_all(message.as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response
        .split_once("\r\n\r\n")
        .map_or(response.as_str(), |(_, body)| body)
        .trim()
        .to_string())
}

impl EtcdLaunch {
    /// Compacts etcd's history to its current revision and defragments its database
    /// (through etcd's JSON gateway, `/v3/...`): what was deleted and overwritten leaves the
    /// database file. Returns its size before and after, in bytes. Blocking; the defragment
    /// holds every request meanwhile.
    pub(crate) fn compact(&self) -> Result<(u64, u64), Error> {
        let addr = self.url.trim_start_matches("http://");
        let call = |path: &str, body: &str, timeout: Duration| {
            let answer =
                request(addr, &format!("POST {path}"), Some(body), timeout).map_err(|source| {
                    Error::Io {
                        what: format!("etcd {path}"),
                        source,
                    }
                })?;
            serde_json::from_str::<serde_json::Value>(&answer).map_err(|e| Error::Setup {
                what: format!("etcd {path}"),
                message: format!("{e}: {answer:.200}"),
            })
        };
        // The gateway writes 64-bit numbers as strings.
        let number = |value: &serde_json::Value| {
            value
                .as_str()
                .and_then(|s| s.parse().ok())
                .or_else(|| value.as_u64())
                .unwrap_or(0)
        };
        let status = call("/v3/maintenance/status", "{}", Duration::from_secs(30))?;
        let before = number(&status["dbSize"]);
        let revision = number(&status["header"]["revision"]);
        let compacted = call(
            "/v3/kv/compaction",
            &format!(r#"{{"revision":"{revision}","physical":true}}"#),
            Duration::from_secs(600),
        )?;
        // An API server's own compaction may have been there first.
        if let Some(message) = compacted.get("message").and_then(|m| m.as_str())
            && !message.contains("compacted")
        {
            return Err(Error::Setup {
                what: "compacting etcd".into(),
                message: message.to_owned(),
            });
        }
        let defragmented = call("/v3/maintenance/defragment", "{}", Duration::from_secs(600))?;
        if let Some(message) = defragmented.get("message").and_then(|m| m.as_str()) {
            return Err(Error::Setup {
                what: "defragmenting etcd".into(),
                message: message.to_owned(),
            });
        }
        let status = call("/v3/maintenance/status", "{}", Duration::from_secs(30))?;
        Ok((before, number(&status["dbSize"])))
    }
}

/// etcd's `--quota-backend-bytes`: `HUBFED_ETCD_QUOTA_BYTES` when set to a number, else 8 GiB.
fn quota_bytes() -> u64 {
    std::env::var("HUBFED_ETCD_QUOTA_BYTES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(8 << 30)
}

/// etcd's `--snapshot-count`: `HUBFED_ETCD_SNAPSHOT_COUNT` when set to a positive number,
/// else 10,000.
fn snapshot_count() -> u64 {
    std::env::var("HUBFED_ETCD_SNAPSHOT_COUNT")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(10_000)
}

/// etcd's `--snapshot-catchup-entries` (the raft entries it keeps in memory after each
/// snapshot, 5,000 by default and fixed in 3.5): `HUBFED_ETCD_CATCHUP_ENTRIES` when set to a
/// number, for the large-object benchmark on an etcd ≥ 3.6 built by `hack/build-etcd.sh`.
fn catchup_entries() -> Option<u64> {
    std::env::var("HUBFED_ETCD_CATCHUP_ENTRIES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
}

/// etcd's version `(major, minor, patch)` from `etcd --version`.
fn etcd_version(etcd: &Path) -> Option<(u32, u32, u32)> {
    let out = std::process::Command::new(etcd)
        .arg("--version")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let v = text.lines().next()?.rsplit(' ').next()?.to_string();
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    Some((parts.next()?, parts.next()?, parts.next().unwrap_or(0)))
}

fn etcd_supports_no_fsync(etcd: &Path) -> bool {
    etcd_version(etcd).is_some_and(|(major, minor, _)| (major, minor) >= (3, 5))
}

/// What etcd a test environment runs, for reports: its version and the settings the
/// `HUBFED_ETCD_*` variables change, e.g. `etcd 3.6.16, snapshot every 1000 writes, 100
/// catch-up entries, quota 32 GiB`.
pub fn etcd_description(etcd: &Path) -> String {
    let version = etcd_version(etcd).map_or_else(
        || "etcd of unknown version".to_owned(),
        |(major, minor, patch)| format!("etcd {major}.{minor}.{patch}"),
    );
    let catchup = catchup_entries().map_or_else(
        || "5000 catch-up entries".to_owned(),
        |n| format!("{n} catch-up entries"),
    );
    format!(
        "{version}, snapshot every {} writes, {catchup}, quota {} GiB",
        snapshot_count(),
        quota_bytes() >> 30
    )
}
