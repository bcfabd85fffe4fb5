//! Completion queues (§4.2).

#[derive(Clone, Debug, Default)]
pub struct Cq {
    pub cqn: u32,
}
