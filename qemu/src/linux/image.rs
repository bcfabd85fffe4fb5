//! Building the Linux guest from Debian's packages: download (cached), unpack, and write the
//! initramfs with a small init. Nothing here is fetched from anywhere but the host's own apt
//! sources, and nothing from the packages is committed (everything lives under `out/linux`).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::cpio::CpioWriter;
use super::modules::ModuleTree;
use super::scripts;

/// The kernel: the current kernel package `linux-image-amd64` depends on.
pub const KERNEL_METAPACKAGE: &str = "linux-image-amd64";

/// Userland: rdma-core's verbs library and mlx4 provider, its utilities, perftest,
/// infiniband-diags (with the MAD libraries it links against), busybox, and the shared
/// libraries they link against.
pub const PACKAGES: &[&str] = &[
    "busybox-static",
    "libibverbs1",
    "ibverbs-providers",
    "ibverbs-utils",
    "perftest",
    "infiniband-diags",
    "libibmad5",
    "libibnetdisc5",
    "librdmacm1",
    "libibumad3",
    "libnl-3-200",
    "libnl-route-3-200",
    "libpci3",
    "libudev1",
    "zlib1g",
    "libc6",
    // libgcc_s, which Rust programs (the delegate, `cargo qemu linux --delegate`) link.
    "libgcc-s1",
];

/// Modules in the image (their dependencies come along): the HCA driver, its verbs driver,
/// the user-space verbs interface, the NIC of the guest-to-guest TCP link, and the
/// user-space MAD interface infiniband-diags needs (`/dev/infiniband/umadN`; init does not
/// load it, a script that runs the diags does: `ibk_run modprobe ib_umad`).
pub const MODULES: &[&str] = &["mlx4_core", "mlx4_ib", "ib_uverbs", "e1000", "ib_umad"];

/// Busybox applets linked into /bin.
const APPLETS: &[&str] = &[
    "sh", "mount", "umount", "mkdir", "modprobe", "insmod", "lsmod", "ip", "sleep", "cat", "echo",
    "grep", "poweroff", "timeout", "dmesg", "ls", "seq", "tee", "sed", "uname", "head", "tail",
    "wc", "true", "false", "test", "[", "env", "ps", "kill", "usleep", "ping", "awk", "cut", "tr",
    "expr", "find", "base64",
];

/// A built guest.
#[derive(Clone, Debug)]
pub struct LinuxImage {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// Kernel release, e.g. `6.1.0-56-amd64`.
    pub release: String,
    /// Modules in the initramfs, in load order.
    pub modules: Vec<String>,
    /// The .deb files it was built from.
    pub debs: Vec<PathBuf>,
}

/// Downloads what is missing into `out/debs`, unpacks into `out/root` and writes
/// `out/initrd.cpio`.
pub fn build(out: &Path) -> Result<LinuxImage> {
    let debs_dir = out.join("debs");
    let debs = ensure_debs(&debs_dir)?;
    let root = out.join("root");
    if root.exists() {
        fs::remove_dir_all(&root).with_context(|| format!("removing {}", root.display()))?;
    }
    fs::create_dir_all(&root)?;
    for deb in &debs {
        run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&root))
            .with_context(|| format!("unpacking {}", deb.display()))?;
    }
    let modules_root = root.join("lib/modules");
    let releases: Vec<String> = fs::read_dir(&modules_root)
        .with_context(|| format!("{} (no kernel modules unpacked)", modules_root.display()))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    let [release] = releases.as_slice() else {
        bail!(
            "expected one kernel in {}, found {releases:?}",
            modules_root.display()
        );
    };
    let kernel = root.join("boot").join(format!("vmlinuz-{release}"));
    if !kernel.is_file() {
        bail!("{} is missing from the kernel package", kernel.display());
    }
    let tree = ModuleTree::scan(&modules_root.join(release))?;
    let resolved = tree.closure(MODULES)?;
    let initrd = out.join("initrd.cpio");
    write_initramfs(&root, release, &tree, &resolved, &initrd)?;
    Ok(LinuxImage {
        kernel,
        initrd,
        release: release.clone(),
        modules: resolved.order,
        debs,
    })
}

fn run(command: &mut Command) -> Result<()> {
    let output = command
        .output()
        .with_context(|| format!("starting {command:?}"))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// The cached .deb of `package` in `dir` (`<package>_<version>_<arch>.deb`).
fn cached(dir: &Path, package: &str) -> Option<PathBuf> {
    let prefix = format!("{package}_");
    let mut hits: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
        })
        .collect();
    hits.sort();
    hits.pop()
}

/// The versioned kernel package behind the metapackage (a cached one wins, so a build
/// stays reproducible until the cache is removed).
fn kernel_package(dir: &Path) -> Result<String> {
    if let Ok(entries) = fs::read_dir(dir) {
        let mut found: Vec<String> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter_map(|n| {
                let package = n.split('_').next()?.to_string();
                let versioned = package.starts_with("linux-image-")
                    && package.ends_with("-amd64")
                    && package != KERNEL_METAPACKAGE;
                (versioned && n.ends_with(".deb")).then_some(package)
            })
            .collect();
        found.sort();
        if let Some(p) = found.pop() {
            return Ok(p);
        }
    }
    let output = Command::new("apt-cache")
        .args(["depends", KERNEL_METAPACKAGE])
        .output()
        .context("running apt-cache (is this a Debian host?)")?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-"))
        .map(str::to_string)
        .with_context(|| {
            format!(
                "apt-cache does not know {KERNEL_METAPACKAGE} (run `apt-get update` as root): {}",
                String::from_utf8_lossy(&output.stderr).trim()
            )
        })
}

/// Every package's .deb in `dir`, downloading the missing ones with `apt-get download`
/// (after `apt-get update` if that fails and we are root).
pub fn ensure_debs(dir: &Path) -> Result<Vec<PathBuf>> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut packages: Vec<String> = PACKAGES.iter().map(|p| p.to_string()).collect();
    packages.insert(0, kernel_package(dir)?);
    let missing: Vec<&String> = packages
        .iter()
        .filter(|p| cached(dir, p).is_none())
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "ibkern-qemu: apt-get download {}",
            missing
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        );
        let download = || {
            run(Command::new("apt-get")
                .arg("download")
                .args(&missing)
                .current_dir(dir))
        };
        if let Err(first) = download() {
            // SAFETY: getuid has no preconditions and cannot fail.
            let root = unsafe { libc::getuid() } == 0;
            if !root {
                return Err(first.context(
                    "apt-get download failed; the package lists may be stale: run `apt-get update` as root",
                ));
            }
            eprintln!("ibkern-qemu: apt-get download failed; running apt-get update");
            run(Command::new("apt-get").arg("update")).context("apt-get update")?;
            download().context("apt-get download (after apt-get update)")?;
        }
    }
    packages
        .iter()
        .map(|p| {
            cached(dir, p).with_context(|| format!("{p} was not downloaded into {}", dir.display()))
        })
        .collect()
}

/// What goes into the archive, by path (parents sort before their children).
enum Item {
    Dir,
    File { mode: u32, data: Vec<u8> },
    Link(String),
}

fn add_parents(items: &mut BTreeMap<String, Item>, path: &str) {
    let mut at = 0;
    while let Some(i) = path[at..].find('/') {
        items.entry(path[..at + i].to_string()).or_insert(Item::Dir);
        at += i + 1;
    }
}

/// Copies the tree under `root/rel` (files and symlinks as they are) to the same path.
fn add_tree(
    items: &mut BTreeMap<String, Item>,
    root: &Path,
    rel: &str,
    skip: &[&str],
) -> Result<()> {
    let dir = root.join(rel);
    if !dir.exists() {
        return Ok(());
    }
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let entry = entry?;
            let path = entry.path();
            let name = path
                .strip_prefix(root)
                .expect("under root")
                .to_string_lossy()
                .into_owned();
            if skip.iter().any(|s| name.contains(s)) {
                continue;
            }
            let kind = entry.file_type()?;
            add_parents(items, &name);
            if kind.is_symlink() {
                let target = fs::read_link(&path)?;
                items.insert(name, Item::Link(target.to_string_lossy().into_owned()));
            } else if kind.is_dir() {
                items.insert(name, Item::Dir);
                stack.push(path);
            } else {
                use std::os::unix::fs::PermissionsExt;
                let mode = entry.metadata()?.permissions().mode() & 0o7777;
                let data = fs::read(&path)?;
                items.insert(name, Item::File { mode, data });
            }
        }
    }
    Ok(())
}

fn write_initramfs(
    root: &Path,
    release: &str,
    tree: &ModuleTree,
    resolved: &super::modules::Resolved,
    out: &Path,
) -> Result<()> {
    let mut items: BTreeMap<String, Item> = BTreeMap::new();
    for d in [
        "bin", "dev", "proc", "sys", "tmp", "etc", "usr/bin", "usr/sbin", "lib64",
    ] {
        add_parents(&mut items, &format!("{d}/x"));
    }
    let busybox = fs::read(root.join("bin/busybox")).context("busybox-static's bin/busybox")?;
    items.insert(
        "bin/busybox".into(),
        Item::File {
            mode: 0o755,
            data: busybox,
        },
    );
    for a in APPLETS {
        items.insert(format!("bin/{a}"), Item::Link("busybox".into()));
    }
    add_tree(&mut items, root, "lib64", &[])?;
    add_tree(&mut items, root, "lib/x86_64-linux-gnu", &[])?;
    add_tree(
        &mut items,
        root,
        "usr/lib/x86_64-linux-gnu",
        &["/gconv", "/audit"],
    )?;
    add_tree(&mut items, root, "etc/libibverbs.d", &[])?;
    add_tree(&mut items, root, "usr/bin", &[])?;
    add_tree(&mut items, root, "etc/infiniband-diags", &[])?;
    add_tree(&mut items, root, "usr/sbin", &[])?;
    let mod_dir = format!("lib/modules/{release}");
    for m in &resolved.order {
        let rel = &tree.paths[m];
        let path = format!("{mod_dir}/{}", rel.display());
        add_parents(&mut items, &path);
        let data = fs::read(tree.dir.join(rel))?;
        items.insert(path, Item::File { mode: 0o644, data });
    }
    items.insert(
        format!("{mod_dir}/modules.dep"),
        Item::File {
            mode: 0o644,
            data: tree
                .modules_dep(&resolved.order, &resolved.deps)
                .into_bytes(),
        },
    );
    items.insert(
        "init".into(),
        Item::File {
            mode: 0o755,
            data: scripts::INIT.as_bytes().to_vec(),
        },
    );
    items.insert(
        "etc/ibkern/lib.sh".into(),
        Item::File {
            mode: 0o644,
            data: scripts::LIB.as_bytes().to_vec(),
        },
    );
    add_parents(&mut items, "etc/ibkern/x");
    let file = fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut w = CpioWriter::new(std::io::BufWriter::new(file));
    for (path, item) in &items {
        match item {
            Item::Dir => w.directory(path, 0o755)?,
            Item::File { mode, data } => w.file(path, *mode, data)?,
            Item::Link(target) => w.symlink(path, target)?,
        }
    }
    w.finish()?;
    Ok(())
}

/// The initramfs of `image` with a guest script added as `/etc/ibkern/script` (a second,
/// small cpio appended: the kernel unpacks concatenated archives in order).
pub fn with_script(image: &LinuxImage, script: &str, out: &Path) -> Result<PathBuf> {
    with_script_and_files(image, script, &[], out)
}

/// [`with_script`] plus extra files (path inside the guest without the leading `/`, mode,
/// contents), e.g. a program built for the run; their directories must exist in the image
/// (`usr/bin` does).
pub fn with_script_and_files(
    image: &LinuxImage,
    script: &str,
    files: &[(&str, u32, &[u8])],
    out: &Path,
) -> Result<PathBuf> {
    let mut bytes =
        fs::read(&image.initrd).with_context(|| format!("reading {}", image.initrd.display()))?;
    let mut w = CpioWriter::new(Vec::new());
    w.file("etc/ibkern/script", 0o644, script.as_bytes())?;
    for (path, mode, data) in files {
        w.file(path, *mode, data)?;
    }
    let (extra, _) = w.finish()?;
    bytes.extend_from_slice(&extra);
    fs::write(out, &bytes).with_context(|| format!("writing {}", out.display()))?;
    Ok(out.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_are_added_once_and_sort_first() {
        let mut items = BTreeMap::new();
        add_parents(&mut items, "lib/modules/6.1/kernel/x.ko");
        add_parents(&mut items, "lib/x86_64-linux-gnu/libc.so.6");
        let names: Vec<&String> = items.keys().collect();
        assert_eq!(
            names,
            [
                "lib",
                "lib/modules",
                "lib/modules/6.1",
                "lib/modules/6.1/kernel",
                "lib/x86_64-linux-gnu"
            ]
        );
    }

    #[test]
    fn the_cache_finds_the_newest_deb_of_exactly_that_package() {
        let dir = std::env::temp_dir().join(format!("ibkern-debs-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        for n in [
            "libibverbs1_44.0-2_amd64.deb",
            "libibverbs1_45.0-1_amd64.deb",
            "libibverbs-dev_44.0-2_amd64.deb",
        ] {
            fs::write(dir.join(n), b"").unwrap();
        }
        let hit = cached(&dir, "libibverbs1").unwrap();
        assert!(hit.ends_with("libibverbs1_45.0-1_amd64.deb"), "{hit:?}");
        assert!(cached(&dir, "libibverbs").is_none());
        fs::write(dir.join("linux-image-6.1.0-9-amd64_6.1.1-1_amd64.deb"), b"").unwrap();
        fs::write(dir.join("linux-image-amd64_6.1.1-1_amd64.deb"), b"").unwrap();
        assert_eq!(kernel_package(&dir).unwrap(), "linux-image-6.1.0-9-amd64");
        fs::remove_dir_all(&dir).unwrap();
    }
}
