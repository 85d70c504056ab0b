//! `hubfedctl`, the hubfed CLI, as a library: [`run`] takes the command line and two output
//! streams and returns the exit code, so the binary is a thin `main` and tests drive the
//! exact code users run, in process.
//!
//! Commands follow kubefedctl (docs/kubefed-compatibility.md §3): `join`, `unjoin`, `enable`,
//! `disable`, `federate`, `orphaning-deletion`, plus `get clusters`, `version` and `completion`.
//! Results go to stdout, warnings and the error to stderr; an error is always one line starting
//! with `error: `. Exit codes: [`EXIT_OK`], [`EXIT_ERROR`], [`EXIT_USAGE`], [`EXIT_NOT_READY`].

mod cli;
mod control_plane;
mod enable;
mod error;
mod federate;
mod get;
mod get_services;
mod join;
mod kubeconfig;
mod least_privilege;
mod mcs_crds;
mod migrate;
mod ops;
mod orphan;
mod plan;
mod pull;
mod rbac;
mod rollout;
mod session;
mod status;
mod template;
mod types;
mod unjoin;

use std::io::Write;

use clap::{CommandFactory as _, Parser as _};

pub use error::{EXIT_ERROR, EXIT_NOT_READY, EXIT_OK, EXIT_USAGE, Error};

use crate::cli::{Cli, Command, CompletionShell, GetCommand, MigrateStep};
use crate::session::Session;

/// Output stream of [`run`].
pub type Output<'a> = &'a mut (dyn Write + Send);

/// Runs one command line (`args[0]` is the program name, as in `std::env::args()`), writing
/// results to `stdout` and messages to `stderr`; returns the exit code. Blocking; safe to call
/// from inside a tokio runtime (it then runs on a separate thread).
pub fn run(args: Vec<String>, stdout: Output<'_>, stderr: Output<'_>) -> i32 {
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|scope| {
            scope
                .spawn(move || run_blocking(args, stdout, stderr))
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    } else {
        run_blocking(args, stdout, stderr)
    }
}

fn run_blocking(args: Vec<String>, stdout: Output<'_>, stderr: Output<'_>) -> i32 {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(run_async(args, stdout, stderr)),
        Err(e) => {
            let _ = writeln!(stderr, "error: {}", Error::Runtime(e));
            EXIT_ERROR
        }
    }
}

/// [`run`] for callers already inside a tokio runtime.
pub async fn run_async(args: Vec<String>, stdout: Output<'_>, stderr: Output<'_>) -> i32 {
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return report_parse_error(&e, stdout, stderr),
    };
    let mut session = Session::new(cli.global, stdout, stderr);
    // `plan` and `diff` exit as `kubectl diff` does: 1 means changes, so errors are 2.
    let diff_like = matches!(cli.command, Command::Plan(_) | Command::Diff(_));
    match execute(cli.command, &mut session).await {
        Ok(code) => code,
        Err(e) => {
            session.error_line(&e);
            match e {
                Error::Usage(_) => EXIT_USAGE,
                _ if diff_like => EXIT_USAGE,
                _ => EXIT_ERROR,
            }
        }
    }
}

/// Help and version go to stdout with exit 0; a usage error is its first line on stderr.
fn report_parse_error(e: &clap::Error, stdout: Output<'_>, stderr: Output<'_>) -> i32 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = write!(stdout, "{}", e.render());
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                EXIT_USAGE
            } else {
                EXIT_OK
            }
        }
        _ => {
            // clap's message is its first paragraph; usage and tips follow.
            let rendered = e.render().to_string();
            let message: Vec<&str> = rendered
                .trim_start()
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            let message = message.join(" ");
            let message = message.strip_prefix("error: ").unwrap_or(&message);
            let _ = writeln!(stderr, "error: {message} (see --help)");
            EXIT_USAGE
        }
    }
}

async fn execute(command: Command, session: &mut Session<'_>) -> Result<i32, Error> {
    match command {
        Command::Join(args) => match args.mode {
            cli::JoinMode::Push => join::join(session, args).await,
            cli::JoinMode::Pull => pull::join_pull(session, args).await,
        },
        Command::Unjoin(args) => unjoin::unjoin(session, args).await.map(|()| EXIT_OK),
        Command::Enable(args) => enable::enable(session, args).await.map(|()| EXIT_OK),
        Command::Disable(args) => enable::disable(session, args).await.map(|()| EXIT_OK),
        Command::Federate(args) => federate::federate(session, args).await.map(|()| EXIT_OK),
        Command::OrphaningDeletion(command) => {
            orphan::orphaning(session, command).await.map(|()| EXIT_OK)
        }
        Command::Get(GetCommand::Clusters(args)) => {
            get::clusters(session, args).await.map(|()| EXIT_OK)
        }
        Command::Get(GetCommand::Serviceexports(args)) => {
            get_services::exports(session, args).await
        }
        Command::Status(args) => status::status(session, args).await.map(|()| EXIT_OK),
        Command::Plan(args) => plan::plan_file(session, args).await,
        Command::Diff(args) => plan::diff(session, args).await,
        Command::Rollout(command) => rollout::rollout(session, command).await.map(|()| EXIT_OK),
        Command::Migrate(MigrateStep::Hub(command)) => migrate::migrate(session, command).await,
        Command::Migrate(MigrateStep::LeastPrivilege(args)) => {
            least_privilege::least_privilege(session, args).await
        }
        Command::Version(args) => get::version(session, args).map(|()| EXIT_OK),
        Command::Completion(args) => {
            let shell = match args.shell {
                CompletionShell::Bash => clap_complete::Shell::Bash,
                CompletionShell::Zsh => clap_complete::Shell::Zsh,
                CompletionShell::Fish => clap_complete::Shell::Fish,
            };
            clap_complete::generate(shell, &mut Cli::command(), "hubfedctl", session.out());
            Ok(EXIT_OK)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version_line() -> String {
        format!("hubfedctl version: v{}\n", env!("CARGO_PKG_VERSION"))
    }

    fn run_args(args: &[&str]) -> (i32, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut full = vec!["hubfedctl".to_owned()];
        full.extend(args.iter().map(|a| (*a).to_owned()));
        let code = run(full, &mut out, &mut err);
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn version_help_and_completion_need_no_cluster() {
        let (code, out, err) = run_args(&["version"]);
        assert_eq!((code, out, err), (0, version_line(), String::new()));
        let (code, out, _) = run_args(&["--help"]);
        assert_eq!(code, EXIT_OK);
        assert!(out.contains("join") && out.contains("federate"), "{out}");
        for shell in ["bash", "zsh", "fish"] {
            let (code, out, _) = run_args(&["completion", shell]);
            assert_eq!(code, EXIT_OK);
            assert!(
                out.contains("hubfedctl") && out.contains("unjoin"),
                "{shell}: {out}"
            );
        }
    }

    #[test]
    fn usage_errors_are_one_line_and_exit_2() {
        for (args, message) in [
            (
                &["bogus"][..],
                "error: unrecognized subcommand 'bogus' (see --help)\n",
            ),
            (
                &["join"][..],
                "error: the following required arguments were not provided: <CLUSTER> (see --help)\n",
            ),
            (
                &["get", "clusters", "-o", "xml"][..],
                "error: invalid value 'xml' for '--output <FORMAT>' [possible values: yaml, json] (see --help)\n",
            ),
        ] {
            let (code, out, err) = run_args(args);
            assert_eq!(
                (code, out.as_str(), err.as_str()),
                (EXIT_USAGE, "", message)
            );
        }
    }

    #[tokio::test]
    async fn run_works_inside_a_runtime() {
        let (code, out, _) = run_args(&["version"]);
        assert_eq!((code, out), (0, version_line()));
    }
}
