#![no_main]
// Block responses from a relay or a peer agent; the request stream a relay or a peer's server reads.
libfuzzer_sys::fuzz_target!(|data: &[u8]| transport::fuzz::data_path(data));
