//! The in-band rendezvous (docs/rendezvous.md): the messages, from the device-independent
//! `ibrendezvous` crate, and the [`Channel`] every exchange sends and receives them on.

mod channel;

pub use channel::Channel;
pub use ibrendezvous::*;
