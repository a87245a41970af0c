#![no_main]
// RESP decoding: never panics; what parses re-encodes to the same frame.
libfuzzer_sys::fuzz_target!(|data: &[u8]| resp::fuzz_one(data));
