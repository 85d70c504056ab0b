//! Child processes that cannot outlive the process that started them.
//!
//! Each server runs under a small `sh` guardian whose standard input is a pipe held only by
//! the test process. When the test process goes away for any reason — a normal exit, a
//! panic, even `kill -9` — the kernel closes the pipe, the guardian reads end-of-file and
//! terminates its server (SIGTERM, then SIGKILL after a grace period). Stopping a process
//! on purpose is the same thing: close the pipe and wait for the guardian.
//!
//! This needs no `unsafe` (no `pre_exec`/`prctl`), which the workspace forbids.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Error;

/// Waits for end-of-file on stdin, then stops the server. With `HUBFED_WAIT_DIR` set it
/// first waits (up to the grace period) for every process whose pid is recorded there to
/// exit: etcd uses this to outlive the API servers that depend on it.
const GUARDIAN: &str = r#"
"$@" &
child=$!
echo "$child" > "$HUBFED_PIDFILE"
read -r _ || true
if [ -n "${HUBFED_WAIT_DIR:-}" ]; then
  n=0
  for f in "$HUBFED_WAIT_DIR"/*.pid; do
    [ -f "$f" ] && [ "$f" != "$HUBFED_PIDFILE" ] || continue
    p=$(cat "$f")
    while [ "$n" -lt $((HUBFED_GRACE * 10)) ] && kill -0 "$p" 2>/dev/null; do
      n=$((n + 1)); sleep 0.1
    done
  done
fi
kill -CONT "$child" 2>/dev/null
kill -TERM "$child" 2>/dev/null
# Poll instead of a background killer, which would linger with this command line. An
# exited child stays a zombie (state Z) until `wait` reaps it.
n=0
while [ -e "/proc/$child/stat" ] && [ "$(cut -d' ' -f3 "/proc/$child/stat" 2>/dev/null)" != Z ]; do
  n=$((n + 1))
  [ "$n" -eq $((HUBFED_GRACE * 10)) ] && kill -KILL "$child" 2>/dev/null
  sleep 0.1
done
wait "$child"
rm -f "$HUBFED_PIDFILE"
# The last process of an environment that owns its directory removes it: needed when the
# test process exits without dropping the environment (a shared one is never dropped).
if [ -n "${HUBFED_REMOVE_DIR:-}" ]; then rm -rf "$HUBFED_REMOVE_DIR"; fi
"#;

/// A server process started through a guardian.
pub struct GuardedProcess {
    name: String,
    guardian: Child,
    stdin: Option<ChildStdin>,
    pid_file: PathBuf,
    log_file: PathBuf,
}

/// How a guarded process is started.
pub struct Spawn<'a> {
    pub name: &'a str,
    pub program: &'a Path,
    pub args: Vec<String>,
    pub env: Vec<(&'a str, String)>,
    /// Directory holding one `<name>.pid` file per process.
    pub pid_dir: &'a Path,
    pub log_file: PathBuf,
    /// Seconds between SIGTERM and SIGKILL.
    pub grace_seconds: u32,
    /// Wait for the other processes of `pid_dir` to exit before stopping this one.
    pub outlive_others: bool,
    /// Remove this directory once the process has stopped.
    pub remove_dir_after: Option<&'a Path>,
}

impl GuardedProcess {
    pub fn spawn(spec: Spawn<'_>) -> Result<Self, Error> {
        let pid_file = spec.pid_dir.join(format!("{}.pid", spec.name));
        let log = File::create(&spec.log_file).map_err(|source| Error::Io {
            what: format!("creating {}", spec.log_file.display()),
            source,
        })?;
        let log_err = log.try_clone().map_err(|source| Error::Io {
            what: "duplicating a log file handle".into(),
            source,
        })?;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(GUARDIAN)
            .arg(format!("hubfed-guardian-{}", spec.name))
            .arg(spec.program)
            .args(&spec.args)
            .env("HUBFED_PIDFILE", &pid_file)
            .env("HUBFED_GRACE", spec.grace_seconds.to_string())
            .stdin(Stdio::piped())
            .stdout(log)
            .stderr(log_err)
            // Own process group: a Ctrl-C in the terminal reaches the parent only, which then
            // stops the servers in order (API servers before etcd).
            .process_group(0);
        if spec.outlive_others {
            cmd.env("HUBFED_WAIT_DIR", spec.pid_dir);
        }
        if let Some(dir) = spec.remove_dir_after {
            cmd.env("HUBFED_REMOVE_DIR", dir);
        }
        for (k, v) in spec.env {
            cmd.env(k, v);
        }
        let mut guardian = cmd.spawn().map_err(|source| Error::Io {
            what: format!("starting {}", spec.program.display()),
            source,
        })?;
        let stdin = guardian.stdin.take();
        Ok(Self {
            name: spec.name.to_string(),
            guardian,
            stdin,
            pid_file,
            log_file: spec.log_file,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn log_file(&self) -> &Path {
        &self.log_file
    }

    /// The server's own pid (not the guardian's), once the guardian has recorded it.
    pub fn pid(&self) -> Option<u32> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(s) = std::fs::read_to_string(&self.pid_file)
                && let Ok(pid) = s.trim().parse()
            {
                return Some(pid);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the server is still running.
    pub fn is_alive(&self) -> bool {
        alive(self.pid())
    }

    /// Sends a signal (`STOP`, `CONT`, ...) to the server itself.
    pub fn signal(&self, signal: &str) -> Result<(), Error> {
        let pid = self
            .pid()
            .ok_or_else(|| Error::NotRunning(self.name.clone()))?;
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .map_err(|source| Error::Io {
                what: "running kill".into(),
                source,
            })?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::NotRunning(self.name.clone()))
        }
    }

    /// Asks the guardian to stop the server; returns at once.
    pub fn begin_stop(&mut self) {
        self.stdin.take();
    }

    /// Stops the server and waits until it has exited.
    pub fn stop(&mut self) {
        self.begin_stop();
        let _ = self.guardian.wait();
    }

    /// Stops the server with `signal` (`KILL` for a crash) and the guardian with it, without
    /// the guardian's own shutdown steps (waiting for other servers, removing a directory),
    /// so that a new incarnation can take the server's place at once. Waits for both to
    /// exit; a server that outlives `timeout` is killed.
    pub fn stop_now(&mut self, signal: &str, timeout: Duration) -> Result<(), Error> {
        let pid = self.pid();
        self.signal(signal)?;
        let deadline = Instant::now() + timeout;
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if alive(pid) {
            self.signal("KILL")?;
        }
        // The guardian is a shell waiting on its stdin: SIGKILL ends it before it acts.
        let _ = self.guardian.kill();
        let _ = self.guardian.wait();
        self.stdin.take();
        // The server, now an orphan, is reaped by init; its pid file goes with the guardian.
        let _ = std::fs::remove_file(&self.pid_file);
        while alive(pid) {
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// The last lines of the server's log, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log_file).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for GuardedProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether a process exists and has not exited (an exited server stays a zombie until its
/// guardian reaps it).
pub fn alive(pid: Option<u32>) -> bool {
    pid.and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .and_then(|stat| {
            let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
            Some(state != 'Z' && state != 'X')
        })
        .unwrap_or(false)
}
