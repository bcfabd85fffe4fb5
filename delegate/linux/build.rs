//! Stops the build at once, naming the command to run, when the host lacks what the `sideway`
//! verbs crate needs to build its libibverbs shim (cmake) and bindings (libclang), instead of
//! letting that crate's build fail later with a compiler's or cmake's error.

use std::env;
use std::path::Path;

fn on_path(program: &str) -> bool {
    env::var_os("PATH")
        .is_some_and(|path| env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Where Debian, Fedora and a local build put libclang; `LIBCLANG_PATH` names it elsewhere.
fn libclang_found() -> bool {
    if env::var_os("LIBCLANG_PATH").is_some() {
        return true;
    }
    let mut dirs = vec![
        "/usr/lib/x86_64-linux-gnu".to_string(),
        "/usr/lib64".to_string(),
        "/usr/lib".to_string(),
        "/usr/local/lib".to_string(),
    ];
    if let Ok(entries) = std::fs::read_dir("/usr/lib") {
        dirs.extend(
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("llvm-"))
                .map(|e| e.path().join("lib").to_string_lossy().into_owned()),
        );
    }
    dirs.iter().any(|dir| {
        std::fs::read_dir(Path::new(dir)).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("libclang"))
        })
    })
}

fn main() {
    println!("cargo:rerun-if-env-changed=PATH");
    println!("cargo:rerun-if-env-changed=LIBCLANG_PATH");
    let mut missing = Vec::new();
    if !on_path("cmake") {
        missing.push("cmake");
    }
    if !libclang_found() {
        missing.push("libclang (Debian's libclang-dev)");
    }
    if !missing.is_empty() {
        eprintln!(
            "ibkern-delegate needs {} to build its verbs crate (sideway). Run `.ci/setup` in \
             the workspace (it installs them with apt-get; root or sudo), or set LIBCLANG_PATH \
             if libclang is installed elsewhere.",
            missing.join(" and ")
        );
        std::process::exit(1);
    }
}
