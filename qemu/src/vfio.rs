//! Pre-flight checks for VFIO passthrough (`--vfio BDF`).
//!
//! QEMU's own errors for a device that cannot be passed through are terse ("group is not
//! viable", "failed to setup container"). These checks read the same facts from sysfs, /dev and
//! the process limits first and say exactly what to run to fix each problem. The roots of
//! those trees are parameters ([`HostRoots`]) so the checks run on faked trees in tests.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::machine::PciId;

/// A PCI address: domain, bus, device, function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bdf {
    pub domain: u16,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl fmt::Display for Bdf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// Why a PCI address did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BdfParseError(String);

impl fmt::Display for BdfParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a PCI address: expected [DDDD:]BB:DD.F in hex, e.g. 0000:03:00.0 \
             (see `lspci -D`)",
            self.0
        )
    }
}

impl std::error::Error for BdfParseError {}

impl FromStr for Bdf {
    type Err = BdfParseError;

    /// Accepts `DDDD:BB:DD.F` and `BB:DD.F` (domain 0), hex digits in either case.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = || BdfParseError(text.to_string());
        let hex = |s: &str, digits: usize, max: u32| -> Result<u32, BdfParseError> {
            if s.is_empty() || s.len() > digits || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err());
            }
            let value = u32::from_str_radix(s, 16).map_err(|_| err())?;
            if value > max {
                return Err(err());
            }
            Ok(value)
        };
        let (head, function) = text.rsplit_once('.').ok_or_else(err)?;
        let parts: Vec<&str> = head.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [bus, device] => (0, *bus, *device),
            [domain, bus, device] => (hex(domain, 4, 0xffff)?, *bus, *device),
            _ => return Err(err()),
        };
        Ok(Bdf {
            domain: domain as u16,
            bus: hex(bus, 2, 0xff)? as u8,
            device: hex(device, 2, 0x1f)? as u8,
            function: hex(function, 1, 7)? as u8,
        })
    }
}

/// Where the host's kernel interfaces are mounted. [`HostRoots::system`] is the real machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRoots {
    /// sysfs (`/sys`).
    pub sys: PathBuf,
    /// devtmpfs (`/dev`).
    pub dev: PathBuf,
    /// This process's procfs directory (`/proc/self`): `limits` and `status` are read.
    pub proc_self: PathBuf,
}

impl HostRoots {
    pub fn system() -> Self {
        Self {
            sys: "/sys".into(),
            dev: "/dev".into(),
            proc_self: "/proc/self".into(),
        }
    }
}

/// Memory QEMU maps for device DMA beyond guest RAM (VGA memory, firmware, option ROMs):
/// with VFIO all of it is pinned and counted against the locked-memory limit.
pub const VFIO_MEMLOCK_SLACK: u64 = 64 << 20;

/// Bit of `CAP_IPC_LOCK` in the capability masks of /proc/<pid>/status: a process holding it
/// is not bound by the locked-memory limit.
const CAP_IPC_LOCK_BIT: u32 = 14;

/// A device that passed every check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VfioDevice {
    pub bdf: Bdf,
    pub id: PciId,
    /// IOMMU group number (`/dev/vfio/<group>`).
    pub group: u32,
}

/// A reason the device cannot be passed through. `Display` gives the problem and the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VfioError {
    /// No IOMMU groups: the IOMMU is off (firmware setting or kernel command line).
    IommuDisabled,
    /// No such PCI function.
    NoDevice { bdf: Bdf },
    /// The function is bound to another driver, or to none.
    NotBoundToVfio { bdf: Bdf, driver: Option<String> },
    /// The function has no IOMMU group link.
    NoGroup { bdf: Bdf },
    /// Other functions in the group are bound to host drivers.
    GroupNotViable {
        bdf: Bdf,
        group: u32,
        blockers: Vec<(String, String)>,
    },
    /// `/dev/vfio/<group>` is missing.
    NoGroupNode { group: u32 },
    /// The locked-memory limit is below what QEMU will pin.
    MemlockTooLow { limit: u64, needed: u64 },
    /// A sysfs or procfs file had unexpected contents.
    Unreadable { path: PathBuf, why: String },
}

fn bind_commands(bdf: &str) -> String {
    format!(
        "    sudo modprobe vfio-pci\n\
         \x20   echo vfio-pci | sudo tee /sys/bus/pci/devices/{bdf}/driver_override\n\
         \x20   [ -e /sys/bus/pci/devices/{bdf}/driver ] && \
         echo {bdf} | sudo tee /sys/bus/pci/devices/{bdf}/driver/unbind\n\
         \x20   echo {bdf} | sudo tee /sys/bus/pci/drivers_probe"
    )
}

impl fmt::Display for VfioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VfioError::IommuDisabled => write!(
                f,
                "the IOMMU is not enabled (no IOMMU groups under /sys/kernel/iommu_groups).\n\
                 fix: enable VT-d (Intel) or AMD-Vi/IOMMU (AMD) in the firmware setup, then boot \
                 the host kernel with `intel_iommu=on iommu=pt` (Intel) or `iommu=pt` (AMD, \
                 whose IOMMU driver starts by itself once AMD-Vi is on): add them to \
                 GRUB_CMDLINE_LINUX in /etc/default/grub, then\n\
                 \x20   sudo update-grub && sudo reboot"
            ),
            VfioError::NoDevice { bdf } => write!(
                f,
                "no PCI device {bdf} on this host.\n\
                 fix: find the adapter's address with\n\
                 \x20   lspci -D -nn | grep -i mellanox\n\
                 and pass it as --vfio DDDD:BB:DD.F"
            ),
            VfioError::NotBoundToVfio { bdf, driver } => {
                let now = match driver {
                    Some(driver) => format!("bound to `{driver}`"),
                    None => "not bound to any driver".to_string(),
                };
                write!(
                    f,
                    "{bdf} is {now}, not to vfio-pci.\nfix: hand it to vfio-pci:\n{}",
                    bind_commands(&bdf.to_string())
                )
            }
            VfioError::NoGroup { bdf } => write!(
                f,
                "{bdf} has no IOMMU group (no /sys/bus/pci/devices/{bdf}/iommu_group): the IOMMU \
                 does not cover it.\n\
                 fix: check that the IOMMU is enabled for this device's root complex in the \
                 firmware setup and that `dmesg | grep -i -e DMAR -e IOMMU` shows no errors"
            ),
            VfioError::GroupNotViable {
                bdf,
                group,
                blockers,
            } => {
                writeln!(
                    f,
                    "IOMMU group {group} of {bdf} is not viable: every device in a group must be \
                     bound to vfio-pci (or to no driver), but"
                )?;
                for (other, driver) in blockers {
                    writeln!(f, "    {other} is bound to `{driver}`")?;
                }
                write!(f, "fix: hand each of them to vfio-pci as well:")?;
                for (other, _) in blockers {
                    write!(f, "\n{}", bind_commands(other))?;
                }
                write!(
                    f,
                    "\n(or move the adapter to a slot with its own IOMMU group; \
                     `ls /sys/kernel/iommu_groups/{group}/devices` lists the group)"
                )
            }
            VfioError::NoGroupNode { group } => write!(
                f,
                "/dev/vfio/{group} does not exist.\n\
                 fix: load the VFIO driver so it creates the group node:\n\
                 \x20   sudo modprobe vfio-pci\n\
                 and check with `ls -l /dev/vfio/` that your user may open it (or run as root)"
            ),
            VfioError::MemlockTooLow { limit, needed } => write!(
                f,
                "the locked-memory limit is {} MiB but QEMU pins all guest memory for VFIO \
                 ({} MiB needed).\n\
                 fix: raise it for this shell with\n\
                 \x20   ulimit -l unlimited\n\
                 (allowed up to the hard limit; to raise that, add the lines\n\
                 \x20   <user> soft memlock unlimited\n\
                 \x20   <user> hard memlock unlimited\n\
                 to /etc/security/limits.conf and log in again), or run as root",
                limit >> 20,
                needed.div_ceil(1 << 20)
            ),
            VfioError::Unreadable { path, why } => {
                write!(f, "cannot read {}: {why}", path.display())
            }
        }
    }
}

impl std::error::Error for VfioError {}

fn link_name(path: &Path) -> Option<String> {
    let target = fs::read_link(path).ok()?;
    Some(target.file_name()?.to_string_lossy().into_owned())
}

fn read_hex_u32(path: &Path) -> Result<u32, VfioError> {
    let unreadable = |why: String| VfioError::Unreadable {
        path: path.to_path_buf(),
        why,
    };
    let text = fs::read_to_string(path).map_err(|e| unreadable(e.to_string()))?;
    let digits = text.trim().trim_start_matches("0x");
    u32::from_str_radix(digits, 16).map_err(|_| unreadable(format!("not hex: {:?}", text.trim())))
}

/// Whether Linux lets this group member stay with its driver: bridges (class 0x0604) keep
/// theirs, pci-stub is allowed; anything else must be vfio-pci or unbound.
fn driver_allowed_in_group(sys_device: &Path, driver: &str) -> bool {
    if driver == "vfio-pci" || driver == "pci-stub" {
        return true;
    }
    matches!(read_hex_u32(&sys_device.join("class")), Ok(class) if class >> 8 == 0x0604)
}

/// Parses the soft "Max locked memory" limit from /proc/<pid>/limits; `None` = unlimited.
fn memlock_soft_limit(limits: &str) -> Option<Option<u64>> {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))?;
    let soft = line["Max locked memory".len()..]
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        Some(None)
    } else {
        soft.parse().ok().map(Some)
    }
}

/// Whether /proc/<pid>/status shows CAP_IPC_LOCK in the effective set.
fn has_ipc_lock(status: &str) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << CAP_IPC_LOCK_BIT) != 0)
}

/// Runs every check for passing `bdf` through to a guest with `guest_memory` bytes of RAM.
/// Checks run in the order a user fixes them; the first failure is returned.
pub fn check(roots: &HostRoots, bdf: Bdf, guest_memory: u64) -> Result<VfioDevice, VfioError> {
    let groups = roots.sys.join("kernel/iommu_groups");
    let has_groups = fs::read_dir(&groups)
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    if !has_groups {
        return Err(VfioError::IommuDisabled);
    }

    let name = bdf.to_string();
    let device = roots.sys.join("bus/pci/devices").join(&name);
    if !device.exists() {
        return Err(VfioError::NoDevice { bdf });
    }
    let id = PciId::new(
        read_hex_u32(&device.join("vendor"))? as u16,
        read_hex_u32(&device.join("device"))? as u16,
    );

    let driver = link_name(&device.join("driver"));
    if driver.as_deref() != Some("vfio-pci") {
        return Err(VfioError::NotBoundToVfio { bdf, driver });
    }

    let group = link_name(&device.join("iommu_group"))
        .and_then(|g| g.parse::<u32>().ok())
        .ok_or(VfioError::NoGroup { bdf })?;
    let members = groups.join(group.to_string()).join("devices");
    let entries = fs::read_dir(&members).map_err(|e| VfioError::Unreadable {
        path: members.clone(),
        why: e.to_string(),
    })?;
    let mut blockers = Vec::new();
    for entry in entries.flatten() {
        let member = entry.file_name().to_string_lossy().into_owned();
        let member_dev = roots.sys.join("bus/pci/devices").join(&member);
        if let Some(driver) = link_name(&member_dev.join("driver")) {
            if !driver_allowed_in_group(&member_dev, &driver) {
                blockers.push((member, driver));
            }
        }
    }
    if !blockers.is_empty() {
        blockers.sort();
        return Err(VfioError::GroupNotViable {
            bdf,
            group,
            blockers,
        });
    }

    if !roots.dev.join("vfio").join(group.to_string()).exists() {
        return Err(VfioError::NoGroupNode { group });
    }

    let needed = guest_memory + VFIO_MEMLOCK_SLACK;
    let status_path = roots.proc_self.join("status");
    let status = fs::read_to_string(&status_path).map_err(|e| VfioError::Unreadable {
        path: status_path,
        why: e.to_string(),
    })?;
    if !has_ipc_lock(&status) {
        let limits_path = roots.proc_self.join("limits");
        let limits = fs::read_to_string(&limits_path).map_err(|e| VfioError::Unreadable {
            path: limits_path.clone(),
            why: e.to_string(),
        })?;
        match memlock_soft_limit(&limits) {
            Some(None) => {}
            Some(Some(limit)) if limit >= needed => {}
            Some(Some(limit)) => return Err(VfioError::MemlockTooLow { limit, needed }),
            None => {
                return Err(VfioError::Unreadable {
                    path: limits_path,
                    why: "no `Max locked memory` line".into(),
                })
            }
        }
    }

    Ok(VfioDevice { bdf, id, group })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    const BDF: &str = "0000:03:00.0";
    const LIMITS_64K: &str =
        "Limit                     Soft Limit           Hard Limit           Units\n\
        Max open files            1024                 1048576              files\n\
        Max locked memory         65536                65536                bytes\n";
    const LIMITS_UNLIMITED: &str =
        "Max locked memory         unlimited            unlimited            bytes\n";
    const STATUS_USER: &str = "Name:\tqemu\nCapEff:\t0000000000000000\n";
    const STATUS_ROOT: &str = "Name:\tqemu\nCapEff:\t000001ffffffffff\n";

    /// A fake host: sysfs with PCI devices and IOMMU groups, /dev/vfio, /proc/self.
    struct FakeHost {
        base: PathBuf,
        roots: HostRoots,
    }

    impl FakeHost {
        fn new(name: &str) -> Self {
            let base = std::env::temp_dir()
                .join(format!("ibkern-vfio-test-{}-{name}", std::process::id()));
            let _ = fs::remove_dir_all(&base);
            let roots = HostRoots {
                sys: base.join("sys"),
                dev: base.join("dev"),
                proc_self: base.join("proc/self"),
            };
            for dir in [
                roots.sys.join("bus/pci/devices"),
                roots.sys.join("bus/pci/drivers"),
                roots.sys.join("kernel/iommu_groups"),
                roots.dev.join("vfio"),
                roots.proc_self.clone(),
            ] {
                fs::create_dir_all(dir).unwrap();
            }
            fs::write(roots.proc_self.join("limits"), LIMITS_UNLIMITED).unwrap();
            fs::write(roots.proc_self.join("status"), STATUS_USER).unwrap();
            Self { base, roots }
        }

        /// Adds a PCI function (sysfs keeps devices under /sys/devices and links them from
        /// /sys/bus/pci/devices; one level is enough for the checks).
        fn device(&self, bdf: &str, class: u32, driver: Option<&str>, group: Option<u32>) {
            let dir = self.base.join("sys/devices/pci0000:00").join(bdf);
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("vendor"), "0x15b3\n").unwrap();
            fs::write(dir.join("device"), "0x1003\n").unwrap();
            fs::write(dir.join("class"), format!("{class:#08x}\n")).unwrap();
            symlink(&dir, self.roots.sys.join("bus/pci/devices").join(bdf)).unwrap();
            if let Some(driver) = driver {
                let driver_dir = self.roots.sys.join("bus/pci/drivers").join(driver);
                fs::create_dir_all(&driver_dir).unwrap();
                symlink(&driver_dir, dir.join("driver")).unwrap();
            }
            if let Some(group) = group {
                let group_dir = self
                    .roots
                    .sys
                    .join("kernel/iommu_groups")
                    .join(group.to_string());
                fs::create_dir_all(group_dir.join("devices")).unwrap();
                symlink(&group_dir, dir.join("iommu_group")).unwrap();
                symlink(&dir, group_dir.join("devices").join(bdf)).unwrap();
            }
        }

        fn group_node(&self, group: u32) {
            fs::write(self.roots.dev.join("vfio").join(group.to_string()), "").unwrap();
        }

        fn check(&self) -> Result<VfioDevice, VfioError> {
            check(&self.roots, BDF.parse().unwrap(), 512 << 20)
        }
    }

    impl Drop for FakeHost {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.base);
        }
    }

    /// The happy path: a ConnectX-3 alone in group 7, bound to vfio-pci.
    fn viable_host(name: &str) -> FakeHost {
        let host = FakeHost::new(name);
        host.device(BDF, 0x0c0600, Some("vfio-pci"), Some(7));
        host.group_node(7);
        host
    }

    #[test]
    fn bdf_parsing_and_display() {
        let bdf: Bdf = "0000:03:00.0".parse().unwrap();
        assert_eq!(
            bdf,
            Bdf {
                domain: 0,
                bus: 3,
                device: 0,
                function: 0
            }
        );
        assert_eq!("3:1f.7".parse::<Bdf>().unwrap().to_string(), "0000:03:1f.7");
        assert_eq!(
            "00AB:Cd:01.1".parse::<Bdf>().unwrap().to_string(),
            "00ab:cd:01.1"
        );
        for bad in [
            "",
            "03:00",
            "03:20.0",
            "03:00.8",
            "1:2:3:4.0",
            "x3:00.0",
            "00000:03:00.0",
        ] {
            assert!(bad.parse::<Bdf>().is_err(), "{bad} parsed");
        }
        let message = "03:00".parse::<Bdf>().unwrap_err().to_string();
        assert!(message.contains("lspci -D"), "{message}");
    }

    #[test]
    fn viable_device_passes_with_its_id_and_group() {
        let host = viable_host("ok");
        let device = host.check().unwrap();
        assert_eq!(device.id, PciId::new(0x15b3, 0x1003));
        assert_eq!(device.group, 7);
        assert_eq!(device.bdf.to_string(), BDF);
    }

    #[test]
    fn iommu_disabled_is_reported_first() {
        let host = FakeHost::new("noiommu");
        host.device(BDF, 0x0c0600, Some("mlx4_core"), None);
        let err = host.check().unwrap_err();
        assert_eq!(err, VfioError::IommuDisabled);
        let text = err.to_string();
        assert!(
            text.contains("intel_iommu=on") && text.contains("`iommu=pt` (AMD"),
            "{text}"
        );
        assert!(text.contains("update-grub"), "{text}");
    }

    #[test]
    fn missing_device() {
        let host = FakeHost::new("nodev");
        host.device("0000:05:00.0", 0x020000, Some("e1000e"), Some(3));
        let err = host.check().unwrap_err();
        assert_eq!(
            err,
            VfioError::NoDevice {
                bdf: BDF.parse().unwrap()
            }
        );
        assert!(err.to_string().contains("lspci -D -nn"), "{err}");
    }

    #[test]
    fn device_bound_to_host_driver_gets_bind_commands() {
        let host = FakeHost::new("mlx4");
        host.device(BDF, 0x0c0600, Some("mlx4_core"), Some(7));
        host.group_node(7);
        let err = host.check().unwrap_err();
        let bdf = BDF.parse().unwrap();
        assert_eq!(
            err,
            VfioError::NotBoundToVfio {
                bdf,
                driver: Some("mlx4_core".into())
            }
        );
        let text = err.to_string();
        assert!(text.contains("bound to `mlx4_core`"), "{text}");
        assert!(text.contains("sudo modprobe vfio-pci"), "{text}");
        assert!(
            text.contains(
                "echo vfio-pci | sudo tee /sys/bus/pci/devices/0000:03:00.0/driver_override"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "echo 0000:03:00.0 | sudo tee /sys/bus/pci/devices/0000:03:00.0/driver/unbind"
            ),
            "{text}"
        );
        assert!(
            text.contains("echo 0000:03:00.0 | sudo tee /sys/bus/pci/drivers_probe"),
            "{text}"
        );
    }

    #[test]
    fn unbound_device_is_reported_as_such() {
        let host = FakeHost::new("unbound");
        host.device(BDF, 0x0c0600, None, Some(7));
        let err = host.check().unwrap_err();
        assert!(err.to_string().contains("not bound to any driver"), "{err}");
    }

    #[test]
    fn device_without_group() {
        let host = FakeHost::new("nogroup");
        host.device("0000:00:02.0", 0x030000, Some("i915"), Some(1));
        host.device(BDF, 0x0c0600, Some("vfio-pci"), None);
        let err = host.check().unwrap_err();
        assert_eq!(
            err,
            VfioError::NoGroup {
                bdf: BDF.parse().unwrap()
            }
        );
    }

    #[test]
    fn group_with_a_host_driver_is_not_viable_and_each_blocker_is_named() {
        let host = viable_host("shared");
        host.device("0000:03:00.1", 0x020000, Some("ixgbe"), None);
        // Join 03:00.1 to group 7 by hand (the helper links a device to one group only).
        let group_dir = host.roots.sys.join("kernel/iommu_groups/7/devices");
        let dev = host.base.join("sys/devices/pci0000:00/0000:03:00.1");
        symlink(&dev, group_dir.join("0000:03:00.1")).unwrap();
        // A bridge bound to pcieport and an unbound function do not block.
        host.device("0000:00:01.0", 0x060400, Some("pcieport"), None);
        symlink(
            host.base.join("sys/devices/pci0000:00/0000:00:01.0"),
            group_dir.join("0000:00:01.0"),
        )
        .unwrap();
        host.device("0000:03:00.2", 0x0c0600, None, None);
        symlink(
            host.base.join("sys/devices/pci0000:00/0000:03:00.2"),
            group_dir.join("0000:03:00.2"),
        )
        .unwrap();

        let err = host.check().unwrap_err();
        let expected = VfioError::GroupNotViable {
            bdf: BDF.parse().unwrap(),
            group: 7,
            blockers: vec![("0000:03:00.1".into(), "ixgbe".into())],
        };
        assert_eq!(err, expected);
        let text = err.to_string();
        assert!(text.contains("0000:03:00.1 is bound to `ixgbe`"), "{text}");
        assert!(
            text.contains("/sys/bus/pci/devices/0000:03:00.1/driver_override"),
            "{text}"
        );
        assert!(text.contains("iommu_groups/7/devices"), "{text}");
    }

    #[test]
    fn missing_group_node() {
        let host = FakeHost::new("nonode");
        host.device(BDF, 0x0c0600, Some("vfio-pci"), Some(7));
        let err = host.check().unwrap_err();
        assert_eq!(err, VfioError::NoGroupNode { group: 7 });
        assert!(err.to_string().contains("/dev/vfio/7"), "{err}");
    }

    #[test]
    fn memlock_limit_too_low_for_guest_memory() {
        let host = viable_host("memlock");
        fs::write(host.roots.proc_self.join("limits"), LIMITS_64K).unwrap();
        let err = host.check().unwrap_err();
        let needed = (512 << 20) + VFIO_MEMLOCK_SLACK;
        assert_eq!(
            err,
            VfioError::MemlockTooLow {
                limit: 65536,
                needed
            }
        );
        let text = err.to_string();
        assert!(text.contains("ulimit -l unlimited"), "{text}");
        assert!(text.contains("/etc/security/limits.conf"), "{text}");
        assert!(text.contains("576 MiB needed"), "{text}");
    }

    #[test]
    fn memlock_limit_is_ignored_with_cap_ipc_lock() {
        let host = viable_host("root");
        fs::write(host.roots.proc_self.join("limits"), LIMITS_64K).unwrap();
        fs::write(host.roots.proc_self.join("status"), STATUS_ROOT).unwrap();
        assert!(host.check().is_ok());
    }

    #[test]
    fn memlock_limit_large_enough_passes() {
        let host = viable_host("bigmemlock");
        let limits = format!(
            "Max locked memory         {}     {}     bytes\n",
            1u64 << 30,
            1u64 << 30
        );
        fs::write(host.roots.proc_self.join("limits"), limits).unwrap();
        assert!(host.check().is_ok());
    }

    #[test]
    fn limits_parsing() {
        assert_eq!(memlock_soft_limit(LIMITS_64K), Some(Some(65536)));
        assert_eq!(memlock_soft_limit(LIMITS_UNLIMITED), Some(None));
        assert_eq!(memlock_soft_limit("Max open files 1 1 files\n"), None);
        assert!(has_ipc_lock(STATUS_ROOT));
        assert!(!has_ipc_lock(STATUS_USER));
        assert!(!has_ipc_lock("Name: x\n"));
    }
}
