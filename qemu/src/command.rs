//! Building QEMU command lines. Every QEMU argument the runner uses is assembled here.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::machine::{Accel, Firmware, Machine};
use crate::vfio::Bdf;

/// The QEMU system emulator the runner starts.
pub const QEMU_BINARY: &str = "qemu-system-x86_64";
/// Where Debian's `ovmf` package puts the UEFI firmware.
pub const DEFAULT_OVMF: &str = "/usr/share/ovmf/OVMF.fd";
/// Guest memory unless told otherwise.
pub const DEFAULT_MEMORY_MIB: u32 = 512;
/// I/O port of QEMU's isa-debug-exit device (the kernel writes its verdict there).
pub const DEBUG_EXIT_IOBASE: u16 = 0xf4;

/// What the guest boots from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BootMedium {
    /// BIOS disk image, booted by QEMU's default SeaBIOS.
    Bios { image: PathBuf },
    /// UEFI disk image, booted by OVMF.
    Uefi { image: PathBuf, ovmf: PathBuf },
    /// UEFI PXE: OVMF fetches `bootfile` from `tftp_root` over QEMU's user-mode network.
    Pxe {
        tftp_root: PathBuf,
        bootfile: String,
        ovmf: PathBuf,
    },
}

impl BootMedium {
    pub fn firmware(&self) -> Firmware {
        match self {
            BootMedium::Bios { .. } => Firmware::Bios,
            BootMedium::Uefi { .. } => Firmware::Uefi,
            BootMedium::Pxe { .. } => Firmware::Pxe,
        }
    }
}

/// A complete description of one QEMU guest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QemuCommand {
    /// The emulator executable.
    pub binary: PathBuf,
    pub boot: BootMedium,
    pub accel: Accel,
    pub machine: Machine,
    /// CPU model; `None` means the accelerator's default ([`Accel::default_cpu`]).
    pub cpu: Option<String>,
    pub memory_mib: u32,
    /// Host PCI functions passed through with VFIO.
    pub vfio: Vec<Bdf>,
    /// Further arguments appended verbatim (devices added by later subcommands).
    pub extra: Vec<OsString>,
}

/// Escapes a value for QEMU's option syntax, where `,` separates options and `,,` is a comma.
fn qemu_opt_value(value: &OsStr) -> OsString {
    let text = value.to_string_lossy();
    if text.contains(',') {
        OsString::from(text.replace(',', ",,"))
    } else {
        value.to_os_string()
    }
}

fn opt(prefix: &str, path: &Path, suffix: &str) -> OsString {
    let mut out = OsString::from(prefix);
    out.push(qemu_opt_value(path.as_os_str()));
    out.push(suffix);
    out
}

impl QemuCommand {
    /// A guest with the defaults: `qemu-system-x86_64` from `PATH`, q35, 512 MiB, no VFIO.
    pub fn new(boot: BootMedium, accel: Accel) -> Self {
        Self {
            binary: PathBuf::from(QEMU_BINARY),
            boot,
            accel,
            machine: Machine::Q35,
            cpu: None,
            memory_mib: DEFAULT_MEMORY_MIB,
            vfio: Vec::new(),
            extra: Vec::new(),
        }
    }

    /// The CPU model this guest gets.
    pub fn cpu(&self) -> &str {
        self.cpu.as_deref().unwrap_or(self.accel.default_cpu())
    }

    /// The arguments after the executable name.
    pub fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |items: &[&str]| args.extend(items.iter().map(OsString::from));
        push(&["-accel", self.accel.name(), "-machine", self.machine.name()]);
        push(&["-cpu", self.cpu()]);
        let memory = format!("{}M", self.memory_mib);
        push(&["-m", &memory]);
        match &self.boot {
            BootMedium::Bios { image } => {
                args.push("-drive".into());
                args.push(opt("format=raw,file=", image, ""));
            }
            BootMedium::Uefi { image, ovmf } => {
                args.extend(["-bios".into(), ovmf.clone().into_os_string()]);
                args.push("-drive".into());
                args.push(opt("format=raw,file=", image, ""));
            }
            BootMedium::Pxe {
                tftp_root,
                bootfile,
                ovmf,
            } => {
                args.extend(["-bios".into(), ovmf.clone().into_os_string()]);
                args.push("-netdev".into());
                let mut netdev = opt("user,id=n0,tftp=", tftp_root, ",bootfile=");
                netdev.push(qemu_opt_value(OsStr::new(bootfile)));
                args.push(netdev);
                // `romfile=` (empty) keeps QEMU's iPXE option ROM off the NIC: with it the
                // loader is fetched but cannot load the kernel; OVMF's own PXE client works.
                args.extend(["-device".into(), "virtio-net-pci,netdev=n0,romfile=".into()]);
            }
        }
        let debug_exit = format!("isa-debug-exit,iobase={DEBUG_EXIT_IOBASE:#x},iosize=0x04");
        let mut push = |items: &[&str]| args.extend(items.iter().map(OsString::from));
        push(&["-serial", "stdio", "-display", "none", "-no-reboot"]);
        push(&["-device", &debug_exit]);
        for bdf in &self.vfio {
            push(&["-device", &format!("vfio-pci,host={bdf}")]);
        }
        args.extend(self.extra.iter().cloned());
        args
    }

    /// A `std::process::Command` ready to spawn (standard streams not yet chosen).
    pub fn command(&self) -> Command {
        let mut command = Command::new(&self.binary);
        command.args(self.args());
        command
    }

    /// The command line as a shell would take it (for logs and error messages).
    pub fn shell_line(&self) -> String {
        std::iter::once(self.binary.as_os_str().to_os_string())
            .chain(self.args())
            .map(|arg| shell_quote(&arg.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Quotes `word` for a POSIX shell when it contains anything beyond a safe set.
pub fn shell_quote(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./,:=@%+".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(cmd: &QemuCommand) -> Vec<String> {
        cmd.args()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    const COMMON_TAIL: [&str; 7] = [
        "-serial",
        "stdio",
        "-display",
        "none",
        "-no-reboot",
        "-device",
        "isa-debug-exit,iobase=0xf4,iosize=0x04",
    ];

    #[test]
    fn bios_command_line() {
        let cmd = QemuCommand::new(
            BootMedium::Bios {
                image: "out/bios.img".into(),
            },
            Accel::Tcg,
        );
        let mut expected = vec![
            "-accel",
            "tcg",
            "-machine",
            "q35",
            "-cpu",
            "max",
            "-m",
            "512M",
            "-drive",
            "format=raw,file=out/bios.img",
        ];
        expected.extend(&COMMON_TAIL);
        assert_eq!(strings(&cmd), expected);
    }

    #[test]
    fn uefi_command_line_uses_ovmf_and_kvm_host_cpu() {
        let boot = BootMedium::Uefi {
            image: "u.img".into(),
            ovmf: "/fw/OVMF.fd".into(),
        };
        let mut cmd = QemuCommand::new(boot, Accel::Kvm);
        cmd.machine = Machine::Pc;
        let args = strings(&cmd);
        assert_eq!(
            &args[..8],
            ["-accel", "kvm", "-machine", "pc", "-cpu", "host", "-m", "512M"]
        );
        assert_eq!(
            &args[8..12],
            ["-bios", "/fw/OVMF.fd", "-drive", "format=raw,file=u.img"]
        );
        assert_eq!(&args[12..], &COMMON_TAIL);
    }

    #[test]
    fn pxe_command_line_has_tftp_root_and_no_option_rom() {
        let boot = BootMedium::Pxe {
            tftp_root: "out/tftp".into(),
            bootfile: "bootloader".into(),
            ovmf: DEFAULT_OVMF.into(),
        };
        let args = strings(&QemuCommand::new(boot, Accel::Tcg));
        let tail = [
            "-bios",
            "/usr/share/ovmf/OVMF.fd",
            "-netdev",
            "user,id=n0,tftp=out/tftp,bootfile=bootloader",
            "-device",
            "virtio-net-pci,netdev=n0,romfile=",
        ];
        assert_eq!(&args[8..14], tail);
        assert_eq!(&args[14..], &COMMON_TAIL);
    }

    #[test]
    fn cpu_override_memory_vfio_and_extra_arguments() {
        let mut cmd = QemuCommand::new(
            BootMedium::Bios {
                image: "b.img".into(),
            },
            Accel::Tcg,
        );
        cmd.cpu = Some("qemu64".into());
        cmd.memory_mib = 1024;
        cmd.vfio.push("0000:03:00.0".parse().unwrap());
        cmd.extra = vec!["-smp".into(), "1".into()];
        let args = strings(&cmd);
        assert_eq!(&args[4..8], ["-cpu", "qemu64", "-m", "1024M"]);
        let n = args.len();
        assert_eq!(
            &args[n - 4..],
            ["-device", "vfio-pci,host=0000:03:00.0", "-smp", "1"]
        );
    }

    #[test]
    fn commas_in_paths_are_escaped_for_qemu() {
        let cmd = QemuCommand::new(
            BootMedium::Bios {
                image: "a,b/bios.img".into(),
            },
            Accel::Tcg,
        );
        assert!(strings(&cmd).contains(&"format=raw,file=a,,b/bios.img".to_string()));
    }

    #[test]
    fn shell_line_quotes_only_what_needs_it() {
        assert_eq!(
            shell_quote("format=raw,file=x.img"),
            "format=raw,file=x.img"
        );
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        let cmd = QemuCommand::new(
            BootMedium::Bios {
                image: "my disk.img".into(),
            },
            Accel::Tcg,
        );
        assert!(cmd
            .shell_line()
            .starts_with("qemu-system-x86_64 -accel tcg"));
        assert!(cmd.shell_line().contains("'format=raw,file=my disk.img'"));
    }
}
