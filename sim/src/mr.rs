//! Memory protection table and translation (§4.5, §4.6).

#[derive(Clone, Debug, Default)]
pub struct Mpt {
    pub index: u32,
}
