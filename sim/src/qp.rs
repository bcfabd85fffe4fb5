//! Queue pairs (§4.4).

#[derive(Clone, Debug, Default)]
pub struct Qp {
    pub qpn: u32,
}
