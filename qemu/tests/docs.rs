//! Host test: the documents cannot drift from the command line. Every `cargo qemu ...`
//! command in README.md and docs/*.md (code blocks, and backticked spans in the prose) is
//! put through the runner's own parser (`cli::parse_args`); the ping-pong, node and compare
//! commands also through the configuration's checks, as the runner does before it boots.
//! A usage synopsis (`[-c UD|UC|RC]`, `--vfio BDF`, `...`) cannot parse as it stands: each
//! of its flags must then exist on its subcommand. And a flag named alone in backticks in
//! the prose (`--max-losses`) must exist on a subcommand the paragraph, or its section's
//! heading, names.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use ibkern_qemu::cli::{parse_args, Cli, Subcommands};

/// The workspace's README.md and every docs/*.md.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    docs.insert(0, root.join("README.md"));
    docs
}

/// Splits a command as a POSIX shell does for words (single and double quotes, backslash
/// escapes; `#` at a word's start begins a comment). No expansions.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for d in chars.by_ref() {
                    if d == '\'' {
                        break;
                    }
                    word.push(d);
                }
            }
            '"' => {
                in_word = true;
                while let Some(d) = chars.next() {
                    match d {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        d => word.push(d),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// A place in a document.
#[derive(Clone, Debug)]
struct At {
    file: String,
    line: usize,
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// Where a command stands in a document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A line of a code block: a whole command.
    Code,
    /// `cargo qemu ...` in the prose: a whole command, or one that stops after a flag or
    /// without a required argument (`cargo qemu mixed -c`, `cargo qemu node`).
    Inline,
    /// A subcommand and flags in the prose without `cargo qemu` (`hca --irq poll`,
    /// `compare --test write_bw -c UD`, often a refused example): its flags must exist.
    Mention,
}

/// What a document says about the command line.
#[derive(Default)]
struct Claims {
    /// `cargo qemu ...` commands: where, what kind, and the words after `cargo qemu`.
    commands: Vec<(At, Kind, String)>,
    /// A flag named alone in the prose, with the subcommands its paragraph and its section
    /// name.
    flags: Vec<(At, String, BTreeSet<String>)>,
}

/// The backticked spans of a text, with the offset of each.
fn spans(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut rest = text;
    let mut offset = 0;
    while let Some(open) = rest.find('`') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('`') else { break };
        out.push((offset + open + 1, &after[..close]));
        offset += open + 1 + close + 1;
        rest = &after[close + 1..];
    }
    out
}

/// The subcommands a `cargo qemu ...` text names (`cargo qemu hca|pingpong` names two), if
/// they are the runner's.
fn subcommands_of(text: &str, known: &BTreeSet<String>) -> Vec<String> {
    let Some(rest) = text.trim().strip_prefix("cargo qemu ") else {
        return Vec::new();
    };
    let first = rest.split_whitespace().next().unwrap_or("");
    first
        .split('|')
        .filter(|name| known.contains(*name))
        .map(String::from)
        .collect()
}

/// Does a line start a paragraph of its own (a heading, a list item)?
fn starts_block(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with('#')
        || t.starts_with("- ")
        || t.starts_with("* ")
        || t.split_once(". ")
            .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

/// The prose of a document as paragraphs (first line number, text, section) and the lines of
/// its code blocks (number, text, section); the headings cut the document into sections.
type Lines = Vec<(usize, String, usize)>;

fn paragraphs(text: &str) -> (Lines, Lines) {
    let mut paragraphs = Vec::new();
    let mut fenced_lines: Vec<(usize, String, usize)> = Vec::new();
    let mut fenced = false;
    let mut section = 0;
    let mut current: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let fence = line.trim_start().starts_with("```");
        if fence || fenced || line.trim().is_empty() || starts_block(line) {
            if let Some((at, p)) = current.take() {
                paragraphs.push((at, p, section));
            }
        }
        if fence {
            fenced = !fenced;
            continue;
        }
        if fenced {
            fenced_lines.push((n, line.to_string(), section));
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        if line.starts_with('#') {
            section += 1;
        }
        match &mut current {
            Some((_, p)) => {
                p.push('\n');
                p.push_str(line);
            }
            None => current = Some((n, line.to_string())),
        }
    }
    if let Some((at, p)) = current {
        paragraphs.push((at, p, section));
    }
    (paragraphs, fenced_lines)
}

fn claims(path: &Path, known: &BTreeSet<String>) -> Claims {
    let text = std::fs::read_to_string(path).unwrap();
    let file = path.file_name().unwrap().to_string_lossy().into_owned();
    let at = |line| At {
        file: file.clone(),
        line,
    };
    let mut claims = Claims::default();
    let (paragraphs, fenced) = paragraphs(&text);
    // The subcommands each section names anywhere, prose or code.
    let mut sections: Vec<BTreeSet<String>> = Vec::new();
    for (_, p, section) in &paragraphs {
        sections.resize(sections.len().max(section + 1), BTreeSet::new());
        for (_, span) in spans(p) {
            sections[*section].extend(subcommands_of(span, known));
        }
    }
    for (_, line, section) in &fenced {
        sections.resize(sections.len().max(section + 1), BTreeSet::new());
        sections[*section].extend(subcommands_of(line.trim().trim_start_matches("$ "), known));
    }
    for (first, p, section) in &paragraphs {
        let mut named = sections[*section].clone();
        for (_, span) in spans(p) {
            named.extend(subcommands_of(span, known));
        }
        for (offset, span) in spans(p) {
            let line = first + p[..offset].matches('\n').count();
            let span = span.replace('\n', " ");
            let sub_and_flag = span
                .split_once(' ')
                .is_some_and(|(sub, rest)| known.contains(sub) && rest.starts_with('-'));
            if let Some(command) = span.strip_prefix("cargo qemu ") {
                claims
                    .commands
                    .push((at(line), Kind::Inline, command.to_string()));
            } else if sub_and_flag {
                claims
                    .commands
                    .push((at(line), Kind::Mention, span.to_string()));
            } else if let Some(flag) = span.split([' ', '=']).next().filter(|f| {
                f.len() > 2
                    && f.starts_with("--")
                    && f[2..].chars().all(|c| c.is_ascii_lowercase() || c == '-')
            }) {
                claims
                    .flags
                    .push((at(line), flag.to_string(), named.clone()));
            }
        }
    }
    // Commands in code blocks, a trailing backslash continuing them.
    let mut continued: Option<(usize, String)> = None;
    for (n, line, _) in fenced {
        let stripped = line.trim().trim_start_matches("$ ");
        let (first, mut command) = match continued.take() {
            Some((first, so_far)) => (first, so_far + " " + stripped),
            None => match stripped.strip_prefix("cargo qemu ") {
                Some(rest) => (n, rest.to_string()),
                None => continue,
            },
        };
        if command.ends_with('\\') {
            command.pop();
            continued = Some((first, command));
        } else {
            claims.commands.push((at(first), Kind::Code, command));
        }
    }
    claims
}

/// Does a command read as a usage synopsis rather than a command to type: brackets,
/// alternatives, an ellipsis, `<placeholder>`, `$VARIABLE`, an elided value (`0x..`), or an
/// upper-case placeholder (`DIR`, `BDF`, `N`; not the transports' names)?
fn is_synopsis(words: &[String]) -> bool {
    words.iter().any(|w| {
        w.contains('[')
            || w.contains('|')
            || w.contains("...")
            || w.contains('<')
            || w.starts_with('$')
            || (w.contains("..") && !w.contains('/'))
            || (!w.is_empty()
                && !w.starts_with('-')
                && w.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                && !matches!(w.as_str(), "UD" | "UC" | "RC"))
    })
}

/// The long and short flags (`--timeout`, `-c`) of each subcommand, aliases included.
fn flags_of(cli: &clap::Command) -> std::collections::BTreeMap<String, BTreeSet<String>> {
    let mut all = std::collections::BTreeMap::new();
    for sub in cli.get_subcommands() {
        let mut flags: BTreeSet<String> = ["--help", "-h"].map(String::from).into();
        for arg in sub.get_arguments() {
            flags.extend(
                arg.get_long_and_visible_aliases()
                    .into_iter()
                    .flatten()
                    .map(|l| format!("--{l}")),
            );
            flags.extend(
                arg.get_short_and_visible_aliases()
                    .into_iter()
                    .flatten()
                    .map(|s| format!("-{s}")),
            );
        }
        let mut names = vec![sub.get_name().to_string()];
        names.extend(sub.get_all_aliases().map(String::from));
        for name in names {
            all.insert(name, flags.clone());
        }
    }
    all
}

/// The flags a synopsis uses: words starting with `-` once brackets and alternatives are
/// taken apart (`[-c|--connection UD]` gives `-c` and `--connection`).
fn synopsis_flags(words: &[String]) -> Vec<String> {
    words
        .iter()
        .flat_map(|w| {
            w.split(['[', ']', '|', '(', ')'])
                .map(|p| {
                    p.split('=')
                        .next()
                        .unwrap_or("")
                        .trim_end_matches("...")
                        .to_string()
                })
                .collect::<Vec<_>>()
        })
        .take_while(|p| p != "--")
        .filter(|p| p.starts_with('-') && p.len() > 1 && !p.starts_with("---"))
        .collect()
}

/// What the runner checks of a parsed command before it boots anything.
fn configuration_check(cli: Cli) -> Result<(), String> {
    let checked = match cli.command {
        Subcommands::Pingpong(a) => ibkern_qemu::pingpong::checked_transports(&a)
            .and_then(|t| ibkern_qemu::pingpong::plan_configs(&a, &t))
            .map(drop),
        Subcommands::Node(a) => a
            .transport()
            .and_then(|t| a.config(t))
            .and_then(|c| ibkern_qemu::kernel_config::check_config(&c))
            .map(drop),
        Subcommands::Compare(a) => ibkern_qemu::compare::cases(&a).map(drop),
        _ => Ok(()),
    };
    checked.map_err(|e| format!("{e:#}"))
}

/// Flags of other syntaxes that the documents name in prose beside a runner command: whose
/// they are.
const OTHER_FLAGS: &[(&str, &str)] = &[
    ("--tftp-unique-root", "dnsmasq"),
    ("--isr", "a plan's run= line (ibconfig::Run)"),
];

#[test]
fn every_documented_command_parses_and_every_flag_exists() {
    let cli = Cli::command();
    let flags = flags_of(&cli);
    let known: BTreeSet<String> = flags.keys().cloned().collect();
    let mut problems = Vec::new();
    let (mut commands, mut mentions, mut prose) = (0, 0, 0);
    for doc in documents() {
        let claims = claims(&doc, &known);
        for (at, kind, command) in claims.commands {
            let words = shell_words(&command);
            let Some(first) = words.first() else {
                continue;
            };
            // `cargo qemu <subcommand> --help`: the runner in general.
            if first.starts_with('<') {
                continue;
            }
            let subs: Vec<&str> = first.split('|').collect();
            if first != "--help" && !subs.iter().all(|s| known.contains(*s)) {
                problems.push(format!("{at}: `cargo qemu {command}`: no such subcommand"));
                continue;
            }
            let parsed = (kind != Kind::Mention && !is_synopsis(&words)).then(|| {
                parse_args(std::iter::once("cargo qemu".to_string()).chain(words.clone()))
            });
            match parsed {
                Some(Ok(cli)) => {
                    commands += 1;
                    if let Err(e) = configuration_check(cli) {
                        problems.push(format!("{at}: `cargo qemu {command}`: refused: {e}"));
                    }
                    continue;
                }
                Some(Err(e)) if e.kind() == clap::error::ErrorKind::DisplayHelp => continue,
                // A mention in the prose (`cargo qemu node`, `cargo qemu mixed -c`) need
                // not be a whole command: its flags must exist.
                Some(Err(e))
                    if !(kind == Kind::Inline
                        && (e.kind() == clap::error::ErrorKind::MissingRequiredArgument
                            || words.last().is_some_and(|w| w.starts_with('-')))) =>
                {
                    let e = e.to_string();
                    let first = e.lines().next().unwrap_or("");
                    problems.push(format!("{at}: `cargo qemu {command}`: {first}"));
                    continue;
                }
                _ => {}
            }
            mentions += 1;
            for flag in synopsis_flags(&words[1..]) {
                let on = subs.iter().filter(|s| !flags[**s].contains(&flag));
                for sub in on {
                    problems.push(format!("{at}: `cargo qemu {command}`: {sub} has no {flag}"));
                }
            }
        }
        for (at, flag, named) in claims.flags {
            if named.is_empty() || OTHER_FLAGS.iter().any(|(f, _)| *f == flag) {
                continue;
            }
            prose += 1;
            if !named.iter().any(|sub| flags[sub].contains(&flag)) {
                problems.push(format!(
                    "{at}: `{flag}` is named beside {}, which have no such flag",
                    named.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    eprintln!(
        "{commands} commands parsed and checked, {mentions} synopses and mentions and {prose} \
         flags in prose checked"
    );
    assert!(
        commands > 50 && mentions > 10 && prose > 50,
        "the documents were not read: {commands} commands, {mentions} mentions, {prose} flags"
    );
    assert!(
        problems.is_empty(),
        "{} drifts:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn shell_words_split_as_a_shell_does() {
    assert_eq!(
        shell_words(r#"pingpong --set 'run=ib_send_lat -c UD' -s 64 "a b" c\ d # note"#),
        [
            "pingpong",
            "--set",
            "run=ib_send_lat -c UD",
            "-s",
            "64",
            "a b",
            "c d"
        ]
    );
}

#[test]
fn a_wrong_flag_or_value_in_a_document_is_found() {
    let cli = Cli::command();
    let flags = flags_of(&cli);
    let known: BTreeSet<String> = flags.keys().cloned().collect();
    let dir = std::env::temp_dir().join(format!("ibkern-docs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let doc = dir.join("bad.md");
    std::fs::write(
        &doc,
        "## `cargo qemu pingpong`\n\nRun `cargo qemu pingpong --no-such-flag` or set \
         `--max-loss` (sic).\n\n```sh\ncargo qemu pingpong -c UD \\\n  -n 3\n\
         cargo qemu hca [--irq msix|intx] [--bogus N]\n```\n",
    )
    .unwrap();
    let c = claims(&doc, &known);
    std::fs::remove_dir_all(&dir).unwrap();
    let commands: Vec<&str> = c.commands.iter().map(|(_, _, s)| s.as_str()).collect();
    assert_eq!(c.commands[0].1, Kind::Inline);
    assert_eq!(c.commands[2].1, Kind::Code);
    assert_eq!(
        commands,
        [
            "pingpong",
            "pingpong --no-such-flag",
            "pingpong -c UD  -n 3",
            "hca [--irq msix|intx] [--bogus N]",
        ]
    );
    // The continued line parses but -n 3 is below the iterations' bound; the inline one has
    // a flag the parser refuses; the synopsis names one that does not exist.
    assert!(parse_args(["cargo qemu", "pingpong", "-c", "UD", "-n", "3"]).is_err());
    assert!(parse_args(["cargo qemu", "pingpong", "--no-such-flag"]).is_err());
    let synopsis = shell_words(commands[3]);
    assert!(is_synopsis(&synopsis));
    let missing: Vec<String> = synopsis_flags(&synopsis[1..])
        .into_iter()
        .filter(|f| !flags["hca"].contains(f))
        .collect();
    assert_eq!(missing, ["--bogus"]);
    assert_eq!(c.flags.len(), 1);
    let (_, flag, named) = &c.flags[0];
    assert_eq!(flag, "--max-loss");
    assert!(named.contains("pingpong"));
    assert!(!flags["pingpong"].contains(flag));
    assert!(flags["pingpong"].contains("--max-losses"));
}
