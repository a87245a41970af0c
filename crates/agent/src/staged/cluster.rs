//! What a cluster node says about its cluster: the lines of `CLUSTER NODES`, which have the format of
//! the node's own cluster config file (`nodes.conf`), parsed and bounded; and the config a staged
//! node starts from. Both come from outside (a server's answer, a file a server wrote), so every
//! field is checked and a malformed line is an error naming it, never a guess.
//!
//! A line: `<id> <ip:port@cport[,hostname[,aux=value…]]> <flags> <master id|-> <ping sent>
//! <pong received> <config epoch> <link state> <slot ranges…>`; the config file ends with
//! `vars currentEpoch N lastVoteEpoch M`.

/// Most nodes a table may list ([`limits::CLUSTER_NODES_MAX`]).
pub const NODES_MAX: usize = limits::CLUSTER_NODES_MAX;
/// Slots in a cluster.
pub const SLOTS: u32 = 16_384;
/// Length of a node id (hex digits).
pub const ID_LEN: usize = 40;

/// One node as a table line describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its 40-hex-digit id.
    pub id: String,
    /// `ip:port` clients reach it at (ip may be empty: a node that has not learned its own).
    pub addr: String,
    /// The client port.
    pub port: u16,
    /// The cluster bus port.
    pub bus_port: u16,
    /// What its flags say.
    pub role: Role,
    /// The line is the node that answered (`myself`).
    pub myself: bool,
    /// Flagged failing (`fail`, `fail?`), in a handshake, or without an address: not a node to
    /// build on.
    pub unsettled: bool,
    /// The master it replicates, for a replica.
    pub master: Option<String>,
    /// Its config epoch.
    pub config_epoch: u64,
    /// Slots it serves (ranges and single slots; migrating/importing markers are not counted).
    pub slots: u32,
}

impl Node {
    /// A master that serves slots: a shard's master (an empty master serves none and is a node
    /// still to be placed).
    pub fn serves_slots(&self) -> bool {
        self.role == Role::Master && self.slots > 0
    }
}

/// A node's role in its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `master`.
    Master,
    /// `slave` (a replica).
    Replica,
    /// Neither yet (`noflags`, a node in a handshake).
    Unknown,
}

/// Parse a `CLUSTER NODES` answer or a cluster config file (its `vars` line is skipped).
pub fn parse(text: &str) -> Result<Vec<Node>, String> {
    let mut nodes = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("vars ") {
            continue;
        }
        if nodes.len() == NODES_MAX {
            return Err(format!("more than {NODES_MAX} nodes"));
        }
        nodes.push(parse_line(line).map_err(|e| format!("line {}: {e}", i + 1))?);
    }
    Ok(nodes)
}

fn parse_line(line: &str) -> Result<Node, String> {
    let f: Vec<&str> = line.split(' ').filter(|s| !s.is_empty()).collect();
    if f.len() < 8 {
        return Err(format!("{} fields, expected at least 8", f.len()));
    }
    let id = check_id(f[0])?;
    // `ip:port@cport` then optional `,hostname,aux=…`; the ip may be IPv6 (colons), so the port is
    // after the last colon before `@`.
    let address = f[1].split(',').next().unwrap_or_default();
    let (hostport, bus) = address.split_once('@').ok_or_else(|| format!("address {address:?} has no @bus-port"))?;
    let (ip, port) = hostport.rsplit_once(':').ok_or_else(|| format!("address {address:?} has no port"))?;
    let port: u16 = port.parse().map_err(|_| format!("bad port in {address:?}"))?;
    let bus_port: u16 = bus.parse().map_err(|_| format!("bad bus port in {address:?}"))?;
    let flags: Vec<&str> = f[2].split(',').collect();
    let has = |x: &str| flags.contains(&x);
    let role = match (has("master"), has("slave")) {
        (true, false) => Role::Master,
        (false, true) => Role::Replica,
        (true, true) => return Err(format!("flags {:?} say master and replica", f[2])),
        (false, false) => Role::Unknown,
    };
    let master = match f[3] {
        // Also a replica's, while its master is not known yet (right after a CLUSTER REPLICATE
        // elsewhere): legal, and not settled.
        "-" => None,
        m => Some(check_id(m)?),
    };
    let config_epoch: u64 = f[6].parse().map_err(|_| format!("bad config epoch {:?}", f[6]))?;
    let mut slots = 0u32;
    for s in &f[8..] {
        if s.starts_with('[') {
            continue; // `[slot->-id]` / `[slot-<-id]`: a migration in progress, not a served slot.
        }
        let (a, b) = match s.split_once('-') {
            Some((a, b)) => (a, b),
            None => (*s, *s),
        };
        let (a, b): (u32, u32) = (a.parse().map_err(|_| format!("bad slot {s:?}"))?, b.parse().map_err(|_| format!("bad slot {s:?}"))?);
        if a > b || b >= SLOTS {
            return Err(format!("slot range {s:?} outside 0-{}", SLOTS - 1));
        }
        slots = slots.saturating_add(b - a + 1);
    }
    let unsettled = has("fail") || has("fail?") || has("handshake") || has("noaddr") || f[7] != "connected" && !has("myself");
    Ok(Node { id, addr: endpoint::host_port(ip, port), port, bus_port, role, myself: has("myself"), unsettled: unsettled || (role == Role::Replica && master.is_none()), master, config_epoch, slots })
}

fn check_id(s: &str) -> Result<String, String> {
    if s.len() == ID_LEN && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(format!("node id {:?} is not {ID_LEN} hex digits", s.chars().take(48).collect::<String>()))
    }
}

/// The line that is the answering node.
pub fn myself(nodes: &[Node]) -> Result<&Node, String> {
    let mut it = nodes.iter().filter(|n| n.myself);
    match (it.next(), it.next()) {
        (Some(n), None) => Ok(n),
        (None, _) => Err("no line is flagged myself".into()),
        (Some(_), Some(_)) => Err("two lines are flagged myself".into()),
    }
}

/// A node config for a server that has never run, making it a replica of `master` (whose table, as
/// `CLUSTER NODES` on it answered, is `table`): a fresh id for it, and every settled node of the
/// table with its address and slots, so it knows whom to follow and who serves what. Ports of its
/// own line are the server's to fill in at start; its address it learns from the cluster. A master that
/// has not learned its own address (a cluster of one lists itself as `:port`) is written with the
/// host of `master_addr`, where the stager reached it: the staged node must reach it before anyone
/// introduces it.
pub fn staged_config(my_id: &str, table: &[Node], master_id: &str, master_addr: &str, table_text: &str) -> Result<String, String> {
    check_id(my_id)?;
    if !table.iter().any(|n| n.id == master_id && n.role == Role::Master) {
        return Err(format!("the table has no master {master_id}"));
    }
    let epoch = table.iter().map(|n| n.config_epoch).max().unwrap_or(0);
    let mut out = format!("{my_id} :0@0 myself,slave {master_id} 0 0 0 connected\n");
    for line in table_text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("vars ")) {
        let n = parse_line(line)?;
        if n.unsettled {
            continue;
        }
        // The answering node's line says `myself`: it is not ourselves here.
        let mut f: Vec<String> = line.split(' ').filter(|s| !s.is_empty()).map(str::to_string).collect();
        if n.id == master_id && f[1].starts_with(':') {
            let host = master_addr.rsplit_once(':').map(|(h, _)| h.trim_matches(['[', ']'])).unwrap_or(master_addr);
            f[1] = format!("{host}{}", f[1]);
        }
        f[2] = f[2].split(',').filter(|x| *x != "myself").collect::<Vec<_>>().join(",");
        // Migration markers describe the answering node's state, not a stored one.
        f.retain(|x| !x.starts_with('['));
        out.push_str(&f.join(" "));
        out.push('\n');
    }
    out.push_str(&format!("vars currentEpoch {epoch} lastVoteEpoch 0\n"));
    Ok(out)
}

/// A new node id: 40 hex digits from the system's random source.
pub fn new_id() -> Result<String, String> {
    let mut b = [0u8; ID_LEN / 2];
    getrandom::getrandom(&mut b).map_err(|e| format!("random node id: {e}"))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Fuzz entry point: a table from anyone (a node's answer, a file) is parsed or refused, never a
/// panic; and what parses can be turned into a staged config or refused.
#[doc(hidden)]
pub fn fuzz(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(nodes) = parse(&text) {
        let _ = myself(&nodes);
        if let Some(m) = nodes.iter().find(|n| n.role == Role::Master) {
            let _ = staged_config(&"0".repeat(ID_LEN), &nodes, &m.id.clone(), "10.0.0.1:6379", &text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: &str = "3d5b146b14cd6bb37f9bfdcca967e98e328a6b43";
    const N: &str = "ef2e1056432fabcc1a72b09e1effa9f519bce09b";

    #[test]
    fn redis_and_valkey_lines_parse() {
        let text = format!(
            "{N} 127.0.0.1:7002@17002 myself,master - 0 0 0 connected\n\
             {M} 127.0.0.1:7001@17001,,tls-port=0,shard-id=298ac85eed7ea75d7fd67b78c8dc0007ca2fb799 master - 0 1795479207093 1 connected 0-5460 5462 [5461->-{N}]\n\
             vars currentEpoch 1 lastVoteEpoch 0\n"
        );
        let nodes = parse(&text).unwrap();
        assert_eq!(nodes.len(), 2);
        let me = myself(&nodes).unwrap();
        assert_eq!((me.id.as_str(), me.role, me.slots, me.port, me.bus_port), (N, Role::Master, 0, 7002, 17002));
        assert_eq!((nodes[1].slots, nodes[1].config_epoch, nodes[1].addr.as_str()), (5462, 1, "127.0.0.1:7001"));
        let replica = parse(&format!("{N} ::1:7002@17002 myself,slave {M} 0 0 1 connected")).unwrap();
        assert_eq!((replica[0].role, replica[0].master.as_deref(), replica[0].addr.as_str()), (Role::Replica, Some(M), "[::1]:7002"), "an IPv6 address bracketed, so that it parses again");
    }

    #[test]
    fn malformed_lines_are_refused() {
        for bad in [
            format!("{N} 127.0.0.1:7002@17002 myself,master - 0 0 0"),
            "xyz 127.0.0.1:7002@17002 myself,master - 0 0 0 connected".to_string(),
            format!("{N} 127.0.0.1:7002 myself,master - 0 0 0 connected"),
            format!("{N} 127.0.0.1:70020@17002 master - 0 0 0 connected"),
            format!("{N} 127.0.0.1:7002@17002 master,slave - 0 0 0 connected"),
            format!("{N} 127.0.0.1:7002@17002 master - 0 0 0 connected 5-3"),
            format!("{N} 127.0.0.1:7002@17002 master - 0 0 0 connected 16384"),
            format!("{N} 127.0.0.1:7002@17002 slave nothex 0 0 0 connected"),
        ] {
            assert!(parse(&bad).is_err(), "{bad}");
        }
        assert!(myself(&parse(&format!("{N} 127.0.0.1:7002@17002 master - 0 0 0 connected")).unwrap()).is_err());
    }

    #[test]
    fn failing_and_handshake_nodes_are_unsettled() {
        let nodes = parse(&format!("{N} 127.0.0.1:7002@17002 master,fail? - 0 0 0 connected\n{M} 127.0.0.1:7001@17001 handshake - 0 0 0 disconnected")).unwrap();
        assert!(nodes.iter().all(|n| n.unsettled));
    }

    #[test]
    fn a_replica_whose_master_is_not_known_yet_is_unsettled() {
        // Right after CLUSTER REPLICATE elsewhere a node may list a replica with master `-`.
        let nodes = parse(&format!(
            "{N} 127.0.0.1:7002@17002 slave - 0 0 0 connected
{M} 127.0.0.1:7001@17001 slave {N} 0 0 0 connected"
        ))
        .unwrap();
        assert_eq!((nodes[0].role, nodes[0].master.as_deref(), nodes[0].unsettled), (Role::Replica, None, true));
        assert_eq!((nodes[1].role, nodes[1].master.as_deref(), nodes[1].unsettled), (Role::Replica, Some(N), false));
    }

    #[test]
    fn a_staged_config_follows_the_master_and_knows_the_table() {
        let table = format!("{M} 10.0.0.1:7001@17001 myself,master - 0 0 3 connected 0-16383 [7->-{N}]\n");
        let nodes = parse(&table).unwrap();
        let me = "a".repeat(40);
        let conf = staged_config(&me, &nodes, M, "10.0.0.9:7001", &table).unwrap();
        let back = parse(&conf).unwrap();
        let mine = myself(&back).unwrap();
        assert_eq!((mine.id.as_str(), mine.role, mine.master.as_deref()), (me.as_str(), Role::Replica, Some(M)));
        let master = back.iter().find(|n| n.id == M).unwrap();
        assert!(!master.myself && master.slots == SLOTS && master.addr == "10.0.0.1:7001");
        assert!(conf.ends_with("vars currentEpoch 3 lastVoteEpoch 0\n") && !conf.contains('['), "{conf}");
        assert!(staged_config(&me, &nodes, N, "10.0.0.1:7001", &table).is_err(), "not a master in the table");
        let alone = format!("{M} :7001@17001 myself,master - 0 0 0 connected 0-16383\n");
        let conf = staged_config(&me, &parse(&alone).unwrap(), M, "10.0.0.1:7001", &alone).unwrap();
        assert!(conf.contains(&format!("{M} 10.0.0.1:7001@17001 master")), "{conf}");
        assert_eq!(new_id().unwrap().len(), 40);
    }

    #[test]
    fn fuzz_smoke() {
        let seed = format!("{M} 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-16383\n");
        for cut in 0..seed.len() {
            fuzz(&seed.as_bytes()[..cut]);
        }
        fuzz(&[0xff, 0xfe, b' ', b'\n']);
        crate::staged::rdb_aux::fuzz(b"REDIS0011\xfa\xc3\x05\x0a\x00a\xe0\x00\x00");
    }
}
