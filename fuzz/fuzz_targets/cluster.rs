#![no_main]
// What a cluster node says: `CLUSTER NODES` lines and cluster config files (parsed, turned into a
// staged config), and the aux fields at the head of an RDB a staged start relies on.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    agent::staged::cluster::fuzz(data);
    agent::staged::rdb_aux::fuzz(data);
});
