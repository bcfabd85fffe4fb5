//! `ibkern-delegate`: the Linux side of delegation (docs/delegation.md). An ordinary program
//! on rdma-core's verbs that serves ibkern nodes over RC queue pairs: files beneath its root,
//! its clock, log lines, and regions the nodes reach one-sided.
//!
//! - [`service`]: the request handling, independent of any transport ([`remote::Remote`]).
//! - [`root`]: paths confined beneath the root by the kernel's own resolution.
//! - [`region`]: the memory mapped for regions.
//! - [`rc`]: the HCA and RC connections on the `sideway` crate; [`rdv`]: the UD rendezvous
//!   QP; [`serve`]: the delegate's loop; [`check`]: a Linux test client.
//! - [`standin`]: a stand-in transport for host tests.

pub mod check;
pub mod rc;
pub mod rdv;
pub mod region;
pub mod remote;
pub mod root;
pub mod serve;
pub mod service;
pub mod standin;
