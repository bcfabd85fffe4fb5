//! Results of the bandwidth tests (`send_bw`, `write_bw`, `read_bw`, `atomic_bw`): their
//! `ibkern-result` lines (schema in docs/benchmarks.md) turned into perftest's bandwidth
//! tables, `bandwidth.csv`, `bandwidth.json` and `bandwidth.svg` (BW average and MsgRate
//! against message size, one line per test and transport, log2 size axis), written beside
//! the latency files.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use plotters::prelude::*;
use serde_json::{json, Value};

use bench::line::BandwidthLine;
use ibconfig::{Role, Test, Transport};

use crate::provenance::Provenance;

/// One size of a bandwidth run as one node reported it.
#[derive(Clone, Debug, PartialEq)]
pub struct BwRecord {
    /// Index of the console the line came from.
    pub node: usize,
    pub line: BandwidthLine,
}

/// The bandwidth tests, in the order tables and plots show them.
pub fn bw_tests() -> impl Iterator<Item = Test> {
    Test::ALL.into_iter().filter(|t| t.is_bw())
}

/// Column names of `bandwidth.csv`, in order.
pub const BW_CSV_COLUMNS: [&str; 19] = [
    "node",
    "role",
    "test",
    "transport",
    "bytes",
    "iterations",
    "bw_peak_mbs",
    "bw_avg_mbs",
    "bw_avg_gbps",
    "msg_rate_mpps",
    "tsc_mhz",
    "inline",
    "mtu",
    "tx_depth",
    "post_list",
    "cq_mod",
    "received",
    "bytes_received",
    "lost",
];

/// MB/sec (perftest's: MiB/s) as Gb/s.
pub fn mbs_to_gbps(mbs: f64) -> f64 {
    mbs * 1_048_576.0 * 8.0 / 1e9
}

/// Paths of the bandwidth files.
#[derive(Clone, Debug, PartialEq)]
pub struct BwWritten {
    pub csv: PathBuf,
    pub json: PathBuf,
    pub svg: PathBuf,
}

/// Every bandwidth record of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BwResults {
    pub records: Vec<BwRecord>,
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or(String::new(), |x| x.to_string())
}
fn opt3(v: Option<f64>) -> String {
    v.map_or(String::new(), |x| format!("{x:.3}"))
}

impl BwResults {
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// (test, transport) pairs present, in [`bw_tests`] then UD, UC, RC order.
    pub fn groups(&self) -> Vec<(Test, Transport)> {
        bw_tests()
            .flat_map(|test| Transport::ALL.map(move |t| (test, t)))
            .filter(|&(test, t)| {
                self.records
                    .iter()
                    .any(|r| (r.line.test, r.line.transport) == (test, t))
            })
            .collect()
    }

    /// The records of one group and role, by size.
    pub fn rows(&self, test: Test, transport: Transport, role: Role) -> Vec<&BwRecord> {
        let mut v: Vec<&BwRecord> = self
            .records
            .iter()
            .filter(|r| (r.line.test, r.line.transport, r.line.role) == (test, transport, role))
            .collect();
        v.sort_by_key(|r| (r.line.bytes, r.node));
        v
    }

    /// Messages the clients' lines report lost, over every size.
    pub fn total_lost(&self) -> u64 {
        self.records
            .iter()
            .filter(|r| r.line.role == Role::Client)
            .map(|r| r.line.lost)
            .sum()
    }

    /// perftest's bandwidth table per test and transport (the clients' figures, MB/sec),
    /// with the receiver's count after the columns when it counted.
    pub fn tables(&self) -> String {
        let mut s = String::new();
        for (test, t) in self.groups() {
            let rows = self.rows(test, t, Role::Client);
            if rows.is_empty() {
                continue;
            }
            let _ = writeln!(s, "--- {} -c {} (client) ---", test.program(), t.name());
            let _ = bench::bw::write_bw_header(&mut s, bench::bw::BwUnit::MBytes);
            for r in rows.iter().map(|r| &r.line) {
                let f = r.figures;
                let report = bench::bw::BwReport {
                    size: u64::from(r.bytes),
                    iterations: u64::from(r.iterations),
                    bw_peak: f.map_or(f64::NAN, |f| f.bw_peak_mbs),
                    bw_avg: f.map_or(f64::NAN, |f| f.bw_avg_mbs),
                    msg_rate_mpps: f.map_or(f64::NAN, |f| f.msg_rate_mpps),
                    total_cycles: 0,
                    opt_delta_cycles: 0,
                };
                let mut row = String::new();
                let _ = bench::bw::write_bw_row(&mut row, bench::bw::BwUnit::MBytes, &report);
                s.push_str(row.trim_end_matches('\n'));
                if let Some(got) = r.received {
                    let _ = write!(s, "   received {got}, lost {}", r.lost);
                }
                s.push('\n');
            }
        }
        s
    }

    /// `bandwidth.csv`: a header row ([`BW_CSV_COLUMNS`]) and one row per record.
    pub fn to_csv(&self, comments: &str) -> String {
        let mut s = comments.to_string();
        s.push_str(&BW_CSV_COLUMNS.join(","));
        s.push('\n');
        for rec in &self.records {
            let (r, f) = (&rec.line, rec.line.figures);
            let row = [
                rec.node.to_string(),
                r.role.name().to_string(),
                r.test.name().to_string(),
                r.transport.name().to_string(),
                r.bytes.to_string(),
                r.iterations.to_string(),
                opt3(f.map(|f| f.bw_peak_mbs)),
                opt3(f.map(|f| f.bw_avg_mbs)),
                opt3(f.map(|f| mbs_to_gbps(f.bw_avg_mbs))),
                f.map_or(String::new(), |f| format!("{:.6}", f.msg_rate_mpps)),
                format!("{:.3}", r.tsc_mhz),
                r.inline.to_string(),
                r.mtu.to_string(),
                r.tx_depth.to_string(),
                r.post_list.to_string(),
                r.cq_mod.to_string(),
                opt(r.received),
                opt(r.bytes_received),
                r.lost.to_string(),
            ];
            s.push_str(&row.join(","));
            s.push('\n');
        }
        s
    }

    /// `bandwidth.json`: `{"generator":"ibkern","results":[...],"provenance":...}`.
    pub fn to_json(&self, provenance: Option<&Provenance>) -> Value {
        let recs: Vec<Value> = self
            .records
            .iter()
            .map(|rec| {
                let (r, f) = (&rec.line, rec.line.figures);
                json!({
                    "node": rec.node, "role": r.role.name(), "test": r.test.name(),
                    "transport": r.transport.name(), "bytes": r.bytes, "iterations": r.iterations,
                    "bw_peak_mbs": f.map(|f| f.bw_peak_mbs), "bw_avg_mbs": f.map(|f| f.bw_avg_mbs),
                    "bw_avg_gbps": f.map(|f| mbs_to_gbps(f.bw_avg_mbs)),
                    "msg_rate_mpps": f.map(|f| f.msg_rate_mpps), "tsc_mhz": r.tsc_mhz,
                    "inline": r.inline, "mtu": r.mtu, "tx_depth": r.tx_depth,
                    "post_list": r.post_list, "cq_mod": r.cq_mod, "received": r.received,
                    "bytes_received": r.bytes_received, "lost": r.lost,
                })
            })
            .collect();
        let mut v = json!({ "generator": "ibkern", "results": recs });
        if let Some(p) = provenance {
            v["provenance"] = p.to_json();
        }
        v
    }

    /// `bandwidth.svg`: two charts over the same log2 size axis, BW average (MB/sec) above
    /// and MsgRate (Mpps) below, one line per test and transport (the clients' figures).
    pub fn to_svg(&self, provenance: Option<&Provenance>) -> String {
        let series: Vec<Line> = self
            .groups()
            .into_iter()
            .map(|(test, t)| {
                let pts = self
                    .rows(test, t, Role::Client)
                    .iter()
                    .filter_map(|r| {
                        let f = r.line.figures?;
                        Some((u64::from(r.line.bytes), f.bw_avg_mbs, f.msg_rate_mpps))
                    })
                    .filter(|&(b, bw, mr)| b > 0 && bw > 0.0 && mr > 0.0)
                    .filter(|&(_, bw, mr)| bw.is_finite() && mr.is_finite())
                    .collect();
                (format!("{} {}", test.name(), t.name()), pts)
            })
            .collect();
        let subtitle = provenance.map_or(Vec::new(), |p| p.subtitle());
        let metadata = provenance.and_then(|p| serde_json::to_string(&p.to_json()).ok());
        let title = provenance.map_or_else(|| TITLE.to_string(), |p| p.marked(TITLE));
        draw(&title, &series, &subtitle, metadata.as_deref()).unwrap_or_else(|e| {
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"800\" height=\"700\">\n<title>{}</title>\n<text x=\"20\" y=\"40\">drawing failed: {}</text>\n</svg>\n",
                crate::plot::escape(&title),
                crate::plot::escape(&e)
            )
        })
    }

    /// Writes `bandwidth.csv`, `bandwidth.json` and `bandwidth.svg` into `dir`, if there is
    /// any bandwidth record.
    pub fn write_files(
        &self,
        dir: &Path,
        provenance: Option<&Provenance>,
        comments: &str,
    ) -> anyhow::Result<Option<BwWritten>> {
        if self.is_empty() {
            return Ok(None);
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let w = BwWritten {
            csv: dir.join("bandwidth.csv"),
            json: dir.join("bandwidth.json"),
            svg: dir.join("bandwidth.svg"),
        };
        let json = serde_json::to_string_pretty(&self.to_json(provenance))?;
        for (path, text) in [
            (&w.csv, self.to_csv(comments)),
            (&w.json, json + "\n"),
            (&w.svg, self.to_svg(provenance)),
        ] {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(Some(w))
    }
}

/// One plotted line: its name and its points (bytes, BW average, MsgRate).
type Line = (String, Vec<(u64, f64, f64)>);

const TITLE: &str = "perftest bandwidth: BW average and MsgRate against message size";
const W: u32 = 800;
const PANEL: u32 = 330;

fn colour(i: usize) -> RGBColor {
    const C: [RGBColor; 6] = [
        RGBColor(0x1f, 0x77, 0xb4),
        RGBColor(0xd6, 0x27, 0x28),
        RGBColor(0xff, 0x7f, 0x0e),
        RGBColor(0x2c, 0xa0, 0x2c),
        RGBColor(0x94, 0x67, 0xbd),
        RGBColor(0x8c, 0x56, 0x4b),
    ];
    C[i % C.len()]
}

/// The two charts. Each series is drawn as a line with its points; the document gets a
/// `<title>` and, when given, the provenance as `<metadata id="provenance">`.
fn draw(
    title: &str,
    series: &[Line],
    subtitle: &[String],
    metadata: Option<&str>,
) -> Result<String, String> {
    let all = series.iter().flat_map(|s| &s.1);
    let (mut xmin, mut xmax) = (u64::MAX, 0u64);
    let (mut bmax, mut mmax) = (0f64, 0f64);
    for &(b, bw, mr) in all {
        xmin = xmin.min(b);
        xmax = xmax.max(b);
        bmax = bmax.max(bw);
        mmax = mmax.max(mr);
    }
    if xmin > xmax {
        (xmin, xmax, bmax, mmax) = (2, 4, 1.0, 1.0);
    }
    let (x0, x1) = (
        (xmin as f64).log2() - 0.3,
        (xmax as f64).log2().max((xmin as f64).log2() + 1.0) + 0.3,
    );
    let head = 50 + 14 * subtitle.len() as u32;
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (W, head + 2 * PANEL)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        root.draw(&Text::new(title, (20, 12), ("sans-serif", 18)))
            .map_err(|e| e.to_string())?;
        for (i, line) in subtitle.iter().enumerate() {
            root.draw(&Text::new(
                line.as_str(),
                (20, 36 + 14 * i as i32),
                ("sans-serif", 11),
            ))
            .map_err(|e| e.to_string())?;
        }
        let (_, body) = root.split_vertically(head);
        let (top, bottom) = body.split_vertically(PANEL);
        for (area, label, ymax, pick) in [
            (&top, "BW average [MB/sec]", bmax, 0usize),
            (&bottom, "MsgRate [Mpps]", mmax, 1),
        ] {
            let mut chart = ChartBuilder::on(area)
                .margin(10)
                .x_label_area_size(36)
                .y_label_area_size(64)
                .build_cartesian_2d(x0..x1, 0f64..ymax * 1.15)
                .map_err(|e| e.to_string())?;
            chart
                .configure_mesh()
                .x_desc("message size [bytes]")
                .y_desc(label)
                .x_label_formatter(&|v| crate::plot::size_label(2f64.powf(v.round()) as u64))
                .x_labels(((x1 - x0) as usize).clamp(2, 12))
                .draw()
                .map_err(|e| e.to_string())?;
            for (i, (name, pts)) in series.iter().enumerate() {
                let c = colour(i);
                let xy: Vec<(f64, f64)> = pts
                    .iter()
                    .map(|&(b, bw, mr)| ((b as f64).log2(), if pick == 0 { bw } else { mr }))
                    .collect();
                chart
                    .draw_series(LineSeries::new(xy.clone(), c.stroke_width(2)))
                    .map_err(|e| e.to_string())?
                    .label(name.as_str())
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], c));
                chart
                    .draw_series(xy.iter().map(|&p| Circle::new(p, 3, c.filled())))
                    .map_err(|e| e.to_string())?;
            }
            if !series.is_empty() {
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperLeft)
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .draw()
                    .map_err(|e| e.to_string())?;
            }
        }
        root.present().map_err(|e| e.to_string())?;
    }
    // The document's title and provenance, right after the root element's start tag.
    let at = s
        .find("<svg")
        .and_then(|i| s[i..].find('>').map(|j| i + j + 1));
    if let Some(at) = at {
        let mut extra = format!("\n<title>{}</title>", crate::plot::escape(title));
        if let Some(m) = metadata {
            let _ = write!(
                extra,
                "\n<metadata id=\"provenance\">{}</metadata>",
                crate::plot::escape(m)
            );
        }
        s.insert_str(at, &extra);
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT: &str = r#"{"test":"send_bw","transport":"UD","role":"client","bytes":1024,"iterations":200,"bw_peak_mbs":1234.500,"bw_avg_mbs":1000.250,"msg_rate_mpps":1.024000,"tsc_mhz":2000.000,"inline":false,"mtu":2048,"tx_depth":64,"post_list":1,"cq_mod":16,"received":197,"bytes_received":201728,"lost":3,"aborted":false}"#;

    fn line(test: &str, t: &str, bytes: u64, avg: f64, rate: f64) -> String {
        CLIENT
            .replace("\"send_bw\"", &format!("\"{test}\""))
            .replace("\"UD\"", &format!("\"{t}\""))
            .replace("\"bytes\":1024", &format!("\"bytes\":{bytes}"))
            .replace("1000.250", &format!("{avg:.3}"))
            .replace("1.024000", &format!("{rate:.6}"))
    }

    #[test]
    fn csv_json_tables_and_svg_carry_every_size() {
        let mut b = BwResults::default();
        for (i, (test, t, bytes, avg, rate)) in [
            ("send_bw", "UD", 64u64, 100.0, 1.6),
            ("send_bw", "UD", 1024, 900.0, 0.9),
            ("write_bw", "RC", 65536, 3000.0, 0.05),
        ]
        .into_iter()
        .enumerate()
        {
            let line =
                <BandwidthLine as bench::line::Parse>::parse(&line(test, t, bytes, avg, rate));
            b.records.push(BwRecord {
                node: i % 2,
                line: line.unwrap(),
            });
        }
        assert_eq!(
            b.groups(),
            vec![
                (Test::SendBw, Transport::Ud),
                (Test::WriteBw, Transport::Rc)
            ]
        );
        assert_eq!(b.total_lost(), 9);
        let csv = b.to_csv("# here\n");
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "# here");
        assert_eq!(lines[1], BW_CSV_COLUMNS.join(","));
        assert_eq!(lines.len(), 5);
        assert!(
            lines[2].starts_with("0,client,send_bw,UD,64,200,1234.500,100.000,"),
            "{}",
            lines[2]
        );
        let gbps = format!("{:.3}", mbs_to_gbps(3000.0));
        assert!(lines[4].contains(&gbps), "{}", lines[4]);
        let j = b.to_json(None);
        assert_eq!(j["results"].as_array().unwrap().len(), 3);
        assert_eq!(j["results"][2]["bw_avg_mbs"], 3000.0);
        assert_eq!(j["results"][0]["received"], 197);
        let t = b.tables();
        assert!(t.contains("--- ib_send_bw -c UD (client) ---"), "{t}");
        assert!(t.contains(bench::bw::formula::RESULT_HEADER_MBS));
        assert!(t.contains("received 197, lost 3"), "{t}");
        let svg = b.to_svg(None);
        let doc = roxmltree::Document::parse(&svg).expect("well-formed");
        let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
        for want in [
            "send_bw UD",
            "write_bw RC",
            "BW average [MB/sec]",
            "MsgRate [Mpps]",
        ] {
            assert!(texts.iter().any(|x| x.contains(want)), "{want}: {texts:?}");
        }
        // Three points in each of the two charts.
        let circles = doc
            .descendants()
            .filter(|n| n.tag_name().name() == "circle")
            .count();
        assert_eq!(circles, 6);
        let dir = std::env::temp_dir().join(format!("ibkern-bw-{}", std::process::id()));
        let w = b.write_files(&dir, None, "").unwrap().unwrap();
        assert!(w.csv.exists() && w.json.exists() && w.svg.exists());
        std::fs::remove_dir_all(&dir).unwrap();
        let none = BwResults::default().write_files(&dir, None, "").unwrap();
        assert_eq!(none, None, "nothing written without bandwidth records");
    }
}
