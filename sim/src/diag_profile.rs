//! A device profile file from a `mode=diag` report: the kernel's capability report (the
//! driver's `mlx4::report`) has one `cap <group>.<key> = <value>  # <where>; driver: ...` line
//! per profile field, in the file's encoding; [`profile_from_diag`] collects them and writes
//! the profile file [`ProfileFile::parse`] reads, each field citing where the report took it
//! from. `ibkern-diag-profile` (src/bin) is the command around it.
//!
//! Two fields are not copied from the report: `port.node_guid` is written 0 (the fabric then
//! gives every emulated HCA its own GUID; the card's GUID is in the field's source), and the
//! `query_func` fields, which a device in legacy EQ mode never reports (Linux does not issue
//! QUERY_FUNC then), are 0 as the built-in profiles of such devices have them.

use std::collections::BTreeMap;

use crate::profile::{DeviceProfile, ProfileFile, Sources};

/// The report's marker before each capability line (anything before it, such as a console
/// timestamp, is ignored).
const CAP: &str = "diag: cap ";
/// The report's first line names the kernel that wrote it.
const BANNER: &str = "diag: ibkern ";

/// One `cap` line: the value as written (a TOML value) and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Cap {
    value: String,
    from: String,
}

/// The value token at the start of `rest` (a TOML string with its escapes, or everything up
/// to the first space) and what follows it.
fn split_value(rest: &str) -> (&str, &str) {
    if let Some(body) = rest.strip_prefix('"') {
        let mut escaped = false;
        for (i, c) in body.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => return rest.split_at(i + 2),
                _ => {}
            }
        }
        (rest, "")
    } else {
        rest.split_at(rest.find(char::is_whitespace).unwrap_or(rest.len()))
    }
}

/// The `cap` lines of a report by `group.key`, and the kernel's banner if present.
fn collect(report: &str) -> Result<(BTreeMap<String, Cap>, Option<String>), String> {
    let mut caps = BTreeMap::new();
    let mut banner = None;
    let mut errors = Vec::new();
    for (n, line) in report.lines().enumerate() {
        if let Some(at) = line.find(BANNER) {
            banner.get_or_insert_with(|| line[at + "diag: ".len()..].trim().to_string());
        }
        let Some(at) = line.find(CAP) else { continue };
        let rest = &line[at + CAP.len()..];
        let Some((key, rest)) = rest.split_once(" = ") else {
            errors.push(format!("line {}: no ` = ` in {line:?}", n + 1));
            continue;
        };
        let (value, tail) = split_value(rest.trim_start());
        let from = tail
            .trim_start()
            .strip_prefix('#')
            .map(|c| c.split("; driver: ").next().unwrap_or("").trim())
            .unwrap_or("");
        let cap = Cap {
            value: value.to_string(),
            from: from.to_string(),
        };
        if let Some(old) = caps.insert(key.trim().to_string(), cap.clone()) {
            if old != cap {
                errors.push(format!("line {}: {key} given twice, differently", n + 1));
            }
        }
    }
    if errors.is_empty() {
        Ok((caps, banner))
    } else {
        Err(errors.join("; "))
    }
}

/// Every profile field as `(group, key)`, in the order the profile writer puts them.
fn fields() -> Vec<(String, String)> {
    let mut sources = Sources::new();
    sources.insert("s".into(), "s".into());
    let text = DeviceProfile::default().to_toml("", &sources, "s: s");
    let mut group = String::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(g) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            group = g.to_string();
        } else if let Some((key, _)) = line.split_once(" = { value = ") {
            if group != "sources" {
                out.push((group.clone(), key.to_string()));
            }
        }
    }
    out
}

fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The profile file `name` for the device a `mode=diag` report describes: its text, checked
/// by [`ProfileFile::parse`], and the loaded file. Fails naming every profile field the
/// report lacks (a query that failed) and every `cap` line that is not a profile field.
pub fn profile_from_diag(report: &str, name: &str) -> Result<(String, ProfileFile), String> {
    let (mut caps, banner) = collect(report)?;
    let get = |caps: &BTreeMap<String, Cap>, key: &str| caps.get(key).map(|c| c.value.clone());
    let board = get(&caps, "firmware.board_id")
        .and_then(|v| format!("v = {v}").parse::<toml::Table>().ok())
        .and_then(|t| t.get("v").and_then(|v| v.as_str()).map(str::to_string))
        .unwrap_or_default();
    let fw = ["fw_major", "fw_minor", "fw_subminor"]
        .map(|k| get(&caps, &format!("firmware.{k}")).unwrap_or_else(|| "?".into()))
        .join(".");
    let pci = ["vendor_id", "device_id"]
        .map(|k| {
            get(&caps, &format!("pci.{k}"))
                .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
                .map_or_else(|| "?".into(), |v| format!("{v:04x}"))
        })
        .join(":");
    let summary = format!("{board} (PCI {pci}) with firmware {fw}, from a mode=diag report");
    let mut sources = Sources::new();
    sources.insert(
        "diag".into(),
        format!(
            "a mode=diag capability report ({}): each field from the query its `cap` line names",
            banner.as_deref().unwrap_or("kernel not named")
        ),
    );
    let legacy_eqs = get(&caps, "dev_cap.num_sys_eqs").as_deref() == Some("0");
    let mut out = format!(
        "# Written by ibkern-diag-profile from a mode=diag report.\nname = {}\nsummary = {}\n\n[sources]\n",
        quote(name),
        quote(&summary)
    );
    for (k, v) in &sources {
        out.push_str(&format!("{k} = {}\n", quote(v)));
    }
    let mut missing = Vec::new();
    let mut group_now = String::new();
    for (group, key) in fields() {
        if group != group_now {
            out.push_str(&format!("\n[{group}]\n"));
            group_now = group.clone();
        }
        let here = format!("{group}.{key}");
        let (value, source) = match caps.remove(&here) {
            Some(c) if here == "port.node_guid" => (
                "0".to_string(),
                format!(
                    "(inferred): the card's node GUID is {}; 0 lets the fabric give each emulated HCA its own",
                    c.value
                ),
            ),
            Some(c) => {
                let from = if c.from.is_empty() {
                    "the report".to_string()
                } else {
                    c.from
                };
                (c.value, format!("diag: {from}"))
            }
            None if group == "query_func" && legacy_eqs => (
                "0".to_string(),
                "(inferred): not reported: in legacy EQ mode (num_sys_eqs 0) QUERY_FUNC is not issued".to_string(),
            ),
            None => {
                missing.push(here);
                continue;
            }
        };
        out.push_str(&format!(
            "{key} = {{ value = {value}, source = {} }}\n",
            quote(&source)
        ));
    }
    let mut errors = Vec::new();
    if !missing.is_empty() {
        errors.push(format!(
            "the report lacks {} (did a query fail? its `info` lines say)",
            missing.join(", ")
        ));
    }
    if !caps.is_empty() {
        errors.push(format!(
            "not profile fields: {}",
            caps.keys().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    let file = ProfileFile::parse(&out)?;
    Ok((out, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report as the driver writes it, from a profile (the driver's own round trip is
    /// drivers/mlx4/tests/profiles.rs).
    fn report_of(p: &DeviceProfile) -> String {
        let mut sources = Sources::new();
        sources.insert("s".into(), "s".into());
        let text = p.to_toml("", &sources, "s: s");
        let mut group = String::new();
        let mut out = String::from("diag: ibkern 0.1.0 commit abc mode=diag\n");
        for line in text.lines() {
            if let Some(g) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                group = g.to_string();
            } else if let Some((key, rest)) = line.split_once(" = { value = ") {
                if group == "sources" || (group == "query_func" && p.num_sys_eqs == 0) {
                    continue;
                }
                let value = rest.rsplit_once(", source = ").unwrap().0;
                out.push_str(&format!(
                    "[  1.0] diag: cap {group}.{key} = {value}  # QUERY_X 0x10; driver: chose # this\n"
                ));
            }
        }
        out
    }

    #[test]
    fn a_report_of_every_field_gives_the_profile_back() {
        for p in DeviceProfile::all() {
            let (text, file) = profile_from_diag(&report_of(&p), "mine").unwrap();
            let mut want = p.clone();
            want.name = "mine".into();
            want.node_guid = 0;
            assert_eq!(file.profile, want, "{text}");
            assert_eq!(file.citations["dev_cap.log_max_qps"], "diag: QUERY_X 0x10");
            assert!(file.sources["diag"].contains("ibkern 0.1.0 commit abc"));
        }
    }

    #[test]
    fn strings_keep_their_escapes_and_the_comment_is_not_part_of_the_value() {
        let (v, rest) = split_value(r##""a \"#\" b"  # from; driver: x"##);
        assert_eq!(v, r##""a \"#\" b""##);
        assert_eq!(rest, "  # from; driver: x");
        assert_eq!(split_value("0x15b3  # c"), ("0x15b3", "  # c"));
        assert_eq!(split_value("true"), ("true", ""));
    }

    #[test]
    fn a_missing_or_unknown_field_is_named() {
        let p = DeviceProfile::default();
        let report = report_of(&p);
        let without: String = report
            .lines()
            .filter(|l| !l.contains("dev_cap.log_max_qps ="))
            .map(|l| format!("{l}\n"))
            .collect();
        let e = profile_from_diag(&without, "x").unwrap_err();
        assert!(e.contains("lacks dev_cap.log_max_qps"), "{e}");
        let extra = format!("{report}diag: cap dev_cap.warp_drive = true  # QUERY_X\n");
        let e = profile_from_diag(&extra, "x").unwrap_err();
        assert!(e.contains("not profile fields: dev_cap.warp_drive"), "{e}");
        let twice = format!("{report}diag: cap dev_cap.log_max_qps = 1  # QUERY_X\n");
        let e = profile_from_diag(&twice, "x").unwrap_err();
        assert!(e.contains("given twice"), "{e}");
    }

    #[test]
    fn a_value_the_profile_refuses_is_reported() {
        let report = report_of(&DeviceProfile::default())
            .replace("dev_cap.num_ports = 1 ", "dev_cap.num_ports = 3 ");
        let e = profile_from_diag(&report, "x").unwrap_err();
        assert!(e.contains("one or two ports"), "{e}");
    }
}
