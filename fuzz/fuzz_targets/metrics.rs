#![no_main]
// A scrape request's head (routing), and Prometheus text through the strict parser.
libfuzzer_sys::fuzz_target!(|data: &[u8]| metrics::fuzz_one(data));
