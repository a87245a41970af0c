//! Every message the relay and agents exchange after authentication, and nothing else: the leaf of
//! the crate (no sockets beyond "read one frame from a `Read`, write one to a `Write`", no knowledge
//! of the client or server modules above it).
//!
//! Control: the relay sends `u32 length (big-endian) + JSON`; messages are bounded by
//! [`CONTROL_MESSAGE_MAX`]. Data: fixed 21-byte [`Request`]s, answered by a 5-byte
//! [`ResponseHeader`] and the bytes. Binary bodies (swarm messages, ucx keys) are read through one
//! [`cursor::Cursor`].

mod capture_failure;
mod control;
pub mod cursor;
pub mod descriptor;
#[cfg(any(test, fuzzing))]
mod fuzz;
pub mod request;
pub mod response;
pub mod status;
pub mod swarm;
mod transport_kind;
mod ucx_key;

pub use capture_failure::CaptureFailure;
pub use control::{recv_control, send_control, Control, CONTROL_MESSAGE_MAX};
pub use descriptor::{Before, Descriptor};
pub use request::{read_request, AttachKind, JoinOutcome, Op, Renewal, Request, ALL_BLOCKS, READ_MAX, REQUEST_LEN, UPLOADS_REPORTED_MAX};
pub use response::{ResponseHeader, Status, RESPONSE_HEADER_LEN};
pub use transport_kind::TransportKind;
pub use ucx_key::{UcxKey, UCX_BLOB_MAX, UCX_SEGMENT};

/// Fuzz entry point: decoding arbitrary control and data messages never panics.
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub use fuzz::fuzz_one;
