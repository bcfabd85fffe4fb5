//! Progress of the long runs (`pingpong`, `compare`, `linux`, `mixed`) on standard error.
//!
//! A command announces its runs (a boot pair per transport, Linux's perftest pair...) with
//! the number of sizes each measures ([`start`]), then each run as it begins ([`begin_run`]).
//! [`crate::hca`] passes every console line through [`console_line`]: a size is done when a
//! node prints its result for it (ibkern's `ibkern-result` line or a perftest row; a run's
//! count is that of the node furthest on, as both nodes print every size).
//!
//! On a terminal (standard error) the progress is an `indicatif` bar redrawn in place; else
//! (CI, a log file) one plain line per finished size, from [`plain_line`]. The consoles are
//! streamed to standard output as before when it is not a terminal or with `--verbose`; on a
//! terminal without `--verbose` they are only in the run directory's log files.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One run of a command: a name (`UD`, `Linux`, ...) and how many sizes it measures (0: not
/// known, the display shows the elapsed time only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunPlan {
    pub name: String,
    pub sizes: usize,
}

/// Where a command is.
#[derive(Clone, Debug, PartialEq)]
pub struct Status {
    /// The current run's name, its index (from 0) and the number of runs.
    pub run: String,
    pub run_index: usize,
    pub runs: usize,
    /// Sizes done in this run, of how many (0: not known).
    pub done_in_run: usize,
    pub sizes_in_run: usize,
    /// The size just finished, bytes.
    pub last_bytes: Option<u64>,
    /// Sizes done over all runs, of how many.
    pub done: usize,
    pub total: usize,
    pub elapsed: Duration,
}

impl Status {
    /// The time left at the rate so far (sizes done per second over the whole command,
    /// boots included), when something is done and something is left.
    pub fn remaining(&self) -> Option<Duration> {
        if self.done == 0 || self.done >= self.total {
            return None;
        }
        let per = self.elapsed.as_secs_f64() / self.done as f64;
        Some(Duration::from_secs_f64(
            per * (self.total - self.done) as f64,
        ))
    }
}

fn secs(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// The status without elapsed time: `UD (run 1 of 2): 4096 B done, size 12 of 23`.
pub fn status_text(s: &Status) -> String {
    let mut t = format!("{} (run {} of {})", s.run, s.run_index + 1, s.runs.max(1));
    if let Some(b) = s.last_bytes {
        t.push_str(&format!(": {b} B done"));
        if s.sizes_in_run > 0 {
            t.push_str(&format!(
                ", size {} of {}",
                s.done_in_run,
                s.sizes_in_run.max(s.done_in_run)
            ));
        }
    } else {
        t.push_str(": booting");
    }
    if let Some(r) = s.remaining() {
        t.push_str(&format!(", about {} left", secs(r)));
    }
    t
}

/// The line printed per finished size when standard error is not a terminal:
/// `progress: UD (run 1 of 2): 4096 B done, size 12 of 23, 35 of 46 overall, 41s elapsed,
/// about 25s left`.
pub fn plain_line(s: &Status) -> String {
    let mut t = format!(
        "progress: {} (run {} of {})",
        s.run,
        s.run_index + 1,
        s.runs.max(1)
    );
    if let Some(b) = s.last_bytes {
        t.push_str(&format!(": {b} B done"));
        if s.sizes_in_run > 0 {
            t.push_str(&format!(
                ", size {} of {}",
                s.done_in_run,
                s.sizes_in_run.max(s.done_in_run)
            ));
        }
        if s.total > 0 {
            t.push_str(&format!(", {} of {} overall", s.done, s.total.max(s.done)));
        }
    } else {
        t.push_str(": started");
    }
    t.push_str(&format!(", {} elapsed", secs(s.elapsed)));
    if let Some(r) = s.remaining() {
        t.push_str(&format!(", about {} left", secs(r)));
    }
    t
}

/// The size a console line reports as measured: ibkern's `ibkern-result {json}` or a
/// perftest latency row (`bytes iterations` and seven figures).
pub fn result_bytes(line: &str) -> Option<(Kind, u64)> {
    if let Some((_, _, bytes, _, _)) = crate::pingpong::result_line(line) {
        return Some((Kind::Result, bytes));
    }
    crate::compare::parse_row(line).map(|(b, _, _)| (Kind::Row, b))
}

/// Which kind of line reported a size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Result,
    Row,
}

/// The sizes `ibkern`'s pingpong (and perftest with the same flags) measures over a
/// transport: `-a` (`all`) or one size, the UD sweep ending at the path MTU (the emulated
/// port's active 4096 used as 2048 unless `--set mtu=` says otherwise).
pub fn planned_sizes(transport: &str, all: bool, size: Option<u32>, set: &[String]) -> usize {
    let Some(t) = ibconfig::Transport::from_name(transport) else {
        return 0;
    };
    let mut c = ibconfig::PingPongConfig::new(t, ibconfig::Role::Client);
    if let Some(s) = size {
        c.sizes = ibconfig::Sizes::Single(s);
    }
    if all {
        c.sizes = ibconfig::Sizes::All;
    }
    for kv in set {
        if let Some(("mtu", v)) = kv.split_once('=') {
            let _ = c.apply("mtu", v);
        }
    }
    c.size_list(c.effective_mtu(verbs::Mtu::Mtu4096)).count()
}

struct State {
    plan: Vec<RunPlan>,
    current: Option<usize>,
    /// Per node of the current run: (ibkern result lines, perftest rows).
    counts: BTreeMap<String, (usize, usize)>,
    done_before: usize,
    last_bytes: Option<u64>,
    started: Instant,
    stream_consoles: bool,
    plain: bool,
    bar: Option<indicatif::ProgressBar>,
}

impl State {
    fn done_in_run(&self) -> usize {
        self.counts
            .values()
            .map(|&(r, w)| r.max(w))
            .max()
            .unwrap_or(0)
    }

    fn status(&self) -> Status {
        let i = self.current.unwrap_or(0);
        let plan = self.plan.get(i);
        Status {
            run: plan.map_or_else(String::new, |p| p.name.clone()),
            run_index: i,
            runs: self.plan.len(),
            done_in_run: self.done_in_run(),
            sizes_in_run: plan.map_or(0, |p| p.sizes),
            last_bytes: self.last_bytes,
            done: self.done_before + self.done_in_run(),
            total: self.plan.iter().map(|p| p.sizes).sum(),
            elapsed: self.started.elapsed(),
        }
    }

    fn show(&self) {
        let s = self.status();
        if let Some(bar) = &self.bar {
            bar.set_length(s.total.max(s.done) as u64);
            bar.set_position(s.done as u64);
            bar.set_message(status_text(&s));
        } else if self.plain {
            eprintln!("{}", plain_line(&s));
        }
    }
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut Option<State>) -> R) -> R {
    let mut guard = STATE.lock().unwrap_or_else(|p| p.into_inner());
    f(&mut guard)
}

/// Starts the display for a command's runs. `verbose`: stream the consoles to standard
/// output even on a terminal.
pub fn start(plan: Vec<RunPlan>, verbose: bool) {
    let stdout_tty = std::io::stdout().is_terminal();
    let stderr_tty = std::io::stderr().is_terminal();
    let total: usize = plan.iter().map(|p| p.sizes).sum();
    let bar = stderr_tty.then(|| {
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(total as u64),
            indicatif::ProgressDrawTarget::stderr(),
        );
        let template = if total > 0 {
            "{spinner} {elapsed_precise} [{bar:24}] {pos}/{len} sizes  {wide_msg}"
        } else {
            "{spinner} {elapsed_precise} {wide_msg}"
        };
        if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.enable_steady_tick(Duration::from_millis(250));
        bar
    });
    with(|s| {
        *s = Some(State {
            plan,
            current: None,
            counts: BTreeMap::new(),
            done_before: 0,
            last_bytes: None,
            started: Instant::now(),
            stream_consoles: verbose || !stdout_tty,
            plain: !stderr_tty,
            bar,
        });
    });
}

/// The next run begins (its name as in the plan; a name not planned is added).
pub fn begin_run(name: &str) {
    with(|s| {
        let Some(st) = s.as_mut() else { return };
        st.done_before += st.done_in_run();
        st.counts.clear();
        st.last_bytes = None;
        let from = st.current.map_or(0, |c| c + 1);
        let i = match st.plan.iter().skip(from).position(|p| p.name == name) {
            Some(i) => from + i,
            None => {
                st.plan.push(RunPlan {
                    name: name.to_string(),
                    sizes: 0,
                });
                st.plan.len() - 1
            }
        };
        st.current = Some(i);
        st.show();
    });
}

/// A runner message (`ibkern-qemu: ...` on standard error) that does not tear the bar.
pub fn say(msg: &str) {
    with(|s| match s.as_ref().and_then(|st| st.bar.as_ref()) {
        Some(bar) => bar.suspend(|| eprintln!("ibkern-qemu: {msg}")),
        None => eprintln!("ibkern-qemu: {msg}"),
    });
}

/// One console line of `node` (already recorded in its console): counts a finished size,
/// and prints `text` (the line as streamed, perhaps prefixed with the node's name) on
/// standard output unless the consoles are not streamed.
pub fn console_line(node: &str, line: &str, text: &str) {
    with(|s| {
        let Some(st) = s.as_mut() else {
            print_line(text);
            return;
        };
        if st.stream_consoles {
            match &st.bar {
                Some(bar) => bar.suspend(|| print_line(text)),
                None => print_line(text),
            }
        }
        let Some((kind, bytes)) = result_bytes(line) else {
            return;
        };
        let before = st.done_in_run();
        let c = st.counts.entry(node.to_string()).or_default();
        match kind {
            Kind::Result => c.0 += 1,
            Kind::Row => c.1 += 1,
        }
        if st.done_in_run() > before {
            st.last_bytes = Some(bytes);
            st.show();
        }
    });
}

fn print_line(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// Ends the display (the bar is cleared; the plain lines stay).
pub fn finish() {
    with(|s| {
        if let Some(bar) = s.take().and_then(|st| st.bar) {
            bar.finish_and_clear();
        }
    });
}

/// Ends the display when dropped (also on an error return).
pub struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        finish();
    }
}

/// [`start`], ended when the returned guard is dropped.
pub fn start_guarded(plan: Vec<RunPlan>, verbose: bool) -> Guard {
    start(plan, verbose);
    Guard
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(done_in_run: usize, done: usize, last: Option<u64>) -> Status {
        Status {
            run: "UD".into(),
            run_index: 0,
            runs: 2,
            done_in_run,
            sizes_in_run: 11,
            last_bytes: last,
            done,
            total: 34,
            elapsed: Duration::from_secs(40),
        }
    }

    #[test]
    fn plain_lines_say_run_size_elapsed_and_time_left() {
        assert_eq!(
            plain_line(&status(4, 4, Some(16))),
            "progress: UD (run 1 of 2): 16 B done, size 4 of 11, 4 of 34 overall, 40s elapsed, \
             about 5m00s left"
        );
        assert_eq!(
            plain_line(&status(0, 0, None)),
            "progress: UD (run 1 of 2): started, 40s elapsed"
        );
        // The last size: nothing left, no estimate.
        let mut last = status(11, 34, Some(2048));
        last.run_index = 1;
        assert_eq!(
            plain_line(&last),
            "progress: UD (run 2 of 2): 2048 B done, size 11 of 11, 34 of 34 overall, 40s elapsed"
        );
        assert_eq!(
            status_text(&status(4, 4, Some(16))),
            "UD (run 1 of 2): 16 B done, size 4 of 11, about 5m00s left"
        );
        // More sizes than planned (a plan that guessed low) never reads "5 of 4".
        let mut over = status(12, 35, Some(4096));
        over.total = 34;
        assert!(plain_line(&over).contains("size 12 of 12, 35 of 35 overall"));
    }

    #[test]
    fn result_lines_of_both_stacks_are_recognised() {
        let ib = crate::results::test_lines::latency(4096, 1000);
        assert_eq!(result_bytes(&ib), Some((Kind::Result, 4096)));
        let row = " 2       1000          1.51           9.87         1.60              1.72             0.30            3.10                 9.87";
        assert_eq!(result_bytes(row), Some((Kind::Row, 2)));
        assert_eq!(result_bytes(" #bytes #iterations t_min"), None);
        assert_eq!(result_bytes("mlx4: port 1: ACTIVE lid 0x2"), None);
    }

    #[test]
    fn planned_sizes_follow_the_benchmark_config() {
        // UD: 2 B to the 2048 B path MTU; UC to 8 MiB; one size; mtu=4096 by --set.
        assert_eq!(planned_sizes("UD", true, None, &[]), 11);
        assert_eq!(planned_sizes("UC", true, None, &[]), 23);
        assert_eq!(planned_sizes("RC", false, Some(64), &[]), 1);
        assert_eq!(planned_sizes("UD", true, None, &["mtu=4096".into()]), 12);
        assert_eq!(planned_sizes("XX", true, None, &[]), 0);
    }

    #[test]
    fn a_run_counts_the_node_furthest_on_and_runs_add_up() {
        // The state machine without a terminal: plain output, no bar.
        start(
            vec![
                RunPlan {
                    name: "UD".into(),
                    sizes: 2,
                },
                RunPlan {
                    name: "UC".into(),
                    sizes: 3,
                },
            ],
            false,
        );
        begin_run("UD");
        let res = |b: u32| crate::results::test_lines::latency(b, 5);
        let row = |b: u64| format!(" {b} 5 1.0 2.0 1.5 1.6 0.1 2.0 2.0");
        for (node, line) in [
            ("server", res(2)),
            ("client", row(2)),
            ("client", res(2)),
            ("client", row(4)),
            ("client", res(4)),
            ("server", res(4)),
        ] {
            console_line(node, &line, "");
        }
        let s = with(|s| s.as_ref().unwrap().status());
        assert_eq!((s.done_in_run, s.done, s.last_bytes), (2, 2, Some(4)));
        begin_run("UC");
        console_line("client", &res(2), "");
        let s = with(|s| s.as_ref().unwrap().status());
        assert_eq!(
            (s.run.as_str(), s.run_index, s.done, s.total),
            ("UC", 1, 3, 5)
        );
        finish();
        assert!(with(|s| s.is_none()));
    }
}
