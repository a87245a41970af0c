#![no_main]
// The relay's messages with its UCX side process: length-prefixed JSON, read back as themselves.
libfuzzer_sys::fuzz_target!(|data: &[u8]| relay::ucx_messages::fuzz_one(data));
