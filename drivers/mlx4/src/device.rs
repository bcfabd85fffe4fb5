//! The verbs API over an [`Hca`]: handles are small `Copy` values, every call is statically
//! dispatched, and post/poll allocate nothing.

use crate::cq::CqHandle;
use crate::mr::MptParams;
use crate::platform::Platform;
use crate::qp::{Ah, QpHandle};
use crate::srq::SrqHandle;
use crate::Hca;
use verbs::{
    AccessFlags, AhAttr, AsyncEvent, BadWr, Completion, CqModeration, DeviceAttr, Error, PortAttr,
    QpAttr, QpCap, QpInitAttr, RecvWr, Result, SendWr, SrqAttr, UdDest, WorkCompletion,
};

/// A protection domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PdHandle(pub(crate) u32);

impl PdHandle {
    pub fn pdn(&self) -> u32 {
        self.0
    }
}

/// A memory region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrHandle {
    pub(crate) slot: u32,
    pub(crate) key: u32,
}

impl<P: Platform> Hca<P> {
    fn mr_slot(&self, mr: MrHandle) -> Result<usize> {
        match self.mrs.get(mr.slot as usize) {
            Some(Some(m)) if m.key == mr.key => Ok(mr.slot as usize),
            _ => Err(Error::InvalidHandle),
        }
    }

    /// A physical-address MR covering all memory for `pd` (§4.5 PHYSICAL flag): one key for
    /// every buffer of a kernel user, no MTT.
    pub fn reg_phys_mr(&mut self, pd: PdHandle, access: AccessFlags) -> Result<MrHandle> {
        let slot = self.create_mr(MptParams {
            pd: pd.0,
            iova: 0,
            len: u64::MAX,
            access,
            pages: None,
        })?;
        let key = self.mrs[slot].map(|m| m.key).ok_or(Error::InvalidHandle)?;
        Ok(MrHandle {
            slot: slot as u32,
            key,
        })
    }
}

impl<P: Platform> verbs::Device for Hca<P> {
    type Pd = PdHandle;
    type Mr = MrHandle;
    type Cq = CqHandle;
    type Qp = QpHandle;
    type Ah = Ah;
    type Srq = SrqHandle;
    type DataPath<'a>
        = crate::path::DataPath<'a, P>
    where
        Self: 'a;

    fn query_device(&self) -> DeviceAttr {
        let c = &self.caps;
        DeviceAttr {
            fw_ver: (self.fw.major, self.fw.minor, self.fw.subminor),
            node_guid: self.node_guid,
            vendor_id: 0x02c9,
            vendor_part_id: (self.p.config_read32(0) >> 16),
            phys_port_cnt: c.num_ports,
            max_qp: self.qpns_capacity(),
            max_qp_wr: c.max_qp_sz,
            max_sge: c.max_sq_sg.min(c.max_rq_sg),
            max_cq: self.cqns_capacity(),
            max_cqe: c.max_cqes.saturating_sub(1),
            max_mr: self.mpts_capacity(),
            max_pd: c.max_pds,
            max_inline: c.max_sq_desc_sz.saturating_sub(64 + 8),
            max_msg_sz: 1u64 << c.log_max_msg,
            local_dma_lkey: c.reserved_lkey,
            reserved_qps: c.reserved_qps,
        }
    }

    fn query_port(&mut self, port: u8) -> Result<PortAttr> {
        Ok(self.port_attr(port)?)
    }

    fn alloc_pd(&mut self) -> Result<PdHandle> {
        self.pds
            .alloc()
            .map(PdHandle)
            .ok_or(Error::NoResources("PDs"))
    }

    fn dealloc_pd(&mut self, pd: PdHandle) -> Result<()> {
        self.pds.free(pd.0);
        Ok(())
    }

    fn reg_mr(
        &mut self,
        pd: PdHandle,
        addr: u64,
        len: u64,
        access: AccessFlags,
    ) -> Result<MrHandle> {
        if len == 0 || addr.checked_add(len).is_none() {
            return Err(Error::InvalidArgument("MR range"));
        }
        // Physically contiguous: one MTT entry whose page covers the whole range, or, where
        // that page would exceed Linux's 2 GiB MTT page, several smaller pages.
        let (shift, first, n) = crate::mr::contiguous_mtt(addr, len);
        if n > u64::from(self.mtts.capacity()) {
            return Err(Error::NoResources("MTT entries"));
        }
        let pages: alloc::vec::Vec<u64> = (0..n).map(|k| first + (k << shift)).collect();
        let slot = self.create_mr(MptParams {
            pd: pd.0,
            iova: addr,
            len,
            access,
            pages: Some((&pages, shift)),
        })?;
        let key = self.mrs[slot].map(|m| m.key).ok_or(Error::InvalidHandle)?;
        Ok(MrHandle {
            slot: slot as u32,
            key,
        })
    }

    fn reg_mr_pages(
        &mut self,
        pd: PdHandle,
        iova: u64,
        len: u64,
        pages: &[u64],
        page_shift: u32,
        access: AccessFlags,
    ) -> Result<MrHandle> {
        if !(12..=crate::mr::MAX_MTT_SHIFT).contains(&page_shift) || pages.is_empty() {
            return Err(Error::InvalidArgument("MR page list"));
        }
        let mask = (1u64 << page_shift) - 1;
        let span = (iova & mask)
            .checked_add(len)
            .ok_or(Error::InvalidArgument("MR page list"))?;
        if span.div_ceil(1 << page_shift) > pages.len() as u64
            || pages.iter().any(|p| p & mask != 0)
        {
            return Err(Error::InvalidArgument("MR page list"));
        }
        let slot = self.create_mr(MptParams {
            pd: pd.0,
            iova,
            len,
            access,
            pages: Some((pages, page_shift)),
        })?;
        let key = self.mrs[slot].map(|m| m.key).ok_or(Error::InvalidHandle)?;
        Ok(MrHandle {
            slot: slot as u32,
            key,
        })
    }

    fn dereg_mr(&mut self, mr: MrHandle) -> Result<()> {
        let slot = self.mr_slot(mr)?;
        Ok(self.dereg_mr_index(slot)?)
    }

    fn mr_lkey(&self, mr: MrHandle) -> u32 {
        mr.key
    }

    fn mr_rkey(&self, mr: MrHandle) -> u32 {
        mr.key
    }

    fn create_cq(&mut self, cqe: u32) -> Result<CqHandle> {
        Ok(self.create_cq_raw(cqe)?)
    }

    fn destroy_cq(&mut self, cq: CqHandle) -> Result<()> {
        self.cq_mut(cq)?;
        if self.qps.iter().flatten().any(|q| q.uses_cq(cq.cqn)) {
            return Err(Error::InvalidArgument("CQ still used by a QP"));
        }
        Ok(self.destroy_cq_index(cq.slot as usize)?)
    }

    fn create_qp(&mut self, a: &QpInitAttr<PdHandle, CqHandle>) -> Result<QpHandle> {
        Ok(self.create_qp_raw(
            a.pd.0,
            a.send_cq,
            a.recv_cq,
            a.qp_type,
            &a.cap,
            a.sq_sig_all,
        )?)
    }

    fn create_qp_at(&mut self, a: &QpInitAttr<PdHandle, CqHandle>, qpn: u32) -> Result<QpHandle> {
        let objs = (a.pd.0, a.send_cq, a.recv_cq, a.qp_type);
        Ok(self.create_qp_numbered(objs, &a.cap, a.sq_sig_all, Some(qpn))?)
    }

    fn modify_qp(&mut self, qp: QpHandle, attr: &QpAttr) -> Result<()> {
        Ok(self.modify_qp_raw(qp, attr)?)
    }

    fn destroy_qp(&mut self, qp: QpHandle) -> Result<()> {
        self.qp_ref(qp)?;
        Ok(self.destroy_qp_index(qp.slot as usize)?)
    }

    fn qp_num(&self, qp: QpHandle) -> u32 {
        qp.qpn
    }

    fn qp_cap(&self, qp: QpHandle) -> QpCap {
        self.qp_cap_raw(qp).unwrap_or(QpCap {
            max_send_wr: 0,
            max_recv_wr: 0,
            max_send_sge: 0,
            max_recv_sge: 0,
            max_inline_data: 0,
        })
    }

    fn create_ah(&mut self, pd: PdHandle, attr: &AhAttr) -> Result<Ah> {
        if attr.port == 0 || attr.port > self.caps.num_ports {
            return Err(Error::InvalidArgument("AH port"));
        }
        // The static rate lowered to one the device supports, as mlx4_ib's `create_ib_ah`.
        let attr = AhAttr {
            static_rate: self.caps.supported_static_rate(attr.static_rate),
            ..*attr
        };
        Ok(Ah::new(pd.0, &attr))
    }

    fn destroy_ah(&mut self, _ah: Ah) -> Result<()> {
        Ok(())
    }

    #[inline]
    fn post_send(&mut self, qp: QpHandle, wr: &SendWr<'_, Ah>) -> Result<()> {
        self.post_send_raw(qp, wr)
    }

    #[inline]
    fn post_send_list<'a, I>(&mut self, qp: QpHandle, wrs: I) -> core::result::Result<usize, BadWr>
    where
        I: IntoIterator,
        I::Item: core::borrow::Borrow<SendWr<'a, Ah>>,
    {
        self.post_send_list_raw(qp, wrs)
    }

    #[inline]
    fn post_recv(&mut self, qp: QpHandle, wr: &RecvWr<'_>) -> Result<()> {
        self.post_recv_raw(qp, wr)
    }

    #[inline]
    fn poll_cq(&mut self, cq: CqHandle, wc: &mut [WorkCompletion]) -> Result<usize> {
        self.poll_cq_raw(cq, wc)
    }

    #[inline]
    fn poll_one(&mut self, cq: CqHandle) -> Result<Option<Completion>> {
        self.poll_one_raw(cq)
    }

    fn data_path(
        &mut self,
        qp: QpHandle,
        send_cq: CqHandle,
        recv_cq: CqHandle,
        dest: Option<UdDest<Ah>>,
    ) -> Result<Self::DataPath<'_>> {
        self.data_path_raw(qp, send_cq, recv_cq, dest)
    }

    fn modify_cq(&mut self, cq: CqHandle, moderate: CqModeration) -> Result<()> {
        Ok(self.modify_cq_raw(cq, moderate.cq_count, moderate.cq_period)?)
    }

    fn req_notify_cq(&mut self, cq: CqHandle, solicited_only: bool) -> Result<()> {
        Ok(self.arm_cq(cq, solicited_only)?)
    }

    fn get_cq_event(&mut self, cq: CqHandle, timeout_ns: u64) -> Result<()> {
        self.wait_cq_event(cq, timeout_ns).map_err(|e| match e {
            crate::Error::CmdTimeout { .. } => Error::Timeout("completion event"),
            other => other.into(),
        })
    }

    fn create_srq(&mut self, pd: PdHandle, attr: &SrqAttr) -> Result<(SrqHandle, SrqAttr)> {
        let (h, cap) = self.create_srq_raw(pd.0, attr.max_wr, attr.max_sge)?;
        Ok((
            h,
            SrqAttr {
                max_wr: cap.max_wr,
                max_sge: cap.max_sge,
                srq_limit: 0,
            },
        ))
    }

    fn modify_srq(&mut self, srq: SrqHandle, srq_limit: u32) -> Result<()> {
        Ok(self.arm_srq_raw(srq, srq_limit)?)
    }

    fn query_srq(&mut self, srq: SrqHandle) -> Result<SrqAttr> {
        let (limit, cap) = self.query_srq_raw(srq)?;
        Ok(SrqAttr {
            max_wr: cap.max_wr,
            max_sge: cap.max_sge,
            srq_limit: limit,
        })
    }

    fn destroy_srq(&mut self, srq: SrqHandle) -> Result<()> {
        Ok(self.destroy_srq_raw(srq)?)
    }

    fn post_srq_recv(&mut self, srq: SrqHandle, wr: &RecvWr<'_>) -> Result<()> {
        self.post_srq_recv_raw(srq, wr)
    }

    fn srq_num(&self, srq: SrqHandle) -> u32 {
        srq.srqn()
    }

    fn create_qp_with_srq(
        &mut self,
        a: &QpInitAttr<PdHandle, CqHandle>,
        srq: SrqHandle,
    ) -> Result<QpHandle> {
        let objs = (a.pd.0, a.send_cq, a.recv_cq, a.qp_type);
        Ok(self.create_qp_with_srq_raw(objs, &a.cap, a.sq_sig_all, srq)?)
    }

    fn get_async_event(&mut self) -> Option<AsyncEvent> {
        Hca::get_async_event(self)
    }

    fn port_traffic(&mut self, port: u8) -> Result<verbs::PortTraffic> {
        let c = self.port_counters(port)?;
        Ok(verbs::PortTraffic {
            xmit_data_words: c.xmit_data_words,
            rcv_data_words: c.rcv_data_words,
            xmit_packets: c.xmit_packets,
            rcv_packets: c.rcv_packets,
            extended: c.extended,
        })
    }
}
