//! This agent among the other agents of its generation: the blocks it holds and serves, the
//! arrivals it forwards while they come, and its link to the relay's tracker.

pub mod arrival;
pub mod held;
pub mod peer_server;
pub mod peering;
pub mod tracker_link;
