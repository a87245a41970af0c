//! The relay's configuration, and the checks that refuse an unsafe one.

use crate::capture_policy::CapturePolicy;
use crate::error::Error;
use crate::offer::Offer;
use crate::source;
use crate::source_rdb::SourceRdb;
use replication::replica::Auth;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use transport::Token;

/// The relay's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The master, `host:port` (with `sentinel`: found through the sentinels, this is ignored when
    /// empty).
    pub master: String,
    /// Find the master through these sentinels and follow its failovers.
    pub sentinel: Option<client::sentinel::Sentinels>,
    /// Credentials for the master.
    pub master_auth: Option<Auth>,
    /// TLS to the master, its replicas and the sentinels.
    pub tls: Option<client::tls::Tls>,
    /// Where agents connect.
    pub listen: SocketAddr,
    /// The agents' shared secret.
    pub token: Token,
    /// More tokens accepted besides `token` (a rotation in progress); replaced by `Relay::set_tokens`.
    pub extra_tokens: Vec<Token>,
    /// Port announced to the master with `REPLCONF listening-port` (default: the listen port).
    pub announce_port: Option<u16>,
    /// The server version announced to a Valkey source (`REPLCONF version`: it picks the RDB version
    /// the source writes); `None`: the source's own version, as a replica of its version would say.
    pub announce_version: Option<String>,
    /// Snapshot tunables.
    pub snapshot: snapshot::Config,
    /// Keep each generation's RDB bytes and stream log in files under this directory (`--store`)
    /// instead of memory; `None`: in memory.
    pub store: Option<std::path::PathBuf>,
    /// Most agent connections served at once.
    pub connections_max: usize,
    /// Which transports to offer besides the TCP control connection.
    pub offer: Offer,
    /// Serve this file as the snapshot instead of capturing from a master (`master` is then only a
    /// label).
    pub file: Option<std::path::PathBuf>,
    /// Agents must connect over TLS, to this server configuration (`--agents-tls-cert/-key`).
    pub agents_tls: Option<Arc<rustls::ServerConfig>>,
    /// Where snapshots are captured from (the master, one of its replicas, or one chosen).
    pub source: source::Source,
    /// Whether a replica source's RDB compression and checksums are switched off during its captures.
    pub source_rdb: SourceRdb,
    /// When the first generation is captured.
    pub capture: CapturePolicy,
    /// Release the current generation's memory after this long without any agent connection.
    pub idle_release: Option<Duration>,
    /// Seal a generation once its stream log is this percent of its RDB (at least
    /// `limits::LOG_OUTWEIGHS_MIN_BYTES`): a fresh capture then serves the next join sooner. `None`: never.
    pub log_percent: Option<u32>,
}

impl Config {
    /// Refuse configurations that would expose the dataset.
    pub fn validate(&self) -> Result<(), Error> {
        if self.token.is_empty() && !self.listen.ip().is_loopback() {
            return Err(Error::Config(format!("refusing to listen on {} without a token: the snapshot is the whole dataset. Set FASTREPL_TOKEN or --token-file", self.listen)));
        }
        if self.snapshot.snapshot_bytes_max > limits::REGION_BYTES_MAX {
            return Err(Error::Config(format!("--snapshot-max-bytes can be at most {} (agents refuse a larger snapshot region)", limits::REGION_BYTES_MAX)));
        }
        if self.source_rdb == SourceRdb::Raw && self.source == source::Source::Master {
            return Err(Error::Config("--source-rdb raw changes the source's configuration, which is only done to a replica: use it with --source REPLICA or --source auto".into()));
        }
        if self.snapshot.pack_threads > limits::PACK_THREADS_MAX {
            return Err(Error::Config(format!("--compression-threads can be at most {} (0 packs on the capture's own thread)", limits::PACK_THREADS_MAX)));
        }
        if self.snapshot.block_size < limits::BLOCK_BYTES_MIN || self.snapshot.block_size > transport::wire::READ_MAX as u64 {
            return Err(Error::Config(format!("block size must be between {} and {} bytes", limits::BLOCK_BYTES_MIN, transport::wire::READ_MAX)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture_policy::CapturePolicy;
    use crate::offer::Offer;

    fn config(listen: &str, token: Token) -> Config {
        Config {
            master: "127.0.0.1:6379".into(),
            master_auth: None,
            listen: listen.parse().unwrap(),
            token,
            announce_port: None,
            announce_version: None,
            snapshot: snapshot::Config::default(),
            store: None,
            connections_max: 4,
            offer: Offer::ALL,
            file: None,
            extra_tokens: Vec::new(),
            agents_tls: None,
            source: source::Source::Master,
            sentinel: None,
            tls: None,
            source_rdb: SourceRdb::default(),
            capture: CapturePolicy::OnStart,
            idle_release: None,
            log_percent: None,
        }
    }

    #[test]
    fn refuses_to_expose_the_dataset_without_a_token() {
        assert!(config("127.0.0.1:0", Token::empty()).validate().is_ok(), "loopback may go without");
        let e = config("0.0.0.0:7400", Token::empty()).validate().unwrap_err();
        assert!(e.to_string().contains("without a token"), "{e}");
        assert!(config("0.0.0.0:7400", Token::new(b"0123456789abcdef").unwrap()).validate().is_ok());
    }

    #[test]
    fn block_size_within_one_read() {
        let mut c = config("127.0.0.1:0", Token::empty());
        c.snapshot.block_size = limits::BLOCK_BYTES_MIN - 1;
        assert!(c.validate().is_err());
        c.snapshot.block_size = u64::from(transport::wire::READ_MAX) + 1;
        assert!(c.validate().is_err());
        c.snapshot.block_size = limits::BLOCK_BYTES_DEFAULT;
        assert!(c.validate().is_ok());
    }

    #[test]
    fn compression_threads_are_bounded() {
        let mut c = config("127.0.0.1:0", Token::empty());
        c.snapshot.pack_threads = limits::PACK_THREADS_MAX + 1;
        let e = c.validate().unwrap_err();
        assert!(e.to_string().contains("--compression-threads"), "{e}");
        c.snapshot.pack_threads = 0;
        assert!(c.validate().is_ok(), "0: packed on the capture's thread");
    }
}
