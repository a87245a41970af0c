//! Redis Sentinel, as clients use it: ask the sentinels which server is the master of a named group
//! (`SENTINEL get-master-addr-by-name`), trying each in turn, and follow `+switch-master` to learn of
//! a failover as it happens. Parsing is separate from the sockets ([`parse_addr`], [`parse_switch`]).

use crate::{Client, Error};
use replication::replica::Auth;
use resp::Frame;
use std::time::Duration;

/// No sentinel named the master.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct NoMaster {
    /// What each sentinel said.
    pub why: String,
    /// Every sentinel refused our credentials or the command (`NOPERM`, `WRONGPASS`, `NOAUTH`).
    pub refused: bool,
}

/// The sentinels of one master group.
#[derive(Debug, Clone)]
pub struct Sentinels {
    /// `host:port` of each sentinel, tried in this order.
    pub addrs: Vec<String>,
    /// The master group's name (`sentinel monitor <name> …`).
    pub name: String,
    /// Credentials for the sentinels (`requirepass`/ACL on the sentinels themselves).
    pub auth: Option<Auth>,
    /// TLS to the sentinels (`--tls`: to every server and sentinel, as redis-cli does).
    pub tls: Option<crate::tls::Tls>,
}

/// The answer to `SENTINEL get-master-addr-by-name`: `host:port`, `None` for an unknown name.
pub fn parse_addr(reply: &Frame) -> Result<Option<String>, String> {
    match reply {
        Frame::Null => Ok(None),
        Frame::Array(a) if a.len() == 2 => {
            let host = a[0].as_text().ok_or("host is not text")?;
            let port: u16 = a[1].as_text().and_then(|p| p.parse().ok()).ok_or("port is not a number")?;
            if host.is_empty() || host.len() > limits::SENTINEL_HOST_BYTES_MAX {
                return Err(format!("bad host {host:?}"));
            }
            Ok(Some(endpoint::host_port(&host, port)))
        }
        Frame::Error(e) => Err(String::from_utf8_lossy(e).into_owned()),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// A `+switch-master` message for group `name`: the new master's `host:port`. Other groups' and
/// other channels' messages are `None`.
pub fn parse_switch(push: &Frame, name: &str) -> Option<String> {
    let a = push.as_array()?;
    if a.len() != 3 || a[0].as_text()? != "message" || a[1].as_text()? != "+switch-master" {
        return None;
    }
    let text = a[2].as_text()?;
    let f: Vec<&str> = text.split(' ').collect();
    if f.len() != 5 || f[0] != name {
        return None;
    }
    let port: u16 = f[4].parse().ok()?;
    Some(if f[3].contains(':') { format!("[{}]:{port}", f[3]) } else { format!("{}:{port}", f[3]) })
}

impl Sentinels {
    /// Parse `--sentinel a:1,b:2`.
    pub fn new(list: &str, name: &str, auth: Option<Auth>) -> Result<Sentinels, String> {
        let addrs: Vec<String> = list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
        if addrs.is_empty() {
            return Err("--sentinel: no address given".into());
        }
        if addrs.len() > limits::SENTINELS_MAX {
            return Err(format!("--sentinel: more than {} sentinels", limits::SENTINELS_MAX));
        }
        if name.is_empty() {
            return Err("--master-name is required with --sentinel".into());
        }
        if let Some(e) = addrs.iter().find_map(|a| a.parse::<endpoint::Endpoint>().err()) {
            return Err(format!("--sentinel: {e}"));
        }
        Ok(Sentinels { addrs, name: name.into(), auth, tls: None })
    }

    fn connect(&self, addr: &str, timeout: Duration) -> Result<Client, Error> {
        Client::connect_tls(addr, self.auth.as_ref(), timeout, self.tls.as_ref())
    }

    /// The master now, from the first sentinel that knows the group. Errors name every sentinel tried.
    pub fn master(&self, timeout: Duration) -> Result<String, String> {
        self.find_master(timeout).map_err(|e| e.to_string())
    }

    /// Like [`Sentinels::master`], saying whether every sentinel refused our credentials or the
    /// command (then asking again cannot help).
    pub fn find_master(&self, timeout: Duration) -> Result<String, NoMaster> {
        let mut why = Vec::new();
        let mut refused = 0;
        for a in &self.addrs {
            let r = self.connect(a, timeout).and_then(|mut c| {
                let reply = c.raw(&["SENTINEL", "get-master-addr-by-name", &self.name])?;
                match &reply {
                    Frame::Error(e) => Err(Error::server(a, b"SENTINEL", e)),
                    _ => Ok(parse_addr(&reply)),
                }
            });
            match r {
                Ok(Ok(Some(m))) => return Ok(m),
                Ok(Ok(None)) => why.push(format!("{a}: does not monitor a master named {:?}", self.name)),
                Ok(Err(e)) => why.push(format!("{a}: {e}")),
                Err(e) => {
                    refused += usize::from(e.is_permission());
                    why.push(format!("{a}: {e}"));
                }
            }
        }
        Err(NoMaster { why: format!("no sentinel named the master {:?} ({})", self.name, why.join("; ")), refused: refused == self.addrs.len() })
    }

    /// Follow the group's master until `stop()` says so: call `changed(new)` whenever it differs
    /// from the last one seen (from a `+switch-master`, or found on reconnecting to a sentinel, since
    /// a switch may have happened while we were not subscribed). Moves to the next sentinel when one
    /// fails. Blocks; run it on its own thread.
    pub fn follow(&self, mut last: String, stop: &dyn Fn() -> bool, changed: &mut dyn FnMut(&str)) {
        let mut i = 0;
        let mut backoff = limits::SENTINEL_RETRY_MIN;
        while !stop() {
            let addr = &self.addrs[i % self.addrs.len()];
            i += 1;
            let r = (|| -> Result<(), String> {
                let mut c = self.connect(addr, limits::CONNECT_TIMEOUT).map_err(|e| e.to_string())?;
                c.cmd(&["SUBSCRIBE", "+switch-master"]).map_err(|e| e.to_string())?;
                // Subscribed: anything from now on arrives as a message. Catch up on what we missed.
                let now = self.master(limits::CONNECT_TIMEOUT)?;
                if now != last {
                    last = now;
                    changed(&last);
                }
                backoff = limits::SENTINEL_RETRY_MIN;
                while !stop() {
                    match c.next_push(limits::SENTINEL_PUSH_WAIT) {
                        Ok(Some(push)) => {
                            if let Some(new) = parse_switch(&push, &self.name) {
                                if new != last {
                                    last = new;
                                    changed(&last);
                                }
                            }
                        }
                        Ok(None) => {}
                        Err(e) => return Err(e.to_string()),
                    }
                }
                Ok(())
            })();
            if let Err(e) = r {
                tracing::warn!(sentinel = %addr, error = %e, "sentinel connection lost; trying the next");
                std::thread::sleep(backoff); // Backoff before the next sentinel, not synchronization.
                backoff = (backoff * 2).min(limits::SENTINEL_RETRY_MAX);
            }
        }
    }
}

/// Fuzz entry (`fuzz/fuzz_targets/sentinel.rs`): whatever a sentinel sends, parsed as RESP, never
/// panics the parsers, and an address they accept is `host:port` with a valid port.
#[cfg(any(test, fuzzing))]
pub fn fuzz_one(data: &[u8]) {
    let limits = resp::Limits::default();
    let mut rest = data;
    while let Ok((frame, used)) = resp::parse(rest, &limits) {
        for a in [parse_addr(&frame).ok().flatten(), parse_switch(&frame, "mymaster")].into_iter().flatten() {
            let (h, p) = a.rsplit_once(':').expect("host:port");
            assert!(!h.is_empty() && p.parse::<u16>().is_ok(), "{a}");
        }
        if used == 0 {
            break;
        }
        rest = &rest[used..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Frame {
        Frame::Bulk(s.as_bytes().to_vec())
    }

    #[test]
    fn reads_the_master_address() {
        assert_eq!(parse_addr(&Frame::Array(vec![bulk("10.0.0.1"), bulk("6379")])).unwrap(), Some("10.0.0.1:6379".into()));
        assert_eq!(parse_addr(&Frame::Array(vec![bulk("::1"), bulk("6379")])).unwrap(), Some("[::1]:6379".into()));
        assert_eq!(parse_addr(&Frame::Null).unwrap(), None);
        assert!(parse_addr(&Frame::Array(vec![bulk("h"), bulk("port")])).is_err());
        assert!(parse_addr(&Frame::Array(vec![bulk("h")])).is_err());
        assert!(parse_addr(&Frame::Error(b"ERR no such".to_vec())).unwrap_err().contains("no such"));
    }

    #[test]
    fn reads_switch_master_for_our_group_only() {
        let msg = |text: &str| Frame::Array(vec![bulk("message"), bulk("+switch-master"), bulk(text)]);
        assert_eq!(parse_switch(&msg("mymaster 10.0.0.1 6379 10.0.0.2 6380"), "mymaster"), Some("10.0.0.2:6380".into()));
        assert_eq!(parse_switch(&msg("other 10.0.0.1 6379 10.0.0.2 6380"), "mymaster"), None);
        assert_eq!(parse_switch(&msg("mymaster 10.0.0.1 6379 10.0.0.2"), "mymaster"), None);
        assert_eq!(parse_switch(&msg("mymaster a 1 b port"), "mymaster"), None);
        let other = Frame::Array(vec![bulk("subscribe"), bulk("+switch-master"), Frame::Integer(1)]);
        assert_eq!(parse_switch(&other, "mymaster"), None);
    }

    #[test]
    fn fuzz_smoke() {
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let alphabet = b"*$+-:\r\n0123456789 mymaster+switch-message10.0.0.1";
        for len in 0..3000usize {
            let d: Vec<u8> = (0..len % 120)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    alphabet[(x % alphabet.len() as u64) as usize]
                })
                .collect();
            fuzz_one(&d);
        }
        fuzz_one(b"*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$33\r\nmymaster 10.0.0.1 1 10.0.0.2 65535\r\n");
    }

    #[test]
    fn the_list_is_checked() {
        assert!(Sentinels::new("", "m", None).is_err());
        assert!(Sentinels::new("a:1", "", None).is_err());
        assert_eq!(Sentinels::new("a:1, b:2", "m", None).unwrap().addrs, vec!["a:1", "b:2"]);
    }
}
