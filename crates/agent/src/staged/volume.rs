//! What a server's volume holds before it starts, read for [`crate::staged::start`]: the head of its
//! RDB file (the history it continues) and, for a cluster node, its own line in its cluster config.
//! Reading never changes a file.

use crate::error::Error;
use crate::staged::cluster;
use crate::staged::start::{NodeOnVolume, RdbOnVolume};
use std::io::Read;
use std::path::Path;

/// The RDB at `path`: absent, unreadable (why), or present with the history its aux fields name.
pub fn rdb(path: &Path) -> RdbOnVolume {
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return RdbOnVolume::Absent,
        Err(e) => return RdbOnVolume::Unreadable(format!("open {}: {e}", path.display())),
    };
    let bytes = match f.metadata() {
        Ok(m) => m.len(),
        Err(e) => return RdbOnVolume::Unreadable(format!("stat {}: {e}", path.display())),
    };
    let mut head = Vec::new();
    if let Err(e) = f.take(limits::RDB_HEAD_BYTES as u64).read_to_end(&mut head) {
        return RdbOnVolume::Unreadable(format!("read {}: {e}", path.display()));
    }
    match crate::staged::rdb_aux::replication(&head) {
        Ok(history) => RdbOnVolume::Present { bytes, history },
        Err(e) => RdbOnVolume::Unreadable(format!("{}: {e}", path.display())),
    }
}

/// The cluster node's own line in its config at `path` (absent: a node that never ran). A config
/// that exists but cannot be read or parsed is an error: it is the node's identity in its cluster,
/// and no start may guess at it.
pub fn node(path: &Path) -> Result<NodeOnVolume, Error> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(NodeOnVolume::Absent),
        Err(e) => return Err(Error::Precondition(format!("read the node's cluster config {}: {e}", path.display()))),
    };
    let nodes = cluster::parse(&text).map_err(|e| Error::Precondition(format!("the node's cluster config {}: {e}", path.display())))?;
    let me = cluster::myself(&nodes).map_err(|e| Error::Precondition(format!("the node's cluster config {}: {e}", path.display())))?;
    Ok(NodeOnVolume::Parsed(me.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_rdb_is_read_for_its_history_and_never_guessed() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("dump.rdb");
        assert_eq!(rdb(&p), RdbOnVolume::Absent);
        // REDIS0011, aux repl-id (40 chars), aux repl-offset as an 8-bit integer (0xC0 encoding), then a DB selector.
        let mut b = b"REDIS0011".to_vec();
        b.push(0xFA);
        b.push(7);
        b.extend_from_slice(b"repl-id");
        b.push(40);
        b.extend_from_slice("a".repeat(40).as_bytes());
        b.push(0xFA);
        b.push(11);
        b.extend_from_slice(b"repl-offset");
        b.extend_from_slice(&[0xC0, 77]);
        b.push(0xFE);
        std::fs::write(&p, &b).unwrap();
        assert_eq!(rdb(&p), RdbOnVolume::Present { bytes: b.len() as u64, history: Some(("a".repeat(40), 77)) });
        std::fs::write(&p, b"REDIS0011\xFE\x00").unwrap();
        assert_eq!(rdb(&p), RdbOnVolume::Present { bytes: 11, history: None });
        std::fs::write(&p, b"not an rdb at all").unwrap();
        assert!(matches!(rdb(&p), RdbOnVolume::Unreadable(e) if e.contains("not an RDB")));
    }

    #[test]
    fn a_node_config_is_its_own_line_or_an_error() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("nodes.conf");
        assert_eq!(node(&p).unwrap(), NodeOnVolume::Absent);
        let me = "a".repeat(40);
        let other = "b".repeat(40);
        std::fs::write(
            &p,
            format!("{me} 10.0.0.1:6379@16379 myself,slave {other} 0 0 1 connected\n{other} 10.0.0.2:6379@16379 master - 0 0 1 connected 0-16383\nvars currentEpoch 1 lastVoteEpoch 0\n"),
        )
        .unwrap();
        match node(&p).unwrap() {
            NodeOnVolume::Parsed(n) => assert!(n.id == me && n.role == cluster::Role::Replica && n.master.as_deref() == Some(other.as_str())),
            other => panic!("{other:?}"),
        }
        std::fs::write(&p, "garbage\n").unwrap();
        assert!(matches!(node(&p), Err(Error::Precondition(e)) if e.contains("nodes.conf")));
    }
}
