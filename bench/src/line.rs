//! The machine-readable result line: one per size, on the console after perftest's row.
//!
//! ```text
//! ibkern-result {"test":"send_lat","transport":"UD","role":"client","bytes":2,...}
//! ```
//! The schema is documented in docs/benchmarks.md; `qemu::results` parses it.

use crate::config::{Completion, Role, Test, Transport};
use crate::stats::LatencyStats;
use core::fmt::{self, Write};

/// The prefix that starts every result line.
pub const PREFIX: &str = "ibkern-result ";

/// The prefix of the line a client prints after each run: its port's traffic counters
/// read before and after the run (docs/benchmarks.md, "Port counters").
pub const PORT_PREFIX: &str = "ibkern-port ";

/// The keys of a port line's `before` and `after` objects: PortXmitData, PortRcvData (in
/// 4-byte words), PortXmitPkts, PortRcvPkts.
pub const PORT_COUNTERS: [&str; 4] = ["xmit_data_words", "rcv_data_words", "xmit_pkts", "rcv_pkts"];

/// Everything a port line carries.
#[derive(Clone, Copy)]
pub struct PortLine<'a> {
    pub test: Test,
    pub transport: Transport,
    pub role: Role,
    /// The run as a perftest command line.
    pub command: &'a dyn fmt::Display,
    pub port: u8,
    pub before: verbs::PortTraffic,
    pub after: verbs::PortTraffic,
}

fn counters<W: Write>(out: &mut W, key: &str, c: &verbs::PortTraffic) -> fmt::Result {
    let v = [
        c.xmit_data_words,
        c.rcv_data_words,
        c.xmit_packets,
        c.rcv_packets,
    ];
    write!(out, ",\"{key}\":{{")?;
    for (i, (name, v)) in PORT_COUNTERS.iter().zip(v).enumerate() {
        let sep = if i == 0 { "" } else { "," };
        write!(out, "{sep}\"{name}\":{v}")?;
    }
    write!(out, "}}")
}

/// Writes the port line (prefix, one JSON object, newline).
pub fn write_port_line<W: Write>(out: &mut W, p: &PortLine<'_>) -> fmt::Result {
    write!(
        out,
        "{PORT_PREFIX}{{\"test\":\"{}\",\"transport\":\"{}\",\"role\":\"{}\",\"command\":\"{}\",\"port\":{},\"extended\":{}",
        p.test.name(),
        p.transport.name(),
        p.role.name(),
        p.command,
        p.port,
        p.before.extended && p.after.extended
    )?;
    counters(out, "before", &p.before)?;
    counters(out, "after", &p.after)?;
    writeln!(out, "}}")
}

/// Everything one result line carries.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ResultLine {
    /// `"send_lat"` or `"write_lat"`.
    pub test: Test,
    pub transport: Transport,
    pub role: Role,
    pub bytes: u32,
    /// Iterations configured (`-n`).
    pub iterations: u32,
    /// `None` when the size was aborted or too few clean samples remained.
    pub stats: Option<LatencyStats>,
    pub tsc_mhz: f64,
    pub inline: bool,
    pub completion: Completion,
    /// Path MTU in bytes.
    pub mtu: u32,
    pub lost: u32,
    pub retries: u32,
    pub aborted: bool,
    /// Interrupts the device raised while the size was measured (`None`: unknown).
    pub interrupts: Option<u64>,
}

fn num<W: Write>(out: &mut W, key: &str, v: Option<f64>) -> fmt::Result {
    match v {
        Some(x) if x.is_finite() => write!(out, ",\"{key}\":{x:.3}"),
        _ => write!(out, ",\"{key}\":null"),
    }
}

/// Writes the line (prefix, one JSON object, newline).
pub fn write_result_line<W: Write>(out: &mut W, r: &ResultLine) -> fmt::Result {
    write!(
        out,
        "{PREFIX}{{\"test\":\"{}\",\"transport\":\"{}\",\"role\":\"{}\",\"bytes\":{},\"iterations\":{}",
        r.test.name(),
        r.transport.name(),
        r.role.name(),
        r.bytes,
        r.iterations
    )?;
    let s = r.stats.as_ref();
    write!(out, ",\"samples\":{}", s.map_or(0, |s| s.samples))?;
    num(out, "t_min_us", s.map(|s| s.t_min))?;
    num(out, "t_max_us", s.map(|s| s.t_max))?;
    num(out, "t_typical_us", s.map(|s| s.t_typical))?;
    num(out, "t_avg_us", s.map(|s| s.t_avg))?;
    num(out, "t_stdev_us", s.map(|s| s.t_stdev))?;
    num(out, "p99_us", s.map(|s| s.p99))?;
    num(out, "p99_9_us", s.map(|s| s.p99_9))?;
    num(out, "true_max_us", s.map(|s| s.true_max))?;
    num(out, "true_stdev_us", s.map(|s| s.true_stdev))?;
    num(out, "tsc_mhz", Some(r.tsc_mhz))?;
    write!(
        out,
        ",\"inline\":{},\"completion\":\"{}\",\"mtu\":{},\"lost\":{},\"retries\":{},\"aborted\":{}",
        r.inline,
        r.completion.name(),
        r.mtu,
        r.lost,
        r.retries,
        r.aborted
    )?;
    match r.interrupts {
        Some(n) => write!(out, ",\"interrupts\":{n}")?,
        None => write!(out, ",\"interrupts\":null")?,
    }
    let per_iter = r
        .interrupts
        .map(|n| n as f64 / f64::from(r.iterations.max(1)));
    num(out, "interrupts_per_iter", per_iter)?;
    writeln!(out, "}}")
}

/// Everything a bandwidth test's result line carries (one per size and node).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BwResultLine {
    pub test: Test,
    pub transport: Transport,
    pub role: Role,
    pub bytes: u32,
    /// Messages the sender sent (`-n`).
    pub iterations: u32,
    /// The sender's figures in MB/sec (perftest's MB: MiB) and Mpps; `None` on the
    /// receiving or passive side.
    pub figures: Option<crate::bw::BwReport>,
    pub tsc_mhz: f64,
    pub inline: bool,
    pub mtu: u32,
    /// The tx depth, post list and CQ moderation in force.
    pub tx_depth: u32,
    pub post_list: u32,
    pub cq_mod: u32,
    /// Messages the receiver counted and their payload bytes; `None` when nothing counts
    /// them (write_bw's passive server).
    pub received: Option<u64>,
    pub bytes_received: Option<u64>,
    /// Messages sent and not received (0 when nothing counts them).
    pub lost: u64,
}

/// Writes a bandwidth result line (prefix, one JSON object, newline):
/// `ibkern-result {"test":"send_bw",...,"bw_peak_mbs":..,"bw_avg_mbs":..,"msg_rate_mpps":..,
/// ...,"received":..,"lost":..}`.
pub fn write_bw_result_line<W: Write>(out: &mut W, r: &BwResultLine) -> fmt::Result {
    write!(
        out,
        "{PREFIX}{{\"test\":\"{}\",\"transport\":\"{}\",\"role\":\"{}\",\"bytes\":{},\"iterations\":{}",
        r.test.name(),
        r.transport.name(),
        r.role.name(),
        r.bytes,
        r.iterations
    )?;
    let f = r.figures.as_ref();
    num(out, "bw_peak_mbs", f.map(|f| f.bw_peak))?;
    num(out, "bw_avg_mbs", f.map(|f| f.bw_avg))?;
    match f {
        Some(f) if f.msg_rate_mpps.is_finite() => {
            write!(out, ",\"msg_rate_mpps\":{:.6}", f.msg_rate_mpps)?
        }
        _ => write!(out, ",\"msg_rate_mpps\":null")?,
    }
    num(out, "tsc_mhz", Some(r.tsc_mhz))?;
    write!(
        out,
        ",\"inline\":{},\"mtu\":{},\"tx_depth\":{},\"post_list\":{},\"cq_mod\":{},\"received\":{},\"bytes_received\":{},\"lost\":{},\"aborted\":false}}",
        r.inline,
        r.mtu,
        r.tx_depth,
        r.post_list,
        r.cq_mod,
        OptNum(r.received),
        OptNum(r.bytes_received),
        r.lost
    )?;
    writeln!(out)
}

/// A JSON number, or `null` for `None`.
struct OptNum(Option<u64>);

impl fmt::Display for OptNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(n) => write!(f, "{n}"),
            None => f.write_str("null"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_line_carries_figures_and_exact_loss() {
        let report = crate::bw::BwReport {
            size: 1024,
            iterations: 200,
            bw_peak: 1234.5,
            bw_avg: 1000.25,
            msg_rate_mpps: 1.024,
            total_cycles: 1,
            opt_delta_cycles: 1,
        };
        let r = BwResultLine {
            test: Test::SendBw,
            transport: Transport::Ud,
            role: Role::Client,
            bytes: 1024,
            iterations: 200,
            figures: Some(report),
            tsc_mhz: 2000.0,
            inline: false,
            mtu: 2048,
            tx_depth: 64,
            post_list: 1,
            cq_mod: 16,
            received: Some(197),
            bytes_received: Some(197 * 1024),
            lost: 3,
        };
        let mut s = String::new();
        write_bw_result_line(&mut s, &r).unwrap();
        assert_eq!(
            s,
            "ibkern-result {\"test\":\"send_bw\",\"transport\":\"UD\",\"role\":\"client\",\"bytes\":1024,\"iterations\":200,\"bw_peak_mbs\":1234.500,\"bw_avg_mbs\":1000.250,\"msg_rate_mpps\":1.024000,\"tsc_mhz\":2000.000,\"inline\":false,\"mtu\":2048,\"tx_depth\":64,\"post_list\":1,\"cq_mod\":16,\"received\":197,\"bytes_received\":201728,\"lost\":3,\"aborted\":false}\n"
        );
        let passive = BwResultLine {
            test: Test::WriteBw,
            role: Role::Server,
            figures: None,
            received: None,
            bytes_received: None,
            lost: 0,
            ..r
        };
        let mut s = String::new();
        write_bw_result_line(&mut s, &passive).unwrap();
        assert!(
            s.contains("\"bw_peak_mbs\":null,\"bw_avg_mbs\":null,\"msg_rate_mpps\":null"),
            "{s}"
        );
        assert!(
            s.contains("\"received\":null,\"bytes_received\":null,\"lost\":0"),
            "{s}"
        );
    }

    #[test]
    fn port_line_is_prefixed_json_with_both_reads() {
        let c = |x: u64| verbs::PortTraffic {
            xmit_data_words: 100 * x,
            rcv_data_words: 90 * x,
            xmit_packets: 10 * x,
            rcv_packets: 9 * x,
            extended: true,
        };
        let mut s = alloc::string::String::new();
        write_port_line(
            &mut s,
            &PortLine {
                test: Test::SendLat,
                transport: Transport::Uc,
                role: Role::Client,
                command: &"ib_send_lat -c UC -s 64 -n 20",
                port: 1,
                before: c(1),
                after: c(3),
            },
        )
        .unwrap();
        assert_eq!(
            s,
            "ibkern-port {\"test\":\"send_lat\",\"transport\":\"UC\",\"role\":\"client\",\"command\":\"ib_send_lat -c UC -s 64 -n 20\",\"port\":1,\"extended\":true,\"before\":{\"xmit_data_words\":100,\"rcv_data_words\":90,\"xmit_pkts\":10,\"rcv_pkts\":9},\"after\":{\"xmit_data_words\":300,\"rcv_data_words\":270,\"xmit_pkts\":30,\"rcv_pkts\":27}}\n"
        );
    }

    #[test]
    fn line_is_prefixed_json_with_every_field() {
        let stats = LatencyStats {
            iterations: 1000,
            samples: 999,
            t_min: 0.77,
            t_max: 5.35,
            t_typical: 0.79,
            t_avg: 0.8,
            t_stdev: 0.05,
            p99: 0.84,
            p99_9: 5.35,
            true_max: 9.0,
            true_stdev: 0.3,
        };
        let r = ResultLine {
            test: Test::SendLat,
            transport: Transport::Ud,
            role: Role::Client,
            bytes: 2,
            iterations: 1000,
            stats: Some(stats),
            tsc_mhz: 2400.0,
            inline: true,
            completion: Completion::Poll,
            mtu: 2048,
            lost: 1,
            retries: 2,
            aborted: false,
            interrupts: Some(1500),
        };
        let mut s = String::new();
        write_result_line(&mut s, &r).unwrap();
        assert_eq!(
            s,
            "ibkern-result {\"test\":\"send_lat\",\"transport\":\"UD\",\"role\":\"client\",\"bytes\":2,\"iterations\":1000,\"samples\":999,\"t_min_us\":0.770,\"t_max_us\":5.350,\"t_typical_us\":0.790,\"t_avg_us\":0.800,\"t_stdev_us\":0.050,\"p99_us\":0.840,\"p99_9_us\":5.350,\"true_max_us\":9.000,\"true_stdev_us\":0.300,\"tsc_mhz\":2400.000,\"inline\":true,\"completion\":\"poll\",\"mtu\":2048,\"lost\":1,\"retries\":2,\"aborted\":false,\"interrupts\":1500,\"interrupts_per_iter\":1.500}\n"
        );
        let aborted = ResultLine {
            stats: None,
            aborted: true,
            interrupts: None,
            ..r
        };
        let mut s = String::new();
        write_result_line(&mut s, &aborted).unwrap();
        assert!(s.contains("\"samples\":0,\"t_min_us\":null"));
        assert!(s.ends_with("\"aborted\":true,\"interrupts\":null,\"interrupts_per_iter\":null}\n"));
        let write = ResultLine {
            test: Test::WriteLat,
            transport: Transport::Rc,
            ..r
        };
        let mut s = String::new();
        write_result_line(&mut s, &write).unwrap();
        assert!(s.starts_with(
            "ibkern-result {\"test\":\"write_lat\",\"transport\":\"RC\",\"role\":\"client\""
        ));
    }
}
