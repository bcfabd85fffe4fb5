//! The host side the runner depends on: the workspace (and building the kernel in it), the
//! QEMU executable, the OVMF firmware and KVM.

use std::env;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::command::{DEFAULT_OVMF, QEMU_BINARY};

/// The kernel's target triple.
pub const KERNEL_TARGET: &str = "x86_64-unknown-none";
/// The kernel's package (and binary) name.
pub const KERNEL_PACKAGE: &str = "kernel";

/// The ibkern workspace this runner belongs to.
#[derive(Clone, Debug)]
pub struct Workspace {
    pub root: PathBuf,
    pub target_dir: PathBuf,
}

impl Workspace {
    /// The workspace the runner was built from; the target directory honours
    /// `CARGO_TARGET_DIR` as cargo does.
    pub fn locate() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the runner crate lives one level below the workspace root")
            .to_path_buf();
        let target_dir = match env::var_os("CARGO_TARGET_DIR") {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => root.join("target"),
        };
        Self { root, target_dir }
    }

    /// Where `cargo build -p kernel --release --target x86_64-unknown-none` puts the ELF.
    pub fn kernel_elf(&self) -> PathBuf {
        self.target_dir
            .join(KERNEL_TARGET)
            .join("release")
            .join(KERNEL_PACKAGE)
    }

    /// Scratch space for the runner's own images (`<target>/ibkern/<name>`).
    pub fn work_dir(&self, name: &str) -> PathBuf {
        self.target_dir.join("ibkern").join(name)
    }

    /// Builds the kernel (release) and returns its ELF. Cargo's progress goes to stderr.
    pub fn build_kernel(&self) -> Result<PathBuf> {
        let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(&cargo)
            .current_dir(&self.root)
            .args([
                "build",
                "-p",
                KERNEL_PACKAGE,
                "--release",
                "--target",
                KERNEL_TARGET,
            ])
            .status()
            .with_context(|| format!("cannot run {}", cargo.to_string_lossy()))?;
        if !status.success() {
            bail!(
                "building the kernel failed ({status}): `cargo build -p {KERNEL_PACKAGE} \
                 --release --target {KERNEL_TARGET}` in {}",
                self.root.display()
            );
        }
        let elf = self.kernel_elf();
        if !elf.is_file() {
            bail!(
                "the kernel build succeeded but {} does not exist",
                elf.display()
            );
        }
        Ok(elf)
    }
}

/// Finds `name` in `PATH` (or takes it as a path when it contains a `/`).
pub fn find_executable(name: &Path) -> Option<PathBuf> {
    if name.components().count() > 1 {
        return name.is_file().then(|| name.to_path_buf());
    }
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// The QEMU executable: `explicit` if given, else `qemu-system-x86_64` from `PATH`.
pub fn qemu_binary(explicit: Option<&Path>) -> Result<PathBuf> {
    let wanted = explicit.unwrap_or(Path::new(QEMU_BINARY));
    find_executable(wanted).with_context(|| {
        format!(
            "{} not found. Run `.ci/setup` in the workspace: it installs what ibkern needs \
             (Debian's qemu-system-x86, QEMU 7.2 on bookworm, and ovmf; root or sudo), or \
             name the executable with --qemu PATH",
            wanted.display()
        )
    })
}

/// The OVMF firmware image: `explicit` if given, else Debian's.
pub fn ovmf(explicit: Option<&Path>) -> Result<PathBuf> {
    let wanted = explicit.unwrap_or(Path::new(DEFAULT_OVMF));
    if wanted.is_file() {
        Ok(wanted.to_path_buf())
    } else {
        bail!(
            "UEFI firmware {} not found. Run `.ci/setup` in the workspace: it installs what \
             ibkern needs (Debian's ovmf and qemu-system-x86; root or sudo), or name the file \
             with --ovmf PATH",
            wanted.display()
        )
    }
}

/// Checks that /dev/kvm can be opened for reading and writing, as QEMU needs.
pub fn check_kvm() -> Result<()> {
    match OpenOptions::new().read(true).write(true).open("/dev/kvm") {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "--accel kvm: /dev/kvm does not exist (no hardware virtualisation, or the kvm_intel/\
             kvm_amd module is not loaded: `sudo modprobe kvm_intel` or `sudo modprobe kvm_amd`). \
             Use --accel tcg instead"
        ),
        Err(e) => bail!(
            "--accel kvm: cannot open /dev/kvm ({e}). Add yourself to its group: `sudo usermod \
             -aG kvm $USER` and log in again, or use --accel tcg"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tools_name_the_setup_script_and_the_debian_package() {
        let err = qemu_binary(Some(Path::new("no-such-qemu-binary")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("Run `.ci/setup`"), "{err}");
        assert!(err.contains("qemu-system-x86"), "{err}");
        let err = ovmf(Some(Path::new("/nonexistent/OVMF.fd")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("Run `.ci/setup`"), "{err}");
        assert!(err.contains("ovmf"), "{err}");
    }

    #[test]
    fn executables_are_found_in_path_or_by_path() {
        assert_eq!(
            find_executable(Path::new("/bin/sh")),
            Some(PathBuf::from("/bin/sh"))
        );
        assert!(find_executable(Path::new("sh")).is_some());
        assert_eq!(find_executable(Path::new("./definitely/not/here")), None);
    }

    #[test]
    fn kernel_elf_path_follows_cargo_layout() {
        let ws = Workspace {
            root: "/w".into(),
            target_dir: "/w/target".into(),
        };
        assert_eq!(
            ws.kernel_elf(),
            Path::new("/w/target/x86_64-unknown-none/release/kernel")
        );
        assert_eq!(
            ws.work_dir("selftest"),
            Path::new("/w/target/ibkern/selftest")
        );
    }
}
