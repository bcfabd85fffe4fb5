//! `ib_send_bw -b` (perftest's `run_iter_bi`): each node sends and receives on one QP, its
//! sender and receiver stepped together. The passive side (perftest's server) starts sending
//! only after its first message arrived, so that neither side sends into a receive queue the
//! other has not filled yet. One duration state per node: its sample counts both the messages
//! its own sends retired and the messages it received.
//!
//! READ, WRITE and atomics need no receiver: with `-b` each node runs a plain
//! [`BwSender`], and each side's row is the [`super::formula::bidir_sum`] of its own report
//! and the peer's.

use verbs::Device;

use super::duration::Phase;
use super::formula::{perftest_bw, BwError, BwInput, BwReport, BwUnit};
use super::stream::{BwReceiver, BwSender, StreamError, StreamState};

/// One node of a bidirectional SEND stream.
pub struct BwDuplexSend<D: Device> {
    tx: BwSender<D>,
    rx: BwReceiver<D>,
    /// The passive side: hold the sender until the first message arrives.
    wait_first_rx: bool,
    tx_done: bool,
    rx_done: bool,
}

impl<D: Device> BwDuplexSend<D> {
    /// `tx` and `rx` on the same QP (separate CQs), built for the same parameters; `passive`
    /// for perftest's server side.
    pub fn new(tx: BwSender<D>, rx: BwReceiver<D>, passive: bool) -> Self {
        BwDuplexSend {
            tx,
            rx,
            wait_first_rx: passive,
            tx_done: false,
            rx_done: false,
        }
    }

    pub fn sender(&self) -> &BwSender<D> {
        &self.tx
    }

    pub fn receiver(&self) -> &BwReceiver<D> {
        &self.rx
    }

    /// The peer's sender is done and sent `total` messages (its closing message says so).
    pub fn peer_done(&mut self, now: u64, total: u64) {
        self.rx.sender_done_total(now, total);
    }

    /// This node's own sending is over (send it to the peer as [`BwDuplexSend::peer_done`]).
    pub fn sender_finished(&self) -> bool {
        self.tx_done
    }

    /// Posts and retires sends, then counts receives; `clock` reads the TSC. Done when both
    /// directions are.
    pub fn step(
        &mut self,
        dev: &mut D,
        clock: &mut impl FnMut() -> u64,
    ) -> Result<StreamState, StreamError> {
        let may_send = !self.wait_first_rx || self.rx.tally().received > 0;
        if may_send && !self.tx_done {
            self.tx_done = self.tx.step(dev, clock)? == StreamState::Done;
        }
        if !self.rx_done {
            let now = clock();
            let shared: Option<Phase> = self.tx.phase();
            self.rx_done = self.rx.step_in(dev, now, shared)? == StreamState::Done;
        }
        Ok(if self.tx_done && self.rx_done {
            StreamState::Done
        } else {
            StreamState::Running
        })
    }

    /// This node's row before the peer's is added: its sends' figures (`-n`), or in duration
    /// mode the sends retired plus the messages received during its sample, over the sample
    /// (perftest prints that one directly, without adding the peer's).
    pub fn report(&mut self, tsc_mhz: f64, unit: BwUnit) -> Result<BwReport, BwError> {
        match self.tx.sample_window() {
            None => self.tx.report(tsc_mhz, unit),
            Some((start, end)) => perftest_bw(&BwInput {
                size: u64::from(self.tx.params().size),
                tposted: &[start],
                tcompleted: &[end],
                iterations: self.tx.sample_iterations() + self.rx.tally().sample,
                post_list: 1,
                cq_mod: 1,
                no_peak: true,
                tsc_mhz,
                unit,
            }),
        }
    }
}
