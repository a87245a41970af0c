//! The arguments more than one command takes, each group flattened into the commands' own:
//! TLS to the servers ([`TlsArgs`]), Sentinel ([`SentinelArgs`]), TLS to the relay and the
//! credentials built from it ([`RelayTlsArgs`]), how a snapshot is pulled ([`PullArgs`]); and the
//! global `--log-format` ([`LogFormat`]).

use crate::transport_arg::TransportArg;
use anyhow::{Context, Result};
use std::path::PathBuf;

/// How log lines are written (`--log-format`, every command).
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// TLS to the relay (when it has --agents-tls-cert).
#[derive(clap::Args)]
pub struct RelayTlsArgs {
    /// Reach the relay over TLS, trusting relay certificates this CA signed, PEM.
    #[arg(long, env = "FASTREPL_RELAY_CACERT")]
    relay_cacert: Option<PathBuf>,
    /// Name to check the relay's certificate against (default: the host in --relay, a name or an address).
    #[arg(long, requires = "relay_cacert", env = "FASTREPL_RELAY_SERVER_NAME")]
    relay_server_name: Option<String>,
}

impl RelayTlsArgs {
    /// The token, with TLS to the relay when asked for.
    pub fn credentials(&self, token: transport::Token) -> Result<transport::Credentials> {
        self.credentials_serving(token, None)
    }

    /// Like `credentials`, serving peers over TLS with `peer` (certificate, key) when given.
    pub fn credentials_serving(&self, token: transport::Token, peer: Option<(&PathBuf, &PathBuf)>) -> Result<transport::Credentials> {
        let Some(ca) = &self.relay_cacert else { return Ok(token.into()) };
        let mut t = transport::tls::RelayTls::load(ca, self.relay_server_name.clone()).map_err(anyhow::Error::msg).context("load --relay-cacert")?;
        if let Some((c, k)) = peer {
            t = t.serving_peers(c, k).map_err(anyhow::Error::msg).context("load --peer-tls-cert")?;
        }
        Ok(transport::Credentials::from(token).with_relay_tls(t))
    }
}

/// TLS to Redis/Valkey servers and sentinels, as redis-cli names it.
#[derive(clap::Args)]
pub struct TlsArgs {
    /// Speak TLS to the master, its replicas and the sentinels.
    #[arg(long, env = "FASTREPL_TLS")]
    tls: bool,
    /// CA certificate(s) to trust, PEM (default: the system's bundle).
    #[arg(long, requires = "tls", env = "FASTREPL_CACERT")]
    cacert: Option<PathBuf>,
    /// Client certificate, PEM, for servers with tls-auth-clients.
    #[arg(long, requires_all = ["tls", "key"], env = "FASTREPL_CERT")]
    cert: Option<PathBuf>,
    /// Private key of --cert, PEM.
    #[arg(long, requires_all = ["tls", "cert"], env = "FASTREPL_KEY")]
    key: Option<PathBuf>,
    /// Name to check the servers' certificates against (default: the host connected to), as
    /// redis-cli's --sni; the older spelling tls-server-name is accepted too.
    #[arg(long = "sni", alias = "tls-server-name", requires = "tls", env = "FASTREPL_SNI")]
    tls_server_name: Option<String>,
}

impl TlsArgs {
    pub fn load(&self) -> Result<Option<client::tls::Tls>> {
        if !self.tls {
            return Ok(None);
        }
        let o = client::tls::Options { cacert: self.cacert.clone(), cert: self.cert.clone(), key: self.key.clone(), server_name: self.tls_server_name.clone() };
        Ok(Some(client::tls::Tls::load(&o).map_err(anyhow::Error::msg).context("load TLS certificates")?))
    }
}

/// Sentinel, as Redis clients use it: the master of a named group, followed through failovers.
#[derive(clap::Args)]
pub struct SentinelArgs {
    /// Find the master through these sentinels, host:port[,host:port...] (tried in order), and
    /// follow its failovers.
    #[arg(long, requires = "master_name", env = "FASTREPL_SENTINEL")]
    sentinel: Option<String>,
    /// The master group's name, as in `sentinel monitor <name> ...`.
    #[arg(long, requires = "sentinel", env = "FASTREPL_MASTER_NAME")]
    master_name: Option<String>,
    /// ACL user for the sentinels.
    #[arg(long, env = "FASTREPL_SENTINEL_USER")]
    sentinel_user: Option<String>,
    /// File holding the sentinels' password (else $FASTREPL_SENTINEL_PASSWORD).
    #[arg(long, env = "FASTREPL_SENTINEL_PASSWORD_FILE")]
    sentinel_password_file: Option<PathBuf>,
}

impl SentinelArgs {
    pub fn sentinels(&self, tls: Option<&client::tls::Tls>) -> Result<Option<client::sentinel::Sentinels>> {
        let Some(list) = &self.sentinel else { return Ok(None) };
        let auth = secrets::auth(self.sentinel_user.as_deref(), self.sentinel_password_file.as_deref(), "FASTREPL_SENTINEL_PASSWORD")?;
        let mut s = client::sentinel::Sentinels::new(list, self.master_name.as_deref().unwrap_or(""), auth).map_err(anyhow::Error::msg)?;
        s.tls = tls.cloned();
        Ok(Some(s))
    }
}

/// How a snapshot is pulled from the relay: the same flags for join, stage and fetch.
#[derive(clap::Args)]
pub struct PullArgs {
    /// Transport for the snapshot: auto picks shm on the relay's host, ucx where UCX finds an RDMA
    /// device, tcp otherwise, and says which.
    #[arg(long, value_enum, default_value_t, env = "FASTREPL_TRANSPORT")]
    transport: TransportArg,
    /// Readers (connections, each with reads in flight); 0 = the transport's default (4; ucx 2).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=limits::READERS_MAX as u64), env = "FASTREPL_READERS")]
    readers: u64,
    /// Blocks fetched ahead of what is written (to the replica or the file) at most [default: 64 for a
    /// join that serves other agents, 32 for one that only reads from them, 16 for a pull from the
    /// relay alone]. A join that serves other agents also looks ahead by the room its serve cache does
    /// not use yet (its blocks in memory stay within this window and `--serve-cache-mib`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=limits::WINDOW_BLOCKS_MAX), env = "FASTREPL_WINDOW_BLOCKS")]
    window_blocks: Option<u64>,
}

impl PullArgs {
    /// The pull's settings, as the agent takes them.
    pub fn config(&self) -> agent::config::PullConfig {
        agent::config::PullConfig { transport: self.transport.kind(), readers: self.readers as usize, window_blocks: self.window_blocks }
    }
}

#[cfg(test)]
mod tests {
    use super::PullArgs;

    #[test]
    fn the_help_states_the_window_defaults_limits_holds() {
        let cmd = <PullArgs as clap::Args>::augment_args(clap::Command::new("join"));
        let help = cmd.clone().render_long_help().to_string().split_whitespace().collect::<Vec<_>>().join(" ");
        let said = format!(
            "[default: {} for a join that serves other agents, {} for one that only reads from them, {} for a pull from the relay alone]",
            limits::WINDOW_BLOCKS_SERVING_DEFAULT,
            limits::WINDOW_BLOCKS_SWARM_DEFAULT,
            limits::WINDOW_BLOCKS_DEFAULT
        );
        assert!(help.contains(&said), "the help's window defaults are not limits':\n{help}");
    }
}

/// The master's credentials, as relay and stage take them: an ACL user, and its password from a
/// file or `$FASTREPL_MASTER_PASSWORD`, never argv. (join says what the user becomes on the replica.)
#[derive(clap::Args)]
pub struct MasterAuthArgs {
    /// ACL user for the master.
    #[arg(long, env = "FASTREPL_MASTER_USER")]
    master_user: Option<String>,
    /// File holding the master's password (else $FASTREPL_MASTER_PASSWORD).
    #[arg(long, env = "FASTREPL_MASTER_PASSWORD_FILE")]
    master_password_file: Option<PathBuf>,
}

impl MasterAuthArgs {
    /// The credentials (none without a password; a user without one is refused).
    pub fn auth(&self) -> anyhow::Result<Option<replication::replica::Auth>> {
        Ok(secrets::auth(self.master_user.as_deref(), self.master_password_file.as_deref(), "FASTREPL_MASTER_PASSWORD")?)
    }
}
