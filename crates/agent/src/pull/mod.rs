//! Pulling a generation's blocks: the pipeline (planner, fetchers, in-order hand-on), the transport
//! chosen for it, and what the relay says about the generation while it runs.

pub mod cuts;
pub mod fetch;
pub mod pipeline;
pub mod planner;
pub mod progress;
pub mod scheduler;
pub mod select;
#[cfg(feature = "ucx")]
pub mod ucx_reader;
