#![no_main]
// The relay's control and data messages.
libfuzzer_sys::fuzz_target!(|data: &[u8]| transport::wire::fuzz_one(data));
