//! The controller of [`crate::Federation::shared`]: set-up, then `hubfed_controller::run` on a
//! thread of its own with its own runtime, for as long as the test binary; why it stopped, for
//! every later wait.

use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::Instant;

use hubfed_api::kubefedconfig::KubeFedConfigSpec;
use hubfed_testenv::TestEnv;
use tokio_util::sync::CancellationToken;

use crate::{CONTROLLER_EXIT, Federation, report, set_up_federation, wait_clusters_ready};

pub(crate) static FEDERATION: OnceLock<Result<Federation, String>> = OnceLock::new();

/// Sets the federation up in `env` ([`set_up_federation`] with `config` and `joined`) and
/// runs the controller on a thread of its own until the test binary exits; returns once the
/// `joined` members are `Ready`.
pub(crate) fn start(
    env: &'static TestEnv,
    config: Option<KubeFedConfigSpec>,
    joined: &[&str],
) -> Result<Federation, String> {
    let began = Instant::now();
    let (ready_tx, ready_rx) = mpsc::channel();
    let set_up = SetUp {
        config,
        joined: joined.iter().map(|name| (*name).to_owned()).collect(),
    };
    let joined = match joined {
        [] => "nothing joined".to_owned(),
        names => format!("{} joined and Ready", names.join(" + ")),
    };
    std::thread::Builder::new()
        .name("hubfed-controller".to_owned())
        .spawn(move || controller_thread(env, set_up, ready_tx))
        .map_err(|e| format!("cannot start the controller thread: {e}"))?;
    match ready_rx.recv() {
        Ok(Ok(())) => {
            report(format_args!(
                "federation (CRDs, FTCs, {joined}) set up in {:.1}s",
                began.elapsed().as_secs_f64()
            ));
            Ok(Federation { env })
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(CONTROLLER_EXIT
            .get()
            .cloned()
            .unwrap_or_else(|| "the controller thread ended during set-up".to_owned())),
    }
}

/// Runs set-up, then the controller until the test binary exits. Reports set-up success or
/// failure on `ready`, and records in [`CONTROLLER_EXIT`] why the controller stopped.
fn controller_thread(
    env: &'static TestEnv,
    set_up: SetUp,
    ready: mpsc::Sender<Result<(), String>>,
) {
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("hubfed-controller-rt")
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = ready.send(Err(format!("cannot build the controller runtime: {e}")));
            return;
        }
    };
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
        runtime.block_on(run_federation(env, set_up, ready.clone()))
    }));
    let exit = match outcome {
        Ok(exit) => exit,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            format!("the controller panicked: {message}")
        }
    };
    report(&exit);
    let _ = CONTROLLER_EXIT.set(exit.clone());
    let _ = ready.send(Err(exit));
}

/// What [`controller_thread`] sets up before the controller starts.
struct SetUp {
    config: Option<KubeFedConfigSpec>,
    joined: Vec<String>,
}

async fn run_federation(
    env: &'static TestEnv,
    set_up: SetUp,
    ready: mpsc::Sender<Result<(), String>>,
) -> String {
    let joined: Vec<&str> = set_up.joined.iter().map(String::as_str).collect();
    if let Err(e) = set_up_federation(env, set_up.config, &joined).await {
        return format!("federation set-up failed: {e:#}");
    }
    let hub = match env.hub().client().await {
        Ok(hub) => hub,
        Err(e) => return format!("cannot build the controller's hub client: {e:#}"),
    };
    // Never cancelled: the controller lives as long as the test binary.
    let shutdown = CancellationToken::new();
    let controller = hubfed_controller::run(
        hub.clone(),
        hubfed_controller::ControllerConfig::default(),
        shutdown,
    );
    tokio::pin!(controller);
    tokio::select! {
        result = &mut controller => return describe_exit(result),
        result = wait_clusters_ready(&hub, &joined) => {
            if let Err(e) = result {
                return format!("the members did not become Ready: {e:#}");
            }
        }
    }
    let _ = ready.send(Ok(()));
    describe_exit(controller.await)
}

fn describe_exit(result: anyhow::Result<()>) -> String {
    match result {
        Ok(()) => "the controller stopped without being asked to".to_owned(),
        Err(e) => format!("the controller failed: {e:#}"),
    }
}

fn init_logging() {
    let Ok(filter) = std::env::var("HUBFED_E2E_LOG") else {
        return;
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let file = std::env::var_os("HUBFED_E2E_LOG_FILE")
        .map(log_file)
        .and_then(|path| std::fs::File::create(path).ok());
    let _ = match file {
        Some(file) => builder
            .with_ansi(false)
            .with_writer(std::sync::Arc::new(file))
            .try_init(),
        None => builder.with_writer(std::io::stderr).try_init(),
    };
}

/// `HUBFED_E2E_LOG_FILE` itself, or — when it names a directory — `<binary>.log` in it, one
/// file per test binary (a whole `make e2e` run keeps every binary's log).
fn log_file(path: std::ffi::OsString) -> std::path::PathBuf {
    let path = std::path::PathBuf::from(path);
    if !path.is_dir() {
        return path;
    }
    let binary = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| format!("pid-{}", std::process::id()));
    path.join(format!("{binary}.log"))
}
