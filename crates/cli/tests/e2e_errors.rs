//! Error texts as a new user meets them: each cause once, each context once. Commands that fail
//! for ordinary reasons (nothing listening, a port taken, a name that does not resolve, a file
//! missing) are run for real, and their last line is read as the chain it is (`context: cause:
//! cause`): no part said twice, the OS's reason once, the address it is about once. And a failure
//! leaves what it was given as it was (a failed fetch once removed its `--out`, /dev/null included),
//! and a fetch that succeeds replaces only the file `--out` names (a link stays a link).

mod common;
use common::*;
use std::net::TcpListener;

/// The parts of an error line (`fastrepl: a: b: c`), trimmed.
fn parts(line: &str) -> Vec<&str> {
    line.split(": ").map(str::trim).filter(|p| !p.is_empty()).collect()
}

/// What the command printed last on stderr (its error), with the command for messages.
fn error_of(args: &[&str]) -> String {
    let out = fastrepl().args(args).output().unwrap_or_else(|e| panic!("run fastrepl {args:?}: {e}"));
    assert!(!out.status.success(), "fastrepl {args:?} succeeded");
    let err = String::from_utf8_lossy(&out.stderr);
    // The error line: the first one that names the command's failure (a second line may say what to do).
    err.lines().find(|l| l.starts_with("fastrepl")).unwrap_or_else(|| panic!("fastrepl {args:?} printed no error line:\n{err}")).to_string()
}

/// No part of `line` repeats another, no OS error is said twice, and `addr` (when given) once in
/// its chain of causes (a join's first words, `join failed (relay R, replica X):`, name what it was
/// given, not a cause).
fn assert_said_once(line: &str, addr: Option<&str>) {
    let p = parts(line);
    for (i, a) in p.iter().enumerate() {
        for b in &p[i + 1..] {
            assert!(a.len() < 6 || a != b, "{a:?} is said twice in: {line}");
        }
    }
    assert!(line.matches("os error").count() <= 1, "the OS's reason twice in: {line}");
    if let Some(addr) = addr {
        let chain = match line.strip_prefix("fastrepl join failed (") {
            Some(rest) => rest.split_once("): ").map(|(_, c)| c).unwrap_or(rest),
            None => line,
        };
        assert_eq!(chain.matches(addr).count(), 1, "{addr} is not said exactly once in: {line}");
    }
}

#[test]
fn the_rule_reads_a_repeated_chain() {
    // What the relay printed on a taken port before: the cause twice.
    let old = "fastrepl: start relay: listen on 127.0.0.1:7400: Address already in use (os error 98): Address already in use (os error 98)";
    assert!(std::panic::catch_unwind(|| assert_said_once(old, None)).is_err());
    let old = "fastrepl join failed: local server: connect to 127.0.0.1:2: 127.0.0.1:2 (127.0.0.1:2): Connection refused (os error 111)";
    assert!(std::panic::catch_unwind(|| assert_said_once(old, Some("127.0.0.1:2"))).is_err());
    assert_said_once("fastrepl: start relay: listen on 127.0.0.1:7400: Address already in use (os error 98)", Some("127.0.0.1:7400"));
}

#[test]
fn each_cause_and_each_context_is_said_once() {
    // A closed port each, so that every address the line is about can be counted.
    let closed = || format!("127.0.0.1:{}", fixtures::free_port());
    let (relay, replica, a, b, master) = (closed(), closed(), closed(), closed(), closed());
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    let listen = closed();
    let cases: Vec<(Vec<&str>, Option<&str>)> = vec![
        (vec!["join", "--relay", &relay, "--replica", &replica, "--retries", "0"], Some(&replica)),
        (vec!["relay", "--master", &master, "--listen", &taken], Some(&taken)),
        (vec!["relay", "--master", &master, "--listen", &listen, "--metrics", &taken], Some(&taken)),
        (vec!["status", "--relay", &relay], Some(&relay)),
        (vec!["fetch", "--relay", &relay, "--out", "/dev/null"], Some(&relay)),
        (vec!["verify", &a, &b], Some(&a)),
        (vec!["stage", "--relay", &relay, "--master", &master, "--dir", "/nonexistent", "--server", "redis-7.0.15", "--server-config", "/nonexistent/redis.conf"], Some("/nonexistent/redis.conf")),
        (vec!["status", "--relay", "no-such-host.invalid:7400"], Some("no-such-host.invalid:7400")),
    ];
    for (args, addr) in cases {
        let line = error_of(&args);
        assert_said_once(&line, addr);
    }
    // The failed fetch into /dev/null left it the device it is (it once removed it).
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata("/dev/null").is_ok_and(|m| m.file_type().is_char_device()), "/dev/null is no longer a device");
}

#[test]
fn a_failed_fetch_leaves_out_as_it_was() {
    let closed = format!("127.0.0.1:{}", fixtures::free_port());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dump.rdb");
    std::fs::write(&out, b"the RDB that was here").unwrap();
    error_of(&["fetch", "--relay", &closed, "--out", out.to_str().unwrap()]);
    assert_eq!(std::fs::read(&out).unwrap(), b"the RDB that was here", "a failed fetch changed --out");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, [std::ffi::OsString::from("dump.rdb")], "a partial file was left beside --out");
}

#[test]
fn a_fetch_replaces_the_file_out_names_keeping_its_link_and_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_small_mixed(&mut master.client(), 500);
    let relay = relay(&master.addr(), &[], &[]);
    let dir = tempfile::tempdir().unwrap();
    let (target, link) = (dir.path().join("data/dump.rdb"), dir.path().join("dump.rdb"));
    std::fs::create_dir(dir.path().join("data")).unwrap();
    std::fs::write(&target, b"old").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = fastrepl().args(["fetch", "--relay", &relay.addr, "--out", link.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "--out, a link, was replaced by a file");
    let rdb = std::fs::read(&target).unwrap();
    assert!(rdb.starts_with(b"REDIS"), "the file the link names holds the snapshot ({} bytes)", rdb.len());
    assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o600, "its permissions were kept");
    assert_eq!(std::fs::read_dir(dir.path().join("data")).unwrap().count(), 1, "nothing left beside it");
}
