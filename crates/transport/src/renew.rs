//! Asking the relay for a snapshot at or after a replication offset ([`Request::Renew`]): a staged
//! start can only partial-resync while the master's backlog still reaches back to the snapshot.

use crate::auth::Kind;
use crate::tcp::{connect, StreamReader};
use crate::wire::{Renewal, Request};
use crate::{Credentials, Error, Operation};
use std::io::Read;
use std::time::Duration;

/// Tell the relay we hold `generation` and need a snapshot at `min_offset` or later; its answer says
/// whether to attach again.
pub fn renew(relay: &endpoint::Endpoint, creds: &Credentials, generation: u64, min_offset: u64, timeout: Duration) -> Result<Renewal, Error> {
    let conn = connect(relay, creds, Kind::Data, timeout)?;
    let mut r = StreamReader::new(conn);
    let len = r.request(Request::Renew { generation, min_offset }, Operation::Renew)?;
    if len != 1 {
        return Err(Error::Protocol(format!("renewal answer of {len} bytes, expected 1")));
    }
    let mut b = [0u8; 1];
    r.s.read_exact(&mut b).map_err(Error::io(Operation::ReadRenewalAnswer))?;
    Renewal::decode(&b)
}
