//! Output that goes away: a long-running command whose stdout and stderr reader is gone (`relay | head`,
//! a log shipper that died) or whose disk is full keeps serving, and stops on SIGTERM.

mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A process whose output is not a file we read: killed on drop, also when the test fails.
struct Unread {
    name: String,
    child: Child,
    /// The reading end of a pipe kept open and never read (a log reader that stalled).
    _stalled: Option<std::io::PipeReader>,
}

impl Unread {
    /// Spawn `cmd` with stdout and stderr one pipe; read it until a line holds `until` (with a
    /// deadline), then close the reading end, as `| head` does. `None`: close it before the first line.
    fn piped(name: &str, mut cmd: Command, until: Option<&str>) -> Unread {
        let (reader, writer) = std::io::pipe().expect("pipe");
        cmd.stdin(Stdio::null()).stdout(writer.try_clone().expect("clone pipe")).stderr(writer);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        // `cmd` holds our copies of the writing end until dropped (else the reader never sees the end).
        drop(cmd);
        let p = Unread { name: name.into(), child, _stalled: None };
        let Some(until) = until else {
            drop(reader);
            return p;
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let until = until.to_string();
        // The reader thread returns as soon as it saw the line, dropping (closing) the reading end.
        std::thread::spawn(move || {
            let mut seen = String::new();
            for line in BufReader::new(reader).lines() {
                let Ok(line) = line else { break };
                seen += &line;
                seen.push('\n');
                if line.contains(&until) {
                    let _ = tx.send(Ok(seen));
                    return;
                }
            }
            let _ = tx.send(Err(seen));
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Ok(_)) => p,
            Ok(Err(seen)) => panic!("{name} ended its output before saying what we waited for:\n{seen}"),
            Err(_) => panic!("{name} did not say what we waited for within 30 s"),
        }
    }

    /// Spawn `cmd` with stdout and stderr on /dev/full: every write fails with ENOSPC.
    fn full_disk(name: &str, mut cmd: Command) -> Unread {
        let full = || std::fs::OpenOptions::new().write(true).open("/dev/full").expect("open /dev/full");
        cmd.stdin(Stdio::null()).stdout(full()).stderr(full());
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Unread { name: name.into(), child, _stalled: None }
    }

    /// Spawn `cmd` with stdout and stderr one pipe that is full before it starts and never read: a
    /// log reader that stalled (a log shipper hung, not gone). Every write to it would block.
    fn stalled(name: &str, mut cmd: Command) -> Unread {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let (reader, mut writer) = std::io::pipe().expect("pipe");
        let fd = writer.as_raw_fd();
        // SAFETY: fcntl on a descriptor we own, with flags only; no pointers.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) }, 0);
        let mut filled = 0usize;
        loop {
            match writer.write(&[b'x'; 4096]) {
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("fill the pipe: {e}"),
            }
        }
        // Blocking again (the flag is the open file's, which the child shares): its writes block.
        // SAFETY: as above.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFL, flags) }, 0);
        assert!(filled >= 4096, "the pipe took {filled} bytes");
        cmd.stdin(Stdio::null()).stdout(writer.try_clone().expect("clone pipe")).stderr(writer);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        drop(cmd);
        Unread { name: name.into(), child, _stalled: Some(reader) }
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then wait for the exit with a deadline; its status.
    fn terminate(&mut self, within: Duration) -> std::process::ExitStatus {
        // SAFETY: kill takes a pid and a signal number; the pid is our own child's, not yet reaped.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) }, 0, "SIGTERM {}", self.name);
        self.wait(within)
    }

    /// Wait for the exit with a deadline; its status.
    fn wait(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st;
            }
            assert!(Instant::now() < deadline, "{} still running after {within:?}", self.name);
            std::thread::sleep(Duration::from_millis(20)); // Polling for exit with a deadline.
        }
    }
}

impl Drop for Unread {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn relay_cmd(master: &str, listen: &str, metrics: &str) -> Command {
    let mut cmd = fastrepl();
    cmd.args(["relay", "--master", master, "--listen", listen, "--metrics", metrics]);
    Transport::from_env().apply(&mut cmd);
    cmd
}

fn join_cmd(relay: &str, replica: &str) -> Command {
    let mut cmd = fastrepl();
    cmd.args(["join", "--relay", relay, "--replica", replica, "--json"]);
    Transport::from_env().apply(&mut cmd);
    cmd
}

/// The relay's count of dropped writes, once its metrics answer.
fn dropped_writes(metrics: &str) -> f64 {
    let text = wait_until("the relay's metrics", Duration::from_secs(30), || metrics::scrape(metrics, Duration::from_secs(5)).ok());
    let samples = metrics::parse(&text).unwrap();
    samples.iter().find(|s| s.name == "fastrepl_relay_output_writes_dropped_total").unwrap_or_else(|| panic!("no dropped-writes counter:\n{text}")).value
}

/// The replica handed to `master` by a partial resync: the master counted one more, the replica's
/// link to it is up.
fn wait_handed_over(master: &Server, replica: &Server, partial0: i64) {
    let port = master.addr().rsplit(':').next().unwrap().to_string();
    wait_until("the replica handed to the master by a partial resync", Duration::from_secs(120), || {
        let r = replica.client().info("replication").ok()?;
        (info_num(master, "stats", "sync_partial_ok") > partial0 && r.get("master_link_status") == Some("up") && r.get("master_port") == Some(port.as_str())).then_some(())
    });
}

/// A master with a few thousand keys, an empty replica, and free addresses for a relay's agent port
/// and its metrics.
fn servers() -> (Server, Server, String, String) {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_small_mixed(&mut master.client(), 3000);
    let replica = Server::start(Flavor::Redis70, &[]);
    (master, replica, format!("127.0.0.1:{}", fixtures::free_port()), format!("127.0.0.1:{}", fixtures::free_port()))
}

#[test]
fn a_relay_and_a_join_whose_output_reader_is_gone_serve_and_stop_on_sigterm() {
    let (master, replica, listen, metrics) = servers();
    // `fastrepl relay … | head`: read until it listens, then gone; everything after fails with EPIPE.
    let mut relay = Unread::piped("relay", relay_cmd(&master.addr(), &listen, &metrics), Some(&format!("relay listening on {listen}")));
    let partial0 = info_num(&master, "stats", "sync_partial_ok");
    // The join's reader is gone before its first line: its logs, its report and its guard's stderr.
    let mut join = Unread::piped("join", join_cmd(&listen, &replica.addr()), None);
    wait_handed_over(&master, &replica, partial0);
    assert_identical(&master, &replica);
    // The relay logged (the capture, the agent) and each line was dropped, counted.
    assert!(dropped_writes(&metrics) > 0.0, "the relay's log lines were not counted as dropped");
    // Its exit status is the join's (0: partial), its report dropped with the rest of its output.
    let st = join.wait(Duration::from_secs(60));
    assert_eq!(st.code(), Some(0), "the join's exit: {st:?}");
    assert!(relay.running(), "the relay ended on its own");
    let st = relay.terminate(Duration::from_secs(30));
    assert_eq!(st.code(), Some(0), "the relay's exit after SIGTERM: {st:?}");
}

#[test]
fn a_relay_on_a_full_disk_serves_and_stops_on_sigterm() {
    let (master, replica, listen, metrics) = servers();
    let mut relay = Unread::full_disk("relay", relay_cmd(&master.addr(), &listen, &metrics));
    // Its log cannot say it listens: its metrics answering (served after the agent port) does.
    let dropped = dropped_writes(&metrics);
    assert!(dropped > 0.0, "the relay's first log lines were not counted as dropped");
    let partial0 = info_num(&master, "stats", "sync_partial_ok");
    let j = join(&listen, &replica.addr(), &[], &[]);
    assert_partial(&j);
    assert_eq!(info_num(&master, "stats", "sync_partial_ok"), partial0 + 1);
    assert_identical(&master, &replica);
    assert!(dropped_writes(&metrics) > dropped, "the relay's log lines during the join were not counted as dropped");
    let st = relay.terminate(Duration::from_secs(30));
    assert_eq!(st.code(), Some(0), "the relay's exit after SIGTERM: {st:?}");
}

#[test]
fn a_join_whose_output_reader_is_gone_stops_on_sigterm_mid_pull_and_resets_its_replica() {
    // The master writes its RDB slowly (20 ms a key of 16 KiB, 30 s in all) and the relay publishes
    // it in small blocks: the join streams it to the replica while it arrives, and is stopped then.
    let master = Server::start(Flavor::Redis70, &["--rdb-key-save-delay", "20000"]);
    data::fill_big_values(&mut master.client(), 1500, 16 << 10);
    let replica = Server::start(Flavor::Redis70, &[]);
    let relay = relay(&master.addr(), &["--block-size", "65536"], &[]);
    let mut join = Unread::piped("join", join_cmd(&relay.addr, &replica.addr()), None);
    // The replica follows the agent and loads what it streams while the master still writes.
    wait_until("the replica to follow the agent", Duration::from_secs(60), || {
        let r = replica.client().info("replication").ok()?;
        (r.get("role") == Some("slave") && r.get("master_port") != master.addr().rsplit(':').next()).then_some(())
    });
    // Interrupted (130) after resetting the replica, well within the stop's bound.
    let st = join.terminate(limits::STOP_GRACE_MAX + Duration::from_secs(10));
    assert_eq!(st.code(), Some(130), "the join's exit after SIGTERM: {st:?}");
    assert_untouched(&replica);
}

#[test]
fn a_relay_whose_log_reader_stalled_serves_and_stops_on_sigterm() {
    let (master, replica, listen, metrics) = servers();
    // Its stderr is full from the start: a thread that wrote its log line itself would block there
    // (the relay never listened, its capture stalled); lines wait in the log's queue instead.
    let mut cmd = relay_cmd(&master.addr(), &listen, &metrics);
    cmd.env("FASTREPL_LOG", "debug");
    let mut relay = Unread::stalled("relay", cmd);
    dropped_writes(&metrics);
    let partial0 = info_num(&master, "stats", "sync_partial_ok");
    let j = join(&listen, &replica.addr(), &[], &[]);
    assert_partial(&j);
    assert_eq!(info_num(&master, "stats", "sync_partial_ok"), partial0 + 1);
    assert_identical(&master, &replica);
    assert!(relay.running(), "the relay ended on its own");
    // Its last line cannot go out: the stop waits for it a bounded while, then ends.
    let st = relay.terminate(Duration::from_secs(30));
    assert_eq!(st.code(), Some(0), "the relay's exit after SIGTERM: {st:?}");
}
