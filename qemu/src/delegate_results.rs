//! Results of the delegation benchmark (`cargo qemu delegate`; docs/benchmarks.md,
//! "Delegation"): the `ibkern-delegate-*` lines of each ibkern node's console (written by
//! `bench::delegate::line`) turned into `delegate.csv`, `delegate.json` and `delegate.svg`
//! (typical round trip against size, one line per operation and completion mode), with the
//! model's PCIe transactions per call of both ends where the runner sampled them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use bench::delegate::line::{BASELINE_PREFIX, RATE_PREFIX, RESULT_PREFIX};
use serde_json::{json, Map, Value};

use crate::plot::{Plot, Point, Series};
use crate::provenance::Provenance;

/// One latency row of one node.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The node (its console's name).
    pub node: String,
    pub op: String,
    pub mode: String,
    pub bytes: u64,
    pub iterations: u64,
    pub t_min_us: f64,
    pub t_typical_us: f64,
    pub t_avg_us: f64,
    pub p99_us: f64,
    pub t_max_us: f64,
    pub interrupts: Option<u64>,
    /// The model's PCIe transactions per call at the node's and at the delegate's HCA
    /// (MMIO writes and reads, DMA reads and writes, interrupts), when sampled.
    pub pcie_node: Option<[f64; 5]>,
    pub pcie_delegate: Option<[f64; 5]>,
}

/// One rate row of one node.
#[derive(Clone, Debug, PartialEq)]
pub struct Rate {
    pub node: String,
    pub mode: String,
    pub outstanding: u64,
    pub calls: u64,
    pub calls_per_sec: f64,
}

/// The baseline comparison of one node.
#[derive(Clone, Debug, PartialEq)]
pub struct Baseline {
    pub node: String,
    pub bytes: u64,
    pub rtt_typical_us: f64,
    pub null_typical_us: f64,
    pub ratio: f64,
}

/// Everything read from the consoles.
#[derive(Clone, Debug, Default)]
pub struct DelegateResults {
    pub rows: Vec<Row>,
    pub rates: Vec<Rate>,
    pub baselines: Vec<Baseline>,
    /// Lines with a delegate prefix that did not parse: (node, reason).
    pub bad_lines: Vec<(String, String)>,
    pub provenance: Option<Provenance>,
}

fn field<'a>(o: &'a Map<String, Value>, k: &str) -> Result<&'a Value, String> {
    o.get(k).ok_or_else(|| format!("missing \"{k}\""))
}
fn num(o: &Map<String, Value>, k: &str) -> Result<f64, String> {
    field(o, k)?
        .as_f64()
        .ok_or_else(|| format!("\"{k}\" is not a number"))
}
fn whole(o: &Map<String, Value>, k: &str) -> Result<u64, String> {
    field(o, k)?
        .as_u64()
        .ok_or_else(|| format!("\"{k}\" is not a non-negative integer"))
}
fn maybe(o: &Map<String, Value>, k: &str) -> Result<Option<u64>, String> {
    match field(o, k)? {
        Value::Null => Ok(None),
        v => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("\"{k}\" is not a non-negative integer")),
    }
}
fn text(o: &Map<String, Value>, k: &str) -> Result<String, String> {
    field(o, k)?
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("\"{k}\" is not a string"))
}

fn object(json_text: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(json_text.trim()) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err("not a JSON object".into()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

pub fn parse_row(json_text: &str, node: &str) -> Result<Row, String> {
    let o = object(json_text)?;
    let op = text(&o, "op")?;
    if bench::delegate::line::Op::from_name(&op).is_none() {
        return Err(format!("unknown op {op:?}"));
    }
    let mode = text(&o, "mode")?;
    if bench::Completion::from_name(&mode).is_none() {
        return Err(format!("unknown mode {mode:?}"));
    }
    Ok(Row {
        node: node.to_string(),
        op,
        mode,
        bytes: whole(&o, "bytes")?,
        iterations: whole(&o, "iterations")?,
        t_min_us: num(&o, "t_min_us")?,
        t_typical_us: num(&o, "t_typical_us")?,
        t_avg_us: num(&o, "t_avg_us")?,
        p99_us: num(&o, "p99_us")?,
        t_max_us: num(&o, "t_max_us")?,
        interrupts: maybe(&o, "interrupts")?,
        pcie_node: None,
        pcie_delegate: None,
    })
}

pub fn parse_rate(json_text: &str, node: &str) -> Result<Rate, String> {
    let o = object(json_text)?;
    Ok(Rate {
        node: node.to_string(),
        mode: text(&o, "mode")?,
        outstanding: whole(&o, "outstanding")?,
        calls: whole(&o, "calls")?,
        calls_per_sec: num(&o, "calls_per_sec")?,
    })
}

pub fn parse_baseline(json_text: &str, node: &str) -> Result<Baseline, String> {
    let o = object(json_text)?;
    Ok(Baseline {
        node: node.to_string(),
        bytes: whole(&o, "bytes")?,
        rtt_typical_us: num(&o, "rtt_typical_us")?,
        null_typical_us: num(&o, "null_typical_us")?,
        ratio: num(&o, "ratio")?,
    })
}

impl DelegateResults {
    /// Adds one console line of `node` (a delegate line or anything else, ignored).
    pub fn add_line(&mut self, node: &str, line: &str) {
        let line = line.trim_end_matches('\r');
        let r = if let Some(j) = line.find(RESULT_PREFIX) {
            parse_row(&line[j + RESULT_PREFIX.len()..], node).map(|r| self.rows.push(r))
        } else if let Some(j) = line.find(RATE_PREFIX) {
            parse_rate(&line[j + RATE_PREFIX.len()..], node).map(|r| self.rates.push(r))
        } else if let Some(j) = line.find(BASELINE_PREFIX) {
            parse_baseline(&line[j + BASELINE_PREFIX.len()..], node).map(|b| self.baselines.push(b))
        } else {
            Ok(())
        };
        if let Err(why) = r {
            self.bad_lines.push((node.to_string(), why));
        }
    }

    /// Reads every line of `console`.
    pub fn add_console(&mut self, node: &str, console: &str) {
        for line in console.lines() {
            self.add_line(node, line);
        }
    }

    fn comment_lines(&self, marker: &str) -> String {
        let mut s = String::new();
        if let Some(p) = &self.provenance {
            for l in p.lines() {
                let _ = writeln!(s, "{marker}{l}");
            }
        }
        s
    }

    /// `delegate.csv`: the latency rows, then the rates and baselines as rows of their own
    /// kind (the `kind` column).
    pub fn csv(&self) -> String {
        let mut s = self.comment_lines("# ");
        let pcie = [
            "mmio_writes",
            "mmio_reads",
            "dma_reads",
            "dma_writes",
            "interrupts",
        ];
        let cols: Vec<String> = pcie
            .iter()
            .map(|c| format!("node_{c}"))
            .chain(pcie.iter().map(|c| format!("delegate_{c}")))
            .collect();
        let _ = writeln!(
            s,
            "kind,node,op,mode,bytes,iterations,t_min_us,t_typical_us,t_avg_us,p99_us,t_max_us,interrupts,outstanding,calls_per_sec,rtt_typical_us,ratio,{}",
            cols.join(",")
        );
        let opt = |v: Option<[f64; 5]>| match v {
            Some(a) => a
                .iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(","),
            None => ",,,,".to_string(),
        };
        for r in &self.rows {
            let _ = writeln!(
                s,
                "latency,{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{},,,,,{},{}",
                r.node,
                r.op,
                r.mode,
                r.bytes,
                r.iterations,
                r.t_min_us,
                r.t_typical_us,
                r.t_avg_us,
                r.p99_us,
                r.t_max_us,
                r.interrupts.map_or(String::new(), |i| i.to_string()),
                opt(r.pcie_node),
                opt(r.pcie_delegate)
            );
        }
        for r in &self.rates {
            let _ = writeln!(
                s,
                "rate,{},null,{},16,{},,,,,,,{},{:.1},,,{},{}",
                r.node,
                r.mode,
                r.calls,
                r.outstanding,
                r.calls_per_sec,
                opt(None),
                opt(None)
            );
        }
        for b in &self.baselines {
            let _ = writeln!(
                s,
                "baseline,{},null,poll,{},,,{:.3},,,,,,,{:.3},{:.3},{},{}",
                b.node,
                b.bytes,
                b.null_typical_us,
                b.rtt_typical_us,
                b.ratio,
                opt(None),
                opt(None)
            );
        }
        s
    }

    pub fn json(&self) -> Value {
        let pcie = |v: Option<[f64; 5]>| {
            v.map(|a| {
                json!({"mmio_writes": a[0], "mmio_reads": a[1], "dma_reads": a[2], "dma_writes": a[3], "interrupts": a[4]})
            })
        };
        json!({
            "provenance": self.provenance.as_ref().map(Provenance::to_json),
            "latency": self.rows.iter().map(|r| json!({
                "node": r.node, "op": r.op, "mode": r.mode, "bytes": r.bytes,
                "iterations": r.iterations, "t_min_us": r.t_min_us,
                "t_typical_us": r.t_typical_us, "t_avg_us": r.t_avg_us, "p99_us": r.p99_us,
                "t_max_us": r.t_max_us, "interrupts": r.interrupts,
                "pcie_per_call_node": pcie(r.pcie_node),
                "pcie_per_call_delegate": pcie(r.pcie_delegate),
            })).collect::<Vec<_>>(),
            "rate": self.rates.iter().map(|r| json!({
                "node": r.node, "mode": r.mode, "outstanding": r.outstanding,
                "calls": r.calls, "calls_per_sec": r.calls_per_sec,
            })).collect::<Vec<_>>(),
            "baseline": self.baselines.iter().map(|b| json!({
                "node": b.node, "test": "send_lat", "transport": "RC", "bytes": b.bytes,
                "rtt_typical_us": b.rtt_typical_us, "null_typical_us": b.null_typical_us,
                "ratio": b.ratio,
            })).collect::<Vec<_>>(),
        })
    }

    /// The plot: one line per operation and mode (the first node's rows), typical round
    /// trip against size; the null call is a size of its own (its 16-byte request).
    pub fn plot(&self) -> Plot {
        let first = self.rows.first().map(|r| r.node.clone());
        let mut series: Vec<Series> = Vec::new();
        for r in self.rows.iter().filter(|r| Some(&r.node) == first.as_ref()) {
            let name = format!("{} {}", r.op, r.mode);
            let bytes = if r.op == "null" {
                bench::delegate::benchmark::NULL_BYTES.into()
            } else {
                r.bytes
            };
            let point = Point {
                bytes,
                us: r.t_typical_us.max(1e-3),
                p99: Some(r.p99_us),
                inline: None,
            };
            match series.iter_mut().find(|s| s.name == name) {
                Some(s) => s.points.push(point),
                None => series.push(Series {
                    name,
                    points: vec![point],
                }),
            }
        }
        Plot {
            title: "ibkern delegation: call round trip (typical) by operation and completion mode"
                .into(),
            subtitle: self
                .provenance
                .as_ref()
                .map(Provenance::subtitle)
                .unwrap_or_default(),
            metadata: self.provenance.as_ref().map(|p| p.to_json().to_string()),
            series,
        }
    }

    /// Prints the summary tables: typical round trips per operation and mode, the rates,
    /// the baseline.
    pub fn print_tables(&self) {
        if let Some(p) = &self.provenance {
            for l in p.lines() {
                println!("# {l}");
            }
        }
        let mut nodes: Vec<&str> = self.rows.iter().map(|r| r.node.as_str()).collect();
        nodes.dedup();
        for node in nodes {
            println!("--- {node}: delegated calls, typical round trip [usec] (p99) ---");
            println!(
                "{:<8} {:<6} {:>8} {:>12} {:>12}",
                "op", "mode", "bytes", "typical", "p99"
            );
            for r in self.rows.iter().filter(|r| r.node == node) {
                println!(
                    "{:<8} {:<6} {:>8} {:>12.2} {:>12.2}",
                    r.op, r.mode, r.bytes, r.t_typical_us, r.p99_us
                );
            }
            for r in self.rates.iter().filter(|r| r.node == node) {
                println!(
                    "{node}: {} null calls/sec with {} outstanding ({})",
                    r.calls_per_sec as u64, r.outstanding, r.mode
                );
            }
            for b in self.baselines.iter().filter(|b| b.node == node) {
                println!(
                    "{node}: null call {:.2} usec vs RC ib_send_lat {} B {:.2} usec round trip: {:.2}x",
                    b.null_typical_us, b.bytes, b.rtt_typical_us, b.ratio
                );
            }
        }
    }

    /// Writes `delegate.csv`, `delegate.json`, `delegate.svg` into `dir`.
    pub fn write_files(&self, dir: &Path) -> anyhow::Result<[PathBuf; 3]> {
        let paths = ["delegate.csv", "delegate.json", "delegate.svg"].map(|f| dir.join(f));
        std::fs::write(&paths[0], self.csv()).with_context(|| paths[0].display().to_string())?;
        let json = serde_json::to_string_pretty(&self.json())?;
        std::fs::write(&paths[1], json + "\n").with_context(|| paths[1].display().to_string())?;
        std::fs::write(&paths[2], crate::plot::svg(&self.plot()))
            .with_context(|| paths[2].display().to_string())?;
        Ok(paths)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONSOLE: &str = "\
boot: something
ibkern-delegate-result {\"op\":\"null\",\"mode\":\"poll\",\"bytes\":0,\"iterations\":20,\"samples\":19,\"t_min_us\":10.000,\"t_max_us\":30.000,\"t_typical_us\":12.500,\"t_avg_us\":13.000,\"t_stdev_us\":1.000,\"p99_us\":29.000,\"p99_9_us\":30.000,\"true_max_us\":31.000,\"tsc_mhz\":2000.000,\"interrupts\":0,\"events\":0,\"isr_calls\":0}
ibkern-delegate-result {\"op\":\"pread\",\"mode\":\"isr\",\"bytes\":4096,\"iterations\":20,\"samples\":19,\"t_min_us\":20.000,\"t_max_us\":40.000,\"t_typical_us\":22.000,\"t_avg_us\":23.000,\"t_stdev_us\":1.000,\"p99_us\":39.000,\"p99_9_us\":40.000,\"true_max_us\":41.000,\"tsc_mhz\":2000.000,\"interrupts\":21,\"events\":20,\"isr_calls\":21}
ibkern-delegate-rate {\"mode\":\"poll\",\"outstanding\":8,\"calls\":160,\"elapsed_us\":1000.000,\"calls_per_sec\":160000.000}
ibkern-delegate-baseline {\"test\":\"send_lat\",\"transport\":\"RC\",\"mode\":\"poll\",\"bytes\":16,\"iterations\":20,\"rtt_typical_us\":10.000,\"null_typical_us\":12.500,\"ratio\":1.250}
ibkern-delegate-result {\"op\":\"fly\",\"mode\":\"poll\"}
ibkern-delegate-result not json
";

    #[test]
    fn every_kind_of_line_is_read_and_bad_ones_are_named() {
        let mut r = DelegateResults::default();
        r.add_console("node 1", CONSOLE);
        assert_eq!(r.rows.len(), 2);
        assert_eq!(
            (
                r.rows[1].op.as_str(),
                r.rows[1].mode.as_str(),
                r.rows[1].bytes
            ),
            ("pread", "isr", 4096)
        );
        assert_eq!(r.rows[1].interrupts, Some(21));
        assert_eq!(r.rates[0].calls_per_sec, 160000.0);
        assert_eq!(r.baselines[0].ratio, 1.25);
        assert_eq!(r.bad_lines.len(), 2, "{:?}", r.bad_lines);
        assert!(r.bad_lines[0].1.contains("unknown op"), "{:?}", r.bad_lines);
    }

    #[test]
    fn csv_json_and_plot_carry_every_row() {
        let mut r = DelegateResults::default();
        r.add_console("node 1", CONSOLE);
        r.rows[0].pcie_node = Some([4.0, 1.0, 3.0, 2.0, 0.0]);
        let csv = r.csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert!(lines[0].starts_with("kind,node,op,mode,bytes,"));
        let columns = lines[0].split(',').count();
        assert_eq!(lines.len(), 1 + 2 + 1 + 1);
        for l in &lines[1..] {
            assert_eq!(l.split(',').count(), columns, "{l}");
        }
        assert!(lines[1].starts_with("latency,node 1,null,poll,0,20,10.000,12.500,"));
        assert!(
            lines[1].contains(",4.00,1.00,3.00,2.00,0.00,"),
            "{}",
            lines[1]
        );
        assert!(lines[3].starts_with("rate,node 1,null,poll,16,160,"));
        assert!(lines[4].starts_with("baseline,node 1,null,poll,16,"));
        let j = r.json();
        assert_eq!(j["latency"].as_array().unwrap().len(), 2);
        assert_eq!(j["latency"][0]["pcie_per_call_node"]["mmio_writes"], 4.0);
        assert_eq!(j["baseline"][0]["ratio"], 1.25);
        let plot = r.plot();
        let names: Vec<&str> = plot.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["null poll", "pread isr"]);
        assert_eq!(plot.series[0].points[0].bytes, 16);
        assert!(crate::plot::svg(&plot).contains("pread isr"));
    }
}
