//! Register offsets, opcodes and status codes (docs/hardware.md §1, §2.3, §5.1).

/// BAR0 offsets (§1.2, §1.4).
pub mod dcs {
    /// Host command register, 7 dwords (`hw::Hcr`).
    pub const HCR: usize = 0x80680;
    /// Ownership word: reads 0 when this function owns the device; write 0 to release.
    pub const OWNERSHIP: usize = 0x8069C;
    /// Hardware semaphore: read until 0 before reset.
    pub const SEMAPHORE: usize = 0xF03FC;
    /// Reset register: write BE 1.
    pub const RESET: usize = 0xF0010;
}

/// UAR page offsets (§5.1).
pub mod uar {
    pub const PAGE: usize = 4096;
    pub const SEND_DB: usize = 0x14;
    pub const CQ_DB: usize = 0x20;
    pub const EQ_DB: usize = 0x800;
}

macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident : $t:ty { $($(#[$vm:meta])* $v:ident = $n:expr),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vm])* $v,)*
            /// A value this driver has no name for.
            Unknown($t),
        }
        impl $name {
            pub fn from_raw(v: $t) -> Self {
                match v { $($n => $name::$v,)* x => $name::Unknown(x) }
            }
            pub fn raw(self) -> $t {
                match self { $($name::$v => $n,)* $name::Unknown(x) => x }
            }
            #[allow(dead_code, reason = "not every enum's names are printed")]
            pub fn name(self) -> &'static str {
                match self { $($name::$v => stringify!($v),)* $name::Unknown(_) => "UNKNOWN" }
            }
        }
    };
}

named_enum! {
    /// Firmware command opcodes (§2.3).
    #[allow(non_camel_case_types)]
    Opcode: u16 {
        QUERY_DEV_CAP = 0x003,
        QUERY_FW = 0x004,
        QUERY_ADAPTER = 0x006,
        INIT_HCA = 0x007,
        CLOSE_HCA = 0x008,
        INIT_PORT = 0x009,
        CLOSE_PORT = 0x00A,
        QUERY_HCA = 0x00B,
        SET_PORT = 0x00C,
        SW2HW_MPT = 0x00D,
        QUERY_MPT = 0x00E,
        HW2SW_MPT = 0x00F,
        WRITE_MTT = 0x011,
        MAP_EQ = 0x012,
        SW2HW_EQ = 0x013,
        HW2SW_EQ = 0x014,
        SW2HW_CQ = 0x016,
        HW2SW_CQ = 0x017,
        MODIFY_CQ = 0x02C,
        SW2HW_SRQ = 0x035,
        HW2SW_SRQ = 0x036,
        QUERY_SRQ = 0x037,
        ARM_SRQ = 0x040,
        RST2INIT_QP = 0x019,
        INIT2RTR_QP = 0x01A,
        RTR2RTS_QP = 0x01B,
        RTS2RTS_QP = 0x01C,
        ERR2RST_QP = 0x021,
        TO_ERR_QP = 0x01E,
        QUERY_QP = 0x022,
        CONF_SPECIAL_QP = 0x023,
        MAD_IFC = 0x024,
        NOP = 0x031,
        MOD_STAT_CFG = 0x034,
        QUERY_PORT = 0x043,
        QUERY_FUNC = 0x056,
        RUN_FW = 0xFF6,
        UNMAP_ICM = 0xFF9,
        MAP_ICM = 0xFFA,
        UNMAP_ICM_AUX = 0xFFB,
        MAP_ICM_AUX = 0xFFC,
        SET_ICM_SIZE = 0xFFD,
        UNMAP_FA = 0xFFE,
        MAP_FA = 0xFFF,
    }
}

named_enum! {
    /// Firmware status codes (§1.2).
    FwStatus: u8 {
        Ok = 0x00,
        InternalErr = 0x01,
        BadOp = 0x02,
        BadParam = 0x03,
        BadSysState = 0x04,
        BadResource = 0x05,
        ResourceBusy = 0x06,
        ExceedLim = 0x08,
        BadResState = 0x09,
        BadIndex = 0x0A,
        BadNvmem = 0x0B,
        IcmError = 0x0C,
        BadPerm = 0x0D,
        BadQpState = 0x10,
        BadSegParam = 0x20,
        RegBound = 0x21,
        LamNotPre = 0x22,
        BadMgmtPkt = 0x30,
        BadSize = 0x40,
        MultiFuncReq = 0x50,
    }
}

named_enum! {
    /// EQE event types (§4.1).
    EventType: u8 {
        Comp = 0x00,
        PathMig = 0x01,
        CommEst = 0x02,
        SqDrained = 0x03,
        CqError = 0x04,
        WqCatasError = 0x05,
        EecCatasError = 0x06,
        PathMigFailed = 0x07,
        LocalCatasError = 0x08,
        PortChange = 0x09,
        Cmd = 0x0A,
        EccDetect = 0x0E,
        EqOverflow = 0x0F,
        WqInvalReqError = 0x10,
        WqAccessError = 0x11,
        SrqCatasError = 0x12,
        SrqQpLastWqe = 0x13,
        SrqLimit = 0x14,
        CommChannel = 0x18,
        OpRequired = 0x1A,
        FatalWarning = 0x1B,
        FlrEvent = 0x1C,
        PortMngChg = 0x1D,
        RecoverableError = 0x3E,
    }
}

/// The asynchronous event mask given to MAP_EQ (§4.1: the types Linux maps; COMP events are
/// not mapped, they follow each CQ's comp_eqn).
pub const ASYNC_EVENT_MASK: u64 = (1 << 0x01)
    | (1 << 0x02)
    | (1 << 0x03)
    | (1 << 0x04)
    | (1 << 0x05)
    | (1 << 0x06)
    | (1 << 0x07)
    | (1 << 0x10)
    | (1 << 0x11)
    | (1 << 0x09)
    | (1 << 0x0E)
    | (1 << 0x12)
    | (1 << 0x13)
    | (1 << 0x14)
    | (1 << 0x0A)
    | (1 << 0x1A)
    | (1 << 0x18)
    | (1 << 0x1C)
    | (1 << 0x1B);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(Opcode::from_raw(0x007), Opcode::INIT_HCA);
        assert_eq!(Opcode::INIT_HCA.name(), "INIT_HCA");
        assert_eq!(Opcode::MAP_FA.raw(), 0xFFF);
        assert_eq!(FwStatus::from_raw(0x0C), FwStatus::IcmError);
        assert_eq!(FwStatus::from_raw(0x77), FwStatus::Unknown(0x77));
        assert_eq!(EventType::from_raw(0x0A), EventType::Cmd);
    }

    #[test]
    fn async_mask_maps_cmd_and_port_change_but_not_comp() {
        assert_ne!(ASYNC_EVENT_MASK & (1 << 0x0A), 0);
        assert_ne!(ASYNC_EVENT_MASK & (1 << 0x09), 0);
        assert_eq!(ASYNC_EVENT_MASK & 1, 0);
    }
}
