//! Differential check of two behaviour traces (`sim::trace`) taken on the same model: what a
//! driver under test does on the card that a reference driver (Linux's mlx4) never does, and
//! the reverse, with a reviewed list of deliberate departures (docs/runner.md, "cargo qemu
//! conformance").
//!
//! Comparison rules: a line is matched exactly, except `... log=N` lines, which match when
//! N lies within the range of values the reference recorded for the same field.
//!
//! Departures file: `#` comments and blank lines ignored; section headers `[deliberate]` and
//! `[to fix]`; every other line is `PATTERN | REASON`, where PATTERN matches an observation
//! line as a whole with `*` standing for any run of characters, and REASON is not empty.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// Section of the departures file an entry is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    Deliberate,
    ToFix,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Departure {
    pub pattern: String,
    pub reason: String,
    pub section: Section,
    /// Line number in the file (1-based).
    pub line: usize,
}

/// Parse a departures file; an error names the line.
pub fn parse_departures(text: &str) -> Result<Vec<Departure>, String> {
    let mut out = Vec::new();
    let mut section = None;
    for (i, raw) in text.lines().enumerate() {
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        match l {
            "[deliberate]" => {
                section = Some(Section::Deliberate);
                continue;
            }
            "[to fix]" => {
                section = Some(Section::ToFix);
                continue;
            }
            _ => {}
        }
        let Some(section) = section else {
            return Err(format!(
                "line {}: entry before a [deliberate] or [to fix] header",
                i + 1
            ));
        };
        let Some((pat, reason)) = l.split_once(" | ") else {
            return Err(format!("line {}: expected 'PATTERN | REASON'", i + 1));
        };
        let (pat, reason) = (pat.trim(), reason.trim());
        if pat.is_empty() || reason.is_empty() {
            return Err(format!(
                "line {}: both a pattern and a reason are needed",
                i + 1
            ));
        }
        out.push(Departure {
            pattern: pat.to_string(),
            reason: reason.to_string(),
            section,
            line: i + 1,
        });
    }
    Ok(out)
}

/// The union of several traces, in the trace file format (sorted, deduplicated).
pub fn union<'a>(traces: impl IntoIterator<Item = &'a str>) -> String {
    let mut all = BTreeSet::new();
    for t in traces {
        all.extend(lines(t));
    }
    let mut s = String::new();
    for l in all {
        s.push_str(l);
        s.push('\n');
    }
    s
}

/// Whole-string match with `*` for any run of characters.
pub fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for p in &parts[1..parts.len() - 1] {
        match rest.find(p) {
            Some(k) => rest = &rest[k + p.len()..],
            None => return false,
        }
    }
    true
}

/// An observation of the driver under test that the reference never made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub line: String,
    /// For a log field: the reference's range (`Linux log=a..b`).
    pub note: Option<String>,
    /// Index into the departures that cover it.
    pub covered_by: Option<usize>,
}

#[derive(Clone, Debug, Default)]
pub struct Report {
    /// (a) what the driver under test does and the reference never did.
    pub departures: Vec<Finding>,
    /// (b) what the reference does and the driver under test never did (for review).
    pub reference_only: Vec<String>,
    /// Departure entries that matched nothing.
    pub unused: Vec<usize>,
    pub entries: Vec<Departure>,
}

impl Report {
    /// Findings no departure entry covers.
    pub fn uncovered(&self) -> Vec<&Finding> {
        self.departures
            .iter()
            .filter(|f| f.covered_by.is_none())
            .collect()
    }

    /// Findings covered by a `[to fix]` entry.
    pub fn to_fix(&self) -> Vec<&Finding> {
        self.departures
            .iter()
            .filter(|f| {
                f.covered_by
                    .is_some_and(|i| self.entries[i].section == Section::ToFix)
            })
            .collect()
    }

    /// A readable report: uncovered first, then covered (with the entry's line), then the
    /// reference-only list and unused entries.
    pub fn render(&self, name: &str, reference: &str) -> String {
        let mut s = String::new();
        let line = |f: &Finding| match &f.note {
            Some(n) => format!("{}   ({n})", f.line),
            None => f.line.clone(),
        };
        let unc = self.uncovered();
        let _ = writeln!(
            s,
            "(a) {name} does, {reference} never does: {} ({} not in the departures file)",
            self.departures.len(),
            unc.len()
        );
        for f in &unc {
            let _ = writeln!(s, "  NEW   {}", line(f));
        }
        for f in self.departures.iter().filter(|f| f.covered_by.is_some()) {
            let e = &self.entries[f.covered_by.unwrap_or(0)];
            let tag = match e.section {
                Section::Deliberate => "ok   ",
                Section::ToFix => "FIX  ",
            };
            let _ = writeln!(s, "  {tag} {}   [departures line {}]", line(f), e.line);
        }
        let _ = writeln!(
            s,
            "(b) {reference} does, {name} never does: {}",
            self.reference_only.len()
        );
        for l in &self.reference_only {
            let _ = writeln!(s, "  {l}");
        }
        if !self.unused.is_empty() {
            let _ = writeln!(
                s,
                "departure entries that matched nothing: {}",
                self.unused.len()
            );
            for &i in &self.unused {
                let e = &self.entries[i];
                let _ = writeln!(s, "  line {}: {}", e.line, e.pattern);
            }
        }
        s
    }
}

/// Split `... log=N` into (key, N).
fn log_line(l: &str) -> Option<(&str, u64)> {
    let (k, v) = l.rsplit_once(" log=")?;
    Some((k, v.parse().ok()?))
}

fn lines(text: &str) -> BTreeSet<&str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// Compare the trace of the driver under test with the reference's, applying `entries`.
pub fn compare(test: &str, reference: &str, entries: &[Departure]) -> Report {
    let t = lines(test);
    let r = lines(reference);
    let mut r_logs: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for l in &r {
        if let Some((k, v)) = log_line(l) {
            let e = r_logs.entry(k).or_insert((v, v));
            e.0 = e.0.min(v);
            e.1 = e.1.max(v);
        }
    }
    let mut t_log_keys = BTreeSet::new();
    let mut used = vec![false; entries.len()];
    let mut departures = Vec::new();
    for l in &t {
        if r.contains(l) {
            if let Some((k, _)) = log_line(l) {
                t_log_keys.insert(k);
            }
            continue;
        }
        let note = if let Some((k, v)) = log_line(l) {
            t_log_keys.insert(k);
            match r_logs.get(k) {
                Some(&(lo, hi)) if (lo..=hi).contains(&v) => continue,
                Some(&(lo, hi)) => Some(format!("reference log={lo}..{hi}")),
                None => Some("reference never sets this field".to_string()),
            }
        } else {
            None
        };
        let covered_by = entries.iter().position(|e| glob(&e.pattern, l));
        if let Some(i) = covered_by {
            used[i] = true;
        }
        departures.push(Finding {
            line: l.to_string(),
            note,
            covered_by,
        });
    }
    let mut reference_only = Vec::new();
    let mut seen_keys = BTreeSet::new();
    for l in &r {
        if t.contains(l) {
            continue;
        }
        if let Some((k, _)) = log_line(l) {
            if !t_log_keys.contains(k) && seen_keys.insert(k) {
                let (lo, hi) = r_logs[k];
                reference_only.push(format!("{k} log={lo}..{hi}"));
            }
            continue;
        }
        reference_only.push(l.to_string());
    }
    let unused = (0..entries.len()).filter(|&i| !used[i]).collect();
    Report {
        departures,
        reference_only,
        unused,
        entries: entries.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_whole_lines_with_stars() {
        assert!(glob("cmd INIT_HCA *", "cmd INIT_HCA field=x value=1"));
        assert!(glob("*value=1", "cmd INIT_HCA field=x value=1"));
        assert!(glob(
            "cmd * field=*.bit3 value=1",
            "cmd SET_PORT field=flags.bit3 value=1"
        ));
        assert!(!glob("cmd INIT_HCA", "cmd INIT_HCA field=x"));
        assert!(!glob("a*b*c", "a-c-b"));
        assert!(glob("a*b*c", "a-b-c"));
        assert!(!glob("ab*ba", "aba"));
    }

    #[test]
    fn departures_file_needs_sections_patterns_and_reasons() {
        let ok = "# c\n[deliberate]\ncmd WRITE_MTT * | writes MTTs by command\n\n[to fix]\nwqe MLX * | no ICRC\n";
        let d = parse_departures(ok).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].section, Section::Deliberate);
        assert_eq!(d[1].section, Section::ToFix);
        assert_eq!(d[1].line, 6);
        assert!(parse_departures("cmd X | y\n")
            .unwrap_err()
            .contains("line 1"));
        assert!(parse_departures("[deliberate]\ncmd X\n").is_err());
        assert!(parse_departures("[deliberate]\ncmd X | \n").is_err());
    }

    #[test]
    fn compare_lists_both_directions_and_applies_ranges_and_entries() {
        let linux = "cmd A mode=poll\ncmd INIT_HCA field=log_num_qps log=17\ncmd INIT_HCA field=log_num_qps log=18\nctx EQC field=log_page_size log=0\nwqe UD SEND segs=ctrl,ud,data\n";
        let ours = "cmd A mode=poll\ncmd B mode=poll\ncmd INIT_HCA field=log_num_qps log=18\nctx EQC field=log_page_size log=6\nwqe UD SEND segs=ctrl,ud,inline\n";
        let entries = parse_departures(
            "[deliberate]\ncmd B * | ours\n[to fix]\nwqe * | segs\n[deliberate]\nnever * | stale\n",
        )
        .unwrap();
        let r = compare(ours, linux, &entries);
        let lines: Vec<&str> = r.departures.iter().map(|f| f.line.as_str()).collect();
        assert_eq!(
            lines,
            [
                "cmd B mode=poll",
                "ctx EQC field=log_page_size log=6",
                "wqe UD SEND segs=ctrl,ud,inline"
            ]
        );
        assert_eq!(r.departures[1].note.as_deref(), Some("reference log=0..0"));
        assert_eq!(r.uncovered().len(), 1);
        assert_eq!(r.to_fix().len(), 1);
        assert_eq!(r.reference_only, ["wqe UD SEND segs=ctrl,ud,data"]);
        assert_eq!(r.unused, [2]);
        let text = r.render("ibkern", "Linux");
        assert!(
            text.contains("NEW   ctx EQC field=log_page_size log=6"),
            "{text}"
        );
        assert!(text.contains("FIX   wqe UD SEND"), "{text}");
    }

    #[test]
    fn a_log_field_the_reference_never_sets_is_a_departure_and_the_reverse_is_listed() {
        let r = compare(
            "x field=a log=3\n",
            "y field=b log=1\ny field=b log=4\n",
            &[],
        );
        assert_eq!(r.departures.len(), 1);
        assert_eq!(
            r.departures[0].note.as_deref(),
            Some("reference never sets this field")
        );
        assert_eq!(r.reference_only, ["y field=b log=1..4"]);
    }
}
