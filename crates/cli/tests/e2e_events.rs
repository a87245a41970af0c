//! The typed event streams (`--events PATH`, docs/operations.md): a join's phases in order with
//! its handoff, and the relay's capture started then published, read back with the crates' own types.

mod common;
use agent::events::{Event as AgentEvent, JoinPhase};
use common::*;
use relay::events::Event as RelayEvent;

#[test]
fn a_join_and_its_relay_report_typed_events_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (relay_events, join_events) = (dir.path().join("relay.jsonl"), dir.path().join("join.jsonl"));
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_small_mixed(&mut master.client(), 2000);
    let replica = Server::start(Flavor::Redis70, &[]);
    let r = relay(&master.addr(), &["--events", relay_events.to_str().unwrap()], &[]);
    let j = join(&r.addr, &replica.addr(), &["--events", join_events.to_str().unwrap()], &[]);
    assert_partial(&j);

    let text = std::fs::read_to_string(&join_events).unwrap();
    let events = agent::events::parse(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(events.first(), Some(&AgentEvent::Start { version: agent::events::VERSION, process: "join".into() }), "{text}");
    let phases: Vec<JoinPhase> = events.iter().filter_map(|e| if let AgentEvent::Phase { phase, .. } = e { Some(*phase) } else { None }).collect();
    // Each phase once, in the join's order (`preparing` may pass before the first report).
    assert!(phases.windows(2).all(|w| w[0] < w[1]), "{text}");
    use JoinPhase::*;
    assert_eq!(phases.iter().filter(|p| **p != Preparing).copied().collect::<Vec<_>>(), [Pulling, Loading, StreamingLog, HandingOff, Done], "{text}");
    let at: Vec<u64> = events.iter().filter_map(|e| if let AgentEvent::Phase { at_ms, .. } = e { Some(*at_ms) } else { None }).collect();
    assert!(at.windows(2).all(|w| w[0] <= w[1]), "times in order: {text}");
    assert!(events.iter().any(|e| matches!(e, AgentEvent::HandedOff { .. })), "{text}");

    // The relay's stream: written as events happen, so read it once the join is done.
    let text = std::fs::read_to_string(&relay_events).unwrap();
    let events = relay::events::parse(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(events.first(), Some(&RelayEvent::Start { version: relay::events::VERSION, process: "relay".into() }), "{text}");
    let (started, gen) =
        events.iter().enumerate().find_map(|(i, e)| if let RelayEvent::RdbStarted { generation, .. } = e { Some((i, *generation)) } else { None }).unwrap_or_else(|| panic!("no rdb_started: {text}"));
    let published = events
        .iter()
        .position(|e| matches!(e, RelayEvent::Published { generation, bytes, .. } if *generation == gen && *bytes > 0))
        .unwrap_or_else(|| panic!("no published for generation {gen}: {text}"));
    assert!(started < published, "{text}");
}
