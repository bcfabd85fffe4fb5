//! Driver and model describe the same device structures independently, each from
//! docs/hardware.md (the driver in `hw`, `mad` and the views beside the code that reads them,
//! the model in `sim::cq`, `sim::seg`, `sim::eq`, `sim::mr`, `sim::icm`, `sim::qp`,
//! `sim::mad`). These tests are where the two meet: for every structure both describe, bytes
//! built by one side are read by the other for a set of field values, and the sizes and field
//! offsets are compared. A field placed differently on either side fails here. They live in
//! the crate because the driver's layouts are internal to it.

use std::mem::{offset_of, size_of};

use crate::cq::cqe as drv_cqe;
use crate::hw::{self, ctrl as drv_ctrl};
use crate::qp::Ah;
use sim::cq::{cqc, Completion, CQE_SIZE};
use sim::eq::{eqc, CqErrorSyndrome, Event, EQE_SIZE};
use sim::icm::init_hca;
use sim::mr::mpt;
use sim::qp::off;
use sim::seg::{self, Atomic, Av, Ctrl, Data, Raddr};
use verbs::{AhAttr, Gid, GrhAttr};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// Completions covering every CQE field with distinct, width-filling values.
fn completions() -> Vec<(Completion, bool)> {
    let recv = Completion {
        qpn: 0x00ab_cdef,
        immed: 0x1234_5678,
        grh: true,
        my_path_bits: 0x55,
        remote_qpn: 0x0012_3456,
        sl: 0xd,
        slid: 0xbeef,
        byte_cnt: 0x0001_0028,
        wqe_index: 0xfffe,
        opcode: sim::cq::opcode::RECV_SEND_IMM,
        ..Default::default()
    };
    let send = Completion::send(0x48, 7, 0x10, 4096);
    let err = Completion {
        vendor_syndrome: 0x32,
        ..Completion::error(0x00ff_ffff, 0x8001, sim::cq::Syndrome::RemoteAccess, true)
    };
    let err_recv = Completion::error(0x41, 3, sim::cq::Syndrome::WrFlushed, false);
    vec![(recv, false), (send, true), (err, true), (err_recv, false)]
}

#[test]
fn cqe_written_by_the_model_reads_the_same_through_the_driver_layout() {
    assert_eq!(CQE_SIZE as usize, size_of::<hw::Cqe>());
    for (c, owner) in completions() {
        let bytes = c.emit(owner);
        let d = hw::Cqe::read_from_bytes(&bytes).expect("32 bytes");
        let what = format!("{c:?}");
        assert_eq!(d.vlan_my_qpn.get() & 0xff_ffff, c.qpn, "{what}");
        assert_eq!(d.byte_cnt.get(), c.byte_cnt, "{what}");
        assert_eq!(d.wqe_index.get(), c.wqe_index, "{what}");
        let o = d.owner_sr_opcode;
        assert_eq!(o & drv_cqe::OWNER != 0, owner, "{what}");
        assert_eq!(o & drv_cqe::IS_SEND != 0, c.send, "{what}");
        assert_eq!(o & drv_cqe::OPCODE_MASK, c.opcode, "{what}");
        if c.is_error() {
            assert_eq!(o & drv_cqe::OPCODE_MASK, drv_cqe::OPCODE_ERROR);
            assert_eq!(bytes[hw::err_cqe::SYNDROME], c.syndrome, "{what}");
            assert_eq!(
                bytes[hw::err_cqe::VENDOR_SYNDROME],
                c.vendor_syndrome,
                "{what}"
            );
        } else {
            assert_eq!(d.immed_rss_invalid.get(), c.immed, "{what}");
            let g = d.g_mlpath_rqpn.get();
            assert_eq!(g & 0xff_ffff, c.remote_qpn, "{what}");
            assert_eq!(g >> 31 != 0, c.grh, "{what}");
            assert_eq!((g >> 24) & 0x7f, u32::from(c.my_path_bits), "{what}");
            assert_eq!(d.sl_vid.get() >> 12, u16::from(c.sl), "{what}");
            assert_eq!(d.rlid.get(), c.slid, "{what}");
        }
    }
}

#[test]
fn cqe_built_with_the_driver_layout_parses_the_same_in_the_model() {
    for (c, owner) in completions() {
        let mut d = hw::Cqe::new_zeroed();
        d.vlan_my_qpn.set(c.qpn);
        d.byte_cnt.set(c.byte_cnt);
        d.wqe_index.set(c.wqe_index);
        d.owner_sr_opcode = c.opcode
            | if c.send { drv_cqe::IS_SEND } else { 0 }
            | if owner { drv_cqe::OWNER } else { 0 };
        if c.is_error() {
            let b = d.as_mut_bytes();
            b[hw::err_cqe::SYNDROME] = c.syndrome;
            b[hw::err_cqe::VENDOR_SYNDROME] = c.vendor_syndrome;
        } else {
            d.immed_rss_invalid.set(c.immed);
            d.g_mlpath_rqpn
                .set((u32::from(c.grh) << 31) | (u32::from(c.my_path_bits) << 24) | c.remote_qpn);
            d.sl_vid.set(u16::from(c.sl) << 12);
            d.rlid.set(c.slid);
        }
        assert_eq!(Completion::parse(d.as_bytes()), c);
        assert_eq!(sim::cq::cqe::OWNER.get_bool(d.as_bytes()), owner);
    }
}

/// The driver's send opcodes with the control-segment flag combinations.
fn ctrls() -> Vec<Ctrl> {
    let ops = [
        hw::opcode::SEND,
        hw::opcode::SEND_IMM,
        hw::opcode::RDMA_WRITE,
        hw::opcode::RDMA_WRITE_IMM,
        hw::opcode::RDMA_READ,
        hw::opcode::ATOMIC_CS,
        hw::opcode::ATOMIC_FA,
    ];
    ops.iter()
        .enumerate()
        .map(|(i, &op)| Ctrl {
            owner: i % 2 == 0,
            opcode: op as u8,
            fence: i % 3 == 0,
            ds: (i as u8 * 9 + 2) & 0x3f,
            signaled: i % 2 == 1,
            solicited: i % 4 < 2,
            imm: 0x0102_0304 * i as u32,
        })
        .collect()
}

#[test]
fn control_segment_agrees_both_ways() {
    assert_eq!(seg::ctrl::SIZE, size_of::<hw::CtrlSeg>());
    for c in ctrls() {
        // Model writes, driver reads.
        let mut b = [0u8; 16];
        c.emit(&mut b);
        let d = hw::CtrlSeg::read_from_bytes(&b).unwrap();
        assert_eq!(
            d.owner_opcode.get() & drv_ctrl::OWNER != 0,
            c.owner,
            "{c:?}"
        );
        assert_eq!(d.owner_opcode.get() & 0x1f, u32::from(c.opcode), "{c:?}");
        assert_eq!(
            d.vlan_fence_size.get() & drv_ctrl::FENCE != 0,
            c.fence,
            "{c:?}"
        );
        assert_eq!(d.vlan_fence_size.get() & 0x3f, u32::from(c.ds), "{c:?}");
        let f = d.srcrb_flags.get();
        assert_eq!(
            f & drv_ctrl::CQ_UPDATE == drv_ctrl::CQ_UPDATE,
            c.signaled,
            "{c:?}"
        );
        assert_eq!(f & drv_ctrl::SOLICITED != 0, c.solicited, "{c:?}");
        assert_eq!(d.imm.get(), c.imm, "{c:?}");

        // Driver writes, model reads.
        let mut d = hw::CtrlSeg::new_zeroed();
        d.owner_opcode
            .set(u32::from(c.opcode) | if c.owner { drv_ctrl::OWNER } else { 0 });
        d.vlan_fence_size
            .set(u32::from(c.ds) | if c.fence { drv_ctrl::FENCE } else { 0 });
        d.srcrb_flags.set(
            if c.signaled { drv_ctrl::CQ_UPDATE } else { 0 }
                | if c.solicited { drv_ctrl::SOLICITED } else { 0 },
        );
        d.imm.set(c.imm);
        assert_eq!(Ctrl::parse(d.as_bytes()), c);
    }
}

#[test]
fn address_vector_built_by_the_driver_parses_in_the_model() {
    assert_eq!(seg::datagram::SIZE, size_of::<hw::DatagramSeg>());
    let dg = |f: sim::be::Field| f.off;
    assert_eq!(dg(seg::datagram::DLID), offset_of!(hw::DatagramSeg, dlid));
    assert_eq!(dg(seg::datagram::GRH), offset_of!(hw::DatagramSeg, g_slid));
    assert_eq!(
        dg(seg::datagram::SL),
        offset_of!(hw::DatagramSeg, sl_tclass_flowlabel)
    );
    assert_eq!(
        dg(seg::datagram::DEST_QPN),
        offset_of!(hw::DatagramSeg, dqpn)
    );
    assert_eq!(dg(seg::datagram::QKEY), offset_of!(hw::DatagramSeg, qkey));
    for (i, (port, pd, dlid, sl, bits, grh)) in [
        (1u8, 0x12u32, 0x21u16, 3u8, 0u8, false),
        (2, 0x00ab_cdef, 0xbfff, 0xf, 0x7f, true),
        (1, 1, 0xc001, 0, 0x2a, false),
    ]
    .into_iter()
    .enumerate()
    {
        let attr = AhAttr {
            dlid,
            sl,
            src_path_bits: bits,
            static_rate: 0,
            port,
            grh: grh.then_some(GrhAttr {
                dgid: Gid([0xfe; 16]),
                flow_label: 0x1_2345,
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0x20,
            }),
        };
        let ah = Ah::new(pd, &attr);
        let av = Av::parse(ah.as_bytes());
        let want = Av {
            port,
            pd,
            grh,
            src_path_bits: bits,
            dlid,
            sl,
            dest_qpn: 0,
            qkey: 0,
        };
        assert_eq!(av, want, "address vector {i}");
        // The rest of the segment (per work request): model writes, driver reads.
        let mut b = [0u8; 48];
        let full = Av {
            dest_qpn: 0x00fe_dcba + i as u32,
            qkey: 0x8001_0000 | i as u32,
            ..want
        };
        full.emit(&mut b);
        let d = hw::DatagramSeg::read_from_bytes(&b).unwrap();
        assert_eq!(d.dqpn.get(), full.dest_qpn);
        assert_eq!(d.qkey.get(), full.qkey);
        assert_eq!(d.dlid.get(), dlid);
        // What the model emits for the driver's fields equals the driver's own bytes where
        // both define them (the GRH fields beyond the model's are masked out).
        let mut ours = *ah.as_bytes();
        ours[0x08..0x0c].fill(0);
        ours[0x0c] &= 0xf0;
        ours[0x0d..0x20].fill(0);
        assert_eq!(&b[..32], &ours, "address vector {i} bytes");
    }
}

#[test]
fn remote_address_atomic_and_data_segments_agree_both_ways() {
    assert_eq!(seg::raddr::SIZE, size_of::<hw::RaddrSeg>());
    assert_eq!(seg::atomic::SIZE, size_of::<hw::AtomicSeg>());
    assert_eq!(seg::data::SIZE, size_of::<hw::DataSeg>());
    for k in [0u64, 1, 0x0123_4567_89ab_cdef, u64::MAX - 5] {
        let r = Raddr {
            va: k,
            rkey: (k >> 7) as u32 ^ 0x5a5a,
        };
        let mut b = [0u8; 16];
        r.emit(&mut b);
        let d = hw::RaddrSeg::read_from_bytes(&b).unwrap();
        assert_eq!((d.raddr.get(), d.rkey.get()), (r.va, r.rkey));
        let mut d = hw::RaddrSeg::new_zeroed();
        d.raddr.set(r.va);
        d.rkey.set(r.rkey);
        assert_eq!(Raddr::parse(d.as_bytes()), r);

        let a = Atomic {
            swap_add: k,
            compare: !k,
        };
        let mut b = [0u8; 16];
        a.emit(&mut b);
        let d = hw::AtomicSeg::read_from_bytes(&b).unwrap();
        assert_eq!((d.swap_add.get(), d.compare.get()), (a.swap_add, a.compare));
        let mut d = hw::AtomicSeg::new_zeroed();
        d.swap_add.set(a.swap_add);
        d.compare.set(a.compare);
        assert_eq!(Atomic::parse(d.as_bytes()), a);

        let s = Data {
            byte_count: (k as u32) & 0x7fff_ffff,
            lkey: (k >> 32) as u32,
            addr: k.rotate_left(13),
        };
        let mut b = [0u8; 16];
        s.emit(&mut b);
        let d = hw::DataSeg::read_from_bytes(&b).unwrap();
        assert_eq!(
            (d.byte_count.get(), d.lkey.get(), d.addr.get()),
            (s.byte_count, s.lkey, s.addr)
        );
        assert!(!Data::is_inline(&b));
        let mut d = hw::DataSeg::new_zeroed();
        d.byte_count.set(s.byte_count | drv_ctrl::INLINE);
        d.lkey.set(s.lkey);
        d.addr.set(s.addr);
        assert!(Data::is_inline(d.as_bytes()), "driver's inline bit");
        assert_eq!(
            seg::data::INLINE_LEN.get(d.as_bytes()),
            u64::from(s.byte_count)
        );
    }
    assert_eq!(hw::INVALID_LKEY, sim::mr::INVALID_LKEY);
}

#[test]
fn eq_context_written_by_the_driver_reads_the_same_in_the_model() {
    assert_eq!(eqc::SIZE, size_of::<hw::EqContext>());
    let mut e = hw::EqContext::default();
    e.flags.set(hw::EQ_STATE_ARMED);
    e.page_offset.set(0x0a0b);
    e.log_eq_size = 0x13;
    e.eq_period = 0x7e;
    e.eq_max_count = 0x81;
    e.intr = 0x2d;
    e.log_page_size = 0x21;
    e.mtt_base_addr_h = 0x9c;
    e.mtt_base_addr_l.set(0xdead_bee8);
    e.consumer_index.set(0x00ab_0001);
    e.producer_index.set(0x0000_cd02);
    let b = e.as_bytes();
    assert_eq!(eqc::STATUS.get(b), 0);
    assert_eq!(eqc::STATE.get(b), 0x9, "ARMED");
    assert_eq!(eqc::PAGE_OFFSET.get(b), 0x0a0b);
    assert_eq!(eqc::LOG_EQ_SIZE.get(b), 0x13);
    assert_eq!(eqc::EQ_PERIOD.get(b), 0x7e);
    assert_eq!(eqc::EQ_MAX_COUNT.get(b), 0x81);
    assert_eq!(eqc::INTR.get(b), 0x2d);
    assert_eq!(eqc::LOG_PAGE_SIZE.get(b), 0x21);
    assert_eq!(eqc::MTT_BASE_HI.get(b), 0x9c);
    assert_eq!(eqc::MTT_BASE_LO.get(b), 0xdead_bee8);
    assert_eq!(eqc::CONSUMER_INDEX.get(b), 0x00ab_0001);
    assert_eq!(eqc::PRODUCER_INDEX.get(b), 0x0000_cd02);
}

#[test]
fn cq_context_written_by_the_driver_reads_the_same_in_the_model() {
    assert_eq!(cqc::SIZE, size_of::<hw::CqContext>());
    let mut c = hw::CqContext::default();
    c.page_offset.set(0x0102);
    c.logsize_usrpage.set((17 << 24) | 0x00_0345);
    c.cq_period.set(0x1234);
    c.cq_max_count.set(0x8765);
    c.comp_eqn = 0x3c;
    c.log_page_size = 0x0e;
    c.mtt_base_addr_h = 0x71;
    c.mtt_base_addr_l.set(0x1000_0008);
    c.consumer_index.set(0x00ff_fffe);
    c.producer_index.set(0x0000_0003);
    c.db_rec_addr.set(0x0001_0002_0003_0008);
    let b = c.as_bytes();
    assert_eq!(cqc::STATE.get(b), 0);
    assert!(!cqc::COLLAPSED.get_bool(b));
    assert_eq!(cqc::PAGE_OFFSET.get(b), 0x0102);
    assert_eq!(cqc::LOG_CQ_SIZE.get(b), 17);
    assert_eq!(cqc::UAR.get(b), 0x345);
    assert_eq!(cqc::CQ_PERIOD.get(b), 0x1234);
    assert_eq!(cqc::CQ_MAX_COUNT.get(b), 0x8765);
    assert_eq!(cqc::COMP_EQN.get(b), 0x3c);
    assert_eq!(cqc::LOG_PAGE_SIZE.get(b), 0x0e);
    assert_eq!(cqc::MTT_BASE_HI.get(b), 0x71);
    assert_eq!(cqc::MTT_BASE_LO.get(b), 0x1000_0008);
    assert_eq!(cqc::CONSUMER_INDEX.get(b), 0x00ff_fffe);
    assert_eq!(cqc::PRODUCER_INDEX.get(b), 3);
    assert_eq!(cqc::DB_REC_ADDR.get(b), 0x0001_0002_0003_0008);
}

#[test]
fn mpt_entry_written_by_the_driver_reads_the_same_in_the_model() {
    assert_eq!(mpt::SIZE, size_of::<hw::MptEntry>());
    let mut m = hw::MptEntry::default();
    let flags = hw::mpt::SW_OWNS
        | hw::mpt::MIO
        | hw::mpt::REGION
        | hw::mpt::LOCAL_WRITE
        | hw::mpt::REMOTE_READ
        | hw::mpt::REMOTE_WRITE
        | hw::mpt::ATOMIC;
    m.flags.set(flags);
    m.key.set(0x5a00_0123);
    m.pd_flags.set(hw::mpt::PD_EN_INV | 0x1_0005);
    m.start.set(0x7fff_0000_1000);
    m.length.set(0x20_0000);
    m.lkey.set(0x0123_005a);
    m.mtt_addr.set(0x40);
    m.mtt_sz.set(9);
    m.entity_size.set(21);
    m.first_byte_offset.set(0x10);
    let b = m.as_bytes();
    assert_eq!(mpt::FLAGS.get_u32(b), flags);
    assert_eq!(mpt::STATUS.get(b), 0xf, "software owned");
    use sim::mr::flags as f;
    for (drv, model) in [
        (hw::mpt::LOCAL_READ, f::LOCAL_READ),
        (hw::mpt::LOCAL_WRITE, f::LOCAL_WRITE),
        (hw::mpt::REMOTE_READ, f::REMOTE_READ),
        (hw::mpt::REMOTE_WRITE, f::REMOTE_WRITE),
        (hw::mpt::ATOMIC, f::ATOMIC),
        (hw::mpt::PHYSICAL, f::PHYSICAL),
        (hw::mpt::REGION, f::REGION),
        (hw::mpt::MIO, f::MIO),
    ] {
        assert_eq!(drv, model, "MPT flag bit");
    }
    assert_eq!(mpt::KEY_INDEX.get(b), 0x123);
    assert_eq!(mpt::KEY_TAG.get(b), 0x5a);
    assert_eq!(mpt::PD.get(b), 0x1_0005);
    assert_eq!(mpt::START.get(b), 0x7fff_0000_1000);
    assert_eq!(mpt::LENGTH.get(b), 0x20_0000);
    assert_eq!(mpt::LKEY.get(b), 0x0123_005a);
    assert_eq!(mpt::MTT_ADDR.get(b), 0x40);
    assert_eq!(mpt::MTT_SZ.get(b), 9);
    assert_eq!(mpt::ENTITY_SIZE.get(b), 21);
    assert_eq!(mpt::FIRST_BYTE_OFFSET.get(b), 0x10);
}

#[test]
fn init_hca_written_by_the_driver_reads_the_same_in_the_model() {
    let mut m = hw::InitHca::default();
    m.version = 2;
    m.flags
        .set(hw::init_hca_flag::UD_AV_PORT | hw::init_hca_flag::COUNTERS);
    m.qpc_base.set(0x0001_0000_0000_0000);
    m.srqc_base.set(0x0002_0000_0000_0000);
    m.cqc_base.set(0x0003_0000_0000_0000);
    m.altc_base.set(0x0004_0000_0000_0000);
    m.auxc_base.set(0x0005_0000_0000_0000);
    m.eqc_base.set(0x0006_0000_0000_0000);
    m.rdmarc_base.set(0x0007_0000_0000_0000);
    m.mc_base.set(0x0008_0000_0000_0000);
    m.log_mc_entry_sz.set(9);
    m.log_mc_table_sz = 6;
    m.dmpt_base.set(0x0009_0000_0000_0000);
    m.log_mpt_sz = 19;
    m.mtt_base.set(0x000a_0000_0000_0000);
    m.cmpt_base.set(0x000b_0000_0000_0000);
    m.log_uar_sz = 7;
    m.uar_page_sz = 0;
    let mut b = m.as_bytes().to_vec();
    for (off, log) in [
        (hw::init_hca_log::QPC, 17u8),
        (hw::init_hca_log::SRQC, 10),
        (hw::init_hca_log::CQC, 16),
        (hw::init_hca_log::EQC, 9),
        (hw::init_hca_log::RDMARC, 4),
    ] {
        b[off] = log;
    }
    assert_eq!(init_hca::VERSION.get(&b), 2);
    assert_eq!(init_hca::FLAGS.get_u32(&b), 0x11);
    assert_eq!(sim::icm::INIT_HCA_UD_AV_PORT, hw::init_hca_flag::UD_AV_PORT);
    assert_eq!(sim::icm::INIT_HCA_COUNTERS, hw::init_hca_flag::COUNTERS);
    let base = |f: sim::be::Field| f.get_in_place(&b) >> 48;
    assert_eq!(base(init_hca::QPC_BASE), 1);
    assert_eq!(base(init_hca::SRQC_BASE), 2);
    assert_eq!(base(init_hca::CQC_BASE), 3);
    assert_eq!(base(init_hca::ALTC_BASE), 4);
    assert_eq!(base(init_hca::AUXC_BASE), 5);
    assert_eq!(base(init_hca::EQC_BASE), 6);
    assert_eq!(base(init_hca::RDMARC_BASE), 7);
    assert_eq!(base(init_hca::MC_BASE), 8);
    assert_eq!(base(init_hca::DMPT_BASE), 9);
    assert_eq!(base(init_hca::MTT_BASE), 0xa);
    assert_eq!(base(init_hca::CMPT_BASE), 0xb);
    assert_eq!(init_hca::LOG_NUM_QPS.get(&b), 17);
    assert_eq!(init_hca::LOG_NUM_SRQS.get(&b), 10);
    assert_eq!(init_hca::LOG_NUM_CQS.get(&b), 16);
    assert_eq!(init_hca::LOG_NUM_EQS.get(&b), 9);
    assert_eq!(init_hca::LOG_RD_PER_QP.get(&b), 4);
    assert_eq!(init_hca::LOG_MC_ENTRY_SZ.get(&b), 9);
    assert_eq!(init_hca::LOG_MC_TABLE_SZ.get(&b), 6);
    assert_eq!(init_hca::LOG_NUM_MPTS.get(&b), 19);
    assert_eq!(init_hca::LOG_UAR_SZ.get(&b), 7);
    assert_eq!(init_hca::UAR_PAGE_SZ.get(&b), 0);
}

#[test]
fn qp_context_offsets_agree() {
    // The model's QPC accessors read at `qp::off` (relative to the context, which the
    // modify-QP mailbox carries at +8 in both).
    type Q = hw::QpContext;
    type P = hw::QpPath;
    for (name, model, driver) in [
        ("flags", off::FLAGS, offset_of!(Q, flags)),
        ("pd", off::PD, offset_of!(Q, pd)),
        ("mtu_msgmax", off::MTU_MSGMAX, offset_of!(Q, mtu_msgmax)),
        (
            "rq_size_stride",
            off::RQ_SIZE_STRIDE,
            offset_of!(Q, rq_size_stride),
        ),
        (
            "sq_size_stride",
            off::SQ_SIZE_STRIDE,
            offset_of!(Q, sq_size_stride),
        ),
        ("rlkey", off::RLKEY, offset_of!(Q, rlkey_roce_mode)),
        ("usr_page", off::USR_PAGE, offset_of!(Q, usr_page)),
        ("local_qpn", off::LOCAL_QPN, offset_of!(Q, local_qpn)),
        ("remote_qpn", off::REMOTE_QPN, offset_of!(Q, remote_qpn)),
        ("pri_path", off::PRI_PATH, offset_of!(Q, pri_path)),
        ("alt_path", off::ALT_PATH, offset_of!(Q, alt_path)),
        ("path size", off::PATH_SIZE, size_of::<P>()),
        ("params1", off::PARAMS1, offset_of!(Q, params1)),
        (
            "next_send_psn",
            off::NEXT_SEND_PSN,
            offset_of!(Q, next_send_psn),
        ),
        ("cqn_send", off::CQN_SEND, offset_of!(Q, cqn_send)),
        ("params2", off::PARAMS2, offset_of!(Q, params2)),
        (
            "rnr_nextrecvpsn",
            off::RNR_NEXTRECVPSN,
            offset_of!(Q, rnr_nextrecvpsn),
        ),
        ("cqn_recv", off::CQN_RECV, offset_of!(Q, cqn_recv)),
        ("db_rec_addr", off::DB_REC_ADDR, offset_of!(Q, db_rec_addr)),
        ("qkey", off::QKEY, offset_of!(Q, qkey)),
        ("srqn", off::SRQN, offset_of!(Q, srqn)),
        (
            "rq_wqe_counter",
            off::RQ_WQE_COUNTER,
            offset_of!(Q, rq_wqe_counter),
        ),
        (
            "sq_wqe_counter",
            off::SQ_WQE_COUNTER,
            offset_of!(Q, sq_wqe_counter),
        ),
        (
            "log_page_size",
            off::LOG_PAGE_SIZE,
            offset_of!(Q, log_page_size),
        ),
        (
            "mtt_base_hi",
            off::MTT_BASE_HI,
            offset_of!(Q, mtt_base_addr_h),
        ),
        (
            "path.pkey_index",
            off::PATH_PKEY_INDEX,
            offset_of!(P, pkey_index),
        ),
        (
            "path.counter",
            off::PATH_COUNTER,
            offset_of!(P, counter_index),
        ),
        (
            "path.grh_mylmc",
            off::PATH_GRH_MYLMC,
            offset_of!(P, grh_mylmc),
        ),
        ("path.rlid", off::PATH_RLID, offset_of!(P, rlid)),
        ("path.ackto", off::PATH_ACKTO, offset_of!(P, ackto)),
        (
            "path.sched_queue",
            off::PATH_SCHED_QUEUE,
            offset_of!(P, sched_queue),
        ),
    ] {
        assert_eq!(model, driver, "QPC {name}");
    }
}

/// EQEs the model emits, read through the driver's typed entry (`hw::Eqe` and its data
/// views) and parsed as the EQ handler parses them (`eq::EqEvent::parse`).
#[test]
fn eqe_written_by_the_model_reads_the_same_through_the_driver_layout() {
    use crate::cmd::EventCompletion;
    use crate::eq::EqEvent;
    assert_eq!(EQE_SIZE as usize, size_of::<hw::Eqe>());
    for (i, ev) in [
        Event::Comp { cqn: 0x00ab_cdef },
        Event::CqError {
            cqn: 0x81,
            syndrome: CqErrorSyndrome::AccessViolation,
        },
        Event::PortChange {
            port: 2,
            active: true,
        },
        Event::PortChange {
            port: 1,
            active: false,
        },
        Event::Cmd {
            token: 0xbeef,
            status: 0x0c,
            out_param: 0x0102_0304_0506_0708,
        },
        Event::SrqLimit { srqn: 0x00c0_ffee },
        Event::PortMgmtChange {
            port: 2,
            changed: 1 << 2,
            lid: 7,
            sm_lid: 1,
            sm_sl: 0,
            gid_prefix: 0xfe80_0000_0000_0000,
        },
        Event::RecoverableError {
            port: 1,
            kind: sim::eq::CableError::Unsupported,
        },
    ]
    .into_iter()
    .enumerate()
    {
        let owner = i % 2 == 1;
        let b = ev.emit(owner);
        let e = hw::Eqe::read_from_bytes(&b).unwrap();
        assert_eq!(e.event_type, ev.event_type(), "{ev:?}");
        assert_eq!(e.subtype, ev.subtype(), "{ev:?}");
        assert_eq!(e.owner & hw::EQE_OWNER != 0, owner, "{ev:?}");
        let want = match ev {
            Event::Comp { cqn } => EqEvent::Comp { cqn },
            Event::CqError { cqn, syndrome } => {
                assert_eq!(e.queue().syndrome, syndrome as u8);
                EqEvent::CqError { cqn }
            }
            Event::PortChange { port, .. } => EqEvent::PortChange { port },
            Event::Cmd {
                token,
                status,
                out_param,
            } => EqEvent::Cmd(EventCompletion {
                token,
                status,
                out_param,
            }),
            Event::SrqLimit { srqn } => EqEvent::SrqLimit { srqn },
            Event::PortMgmtChange { port, .. } => EqEvent::PortMngChg { port },
            Event::RecoverableError { port, kind } => EqEvent::RecoverableError {
                port,
                subtype: kind as u8,
            },
            Event::EqOverflow { .. } => unreachable!(),
        };
        assert_eq!(crate::eq::EqEvent::parse(&e), want, "{ev:?}");
    }
}

#[test]
fn srq_context_written_by_the_driver_reads_the_same_in_the_model() {
    use sim::srq::{srq_wqe, srqc, SRQC_SIZE};
    assert_eq!(SRQC_SIZE, size_of::<crate::srq::SrqContext>());
    let mut c = crate::srq::SrqContext::default();
    c.state_logsize_srqn.set((9 << 24) | 0x00_0a41);
    c.logstride = 2;
    c.log_page_size = 0x0d;
    c.mtt_base_addr_h = 0x12;
    c.mtt_base_addr_l.set(0x3456_7808);
    c.pd.set(0x00_0077);
    c.limit_watermark.set(0x0102);
    c.wqe_counter.set(0xfedc);
    c.db_rec_addr.set(0x0001_0002_0003_0008);
    let b = c.as_bytes();
    assert_eq!(srqc::STATE.get(b), 0);
    assert_eq!(srqc::LOG_SIZE.get(b), 9);
    assert_eq!(srqc::SRQN.get(b), 0xa41);
    assert_eq!(srqc::LOGSTRIDE.get(b), 2);
    assert_eq!(srqc::XRCD.get(b), 0);
    assert_eq!(srqc::CQN.get(b), 0);
    assert_eq!(srqc::LOG_PAGE_SIZE.get(b), 0x0d);
    assert_eq!(srqc::MTT_BASE_HI.get(b), 0x12);
    assert_eq!(srqc::MTT_BASE_LO.get(b), 0x3456_7808);
    assert_eq!(srqc::PD.get(b), 0x77);
    assert_eq!(srqc::LIMIT_WATERMARK.get(b), 0x0102);
    assert_eq!(srqc::WQE_COUNTER.get(b), 0xfedc);
    assert_eq!(srqc::DB_REC_ADDR.get(b), 0x0001_0002_0003_0008);
    // The next segment of an SRQ WQE: the driver's free-list link at bytes 2..3.
    let mut w = [0u8; crate::srq::NEXT_SEG];
    w[2..4].copy_from_slice(&0x1234u16.to_be_bytes());
    assert_eq!(srq_wqe::NEXT_WQE_INDEX.get(&w), 0x1234);
}

#[test]
fn qp_context_bits_and_optpar_agree() {
    use hw::{optpar as drv_opt, qpc as d};
    use sim::qp::{optpar as sim_opt, qpc as m, QpState, ServiceType};
    // Every driver shift or bit mask against the model field it places a value in.
    let shifts: [(&str, u32, sim::be::Field); 10] = [
        ("state", d::STATE_SHIFT, m::STATE),
        ("st", d::ST_SHIFT, m::ST),
        ("mtu", d::MTU_SHIFT, m::MTU),
        ("sra_max", d::SRA_MAX_SHIFT, m::SRA_MAX),
        ("retry_count", d::RETRY_COUNT_SHIFT, m::RETRY_COUNT),
        ("rnr_retry", d::RNR_RETRY_SHIFT, m::RNR_RETRY),
        ("rra_max", d::RRA_MAX_SHIFT, m::RRA_MAX),
        ("min_rnr_timer", d::MIN_RNR_TIMER_SHIFT, m::MIN_RNR_TIMER),
        ("path.ackto", d::ACKTO_SHIFT, m::path::ACKTO),
        ("path.sched_port", d::SCHED_PORT_SHIFT, m::path::SCHED_PORT),
    ];
    for (name, drv, model) in shifts {
        assert_eq!(drv, model.shift, "QPC {name} shift");
    }
    assert_eq!(d::SCHED_SL_SHIFT, m::path::SCHED_SL.shift, "sched_queue SL");
    let masks: [(&str, u64, sim::be::Field, u64); 9] = [
        ("pm_state MIGRATED", d::PM_MIGRATED.into(), m::PM_STATE, 3),
        ("rlkey", d::RLKEY.into(), m::RLKEY, 1),
        ("ack_req_freq", d::ACK_REQ_FREQ.into(), m::ACK_REQ_FREQ, 8),
        ("fre", d::FRE.into(), m::FRE, 1),
        ("rre", d::RRE.into(), m::RRE, 1),
        ("rwe", d::RWE.into(), m::RWE, 1),
        ("rae", d::RAE.into(), m::RAE, 1),
        ("ric", d::RIC.into(), m::RIC, 1),
        ("srq_en", d::SRQ_EN.into(), m::SRQ_EN, 1),
    ];
    for (name, drv, model, v) in masks {
        assert_eq!(drv, model.place(v), "QPC {name}");
    }
    assert_eq!(u64::from(d::GRH), m::path::GRH.place(1), "path.grh");
    for (drv, model) in [
        (d::state::RESET, QpState::Reset),
        (d::state::INIT, QpState::Init),
        (d::state::RTR, QpState::Rtr),
        (d::state::RTS, QpState::Rts),
        (d::state::ERR, QpState::Err),
    ] {
        assert_eq!(drv, model as u32, "QP state {model:?}");
    }
    for (drv, model) in [
        (d::st::RC, ServiceType::Rc),
        (d::st::UC, ServiceType::Uc),
        (d::st::UD, ServiceType::Ud),
        (d::st::MLX, ServiceType::Mlx),
    ] {
        assert_eq!(drv, model as u32, "service type {model:?}");
    }
    let optpars = [
        ("RRE", drv_opt::RRE, sim_opt::RRE),
        ("RAE", drv_opt::RAE, sim_opt::RAE),
        ("RWE", drv_opt::RWE, sim_opt::RWE),
        ("PKEY_INDEX", drv_opt::PKEY_INDEX, sim_opt::PKEY_INDEX),
        ("Q_KEY", drv_opt::Q_KEY, sim_opt::QKEY),
        ("RNR_TIMEOUT", drv_opt::RNR_TIMEOUT, sim_opt::RNR_TIMEOUT),
        (
            "PRIMARY_ADDR_PATH",
            drv_opt::PRIMARY_ADDR_PATH,
            sim_opt::PRIMARY_PATH,
        ),
        ("SRA_MAX", drv_opt::SRA_MAX, sim_opt::SRA_MAX),
        ("RRA_MAX", drv_opt::RRA_MAX, sim_opt::RRA_MAX),
        ("RETRY_COUNT", drv_opt::RETRY_COUNT, sim_opt::RETRY_COUNT),
        ("RNR_RETRY", drv_opt::RNR_RETRY, sim_opt::RNR_RETRY),
        ("ACK_TIMEOUT", drv_opt::ACK_TIMEOUT, sim_opt::ACK_TIMEOUT),
        ("SCHED_QUEUE", drv_opt::SCHED_QUEUE, sim_opt::SCHED_QUEUE),
        (
            "COUNTER_INDEX",
            drv_opt::COUNTER_INDEX,
            sim_opt::COUNTER_INDEX,
        ),
    ];
    for (name, drv, model) in optpars {
        assert_eq!(drv, model, "optpar {name}");
        assert_eq!(drv.count_ones(), 1, "optpar {name} is one bit");
    }
    let all = optpars.iter().fold(0, |acc, o| acc | o.1);
    assert_eq!(
        all & !sim_opt::KNOWN,
        0,
        "every driver optpar bit is one the model takes"
    );
}

/// Distinct, width-filling values for every QPC field both sides name.
struct QpcValues {
    state: u32,
    st: u32,
    pd: u32,
    mtu: u8,
    log_msg_max: u8,
    log_rq_size: u8,
    log_rq_stride: u8,
    log_sq_size: u8,
    log_sq_stride: u8,
    usr_page: u32,
    local_qpn: u32,
    remote_qpn: u32,
    pkey_index: u8,
    counter_index: u8,
    src_path_bits: u8,
    rlid: u16,
    ackto: u8,
    port_bit: u8,
    sl: u8,
    sra_max: u32,
    retry_count: u32,
    rnr_retry: u32,
    next_send_psn: u32,
    cqn_send: u32,
    rra_max: u32,
    min_rnr_timer: u32,
    next_rcv_psn: u32,
    cqn_recv: u32,
    db_rec_addr: u64,
    qkey: u32,
    srqn: u32,
    rq_wqe_counter: u16,
    sq_wqe_counter: u16,
    log_page_size: u8,
    mtt_hi: u8,
    mtt_lo: u32,
}

const QPC_VALUES: QpcValues = QpcValues {
    state: 3,
    st: 7,
    pd: 0x00ab_cdef,
    mtu: 5,
    log_msg_max: 0x1d,
    log_rq_size: 0xc,
    log_rq_stride: 5,
    log_sq_size: 0xa,
    log_sq_stride: 6,
    usr_page: 0x0012_3456,
    local_qpn: 0x00fe_dcba,
    remote_qpn: 0x0065_4321,
    pkey_index: 0x5a,
    counter_index: 0xc3,
    src_path_bits: 0x3c,
    rlid: 0xbeef,
    ackto: 0x15,
    port_bit: 1,
    sl: 0xb,
    sra_max: 5,
    retry_count: 6,
    rnr_retry: 3,
    next_send_psn: 0x00aa_5501,
    cqn_send: 0x0033_4455,
    rra_max: 4,
    min_rnr_timer: 0x1b,
    next_rcv_psn: 0x0055_aa02,
    cqn_recv: 0x0066_7788,
    db_rec_addr: 0x0001_0002_0003_0040,
    qkey: 0x8001_2345,
    srqn: 0x00c0_ffee,
    rq_wqe_counter: 0xfedc,
    sq_wqe_counter: 0x1234,
    log_page_size: 0x2a,
    mtt_hi: 0x9e,
    mtt_lo: 0xdead_bee8,
};

#[test]
fn qp_context_written_by_the_driver_reads_the_same_in_the_model() {
    use hw::qpc as d;
    use sim::qp::{qpc as m, ServiceType};
    let v = QPC_VALUES;
    let mut c = hw::QpContext::new_zeroed();
    c.flags
        .set((v.state << d::STATE_SHIFT) | (v.st << d::ST_SHIFT) | d::PM_MIGRATED);
    c.pd.set(v.pd);
    c.mtu_msgmax = (v.mtu << d::MTU_SHIFT) | v.log_msg_max;
    c.rq_size_stride = (v.log_rq_size << 3) | v.log_rq_stride;
    c.sq_size_stride = (v.log_sq_size << 3) | v.log_sq_stride;
    c.rlkey_roce_mode = d::RLKEY;
    c.usr_page.set(v.usr_page);
    c.local_qpn.set(v.local_qpn);
    c.remote_qpn.set(v.remote_qpn);
    c.pri_path.pkey_index = v.pkey_index;
    c.pri_path.counter_index = v.counter_index;
    c.pri_path.grh_mylmc = d::GRH | v.src_path_bits;
    c.pri_path.rlid.set(v.rlid);
    c.pri_path.ackto = v.ackto << d::ACKTO_SHIFT;
    c.pri_path.sched_queue =
        d::SCHED_QUEUE_IB | (v.port_bit << d::SCHED_PORT_SHIFT) | (v.sl << d::SCHED_SL_SHIFT);
    c.params1.set(
        d::ACK_REQ_FREQ
            | d::FRE
            | (v.sra_max << d::SRA_MAX_SHIFT)
            | (v.retry_count << d::RETRY_COUNT_SHIFT)
            | (v.rnr_retry << d::RNR_RETRY_SHIFT),
    );
    c.next_send_psn.set(v.next_send_psn);
    c.cqn_send.set(v.cqn_send);
    c.params2
        .set(d::RRE | d::RWE | d::RAE | d::RIC | (v.rra_max << d::RRA_MAX_SHIFT));
    c.rnr_nextrecvpsn
        .set((v.min_rnr_timer << d::MIN_RNR_TIMER_SHIFT) | v.next_rcv_psn);
    c.cqn_recv.set(v.cqn_recv);
    c.db_rec_addr.set(v.db_rec_addr);
    c.qkey.set(v.qkey);
    c.srqn.set(d::SRQ_EN | v.srqn);
    c.rq_wqe_counter.set(v.rq_wqe_counter);
    c.sq_wqe_counter.set(v.sq_wqe_counter);
    c.log_page_size = v.log_page_size;
    c.mtt_base_addr_h = v.mtt_hi;
    c.mtt_base_addr_l.set(v.mtt_lo);
    let b = c.as_bytes();
    assert_eq!(b.len(), sim::qp::QPC_SIZE);
    let g = |f: sim::be::Field| f.get(b);
    assert_eq!(g(m::STATE), u64::from(v.state), "{:?}", m::STATE);
    assert_eq!(g(m::ST), u64::from(v.st), "{:?}", m::ST);
    assert_eq!(g(m::PM_STATE), 3, "MIGRATED");
    assert_eq!(g(m::PD), u64::from(v.pd), "{:?}", m::PD);
    assert_eq!(g(m::MTU), u64::from(v.mtu), "{:?}", m::MTU);
    assert_eq!(
        g(m::LOG_MSG_MAX),
        u64::from(v.log_msg_max),
        "{:?}",
        m::LOG_MSG_MAX
    );
    assert_eq!(
        g(m::LOG_RQ_SIZE),
        u64::from(v.log_rq_size),
        "{:?}",
        m::LOG_RQ_SIZE
    );
    assert_eq!(
        g(m::LOG_RQ_STRIDE),
        u64::from(v.log_rq_stride),
        "{:?}",
        m::LOG_RQ_STRIDE
    );
    assert_eq!(
        g(m::LOG_SQ_SIZE),
        u64::from(v.log_sq_size),
        "{:?}",
        m::LOG_SQ_SIZE
    );
    assert_eq!(
        g(m::LOG_SQ_STRIDE),
        u64::from(v.log_sq_stride),
        "{:?}",
        m::LOG_SQ_STRIDE
    );
    assert_eq!(g(m::RLKEY), 1);
    assert_eq!(g(m::USR_PAGE), u64::from(v.usr_page), "{:?}", m::USR_PAGE);
    assert_eq!(
        g(m::LOCAL_QPN),
        u64::from(v.local_qpn),
        "{:?}",
        m::LOCAL_QPN
    );
    assert_eq!(
        g(m::REMOTE_QPN),
        u64::from(v.remote_qpn),
        "{:?}",
        m::REMOTE_QPN
    );
    assert_eq!(
        g(m::pri::PKEY_INDEX),
        u64::from(v.pkey_index),
        "{:?}",
        m::pri::PKEY_INDEX
    );
    assert_eq!(
        g(m::pri::COUNTER_INDEX),
        u64::from(v.counter_index),
        "{:?}",
        m::pri::COUNTER_INDEX
    );
    assert_eq!(g(m::pri::GRH), 1);
    assert_eq!(
        g(m::pri::SRC_PATH_BITS),
        u64::from(v.src_path_bits),
        "{:?}",
        m::pri::SRC_PATH_BITS
    );
    assert_eq!(g(m::pri::RLID), u64::from(v.rlid), "{:?}", m::pri::RLID);
    assert_eq!(g(m::pri::ACKTO), u64::from(v.ackto), "{:?}", m::pri::ACKTO);
    assert_eq!(
        g(m::pri::SCHED_PORT),
        u64::from(v.port_bit),
        "{:?}",
        m::pri::SCHED_PORT
    );
    assert_eq!(
        g(m::pri::SCHED_SL),
        u64::from(v.sl),
        "{:?}",
        m::pri::SCHED_SL
    );
    assert_eq!(g(m::ACK_REQ_FREQ), 8);
    assert_eq!(g(m::FRE), 1);
    assert_eq!(g(m::SRA_MAX), u64::from(v.sra_max), "{:?}", m::SRA_MAX);
    assert_eq!(
        g(m::RETRY_COUNT),
        u64::from(v.retry_count),
        "{:?}",
        m::RETRY_COUNT
    );
    assert_eq!(
        g(m::RNR_RETRY),
        u64::from(v.rnr_retry),
        "{:?}",
        m::RNR_RETRY
    );
    assert_eq!(
        g(m::NEXT_SEND_PSN),
        u64::from(v.next_send_psn),
        "{:?}",
        m::NEXT_SEND_PSN
    );
    assert_eq!(g(m::CQN_SEND), u64::from(v.cqn_send), "{:?}", m::CQN_SEND);
    assert_eq!(g(m::RRA_MAX), u64::from(v.rra_max), "{:?}", m::RRA_MAX);
    for f in [m::RRE, m::RWE, m::RAE, m::RIC, m::SRQ_EN] {
        assert_eq!(g(f), 1, "{f:?}");
    }
    assert_eq!(
        g(m::MIN_RNR_TIMER),
        u64::from(v.min_rnr_timer),
        "{:?}",
        m::MIN_RNR_TIMER
    );
    assert_eq!(
        g(m::NEXT_RCV_PSN),
        u64::from(v.next_rcv_psn),
        "{:?}",
        m::NEXT_RCV_PSN
    );
    assert_eq!(g(m::CQN_RECV), u64::from(v.cqn_recv), "{:?}", m::CQN_RECV);
    assert_eq!(g(m::DB_REC_ADDR), v.db_rec_addr);
    assert_eq!(g(m::QKEY), u64::from(v.qkey), "{:?}", m::QKEY);
    assert_eq!(g(m::SRQN), u64::from(v.srqn), "{:?}", m::SRQN);
    assert_eq!(
        g(m::RQ_WQE_COUNTER),
        u64::from(v.rq_wqe_counter),
        "{:?}",
        m::RQ_WQE_COUNTER
    );
    assert_eq!(
        g(m::SQ_WQE_COUNTER),
        u64::from(v.sq_wqe_counter),
        "{:?}",
        m::SQ_WQE_COUNTER
    );
    assert_eq!(
        g(m::LOG_PAGE_SIZE),
        u64::from(v.log_page_size),
        "{:?}",
        m::LOG_PAGE_SIZE
    );
    assert_eq!(
        g(m::MTT_BASE_HI),
        u64::from(v.mtt_hi),
        "{:?}",
        m::MTT_BASE_HI
    );
    assert_eq!(
        g(m::MTT_BASE_LO),
        u64::from(v.mtt_lo),
        "{:?}",
        m::MTT_BASE_LO
    );
    // And through the model's QP accessors, as its commands and data path read it.
    let mut q = sim::qp::Qp::new(v.local_qpn);
    q.ctx = b.to_vec();
    assert_eq!(q.service_type(), Some(ServiceType::Mlx));
    assert_eq!(q.port(), v.port_bit + 1);
    assert_eq!(q.sl(), v.sl);
    assert_eq!(q.srqn(), Some(v.srqn));
    assert_eq!(
        q.mtt_base(),
        (u64::from(v.mtt_hi) << 32) | u64::from(v.mtt_lo)
    );
    assert_eq!(
        q.remote_access(),
        sim::qp::RemoteAccess {
            read: true,
            write: true,
            atomic: true
        }
    );
}

#[test]
fn qp_context_written_by_the_model_reads_the_same_through_the_driver_layout() {
    use hw::qpc as d;
    use sim::qp::qpc as m;
    let v = QPC_VALUES;
    let mut b = vec![0u8; sim::qp::QPC_SIZE];
    let mut put = |f: sim::be::Field, x: u64| {
        assert_eq!(x & !f.mask(), 0, "{f:?}: test value wider than the field");
        f.set(&mut b, x)
    };
    put(m::STATE, v.state.into());
    put(m::ST, v.st.into());
    put(m::PM_STATE, 3);
    put(m::PD, v.pd.into());
    put(m::MTU, v.mtu.into());
    put(m::LOG_MSG_MAX, v.log_msg_max.into());
    put(m::LOG_RQ_SIZE, v.log_rq_size.into());
    put(m::LOG_RQ_STRIDE, v.log_rq_stride.into());
    put(m::LOG_SQ_SIZE, v.log_sq_size.into());
    put(m::LOG_SQ_STRIDE, v.log_sq_stride.into());
    put(m::RLKEY, 1);
    put(m::USR_PAGE, v.usr_page.into());
    put(m::LOCAL_QPN, v.local_qpn.into());
    put(m::REMOTE_QPN, v.remote_qpn.into());
    put(m::pri::PKEY_INDEX, v.pkey_index.into());
    put(m::pri::COUNTER_INDEX, v.counter_index.into());
    put(m::pri::GRH, 1);
    put(m::pri::SRC_PATH_BITS, v.src_path_bits.into());
    put(m::pri::RLID, v.rlid.into());
    put(m::pri::ACKTO, v.ackto.into());
    put(m::pri::SCHED_PORT, v.port_bit.into());
    put(m::pri::SCHED_SL, v.sl.into());
    put(m::ACK_REQ_FREQ, 8);
    put(m::FRE, 1);
    put(m::SRA_MAX, v.sra_max.into());
    put(m::RETRY_COUNT, v.retry_count.into());
    put(m::RNR_RETRY, v.rnr_retry.into());
    put(m::NEXT_SEND_PSN, v.next_send_psn.into());
    put(m::CQN_SEND, v.cqn_send.into());
    put(m::RRA_MAX, v.rra_max.into());
    for f in [m::RRE, m::RWE, m::RAE, m::RIC, m::SRQ_EN] {
        put(f, 1);
    }
    put(m::MIN_RNR_TIMER, v.min_rnr_timer.into());
    put(m::NEXT_RCV_PSN, v.next_rcv_psn.into());
    put(m::CQN_RECV, v.cqn_recv.into());
    put(m::DB_REC_ADDR, v.db_rec_addr);
    put(m::QKEY, v.qkey.into());
    put(m::SRQN, v.srqn.into());
    put(m::RQ_WQE_COUNTER, v.rq_wqe_counter.into());
    put(m::SQ_WQE_COUNTER, v.sq_wqe_counter.into());
    put(m::LOG_PAGE_SIZE, v.log_page_size.into());
    put(m::MTT_BASE_HI, v.mtt_hi.into());
    put(m::MTT_BASE_LO, v.mtt_lo.into());
    let c = hw::QpContext::read_from_bytes(&b).expect("248 bytes");
    assert_eq!(
        c.flags.get(),
        (v.state << d::STATE_SHIFT) | (v.st << d::ST_SHIFT) | d::PM_MIGRATED
    );
    assert_eq!(c.pd.get(), v.pd);
    assert_eq!(c.mtu_msgmax, (v.mtu << d::MTU_SHIFT) | v.log_msg_max);
    assert_eq!(c.rq_size_stride, (v.log_rq_size << 3) | v.log_rq_stride);
    assert_eq!(c.sq_size_stride, (v.log_sq_size << 3) | v.log_sq_stride);
    assert_eq!(c.rlkey_roce_mode, d::RLKEY);
    assert_eq!(c.usr_page.get(), v.usr_page);
    assert_eq!(c.local_qpn.get(), v.local_qpn);
    assert_eq!(c.remote_qpn.get(), v.remote_qpn);
    let p = &c.pri_path;
    assert_eq!(p.pkey_index, v.pkey_index);
    assert_eq!(p.counter_index, v.counter_index);
    assert_eq!(p.grh_mylmc, d::GRH | v.src_path_bits);
    assert_eq!(p.rlid.get(), v.rlid);
    assert_eq!(p.ackto, v.ackto << d::ACKTO_SHIFT);
    assert_eq!(
        p.sched_queue,
        (v.port_bit << d::SCHED_PORT_SHIFT) | (v.sl << d::SCHED_SL_SHIFT)
    );
    assert_eq!(
        c.params1.get(),
        d::ACK_REQ_FREQ
            | d::FRE
            | (v.sra_max << d::SRA_MAX_SHIFT)
            | (v.retry_count << d::RETRY_COUNT_SHIFT)
            | (v.rnr_retry << d::RNR_RETRY_SHIFT)
    );
    assert_eq!(c.next_send_psn.get(), v.next_send_psn);
    assert_eq!(c.cqn_send.get(), v.cqn_send);
    assert_eq!(
        c.params2.get(),
        d::RRE | d::RWE | d::RAE | d::RIC | (v.rra_max << d::RRA_MAX_SHIFT)
    );
    assert_eq!(
        c.rnr_nextrecvpsn.get(),
        (v.min_rnr_timer << d::MIN_RNR_TIMER_SHIFT) | v.next_rcv_psn
    );
    assert_eq!(c.cqn_recv.get(), v.cqn_recv);
    assert_eq!(c.db_rec_addr.get(), v.db_rec_addr);
    assert_eq!(c.qkey.get(), v.qkey);
    assert_eq!(c.srqn.get(), d::SRQ_EN | v.srqn);
    assert_eq!(c.rq_wqe_counter.get(), v.rq_wqe_counter);
    assert_eq!(c.sq_wqe_counter.get(), v.sq_wqe_counter);
    assert_eq!(c.log_page_size, v.log_page_size);
    assert_eq!(c.mtt_base_addr_h, v.mtt_hi);
    assert_eq!(c.mtt_base_addr_l.get(), v.mtt_lo);
}

/// MADs (the driver's `mlx4::mad`, the model's `sim::mad`): the common header, the
/// directed-route SMP fields and the data start at the same places, the class and method
/// codes agree, and a directed-route SubnGet built by the driver reads back field by field
/// through the model's view.
#[test]
fn mad_layout_and_codes_agree_and_a_driver_smp_parses_in_the_model() {
    use crate::mad::{self as drv, Mad};
    use sim::mad::{self as m, dr, hdr};

    assert_eq!(size_of::<Mad>(), m::MAD_BYTES);
    let fields = [
        ("base_version", 0, hdr::BASE_VERSION),
        ("mgmt_class", offset_of!(Mad, mgmt_class), hdr::MGMT_CLASS),
        (
            "class_version",
            offset_of!(Mad, class_version),
            hdr::CLASS_VERSION,
        ),
        ("method", offset_of!(Mad, method), hdr::METHOD),
        ("status", offset_of!(Mad, status), hdr::STATUS),
        ("tid", offset_of!(Mad, tid), hdr::TID),
        ("attr_id", offset_of!(Mad, attr_id), hdr::ATTR_ID),
        ("attr_mod", offset_of!(Mad, attr_mod), hdr::ATTR_MOD),
        ("hop_ptr", offset_of!(Mad, hop_ptr), dr::HOP_PTR),
        ("hop_cnt", offset_of!(Mad, hop_cnt), dr::HOP_CNT),
        ("dr_slid", offset_of!(Mad, dr_slid), dr::DR_SLID),
        ("dr_dlid", offset_of!(Mad, dr_dlid), dr::DR_DLID),
    ];
    for (name, drv_off, f) in fields {
        assert_eq!(drv_off, f.off, "MAD {name}: driver vs model offset");
    }
    assert_eq!(offset_of!(Mad, data), m::DATA);
    assert_eq!(drv::SMP_DATA_LEN, m::SMP_DATA_LEN);
    assert_eq!(
        offset_of!(Mad, data) + drv::INITIAL_PATH.start,
        dr::INITIAL_PATH
    );
    assert_eq!(size_of::<Mad>() - offset_of!(Mad, data), m::GS_DATA_LEN);
    assert_eq!(u64::from(drv::DR_DIRECTION), dr::D.mask() << dr::D.shift);
    assert_eq!(drv::VERSION, m::VERSION);
    assert_eq!(
        [
            drv::class::SUBN_LID,
            drv::class::SUBN_DR,
            drv::class::PERF_MGMT
        ],
        [m::class::SUBN_LID, m::class::SUBN_DR, m::class::PERF_MGMT]
    );
    assert_eq!(
        [drv::method::GET, drv::method::SET, drv::method::GET_RESP],
        [m::method::GET, m::method::SET, m::method::GET_RESP]
    );

    let data: [u8; 64] = std::array::from_fn(|i| i as u8 ^ 0x5A);
    let smp = crate::smp::Smp {
        method: drv::method::SET,
        attr: 0x0015,
        attr_mod: 0x8000_0001,
        data,
    };
    let mut b = [0u8; drv::MAD_BYTES];
    crate::smp::build_dr_smp(&mut b, &smp, 2, 0x0123_4567_89AB_CDEF);
    let h = m::MadHeader::parse(&b);
    assert_eq!(
        h,
        m::MadHeader {
            base_version: 1,
            mgmt_class: m::class::SUBN_DR,
            class_version: 1,
            method: m::method::SET,
            status: 0,
            attr_id: 0x0015,
            attr_mod: 0x8000_0001,
        }
    );
    assert_eq!(hdr::TID.get(&b), 0x0123_4567_89AB_CDEF);
    assert_eq!((dr::HOP_PTR.get(&b), dr::HOP_CNT.get(&b)), (1, 1));
    assert_eq!((dr::DR_SLID.get(&b), dr::DR_DLID.get(&b)), (0xFFFF, 0xFFFF));
    assert!(!dr::D.get_bool(&b));
    assert_eq!(&b[m::SMP_DATA], &data[..]);
    assert_eq!(b[dr::INITIAL_PATH + 1], 2, "initial path[1]: the port");
}

/// The HCR (the driver's `hw::Hcr`, the model's `hcr::dw` dword indices and bits): every
/// command field the driver posts reads back the same through the model's definitions, and
/// the status and T bit the model sets read the same through the driver's.
#[test]
fn hcr_written_by_the_driver_reads_the_same_in_the_model() {
    use crate::hw::{Hcr, HcrCommand, HCR_STATUS_DWORD};
    use sim::hcr::{dw, HCR_E, HCR_GO, HCR_T};
    assert_eq!(size_of::<Hcr>(), 7 * 4);
    for c in [
        HcrCommand {
            opcode: 0xFFA,
            op_mod: 0xA5,
            in_param: 0x0123_4567_89AB_CDEF,
            in_mod: 0xFEDC_BA98,
            out_param: 0x1122_3344_5566_7788,
            token: 0xBEEF,
            toggle: 1,
            event: true,
        },
        HcrCommand {
            opcode: 0x019,
            op_mod: 0,
            in_param: 0x8000_0000_0000_0001,
            in_mod: 1,
            out_param: 0,
            token: 0xFFFF,
            toggle: 0,
            event: false,
        },
    ] {
        let d = Hcr::command(&c).dwords();
        assert_eq!(
            u64::from(d[dw::IN_PARAM_HI]) << 32 | u64::from(d[dw::IN_PARAM_LO]),
            c.in_param
        );
        assert_eq!(d[dw::IN_MOD], c.in_mod);
        assert_eq!(
            u64::from(d[dw::OUT_PARAM_HI]) << 32 | u64::from(d[dw::OUT_PARAM_LO]),
            c.out_param
        );
        assert_eq!(d[dw::TOKEN] >> dw::TOKEN_SHIFT, u32::from(c.token));
        assert_eq!(d[dw::TOKEN] & dw::TOKEN_RSVD, 0);
        let go = d[HCR_STATUS_DWORD];
        assert_eq!(go & dw::OPCODE_MASK, u32::from(c.opcode));
        assert_eq!(
            (go >> dw::OP_MOD_SHIFT) & dw::OP_MOD_MASK,
            u32::from(c.op_mod)
        );
        assert_ne!(go & HCR_GO, 0);
        assert_eq!(go & HCR_E != 0, c.event);
        assert_eq!(go & HCR_T != 0, c.toggle == 1);
        assert_eq!(go >> dw::STATUS_SHIFT, 0);
    }
    // The model completes a command: status in the status dword, GO clear, T kept.
    for status in [0u8, 0x03, 0x40, 0xFF] {
        for t in [0, HCR_T] {
            let word = u32::from(status) << dw::STATUS_SHIFT | t;
            assert_eq!(Hcr::status_of(word), status);
            assert_eq!(Hcr::toggle_of(word), u32::from(t != 0));
        }
    }
}

/// PerfMgt data (the driver's `mad::pma` views, the model's `pma` fields): counters the
/// model writes read the same through the driver's PortCounters and PortCountersExtended,
/// the capability bit through ClassPortInfo, and the driver's requests (port and counter
/// selection) read the same in the model; the attribute IDs and select bits agree.
#[test]
fn pma_data_agrees_both_ways() {
    use crate::mad::pma::{ClassPortInfo, DATA_LEN};
    use crate::port::{pma as drv, PortCounters};
    use sim::pma::{self as m, class_port_info, port_counters as pc, port_counters_ext as pcx};
    assert_eq!(
        [
            drv::CLASS_PORT_INFO,
            drv::PORT_COUNTERS,
            drv::PORT_COUNTERS_EXT
        ],
        [
            m::ATTR_CLASS_PORT_INFO,
            m::ATTR_PORT_COUNTERS,
            m::ATTR_PORT_COUNTERS_EXT
        ]
    );
    assert_eq!(drv::CAP_EXT_WIDTH, m::CAP_EXT_WIDTH);
    assert_eq!(
        drv::SEL_TRAFFIC,
        m::sel::XMIT_DATA | m::sel::RCV_DATA | m::sel::XMIT_PKTS | m::sel::RCV_PKTS
    );
    assert_eq!(
        drv::SELX_TRAFFIC,
        m::selx::XMIT_DATA | m::selx::RCV_DATA | m::selx::XMIT_PKTS | m::selx::RCV_PKTS
    );

    let mut d = [0u8; DATA_LEN];
    class_port_info::CAPABILITY_MASK.set(&mut d, u64::from(m::CAP_EXT_WIDTH | 0x0100));
    let info: &ClassPortInfo = zerocopy::transmute_ref!(&d);
    assert_eq!(info.capability_mask.get(), m::CAP_EXT_WIDTH | 0x0100);

    let mut d = [0u8; DATA_LEN];
    for (f, v) in [
        (pc::XMIT_DATA, 0xFFFF_FFFE),
        (pc::RCV_DATA, 0x0102_0304),
        (pc::XMIT_PKTS, 0x0506_0708),
        (pc::RCV_PKTS, 0x090A_0B0C),
    ] {
        f.set(&mut d, v);
    }
    let c = PortCounters::parse(&d, false);
    assert_eq!(
        (
            c.xmit_data_words,
            c.rcv_data_words,
            c.xmit_packets,
            c.rcv_packets
        ),
        (0xFFFF_FFFE, 0x0102_0304, 0x0506_0708, 0x090A_0B0C)
    );
    let mut d = [0u8; DATA_LEN];
    for (f, v) in [
        (pcx::XMIT_DATA, 0x0102_0304_0506_0708),
        (pcx::RCV_DATA, 0x1112_1314_1516_1718),
        (pcx::XMIT_PKTS, 0x2122_2324_2526_2728),
        (pcx::RCV_PKTS, 0x3132_3334_3536_3738),
        (pcx::UNICAST_XMIT_PKTS, 0x4142_4344_4546_4748),
    ] {
        f.set(&mut d, v);
    }
    let c = PortCounters::parse(&d, true);
    assert_eq!(
        (
            c.xmit_data_words,
            c.rcv_data_words,
            c.xmit_packets,
            c.rcv_packets
        ),
        (
            0x0102_0304_0506_0708,
            0x1112_1314_1516_1718,
            0x2122_2324_2526_2728,
            0x3132_3334_3536_3738
        )
    );

    for (port, select) in [(2u8, drv::SEL_TRAFFIC), (1, drv::SELX_TRAFFIC), (1, 0)] {
        let r = crate::port::counters_request(port, select);
        assert_eq!(pc::PORT_SELECT.get(&r), u64::from(port));
        assert_eq!(pc::COUNTER_SELECT.get(&r), u64::from(select));
        assert_eq!(pcx::PORT_SELECT.get(&r), u64::from(port));
        assert_eq!(pcx::COUNTER_SELECT.get(&r), u64::from(select));
        let rest = r.iter().enumerate().filter(|&(i, _)| i >= 4);
        assert!(
            rest.clone().all(|(_, &b)| b == 0),
            "{:?}",
            rest.collect::<Vec<_>>()
        );
    }
}

/// The LRH, BTH and DETH of QP0's MLX sends (the driver's `headers` views, the model's
/// `smp::hdr` fields and `UdHeader`): the headers the driver builds parse the same in the
/// model, and headers the model packs read the same through the driver's views.
#[test]
fn packet_headers_agree_both_ways() {
    use crate::headers::{Bth, Deth, Lrh, UdHeaders, BTH_UD_SEND_ONLY, LNH_IBA_LOCAL};
    use sim::smp::{UdHeader, LNH_LOCAL, UD_HEADER_BYTES};
    assert_eq!(size_of::<UdHeaders>(), UD_HEADER_BYTES);
    assert_eq!(BTH_UD_SEND_ONLY, sim::smp::BTH_UD_SEND_ONLY);
    assert_eq!(LNH_IBA_LOCAL, LNH_LOCAL);

    let h = UdHeaders {
        lrh: Lrh::new(15, 0xA, LNH_IBA_LOCAL, 0x1234, 0x5A5, 0xBEEF),
        bth: Bth::new(BTH_UD_SEND_ONLY, 3, 0x8001, 0x00AB_CDEF, 0x0012_3456),
        deth: Deth::new(0x8001_0002, 0x0076_5432),
    };
    let got = UdHeader::parse(h.as_bytes()).unwrap();
    assert_eq!(
        got,
        UdHeader {
            vl: 15,
            sl: 0xA,
            lnh: LNH_LOCAL,
            dlid: 0x1234,
            pkt_len_words: 0x5A5,
            slid: 0xBEEF,
            opcode: BTH_UD_SEND_ONLY,
            pad: 3,
            pkey: 0x8001,
            dest_qp: 0x00AB_CDEF,
            psn: 0x0012_3456,
            qkey: 0x8001_0002,
            src_qp: 0x0076_5432,
        }
    );
    assert_eq!(sim::smp::hdr::LVER.get(h.as_bytes()), 0);
    assert_eq!(sim::smp::hdr::TVER.get(h.as_bytes()), 0);
    assert_eq!(sim::smp::hdr::SE.get(h.as_bytes()), 0);

    // QP0's own headers: what the model checks of an SMP.
    let smp = crate::smp::smp_headers(3, 0xFFFF, 0x00FF_FFFF);
    let got = UdHeader::parse(smp.as_bytes()).unwrap();
    assert_eq!((got.vl, got.sl, got.lnh), (sim::smp::VL15, 3, LNH_LOCAL));
    assert_eq!((got.dlid, got.slid), (0xFFFF, 0xFFFF));
    assert_eq!(
        usize::from(got.pkt_len_words) * 4,
        UD_HEADER_BYTES + 256 + 4
    );
    assert_eq!(
        (got.opcode, got.pad, got.pkey),
        (BTH_UD_SEND_ONLY, 0, 0xFFFF)
    );
    assert_eq!(
        (got.dest_qp, got.psn, got.qkey, got.src_qp),
        (0, 0x00FF_FFFF, 0, 0)
    );

    let model = UdHeader {
        vl: 7,
        sl: 5,
        lnh: LNH_LOCAL,
        dlid: 0x0102,
        pkt_len_words: 0,
        slid: 0x0304,
        opcode: 0x65,
        pad: 0,
        pkey: 0x7FFF,
        dest_qp: 0x00FE_DCBA,
        psn: 0x0098_7654,
        qkey: 0x1111_2222,
        src_qp: 0x0033_4455,
    };
    let b = model.pack(13);
    let v = UdHeaders::read_from_bytes(&b).unwrap();
    assert_eq!(
        (v.lrh.vl(), v.lrh.lver(), v.lrh.sl(), v.lrh.lnh()),
        (7, 0, 5, LNH_LOCAL)
    );
    assert_eq!((v.lrh.dlid.get(), v.lrh.slid.get()), (0x0102, 0x0304));
    assert_eq!(
        usize::from(v.lrh.pkt_len()) * 4,
        UD_HEADER_BYTES + 13 + 3 + 4
    );
    assert_eq!(
        (v.bth.opcode, v.bth.se(), v.bth.pad(), v.bth.tver()),
        (0x65, false, 3, 0)
    );
    assert_eq!(
        (v.bth.pkey.get(), v.bth.dest_qp(), v.bth.psn()),
        (0x7FFF, 0x00FE_DCBA, 0x0098_7654)
    );
    assert_eq!(
        (v.deth.qkey.get(), v.deth.src_qp()),
        (0x1111_2222, 0x0033_4455)
    );
}
