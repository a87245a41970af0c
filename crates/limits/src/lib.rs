//! Every bound, timeout and buffer size of fastrepl, in one place. Units are last in the names
//! (`_bytes`, `_max`, durations as [`Duration`]). A bound on what a peer sends is what keeps a
//! malformed or hostile peer from making us allocate or wait without end; where two values depend on
//! each other, a `const` assertion at the bottom of this file checks it at compile time, so changing
//! one without the other does not build.
#![deny(missing_docs)]
#![no_std]

use core::time::Duration;

// ---- Bytes ---------------------------------------------------------------------------------------

/// Largest single range read over any transport (a block is one read).
pub const READ_BYTES_MAX: u32 = 64 << 20;
/// Largest control message (a descriptor with a generation's checksums).
pub const CONTROL_MESSAGE_BYTES_MAX: u32 = 16 << 20;
/// Smallest snapshot block (`--block-size`).
pub const BLOCK_BYTES_MIN: u64 = 4096;
/// Default snapshot block.
pub const BLOCK_BYTES_DEFAULT: u64 = 4 << 20;
/// Largest region an agent maps (the shm transport), and the default `--snapshot-max-bytes` is below it.
pub const REGION_BYTES_MAX: u64 = 1 << 40;
/// Default `--snapshot-max-bytes`: the sparse capacity of an EOF-framed snapshot's memfd.
pub const SNAPSHOT_BYTES_DEFAULT: u64 = 64 << 30;
/// Default `--log-max-bytes`.
pub const LOG_BYTES_DEFAULT: u64 = 256 << 20;
/// Segment of a region registered with UCX at once (an EOF-framed snapshot is mostly unwritten:
/// registering it whole would pin its whole capacity under verbs).
pub const UCX_SEGMENT_BYTES: u64 = 256 << 20;
/// Largest UCX blob (worker address, packed remote key) accepted from the relay.
pub const UCX_BLOB_BYTES_MAX: usize = 64 << 10;
/// A block read over UCX is split into GETs of this size, all in flight together.
pub const UCX_GET_BYTES: usize = 1 << 20;
/// Most log bytes an agent reads and sends to its replica at once.
pub const LOG_CHUNK_BYTES: u64 = 4 << 20;
/// Most RDB bytes the relay reads from the master into the region at once.
pub const RDB_READ_BYTES_MAX: u64 = 4 << 20;
/// Socket reads outside the RDB (handshake replies, the stream, ACKs).
pub const READ_CHUNK_BYTES: usize = 64 << 10;
/// Most bytes of an error message accepted from (or sent to) a peer.
pub const ERROR_MESSAGE_BYTES_MAX: usize = 4096;
/// Most bytes of a replica's handshake buffered before it must have made sense.
pub const HANDSHAKE_BUFFER_BYTES_MAX: usize = 64 << 10;
/// Longest line (status, error, length header) in a handshake with a master or a replica.
pub const HANDSHAKE_LINE_BYTES_MAX: usize = 4096;
/// Most arguments of one handshake command (`REPLCONF capa ... capa ...`).
pub const HANDSHAKE_ARGS_MAX: usize = 64;
/// Default `--serve-cache-mib` of a join: blocks already fed to the replica that an agent keeps to
/// serve peers (the oldest go first; blocks not yet fed are the window's, bounded by it).
pub const SERVE_CACHE_BYTES_DEFAULT: u64 = 512 << 20;
/// Reads of at least this size populate their page tables in one call (shm transport).
pub const POPULATE_BYTES_MIN: usize = 256 << 10;

// ---- Counts --------------------------------------------------------------------------------------

/// Most readers (connections, each with reads in flight) a join or fetch uses (`--readers`).
pub const READERS_MAX: usize = 64;
/// Most blocks a join buffers ahead of its replica (`--window-blocks`).
pub const WINDOW_BLOCKS_MAX: u64 = 1024;
/// Default `--window-blocks`.
pub const WINDOW_BLOCKS_DEFAULT: u64 = 16;
/// Block reads an agent keeps in flight on one TCP connection to the relay (and the most a peer's
/// connection takes): requests sent before the earlier answers arrived, so that the flow does not
/// idle for a round trip between blocks — which, behind busy links' queues (100 ms each on the
/// bench's shaped links), costs a good part of a block. Two: one being received while the next waits
/// at the sender. Three was no faster at N = 8 on 100 Mbit/s (36.4 s median against 33.5 s with two:
/// docs/design/flat-fanout.md), as a third claim per flow leaves fewer blocks for the peers to spread.
pub const READS_IN_FLIGHT_PER_CONNECTION: usize = 2;
/// Block reads an agent keeps in flight on one connection to a peer. Two, measured at N = 8 on
/// 100 Mbit/s: 31.7 s median against 33.5 s with one, and 1.01 copies from the master's host; with
/// three, flows to a popular holder stayed open across blocks and held its upload slots, other askers
/// were refused for long enough to give it up, and the relay sent those blocks again (1.1–1.3 copies).
pub const PEER_READS_IN_FLIGHT: usize = 2;
/// Most peer connections an agent serves at once (each is a thread).
pub const PEER_CONNECTIONS_MAX: usize = 64;
/// Default `--connections-max` of a relay.
pub const CONNECTIONS_DEFAULT: usize = 256;

// ---- Time ----------------------------------------------------------------------------------------

/// A master silent this long is given up on (its own `repl-timeout` default).
pub const MASTER_SILENCE_MAX: Duration = Duration::from_secs(60);
/// Connecting to a master or a relay.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A command to a Redis/Valkey server (the agent's local server and master).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// Reads and writes on a relay↔agent data connection, and writes to an agent.
pub const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// A peer must finish authenticating within this.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(10);
/// The relay pushes something on every control connection at least this often.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// An agent declares its relay gone after this much silence on the control connection.
pub const RELAY_SILENCE_MAX: Duration = Duration::from_secs(10);
/// A block read from a peer must complete within this, or the peer is dropped and the block fetched
/// elsewhere (a peer stopped or hung must not hold its dependants for long).
pub const PEER_IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Connecting to a peer.
pub const PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Default `--serve-linger-secs`: how long an agent that finished keeps serving peers that still
/// pull.
pub const SERVE_LINGER_DEFAULT: Duration = Duration::from_secs(60);
/// While every wanted block is claimed by another agent, the agent asks the tracker again this often.
pub const LOCATE_RETRY_EVERY: Duration = Duration::from_millis(10);
/// A pulling agent asks the tracker this often whether other agents still need blocks (to keep its
/// serving cache or not).
pub const NEEDED_POLL_EVERY: Duration = Duration::from_secs(1);
/// A lingering agent asks the tracker whether anyone still needs it this often.
pub const LINGER_POLL_EVERY: Duration = Duration::from_millis(200);
/// A data connection idle this long is closed by the relay.
pub const DATA_IDLE_MAX: Duration = Duration::from_secs(600);
/// How long an agent (and the relay on its behalf) waits for a generation to be described: a capture
/// may be starting (the master's `repl-diskless-sync-delay` and fork come first).
pub const GENERATION_WAIT_MAX: Duration = Duration::from_secs(600);
/// The local server must connect to the agent this soon after `REPLICAOF`.
pub const REPLICA_CONNECT_MAX: Duration = Duration::from_secs(30);
/// The replica must apply the log the agent sent within this, before the handoff.
pub const APPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// A replica acknowledges its offset this often once the stream flows.
pub const ACK_EVERY: Duration = Duration::from_secs(1);
/// ... and this often until the stream flows (a master may have missed the first ACK).
pub const ACK_EVERY_UNTIL_STREAM: Duration = Duration::from_millis(100);
/// Read timeout on the relay's master link: the granularity of its ACK ticks.
pub const CAPTURE_TICK: Duration = Duration::from_millis(50);
/// Interval between polls of a server's state (each wait has its own deadline).
pub const SERVER_POLL_EVERY: Duration = Duration::from_millis(10);
/// Longest wait for the relay to publish a block before re-checking its state.
pub const BLOCK_WAIT_MAX: Duration = Duration::from_millis(200);
/// How long a failed join keeps trying to reset its replica: one still loading from the agent
/// answers `-LOADING` until it has read up to the closed link's end.
pub const REPLICA_RESET_MAX: Duration = Duration::from_secs(60);
/// Default `join --retries`: attempts after the first, for faults that time can mend.
pub const JOIN_RETRIES_DEFAULT: u32 = 5;
/// A failed join waits this long before its first retry (then twice as long each time, jittered).
pub const JOIN_RETRY_BASE: Duration = Duration::from_secs(1);
/// The longest wait between join attempts.
pub const JOIN_RETRY_MAX: Duration = Duration::from_secs(30);
/// First backoff after a failed capture; it doubles up to [`CAPTURE_BACKOFF_MAX`].
pub const CAPTURE_BACKOFF_MIN: Duration = Duration::from_millis(500);
/// Longest backoff between captures.
pub const CAPTURE_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Closing a UCX endpoint or cancelling a request may take this long before we give up on it.
pub const UCX_CLEANUP_MAX: Duration = Duration::from_secs(10);
/// Longest sleep of a waiting UCX reader on its worker's event descriptor (it wakes on any event;
/// this only bounds how late a deadline is noticed).
pub const UCX_WAIT_MAX: Duration = Duration::from_millis(50);

// ---- transport and client ------------------------------------------------------------------------

/// Shortest relay token accepted: 16 bytes (128 bits if random) keep the HMAC key out of brute-force
/// reach.
pub const TOKEN_BYTES_MIN: usize = 16;
/// Longest replication ID a descriptor may carry: Redis and Valkey use 40 hex characters; the margin
/// takes a longer one without letting a peer make us hold much.
pub const REPLID_BYTES_MAX: usize = 64;
/// Longest address an agent may advertise to its peers (`host:port`, a DNS name or an IP literal):
/// a DNS name's own bound, and what the one length byte on the wire can say.
pub const ADVERTISE_ADDRESS_BYTES_MAX: usize = 255;
/// Most peers the tracker names for one block: an agent reads a block from one, so a few spares are
/// plenty, and the answer's size stays bounded.
pub const LOCATE_PEERS_PER_BLOCK_MAX: usize = 16;
/// Most peers an agent says it reads from in one locate (it reads from two at once; more are left out
/// when encoding).
pub const LOCATE_OPEN_PEERS_MAX: usize = 16;
/// Most uploads a load report may state: an agent serves a handful at once; more is a broken peer,
/// and would skew the tracker's choice.
pub const LOAD_UPLOADS_MAX: u32 = 1024;
/// Answers owed on the tracker link at which a request sent without waiting first reads those that
/// have arrived: the relay's answers must not fill its side of the connection while the agent does
/// not read.
pub const TRACKER_ANSWERS_OWED_MAX: u32 = 256;
/// The pieces a block read's bytes are read and told in while they arrive: small enough that a peer
/// served the block while it arrives lags little behind, large enough that a 4 MiB block costs a few
/// dozen reads.
pub const ARRIVAL_PIECE_BYTES: usize = READ_CHUNK_BYTES * 2;
/// Largest bulk string the Redis client accepts in a reply: `verify` reads whole values with `DUMP`,
/// and Redis's own `proto-max-bulk-len` defaults to 512 MiB.
pub const CLIENT_BULK_BYTES_MAX: usize = 1 << 30;
/// Longest host name a sentinel may answer with (a DNS name's bound).
pub const SENTINEL_HOST_BYTES_MAX: usize = 255;
/// Most sentinels `--sentinel` may list: a group has a handful; each is tried in turn.
pub const SENTINELS_MAX: usize = 64;
/// Wait before moving to the next sentinel after one failed; doubles up to [`SENTINEL_RETRY_MAX`].
pub const SENTINEL_RETRY_MIN: Duration = Duration::from_millis(200);
/// Longest wait between sentinels.
pub const SENTINEL_RETRY_MAX: Duration = Duration::from_secs(5);
/// How long a subscribed sentinel link waits for a push before checking whether to stop.
pub const SENTINEL_PUSH_WAIT: Duration = Duration::from_millis(500);

// The lengths and counts above travel in one byte, the locate's block count in two.
const _: () = assert!(ADVERTISE_ADDRESS_BYTES_MAX <= u8::MAX as usize);
const _: () = assert!(LOCATE_PEERS_PER_BLOCK_MAX <= u8::MAX as usize);
const _: () = assert!(LOCATE_OPEN_PEERS_MAX <= u8::MAX as usize);
const _: () = assert!(WINDOW_BLOCKS_MAX <= u16::MAX as u64);
// A replication ID (40 characters) fits.
const _: () = assert!(REPLID_BYTES_MAX >= 40);
// The answers owed on the tracker link (each an empty answer: a 5-byte header) fit the smallest
// socket buffer Linux gives (4 KiB and more), so the relay never blocks on an agent that does not
// read yet.
const _: () = assert!(TRACKER_ANSWERS_OWED_MAX as usize * 5 <= 4096);
// A piece is part of one read, and a read chunk is part of a piece.
const _: () = assert!(READ_CHUNK_BYTES <= ARRIVAL_PIECE_BYTES && ARRIVAL_PIECE_BYTES <= READ_BYTES_MAX as usize);
// A sentinel's host is an address as short as an advertised one; its retries grow from their
// minimum to their maximum, and a push wait is well within the connect that follows a failure.
const _: () = assert!(SENTINEL_HOST_BYTES_MAX <= ADVERTISE_ADDRESS_BYTES_MAX);
const _: () = assert!(ms(SENTINEL_RETRY_MIN) < ms(SENTINEL_RETRY_MAX) && ms(SENTINEL_PUSH_WAIT) < ms(CONNECT_TIMEOUT));
// The client takes a bulk as large as any a server sends by default (512 MiB).
const _: () = assert!(CLIENT_BULK_BYTES_MAX >= 512 << 20);

// ---- Relationships, checked when this crate builds -----------------------------------------------

const fn ms(d: Duration) -> u128 {
    d.as_millis()
}

// A block is one read: the largest block must fit one read.
const _: () = assert!(BLOCK_BYTES_MIN <= BLOCK_BYTES_DEFAULT && BLOCK_BYTES_DEFAULT <= READ_BYTES_MAX as u64);
// A log chunk is one read too.
const _: () = assert!(LOG_CHUNK_BYTES <= READ_BYTES_MAX as u64);
// UCX registers whole segments; a block read may span two, never more.
const _: () = assert!(UCX_SEGMENT_BYTES >= READ_BYTES_MAX as u64);
const _: () = assert!(UCX_GET_BYTES as u64 <= BLOCK_BYTES_DEFAULT);
// The default snapshot capacity must be mappable by agents.
const _: () = assert!(SNAPSHOT_BYTES_DEFAULT <= REGION_BYTES_MAX);
// The pipeline's window must be able to hold one block per reader.
const _: () = assert!(WINDOW_BLOCKS_MAX >= READERS_MAX as u64 && WINDOW_BLOCKS_DEFAULT <= WINDOW_BLOCKS_MAX);
// A peer fetcher pipelines on a TCP connection, which takes at most this many reads in flight: more
// would fail locally and be blamed on the peer.
const _: () = assert!(PEER_READS_IN_FLIGHT <= READS_IN_FLIGHT_PER_CONNECTION);
// Several heartbeats fit in the silence that declares a relay gone.
const _: () = assert!(3 * ms(HEARTBEAT) <= ms(RELAY_SILENCE_MAX));
// The capture ticks at least as often as it must acknowledge, and acknowledges well within the
// master's patience.
const _: () = assert!(ms(CAPTURE_TICK) <= ms(ACK_EVERY_UNTIL_STREAM) && ms(ACK_EVERY_UNTIL_STREAM) < ms(ACK_EVERY));
const _: () = assert!(10 * ms(ACK_EVERY) <= ms(MASTER_SILENCE_MAX));
// Polls are much shorter than the waits they serve.
const _: () = assert!(10 * ms(SERVER_POLL_EVERY) <= ms(COMMAND_TIMEOUT) && ms(BLOCK_WAIT_MAX) < ms(RELAY_SILENCE_MAX));
// A peer that stalls is dropped well before the relay would be declared gone, and a connect is
// shorter than a read.
const _: () = assert!(ms(PEER_CONNECT_TIMEOUT) < ms(PEER_IO_TIMEOUT) && ms(PEER_IO_TIMEOUT) <= ms(IO_TIMEOUT));
// Backoff grows from its minimum to its maximum.
const _: () = assert!(ms(CAPTURE_BACKOFF_MIN) < ms(CAPTURE_BACKOFF_MAX));
const _: () = assert!(ms(JOIN_RETRY_BASE) <= ms(JOIN_RETRY_MAX));
// Error messages and handshake lines fit the buffers that read them.
const _: () = assert!(ERROR_MESSAGE_BYTES_MAX <= READ_CHUNK_BYTES && HANDSHAKE_LINE_BYTES_MAX <= HANDSHAKE_BUFFER_BYTES_MAX);
