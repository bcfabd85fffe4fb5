//! The Linux delegate (`ibkern-delegate`, docs/delegation.md) in the Linux guest: built for
//! the host, which is the guest's Debian (bookworm), so it runs there as built. It links only
//! libc and libgcc_s and loads the guest's libibverbs at run time.

use std::env;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::host::Workspace;

/// The delegate's package and binary.
pub const PACKAGE: &str = "ibkern-delegate";
/// Where the delegate lives in the guest.
pub const GUEST_PATH: &str = "usr/bin/ibkern-delegate";

/// Builds the delegate (`release`: optimised, else cargo's dev profile, which the workspace's
/// tests have built already) and returns the binary's path. Cargo's progress goes to stderr.
pub fn build(ws: &Workspace, release: bool) -> Result<PathBuf> {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut args = vec!["build", "-p", PACKAGE];
    if release {
        args.push("--release");
    }
    let status = Command::new(&cargo)
        .current_dir(&ws.root)
        .args(&args)
        .status()
        .with_context(|| format!("cannot run {}", cargo.to_string_lossy()))?;
    if !status.success() {
        bail!(
            "building the delegate failed ({status}): `cargo {}` in {} (it needs cmake and \
             libclang-dev; .ci/setup installs them)",
            args.join(" "),
            ws.root.display()
        );
    }
    let bin = ws
        .target_dir
        .join(if release { "release" } else { "debug" })
        .join(PACKAGE);
    if !bin.is_file() {
        bail!(
            "the delegate's build succeeded but {} does not exist",
            bin.display()
        );
    }
    Ok(bin)
}
