//! Progress of the long runs (`pingpong`, `compare`, `linux`, `mixed`) on standard error.
//!
//! A command announces its runs (a boot pair per transport, Linux's perftest pair...) with
//! the sizes each measures and their iterations ([`start`]), then each run as it begins
//! ([`begin_run`]). [`crate::hca`] passes every console line through [`console_line`]: a size
//! is done when a node prints its result for it (ibkern's `ibkern-result` line or a perftest
//! row; a run's count is that of the node furthest on, as both nodes print every size).
//!
//! The time left is estimated from the work left, not the number of sizes: a size of `n`
//! iterations of `b` bytes is taken to cost `n * (a + c * b)`, `a` and `c` read from the
//! sizes measured so far ([`Estimator`]), so the 4 and 8 MiB sizes that end a UC sweep count
//! for what they take; each run's start (boots, rendezvous) is measured apart. Until the
//! per-byte cost shows in the sizes measured it cannot be told, and the display says
//! "at least" instead of "about".
//!
//! On a terminal (standard error) the progress is an `indicatif` bar redrawn in place; else
//! (CI, a log file) one plain line per finished size, from [`plain_line`]. The consoles are
//! streamed to standard output as before when it is not a terminal or with `--verbose`; on a
//! terminal without `--verbose` they are only in the run directory's log files.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One size a run will measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedSize {
    pub bytes: u64,
    pub iterations: u64,
}

/// One run of a command: a name (`UD`, `Linux`, ...) and the sizes it measures (none: not
/// known, the display shows the elapsed time only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunPlan {
    pub name: String,
    pub sizes: Vec<PlannedSize>,
}

/// Estimates the time left from the sizes measured so far: per iteration `a + c * bytes`
/// seconds, plus for each run not yet started the mean time a run took from its start to its
/// first size beyond that size's own cost. `a` is the median per-iteration time of the three
/// smallest sizes measured; `c` the median per-byte excess over `a` of the three largest,
/// counted only where that excess is at least `a` (below it, it is within the noise of an
/// emulator's times, and extrapolating it to sizes a thousand times larger would be a
/// guess): until then `c` is 0 and the estimate a lower bound.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Estimator {
    /// (bytes, seconds per iteration) of each size measured after a run's first.
    per_iteration: Vec<(f64, f64)>,
    /// (seconds, bytes, iterations) from a run's start to the end of its first size.
    starts: Vec<(f64, f64, f64)>,
}

impl Estimator {
    /// A size finished `secs` after the previous one (or, `first`, after its run started).
    pub fn size_done(&mut self, size: PlannedSize, secs: f64, first: bool) {
        let n = size.iterations.max(1) as f64;
        if first {
            self.starts.push((secs, size.bytes as f64, n));
        } else {
            self.per_iteration.push((size.bytes as f64, secs / n));
        }
    }

    /// Seconds per iteration, `a + c * bytes`, and the largest size measured; `None` before
    /// a size beyond a run's first.
    fn fit(&self) -> Option<((f64, f64), f64)> {
        let mut p = self.per_iteration.clone();
        if p.is_empty() {
            return None;
        }
        p.sort_by(|x, y| x.0.total_cmp(&y.0));
        let median = |mut v: Vec<f64>| -> f64 {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let a = median(p.iter().take(3).map(|q| q.1).collect());
        let excess: Vec<f64> = p
            .iter()
            .rev()
            .take(3)
            .filter(|q| q.0 > 0.0 && q.1 - a >= a)
            .map(|q| (q.1 - a) / q.0)
            .collect();
        let c = if excess.is_empty() {
            0.0
        } else {
            median(excess)
        };
        Some(((a, c), p[p.len() - 1].0))
    }

    /// Seconds `size` should take.
    fn cost(fit: (f64, f64), size: &PlannedSize) -> f64 {
        size.iterations.max(1) as f64 * (fit.0 + fit.1 * size.bytes as f64)
    }

    /// The time left: the sizes of run `run` after its first `done`, the one under way less
    /// the `since` seconds it has run, and every later run with its start. `None` until the
    /// work can be estimated (a size beyond a run's first done) or when nothing is left.
    pub fn remaining(
        &self,
        plan: &[RunPlan],
        run: usize,
        done: usize,
        since: f64,
    ) -> Option<Remaining> {
        let (fit, largest) = self.fit()?;
        let start = if self.starts.is_empty() {
            0.0
        } else {
            self.starts
                .iter()
                .map(|&(secs, bytes, n)| {
                    let first = PlannedSize {
                        bytes: bytes as u64,
                        iterations: n as u64,
                    };
                    (secs - Self::cost(fit, &first)).max(0.0)
                })
                .sum::<f64>()
                / self.starts.len() as f64
        };
        let current = plan.get(run)?;
        let mut left = 0.0;
        let mut rest = current.sizes.iter().skip(done);
        if let Some(next) = rest.next() {
            left += (Self::cost(fit, next) - since).max(0.0);
        }
        left += rest.map(|s| Self::cost(fit, s)).sum::<f64>();
        for later in plan.iter().skip(run + 1) {
            if !later.sizes.is_empty() {
                left += start + later.sizes.iter().map(|s| Self::cost(fit, s)).sum::<f64>();
            }
        }
        // Sizes larger than any measured, at a per-byte cost not yet seen: at least this.
        let larger = current
            .sizes
            .iter()
            .skip(done)
            .chain(plan.iter().skip(run + 1).flat_map(|r| &r.sizes))
            .any(|s| s.bytes as f64 > largest);
        (left > 0.0).then(|| Remaining {
            time: Duration::from_secs_f64(left),
            at_least: fit.1 == 0.0 && larger,
        })
    }
}

/// An estimate of the time left.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Remaining {
    pub time: Duration,
    /// A lower bound: larger sizes are left whose per-byte cost has not shown yet.
    pub at_least: bool,
}

impl Remaining {
    /// "about 1m20s left" or "at least 1m20s left".
    pub fn text(&self) -> String {
        let how = if self.at_least { "at least" } else { "about" };
        format!("{how} {} left", secs(self.time))
    }
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
    /// The time left ([`Estimator`]), when it can be told and something is left.
    pub remaining: Option<Remaining>,
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
    if let Some(r) = s.remaining {
        t.push_str(&format!(", {}", r.text()));
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
    if let Some(r) = s.remaining {
        t.push_str(&format!(", {}", r.text()));
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

/// The sizes a ping-pong configuration measures and their iterations: `-a` or one size, the
/// UD sweep ending at the path MTU (the emulated port's active 4096 used as 2048 unless the
/// configuration's `mtu` says otherwise).
pub fn planned(c: &ibconfig::PingPongConfig) -> Vec<PlannedSize> {
    c.size_list(c.effective_mtu(verbs::Mtu::Mtu4096))
        .map(|bytes| PlannedSize {
            bytes: u64::from(bytes),
            iterations: u64::from(c.iterations),
        })
        .collect()
}

/// [`planned`] for a transport given by name, `-a` (`all`) or one size, `iterations` each,
/// and `--set mtu=` among `set`.
pub fn planned_sizes(
    transport: &str,
    all: bool,
    size: Option<u32>,
    iterations: u32,
    set: &[String],
) -> Vec<PlannedSize> {
    let Some(t) = ibconfig::Transport::from_name(transport) else {
        return Vec::new();
    };
    let mut c = ibconfig::PingPongConfig::new(t, ibconfig::Role::Client);
    if let Some(s) = size {
        c.sizes = ibconfig::Sizes::Single(s);
    }
    if all {
        c.sizes = ibconfig::Sizes::All;
    }
    c.iterations = iterations;
    for kv in set {
        if let Some(("mtu", v)) = kv.split_once('=') {
            let _ = c.apply("mtu", v);
        }
    }
    planned(&c)
}

struct State {
    plan: Vec<RunPlan>,
    current: Option<usize>,
    /// Per node of the current run: (ibkern result lines, perftest rows).
    counts: BTreeMap<String, (usize, usize)>,
    done_before: usize,
    last_bytes: Option<u64>,
    started: Instant,
    /// When the current run began or its last size ended (since `started`).
    last_at: Duration,
    estimator: Estimator,
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
        let elapsed = self.started.elapsed();
        let since = elapsed.saturating_sub(self.last_at).as_secs_f64();
        Status {
            run: plan.map_or_else(String::new, |p| p.name.clone()),
            run_index: i,
            runs: self.plan.len(),
            done_in_run: self.done_in_run(),
            sizes_in_run: plan.map_or(0, |p| p.sizes.len()),
            last_bytes: self.last_bytes,
            done: self.done_before + self.done_in_run(),
            total: self.plan.iter().map(|p| p.sizes.len()).sum(),
            elapsed,
            remaining: self.current.and_then(|r| {
                self.estimator
                    .remaining(&self.plan, r, self.done_in_run(), since)
            }),
        }
    }

    /// The current run's `done`-th size (from 1) finished now.
    fn size_done(&mut self, done: usize, bytes: u64) {
        let now = self.started.elapsed();
        let secs = now.saturating_sub(self.last_at).as_secs_f64();
        self.last_at = now;
        let planned = self
            .current
            .and_then(|r| self.plan.get(r))
            .and_then(|p| p.sizes.get(done - 1).copied());
        // A size the plan did not foresee: its bytes, and the iterations of the run's last
        // planned size.
        let size = planned.unwrap_or(PlannedSize {
            bytes,
            iterations: self
                .current
                .and_then(|r| self.plan.get(r))
                .and_then(|p| p.sizes.last())
                .map_or(1, |s| s.iterations),
        });
        self.estimator.size_done(size, secs, done == 1);
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
    let total: usize = plan.iter().map(|p| p.sizes.len()).sum();
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
            last_at: Duration::ZERO,
            estimator: Estimator::default(),
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
        st.last_at = st.started.elapsed();
        let from = st.current.map_or(0, |c| c + 1);
        let i = match st.plan.iter().skip(from).position(|p| p.name == name) {
            Some(i) => from + i,
            None => {
                st.plan.push(RunPlan {
                    name: name.to_string(),
                    sizes: Vec::new(),
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
            st.size_done(st.done_in_run(), bytes);
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
            remaining: (done < 34).then_some(Remaining {
                time: Duration::from_secs(300),
                at_least: false,
            }),
        }
    }

    #[test]
    fn plain_lines_say_run_size_elapsed_and_time_left() {
        assert_eq!(
            plain_line(&status(4, 4, Some(16))),
            "progress: UD (run 1 of 2): 16 B done, size 4 of 11, 4 of 34 overall, 40s elapsed, \
             about 5m00s left"
        );
        let mut started = status(0, 0, None);
        started.remaining = None;
        assert_eq!(
            plain_line(&started),
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
        // Larger sizes left whose per-byte cost has not shown yet: a lower bound.
        let mut low = status(4, 4, Some(16));
        low.remaining = low.remaining.map(|r| Remaining {
            at_least: true,
            ..r
        });
        assert!(plain_line(&low).ends_with(", 40s elapsed, at least 5m00s left"));
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
        let n = |t: &str, all: bool, size: Option<u32>, set: &[String]| {
            planned_sizes(t, all, size, 20, set).len()
        };
        assert_eq!(n("UD", true, None, &[]), 11);
        assert_eq!(n("UC", true, None, &[]), 23);
        assert_eq!(n("RC", false, Some(64), &[]), 1);
        assert_eq!(n("UD", true, None, &["mtu=4096".into()]), 12);
        assert_eq!(n("XX", true, None, &[]), 0);
        let uc = planned_sizes("UC", true, None, 20, &[]);
        assert_eq!(
            (uc[0], uc[22]),
            (
                PlannedSize {
                    bytes: 2,
                    iterations: 20
                },
                PlannedSize {
                    bytes: 8 << 20,
                    iterations: 20
                }
            )
        );
    }

    #[test]
    fn a_run_counts_the_node_furthest_on_and_runs_add_up() {
        // The state machine without a terminal: plain output, no bar.
        start(
            vec![
                RunPlan {
                    name: "UD".into(),
                    sizes: planned_sizes("UD", false, Some(2), 5, &[])
                        .into_iter()
                        .chain(planned_sizes("UD", false, Some(4), 5, &[]))
                        .collect(),
                },
                RunPlan {
                    name: "UC".into(),
                    sizes: planned_sizes("UC", true, None, 5, &[])[..3].to_vec(),
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

    /// A UC sweep's sizes as an emulator runs them: 2 ms per iteration plus 3 ns per byte
    /// (the 8 MiB size takes 27 ms an iteration), each size's time off by up to 15 % either
    /// way, 1000 iterations a size, after a 30 s start.
    fn uc_sweep() -> (Vec<RunPlan>, Vec<f64>) {
        let sizes = planned_sizes("UC", true, None, 1000, &[]);
        let secs: Vec<f64> = sizes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let noise = 1.0 + 0.15 * (1.7 * i as f64).sin();
                s.iterations as f64 * (2e-3 + 3e-9 * s.bytes as f64) * noise
            })
            .collect();
        let plan = vec![RunPlan {
            name: "UC".into(),
            sizes,
        }];
        (plan, secs)
    }

    #[test]
    fn the_time_left_follows_the_work_left_not_the_sizes_left() {
        let (plan, secs) = uc_sweep();
        let mut e = Estimator::default();
        assert_eq!(e.remaining(&plan, 0, 0, 0.0), None, "nothing measured yet");
        let mut told = 0;
        for (i, size) in plan[0].sizes.iter().enumerate() {
            let start = if i == 0 { 30.0 } else { 0.0 };
            e.size_done(*size, start + secs[i], i == 0);
            let done = i + 1;
            let truth: f64 = secs[done..].iter().sum();
            let Some(left) = e.remaining(&plan, 0, done, 0.0) else {
                assert!(
                    done == 1 || done == plan[0].sizes.len(),
                    "after size {done}"
                );
                continue;
            };
            let got = left.time.as_secs_f64();
            if left.at_least {
                // Before the per-byte cost shows: a lower bound, and said to be one.
                assert!(got <= truth * 1.05, "after size {done}: {got} vs {truth}");
            } else {
                assert!(
                    (got - truth).abs() <= 0.3 * truth,
                    "after size {done}: {got} vs {truth}"
                );
                told += 1;
            }
        }
        assert!(told >= 3, "the per-byte cost showed from 1 MiB on");
        // With 21 of 23 sizes done the 4 and 8 MiB sizes are left: about 38 s, not the
        // 2 s a rate in sizes per second gives (elapsed / 21 * 2).
        let mut e = Estimator::default();
        for (i, size) in plan[0].sizes.iter().take(21).enumerate() {
            e.size_done(*size, secs[i] + if i == 0 { 30.0 } else { 0.0 }, i == 0);
        }
        let left = e.remaining(&plan, 0, 21, 0.0).unwrap();
        let got = left.time.as_secs_f64();
        let truth = secs[21] + secs[22];
        let elapsed: f64 = 30.0 + secs[..21].iter().sum::<f64>();
        let by_sizes = elapsed / 21.0 * 2.0;
        assert!(
            !left.at_least && (got - truth).abs() <= 0.3 * truth,
            "{got} vs {truth}"
        );
        assert!(
            by_sizes < truth / 3.0,
            "the old estimate: {by_sizes} vs {truth}"
        );
        assert!(left.text().starts_with("about "), "{}", left.text());
        // Part of the 4 MiB size under way is taken off.
        let partly = e.remaining(&plan, 0, 21, 5.0).unwrap().time.as_secs_f64();
        assert!((got - partly - 5.0).abs() < 1e-6);
    }

    #[test]
    fn a_later_run_costs_its_sizes_and_a_start() {
        let (mut plan, secs) = uc_sweep();
        plan.push(plan[0].clone());
        let mut e = Estimator::default();
        for (i, size) in plan[0].sizes.iter().enumerate() {
            e.size_done(*size, secs[i] + if i == 0 { 30.0 } else { 0.0 }, i == 0);
        }
        // After the first run: the second one, its 30 s start included.
        let got = e.remaining(&plan, 0, 23, 0.0).unwrap().time.as_secs_f64();
        let truth = 30.0 + secs.iter().sum::<f64>();
        assert!((got - truth).abs() <= 0.3 * truth, "{got} vs {truth}");
    }
}
