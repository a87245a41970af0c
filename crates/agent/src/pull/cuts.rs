//! The peer connections the pull's planner may cut: each peer fetcher leaves here a handle on the
//! socket of each connection it keeps to a peer, and the planner shuts the one carrying reads it
//! abandoned (moved elsewhere, their blocks held since: see `swarm::Chooser::to_cut`). A read cannot
//! be taken back from a pipelined connection; shutting the socket ends the fetcher's receive at
//! once, where the read would otherwise run on at a slow host's pace (and the pull's end would wait
//! for it to join the fetcher's thread).

use std::collections::HashMap;
use std::net::{Shutdown, TcpStream};
use std::sync::Mutex;

/// Handles on the peer fetchers' connections, by fetcher and peer.
#[derive(Default)]
pub struct Cuts {
    socks: Mutex<Socks>,
}

#[derive(Default)]
struct Socks {
    open: HashMap<(usize, u32), TcpStream>,
    /// The pull is over ([`Cuts::cut_all`]): a connection a fetcher opens from now on (one in the
    /// making then, or one for a read still queued to it) is shut at once.
    over: bool,
}

impl Cuts {
    /// Fetcher `fetcher` opened a connection to `peer` (`sock`: a clone of its socket).
    pub fn opened(&self, fetcher: usize, peer: u32, sock: TcpStream) {
        let mut socks = self.lock();
        if socks.over {
            // Already closed by the peer: nothing to end.
            let _ = sock.shutdown(Shutdown::Both);
            return;
        }
        socks.open.insert((fetcher, peer), sock);
    }

    /// Fetcher `fetcher` closed its connection to `peer`.
    pub fn closed(&self, fetcher: usize, peer: u32) {
        self.lock().open.remove(&(fetcher, peer));
    }

    /// Whether fetcher `fetcher`'s connection to `peer` is still here, not cut. A connection cut when
    /// it carried no read any more (its last one ended as the cut came) is found dead only by the
    /// next read sent on it: the fetcher asks this before reusing one, or that read would fail and be
    /// taken for the peer's failure.
    pub fn is_open(&self, fetcher: usize, peer: u32) -> bool {
        self.lock().open.contains_key(&(fetcher, peer))
    }

    /// Shut fetcher `fetcher`'s connection to `peer`: its reads on the wire end in an error (the
    /// fetcher reports them missed and drops the connection). Whether there was one.
    pub fn cut(&self, fetcher: usize, peer: u32) -> bool {
        let Some(s) = self.lock().open.remove(&(fetcher, peer)) else { return false };
        if let Err(e) = s.shutdown(Shutdown::Both) {
            // Already closed by the peer or the fetcher: its read ends anyway.
            tracing::debug!(peer, error = %e, "shut down an abandoned peer connection");
        }
        true
    }

    /// The pull is over: shut every connection still here, and any opened from now on. How many
    /// were here.
    pub fn cut_all(&self) -> usize {
        let socks: Vec<TcpStream> = {
            let mut all = self.lock();
            all.over = true;
            all.open.drain().map(|(_, s)| s).collect()
        };
        for s in &socks {
            // Already closed by the peer or the fetcher: nothing to end.
            let _ = s.shutdown(Shutdown::Both);
        }
        socks.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Socks> {
        // A fetcher that panicked holding the lock left the map whole (single inserts and removes).
        self.socks.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;

    /// A reader that gives up after a while: a cut that does not end its read fails the test (the
    /// read's error, not `Ok(0)`) instead of hanging it.
    fn reader_to(l: &TcpListener) -> TcpStream {
        let r = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        r.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
        r
    }

    #[test]
    fn a_cut_connection_ends_the_read_waiting_on_it() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut reader = reader_to(&l);
        // The peer's end stays open and sends nothing: only the cut can end the read.
        let (_peer, _) = l.accept().unwrap();
        let cuts = Cuts::default();
        cuts.opened(0, 7, reader.try_clone().unwrap());
        assert!(!cuts.cut(1, 7), "another fetcher's connection to the peer is not this one");
        let waiting = std::thread::spawn(move || reader.read(&mut [0u8; 16]).map_err(|e| e.kind()));
        assert!(cuts.is_open(0, 7) && !cuts.is_open(1, 7));
        assert!(cuts.cut(0, 7));
        assert!(!cuts.cut(0, 7), "cut once");
        assert!(!cuts.is_open(0, 7), "a cut connection is not reused");
        assert_eq!(waiting.join().unwrap(), Ok(0), "the read ends with the connection");
    }

    #[test]
    fn at_the_pull_s_end_every_connection_is_cut() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let cuts = Cuts::default();
        let mut waiting = Vec::new();
        let mut peers = Vec::new();
        for (f, p) in [(0, 7), (1, 8)] {
            let mut reader = reader_to(&l);
            peers.push(l.accept().unwrap().0);
            cuts.opened(f, p, reader.try_clone().unwrap());
            waiting.push(std::thread::spawn(move || reader.read(&mut [0u8; 16]).map_err(|e| e.kind())));
        }
        assert_eq!(cuts.cut_all(), 2);
        for w in waiting {
            assert_eq!(w.join().unwrap(), Ok(0), "every read ends with its connection");
        }
        assert!(!cuts.is_open(0, 7) && !cuts.is_open(1, 8) && cuts.cut_all() == 0);
        // A fetcher that opens a connection after the end (a read still queued to it) finds it shut.
        let mut late = reader_to(&l);
        let _peer = l.accept().unwrap();
        cuts.opened(0, 9, late.try_clone().unwrap());
        assert!(!cuts.is_open(0, 9));
        assert_eq!(late.read(&mut [0u8; 16]).map_err(|e| e.kind()), Ok(0), "shut as it was opened");
    }
}
