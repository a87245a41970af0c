#![no_main]
// A block from a relay or a peer agent: its codec, the raw length its table entry names, its bytes.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    codec::fuzz::decompress(data);
});
