// Build information for the boot banner: the git commit of the tree being built, as
// `IBKERN_GIT_COMMIT` (12 hex digits, `-dirty` when tracked files differ from it, `unknown`
// outside a git checkout). The runner's crate includes this file as its own build script.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]);
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).map(|s| !s.is_empty());
    let value = match (commit, dirty) {
        (Some(c), Some(true)) => format!("{c}-dirty"),
        (Some(c), _) => c,
        (None, _) => "unknown".to_string(),
    };
    println!("cargo:rustc-env=IBKERN_GIT_COMMIT={value}");
    // Run again when HEAD moves (a checkout changes HEAD, a commit the branch's ref) or a
    // source this crate is built from is edited (the dirty flag; edits elsewhere in the tree
    // show at the next commit or edit here). Not on the index: staging changes nothing here.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!(
            "cargo:rerun-if-changed={}",
            Path::new(&dir).join("HEAD").display()
        );
    }
    if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
        // Only paths that exist: cargo reruns a script on every build for a missing one.
        for f in ["refs/heads", "packed-refs"]
            .into_iter()
            .filter(|f| Path::new(&common).join(f).exists())
        {
            println!(
                "cargo:rerun-if-changed={}",
                Path::new(&common).join(f).display()
            );
        }
    }
    // The sources of this crate and of the workspace crates it is built from.
    let sources: &[&str] = match std::env::var("CARGO_PKG_NAME").as_deref() {
        Ok("kernel") => &["src", "../drivers", "../verbs/src", "../bench/src"],
        _ => &["src", "../sim/src", "../boot/src", "../bench/src"],
    };
    for dir in sources {
        println!("cargo:rerun-if-changed={dir}");
    }
}
