//! Saved serial consoles turned back into the lines the kernel printed.
//!
//! A console saved on a real node is not what the kernel wrote: Chameleon's web console
//! pasted into a file, an IPMI serial-over-LAN log or `script` output carry CR/LF line ends,
//! ANSI escape sequences (colours, cursor moves, screen redraws), a prefix on every line (a
//! timestamp, `[node1] `), lines broken at the terminal's width, and whole stretches repeated
//! when the console was redrawn. [`cleaned_lines`] undoes the first three; [`found_lines`]
//! finds every line of `bench::line`'s kinds (`ibkern-result`, `ibkern-port`, ...), joining
//! the pieces of a wrapped one. Reading them into records, and dropping repeats, is
//! `crate::results`'.

use bench::line::Kind;

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

/// Whether a wrapped console was copied from a screen whose rows are padded with blanks to
/// the full width (a BMC's web console): nearly every line, blank ones included, is exactly
/// `width` long.
fn padded(lines: &[String], width: usize) -> bool {
    let full = lines.iter().filter(|l| l.chars().count() == width).count();
    lines.len() >= 3 && full * 10 >= lines.len() * 9
}

/// A padded row's content: the row without its padding, except that a row blank only in its
/// last column is kept whole (it was most likely broken just after a blank, which belongs to
/// the line).
fn unpad(row: &str, width: usize) -> &str {
    let kept = row.trim_end();
    if row.chars().count() == width && kept.chars().count() + 1 >= width {
        row
    } else {
        kept
    }
}

/// Where a kernel log line's timestamp (`[    1.086642] `) starts in `row`, if it has one.
fn kernel_stamp_at(row: &str) -> Option<usize> {
    let digits = |s: &str| s.len() - s.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    row.match_indices('[').map(|(at, _)| at).find(|&at| {
        let rest = row[at + 1..].trim_start_matches(' ');
        let int = digits(rest);
        let Some(frac) = rest[int..].strip_prefix('.').map(digits) else {
            return false;
        };
        int > 0 && frac > 0 && rest[int + 1 + frac..].starts_with("] ")
    })
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
/// [`MAX_WRAPPED_LINES`] pieces. In a console whose rows are padded with blanks to the width
/// ([`padded`]), a row continues only if at most its last column is blank (a line broken
/// just after a blank keeps that blank), and the padding is dropped. For the kernel's other long lines (configuration, PCIe link); line objects are
/// joined by [`found_lines`], which knows where a JSON object ends.
pub fn unwrapped_lines(text: &str) -> Vec<String> {
    let lines = cleaned_lines(text);
    let Some(width) = wrap_width(&lines) else {
        return lines;
    };
    let padded = padded(&lines, width);
    let continues = |l: &str| {
        l.chars().count() == width && (!padded || l.trim_end().chars().count() + 1 >= width)
    };
    let unpad = |l: &str| if padded { unpad(l, width) } else { l }.to_string();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let first = &lines[i];
        let mut joined = unpad(first);
        let mut last = first;
        i += 1;
        let mut pieces = 1;
        // A row with the kernel's timestamp where the first row has it (a logger's label
        // before both) is the kernel's next line, however long the first row is.
        let stamp = kernel_stamp_at(first);
        while continues(last) && i < lines.len() && pieces < MAX_WRAPPED_LINES {
            if stamp.is_some() && kernel_stamp_at(&lines[i]) == stamp {
                break;
            }
            let piece = strip_logger_prefix(&lines[i], first);
            joined.push_str(&unpad(piece));
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

/// One line object found in a console.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// 1-based number of the (cleaned) line where it starts.
    pub line: usize,
    /// Its kind (by its prefix).
    pub kind: Kind,
    /// The JSON object, or why none could be put together.
    pub json: Result<String, String>,
}

/// Every line of `bench::line`'s kinds in a console (raw or saved). A line may carry any
/// prefix before its kind's (`ibkern-result `, ...); an object broken over several lines (a
/// terminal's width) is joined from the following lines as they are (a blank at a break
/// is part of a string), each without its own copy of the first line's prefix (matched by
/// [`strip_prefix_shaped`]; blank lines are skipped; rows padded to the width lose the
/// padding, see [`unwrapped_lines`]). An object still open after [`MAX_WRAPPED_LINES`]
/// lines, or when the next line of any kind starts, is reported as truncated.
pub fn found_lines(text: &str) -> Vec<Found> {
    let lines = cleaned_lines(text);
    let width = wrap_width(&lines).filter(|&w| padded(&lines, w));
    let content = |l: &'_ str| -> String {
        match width {
            Some(w) => unpad(l, w).to_string(),
            None => l.to_string(),
        }
    };
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = content(&lines[i]);
        let Some((kind, at, rest)) = Kind::find(&line) else {
            i += 1;
            continue;
        };
        let prefix = &line[..at];
        let mut json = rest.trim_start().to_string();
        let mut next = i + 1;
        let mut end = object_end(&json);
        while end.is_none() && next < lines.len() && next - i < MAX_WRAPPED_LINES {
            let piece = content(&lines[next]);
            if piece.trim().is_empty() {
                next += 1;
                continue;
            }
            let piece = strip_prefix_shaped(&piece, prefix).unwrap_or(&piece);
            if Kind::find(piece).is_some() {
                break;
            }
            json.push_str(piece);
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
        found.push(Found {
            line: i + 1,
            kind,
            json,
        });
        i = next;
    }
    found
}

/// One boot's stretch of a saved console.
#[derive(Clone, Debug, PartialEq)]
pub struct Boot {
    /// The stretch's lines (cleaned), one per line.
    pub text: String,
    /// For each of its lines, the 1-based number of that line in the whole console.
    pub line_numbers: Vec<usize>,
}

impl Boot {
    /// The number in the whole console of the stretch's 1-based line `n`.
    pub fn console_line(&self, n: usize) -> usize {
        n.checked_sub(1)
            .and_then(|i| self.line_numbers.get(i))
            .copied()
            .unwrap_or(n)
    }
}

/// The marker of a kernel's first line (docs/kernel.md, "Boot flow").
const BANNER: &str = "boot: ibkern kernel ";
/// The marker of the configuration line the kernel prints next.
const CONFIG: &str = "boot: config: ";

/// A console split where kernels start: one stretch per boot, each starting at a line with
/// the kernel's banner (`boot: ibkern kernel ...`; lines before the first banner belong to the
/// first boot). A boot is known by its banner and the configuration line after it, so a
/// stretch a redrawn screen repeats (the same banner and configuration again) stays with the
/// boot it repeats; two consoles saved into one file (a server's and a client's: their
/// configurations differ in `role=`) become two boots. A console without a banner is one.
pub fn boots(text: &str) -> Vec<Boot> {
    let lines = cleaned_lines(text);
    let identity = |i: usize| -> Option<String> {
        let at = lines[i].find(BANNER)?;
        let config = lines[i + 1..(i + 6).min(lines.len())]
            .iter()
            .find_map(|l| l.find(CONFIG).map(|c| l[c..].trim_end().to_string()))
            .unwrap_or_default();
        Some(format!("{} | {config}", lines[i][at..].trim_end()))
    };
    let mut ids: Vec<String> = Vec::new();
    let mut boots: Vec<Boot> = Vec::new();
    let mut current: Option<usize> = None;
    let mut before_first: Vec<usize> = Vec::new();
    for i in 0..lines.len() {
        if let Some(id) = identity(i) {
            let k = match ids.iter().position(|x| *x == id) {
                Some(k) => k,
                None => {
                    ids.push(id);
                    boots.push(Boot {
                        text: String::new(),
                        line_numbers: std::mem::take(&mut before_first),
                    });
                    boots.len() - 1
                }
            };
            current = Some(k);
        }
        match current {
            Some(k) => boots[k].line_numbers.push(i),
            None => before_first.push(i),
        }
    }
    if boots.len() <= 1 {
        return vec![Boot {
            text: text.to_string(),
            line_numbers: (1..=lines.len()).collect(),
        }];
    }
    for b in &mut boots {
        let mut t = String::new();
        for &i in &b.line_numbers {
            t.push_str(&lines[i]);
            t.push('\n');
        }
        b.text = t;
        for n in &mut b.line_numbers {
            *n += 1;
        }
    }
    boots
}

fn shorten(s: &str) -> String {
    match s.char_indices().nth(60) {
        Some((at, _)) => format!("{}...", &s[..at]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bench::line::PREFIX;

    const LINE: &str = r#"ibkern-result {"test":"send_lat","transport":"UD","role":"client","bytes":2,"iterations":20,"samples":19,"t_min_us":830.827,"t_max_us":11545.592,"t_typical_us":1604.364,"t_avg_us":3017.171,"t_stdev_us":2591.895,"p99_us":11545.592,"p99_9_us":11545.592,"true_max_us":12012.909,"true_stdev_us":2592.397,"tsc_mhz":2596.145,"inline":true,"completion":"poll","mtu":2048,"lost":0,"retries":0,"aborted":false}"#;

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
                let f = found_lines(&text);
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
        // A line exactly twice the width, then the kernel's next line behind the same label.
        let long = format!(
            "[node0] [    0.000000] INFO  boot: config: {}",
            "k".repeat(37)
        );
        assert_eq!(long.len(), 80);
        let next = "[node0] [    0.000000] INFO  cpu: model QEMU TCG CPU version 2.5+";
        let text = format!("{long}\n{}\n{next}\n{}\n", "y".repeat(80), "z".repeat(80));
        assert_eq!(
            unwrapped_lines(&text),
            [
                format!("{long}{}", "y".repeat(80)),
                next.to_string(),
                "z".repeat(80)
            ]
        );
    }

    #[test]
    fn consoles_saved_into_one_file_split_at_their_boots_and_redraws_do_not() {
        let console = |role: &str| {
            format!(
                "[    0.0] INFO  boot: ibkern kernel 0.1.0 commit abc starting; mode Pingpong\n\
                 [    0.0] INFO  boot: config: mode=pingpong role={role}\n\
                 {role} line\n"
            )
        };
        let server = console("server");
        let client = console("client");
        // One console: one boot, the text as it was.
        let one = boots(&server);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].text, server);
        // Two concatenated, noise before the first: two boots, the noise with the first.
        let two = boots(&format!("saved by hand\n{server}{client}"));
        assert_eq!(two.len(), 2);
        assert!(two[0].text.starts_with("saved by hand\n"));
        assert!(two[0].text.contains("server line") && !two[0].text.contains("client line"));
        assert!(two[1].text.contains("role=client") && two[1].text.contains("client line"));
        assert_eq!(two[1].line_numbers, [5, 6, 7]);
        assert_eq!(two[1].console_line(3), 7);
        // A redrawn screen repeating the server's console: still one boot.
        let redrawn = boots(&format!("{server}more\n{server}"));
        assert_eq!(redrawn.len(), 1);
    }

    #[test]
    fn padded_rows_end_where_their_blanks_start() {
        let config = "[    0.000000] INFO  boot: config: mode=pingpong role=client hca_irq=msix \
                      test=send_lat transport=UD size=all iters=20 timeout_ms=2000";
        let link = "[    1.186490] INFO  hca: 00:03.0 15b3:1003 PCIe link: capable x8 gen3, \
                    running x8 gen3";
        let rows = [
            &config[..80],
            &config[80..],
            &link[..80],
            &link[80..],
            "[    0.000000] INFO  cpu: model QEMU TCG CPU version 2.5+",
            "",
            "pci 00:03.0 15b3:1003 class 028000 pin A line 11",
        ];
        let text: String = rows.iter().map(|r| format!("{r:<80}\r\n")).collect();
        assert_eq!(
            unwrapped_lines(&text),
            [
                config,
                link,
                "[    0.000000] INFO  cpu: model QEMU TCG CPU version 2.5+",
                "",
                "pci 00:03.0 15b3:1003 class 028000 pin A line 11",
            ]
        );
    }

    #[test]
    fn a_cut_object_is_reported_and_the_next_one_still_read() {
        let cut = &LINE[..200];
        let text = format!("{cut}\n{LINE}\n");
        let f = found_lines(&text);
        assert_eq!(f.len(), 2);
        assert!(f[0].json.as_ref().unwrap_err().contains("never closes"));
        assert!(f[1].json.is_ok());
        assert_eq!((f[0].line, f[1].line), (1, 2));
    }
}
