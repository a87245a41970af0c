//! The join of a running replica: the driver, its decisions (machine), the link the replica
//! follows, and when to try again.

pub mod driver;
pub mod machine;
pub mod replica_link;
pub mod replica_log;
pub mod retry;
pub mod watch;
