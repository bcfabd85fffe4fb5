//! Plans and results on the delegate (docs/delegation.md, "Plans and results"): a node
//! with `delegate=` in its configuration boots once with a small ramdisk, fetches its plan
//! from the delegate's root and leaves its results there, so the user finds them on the
//! Linux node instead of scraping consoles.
//!
//! Under the delegate's root:
//! - `plans/<guid>.conf`, else `plans/lid-<lid>.conf`, else `plans/default.conf`: the
//!   node's plan, `key=value` lines (the configuration's vocabulary, `run=` lines
//!   included) laid over its own configuration (`ibconfig::overlay`). `<guid>` is the
//!   port GUID in 16 lower-case hex digits, `<lid>` decimal. No file: the node runs its
//!   own configuration.
//! - `results/<guid>/<run>/console.log`: what the node printed of its runs (perftest's
//!   tables and the result lines `cargo qemu results` turns into CSV, JSON and SVG);
//!   `<run>` is the delegate's UTC wall time when the node started
//!   (`20261128T143005Z`, made unique with `-2`, `-3`, ... if taken).

use alloc::string::String;
use core::fmt::Write;

use delegate_wire::{ErrorCode, OpenFlags};
use verbs::Device;

use super::client::{Client, DelegateError};
use crate::env::BenchEnv;

/// Longest plan read (bytes).
pub const MAX_PLAN: usize = 64 << 10;
/// Most bytes of results one file takes.
pub const MAX_RESULTS: usize = 64 << 20;

/// How the node is named on the delegate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeName {
    pub guid: u64,
    pub lid: u16,
}

impl core::fmt::Display for NodeName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:016x}", self.guid)
    }
}

impl NodeName {
    /// The plan files tried, in order.
    pub fn plan_paths(&self) -> [String; 3] {
        let mut guid = String::new();
        let _ = write!(guid, "plans/{self}.conf");
        let mut lid = String::new();
        let _ = write!(lid, "plans/lid-{}.conf", self.lid);
        [guid, lid, String::from("plans/default.conf")]
    }
}

/// A plan found on the delegate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub path: String,
    pub text: String,
}

fn not_found(e: &DelegateError) -> bool {
    matches!(e, DelegateError::Failed { failure, .. } if failure.code == ErrorCode::NotFound)
}

/// The node's plan: the first of [`NodeName::plan_paths`] that exists (`None`: none does).
/// A plan longer than [`MAX_PLAN`] or not UTF-8 is refused.
pub fn fetch_plan<D: Device, E: BenchEnv>(
    dev: &mut D,
    env: &mut E,
    client: &mut Client<D>,
    node: &NodeName,
) -> Result<Option<Plan>, DelegateError> {
    for path in node.plan_paths() {
        let (handle, size) = match client.open(dev, env, &path, OpenFlags::READ, 0) {
            Ok(h) => h,
            Err(e) if not_found(&e) => continue,
            Err(e) => return Err(e),
        };
        let r = read_text(dev, env, client, handle, size);
        let closed = client.close_file(dev, env, handle);
        let text = r?;
        closed?;
        return Ok(Some(Plan { path, text }));
    }
    Ok(None)
}

fn read_text<D: Device, E: BenchEnv>(
    dev: &mut D,
    env: &mut E,
    client: &mut Client<D>,
    handle: u32,
    size: u64,
) -> Result<String, DelegateError> {
    if size > MAX_PLAN as u64 {
        return Err(DelegateError::BadRequest("a plan over 64 KiB"));
    }
    let mut bytes = alloc::vec![0u8; size as usize];
    let mut at = 0;
    while at < bytes.len() {
        let end = (at + delegate_wire::MAX_INLINE).min(bytes.len());
        let n = client.pread_inline(dev, env, handle, at as u64, &mut bytes[at..end])?;
        if n == 0 {
            break;
        }
        at += n;
    }
    bytes.truncate(at);
    String::from_utf8(bytes).map_err(|_| DelegateError::BadRequest("a plan that is not UTF-8"))
}

/// `ns` since the Unix epoch as `YYYYMMDDTHHMMSSZ` (UTC).
pub fn utc_stamp(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Days to a civil date (proleptic Gregorian), after Howard Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mut s = String::new();
    let _ = write!(
        s,
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
    s
}

/// Creates this run's results directory, `results/<node>/<delegate's UTC time>`, and
/// returns its path; a directory already there (two runs in one second) gets `-2`, `-3`, ...
pub fn results_dir<D: Device, E: BenchEnv>(
    dev: &mut D,
    env: &mut E,
    client: &mut Client<D>,
    node: &NodeName,
) -> Result<String, DelegateError> {
    let (realtime, _) = client.clock(dev, env)?;
    let mut parent = String::new();
    let _ = write!(parent, "results/{node}");
    client.mkdir_all(dev, env, &parent, 0o755)?;
    let stamp = utc_stamp(realtime);
    for n in 1..=100u32 {
        let mut dir = String::new();
        let _ = write!(dir, "{parent}/{stamp}");
        if n > 1 {
            let _ = write!(dir, "-{n}");
        }
        match client.mkdir(dev, env, &dir, 0o755) {
            Ok(()) => return Ok(dir),
            Err(DelegateError::Failed { failure, .. }) if failure.code == ErrorCode::Exists => {}
            Err(e) => return Err(e),
        }
    }
    Err(DelegateError::BadRequest("100 runs in one second"))
}

/// Writes `bytes` as the file `path` (created or truncated) through one registered buffer
/// of at most 1 MiB: the delegate RDMA-READs each chunk. At most [`MAX_RESULTS`] bytes.
pub fn write_file<D: Device, E: BenchEnv>(
    dev: &mut D,
    env: &mut E,
    client: &mut Client<D>,
    path: &str,
    bytes: &[u8],
) -> Result<(), DelegateError> {
    if bytes.len() > MAX_RESULTS {
        return Err(DelegateError::BadRequest("results over 64 MiB"));
    }
    let chunk = bytes
        .len()
        .clamp(1, delegate_wire::MAX_TRANSFER as usize)
        .next_power_of_two();
    let region = env
        .alloc_dma(chunk, 4096)
        .ok_or(DelegateError::NoMemory("results buffer"))?;
    let buf = client.register(dev, region)?;
    let flags = OpenFlags::WRITE
        .union(OpenFlags::CREATE)
        .union(OpenFlags::TRUNCATE);
    let r = (|| {
        let (handle, _) = client.open(dev, env, path, flags, 0o644)?;
        let mut written = Ok(());
        for (i, part) in bytes.chunks(chunk).enumerate() {
            let Some(region) = client.buffer_mut(buf) else {
                written = Err(DelegateError::BadRequest("no such buffer"));
                break;
            };
            region.bytes_mut()[..part.len()].copy_from_slice(part);
            let offset = (i * chunk) as u64;
            match client.pwrite(dev, env, handle, offset, buf, 0, part.len() as u32) {
                Ok(n) if n as usize == part.len() => {}
                Ok(_) => {
                    written = Err(DelegateError::Failed {
                        op: delegate_wire::Op::Pwrite,
                        failure: delegate_wire::Failure::new(ErrorCode::NoSpace, 0),
                    });
                    break;
                }
                Err(e) => {
                    written = Err(e);
                    break;
                }
            }
        }
        let closed = client.close_file(dev, env, handle);
        written.and(closed)
    })();
    let back = client.unregister(dev, buf);
    r?;
    back.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_stamps_are_civil_dates() {
        assert_eq!(utc_stamp(0), "19700101T000000Z");
        // 2026-11-28 14:30:05 UTC.
        assert_eq!(utc_stamp(1_795_876_205_000_000_000), "20261128T143005Z");
        // A leap day, and the end of a century's leap year.
        assert_eq!(utc_stamp(951_782_400_000_000_000), "20000229T000000Z");
        assert_eq!(utc_stamp(978_307_199_999_999_999), "20001231T235959Z");
        // Before the epoch.
        assert_eq!(utc_stamp(-1), "19691231T235959Z");
    }

    #[test]
    fn plans_are_looked_up_by_guid_then_lid_then_default() {
        let n = NodeName {
            guid: 0x0002_c903_00ab_cdef,
            lid: 7,
        };
        assert_eq!(
            n.plan_paths(),
            [
                "plans/0002c90300abcdef.conf",
                "plans/lid-7.conf",
                "plans/default.conf"
            ]
        );
    }
}
