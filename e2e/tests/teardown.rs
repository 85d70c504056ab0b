//! No server started by a test outlives it: not after a clean drop, not after a panic, not
//! after the test process is killed outright.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use hubfed_testenv::{TestEnv, TestEnvConfig};

const CHILD_ENV: &str = "HUBFED_TEARDOWN_CHILD";

/// Processes whose command line names `dir` (servers and their guardians).
fn processes_naming(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        if cmdline.contains(&needle) {
            found.push(format!(
                "{}: {}",
                entry.file_name().to_string_lossy(),
                cmdline
            ));
        }
    }
    found
}

fn assert_all_gone(dir: &Path, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let left = processes_naming(dir);
        if left.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "processes left running after teardown:\n{}",
                left.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The last guardian removes the directory just after its server exits.
fn wait_removed(dir: &Path, within: Duration) {
    let deadline = Instant::now() + within;
    while dir.exists() {
        assert!(
            Instant::now() < deadline,
            "{} was not removed",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn small_env() -> TestEnv {
    TestEnv::start(TestEnvConfig {
        members: 1,
        ..Default::default()
    })
    .expect("test clusters start")
}

#[test]
fn dropping_the_environment_stops_every_process() {
    let env = small_env();
    let dir = env.dir().to_path_buf();
    let pids = env.pids();
    // etcd + 2 API servers + 2 controller managers
    assert_eq!(pids.len(), 5, "pids: {pids:?}");
    assert!(!processes_naming(&dir).is_empty());
    drop(env);
    assert_all_gone(&dir, Duration::from_secs(1));
    assert!(!dir.exists(), "{} removed", dir.display());
}

/// Runs one of the `child_*` helpers below in a new process of this test binary.
fn run_child(helper: &str, dir_file: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().expect("test binary path"))
        .args([
            "--exact",
            helper,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir_file)
        // The child fails on purpose; its "test result: FAILED" must not read as ours.
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("child test starts")
}

fn wait_for_dir_file(dir_file: &Path, child: &mut std::process::Child) -> std::path::PathBuf {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if let Ok(s) = std::fs::read_to_string(dir_file)
            && s.ends_with('\n')
        {
            return s.trim().into();
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("child exited before starting its clusters: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "child did not start its clusters"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_panicking_test_leaves_no_process() {
    let dir_file =
        std::env::temp_dir().join(format!("hubfed-teardown-panic-{}", std::process::id()));
    let _ = std::fs::remove_file(&dir_file);
    let mut child = run_child("child_panics_with_clusters_running", &dir_file);
    let dir = wait_for_dir_file(&dir_file, &mut child);
    let status = child.wait().expect("child exits");
    assert!(!status.success(), "the child test panicked on purpose");
    assert_all_gone(&dir, Duration::from_secs(30));
    assert!(!dir.exists(), "{} removed", dir.display());
    let _ = std::fs::remove_file(&dir_file);
}

#[test]
fn a_killed_test_process_leaves_no_process() {
    let dir_file =
        std::env::temp_dir().join(format!("hubfed-teardown-kill-{}", std::process::id()));
    let _ = std::fs::remove_file(&dir_file);
    let mut child = run_child("child_waits_with_clusters_running", &dir_file);
    let dir = wait_for_dir_file(&dir_file, &mut child);
    assert!(!processes_naming(&dir).is_empty());
    child.kill().expect("SIGKILL the child"); // no destructor runs
    child.wait().expect("child reaped");
    assert_all_gone(&dir, Duration::from_secs(60));
    wait_removed(&dir, Duration::from_secs(10));
    let _ = std::fs::remove_file(&dir_file);
}

fn child_dir_file() -> Option<std::path::PathBuf> {
    std::env::var_os(CHILD_ENV).map(Into::into)
}

#[test]
#[ignore = "helper: run by a_panicking_test_leaves_no_process"]
fn child_panics_with_clusters_running() {
    let Some(dir_file) = child_dir_file() else {
        return;
    };
    let env = small_env();
    std::fs::write(&dir_file, format!("{}\n", env.dir().display())).unwrap();
    panic!("on purpose, with clusters running");
}

#[test]
#[ignore = "helper: run by a_killed_test_process_leaves_no_process"]
fn child_waits_with_clusters_running() {
    let Some(dir_file) = child_dir_file() else {
        return;
    };
    let env = small_env();
    std::fs::write(&dir_file, format!("{}\n", env.dir().display())).unwrap();
    std::thread::sleep(Duration::from_secs(600));
    drop(env);
}
