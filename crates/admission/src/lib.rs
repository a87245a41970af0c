//! Admission in two stages, for every listener that accepts a connection before it knows who is
//! talking (the relay's agent port, an agent's peer port, the metrics endpoint).
//!
//! A connection that has not authenticated yet (a *stranger*) takes a place in a small budget of its
//! own and must authenticate before a short deadline; when the budget is full, the newest stranger
//! displaces the oldest (as sshd's `MaxStartups` does) of the source holding the most places, and one
//! source address holds only so many places. Once authenticated, a connection counts against the listener's real limit, which
//! strangers never touch: a flood of them cannot keep an agent out.
//!
//! - [`machine`]: [`Admission`], the decision, without sockets or a clock (time passed in);
//! - [`refusal`]: [`Refusal`], why a connection was closed before it was served;
//! - [`refusal_log`]: [`RefusalLog`], refusals logged at a bounded rate: the first, then a summary
//!   every few seconds with counts by kind and the busiest sources;
//! - [`gate`]: [`Gate`], the driver a listener's threads share: it shuts displaced and late
//!   strangers' sockets, counts refusals and writes the log lines;
//! - [`registry`]: every listener's refusal totals in the process, for the metrics endpoint.
#![deny(missing_docs)]

pub mod gate;
pub mod machine;
pub mod refusal;
pub mod refusal_log;
pub mod registry;

pub use gate::{Gate, Pass, Shut};
pub use machine::{Admission, Budget, Source};
pub use refusal::Refusal;
pub use refusal_log::RefusalLog;
