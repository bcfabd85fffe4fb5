//! Image builder for ibkern.
//!
//! Turns a kernel ELF plus a configuration into bootable media with the `bootloader` crate:
//! a BIOS disk image, a UEFI disk image and UEFI PXE/TFTP roots. There is no kernel command
//! line: the configuration (`key=value` lines, see [`Config`]) travels as the bootloader's
//! ramdisk and is read by the kernel at start-up.
//!
//! Every image is built from an [`ImageBuilder`] and one configuration. Because a PXE root can
//! carry only one ramdisk (the UEFI loader fetches the fixed name `ramdisk`), per-node settings
//! on PXE mean one TFTP root per node: call [`ImageBuilder::tftp_root`] once per node, each time
//! with that node's [`Config`].

mod config;

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use bootloader::{BootConfig, DiskImageBuilder};

pub use config::{config_text, one_line, ramdisk, Config, ConfigError};

/// File name of the BIOS disk image written by [`ImageBuilder::build_all`].
pub const BIOS_IMAGE: &str = "bios.img";
/// File name of the UEFI disk image written by [`ImageBuilder::build_all`].
pub const UEFI_IMAGE: &str = "uefi.img";
/// Directory name of the UEFI PXE/TFTP root written by [`ImageBuilder::build_all`].
pub const TFTP_DIR: &str = "tftp";
/// File name under which the configuration is kept next to the images (and used as ramdisk).
pub const CONFIG_FILE: &str = "config";
/// The file a PXE client must be told to boot (DHCP boot file name) inside a TFTP root.
pub const TFTP_BOOT_FILE: &str = "bootloader";
/// Name of the ramdisk (the configuration) inside a TFTP root; fixed by the UEFI loader.
pub const TFTP_RAMDISK_FILE: &str = "ramdisk";

/// What the bootloader itself prints while it loads the kernel.
///
/// The bootloader's own log is off by default: it slows boots down (every line goes through the
/// emulated UART, and the framebuffer console under TCG is slow) and it interleaves with the
/// kernel's console. Turn it on to debug a boot that never reaches the kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoaderLog {
    /// Bootloader log lines on the first serial port.
    pub serial: bool,
    /// Bootloader log lines on the framebuffer (real screens, QEMU's display).
    pub framebuffer: bool,
}

impl LoaderLog {
    /// No bootloader output at all (the default).
    pub const QUIET: Self = Self {
        serial: false,
        framebuffer: false,
    };
    /// Bootloader output on serial and framebuffer.
    pub const VERBOSE: Self = Self {
        serial: true,
        framebuffer: true,
    };

    fn boot_config(self) -> BootConfig {
        // `BootConfig` is non-exhaustive: start from its defaults and switch what we own.
        let mut config = BootConfig::default();
        config.serial_logging = self.serial;
        config.frame_buffer_logging = self.framebuffer;
        config
    }
}

/// Paths of everything [`ImageBuilder::build_all`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageSet {
    /// MBR disk image for BIOS machines.
    pub bios: PathBuf,
    /// GPT disk image for UEFI machines.
    pub uefi: PathBuf,
    /// UEFI PXE/TFTP root (serve it over TFTP, boot file [`TFTP_BOOT_FILE`]).
    pub tftp: PathBuf,
    /// The configuration file that every image carries as its ramdisk.
    pub config: PathBuf,
}

/// Builds boot media for one kernel ELF.
#[derive(Clone, Debug)]
pub struct ImageBuilder {
    kernel: PathBuf,
    loader_log: LoaderLog,
}

impl ImageBuilder {
    /// Prepares a builder for `kernel`, which must be an x86_64 ELF executable.
    pub fn new(kernel: impl Into<PathBuf>) -> Result<Self> {
        let kernel = kernel.into();
        check_kernel_elf(&kernel)?;
        Ok(Self {
            kernel,
            loader_log: LoaderLog::QUIET,
        })
    }

    /// Chooses what the bootloader prints (quiet unless changed).
    pub fn loader_log(mut self, log: LoaderLog) -> Self {
        self.loader_log = log;
        self
    }

    /// The kernel ELF this builder packs.
    pub fn kernel(&self) -> &Path {
        &self.kernel
    }

    /// Writes `config` to `path` in the form the kernel reads ([`ramdisk`]: its text,
    /// checked as the kernel will check it); a refused configuration is not written.
    pub fn write_config(config: &Config, path: &Path) -> Result<()> {
        let text = ramdisk(config)?;
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)
                .with_context(|| format!("cannot create directory {}", parent.display()))?;
        }
        fs::write(path, text)
            .with_context(|| format!("cannot write configuration {}", path.display()))
    }

    fn disk_builder(&self, ramdisk: &Path) -> DiskImageBuilder {
        let mut builder = DiskImageBuilder::new(self.kernel.clone());
        builder.set_ramdisk(ramdisk.to_path_buf());
        builder.set_boot_config(&self.loader_log.boot_config());
        builder
    }

    /// Writes a BIOS (MBR) disk image to `out`, carrying the file `ramdisk` as configuration.
    pub fn bios_image(&self, ramdisk: &Path, out: &Path) -> Result<()> {
        check_ramdisk(ramdisk)?;
        create_parent(out)?;
        self.disk_builder(ramdisk)
            .create_bios_image(out)
            .with_context(|| format!("cannot build BIOS image {}", out.display()))
    }

    /// Writes a UEFI (GPT) disk image to `out`, carrying the file `ramdisk` as configuration.
    pub fn uefi_image(&self, ramdisk: &Path, out: &Path) -> Result<()> {
        check_ramdisk(ramdisk)?;
        create_parent(out)?;
        self.disk_builder(ramdisk)
            .create_uefi_image(out)
            .with_context(|| format!("cannot build UEFI image {}", out.display()))
    }

    /// Fills the directory `dir` with a UEFI PXE/TFTP root whose ramdisk is `config`.
    ///
    /// The root holds the UEFI loader ([`TFTP_BOOT_FILE`]), the kernel, the bootloader's
    /// settings and the configuration as [`TFTP_RAMDISK_FILE`]. Call it once per node, with a
    /// directory and a configuration per node, to get per-node roots (for example one root per
    /// MAC address with dnsmasq's `--tftp-unique-root=mac`). Files of an earlier build in `dir`
    /// are overwritten; other files are left alone.
    pub fn tftp_root(&self, config: &Config, dir: &Path) -> Result<()> {
        fs::create_dir_all(dir)
            .with_context(|| format!("cannot create TFTP root {}", dir.display()))?;
        // The builder copies its ramdisk from a file: keep that file inside the root itself,
        // under the name the loader fetches, so the root is self-contained.
        let ramdisk = dir.join(TFTP_RAMDISK_FILE);
        let staged = dir.join(".ramdisk.staging");
        Self::write_config(config, &staged)?;
        let result = self
            .disk_builder(&staged)
            .create_uefi_tftp_folder(dir)
            .with_context(|| format!("cannot build TFTP root {}", dir.display()));
        let _ = fs::remove_file(&staged);
        result?;
        let written = fs::read(&ramdisk)
            .with_context(|| format!("TFTP root {} has no {}", dir.display(), TFTP_RAMDISK_FILE))?;
        if written != config::ramdisk(config)?.as_bytes() {
            bail!(
                "TFTP root {}: ramdisk does not match the configuration",
                dir.display()
            );
        }
        Ok(())
    }

    /// Writes the full set into `out_dir`: [`BIOS_IMAGE`], [`UEFI_IMAGE`], [`TFTP_DIR`]/ and
    /// [`CONFIG_FILE`], all carrying `config`.
    pub fn build_all(&self, config: &Config, out_dir: &Path) -> Result<ImageSet> {
        self.build_set(config, out_dir, &out_dir.join(TFTP_DIR))
    }

    /// As [`Self::build_all`], with the PXE/TFTP root in `tftp_dir` instead of
    /// `out_dir/tftp` (per-node roots side by side under one TFTP root).
    pub fn build_set(&self, config: &Config, out_dir: &Path, tftp_dir: &Path) -> Result<ImageSet> {
        let set = ImageSet {
            bios: out_dir.join(BIOS_IMAGE),
            uefi: out_dir.join(UEFI_IMAGE),
            tftp: tftp_dir.to_path_buf(),
            config: out_dir.join(CONFIG_FILE),
        };
        Self::write_config(config, &set.config)?;
        self.bios_image(&set.config, &set.bios)?;
        self.uefi_image(&set.config, &set.uefi)?;
        self.tftp_root(config, &set.tftp)?;
        Ok(set)
    }
}

/// The directory name of a node's PXE root. A MAC address (`52:54:00:12:34:56`, dashes or
/// colons, any case) becomes dnsmasq's `--tftp-unique-root=mac` form, lowercase hex pairs
/// joined by dashes (`52-54-00-12-34-56`), so a TFTP root of such directories serves each
/// client its own ramdisk. Any other name must be a plain file name of letters, digits, `.`,
/// `_` and `-` (for roots chosen by other means, e.g. per-IP).
pub fn node_dir_name(node: &str) -> Result<String> {
    if let Some(mac) = parse_mac(node) {
        return Ok(format_mac(mac, '-'));
    }
    let plain = !node.is_empty()
        && node != "."
        && node != ".."
        && node
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !plain {
        bail!("node name {node:?}: use a MAC address (aa:bb:cc:dd:ee:ff) or letters, digits, '.', '_' and '-'");
    }
    Ok(node.to_string())
}

/// A MAC address as six lowercase hex pairs joined by `sep` (`:` for QEMU, `-` for dnsmasq's
/// per-MAC TFTP roots).
pub fn format_mac(mac: [u8; 6], sep: char) -> String {
    let mut s = String::with_capacity(17);
    for (i, b) in mac.iter().enumerate() {
        if i > 0 {
            s.push(sep);
        }
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Six hex pairs separated by `:` or `-` (one kind throughout).
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let sep = if s.contains(':') { ':' } else { '-' };
    let parts: Vec<&str> = s.split(sep).collect();
    if parts.len() != 6 {
        return None;
    }
    let mut mac = [0u8; 6];
    for (byte, part) in mac.iter_mut().zip(&parts) {
        if part.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    Some(mac)
}

fn create_parent(path: &Path) -> Result<()> {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => fs::create_dir_all(parent)
            .with_context(|| format!("cannot create directory {}", parent.display())),
        _ => Ok(()),
    }
}

fn check_ramdisk(path: &Path) -> Result<()> {
    let meta = fs::metadata(path)
        .with_context(|| format!("configuration (ramdisk) {} not readable", path.display()))?;
    if !meta.is_file() {
        bail!(
            "configuration (ramdisk) {} is not a regular file",
            path.display()
        );
    }
    Ok(())
}

/// ELF identification bytes the loader needs: magic, 64-bit class, little-endian.
const ELF_MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];
const ELFCLASS64: u8 = 2;
const ELFDATA2LSB: u8 = 1;
/// `e_machine` value of x86_64 (offset 18 in the ELF header, little-endian u16).
const EM_X86_64: u16 = 62;

/// Rejects anything that is not an x86_64 ELF, so a wrong path fails here with its name instead
/// of deep inside the bootloader at boot time.
fn check_kernel_elf(path: &Path) -> Result<()> {
    let bytes =
        fs::read(path).with_context(|| format!("kernel {} not readable", path.display()))?;
    if bytes.len() < 20 || bytes[..4] != ELF_MAGIC {
        bail!("kernel {} is not an ELF file", path.display());
    }
    if bytes[4] != ELFCLASS64 || bytes[5] != ELFDATA2LSB {
        bail!(
            "kernel {} is not a 64-bit little-endian ELF",
            path.display()
        );
    }
    let machine = u16::from_le_bytes([bytes[18], bytes[19]]);
    if machine != EM_X86_64 {
        bail!(
            "kernel {} is built for ELF machine {machine}, not x86_64",
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("ibkern-boot-test-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn rejects_files_that_are_not_x86_64_elf() {
        let dir = scratch("elf");
        let text = dir.join("text");
        fs::write(&text, "hello").unwrap();
        let err = ImageBuilder::new(&text).unwrap_err().to_string();
        assert!(err.contains("not an ELF"), "{err}");

        let mut header = vec![0u8; 64];
        header[..4].copy_from_slice(&ELF_MAGIC);
        header[4] = ELFCLASS64;
        header[5] = ELFDATA2LSB;
        header[18..20].copy_from_slice(&183u16.to_le_bytes()); // aarch64
        let arm = dir.join("arm");
        fs::write(&arm, &header).unwrap();
        let err = ImageBuilder::new(&arm).unwrap_err().to_string();
        assert!(err.contains("not x86_64"), "{err}");

        header[18..20].copy_from_slice(&EM_X86_64.to_le_bytes());
        let ok = dir.join("x86");
        fs::write(&ok, &header).unwrap();
        assert!(ImageBuilder::new(&ok).is_ok());

        let err = ImageBuilder::new(dir.join("missing"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not readable"), "{err}");
    }

    /// A file with a valid x86_64 ELF header: enough for packing (the loader parses the kernel
    /// only at boot time).
    fn fake_kernel(dir: &Path) -> PathBuf {
        let mut header = vec![0u8; 64];
        header[..4].copy_from_slice(&ELF_MAGIC);
        header[4] = ELFCLASS64;
        header[5] = ELFDATA2LSB;
        header[18..20].copy_from_slice(&EM_X86_64.to_le_bytes());
        let path = dir.join("kernel.elf");
        fs::write(&path, &header).unwrap();
        path
    }

    #[test]
    fn node_names_follow_dnsmasq_per_mac_roots() {
        assert_eq!(
            node_dir_name("52:54:00:AB:cd:0f").unwrap(),
            "52-54-00-ab-cd-0f"
        );
        assert_eq!(
            node_dir_name("52-54-00-ab-cd-0f").unwrap(),
            "52-54-00-ab-cd-0f"
        );
        assert_eq!(node_dir_name("server").unwrap(), "server");
        assert_eq!(node_dir_name("node-1.b_2").unwrap(), "node-1.b_2");
        for bad in ["", ".", "..", "a/b", "../x", "a b", "52:54:00:ab:cd"] {
            assert!(node_dir_name(bad).is_err(), "{bad:?} accepted");
        }
        // Mixed separators are not a MAC; as a plain name ':' is refused.
        assert!(node_dir_name("52:54-00:ab:cd:0f").is_err());
        assert_eq!(parse_mac("00:11:22:33:44:zz"), None);
        assert_eq!(parse_mac("0:11:22:33:44:55"), None);
    }

    #[test]
    fn per_node_tftp_roots_carry_their_own_config() {
        let dir = scratch("pxe-nodes");
        let builder = ImageBuilder::new(fake_kernel(&dir)).unwrap();
        let server = config_text("role=server\nmode=idle").unwrap();
        let client = config_text("role=client\npeer_lid=1").unwrap();
        builder.tftp_root(&server, &dir.join("node0")).unwrap();
        builder.tftp_root(&client, &dir.join("node1")).unwrap();
        let ramdisk = |node: &str| fs::read_to_string(dir.join(node).join(TFTP_RAMDISK_FILE));
        assert_eq!(ramdisk("node0").unwrap(), "mode=idle\nrole=server\n");
        assert_eq!(
            ramdisk("node1").unwrap(),
            "mode=selftest\nrole=client\npeer_lid=0x1\n"
        );
        for node in ["node0", "node1"] {
            let root = dir.join(node);
            let mut names: Vec<String> = fs::read_dir(&root)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            // Self-contained: the loader, the kernel, the loader's settings, the ramdisk.
            assert_eq!(
                names,
                ["boot.json", "bootloader", "kernel-x86_64", "ramdisk"]
            );
            let settings = fs::read_to_string(root.join("boot.json")).unwrap();
            assert!(settings.contains("\"serial_logging\": false"), "{settings}");
        }
    }

    #[test]
    fn build_all_writes_every_medium_with_the_same_config() {
        let dir = scratch("all");
        let builder = ImageBuilder::new(fake_kernel(&dir))
            .unwrap()
            .loader_log(LoaderLog::VERBOSE);
        let config = config_text("mode=selftest").unwrap();
        let set = builder.build_all(&config, &dir.join("out")).unwrap();
        assert_eq!(fs::read_to_string(&set.config).unwrap(), "mode=selftest\n");
        assert_eq!(
            fs::read_to_string(set.tftp.join("ramdisk")).unwrap(),
            "mode=selftest\n"
        );
        let bios = fs::read(&set.bios).unwrap();
        assert_eq!(&bios[510..512], [0x55, 0xaa], "MBR boot signature");
        let uefi = fs::read(&set.uefi).unwrap();
        assert_eq!(&uefi[512..520], b"EFI PART", "GPT header in LBA 1");
        let settings = fs::read_to_string(set.tftp.join("boot.json")).unwrap();
        assert!(settings.contains("\"serial_logging\": true"), "{settings}");
    }

    #[test]
    fn loader_log_switches_map_to_boot_config() {
        let quiet = LoaderLog::default().boot_config();
        assert!(!quiet.serial_logging && !quiet.frame_buffer_logging);
        let verbose = LoaderLog::VERBOSE.boot_config();
        assert!(verbose.serial_logging && verbose.frame_buffer_logging);
    }
}
