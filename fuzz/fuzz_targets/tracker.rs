#![no_main]
// The swarm's messages: an agent's locate request (what the relay's tracker parses) and the tracker's
// answer (what every agent parses: peers' addresses included).
libfuzzer_sys::fuzz_target!(|data: &[u8]| transport::wire::swarm::fuzz_one(data));
