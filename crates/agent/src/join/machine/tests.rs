//! The machine's tests: each driven through its phases, one transition table row at a time, and
//! the decisions alone.

use super::*;
use std::time::Duration;

const ID: &str = "6c879f910fada50e6bee517c0d0ea8a0b46c6e0b";
const OTHER: &str = "0000000000000000000000000000000000000000";

fn snapshot() -> Snapshot {
    Snapshot { replid: ID.into(), offset: 1000 }
}

fn timeouts() -> Timeouts {
    Timeouts { load: Duration::from_secs(30), handoff: Duration::from_secs(30) }
}

fn replica(link_up: bool, syncing: bool, replid: &str, offset: Option<u64>) -> ReplState {
    ReplState { role: Some(Role::Replica), follows: Some(ep("127.0.0.1:7000")), link_up, syncing, replid: replid.into(), offset }
}

fn ep(s: &str) -> Endpoint {
    s.parse().unwrap_or_else(|e| panic!("{e}"))
}

fn master_ok() -> MasterRepl {
    MasterRepl { addr: None, role: Some(Role::Master), replid: ID.into(), replid2: OTHER.into(), backlog_active: true, backlog_first: Some(1), offset: Some(5000) }
}

/// A join whose replica is prepared and about to be pointed at the agent.
fn prepared(master: &str, t: Instant) -> Join {
    let mut j = Join::new(snapshot(), ep(master), timeouts(), t, t);
    assert!(!j.pointed());
    assert!(matches!(j.on(t, Input::Prepared), Action::PointReplica));
    assert!(j.pointed());
    j
}

/// A join whose replica loaded the snapshot (offset 1000), reading the log.
fn streaming_join(t: Instant) -> Join {
    streaming_join_to("10.0.0.1:6379", t)
}

/// [`streaming_join`], handing off to `master`.
fn streaming_join_to(master: &str, t: Instant) -> Join {
    let mut j = prepared(master, t);
    assert!(matches!(j.on(t, Input::ReplicaConnected { capa_eof: true, length: None }), Action::SendSnapshot { eof: true, length: None }));
    assert!(matches!(j.on(t, Input::Pulled { first_byte: Some(t), rdb_bytes: 5000 }), Action::PollReplica));
    let st = replica(true, false, ID, Some(1000));
    assert!(matches!(j.on(t, Input::Replica { state: &st, ack_seen: true }), Action::ReadLog { from: 1001, max: LOG_CHUNK }));
    j
}

/// A join driven to CatchingUp with 300 log bytes streamed (offset 1300).
fn caught_up_join(t: Instant) -> Join {
    caught_up_join_to("10.0.0.1:6379", t)
}

/// [`caught_up_join`], handing off to `master`.
fn caught_up_join_to(master: &str, t: Instant) -> Join {
    let mut j = streaming_join_to(master, t);
    assert!(matches!(j.on(t, Input::LogRead { got: 300, asked: LOG_CHUNK }), Action::PollReplica));
    assert_eq!(j.streamed(), 1300);
    j
}

/// A join driven past `REPLICAOF <master>` (a partial plan), waiting for the replica's link.
fn handed_over_join(t: Instant) -> Join {
    handed_over_join_to("10.0.0.1:6379", t)
}

/// [`handed_over_join`], handed to `master`.
fn handed_over_join_to(master: &str, t: Instant) -> Join {
    let mut j = caught_up_join_to(master, t);
    assert!(matches!(j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true }), Action::CheckMaster));
    assert!(matches!(j.on(t, Input::Master(&master_ok())), Action::HandOff));
    assert!(matches!(j.on(t, Input::Counters(Counters::default())), Action::PollReplica));
    assert!(j.handed_over());
    j
}

#[test]
fn framing_follows_the_replicas_capa_and_the_known_length() {
    let t = Instant::now();
    let mut j = prepared("m:1", t);
    assert!(matches!(j.on(t, Input::ReplicaConnected { capa_eof: false, length: Some(77) }), Action::SendSnapshot { eof: false, length: Some(77) }));
    let mut j = prepared("m:1", t);
    assert!(matches!(j.on(t, Input::ReplicaConnected { capa_eof: false, length: None }), Action::WaitLength));
    assert!(matches!(j.on(t, Input::Length(9)), Action::SendSnapshot { eof: false, length: Some(9) }));
}

#[test]
fn loading_needs_link_done_replid_and_the_first_ack_with_eof_framing() {
    let t = Instant::now();
    let mut j = prepared("m:1", t);
    j.on(t, Input::ReplicaConnected { capa_eof: true, length: None });
    j.on(t, Input::Pulled { first_byte: None, rdb_bytes: 5000 });
    let ok = replica(true, false, ID, Some(1000));
    for (st, ack) in [(replica(true, true, ID, None), true), (replica(false, false, ID, None), true), (replica(true, false, OTHER, None), true), (ok.clone(), false)] {
        assert!(matches!(j.on(t, Input::Replica { state: &st, ack_seen: ack }), Action::PollReplica), "{st:?} ack {ack} is not loaded");
    }
    assert!(matches!(j.on(t, Input::Replica { state: &ok, ack_seen: true }), Action::ReadLog { .. }));
    // With `$<len>` framing no ACK is needed to call it loaded.
    let mut j = prepared("m:1", t);
    j.on(t, Input::ReplicaConnected { capa_eof: false, length: Some(5) });
    j.on(t, Input::Pulled { first_byte: None, rdb_bytes: 5000 });
    assert!(matches!(j.on(t, Input::Replica { state: &ok, ack_seen: false }), Action::ReadLog { .. }));
}

#[test]
fn the_snapshot_matters_until_the_replica_has_loaded_it() {
    let t = Instant::now();
    let mut j = prepared("m:1", t);
    assert!(!j.snapshot_in_use() && j.join_phase() == JoinPhase::Preparing);
    j.on(t, Input::ReplicaConnected { capa_eof: true, length: None });
    assert!(j.snapshot_in_use() && j.join_phase() == JoinPhase::Pulling);
    j.on(t, Input::Pulled { first_byte: None, rdb_bytes: 5000 });
    assert!(j.snapshot_in_use() && j.join_phase() == JoinPhase::Loading);
    j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1000)), ack_seen: true });
    assert!(!j.snapshot_in_use() && j.join_phase() == JoinPhase::StreamingLog, "loaded: a relay that drops the snapshot now no longer matters");
}

#[test]
fn log_is_read_until_a_short_read() {
    let t = Instant::now();
    let mut j = prepared("m:1", t);
    j.on(t, Input::ReplicaConnected { capa_eof: true, length: None });
    j.on(t, Input::Pulled { first_byte: None, rdb_bytes: 5000 });
    j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1000)), ack_seen: true });
    assert!(matches!(j.on(t, Input::LogRead { got: LOG_CHUNK, asked: LOG_CHUNK }), Action::ReadLog { from, .. } if from == 1001 + LOG_CHUNK));
    assert!(matches!(j.on(t, Input::LogRead { got: 0, asked: LOG_CHUNK }), Action::PollReplica));
    assert_eq!(j.streamed(), 1000 + LOG_CHUNK);
    assert!(matches!(j.on(t, Input::LogRead { got: 1, asked: 1 }), Action::Fail { reset_replica: true, .. }), "a log read after the short one is out of order");
}

#[test]
fn each_handoff_precondition_holds_the_handoff_back() {
    let t = Instant::now();
    let cases = [
        ("still loading", replica(true, true, ID, Some(1300))),
        ("link down", replica(false, false, ID, Some(1300))),
        ("other replid", replica(true, false, OTHER, Some(1300))),
        ("offset short", replica(true, false, ID, Some(1299))),
        ("offset beyond", replica(true, false, ID, Some(1301))),
        ("offset unknown", replica(true, false, ID, None)),
    ];
    for (name, st) in cases {
        let mut j = caught_up_join(t);
        assert!(matches!(j.on(t, Input::Replica { state: &st, ack_seen: true }), Action::PollReplica), "{name}: must not hand off");
        let late = t + APPLY_TIMEOUT + Duration::from_millis(1);
        match j.on(late, Input::Replica { state: &st, ack_seen: true }) {
            Action::Fail { error, reset_replica: true } => assert!(error.to_string().contains("apply the stream"), "{name}: {error}"),
            other => panic!("{name}: {other:?}"),
        }
    }
    let mut j = caught_up_join(t);
    assert!(matches!(j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true }), Action::CheckMaster));
}

#[test]
fn handoff_plan_each_fallback() {
    let next = 1301;
    assert_eq!(plan_handoff(&master_ok(), ID, next).unwrap(), Plan::Partial);
    let mut m = master_ok();
    m.replid = OTHER.into();
    m.replid2 = ID.into();
    assert_eq!(plan_handoff(&m, ID, next).unwrap(), Plan::Partial, "the snapshot's history as replid2 (after a promotion) is continuable");
    let mut m = master_ok();
    m.replid = OTHER.into();
    assert!(matches!(plan_handoff(&m, ID, next).unwrap(), Plan::Full(w) if w.contains("replication ID")));
    let mut m = master_ok();
    m.backlog_active = false;
    assert!(matches!(plan_handoff(&m, ID, next).unwrap(), Plan::Full(w) if w.contains("backlog")));
    let mut m = master_ok();
    m.backlog_first = Some(next + 1);
    assert!(matches!(plan_handoff(&m, ID, next).unwrap(), Plan::Full(w) if w.contains("repl-backlog-size")));
    let mut m = master_ok();
    m.offset = Some(next - 2);
    assert!(matches!(plan_handoff(&m, ID, next).unwrap(), Plan::Full(_)), "a master behind the replica cannot continue it");
    let mut m = master_ok();
    m.offset = Some(next - 1);
    assert_eq!(plan_handoff(&m, ID, next).unwrap(), Plan::Partial, "caught up exactly: nothing to send yet");
    let mut m = master_ok();
    m.role = Some(Role::Replica);
    assert!(matches!(plan_handoff(&m, ID, next), Err(Error::Changed(w)) if w.contains("as a replica")));
    m.role = None;
    assert!(matches!(plan_handoff(&m, ID, next), Err(Error::Changed(w)) if w.contains("unknown role")));
}

#[test]
fn a_refused_plan_fails_before_replicaof_and_resets() {
    let t = Instant::now();
    let mut j = caught_up_join(t);
    j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true });
    let mut m = master_ok();
    m.role = Some(Role::Replica);
    assert!(matches!(j.on(t, Input::Master(&m)), Action::Fail { reset_replica: true, .. }));
}

#[test]
fn full_plan_still_hands_off_and_is_reported_full_with_the_reason() {
    let t = Instant::now();
    let mut j = caught_up_join(t);
    j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true });
    let mut m = master_ok();
    m.backlog_first = Some(5000);
    assert!(matches!(j.on(t, Input::Master(&m)), Action::HandOff));
    let before = Counters { full: 1, partial_ok: 0, replica_input_bytes: Some(10), ..Default::default() };
    assert!(matches!(j.on(t, Input::Counters(before)), Action::PollReplica));
    assert!(j.handed_over());
    let mut on_master = replica(true, false, OTHER, Some(9000));
    on_master.follows = Some(ep("10.0.0.1:6379"));
    assert!(matches!(j.on(t, Input::Replica { state: &on_master, ack_seen: false }), Action::ReadOutcome));
    match j.on(t, Input::Counters(Counters { full: 2, partial_ok: 0, replica_input_bytes: Some(10 << 20), ..Default::default() })) {
        Action::Done(o) => {
            assert_eq!(o.handoff, Handoff::Full);
            assert!(o.notes.iter().any(|n| n.contains("backlog")), "{:?}", o.notes);
            assert_eq!((o.offset, o.log_bytes), (1300, 300));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_handoff_not_in_sync_by_its_deadline_ends_as_a_full_sync_saying_what_it_saw() {
    for partial_counted in [false, true] {
        let t = Instant::now();
        let mut j = caught_up_join(t);
        j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true });
        assert!(matches!(j.on(t, Input::Master(&master_ok())), Action::HandOff));
        let before = Counters { full: 1, partial_ok: 0, replica_input_bytes: None, partial_err: 0, output_buffer_disconnects: Some(0) };
        assert!(matches!(j.on(t, Input::Counters(before)), Action::PollReplica));
        // The master keeps starting full syncs it cannot finish: the replica's link never comes up.
        let mut looping = replica(false, true, OTHER, None);
        looping.follows = Some(ep("10.0.0.1:6379"));
        let soon = t + Duration::from_secs(1);
        assert!(matches!(j.on(soon, Input::Replica { state: &looping, ack_seen: false }), Action::PollReplica), "within the deadline it waits");
        let late = t + Duration::from_secs(31);
        assert!(matches!(j.on(late, Input::Replica { state: &looping, ack_seen: false }), Action::ReadOutcome), "past it, the outcome is read");
        // Even counters that would say partial do not make an unfinished handoff a success.
        let after = Counters { full: 4, partial_ok: i64::from(partial_counted), replica_input_bytes: None, partial_err: 1, output_buffer_disconnects: Some(3) };
        match j.on(late, Input::Counters(after)) {
            Action::Done(o) => {
                assert_eq!(o.handoff, Handoff::Full);
                let note = o.notes.iter().find(|n| n.contains("not in sync")).unwrap_or_else(|| panic!("{:?}", o.notes));
                for said in ["started 3 full sync(s)", "refused 1 partial", "3 output-buffer disconnects", "a full sync in progress", "10.0.0.1:6379", "stays the master's replica"] {
                    assert!(note.contains(said), "{said}: {note}");
                }
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn partial_handoff_waits_for_the_link_to_the_right_master() {
    let t = Instant::now();
    let mut j = caught_up_join(t);
    j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true });
    assert!(matches!(j.on(t, Input::Master(&master_ok())), Action::HandOff));
    j.on(t, Input::Counters(Counters::default()));
    let mut st = replica(true, false, ID, Some(1300));
    st.follows = Some(ep("127.0.0.1:4444")); // still the agent's listener
    assert!(matches!(j.on(t, Input::Replica { state: &st, ack_seen: false }), Action::PollReplica));
    st.follows = Some(ep("10.0.0.1:6379"));
    st.link_up = false;
    assert!(matches!(j.on(t, Input::Replica { state: &st, ack_seen: false }), Action::PollReplica));
    let late = t + timeouts().handoff + Duration::from_millis(1);
    assert!(matches!(j.on(late, Input::Replica { state: &st, ack_seen: false }), Action::ReadOutcome), "past the deadline the outcome is read, the replica left as it is");
    // Never reset after REPLICAOF, never a success when not in sync: a full sync, told.
    assert!(matches!(j.on(late, Input::Counters(Counters::default())), Action::Done(o) if o.handoff == Handoff::Full), "after REPLICAOF the replica is never reset");
}

#[test]
fn a_master_named_by_sentinel_at_handoff_time_is_the_one_waited_for() {
    let t = Instant::now();
    let mut j = caught_up_join(t);
    j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true });
    // Failed over: the promoted replica knows the snapshot's history as its replid2.
    let promoted = MasterRepl { addr: Some(ep("10.0.0.2:6380")), replid: OTHER.into(), replid2: ID.into(), ..master_ok() };
    assert!(matches!(j.on(t, Input::Master(&promoted)), Action::HandOff));
    j.on(t, Input::Counters(Counters::default()));
    let mut st = replica(true, false, OTHER, Some(1300));
    st.follows = Some(ep("10.0.0.1:6379")); // the old master: not the one handed to
    assert!(matches!(j.on(t, Input::Replica { state: &st, ack_seen: false }), Action::PollReplica));
    st.follows = Some(ep("10.0.0.2:6380"));
    assert!(matches!(j.on(t, Input::Replica { state: &st, ack_seen: false }), Action::ReadOutcome));
    match j.on(t, Input::Counters(Counters { full: 0, partial_ok: 1, replica_input_bytes: None, ..Default::default() })) {
        Action::Done(o) => assert!(o.notes.iter().any(|n| n.contains("10.0.0.2:6380")), "{:?}", o.notes),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_replica_that_turns_standalone_after_replicaof_fails_the_handoff_at_once() {
    let t = Instant::now();
    let mut j = caught_up_join(t);
    j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true });
    j.on(t, Input::Master(&master_ok()));
    j.on(t, Input::Counters(Counters::default()));
    let busy = ReplState { syncing: true, ..ReplState::default() }; // did not answer: loading
    assert!(matches!(j.on(t, Input::Replica { state: &busy, ack_seen: false }), Action::PollReplica));
    let restarted = ReplState { role: Some(Role::Master), ..ReplState::default() };
    match j.on(t, Input::Replica { state: &restarted, ack_seen: false }) {
        Action::Fail { reset_replica: false, error: Error::Changed(why) } => assert!(why.contains("standalone"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn partial_outcome_with_timeline() {
    let t = Instant::now();
    let mut j = caught_up_join(t);
    j.on(t + Duration::from_secs(1), Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true });
    j.on(t, Input::Master(&master_ok()));
    j.on(t, Input::Counters(Counters { full: 3, partial_ok: 7, replica_input_bytes: None, ..Default::default() }));
    let mut st = replica(true, false, ID, Some(1300));
    st.follows = Some(ep("10.0.0.1:6379"));
    j.on(t + Duration::from_secs(2), Input::Replica { state: &st, ack_seen: false });
    match j.on(t, Input::Counters(Counters { full: 3, partial_ok: 8, replica_input_bytes: None, ..Default::default() })) {
        Action::Done(o) => {
            assert_eq!(o.handoff, Handoff::Partial);
            assert!(o.notes.is_empty());
            assert_eq!(o.timeline.caught_up, Some(t + Duration::from_secs(1)));
            assert_eq!(o.timeline.handed_off, Some(t + Duration::from_secs(2)));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn failures_reset_the_replica_only_before_replicaof() {
    let t = Instant::now();
    let mut j = caught_up_join(t);
    assert!(matches!(j.on(t, Input::Failed(Error::Interrupted)), Action::Fail { reset_replica: true, .. }));
    let mut j = caught_up_join(t);
    j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true });
    j.on(t, Input::Master(&master_ok()));
    j.on(t, Input::Counters(Counters::default()));
    assert!(matches!(j.on(t, Input::Failed(Error::Interrupted)), Action::Fail { reset_replica: false, .. }));
}

#[test]
fn load_timeout_fails_and_resets() {
    let t = Instant::now();
    let mut j = prepared("m:1", t);
    j.on(t, Input::ReplicaConnected { capa_eof: true, length: None });
    j.on(t, Input::Pulled { first_byte: None, rdb_bytes: 5000 });
    let loading = replica(true, true, ID, None);
    let late = t + timeouts().load + Duration::from_millis(1);
    assert!(matches!(j.on(late, Input::Replica { state: &loading, ack_seen: false }), Action::Fail { reset_replica: true, error: Error::Timeout(_) }));
}

#[test]
fn classify_in_doubt_is_full() {
    let b = Counters { full: 1, partial_ok: 1, replica_input_bytes: Some(100), ..Default::default() };
    assert_eq!(classify(&b, &Counters { partial_ok: 2, ..b }, Some(1000)), Handoff::Partial);
    assert_eq!(classify(&b, &Counters { full: 2, ..b }, Some(1000)), Handoff::Full);
    let both = Counters { full: 2, partial_ok: 2, replica_input_bytes: Some(150), ..Default::default() };
    assert_eq!(classify(&b, &both, Some(1000)), Handoff::Partial, "a backlog tail, not an RDB");
    assert_eq!(classify(&b, &Counters { replica_input_bytes: Some(900), ..both }, Some(1000)), Handoff::Full);
    assert_eq!(classify(&b, &Counters { replica_input_bytes: None, ..both }, Some(1000)), Handoff::Full);
    assert_eq!(classify(&b, &both, None), Handoff::Full, "unknown RDB length: in doubt");
    assert_eq!(classify(&b, &b, Some(1000)), Handoff::Full, "nothing moved: in doubt");
}

#[test]
fn out_of_order_input_is_an_internal_error_not_a_panic() {
    let t = Instant::now();
    let mut j = prepared("m:1", t);
    assert!(matches!(j.on(t, Input::Master(&master_ok())), Action::Fail { reset_replica: true, error: Error::Internal(_) }));
    let mut j = Join::new(snapshot(), ep("m:1"), timeouts(), t, t);
    assert!(matches!(j.on(t, Input::ReplicaConnected { capa_eof: true, length: None }), Action::Fail { reset_replica: false, error: Error::Internal(_) }), "connected before pointed");
}

#[test]
fn a_log_read_longer_than_asked_is_the_relays_fault() {
    let t = Instant::now();
    let mut j = streaming_join(t);
    match j.on(t, Input::LogRead { got: 11, asked: 10 }) {
        Action::Fail { reset_replica: true, error } => assert!(error.to_string().contains("11 bytes for 10 asked"), "{error}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(j.streamed(), 1000, "nothing of a bad read counts as streamed");
}

#[test]
fn a_catching_up_replica_that_never_applies_the_log_times_out_and_is_reset() {
    let t = Instant::now();
    let mut j = caught_up_join(t);
    let behind = replica(true, false, ID, Some(1200));
    let late = t + APPLY_TIMEOUT + Duration::from_millis(1);
    match j.on(late, Input::Replica { state: &behind, ack_seen: true }) {
        Action::Fail { reset_replica: true, error: Error::Timeout(w) } => assert!(w.contains("up to offset 1300") && w.contains("1200"), "{w}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn rows_no_phase_expects_are_internal_errors() {
    let t = Instant::now();
    // Counters twice before the link is up: the second is out of order, and the replica (the
    // master's now) is not reset.
    let mut j = handed_over_join(t);
    assert!(matches!(j.on(t, Input::Counters(Counters::default())), Action::Fail { reset_replica: false, error: Error::Internal(_) }));
    // Anything after the end.
    let mut j = prepared("m:1", t);
    j.on(t, Input::Failed(Error::Interrupted));
    assert_eq!(j.join_phase(), JoinPhase::Done);
    assert!(matches!(j.on(t, Input::Prepared), Action::Fail { error: Error::Internal(_), .. }));
    // A length nobody waits for.
    let mut j = prepared("m:1", t);
    j.on(t, Input::ReplicaConnected { capa_eof: true, length: None });
    assert!(matches!(j.on(t, Input::Length(5)), Action::Fail { reset_replica: true, error: Error::Internal(_) }));
}

#[test]
fn a_refusal_after_the_replica_followed_the_agent_still_resets_it() {
    let t = Instant::now();
    let mut j = prepared("m:1", t);
    j.on(t, Input::ReplicaConnected { capa_eof: true, length: None });
    assert!(matches!(j.on(t, Input::PointRefused(Error::Precondition("late".into()))), Action::Fail { reset_replica: true, .. }));
    assert!(j.pointed());
}

#[test]
fn a_failure_before_the_replica_is_pointed_at_the_agent_leaves_it_untouched() {
    let t = Instant::now();
    let mut j = Join::new(snapshot(), ep("m:1"), timeouts(), t, t);
    assert_eq!(j.join_phase(), JoinPhase::Preparing);
    match j.on(t, Input::Failed(Error::Precondition("tls-replication yes without --tls".into()))) {
        Action::Fail { reset_replica: false, error: Error::Precondition(_) } => {}
        other => panic!("{other:?}"),
    }
    assert!(!j.pointed() && !j.handed_over());
    // A refused REPLICAOF <agent> never took effect.
    let mut j = prepared("m:1", t);
    assert!(matches!(j.on(t, Input::PointRefused(Error::Precondition("NOPERM replicaof".into()))), Action::Fail { reset_replica: false, .. }));
    assert!(!j.pointed());
    // Once pointed (REPLICAOF <agent> may have taken effect), a failure resets it.
    let mut j = prepared("m:1", t);
    assert_eq!(j.join_phase(), JoinPhase::Preparing);
    assert!(matches!(j.on(t, Input::Failed(Error::unavailable(crate::error::Party::ReplicaLink, "no connection"))), Action::Fail { reset_replica: true, .. }));
}

/// What Valkey 9.1.2 under `rdb-version-check relaxed` wrote to its log when fed Redis 8.2.3's
/// RDB (e2e_compat reproduces both): a hash with field TTLs (type 25), then a vector set (module
/// data), after which it exits.
const FOREIGN_TYPE: [&str; 3] = [
    "22821:S 02 Dec 2026 19:19:20.681 # Can't handle foreign type or opcode 25 in RDB with version 12",
    "22821:S 02 Dec 2026 19:19:20.681 # Failed trying to load the PRIMARY synchronization DB from socket, check server logs.",
    "22821:S 02 Dec 2026 19:19:20.681 # Failed to load RDB",
];
const MODULE: [&str; 2] = [
    "20009:S 02 Dec 2026 19:13:29.406 # Internal error in RDB reading offset 0, function at rdb.c:2939 -> The RDB file contains module data I can't load: no matching module type 'vectorset'. Failure loading rdb format",
    "20009:S 02 Dec 2026 19:13:29.406 # Terminating server after rdb file reading failure.",
];
/// A load cut short by the agent going away (Redis and Valkey alike).
const SHORT_READ: &str = "20009:S 02 Dec 2026 19:13:29.406 # Internal error in RDB reading offset 0, function at rdb.c:3101 -> Unexpected EOF reading RDB file. Failure loading rdb format from socket, assuming connection error, resuming operation.";

fn facts(log: Option<&[&str]>, answers: bool) -> LoadFacts {
    LoadFacts {
        replica_server: "valkey 9.1.2".into(),
        master_server: "redis 8.2.3".into(),
        answers,
        loading: answers.then_some(false),
        keys_loaded: answers.then_some(114),
        log: log.map(|l| l.iter().map(|s| s.to_string()).collect()),
    }
}

fn link_lost() -> Error {
    Error::unavailable(crate::error::Party::ReplicaLink, "lost the replica (the replica closed its link to the agent)")
}

/// A join whose replica is loading what it was sent.
fn loading_join(t: Instant) -> Join {
    let mut j = prepared("m:1", t);
    j.on(t, Input::ReplicaConnected { capa_eof: true, length: None });
    assert!(matches!(j.on(t, Input::Pulled { first_byte: None, rdb_bytes: 5000 }), Action::PollReplica));
    j
}

#[test]
fn a_replica_that_drops_its_link_while_fed_or_loading_is_examined_before_failing() {
    let t = Instant::now();
    let mut j = loading_join(t);
    assert!(matches!(j.on(t, Input::Failed(link_lost())), Action::ExamineReplica));
    assert_eq!(j.join_phase(), JoinPhase::Loading);
    assert!(!j.snapshot_in_use(), "the relay's snapshot is not waited on while examining");
    // While it is fed too, and when it no longer answers at all.
    let mut j = prepared("m:1", t);
    j.on(t, Input::ReplicaConnected { capa_eof: true, length: None });
    let gone = Error::unavailable(crate::error::Party::Replica, "connect: Connection refused");
    assert!(matches!(j.on(t, Input::Failed(gone)), Action::ExamineReplica));
    // Other failures are not the replica's to explain.
    let mut j = loading_join(t);
    assert!(matches!(j.on(t, Input::Failed(Error::unavailable(crate::error::Party::Relay, "gone"))), Action::Fail { reset_replica: true, .. }));
    let mut j = loading_join(t);
    assert!(matches!(j.on(t, Input::Failed(Error::Interrupted)), Action::Fail { reset_replica: true, error: Error::Interrupted }));
    // Nor is a loss later on (streaming the log): its data was loaded.
    let mut j = streaming_join(t);
    assert!(matches!(j.on(t, Input::Failed(link_lost())), Action::Fail { reset_replica: true, error: Error::Unavailable { .. } }));
}

#[test]
fn a_load_the_replica_refused_fails_for_good_resets_it_and_says_what_it_refused() {
    for (log, answers, said) in [
        (&FOREIGN_TYPE[..], true, "Can't handle foreign type or opcode 25 in RDB with version 12 (after 114 keys)"),
        (&MODULE[..], false, "no matching module type 'vectorset'. Failure loading rdb format (and the server exited)"),
    ] {
        let t = Instant::now();
        let mut j = loading_join(t);
        j.on(t, Input::Failed(link_lost()));
        match j.on(t, Input::Examined(&facts(Some(log), answers))) {
            Action::Fail { reset_replica: true, error } => {
                assert!(!error.retryable(), "{error}");
                assert!(matches!(error, Error::Incompatible(_)), "{error:?}");
                let text = error.to_string();
                for part in ["the replica (valkey 9.1.2) refused the snapshot while loading it: ", said, "Redis 8.2.3 types such as vector sets and hash-field TTLs", REDIS_TO_VALKEY_DOC] {
                    assert!(text.contains(part), "{part:?} in {text}");
                }
                assert!(!text.contains("Internal error in RDB reading"), "the loader's preamble is left out: {text}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(j.join_phase(), JoinPhase::Done);
    }
}

#[test]
fn a_lost_link_a_restarted_replica_or_no_log_is_still_the_loss_and_retried() {
    let restarted = ["1:M 02 Dec 2026 19:13:30.000 * Server initialized", "1:M 02 Dec 2026 19:13:30.001 * Ready to accept connections tcp"];
    for (log, answers) in [(Some(&[SHORT_READ][..]), true), (Some(&restarted[..]), true), (Some(&[][..]), false), (None, true), (None, false)] {
        let t = Instant::now();
        let mut j = loading_join(t);
        j.on(t, Input::Failed(link_lost()));
        match j.on(t, Input::Examined(&facts(log, answers))) {
            Action::Fail { reset_replica: true, error } => {
                assert!(error.retryable(), "{log:?}: {error}");
                assert_eq!(error.to_string(), link_lost().to_string(), "{log:?}");
            }
            other => panic!("{log:?}: {other:?}"),
        }
    }
}

#[test]
fn a_refusal_between_other_servers_names_the_master_without_the_redis_valkey_hint() {
    let f = LoadFacts { replica_server: "redis 8.2.3".into(), master_server: "redis 8.2.3".into(), ..facts(Some(&MODULE[..1]), true) };
    let said = refusal(&f).expect("a refusal");
    assert!(said.contains("the master (redis 8.2.3) stores a type or module this server does not have"), "{said}");
    assert!(!said.contains("Valkey equivalent"), "{said}");
    // Interrupted while examining: the interrupt, not the loss.
    let t = Instant::now();
    let mut j = loading_join(t);
    j.on(t, Input::Failed(link_lost()));
    assert!(matches!(j.on(t, Input::Failed(Error::Interrupted)), Action::Fail { reset_replica: true, error: Error::Interrupted }));
    // Facts nobody asked for are out of order.
    let mut j = loading_join(t);
    assert!(matches!(j.on(t, Input::Examined(&f)), Action::Fail { reset_replica: true, error: Error::Internal(_) }));
}

/// The replica's state as its `INFO replication` says it: following `host` `port`, linked, in sync.
fn linked_to(host: &str, port: u16) -> ReplState {
    let text = format!("role:slave\r\nmaster_host:{host}\r\nmaster_port:{port}\r\nmaster_link_status:up\r\nmaster_sync_in_progress:0\r\nmaster_replid:{ID}\r\nslave_repl_offset:1300\r\n");
    ReplState::from_info(&client::Info::parse(&text)).expect("a replica's INFO")
}

#[test]
fn the_master_handed_to_is_recognised_however_the_replicas_info_spells_it() {
    // INFO gives an IPv6 host bare, in whatever form the server prints it, and a name as REPLICAOF
    // was given it; the join handed to the address (bracketed, a name lower-cased).
    for (handed_to, host, port) in [
        ("[::1]:6379", "::1", 6379),
        ("[::1]:6379", "0:0::1", 6379),
        ("[fd00::7]:6379", "fd00:0:0:0:0:0:0:7", 6379),
        ("redis-master.svc:6379", "Redis-Master.svc", 6379),
        ("10.0.0.1:6379", "10.0.0.1", 6379),
    ] {
        let t = Instant::now();
        let mut j = handed_over_join_to(handed_to, t);
        assert!(matches!(j.on(t, Input::Replica { state: &linked_to(host, port), ack_seen: false }), Action::ReadOutcome), "{handed_to} vs INFO's {host} {port}");
    }
    // Another port or another host is another master: waited on, then a full sync, never partial.
    for (host, port) in [("::1", 6380), ("::2", 6379), ("redis-master", 6379)] {
        let t = Instant::now();
        let mut j = handed_over_join_to("[::1]:6379", t);
        assert!(matches!(j.on(t, Input::Replica { state: &linked_to(host, port), ack_seen: false }), Action::PollReplica), "{host} {port}");
    }
}

#[test]
fn sentinel_naming_the_same_master_in_another_spelling_is_no_new_master() {
    for (handed_to, sentinel) in [("[::1]:6379", "[0:0::1]:6379"), ("redis-master.svc:6379", "Redis-Master.svc:6379")] {
        let t = Instant::now();
        let mut j = caught_up_join_to(handed_to, t);
        j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true });
        assert!(matches!(j.on(t, Input::Master(&MasterRepl { addr: Some(ep(sentinel)), ..master_ok() })), Action::HandOff));
        j.on(t, Input::Counters(Counters::default()));
        let mut st = replica(true, false, ID, Some(1300));
        st.follows = Some(ep(handed_to));
        assert!(matches!(j.on(t, Input::Replica { state: &st, ack_seen: false }), Action::ReadOutcome), "{sentinel} is {handed_to}");
        match j.on(t, Input::Counters(Counters { partial_ok: 1, ..Default::default() })) {
            Action::Done(o) => assert!(o.notes.is_empty(), "no 'handed to … instead of' note: {:?}", o.notes),
            other => panic!("{other:?}"),
        }
    }
}
