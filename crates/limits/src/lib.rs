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
/// Most table entries in one descriptor: a generation with more (a 100 GB snapshot in 4 KiB blocks
/// has 25 M) goes out in several, each well under [`CONTROL_MESSAGE_BYTES_MAX`] (an entry is at most
/// ~25 bytes of JSON: 100 000 take ~2.5 MB).
pub const DESCRIPTOR_ENTRIES_MAX: usize = 100_000;
/// Smallest snapshot block (`--block-size`).
pub const BLOCK_BYTES_MIN: u64 = 4096;
/// Default snapshot block.
pub const BLOCK_BYTES_DEFAULT: u64 = 4 << 20;

/// A block is kept compressed only when that makes it at most this many eighths of its raw size;
/// else it stays raw and costs the agent nothing to feed. An eighth of a 4 MiB block is 42 ms of a
/// 100 Mbit/s link (4 ms at 1 Gbit/s) against ~5 ms of one core to decompress it with zstd -1
/// (docs/results/issue45-codecs): below that, the bytes saved are not worth a core's time. A
/// cache's data is far past it (every block 2.9× smaller), random values far short (every block
/// kept raw).
pub const BLOCK_COMPRESSED_PAYS_EIGHTHS: u64 = 7;
const _: () = assert!(1 <= BLOCK_COMPRESSED_PAYS_EIGHTHS && BLOCK_COMPRESSED_PAYS_EIGHTHS < 8);
/// Most threads a relay compresses blocks with by default (`--compression-threads`; default its
/// cores up to this): zstd -1 packs ~290 MB/s on one of this machine's cores, so 8 keep up with a
/// capture at ~18 Gbit/s, faster than any source forks and writes (docs/design/compression.md).
pub const PACK_THREADS_DEFAULT_MAX: usize = 8;
/// Most threads `--compression-threads` may ask for: past a few dozen they only add memory (each
/// holds two blocks) and contend for the capture's one stream.
pub const PACK_THREADS_MAX: usize = 64;
/// Largest region an agent maps (the shm transport), and the default `--snapshot-max-bytes` is below it.
pub const REGION_BYTES_MAX: u64 = 1 << 40;
/// Default `--snapshot-max-bytes`: the sparse capacity of an EOF-framed snapshot's memfd.
pub const SNAPSHOT_BYTES_DEFAULT: u64 = 64 << 30;
/// Default `--log-max-bytes`: in memory, what a relay host spares besides the snapshot.
pub const LOG_BYTES_DEFAULT: u64 = 256 << 20;
/// With `--store`, the part of the relay's memory bound that is neither per connection nor per block:
/// its threads, allocator, log queue, TLS configurations (docs/results/issue44-first: 7–8 MiB
/// resident after a 3 GiB join; the rest is head room, not a measurement).
pub const RELAY_MEMORY_BASE_BYTES: u64 = 64 << 20;
/// With `--store`, the most one open connection holds: a log read's answer (the relay answers at most
/// [`LOG_CHUNK_BYTES`]), a TLS connection's copy buffer (1 MiB), its thread's stack and buffers.
pub const RELAY_MEMORY_PER_CONNECTION_BYTES: u64 = LOG_CHUNK_BYTES + (3 << 20);
/// With `--store`, the bytes each block held costs: its checksum, the swarm's bits for it, copies in
/// descriptors on their way (4 MiB blocks: 100 GB cost 1.6 MB).
pub const RELAY_MEMORY_PER_BLOCK_BYTES: u64 = 64;
/// Longest a local server that is loading may leave an agent's polls unanswered before the join
/// takes it for hung: Redis 7.0 answers between 2 MB chunks of a load, so even a slow disk answers
/// within seconds.
pub const REPLICA_SILENCE_MAX: Duration = Duration::from_secs(120);
/// Most bytes of its local server's log a join reads when the replica dropped its link while fed
/// (the end of what it wrote since the feed began: a refused load is its last few lines).
pub const REPLICA_LOG_READ_MAX: u64 = 64 * 1024;
/// With `--store`, the relay's memory bound for `connections` open connections and `blocks` blocks
/// held of `block_bytes` each (the status's `memory_bound_bytes`; contrib/k8s sizes its limit by it).
pub const fn relay_memory_bound(block_bytes: u64, pack_threads: u64, connections: u64, blocks: u64) -> u64 {
    RELAY_MEMORY_BASE_BYTES + block_bytes + pack_bytes(block_bytes, pack_threads) + connections * RELAY_MEMORY_PER_CONNECTION_BYTES + blocks * RELAY_MEMORY_PER_BLOCK_BYTES
}
/// What a capture's packing holds with `pack_threads` compressing: every block in flight (each
/// thread's and one queued) as a raw and a stored buffer, and as many kept for reuse.
pub const fn pack_bytes(block_bytes: u64, pack_threads: u64) -> u64 {
    4 * (pack_threads + 1) * block_bytes
}
/// Default `--log-max-percent`: a generation is sealed once its log is as large as its RDB. Measured
/// (docs/results/issue44-warm, loopback, a 261 MiB RDB): a warm join loses its lead over a fresh
/// capture's at a log of ~75 % of the RDB and is 1.08x as slow at 96 %. Not lower: each seal is a
/// fork on the source.
pub const LOG_PERCENT_DEFAULT: u32 = 100;
/// The smallest stream log the relay seals for outweighing its snapshot (`--log-max-percent`): a
/// replica replays 64 MiB of log in a quarter of a second (docs/results/issue44-warm), not worth a fork.
pub const LOG_OUTWEIGHS_MIN_BYTES: u64 = 64 << 20;
/// How often (log bytes) a capture asks the generations' machine whether its log outweighs its
/// snapshot: the question takes the relay's lock, so not at every read from the source.
pub const LOG_OUTWEIGHS_CHECK_BYTES: u64 = 1 << 20;
/// Default `--log-max-bytes` with `--store`: a disk budget. It must outlast the longest pull under
/// heavy writes, or the generation seals before the agent hands off and the master cannot continue
/// it: 4 GiB holds 8 MB/s of writes for about 9 minutes, a 100 GB snapshot's pull at 1.5 Gbit/s
/// (X-Pipe's keeper keeps about 1 GiB of commands per shard, for a cross-DC stream, not a pull). Not
/// yet measured: where replaying a log this long costs a warm join more than a fresh capture would.
pub const LOG_BYTES_STORE_DEFAULT: u64 = 4 << 30;
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
/// serve peers (once full, the newest half and a sample of the older of the agent's own, see
/// `swarm::Keep`; blocks not yet fed are the window's, bounded by it, which also takes the cache's
/// room while the cache does not use it: `swarm::Chooser::with_cache_room`). 384 beside a window of
/// [`WINDOW_BLOCKS_SERVING_DEFAULT`]: see there.
pub const SERVE_CACHE_BYTES_DEFAULT: u64 = 384 << 20;
/// Reads of at least this size populate their page tables in one call (shm transport).
pub const POPULATE_BYTES_MIN: usize = 256 << 10;

// ---- Counts --------------------------------------------------------------------------------------

/// Most readers (connections, each with reads in flight) a join or fetch uses (`--readers`).
pub const READERS_MAX: usize = 64;
/// Most blocks a join buffers ahead of its replica (`--window-blocks`).
pub const WINDOW_BLOCKS_MAX: u64 = 1024;
/// Default `--window-blocks` of a pull from the relay alone (`stage`, `fetch`, a `join` that is no
/// member of a swarm): reads from one source arrive nearly in order, and 16 blocks in flight fill the
/// relay's link (every single-pull measurement since the first release).
pub const WINDOW_BLOCKS_DEFAULT: u64 = 16;
/// Default `--window-blocks` of a `join` in a swarm (it reads from other agents too): the window is
/// what hides how long a block takes to spread to the agent after the relay sends it once (several
/// hops, each at a share of a holder's uplink). In the simulator (issue 33, eighth pass: 5 % slow
/// hosts, 1 % failures, joins over 30 s, 1 GiB at 100 Mbit/s; 20 seeds, 6 at 1 000) 32 against 16 took the slowest
/// full-rate agent from 1.32 to 1.22 of one agent's time at 8 agents, 1.36 to 1.31 at 64, 1.42 to
/// 1.37 at 1 000, and the even fan-out no slower; on the bench, side by side, the even fan-out was the
/// same and the uneven fleet's worst run 1.15 against 1.29 (docs/results/issue33-eighth). It costs up
/// to 64 MiB more of an agent's memory at the default block size. Since issue 33's tenth pass this is
/// the window of a member that keeps no serve cache (`--no-serve`, a TLS relay without a peer
/// certificate, a cache under one block); one that keeps a cache looks further:
/// [`WINDOW_BLOCKS_SERVING_DEFAULT`].
pub const WINDOW_BLOCKS_SWARM_DEFAULT: u64 = 32;
/// Default `--window-blocks` of a `join` that keeps a serve cache: 64 blocks with a 384 MiB serve
/// cache, the same memory as the 32 with 512 MiB before (checked below). Blocks ahead help the fleet
/// more than blocks behind: an agent's window is what others read from it while they are new, its
/// cache only serves the agents that lag. In the simulator (issue 33's ninth pass: 5 % slow hosts, 1 %
/// failures, joins over 30 s, 1 GiB at 100 Mbit/s; 20 seeds, 6 at 1 000) the slowest full-rate agent
/// went from 1.238 / 1.266 / 1.322 of one agent's time at 8 / 64 / 1 000 agents to 1.173 / 1.241 /
/// 1.288, runs above 1.3 from 2 / 4 / 6 to 1 / 1 / 1 (one seed at 64 agents got worse: 1.457 against
/// 1.348, a late joiner whose fast holders were all busy serving). The look-ahead with the cache's
/// unused room is the same (160 blocks at the start of a pull), and below 384 MiB the cache never
/// drops; what moves is which of those blocks are the window's own, asked for first: 64 ahead rather
/// than 32. Snapshots up to 128 MiB are pulled exactly as before.
pub const WINDOW_BLOCKS_SERVING_DEFAULT: u64 = 64;
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
/// Default `--connections-max` of a relay: authenticated connections (strangers wait apart, in
/// [`UNAUTHENTICATED_MAX`]).
pub const CONNECTIONS_DEFAULT: usize = 256;
/// Connections a relay holds at once that have not authenticated yet, apart from its
/// `--connections-max`: an agent authenticates within a round trip of connecting, so even hundreds
/// joining at once have a few handshakes in flight at any moment; a newer stranger displaces the
/// oldest when they are all taken (each is a thread until then).
pub const UNAUTHENTICATED_MAX: usize = 128;
/// The same for an agent's peer port (askers are the other agents of one generation).
pub const PEER_UNAUTHENTICATED_MAX: usize = 64;
/// Connections from one address that have not authenticated yet, on any listener: a host's agents
/// open a control, a tracker and a few data connections at once, on a host with several replicas
/// (or a test's loopback, a loaded one) several times that; more from one address is one stranger
/// taking the budget from everyone else (its newest displaces its oldest).
pub const UNAUTHENTICATED_PER_SOURCE_MAX: usize = 32;
const _: () = assert!(UNAUTHENTICATED_PER_SOURCE_MAX < UNAUTHENTICATED_MAX && UNAUTHENTICATED_PER_SOURCE_MAX < PEER_UNAUTHENTICATED_MAX);
/// Scrapes the metrics endpoint answers at once (a scrape endpoint, not a web server).
pub const METRICS_CONNECTIONS_MAX: usize = 8;
/// Connections to the metrics endpoint whose request has not arrived yet (Prometheus sends it at
/// once), and the most from one address.
pub const METRICS_UNREAD_MAX: usize = 8;
/// See [`METRICS_UNREAD_MAX`]: a scraper has one request in flight, a few during a reload.
pub const METRICS_UNREAD_PER_SOURCE_MAX: usize = 4;
/// Source addresses a refusal summary keeps counts for (the busiest are named; others are summed).
pub const REFUSAL_SOURCES_MAX: usize = 1024;
/// Source addresses a refusal summary names.
pub const REFUSAL_SOURCES_NAMED: usize = 5;

// ---- Time ----------------------------------------------------------------------------------------

/// A master silent this long is given up on (its own `repl-timeout` default).
pub const MASTER_SILENCE_MAX: Duration = Duration::from_secs(60);
/// Connecting to a master or a relay.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A command to a Redis/Valkey server (the agent's local server and master).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// Reads and writes on a relay↔agent data connection, and writes to an agent.
pub const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// A connection must have authenticated this long after it was accepted (the whole handshake, TLS
/// included, however slowly its bytes trickle in; the metrics endpoint: its whole request): a real
/// agent needs a few round trips, milliseconds on any network we serve; the rest of the two seconds
/// is for a loaded host. A stranger holds a place no longer.
pub const UNAUTHENTICATED_DEADLINE: Duration = Duration::from_secs(2);
/// After a failed `accept` (out of descriptors, most likely: it fails again at once), the
/// listener waits this long before the next, rather than spinning.
pub const ACCEPT_FAILURE_PAUSE: Duration = Duration::from_millis(10);
/// Refusals and pre-authentication failures are logged once, then summed up at most this often.
pub const REFUSAL_SUMMARY_EVERY: Duration = Duration::from_secs(5);
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
/// A connection to the agent's port for its replica must finish the replica's handshake (`PING` to
/// `PSYNC`, TLS included: a few round trips on one host) within this, or it is not taken for the
/// replica: it is shut and the agent waits on (a stray connection must not fail the join; the
/// replica, if it was the one, connects again a second later: `replicationCron`).
pub const REPLICA_HANDSHAKE_MAX: Duration = Duration::from_secs(5);
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
/// After SIGTERM or SIGINT a process of ours ends within this, whatever its threads are doing: the
/// graceful path (a join resetting its replica: up to [`REPLICA_RESET_MAX`] after reaching it) gets
/// this long (with 5 s to spare), then the process exits anyway, saying so. Under systemd's default stop timeout (90 s),
/// so our own message, not a SIGKILL, ends a stuck stop; a join's guard resets what was left.
pub const STOP_GRACE_MAX: Duration = Duration::from_secs(85);
/// A process ending on its own (a thread panicked, a stop past [`STOP_GRACE_MAX`]) waits this long
/// for its last line on stderr, then ends without it: another thread may hold stderr, blocked in a
/// write to a reader that stalled (a log shipper hung, not gone), and the end must not wait on that.
pub const LAST_WORD_WAIT: Duration = Duration::from_secs(1);
/// Log lines waiting for stderr (`cli`'s log sink): a burst the writer has not put out yet, as when
/// the log's reader is slow; beyond this a line is dropped and counted rather than block the thread
/// that logged (a reader that stalled must not stop the work). ~4096 × 300 B: about a megabyte.
pub const LOG_QUEUE_LINES: usize = 4096;
/// Default `join --retries`: attempts after the first, for faults that time can mend.
pub const JOIN_RETRIES_DEFAULT: u32 = 5;
/// A failed join waits this long before its first retry (then twice as long each time, jittered).
pub const JOIN_RETRY_BASE: Duration = Duration::from_secs(1);
/// The longest wait between join attempts.
pub const JOIN_RETRY_MAX: Duration = Duration::from_secs(30);
/// A join's last word to the relay (how it ended, for `joins_total`) waits this long at most for
/// each step (connect, read, write): best effort, it must not hold up the join's exit on a relay
/// that went away.
pub const JOIN_END_REPORT_WAIT: Duration = Duration::from_millis(1500);
/// `join --watch` looks at its local server this often (a sidecar beside the server for its whole
/// life: a second is soon enough to see it start, and cheap: five INFO sections).
pub const WATCH_POLL_EVERY: Duration = Duration::from_secs(1);
/// `join --watch`: after a join failed for good (its own retries spent or not retryable), this long
/// before the server is joined again (a relay or master away for longer is tried twice a minute).
pub const WATCH_REJOIN_AFTER_FAILURE: Duration = JOIN_RETRY_MAX;
/// First backoff after a failed capture; it doubles up to [`CAPTURE_BACKOFF_MAX`].
pub const CAPTURE_BACKOFF_MIN: Duration = Duration::from_millis(500);
/// Longest backoff between captures.
pub const CAPTURE_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Closing a UCX endpoint or cancelling a request may take this long before we give up on it.
pub const UCX_CLEANUP_MAX: Duration = Duration::from_secs(10);
/// Longest sleep of a waiting UCX reader on its worker's event descriptor (it wakes on any event;
/// this only bounds how late a deadline is noticed).
pub const UCX_WAIT_MAX: Duration = Duration::from_millis(50);

// ---- relay and snapshot ----

/// Default oldest a generation's stream log may grow before the generation is sealed (`fastrepl relay
/// --log-max-age-secs`): an old snapshot plus a long log loads slower than a fresh capture.
pub const LOG_AGE_DEFAULT: Duration = Duration::from_secs(3600);
/// Default `fastrepl join --handoff-timeout-secs`: how long a join waits, after `REPLICAOF <master>`,
/// for the replica to be in sync. A partial resync is there in well under a second; a join still
/// waiting after 5 minutes waits on a native full sync, which under heavy writes may loop for ever
/// (output-buffer overruns): it ends as a full sync (exit 3) instead, and says what it saw.
pub const HANDOFF_WAIT_DEFAULT: Duration = Duration::from_secs(300);
/// Default `--log-max-age-secs` with `--store`: a warm join's cost is the log's bytes, not its age,
/// and a store's generation costs disk, not memory: a day (X-Pipe keeps two).
pub const LOG_AGE_STORE_DEFAULT: Duration = Duration::from_secs(24 * 3600);
/// Largest block a generation's store accepts: a sanity bound on its offsets' arithmetic. The relay
/// holds its configuration to one read ([`READ_BYTES_MAX`]), well below.
pub const GENERATION_BLOCK_BYTES_MAX: u64 = 1 << 30;
/// How often the relay ticks its generations' lifecycle for `--idle-release-secs`: how late an idle
/// release may come, and how often the capture thread takes the lifecycle's lock for it.
pub const IDLE_RELEASE_TICK: Duration = Duration::from_millis(500);
/// Least time between two descriptor pushes on an agent's control connection: a burst of published
/// blocks (one every few milliseconds) becomes one push.
pub const DESCRIPTOR_PUSH_GAP: Duration = Duration::from_millis(5);
/// Peers the tracker names beyond an agent's free peer slots: some may turn out busy or bad.
pub const LOCATE_SPARE_PEERS: usize = 2;
/// Most replicas the relay reads from a master's `INFO replication` (the count there is the server's
/// word: a bogus one must not make the relay walk billions of fields).
pub const SOURCE_REPLICAS_LISTED_MAX: i64 = 10_000;
/// Longest message between the relay and its UCX side process, either way (an address or a packed
/// key is well under a KiB; the bound keeps a broken side from making the relay allocate).
pub const UCX_SIDE_MESSAGE_BYTES_MAX: usize = 1 << 20;
/// How long the UCX side may take to start or to answer one request (a registration pins memory on
/// RDMA devices, which takes a while for a large segment). Below the agents' I/O timeout, so that an
/// agent waiting for its attach hears why rather than time out.
pub const UCX_SIDE_ANSWER_MAX: Duration = Duration::from_secs(20);
/// How often the relay looks whether its UCX side is alive and forgets dropped generations (their
/// read mapping in the side would otherwise keep the whole snapshot's memory alive).
pub const UCX_SIDE_WATCH_EVERY: Duration = Duration::from_secs(1);
/// A UCX side that died is started again at most this often (one that crashes at once does not spin).
pub const UCX_SIDE_RESTART_EVERY: Duration = Duration::from_secs(1);
/// How long a UCX side let go of may take to exit after its socket closed, before it is killed.
pub const UCX_SIDE_EXIT_MAX: Duration = Duration::from_secs(2);
/// How often its exit is polled meanwhile.
pub const UCX_SIDE_EXIT_POLL_EVERY: Duration = Duration::from_millis(10);
/// Longest sleep of the UCX side's progress thread on its worker's events (it checks whether to stop
/// in between).
pub const UCX_SIDE_PROGRESS_WAIT_MAX: Duration = Duration::from_millis(100);
/// How often that thread polls its worker when it cannot sleep on the worker's events.
pub const UCX_SIDE_PROGRESS_POLL_EVERY: Duration = Duration::from_millis(1);

// The relay's configured blocks (one read each) are within what its store accepts.
const _: () = assert!(READ_BYTES_MAX as u64 <= GENERATION_BLOCK_BYTES_MAX && BLOCK_BYTES_DEFAULT <= GENERATION_BLOCK_BYTES_MAX);
// The capture's loop turns at least every CAPTURE_TICK, so it can tick the lifecycle this often.
const _: () = assert!(ms(CAPTURE_TICK) <= ms(IDLE_RELEASE_TICK));
// Coalescing pushes delays a published block much less than an agent waits for one.
const _: () = assert!(10 * ms(DESCRIPTOR_PUSH_GAP) <= ms(BLOCK_WAIT_MAX) && ms(DESCRIPTOR_PUSH_GAP) < ms(HEARTBEAT));
// A packed UCX key or worker address fits one message to or from the side.
const _: () = assert!(UCX_BLOB_BYTES_MAX <= UCX_SIDE_MESSAGE_BYTES_MAX);
// An agent waiting for its attach hears the side's failure before its own I/O timeout.
const _: () = assert!(ms(UCX_SIDE_ANSWER_MAX) < ms(IO_TIMEOUT));
// The watcher notices a dead side at least as often as a new one may start.
const _: () = assert!(ms(UCX_SIDE_WATCH_EVERY) <= ms(UCX_SIDE_RESTART_EVERY));
// Polls are much shorter than the waits they serve.
const _: () = assert!(10 * ms(UCX_SIDE_EXIT_POLL_EVERY) <= ms(UCX_SIDE_EXIT_MAX) && 10 * ms(UCX_SIDE_PROGRESS_POLL_EVERY) <= ms(UCX_SIDE_PROGRESS_WAIT_MAX));
// The join's last reset (connect, retries, its last command) fits in the stop's bound with room to
// spare (5 s), and the bound with the last word's wait stays under systemd's default 90 s.
const _: () = assert!(ms(CONNECT_TIMEOUT) + ms(REPLICA_RESET_MAX) + ms(COMMAND_TIMEOUT) + 5_000 <= ms(STOP_GRACE_MAX) && ms(STOP_GRACE_MAX) + 2 * ms(LAST_WORD_WAIT) < 90_000);

// ---- agent and swarm ----------------------------------------------------------------------------

/// Times a block is read again after a checksum mismatch before the pull fails (invariant 1: re-read
/// once): a flipped bit on the way is worth one more read; a block that fails twice is broken at its
/// source.
pub const BLOCK_REREADS_MAX: u32 = 1;
/// Reads a peer may cut off part-way, beyond the blocks it served this agent, before this agent stops
/// asking it: an honest holder cuts a read off only when its own arrival of the block failed (rare);
/// one that keeps doing it wastes the asker's flows like a failing peer.
pub const PEER_CUT_OFFS_MAX: u32 = 3;
/// Longest a read of an arriving block waits for its next bytes before it is cut off: well inside the
/// asker's own wait for bytes ([`PEER_IO_TIMEOUT`]), so that the asker sees a cut-off (and goes
/// elsewhere for the block) rather than a peer that stalls (and avoids it for good).
pub const PEER_ARRIVAL_STALL_MAX: Duration = Duration::from_millis(PEER_IO_TIMEOUT.as_millis() as u64 / 2);
/// Bytes of piece buffers an agent keeps for its next arrivals: a few blocks in flight. A freed buffer
/// of a piece's size goes back to the kernel (the allocator's heap is trimmed), and a new one costs a
/// page fault per 4 KiB, for every byte an agent receives (docs/results/issue22-cut-through).
pub const ARRIVAL_SPARE_BYTES_MAX: usize = 32 << 20;
/// How long a cut-off read drains the asker's pipelined requests before the connection closes: a
/// socket closed with unread bytes sends a reset, which the asker would take for a failing peer.
pub const PEER_CUT_OFF_DRAIN_MAX: Duration = Duration::from_secs(1);
/// How long a stopping peer server waits to connect to itself, to wake its accept loop.
pub const PEER_SERVER_WAKE_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest a thread waits on the tracker link's socket before it looks again. Under TLS, another
/// thread reading the link (the load reporter settling answers) may take the awaited answer's bytes
/// off the socket into the TLS layer's buffer, where the socket no longer shows them: this bounds how
/// late such an answer is noticed.
pub const TRACKER_WAIT_SLICE: Duration = Duration::from_millis(50);
/// How long the replica link's ACK thread waits for readable bytes before letting the writer have
/// the TLS link (both take one lock; the writer must not wait long behind a silent replica).
pub const TLS_ACK_WAIT_MAX: Duration = Duration::from_millis(20);
/// How often the agent looks for the replica's connection (a non-blocking accept, with a deadline).
pub const REPLICA_ACCEPT_POLL_EVERY: Duration = Duration::from_millis(10);
/// How often a server that answers `-LOADING` is asked again (with a deadline): a load takes seconds.
pub const LOADING_POLL_EVERY: Duration = Duration::from_millis(100);
/// The longest slice of a wait between join attempts: a signal (Ctrl-C) is noticed within it.
pub const RETRY_WAIT_SLICE: Duration = Duration::from_millis(100);
/// The agent's memory (PSS) is sampled this often while it pulls, by a thread of its own: often
/// enough to see the peak of a pull lasting seconds, rarely enough to cost nothing.
pub const PSS_SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// Most nodes a `CLUSTER NODES` table may list (Redis advises 1000; room for more).
pub const CLUSTER_NODES_MAX: usize = 16_384;
/// How long a cluster node may take to record a role change in its config file.
pub const CLUSTER_CONFIG_SAVE_MAX: Duration = Duration::from_secs(10);
/// How long a node may take to learn of another after `CLUSTER MEET`, and a master to list a new
/// replica (the cluster bus gossips once a second, to a few nodes each time).
pub const CLUSTER_GOSSIP_MAX: Duration = Duration::from_secs(30);
/// How long a staged node may take to exit after `SHUTDOWN NOSAVE`.
pub const NODE_SHUTDOWN_MAX: Duration = Duration::from_secs(30);
/// Connecting to a staged node while it restarts (each try; the wait has its own deadline): a node
/// that is up answers at once.
pub const NODE_RESTART_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Aux fields read at most from a snapshot's RDB head (a server writes about ten).
pub const RDB_AUX_FIELDS_MAX: usize = 64;
/// Longest aux string accepted from a snapshot's RDB head.
pub const RDB_AUX_STRING_BYTES_MAX: usize = 4096;
/// Bytes of a staged snapshot's RDB head kept to read its aux fields (they come first).
pub const RDB_HEAD_BYTES: usize = 64 << 10;
/// Most times a stale snapshot is renewed before a staging gives up (the master writes faster than a
/// snapshot can be staged within its backlog).
pub const SNAPSHOT_RENEWALS_MAX: u32 = 3;
/// The shortest window the master's write rate is measured over (shorter: one burst is the rate).
pub const WRITE_RATE_WINDOW_MIN: Duration = Duration::from_secs(1);
/// How long a server binary may take to print its `--version` (`fastrepl stage --server-binary`):
/// it prints and exits at once; a binary that hangs is not the server it claims to be.
pub const SERVER_VERSION_WAIT_MAX: Duration = Duration::from_secs(5);
/// How often its exit is looked at meanwhile.
pub const SERVER_VERSION_POLL_EVERY: Duration = Duration::from_millis(10);
/// How many times the time a staging is expected to take the master's backlog must last: load rates
/// vary with the data's shape, and a restart by a supervisor has its own delay.
pub const STAGED_HEADROOM_FACTOR: f64 = 2.0;
/// A server loads an RDB at least this fast (bytes per second): a low figure, so that the estimate of
/// a load's time errs long (Redis and Valkey load several hundred MB/s of plain strings).
pub const RDB_LOAD_BYTES_PER_SEC_MIN: f64 = 50.0 * 1024.0 * 1024.0;
/// Time allowed for a shutdown and a supervisor's restart, before the load (seconds).
pub const NODE_RESTART_SECS: f64 = 5.0;

/// Peers an agent fetches from at once (besides the relay), and uploads an agent serves at once
/// (it refuses more: the asker goes to another holder). Each is one flow, with up to
/// [`PEER_READS_IN_FLIGHT`] reads in flight on it. Equal, so that the swarm's download slots match
/// its upload slots; small, so that each flow gets a large share of its links. Chosen with the
/// simulator and on the bench: 3 and 3 since blocks are served while they arrive (issue 22, fifth
/// session): at N = 8 on the bench's 100 Mbit/s links T(8)/T(1) 1.15 against 1.24 with 2 and 2
/// (medians of 3), in the simulator 1.11–1.16 over five seeds, and 1 000 agents at 1 Gbit/s 2.0×
/// against 2.8× before cut-through (docs/results/issue22-cut-through). Before cut-through more slots
/// were worse: an asker with three flows took its downlink from blocks that spread, and holders
/// waited whole blocks before passing anything on (issue 10: 1.3–1.6× with 3 and 2 or 4 and 4 at
/// 1 000 agents). Unequal counts stay worse (3 uploads and 2 fetches: 1.29–1.38 at N = 8 in the
/// simulator).
pub const PEER_FETCHES_MAX: usize = 3;
/// See [`PEER_FETCHES_MAX`].
pub const UPLOADS_MAX: usize = 3;
/// Most holders the tracker names in one answer.
pub const PEERS_PER_ANSWER: usize = 4;
/// Most holders of a block the tracker looks at for one answer, from a different place for every
/// answer: with thousands of holders per block, an answer must not cost a scan of all of them (at
/// 10 000 agents asking every few milliseconds, that is the relay's whole CPU). When these are all
/// full, the asker waits and asks again, and sees another stretch of holders.
pub const HOLDERS_LOOKED_AT_MAX: usize = 16 * PEERS_PER_ANSWER;
/// Most flows the relay sends blocks on at once. Few, so that each new block leaves the relay fast
/// and starts spreading among agents: with one relay flow per agent, a thousand agents would each get
/// a thousandth of the relay's uplink, and every new block would be held back by its slow first copy.
pub const RELAY_FLOWS_MAX: usize = 4;
/// How long an asker sent to a holder for a new connection counts as one more upload on it, unless
/// the holder reports it arrived sooner: about the time the asker's request and the holder's report
/// take through busy queues (a shaped link queues up to 100 ms each way). An asker that went
/// elsewhere leaves a reservation behind until then: the holder may look full to new askers for that
/// long (chosen with the simulator: 250 ms against 0, 150 and 500 ms at 8 and 64 agents).
pub const TRACKER_NAMED_HOLD: Duration = Duration::from_millis(250);
/// A relay claim not completed within this is given to the next agent that asks (the claimer is slow
/// or dead): the repair that keeps one slow host from holding a block back from everyone.
pub const RELAY_CLAIM_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a holder that refused a fetch (busy) is passed over: a fraction of a block's time on a
/// 100 Mbit/s link, a few blocks' on 1 Gbit/s.
pub const PEER_BUSY_BACKOFF: Duration = Duration::from_millis(100);
/// A peer that answers "busy" this long in a row without serving a block is avoided: a peer that
/// never serves (overloaded, or hostile) must not hold the blocks it alone is named for.
pub const PEER_BUSY_GIVE_UP: Duration = Duration::from_secs(5);
/// Refusals further apart than this are not "in a row" for [`PEER_BUSY_GIVE_UP`]: a popular peer
/// asked now and then is busy at each ask without ever being a dead end.
pub const PEER_BUSY_STREAK_GAP: Duration = Duration::from_secs(1);
/// A source slower than this fraction of the median peer rate is avoided while others hold the block.
pub const PEER_SLOW_FRACTION: f64 = 0.25;
/// An agent whose blocks take more than this many times as long to arrive (first bytes to verified,
/// per flow) as the swarm's median, or whose link does (the time it has had an arrival under way per
/// block received), is slow: the tracker does not name it for a block still arriving
/// there to an asker that the relay or a whole holder can serve, does not let its relay claim hold
/// others back, and gives it no relay claims of its own while agents faster than it pull (issue 33:
/// a host at 20 Mbit/s beside 100 took 4–5× the median; an even fleet's agents stay within about 1.5×
/// of each other, and a false "slow" costs a second copy from the relay).
pub const ARRIVAL_SLOW_RATIO: f64 = 2.5;

// A mismatch is re-read once (invariant 1), and a peer is avoided after at least one cut-off too many.
const _: () = assert!(BLOCK_REREADS_MAX == 1 && PEER_CUT_OFFS_MAX >= 1);
// A read of an arriving block is cut off before the asker's own wait for bytes gives the peer up.
const _: () = assert!(2 * ms(PEER_ARRIVAL_STALL_MAX) <= ms(PEER_IO_TIMEOUT));
// A cut-off connection is closed well before the asker would give up waiting for bytes.
const _: () = assert!(ms(PEER_CUT_OFF_DRAIN_MAX) < ms(PEER_IO_TIMEOUT));
// The spares hold a piece buffer for every read an agent has in flight at the default block size: its
// peer flows at their depth and its relay flow at its own.
const _: () = assert!((PEER_FETCHES_MAX * PEER_READS_IN_FLIGHT + READS_IN_FLIGHT_PER_CONNECTION) as u64 * BLOCK_BYTES_DEFAULT <= ARRIVAL_SPARE_BYTES_MAX as u64);
// Polls and slices are short beside the waits they serve.
const _: () = assert!(10 * ms(TRACKER_WAIT_SLICE) <= ms(HEARTBEAT) && 10 * ms(TLS_ACK_WAIT_MAX) <= ms(ACK_EVERY));
const _: () = assert!(10 * ms(REPLICA_ACCEPT_POLL_EVERY) <= ms(REPLICA_CONNECT_MAX) && 10 * ms(LOADING_POLL_EVERY) <= ms(COMMAND_TIMEOUT));
const _: () = assert!(10 * ms(SERVER_VERSION_POLL_EVERY) <= ms(SERVER_VERSION_WAIT_MAX));
const _: () = assert!(ms(RETRY_WAIT_SLICE) <= ms(JOIN_RETRY_BASE) && ms(NODE_RESTART_CONNECT_TIMEOUT) < ms(NODE_SHUTDOWN_MAX));
// One aux field (its name and its value) fits the RDB head kept to read them.
const _: () = assert!(2 * RDB_AUX_STRING_BYTES_MAX <= RDB_HEAD_BYTES);
// The staging's margin on its estimate is a margin (at least the estimate itself).
const _: () = assert!(STAGED_HEADROOM_FACTOR >= 1.0 && RDB_LOAD_BYTES_PER_SEC_MIN > 0.0 && NODE_RESTART_SECS > 0.0);
// The swarm's download slots match its upload slots; an answer names fewer holders than it looks at.
const _: () = assert!(PEER_FETCHES_MAX == UPLOADS_MAX && PEERS_PER_ANSWER <= HOLDERS_LOOKED_AT_MAX);
// A holder passed over for being busy is asked again within the streak gap (its refusals count as in
// a row), and giving it up takes several such refusals.
const _: () = assert!(ms(PEER_BUSY_BACKOFF) < ms(PEER_BUSY_STREAK_GAP) && ms(PEER_BUSY_STREAK_GAP) < ms(PEER_BUSY_GIVE_UP));
// A fraction of the median rate; a multiple of the median time.
const _: () = assert!(PEER_SLOW_FRACTION > 0.0 && PEER_SLOW_FRACTION < 1.0 && ARRIVAL_SLOW_RATIO > 1.0);

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
const _: () = assert!(WINDOW_BLOCKS_MAX >= READERS_MAX as u64 && WINDOW_BLOCKS_DEFAULT <= WINDOW_BLOCKS_MAX && WINDOW_BLOCKS_SWARM_DEFAULT <= WINDOW_BLOCKS_MAX);
// A swarm's member looks further ahead than a pull from the relay alone (what the window is for there).
const _: () = assert!(WINDOW_BLOCKS_SWARM_DEFAULT > WINDOW_BLOCKS_DEFAULT);
const _: () = assert!(WINDOW_BLOCKS_SERVING_DEFAULT <= WINDOW_BLOCKS_MAX && WINDOW_BLOCKS_SERVING_DEFAULT > WINDOW_BLOCKS_SWARM_DEFAULT);
// A serving agent's default window and cache hold what the 32 blocks and 512 MiB before held.
const _: () = assert!(WINDOW_BLOCKS_SERVING_DEFAULT * BLOCK_BYTES_DEFAULT + SERVE_CACHE_BYTES_DEFAULT == WINDOW_BLOCKS_SWARM_DEFAULT * BLOCK_BYTES_DEFAULT + (512 << 20));
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
