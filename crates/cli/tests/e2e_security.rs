//! Authentication: masters with requirepass and with an ACL user; agents without the right token are
//! refused and learn nothing; no secret in argv, logs or errors.

mod common;
use common::*;

const MASTER_PW: &str = "master-secret-pw-4711";
const REPL_PW: &str = "replication-user-pw-0815";

fn assert_no_secrets(text: &str) {
    for s in [MASTER_PW, REPL_PW, TOKEN] {
        assert!(!text.contains(s), "a secret leaked into output:\n{text}");
    }
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline")).map(|b| String::from_utf8_lossy(&b).replace('\0', " ")).unwrap_or_default()
}

#[test]
fn master_with_requirepass() {
    let master = Server::start(Flavor::Redis70, &["--requirepass", MASTER_PW]);
    data::fill_every_type(&mut master.client(), 1, true);
    // The replica has a password too (the agent's own credentials for it), and the same one, so that
    // verify can use one password for both.
    let replica = Server::start(Flavor::Redis70, &["--requirepass", MASTER_PW]);
    let env = [("FASTREPL_MASTER_PASSWORD", MASTER_PW), ("FASTREPL_REPLICA_PASSWORD", MASTER_PW)];
    let relay = relay(&master.addr(), &[], &env[..1]);
    assert_no_secrets(&cmdline(relay.proc.pid()));
    let j = join(&relay.addr, &replica.addr(), &[], &env);
    assert_partial(&j);
    assert_identical(&master, &replica);
    assert_no_secrets(&j.output);
    assert_no_secrets(&relay.proc.output());
}

#[test]
fn master_with_acl_user_from_files() {
    // The default user is for people (requirepass); replication uses an ACL user with only what a
    // replica and the agent's checks need.
    let master = Server::start(Flavor::Valkey81, &["--requirepass", MASTER_PW]);
    let mut c = master.client();
    c.cmd(&["ACL", "SETUSER", "repl", "on", &format!(">{REPL_PW}"), "+psync", "+replconf", "+ping", "+info", "+sync"]).unwrap();
    data::fill_every_type(&mut c, 1, true);
    drop(c);
    let dir = tempfile::tempdir().unwrap();
    let (pw, rpw, tok) = (dir.path().join("repl.pw"), dir.path().join("replica.pw"), dir.path().join("token"));
    std::fs::write(&pw, format!("{REPL_PW}\n")).unwrap();
    std::fs::write(&rpw, format!("{MASTER_PW}\n")).unwrap();
    std::fs::write(&tok, format!("{TOKEN}\n")).unwrap();
    let (pw, rpw, tok) = (pw.to_str().unwrap(), rpw.to_str().unwrap(), tok.to_str().unwrap());
    let relay = relay(&master.addr(), &["--master-user", "repl", "--master-password-file", pw, "--token-file", tok], &[("FASTREPL_TOKEN", "")]);
    let replica = Server::start(Flavor::Valkey81, &["--requirepass", MASTER_PW]);
    let j = join(&relay.addr, &replica.addr(), &["--master-user", "repl", "--master-password-file", pw, "--token-file", tok, "--replica-password-file", rpw], &[("FASTREPL_TOKEN", "")]);
    assert_partial(&j);
    assert_identical(&master, &replica);
    assert_no_secrets(&j.output);
    assert_no_secrets(&relay.proc.output());
}

#[test]
fn wrong_token_is_refused_and_learns_nothing() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_every_type(&mut master.client(), 1, true);
    let replica = Server::start(Flavor::Redis70, &[]);
    let relay = relay(&master.addr(), &[], &[]);
    let j = join(&relay.addr, &replica.addr(), &[], &[("FASTREPL_TOKEN", "a-wrong-token-000000000")]);
    assert_eq!(j.code, Some(1), "{}", j.output);
    assert!(j.output.contains("refused our token"), "{}", j.output);
    assert!(!j.output.contains(&master.addr()), "the master's address leaked to an unauthenticated agent:\n{}", j.output);
    assert_untouched(&replica);
    // The relay keeps serving agents that have the token.
    assert_partial(&join(&relay.addr, &replica.addr(), &[], &[]));
    assert!(relay.proc.output().contains("wrong token"));
    assert_no_secrets(&relay.proc.output());
}

#[test]
fn relay_beyond_loopback_needs_a_token() {
    let mut cmd = fastrepl();
    cmd.env("FASTREPL_TOKEN", "").args(["relay", "--master", "127.0.0.1:1", "--listen", "0.0.0.0:0"]);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("without a token"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn wrong_master_password_is_a_clear_error() {
    let master = Server::start(Flavor::Redis70, &["--requirepass", MASTER_PW]);
    let relay = relay(&master.addr(), &[], &[("FASTREPL_MASTER_PASSWORD", "not-the-password")]);
    wait_until("the relay to report the refused AUTH", std::time::Duration::from_secs(20), || relay.proc.output().contains("AUTH refused").then_some(()));
    assert!(!relay.proc.output().contains("not-the-password"));
}

/// What each side says is what happened: a join without a token, a join with the wrong one, a
/// status call with the wrong one, a relay without a token; a too-short token said once.
#[test]
fn token_messages_say_what_happened() {
    let master = Server::start(Flavor::Redis70, &[]);
    let replica = Server::start(Flavor::Redis70, &[]);
    let relay = relay(&master.addr(), &[], &[]);
    let relay_says = |what: &str| {
        wait_until(&format!("the relay to log '{what}'"), std::time::Duration::from_secs(20), || relay.proc.output().contains(what).then_some(()));
    };

    let none = join(&relay.addr, &replica.addr(), &[], &[("FASTREPL_TOKEN", "")]);
    assert_eq!(none.code, Some(1), "{}", none.output);
    assert!(none.output.contains("requires a token and we sent none"), "{}", none.output);
    relay_says("an agent sent no token, and we require one");

    let wrong = fastrepl().env("FASTREPL_TOKEN", "a-wrong-token-000000000").args(["status", "--relay", &relay.addr]).output().unwrap();
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert_eq!(wrong.status.code(), Some(1), "{err}");
    assert!(err.contains("the relay refused our token: it holds a different one, or none") && !err.contains("peer agent"), "{err}");
    relay_says("a status client presented a wrong token");

    let short = fastrepl().env("FASTREPL_TOKEN", "short").args(["status", "--relay", &relay.addr]).output().unwrap();
    let err = String::from_utf8_lossy(&short.stderr);
    assert_eq!(err.matches("at least 16 bytes").count(), 1, "said once: {err}");

    // A relay without a token: one warning at start, and a client with a token told the truth.
    let open = spawn_relay(&master.addr(), |cmd| {
        cmd.env("FASTREPL_TOKEN", "").args(["--transport", "tcp"]);
    });
    let out = open.proc.output();
    assert_eq!(out.matches("anyone on this host can pull the whole dataset").count(), 1, "{out}");
    let with = fastrepl().args(["status", "--relay", &open.addr]).output().unwrap();
    assert_eq!(with.status.code(), Some(1));
    wait_until("the open relay to log the token it did not expect", std::time::Duration::from_secs(20), || {
        open.proc.output().contains("a status client presented a token, and we have none").then_some(())
    });
    assert_no_secrets(&relay.proc.output());
}
