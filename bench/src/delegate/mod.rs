//! Delegation from the node's side: the client of a Linux delegate (docs/delegation.md), so
//! kernel code uses the delegate like a small remote system-call interface, and the
//! benchmark of that use.
//!
//! - [`client`]: [`Client`], one RC connection to the delegate, set up through the in-band
//!   rendezvous ([`setup`]), over which calls go blocking ([`Client::call`] and the typed
//!   wrappers: [`Client::null`], [`Client::clock`], [`Client::open`], [`Client::pread`], ...)
//!   or several at once ([`Client::submit`], [`Client::wait`], [`Client::take`], matched by
//!   [`Tag`]), completing by busy polling, by completion events or in the interrupt handler
//!   ([`crate::Completion`]). Bulk data is zero copy on this side: the delegate RDMA-READs
//!   and -WRITEs buffers the node registered with the client ([`Client::register`]), and
//!   the node reaches the delegate's regions one-sided ([`Client::region_read`],
//!   [`Client::region_write`], [`Client::region_cas`], [`Client::region_fetch_add`]).
//! - [`benchmark`]: what a call costs per operation, size and completion mode, calls per
//!   second with several outstanding, against an RC `ib_send_lat` round trip and against
//!   one-sided access; [`line`]: its machine-readable lines.
//! - [`plans`]: a node's plan fetched from the delegate's root, its results written there.
//!
//! It lives in the bench crate because it shares the bench's machine environment
//! ([`BenchEnv`](crate::BenchEnv): the clock, DMA memory, and the device's interrupt path
//! that isr mode runs in) and the benchmark is its first user; it knows only `verbs` and
//! the protocol crate (`delegate-wire`), nothing of mlx4. Every wait is bounded and every
//! failure is a [`DelegateError`]: a delegate that vanishes or answers nonsense fails the
//! call, never hangs or panics the node.

pub mod benchmark;
pub mod client;
pub mod line;
pub mod plans;
pub mod setup;

pub use client::{BufId, Client, ClientConfig, DelegateError, Tag};
pub use delegate_wire as wire;
