//! Event queues (§4.1).

use crate::hca::Hca;

#[derive(Clone, Debug, Default)]
pub struct Eq {
    pub eqn: u32,
}

impl Hca {
    /// Post an asynchronous event of `event_type` to the EQ it is mapped to. Returns false
    /// when no EQ is mapped for that type.
    pub(crate) fn post_async_event(&mut self, event_type: u8, subtype: u8, data: [u8; 24]) -> bool {
        let _ = (event_type, subtype, data);
        false
    }
}
