//! `cargo qemu <subcommand>`: see `cargo qemu --help` and docs/runner.md.

use std::process::ExitCode;

use clap::Parser;
use ibkern_qemu::cli::{self, Cli};
use ibkern_qemu::interrupt;

fn main() -> ExitCode {
    if let Err(e) = interrupt::install() {
        eprintln!("ibkern-qemu: warning: cannot handle SIGINT/SIGTERM/SIGHUP: {e}");
    }
    let exit = cli::main(Cli::parse());
    match interrupt::received() {
        // The guests are stopped and the temporary files removed by now.
        Some(sig) => {
            eprintln!(
                "ibkern-qemu: stopped by {}: guests killed, temporary files removed",
                interrupt::name(sig)
            );
            ExitCode::from(interrupt::exit_status(sig))
        }
        None => exit.into(),
    }
}
