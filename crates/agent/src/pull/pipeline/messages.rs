//! What the pull's threads tell each other over their channels: the fetchers and the writer to the
//! planner ([`Report`], with a peer's miss said as a [`PeerMiss`]), the planner to the writer
//! ([`Feed`]). Apart because every thread speaks them and none owns them: a newcomer reads here
//! what each thread can say before reading any of them.

use crate::error::Error;
use crate::peers::tracker_link::Heard;
use crate::pull::pipeline::job::Job;
use std::sync::Arc;
use std::time::Duration;

/// Why a read from a peer gave no block.
#[derive(Debug)]
pub(super) enum PeerMiss {
    /// It serves its maximum: pass it over for a moment.
    Busy,
    /// It does not hold the block (dropped from its cache): the tracker must stop naming it for this
    /// block, or it would never offer another source.
    NotHeld,
    /// Its block failed the checksum: never fed, kept or served; it is never asked again and the
    /// tracker names it for nothing any more.
    Corrupt,
    /// It failed, stalled or vanished: never asked again; the tracker stops naming it for this block.
    Failed(transport::Error),
    /// Not answered: the connection was closed for an earlier read's miss (corrupt or failed).
    Dropped,
    /// The peer ended the connection part-way through the block's bytes (an orderly end of stream,
    /// [`transport::Error::is_cut_off`]): it served the block while it arrived and the arrival failed
    /// (see [`crate::peers::arrival`]). The tracker stops naming it for this block; it is not avoided
    /// unless its cut-offs exceed the blocks it served this agent by more than
    /// [`limits::PEER_CUT_OFFS_MAX`].
    CutOff,
}

/// A fetcher thread, by kind and number.
#[derive(Debug, Clone, Copy)]
pub(super) enum FetcherId {
    Relay(usize),
    Peer(usize),
}

/// What fetchers and the writer tell the planner.
pub(super) enum Report {
    /// A read ended with the block, verified. `took`: its own transfer (not its wait behind earlier
    /// reads on the connection); `rereads`: reads of it that failed the checksum first.
    Done { fetcher: FetcherId, job: Job, took: Duration, rereads: u32 },
    /// A read from a peer gave no block.
    Missed { fetcher: FetcherId, job: Job, miss: PeerMiss },
    /// A block's bytes started to arrive and peers may read it from us while they do.
    Arriving(u64),
    /// A block that was arriving will not complete from that read (its `Done` or `Missed` follows).
    ArrivalFailed(u64),
    /// A relay reader failed: so does the pull.
    Failed(Error),
    /// The writer passed blocks `0..n` on; it dropped `dropped` from the serving cache; `freed` are
    /// buffers to reuse.
    Written { n: u64, dropped: Vec<u64>, freed: Vec<Vec<u8>> },
    /// What the tracker link's thread heard back.
    Tracker(Heard),
}

/// What the planner sends the writer.
pub(super) enum Feed {
    /// The next block in order.
    Block(Arc<Vec<u8>>),
    /// Every block was sent.
    End,
    Failed(Error),
}
