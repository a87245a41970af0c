#![no_main]
// What a sentinel answers (`get-master-addr-by-name`) and pushes (`+switch-master`).
libfuzzer_sys::fuzz_target!(|data: &[u8]| client::sentinel::fuzz_one(data));
