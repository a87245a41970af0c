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
    let j = join(
        &relay.addr,
        &replica.addr(),
        &["--master-user", "repl", "--master-password-file", pw, "--token-file", tok, "--replica-password-file", rpw],
        &[("FASTREPL_TOKEN", "")],
    );
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
    wait_until("the relay to report the refused AUTH", std::time::Duration::from_secs(20), || {
        relay.proc.output().contains("AUTH refused").then_some(())
    });
    assert!(!relay.proc.output().contains("not-the-password"));
}
