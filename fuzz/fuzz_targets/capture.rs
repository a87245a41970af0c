#![no_main]
// The relay's capture machine driven by a master's bytes cut at arbitrary points.
libfuzzer_sys::fuzz_target!(|data: &[u8]| replication::fuzz::capture(data));
