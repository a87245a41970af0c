#![no_main]
// The authentication handshake, from a relay's, an agent's or a peer agent's side.
libfuzzer_sys::fuzz_target!(|data: &[u8]| transport::fuzz::auth(data));
