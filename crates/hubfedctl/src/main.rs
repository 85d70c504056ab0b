//! `hubfedctl`: see the library for the commands.

use std::process::ExitCode;

fn main() -> ExitCode {
    let code = hubfedctl::run(
        std::env::args().collect(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    );
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
