#![no_main]
// The replication parsers: PSYNC replies, RDB framing headers, the command stream, a replica's handshake.
libfuzzer_sys::fuzz_target!(|data: &[u8]| replication::fuzz::parsers(data));
