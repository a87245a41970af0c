//! The staged path: a snapshot placed as a server's RDB file, for a cluster node (a staged join) and
//! a server not running yet (`fastrepl stage`), its decisions and the files it reads and writes.

pub mod cluster;
pub mod cluster_node;
pub mod rdb_aux;
pub mod snapshot_file;
pub mod stage;
pub mod staging;
pub mod start;
pub mod target;
pub mod volume;
