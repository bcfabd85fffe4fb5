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
/// QEMU object id of the shared guest RAM backend.
const SHARED_RAM_ID: &str = "mem";
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
        /// The NIC's MAC address; `None` leaves QEMU's default.
        mac: Option<[u8; 6]>,
    },
    /// A Linux kernel and initramfs loaded by QEMU itself (`-kernel`, `-initrd`, `-append`),
    /// started by the default SeaBIOS (the Linux guest, docs/linux-guest.md).
    LinuxKernel {
        kernel: PathBuf,
        initrd: PathBuf,
        append: String,
    },
}

impl BootMedium {
    pub fn firmware(&self) -> Firmware {
        match self {
            BootMedium::Bios { .. } => Firmware::Bios,
            BootMedium::Uefi { .. } => Firmware::Uefi,
            BootMedium::Pxe { .. } => Firmware::Pxe,
            BootMedium::LinuxKernel { .. } => Firmware::Bios,
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
    /// Guest RAM in a shared memfd, so another process can map it (out-of-process devices
    /// do DMA through it). Set by [`QemuCommand::add_proxy_device`].
    pub shared_memory: bool,
    /// Number of vCPUs; `None` leaves QEMU's default (one).
    pub smp: Option<u32>,
    /// PCI devices served by another process over an inherited socket (QEMU's multi-process
    /// `x-pci-proxy-dev`).
    pub proxy_devices: Vec<ProxyDevice>,
    /// A qtest socket through which a device model injects interrupts under TCG.
    pub qtest: Option<Qtest>,
    /// A point-to-point Ethernet link to another guest over a loopback TCP socket
    /// (`-netdev socket`), e.g. for perftest's TCP rendezvous between two Linux guests.
    pub socket_link: Option<SocketLink>,
    /// The serial port whose output is the guest's console (stdout): ibkern's `console=`.
    /// The ports before it are created with `-serial null`, so they exist and are silent.
    pub console: ibconfig::Console,
    /// Further arguments appended verbatim.
    pub extra: Vec<OsString>,
}

/// One end of a guest-to-guest Ethernet link: an e1000 NIC on a `-netdev socket` backend in
/// its UDP mode (each guest sends to the other's port on 127.0.0.1 and receives on its own),
/// which needs no connection set up between the two QEMUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SocketLink {
    /// UDP port on 127.0.0.1 this guest receives on.
    pub local_port: u16,
    /// UDP port on 127.0.0.1 of the other guest.
    pub peer_port: u16,
    /// Last byte of the NIC's MAC address (52:54:00:12:34:xx); must differ between the ends.
    pub mac_last: u8,
}

/// An out-of-process PCI device: QEMU forwards its config space and BAR accesses over the
/// socket `fd`, which QEMU inherits (close-on-exec cleared by the caller).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyDevice {
    /// QEMU device id.
    pub id: String,
    /// File descriptor number of QEMU's end of the socket pair, as QEMU will see it.
    pub fd: i32,
}

/// QEMU's qtest server on a UNIX socket (`server=on,wait=off`), with its command log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Qtest {
    pub socket: PathBuf,
    /// Where QEMU logs qtest traffic (without a log file it goes to stderr).
    pub log: PathBuf,
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
            shared_memory: false,
            smp: None,
            proxy_devices: Vec::new(),
            qtest: None,
            socket_link: None,
            console: ibconfig::Console::Com1,
            extra: Vec::new(),
        }
    }

    /// Attaches an out-of-process PCI device. The proxy needs guest RAM in shared memory (for
    /// DMA) and a single vCPU (QEMU's proxy deadlocks or drops accesses with several).
    pub fn add_proxy_device(&mut self, id: &str, fd: i32) {
        self.shared_memory = true;
        self.smp = Some(1);
        self.proxy_devices.push(ProxyDevice {
            id: id.to_string(),
            fd,
        });
    }

    /// The CPU model this guest gets.
    pub fn cpu(&self) -> &str {
        self.cpu.as_deref().unwrap_or(self.accel.default_cpu())
    }

    /// The arguments after the executable name.
    pub fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |items: &[&str]| args.extend(items.iter().map(OsString::from));
        let machine = match self.shared_memory {
            true => format!("{},memory-backend={SHARED_RAM_ID}", self.machine.name()),
            false => self.machine.name().to_string(),
        };
        push(&["-accel", self.accel.name(), "-machine", &machine]);
        push(&["-cpu", self.cpu()]);
        let memory = format!("{}M", self.memory_mib);
        push(&["-m", &memory]);
        if self.shared_memory {
            let backend = format!("memory-backend-memfd,id={SHARED_RAM_ID},size={memory},share=on");
            push(&["-object", &backend]);
        }
        if let Some(smp) = self.smp {
            push(&["-smp", &smp.to_string()]);
        }
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
            BootMedium::LinuxKernel {
                kernel,
                initrd,
                append,
            } => {
                args.extend(["-kernel".into(), kernel.clone().into_os_string()]);
                args.extend(["-initrd".into(), initrd.clone().into_os_string()]);
                args.extend(["-append".into(), OsString::from(append)]);
            }
            BootMedium::Pxe {
                tftp_root,
                bootfile,
                ovmf,
                mac,
            } => {
                args.extend(["-bios".into(), ovmf.clone().into_os_string()]);
                args.push("-netdev".into());
                let mut netdev = opt("user,id=n0,tftp=", tftp_root, ",bootfile=");
                netdev.push(qemu_opt_value(OsStr::new(bootfile)));
                args.push(netdev);
                // `romfile=` (empty) keeps QEMU's iPXE option ROM off the NIC: with it the
                // loader is fetched but cannot load the kernel; OVMF's own PXE client works.
                let mut nic = String::from("virtio-net-pci,netdev=n0,romfile=");
                if let Some(m) = mac {
                    nic.push_str(",mac=");
                    nic.push_str(&boot::format_mac(*m, ':'));
                }
                args.extend(["-device".into(), nic.into()]);
            }
        }
        let debug_exit = format!("isa-debug-exit,iobase={DEBUG_EXIT_IOBASE:#x},iosize=0x04");
        let mut push = |items: &[&str]| args.extend(items.iter().map(OsString::from));
        // QEMU gives its n-th `-serial` to the n-th ISA serial port (COM1, COM2, ...).
        for _ in 0..self.console.index() {
            push(&["-serial", "null"]);
        }
        push(&["-serial", "stdio", "-display", "none", "-no-reboot"]);
        push(&["-device", &debug_exit]);
        for bdf in &self.vfio {
            push(&["-device", &format!("vfio-pci,host={bdf}")]);
        }
        for device in &self.proxy_devices {
            let id = device.id.replace(',', ",,");
            push(&[
                "-device",
                &format!("x-pci-proxy-dev,id={id},fd={}", device.fd),
            ]);
        }
        if let Some(link) = &self.socket_link {
            push(&[
                "-netdev",
                &format!(
                    "socket,id=link0,udp=127.0.0.1:{},localaddr=127.0.0.1:{}",
                    link.peer_port, link.local_port
                ),
                "-device",
                &format!(
                    "e1000,netdev=link0,mac=52:54:00:12:34:{:02x}",
                    link.mac_last
                ),
            ]);
        }
        if let Some(qtest) = &self.qtest {
            args.push("-qtest".into());
            args.push(opt("unix:", &qtest.socket, ",server=on,wait=off"));
            args.extend(["-qtest-log".into(), qtest.log.clone().into_os_string()]);
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
    fn the_console_port_gets_stdio_and_the_ports_before_it_null() {
        let mut cmd = QemuCommand::new(
            BootMedium::Bios {
                image: "bios.img".into(),
            },
            Accel::Tcg,
        );
        for (console, nulls) in [
            (ibconfig::Console::Com1, 0),
            (ibconfig::Console::Com2, 1),
            (ibconfig::Console::Com4, 3),
        ] {
            cmd.console = console;
            let args = strings(&cmd);
            let serials: Vec<&str> = args
                .windows(2)
                .filter(|w| w[0] == "-serial")
                .map(|w| w[1].as_str())
                .collect();
            let mut expected = vec!["null"; nulls];
            expected.push("stdio");
            assert_eq!(serials, expected, "{console:?}");
        }
    }

    #[test]
    fn linux_kernel_boot_with_a_socket_link() {
        let mut cmd = QemuCommand::new(
            BootMedium::LinuxKernel {
                kernel: "k/vmlinuz".into(),
                initrd: "k/initrd".into(),
                append: "console=ttyS0 quiet".into(),
            },
            Accel::Tcg,
        );
        cmd.machine = Machine::Pc;
        cmd.socket_link = Some(SocketLink {
            local_port: 17001,
            peer_port: 17000,
            mac_last: 2,
        });
        let mut expected = vec![
            "-accel",
            "tcg",
            "-machine",
            "pc",
            "-cpu",
            "max",
            "-m",
            "512M",
            "-kernel",
            "k/vmlinuz",
            "-initrd",
            "k/initrd",
            "-append",
            "console=ttyS0 quiet",
        ];
        expected.extend(&COMMON_TAIL);
        expected.extend([
            "-netdev",
            "socket,id=link0,udp=127.0.0.1:17000,localaddr=127.0.0.1:17001",
            "-device",
            "e1000,netdev=link0,mac=52:54:00:12:34:02",
        ]);
        assert_eq!(strings(&cmd), expected);
        assert_eq!(cmd.boot.firmware(), Firmware::Bios);
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
            mac: None,
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
        let with_mac = BootMedium::Pxe {
            tftp_root: "out/tftp".into(),
            bootfile: "bootloader".into(),
            ovmf: DEFAULT_OVMF.into(),
            mac: Some([0x52, 0x54, 0, 0xab, 0xcd, 0x0f]),
        };
        let args = strings(&QemuCommand::new(with_mac, Accel::Tcg));
        assert_eq!(
            args[13],
            "virtio-net-pci,netdev=n0,romfile=,mac=52:54:00:ab:cd:0f"
        );
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
    fn proxied_device_gets_shared_memory_one_cpu_and_qtest() {
        let mut cmd = QemuCommand::new(
            BootMedium::Bios {
                image: "b.img".into(),
            },
            Accel::Tcg,
        );
        cmd.add_proxy_device("hca0", 7);
        cmd.qtest = Some(Qtest {
            socket: "run/qtest.sock".into(),
            log: "run/qtest.log".into(),
        });
        let args = strings(&cmd);
        let expected_head = [
            "-accel",
            "tcg",
            "-machine",
            "q35,memory-backend=mem",
            "-cpu",
            "max",
            "-m",
            "512M",
            "-object",
            "memory-backend-memfd,id=mem,size=512M,share=on",
            "-smp",
            "1",
        ];
        assert_eq!(&args[..12], expected_head);
        let n = args.len();
        let expected_tail = [
            "-device",
            "x-pci-proxy-dev,id=hca0,fd=7",
            "-qtest",
            "unix:run/qtest.sock,server=on,wait=off",
            "-qtest-log",
            "run/qtest.log",
        ];
        assert_eq!(&args[n - 6..], expected_tail);
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
