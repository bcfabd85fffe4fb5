//! What a run, a listener or the rendezvous channel creates on the device, and its one
//! close.
//!
//! Every object is made through [`Resources`], which keeps it for [`Resources::close`]; the
//! caller keeps the handles it needs under the names of their roles (send CQ, data QP, ...).
//! Close releases everything in the order the device needs (QPs, then the AHs and SRQs, the
//! CQs, the MRs, the PDs, and last the memory the MRs covered), after a failed set-up as
//! after a finished run, so a run's build needs no teardown of its own.

use alloc::vec::Vec;

use verbs::{AccessFlags, AhAttr, Device, DmaRegion, QpInitAttr, SrqAttr};

use crate::env::BenchEnv;
use crate::perftest::BenchError;

fn vb(during: &'static str) -> impl FnOnce(verbs::Error) -> BenchError {
    move |err| BenchError::Verbs { during, err }
}

/// The objects one user made, released together.
pub struct Resources<D: Device> {
    buf: Option<DmaRegion>,
    pds: Vec<D::Pd>,
    mrs: Vec<D::Mr>,
    cqs: Vec<D::Cq>,
    srqs: Vec<D::Srq>,
    qps: Vec<D::Qp>,
    ahs: Vec<D::Ah>,
}

impl<D: Device> Default for Resources<D> {
    fn default() -> Self {
        Self::new()
    }
}

impl<D: Device> Resources<D> {
    pub const fn new() -> Self {
        Resources {
            buf: None,
            pds: Vec::new(),
            mrs: Vec::new(),
            cqs: Vec::new(),
            srqs: Vec::new(),
            qps: Vec::new(),
            ahs: Vec::new(),
        }
    }

    /// The user's one DMA buffer: `size` zeroed bytes, page-aligned (`what` names it in the
    /// error when the platform has no memory).
    pub fn alloc_buffer<E: BenchEnv>(
        &mut self,
        env: &mut E,
        size: usize,
        what: &'static str,
    ) -> Result<&mut DmaRegion, BenchError> {
        let buf = env
            .alloc_dma(size, 4096)
            .ok_or(BenchError::NoMemory(what))?;
        Ok(self.buf.insert(buf))
    }

    /// The buffer, once allocated.
    pub fn buffer(&self) -> Option<&DmaRegion> {
        self.buf.as_ref()
    }

    pub fn buffer_mut(&mut self) -> Option<&mut DmaRegion> {
        self.buf.as_mut()
    }

    pub fn alloc_pd(&mut self, dev: &mut D) -> Result<D::Pd, BenchError> {
        let pd = dev.alloc_pd().map_err(vb("alloc_pd"))?;
        self.pds.push(pd);
        Ok(pd)
    }

    /// Registers the whole buffer with `access`.
    pub fn reg_buffer(
        &mut self,
        dev: &mut D,
        pd: D::Pd,
        access: AccessFlags,
    ) -> Result<D::Mr, BenchError> {
        let (bus, len) = match &self.buf {
            Some(b) => (b.bus(), b.size() as u64),
            None => return Err(BenchError::NoMemory("buffer to register")),
        };
        let mr = dev.reg_mr(pd, bus, len, access).map_err(vb("reg_mr"))?;
        self.mrs.push(mr);
        Ok(mr)
    }

    pub fn create_cq(
        &mut self,
        dev: &mut D,
        entries: u32,
        during: &'static str,
    ) -> Result<D::Cq, BenchError> {
        let cq = dev.create_cq(entries).map_err(vb(during))?;
        self.cqs.push(cq);
        Ok(cq)
    }

    pub fn create_qp(
        &mut self,
        dev: &mut D,
        attr: &QpInitAttr<D::Pd, D::Cq>,
        during: &'static str,
    ) -> Result<D::Qp, BenchError> {
        let qp = dev.create_qp(attr).map_err(vb(during))?;
        self.qps.push(qp);
        Ok(qp)
    }

    /// A QP at the number `qpn` (the rendezvous QP).
    pub fn create_qp_at(
        &mut self,
        dev: &mut D,
        attr: &QpInitAttr<D::Pd, D::Cq>,
        qpn: u32,
        during: &'static str,
    ) -> Result<D::Qp, BenchError> {
        let qp = dev.create_qp_at(attr, qpn).map_err(vb(during))?;
        self.qps.push(qp);
        Ok(qp)
    }

    pub fn create_srq(
        &mut self,
        dev: &mut D,
        pd: D::Pd,
        attr: &SrqAttr,
    ) -> Result<D::Srq, BenchError> {
        let (srq, _) = dev.create_srq(pd, attr).map_err(vb("create_srq"))?;
        self.srqs.push(srq);
        Ok(srq)
    }

    pub fn create_qp_with_srq(
        &mut self,
        dev: &mut D,
        attr: &QpInitAttr<D::Pd, D::Cq>,
        srq: D::Srq,
    ) -> Result<D::Qp, BenchError> {
        let qp = dev
            .create_qp_with_srq(attr, srq)
            .map_err(vb("create_qp_with_srq"))?;
        self.qps.push(qp);
        Ok(qp)
    }

    /// An address handle to `lid` through `port` (SL 0, no GRH).
    pub fn create_ah(
        &mut self,
        dev: &mut D,
        pd: D::Pd,
        lid: u16,
        port: u8,
    ) -> Result<D::Ah, BenchError> {
        let attr = AhAttr {
            dlid: lid,
            port,
            ..AhAttr::default()
        };
        let ah = dev.create_ah(pd, &attr).map_err(vb("create_ah"))?;
        self.ahs.push(ah);
        Ok(ah)
    }

    /// Releases everything made so far (and nothing twice: a second close does nothing).
    /// Teardown errors cannot be acted upon here; every object is still released.
    pub fn close(&mut self, dev: &mut D) {
        for qp in self.qps.drain(..) {
            let _ = dev.destroy_qp(qp);
        }
        for ah in self.ahs.drain(..) {
            let _ = dev.destroy_ah(ah);
        }
        for srq in self.srqs.drain(..) {
            let _ = dev.destroy_srq(srq);
        }
        for cq in self.cqs.drain(..) {
            let _ = dev.destroy_cq(cq);
        }
        for mr in self.mrs.drain(..) {
            let _ = dev.dereg_mr(mr);
        }
        for pd in self.pds.drain(..) {
            let _ = dev.dealloc_pd(pd);
        }
        // Last, after the MRs that covered it: dropping the region frees it.
        self.buf = None;
    }
}
