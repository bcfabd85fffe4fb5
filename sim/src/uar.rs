//! UAR pages and BlueFlame registers in BAR2 (§5.1, §5.5).

use crate::hca::Hca;

#[derive(Clone, Debug, Default)]
pub struct UarState {}

impl Hca {
    pub(crate) fn bar2_read(&mut self, offset: u64, len: u8) -> u64 {
        self.violation(
            "§5.1",
            format!(
                "read of {len} bytes from the write-only UAR/BlueFlame area at BAR2+{offset:#x}"
            ),
        );
        0
    }
    pub(crate) fn bar2_write(&mut self, offset: u64, len: u8, value: u64) {
        let _ = (offset, len, value);
    }
}
