//! Saved serial consoles turned back into the lines the kernel printed.
//!
//! A console saved on a real node is not what the kernel wrote: Chameleon's web console
//! pasted into a file, an IPMI serial-over-LAN log or `script` output carry CR/LF line ends,
//! ANSI escape sequences (colours, cursor moves, screen redraws), a prefix on every line (a
//! timestamp, `[node1] `), lines broken at the terminal's width, and whole stretches repeated
//! when the console was redrawn. [`cleaned_lines`] undoes the first three; [`result_lines`]
//! finds every `ibkern-result` object, joining the pieces of a wrapped one; [`collect_saved`]
//! reads them into [`Results`], dropping exact repeats.

use crate::results::{
    attach_anatomy, parse_anatomy, parse_record, Anatomy, AnatomyKey, BadLine, Record, Results,
    ANATOMY_PREFIX, ORPHAN_ANATOMY, PREFIX,
};

/// How many physical lines one wrapped result line may span. A result object is about 450
/// characters; at 40 columns that is 12 lines.
pub const MAX_WRAPPED_LINES: usize = 24;

/// Removes ANSI escape sequences (CSI `ESC [ ... final`, OSC `ESC ] ... BEL|ESC \`, and the
/// two-character escapes) and the other control characters except tab. Backspace deletes the
/// character before it, as a terminal shows it.
pub fn strip_escapes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.next() {
                Some('[') => {
                    // Parameters and intermediates (0x20-0x3f), then one final byte (0x40-0x7e).
                    for d in chars.by_ref() {
                        if ('\u{40}'..='\u{7e}').contains(&d) {
                            break;
                        }
                    }
                }
                Some(']') | Some('P') | Some('_') | Some('^') => {
                    // String sequences end with BEL or ESC \.
                    while let Some(d) = chars.next() {
                        if d == '\u{7}' {
                            break;
                        }
                        if d == '\u{1b}' {
                            if chars.peek() == Some(&'\\') {
                                chars.next();
                            }
                            break;
                        }
                    }
                }
                Some('(') | Some(')') | Some('*') | Some('+') => {
                    chars.next(); // character set designation: one more character
                }
                _ => {} // a two-character escape (ESC 7, ESC =, ESC M, ...)
            },
            '\u{9b}' => {
                // The 8-bit CSI.
                for d in chars.by_ref() {
                    if ('\u{40}'..='\u{7e}').contains(&d) {
                        break;
                    }
                }
            }
            '\u{8}' => {
                out.pop();
            }
            '\t' | '\n' | '\r' => out.push(c),
            c if c.is_control() => {}
            '\u{feff}' => {} // a byte-order mark
            c => out.push(c),
        }
    }
    out
}

/// The text's lines with escape sequences removed: CR LF, LF CR, LF and a lone CR (a console
/// redrawing a line) all end a line. Trailing blanks are kept: a line broken at the
/// terminal's width just after a space is still as long as the width ([`unwrapped_lines`]).
pub fn cleaned_lines(text: &str) -> Vec<String> {
    let text = strip_escapes(text);
    let mut lines = Vec::new();
    let mut rest = text.as_str();
    while !rest.is_empty() {
        let end = rest.find(['\r', '\n']).unwrap_or(rest.len());
        lines.push(rest[..end].to_string());
        rest = &rest[end..];
        // One line end: \r\n, \n\r, \n or \r.
        if rest.starts_with("\r\n") || rest.starts_with("\n\r") {
            rest = &rest[2..];
        } else if !rest.is_empty() {
            rest = &rest[1..];
        }
    }
    lines
}

/// The terminal width a console was wrapped at, if it looks wrapped: the greatest line length
/// (in characters), when at least three lines have exactly that length.
pub fn wrap_width(lines: &[String]) -> Option<usize> {
    let max = lines.iter().map(|l| l.chars().count()).max()?;
    let full = lines.iter().filter(|l| l.chars().count() == max).count();
    (max >= 40 && full >= 3).then_some(max)
}

/// A continuation piece without the line prefix a logger put on it: the longest start of
/// `first` (ending at a space) that `piece` begins with, shaped as [`strip_prefix_shaped`]
/// matches; none if no such start matches.
fn strip_logger_prefix<'a>(piece: &'a str, first: &str) -> &'a str {
    let mut best = piece;
    for (at, c) in first.char_indices() {
        if c == ' ' {
            if let Some(rest) = strip_prefix_shaped(piece, &first[..=at]) {
                best = rest;
            }
        }
    }
    best
}

/// [`cleaned_lines`] with lines broken at the terminal's width joined again: a line exactly
/// [`wrap_width`] long continues on the next one (without a per-line logger prefix), up to
/// [`MAX_WRAPPED_LINES`] pieces. For the kernel's other long lines (configuration, PCIe link);
/// result lines are joined by [`result_lines`], which knows where a JSON object ends.
pub fn unwrapped_lines(text: &str) -> Vec<String> {
    let lines = cleaned_lines(text);
    let Some(width) = wrap_width(&lines) else {
        return lines;
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let first = &lines[i];
        let mut joined = first.clone();
        let mut last = first;
        i += 1;
        let mut pieces = 1;
        while last.chars().count() == width && i < lines.len() && pieces < MAX_WRAPPED_LINES {
            let piece = strip_logger_prefix(&lines[i], first);
            joined.push_str(piece);
            last = &lines[i];
            i += 1;
            pieces += 1;
        }
        out.push(joined);
    }
    out
}

/// Does `line` begin with a prefix shaped like `prefix` (the same characters, any digit where
/// `prefix` has a digit: timestamps differ from line to line)? Returns the rest of the line.
pub fn strip_prefix_shaped<'a>(line: &'a str, prefix: &str) -> Option<&'a str> {
    let mut rest = line.char_indices();
    for p in prefix.chars() {
        let (_, c) = rest.next()?;
        let same = c == p || (p.is_ascii_digit() && c.is_ascii_digit());
        if !same {
            return None;
        }
    }
    Some(rest.next().map_or("", |(at, _)| &line[at..]))
}

/// Where a JSON object that starts `text` ends (the byte after its closing brace), if it is
/// complete.
fn object_end(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => depth += 1,
            '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// One result object found in a console.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// 1-based number of the (cleaned) line where it starts.
    pub line: usize,
    /// The JSON object, or why none could be put together.
    pub json: Result<String, String>,
}

/// Every `ibkern-result` object in a saved console. A line may carry any prefix before
/// `ibkern-result `; an object broken over several lines (a terminal's width) is joined from
/// the following lines, each without its own copy of the first line's prefix (matched by
/// [`strip_prefix_shaped`]; blank lines are skipped). An object still open after
/// [`MAX_WRAPPED_LINES`] lines, or when the next `ibkern-result` starts, is reported as
/// truncated.
pub fn result_lines(text: &str) -> Vec<Found> {
    lines_after(text, PREFIX)
}

/// The `ibkern-anatomy` lines of a saved console, joined as [`result_lines`] joins result
/// lines.
pub fn anatomy_lines(text: &str) -> Vec<Found> {
    lines_after(text, ANATOMY_PREFIX)
}

fn lines_after(text: &str, wanted: &str) -> Vec<Found> {
    let lines = cleaned_lines(text);
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = &lines[i];
        let Some(at) = line.find(wanted) else {
            i += 1;
            continue;
        };
        let prefix = &line[..at];
        let mut json = line[at + wanted.len()..].trim().to_string();
        let mut next = i + 1;
        let mut end = object_end(&json);
        while end.is_none() && next < lines.len() && next - i < MAX_WRAPPED_LINES {
            let piece = &lines[next];
            if piece.trim().is_empty() {
                next += 1;
                continue;
            }
            let piece = strip_prefix_shaped(piece, prefix).unwrap_or(piece);
            if piece.contains(PREFIX) || piece.contains(ANATOMY_PREFIX) {
                break;
            }
            json.push_str(piece.trim());
            next += 1;
            end = object_end(&json);
        }
        let json = match end {
            Some(e) => Ok(json[..e].to_string()),
            None if json.is_empty() => Err("nothing after the prefix".to_string()),
            None => Err(format!(
                "the object never closes (cut off or broken beyond repair): {}",
                shorten(&json)
            )),
        };
        found.push(Found { line: i + 1, json });
        i = next;
    }
    found
}

fn shorten(s: &str) -> String {
    match s.char_indices().nth(60) {
        Some((at, _)) => format!("{}...", &s[..at]),
        None => s.to_string(),
    }
}

/// What [`collect_saved`] read besides the records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SavedReport {
    /// Per console: result objects found (including unreadable ones and repeats).
    pub found: Vec<usize>,
    /// Exact repeats dropped (a redrawn console), per console.
    pub repeats: Vec<usize>,
    /// A size reported twice by one console with different figures: (node, line of the one
    /// kept, what). The later one is kept (the console's last run).
    pub conflicts: Vec<(usize, usize, String)>,
}

/// Reads saved consoles (`consoles[i]` is node `i`) into [`Results`]: every object
/// [`result_lines`] finds is parsed; an exact repeat of an earlier record of the same console
/// is dropped; unreadable objects go to [`Results::bad_lines`].
pub fn collect_saved(consoles: &[&str]) -> (Results, SavedReport) {
    let mut results = Results::default();
    let mut report = SavedReport::default();
    for (node, text) in consoles.iter().enumerate() {
        let found = result_lines(text);
        report.found.push(found.len());
        let mut repeats = 0;
        let mut kept: Vec<(usize, Record)> = Vec::new();
        for f in found {
            // A bandwidth test's line (`"test":"send_bw"`, ...): its own record, a repeat of
            // the same line kept once.
            if let Ok(j) = &f.json {
                if crate::bw_results::is_bw_line(j) {
                    match crate::bw_results::parse_bw_record(j, node) {
                        Ok(rec) if results.bw.records.contains(&rec) => repeats += 1,
                        Ok(rec) => results.bw.records.push(rec),
                        Err(reason) => results.bad_lines.push(BadLine {
                            node,
                            line: f.line,
                            reason,
                        }),
                    }
                    continue;
                }
            }
            let parsed = f.json.and_then(|j| parse_record(&j, node));
            match parsed {
                Ok(rec) => {
                    let same_size = kept.iter().position(|(_, k)| {
                        (&k.test, &k.transport, &k.role, k.bytes)
                            == (&rec.test, &rec.transport, &rec.role, rec.bytes)
                    });
                    match same_size {
                        Some(p) if kept[p].1 == rec => repeats += 1,
                        Some(p) => {
                            report.conflicts.push((
                                node,
                                f.line,
                                format!(
                                    "{} {} {} {} B reported again with other figures (line {} \
                                     replaced)",
                                    rec.test, rec.transport, rec.role, rec.bytes, kept[p].0
                                ),
                            ));
                            kept.remove(p);
                            kept.push((f.line, rec));
                        }
                        None => kept.push((f.line, rec)),
                    }
                }
                Err(reason) => results.bad_lines.push(BadLine {
                    node,
                    line: f.line,
                    reason,
                }),
            }
        }
        let first = results.records.len();
        results.records.extend(kept.into_iter().map(|(_, r)| r));
        // The anatomy lines of this node join its records; a line repeated (a console
        // saved twice over) joins nothing new and is counted as a repeat.
        let mut seen: Vec<(AnatomyKey, Anatomy)> = Vec::new();
        for f in anatomy_lines(text) {
            let bad = |reason| BadLine {
                node,
                line: f.line,
                reason,
            };
            match f.json.and_then(|j| parse_anatomy(&j)) {
                Ok((k, a)) if seen.contains(&(k.clone(), a)) => repeats += 1,
                Ok((k, a)) => {
                    if attach_anatomy(&mut results.records[first..], node, &k, a) {
                        seen.push((k, a));
                    } else {
                        results.bad_lines.push(bad(ORPHAN_ANATOMY.to_string()));
                    }
                }
                Err(reason) => results.bad_lines.push(bad(reason)),
            }
        }
        report.repeats.push(repeats);
    }
    (results, report)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"ibkern-result {"test":"send_lat","transport":"UD","role":"client","bytes":2,"iterations":20,"samples":19,"t_min_us":830.827,"t_max_us":11545.592,"t_typical_us":1604.364,"t_avg_us":3017.171,"t_stdev_us":2591.895,"p99_us":11545.592,"p99_9_us":11545.592,"true_max_us":12012.909,"true_stdev_us":2592.397,"tsc_mhz":2596.145,"inline":true,"completion":"poll","mtu":2048,"lost":0,"retries":0,"aborted":false}"#;

    #[test]
    fn saved_bandwidth_lines_are_bandwidth_records() {
        let bw = r#"ibkern-result {"test":"send_bw","transport":"UD","role":"client","bytes":1024,"iterations":200,"bw_peak_mbs":1234.500,"bw_avg_mbs":1000.250,"msg_rate_mpps":1.024000,"tsc_mhz":2000.000,"inline":false,"mtu":2048,"tx_depth":64,"post_list":1,"cq_mod":16,"received":197,"bytes_received":201728,"lost":3,"aborted":false}"#;
        // Pasted twice (a scrolled-back console), with a latency line beside it.
        let text = format!("{bw}\r\n[node0] {bw}\r\n{LINE}\r\n");
        let (r, report) = collect_saved(&[&text]);
        assert_eq!(report.found, vec![3]);
        assert_eq!((r.records.len(), r.bw.records.len()), (1, 1));
        assert!(r.bad_lines.is_empty(), "{:?}", r.bad_lines);
        assert_eq!(r.bw.records[0].lost, 3);
    }

    #[test]
    fn escapes_and_controls_are_removed() {
        let s = "\u{1b}[1;32mmlx4:\u{1b}[0m port\u{1b}]0;title\u{7} 1\u{1b}(B ok\u{8}K\u{0}";
        assert_eq!(strip_escapes(s), "mlx4: port 1 oK");
        assert_eq!(strip_escapes("\u{feff}a\u{1b}]2;x\u{1b}\\b"), "ab");
    }

    #[test]
    fn every_line_end_ends_a_line() {
        let l = cleaned_lines("a\r\nb\n\rc\rd\ne   \r\n");
        assert_eq!(l, ["a", "b", "c", "d", "e   "]);
    }

    #[test]
    fn prefixes_match_by_shape() {
        let p = "[2026-11-25 08:30:01.123] ";
        assert_eq!(
            strip_prefix_shaped("[2026-11-25 08:30:02.987] rest", p),
            Some("rest")
        );
        assert_eq!(strip_prefix_shaped("[node1] x", "[node1] "), Some("x"));
        assert_eq!(strip_prefix_shaped("[nodeA] x", "[node1] "), None);
        assert_eq!(strip_prefix_shaped("[node1]x", "[node1] "), None);
        assert_eq!(strip_prefix_shaped("abc", ""), Some("abc"));
    }

    #[test]
    fn wrapped_lines_are_joined_with_or_without_prefixes() {
        let json = &LINE[PREFIX.len()..];
        for prefix in ["", "[node1] ", "Nov 25 08:30:01.123 node1: "] {
            // Wrapped at 80 columns; the terminal put the prefix only on the first piece, or
            // a logger on every piece.
            for every_piece in [false, true] {
                let first = format!("{prefix}{PREFIX}");
                let mut text = String::from("noise\r\n");
                let mut rest = json;
                let mut head = first.clone();
                while !rest.is_empty() {
                    let take = (80usize.saturating_sub(head.len())).clamp(1, rest.len());
                    text.push_str(&head);
                    text.push_str(&rest[..take]);
                    text.push_str("\r\n");
                    rest = &rest[take..];
                    head = if every_piece {
                        prefix.replace("01", "02")
                    } else {
                        String::new()
                    };
                }
                text.push_str("pingpong: PASS\r\n");
                let f = result_lines(&text);
                assert_eq!(f.len(), 1, "{text}");
                assert_eq!(f[0].line, 2);
                assert_eq!(f[0].json.as_deref(), Ok(json), "{text}");
            }
        }
    }

    #[test]
    fn long_lines_are_joined_again() {
        let config = "[    0.000000] INFO  boot: config: mode=pingpong role=client hca_irq=msix \
                      test=send_lat transport=UD size=all iters=20 timeout_ms=2000";
        let filler = "x".repeat(39);
        // Terminal wrap at 40 columns, no prefix on the pieces.
        let mut text = String::new();
        for l in [config, &filler, &filler, "short"] {
            let chars: Vec<char> = l.chars().collect();
            for piece in chars.chunks(40) {
                text.push_str(&piece.iter().collect::<String>());
                text.push_str("\r\n");
            }
        }
        let lines = unwrapped_lines(&text);
        assert_eq!(lines, [config, &filler, &filler, "short"]);
        // A logger's timestamp on every piece.
        let mut text = String::new();
        for (n, piece) in config.chars().collect::<Vec<_>>().chunks(50).enumerate() {
            text.push_str(&format!(
                "[08:00:0{n}] {}\n",
                piece.iter().collect::<String>()
            ));
        }
        for n in 0..3 {
            text.push_str(&format!("[08:01:0{n}] {}\n", "y".repeat(50)));
        }
        let lines = unwrapped_lines(&text);
        assert_eq!(lines[0], format!("[08:00:00] {config}"));
        // Not wrapped: nothing joined.
        assert_eq!(unwrapped_lines("a\nb\n"), ["a", "b"]);
    }

    #[test]
    fn a_cut_object_is_reported_and_the_next_one_still_read() {
        let cut = &LINE[..200];
        let text = format!("{cut}\n{LINE}\n");
        let f = result_lines(&text);
        assert_eq!(f.len(), 2);
        assert!(f[0].json.as_ref().unwrap_err().contains("never closes"));
        assert!(f[1].json.is_ok());
        let (r, _) = collect_saved(&[&text]);
        assert_eq!((r.records.len(), r.bad_lines.len()), (1, 1));
        assert_eq!(r.bad_lines[0].line, 1);
    }

    #[test]
    fn repeats_are_dropped_and_conflicts_reported() {
        let other = LINE.replace("\"t_min_us\":830.827", "\"t_min_us\":831.000");
        let text = format!("{LINE}\n{LINE}\nredraw\n{LINE}\n{other}\n");
        let (r, rep) = collect_saved(&[&text]);
        assert_eq!(r.records.len(), 1);
        assert_eq!(r.records[0].stats.unwrap().t_min, 831.0);
        assert_eq!(rep.repeats, [2]);
        assert_eq!(rep.found, [4]);
        assert_eq!(rep.conflicts.len(), 1);
        assert_eq!(rep.conflicts[0].1, 5);
    }

    #[test]
    fn saved_anatomy_lines_join_their_records_wrapped_or_repeated() {
        const ANATOMY: &str = r#"ibkern-anatomy {"test":"send_lat","transport":"UD","role":"client","completion":"poll","bytes":2,"samples":19,"post_med_us":211.2432,"post_avg_us":221.2408,"send_cqe_med_us":211.4235,"send_cqe_avg_us":221.7100,"rtt_med_us":417.8400,"rtt_avg_us":432.2600,"peer_med_us":214.2400,"peer_avg_us":223.3100,"wire_nic_med_us":101.8000,"wire_nic_avg_us":104.4750,"peer":"software","tsc_mhz":2596.1450}"#;
        // Wrapped at 80 columns behind a log prefix, then saved again whole.
        let prefix = "[node1] ";
        let wrapped: String = ANATOMY
            .as_bytes()
            .chunks(80)
            .map(|c| format!("{prefix}{}\n", std::str::from_utf8(c).unwrap()))
            .collect();
        let text = format!("{LINE}\n{wrapped}{ANATOMY}\n");
        let (r, rep) = collect_saved(&[&text]);
        assert!(r.bad_lines.is_empty(), "{:?}", r.bad_lines);
        assert_eq!(r.records.len(), 1);
        let a = r.records[0].anatomy.expect("joined");
        assert_eq!(a.rtt.unwrap().median, 417.84);
        assert_eq!(a.peer_by, "software");
        assert_eq!(rep.repeats, [1], "the second copy is a repeat");
        // Without its result line: reported, not dropped.
        let (r, _) = collect_saved(&[&format!("{ANATOMY}\n")]);
        assert_eq!(r.bad_lines.len(), 1);
        assert_eq!(r.bad_lines[0].reason, ORPHAN_ANATOMY);
    }
}
