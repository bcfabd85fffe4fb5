//! Where the time goes (`anatomy=on`; docs/benchmarks.md): per size, the client's cycles
//! spent posting, its post to local send completion, the round trip, and the server's own
//! turnaround, which the server measures and reports in its next BarrierAck or DoneAck
//! (rendezvous version 5). The client prints the table after perftest's, with one
//! `ibkern-anatomy` line per size.
//!
//! Per iteration, on the measured path, the anatomy only stores TSC readings into buffers
//! allocated before the run: the client one after the post returns (the post ends with its
//! BlueFlame or doorbell store) and one when its send completion is polled; the server one
//! when it sees the request and one after its reply's post returns. With `anatomy=off`
//! nothing is read or stored (one predictable branch per point).

use core::fmt;

use super::*;
use crate::line::{AnatomyLine, Record};

/// Median and average of one component, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MedAvg {
    pub median: f64,
    pub average: f64,
}

/// The server's part of a round trip.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PeerPart {
    /// Measured by the server and reported in its BarrierAck/DoneAck.
    Software(MedAvg),
    /// read_lat and atomic_lat: the server's HCA answers, no software runs.
    Hca,
    /// The report did not arrive (its answer was lost, or the size was aborted).
    Missing,
}

/// The anatomy of one size on the client.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AnatomyRow {
    pub index: u32,
    pub bytes: u32,
    /// Iterations whose post and send completion were both timed.
    pub samples: usize,
    /// From entering the post to its return after the BlueFlame/doorbell store.
    pub post: Option<MedAvg>,
    /// From entering the post to polling its send completion.
    pub send_cqe: Option<MedAvg>,
    /// The full round trip, stamp to stamp, over the same iterations as the parts (every
    /// clean one: perftest's figures leave out its largest samples, so they may differ).
    pub rtt: Option<MedAvg>,
    pub peer: PeerPart,
}

impl AnatomyRow {
    /// The wire and both NICs, one way: `(RTT - peer turnaround) / 2` (read_lat and
    /// atomic_lat: `RTT / 2`, the responder's HCA inside it).
    pub fn wire_nic(&self) -> Option<MedAvg> {
        let r = self.rtt?;
        let p = match self.peer {
            PeerPart::Software(p) => p,
            PeerPart::Hca => MedAvg {
                median: 0.0,
                average: 0.0,
            },
            PeerPart::Missing => return None,
        };
        Some(MedAvg {
            median: (r.median - p.median) / 2.0,
            average: (r.average - p.average) / 2.0,
        })
    }
}

/// The anatomy's buffers and results of one node.
#[derive(Default)]
pub(super) struct Anatomy {
    /// Client: `anatomy=on`; server: the client's Hello asked for it.
    pub on: bool,
    /// Per iteration: the TSC after the post returned.
    pub posted: Vec<u64>,
    /// Per iteration: client, the TSC when the send completion was polled; server, when
    /// the request was seen.
    pub event: Vec<u64>,
    /// Client: one row per size reported, in order.
    pub rows: Vec<AnatomyRow>,
    /// Server: the turnaround of the last size it measured, sent in every BarrierAck and
    /// DoneAck until the next size's replaces it.
    pub pending: Option<crate::rendezvous::Turnaround>,
}

impl Anatomy {
    /// Turns the anatomy on with buffers for `iterations` and (client) `sizes` rows; off
    /// (with nothing measured) when there is no memory for them.
    pub fn enable(&mut self, iterations: u32, sizes: usize) -> bool {
        let n = iterations as usize;
        if self.posted.len() == n && self.event.len() == n && self.rows.capacity() >= sizes {
            self.on = true;
            return true;
        }
        let ok = self.posted.try_reserve_exact(n).is_ok()
            && self.event.try_reserve_exact(n).is_ok()
            && self.rows.try_reserve_exact(sizes).is_ok();
        if ok {
            self.posted.resize(n, 0);
            self.event.resize(n, 0);
        }
        self.on = ok;
        ok
    }

    /// Before each size: nothing timed yet.
    pub fn clear(&mut self) {
        self.posted.iter_mut().for_each(|t| *t = 0);
        self.event.iter_mut().for_each(|t| *t = 0);
    }
}

/// Median (perftest's rule: the mean of the two middle values of an even count, in whole
/// cycles) and average of `v`, sorted in place, converted at `mhz` cycles per microsecond.
pub fn med_avg(v: &mut [u64], mhz: f64) -> Option<MedAvg> {
    if v.is_empty() || mhz <= 0.0 {
        return None;
    }
    v.sort_unstable();
    let n = v.len();
    let median = if n.is_multiple_of(2) {
        (v[n / 2 - 1] + v[n / 2]) / 2
    } else {
        v[n / 2]
    };
    let sum: u128 = v.iter().map(|&x| u128::from(x)).sum();
    Some(MedAvg {
        median: median as f64 / mhz,
        average: sum as f64 / n as f64 / mhz,
    })
}

fn cell<W: Write>(out: &mut W, v: Option<MedAvg>) -> fmt::Result {
    match v {
        Some(m) => write!(out, " {:>10.2} /{:>10.2}", m.median, m.average),
        None => write!(out, " {:>10} /{:>10}", "-", "-"),
    }
}

/// The title line of the anatomy table.
pub const ANATOMY_TITLE: &str = " Where the time goes (client side; median / average [usec]; on an emulator these are the emulator's figures)";

/// The anatomy table's column header.
pub const ANATOMY_HEADER: &str =
    " #bytes              post[usec]   post->send CQE[usec]              RTT[usec]  peer turnaround[usec]   wire+NIC 1-way[usec]";

/// Writes one table row.
pub fn write_anatomy_row<W: Write>(out: &mut W, r: &AnatomyRow) -> fmt::Result {
    write!(out, " {:<7}", r.bytes)?;
    cell(out, r.post)?;
    cell(out, r.send_cqe)?;
    cell(out, r.rtt)?;
    match r.peer {
        PeerPart::Software(p) => cell(out, Some(p))?,
        PeerPart::Hca => write!(out, " {:>22}", "(HCA)")?,
        PeerPart::Missing => cell(out, None)?,
    }
    cell(out, r.wire_nic())?;
    writeln!(out)
}

/// What an anatomy line says besides the row.
#[derive(Clone, Copy, Debug)]
pub struct AnatomyContext {
    pub test: Test,
    pub transport: Transport,
    pub completion: Completion,
    pub tsc_mhz: f64,
}

impl<D: Device> PingPong<D> {
    /// Client, right after a post returned: when it did (first attempts only; a retry's
    /// interval leaves the statistics anyway).
    #[inline(always)]
    pub(super) fn anatomy_posted<E: BenchEnv>(&mut self, env: &E) {
        if self.anat.on && self.attempt == 0 {
            if let Some(t) = self.anat.posted.get_mut(self.seq as usize) {
                *t = env.cycles();
            }
        }
    }

    /// Client, as its send completion is taken: when.
    #[inline(always)]
    pub(super) fn anatomy_send_done<E: BenchEnv>(&mut self, env: &E) {
        if self.anat.on && self.attempt == 0 && self.cfg.role == Role::Client {
            if let Some(t) = self.anat.event.get_mut(self.seq as usize) {
                *t = env.cycles();
            }
        }
    }

    /// Server, as it sees a request: the TSC (0 with the anatomy off).
    #[inline(always)]
    pub(super) fn anatomy_seen<E: BenchEnv>(&self, env: &E) -> u64 {
        if self.anat.on && self.cfg.role == Role::Server {
            env.cycles()
        } else {
            0
        }
    }

    /// Server, right after its answer's post returned: the turnaround's two ends.
    #[inline(always)]
    pub(super) fn anatomy_answered<E: BenchEnv>(&mut self, env: &E, seen: u64) {
        if self.anat.on && self.attempt == 0 {
            let i = self.seq as usize;
            if i < self.anat.posted.len() && i < self.anat.event.len() {
                self.anat.posted[i] = env.cycles();
                self.anat.event[i] = seen;
            }
        }
    }

    /// The client's anatomy rows so far (empty with `anatomy=off`).
    pub fn anatomy(&self) -> &[AnatomyRow] {
        &self.anat.rows
    }

    /// Server, on the client's Hello: measure the turnaround if it asks.
    pub(super) fn anatomy_from_hello(&mut self, asked: bool) {
        self.anat.on = false;
        self.anat.pending = None;
        if asked {
            self.anat.enable(self.cfg.iterations, 0);
        }
    }

    /// At the end of a size, before perftest's statistics re-accumulate the stamps: client,
    /// the row of this size; server, its turnaround for the next Ack.
    pub(super) fn anatomy_size(&mut self, aborted: bool) {
        if !self.anat.on {
            return;
        }
        let n = (self.cfg.iterations as usize)
            .min(self.anat.posted.len())
            .min(self.anat.event.len());
        let mhz = self.tsc_mhz;
        match self.cfg.role {
            Role::Server => {
                // An aborted (or skipped) size measured nothing: the last report stands
                // (it names its own size).
                if aborted || self.cfg.test.one_sided() {
                    return;
                }
                let mut k = 0;
                for i in 0..n {
                    let (seen, posted) = (self.anat.event[i], self.anat.posted[i]);
                    if seen != 0 && posted >= seen {
                        self.scratch[k] = posted - seen;
                        k += 1;
                    }
                }
                if let Some(t) = med_avg(&mut self.scratch[..k], mhz) {
                    self.anat.pending = Some(crate::rendezvous::Turnaround::from_ns(
                        self.index,
                        t.median * 1000.0,
                        t.average * 1000.0,
                    ));
                }
            }
            Role::Client => {
                // Iteration `i` counts when its post, its completion and the next stamp were
                // all taken in order, and its interval held no loss wait: its parts and its
                // round trip come from the same iterations, so each part is at most the RTT
                // iteration by iteration, and so in median and average.
                // In isr mode a send_lat or write_lat client arms only its receive CQ: its
                // send completion is taken with the reply and tells nothing of its own.
                let done_known =
                    self.cfg.completion != Completion::Isr || self.cfg.test.one_sided();
                let (st, an, bad) = (&self.stamps, &self.anat, &self.bad);
                let ok = |i: usize| {
                    let (start, posted, done, next) = (st[i], an.posted[i], an.event[i], st[i + 1]);
                    start != 0
                        && !bad.get(i).copied().unwrap_or(true)
                        && start <= posted
                        && posted <= next
                        && (!done_known || (posted <= done && done <= next))
                };
                // Each part ends at one of the iteration's marks: the post returning, the
                // send completion, the next stamp.
                let mut stats = [None; 3];
                let mut k = 0;
                for (p, out) in stats.iter_mut().enumerate() {
                    k = 0;
                    for i in (0..n.saturating_sub(1)).filter(|&i| ok(i)) {
                        let end = [an.posted[i], an.event[i], st[i + 1]][p];
                        self.scratch[k] = end.saturating_sub(st[i]);
                        k += 1;
                    }
                    *out = med_avg(&mut self.scratch[..k], mhz);
                }
                let [post, send_cqe, rtt] = if aborted { [None; 3] } else { stats };
                let send_cqe = send_cqe.filter(|_| done_known);
                let peer = if self.cfg.test.one_sided() {
                    PeerPart::Hca
                } else {
                    PeerPart::Missing
                };
                let row = AnatomyRow {
                    index: self.index,
                    bytes: self.size,
                    samples: k,
                    post,
                    send_cqe,
                    rtt,
                    peer,
                };
                if self.anat.rows.len() < self.anat.rows.capacity() {
                    self.anat.rows.push(row);
                }
            }
        }
    }

    /// Client: a BarrierAck or DoneAck brought the server's turnaround of a size.
    pub(super) fn anatomy_peer(&mut self, t: Option<crate::rendezvous::Turnaround>) {
        let Some(t) = t else {
            return;
        };
        if !self.anat.on || self.cfg.test.one_sided() {
            return;
        }
        if let Some(r) = self.anat.rows.iter_mut().find(|r| r.index == t.index) {
            r.peer = PeerPart::Software(MedAvg {
                median: t.median_us(),
                average: t.average_us(),
            });
        }
    }

    /// Client, at the end of the run: the anatomy table and its lines.
    pub(super) fn print_anatomy<W: Write>(&self, out: &mut W) -> Result<(), BenchError> {
        if !self.anat.on || self.cfg.role != Role::Client {
            return Ok(());
        }
        let line = report::RESULT_LINE;
        writeln!(out, "{line}")?;
        writeln!(out, "{ANATOMY_TITLE}")?;
        writeln!(out, "{ANATOMY_HEADER}")?;
        for r in &self.anat.rows {
            write_anatomy_row(out, r)?;
        }
        writeln!(out, "{line}")?;
        let c = AnatomyContext {
            test: self.cfg.test,
            transport: self.cfg.transport,
            completion: self.cfg.completion,
            tsc_mhz: self.tsc_mhz,
        };
        for r in &self.anat.rows {
            AnatomyLine::of(&c, r).emit(out)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ma(median: f64, average: f64) -> MedAvg {
        MedAvg { median, average }
    }

    #[test]
    fn median_and_average_follow_perftests_rule() {
        // Odd count: the middle value; even: the mean of the two middle ones, in whole cycles.
        let mut v = [30u64, 10, 20];
        assert_eq!(med_avg(&mut v, 10.0), Some(ma(2.0, 2.0)));
        let mut v = [40u64, 10, 20, 31];
        // Middle values 20 and 31: (51) / 2 = 25 cycles; average 101 / 4 = 25.25 cycles.
        assert_eq!(med_avg(&mut v, 1.0), Some(ma(25.0, 25.25)));
        assert_eq!(med_avg(&mut [], 1.0), None);
        assert_eq!(med_avg(&mut [5], 0.0), None);
    }

    #[test]
    fn wire_and_nic_is_half_of_what_the_peer_did_not_spend() {
        let mut r = AnatomyRow {
            index: 0,
            bytes: 2,
            samples: 10,
            post: Some(ma(0.1, 0.12)),
            send_cqe: Some(ma(0.5, 0.55)),
            rtt: Some(ma(2.0, 2.2)),
            peer: PeerPart::Software(ma(0.4, 0.6)),
        };
        let w = r.wire_nic().unwrap();
        assert!((w.median - 0.8).abs() < 1e-12 && (w.average - 0.8).abs() < 1e-12);
        r.peer = PeerPart::Hca;
        assert_eq!(r.wire_nic(), Some(ma(1.0, 1.1)));
        r.peer = PeerPart::Missing;
        assert_eq!(r.wire_nic(), None);
    }

    #[test]
    fn table_row_and_line_carry_every_component() {
        let r = AnatomyRow {
            index: 1,
            bytes: 4,
            samples: 998,
            post: Some(ma(0.1, 0.125)),
            send_cqe: Some(ma(0.5, 0.55)),
            rtt: Some(ma(2.0, 2.2)),
            peer: PeerPart::Software(ma(0.4, 0.6)),
        };
        let mut s = String::new();
        write_anatomy_row(&mut s, &r).unwrap();
        assert_eq!(
            s,
            " 4             0.10 /      0.12       0.50 /      0.55       2.00 /      2.20       0.40 /      0.60       0.80 /      0.80\n"
        );
        let c = AnatomyContext {
            test: Test::SendLat,
            transport: Transport::Uc,
            completion: Completion::Poll,
            tsc_mhz: 2400.0,
        };
        let mut s = String::new();
        AnatomyLine::of(&c, &r).emit(&mut s).unwrap();
        assert_eq!(
            s,
            "ibkern-anatomy {\"test\":\"send_lat\",\"transport\":\"UC\",\"role\":\"client\",\"completion\":\"poll\",\"bytes\":4,\"samples\":998,\"post_med_us\":0.1000,\"post_avg_us\":0.1250,\"send_cqe_med_us\":0.5000,\"send_cqe_avg_us\":0.5500,\"rtt_med_us\":2.0000,\"rtt_avg_us\":2.2000,\"peer_med_us\":0.4000,\"peer_avg_us\":0.6000,\"wire_nic_med_us\":0.8000,\"wire_nic_avg_us\":0.8000,\"peer\":\"software\",\"tsc_mhz\":2400.0000}\n"
        );
        let missing = AnatomyRow {
            peer: PeerPart::Missing,
            rtt: None,
            ..r
        };
        let mut s = String::new();
        write_anatomy_row(&mut s, &missing).unwrap();
        assert_eq!(s.matches('-').count(), 6, "{s}");
        let mut s = String::new();
        AnatomyLine::of(&c, &missing).emit(&mut s).unwrap();
        assert!(s.contains("\"rtt_med_us\":null,\"rtt_avg_us\":null,\"peer_med_us\":null"));
        assert!(s.contains("\"wire_nic_med_us\":null") && s.contains("\"peer\":\"missing\""));
        let hca = AnatomyRow {
            peer: PeerPart::Hca,
            ..r
        };
        let mut s = String::new();
        write_anatomy_row(&mut s, &hca).unwrap();
        assert!(s.contains("(HCA)"));
    }
}
