//! `cargo qemu <subcommand>`: see `cargo qemu --help` and docs/runner.md.

use std::process::ExitCode;

use clap::Parser;
use ibkern_qemu::cli::{self, Cli};

fn main() -> ExitCode {
    cli::main(Cli::parse()).into()
}
