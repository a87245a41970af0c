//! Datasets: one that covers every type and encoding, big values, and a writer that keeps writing.

use client::{command, Client};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Deterministic pseudo-random bytes (xorshift), incompressible enough that RDB compression does not
/// make sizes meaningless.
pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

fn ok(c: &mut Client, args: &[&[u8]]) {
    if let Err(e) = c.cmd(args) {
        panic!("{:?}: {e}", String::from_utf8_lossy(args[0]));
    }
}

/// Every type and encoding, TTLs, several databases, binary keys, a value of `big_mib` MiB, and a
/// function library where the server has functions.
pub fn fill_every_type(c: &mut Client, big_mib: usize, functions: bool) {
    ok(c, &[b"SELECT", b"0"]);
    ok(c, &[b"SET", b"str:int", b"12345"]);
    ok(c, &[b"SET", b"str:neg", b"-9007199254740993"]);
    ok(c, &[b"SET", b"str:embstr", b"hello"]);
    ok(c, &[b"SET", b"str:raw", &bytes(1, 300)]);
    ok(c, &[b"SET", b"str:bin\x00\xff\r\n key", b"\x00\x01\x02\xfe\xff"]);
    ok(c, &[b"SET", b"str:ttl", b"expires", b"EX", b"3600"]);
    ok(c, &[b"SET", b"str:pttl", b"expires-ms", b"PX", b"7200000"]);
    ok(c, &[b"SET", b"str:big", &bytes(2, big_mib << 20)]);
    ok(c, &[b"RPUSH", b"list:small", b"a", b"b", b"1", b"2"]);
    let many: Vec<Vec<u8>> = (0..2000).map(|i| format!("element-{i}-{}", "x".repeat(i % 50)).into_bytes()).collect();
    let mut args: Vec<&[u8]> = vec![b"RPUSH", b"list:big"];
    args.extend(many.iter().map(Vec::as_slice));
    ok(c, &args);
    ok(c, &[b"HSET", b"hash:small", b"f1", b"v1", b"f2", b"2"]);
    let mut args: Vec<&[u8]> = vec![b"HSET", b"hash:big"];
    let fields: Vec<Vec<u8>> = (0..1000).map(|i| format!("field{i}").into_bytes()).collect();
    for f in &fields {
        args.push(f);
        args.push(f);
    }
    ok(c, &args);
    ok(c, &[b"SADD", b"set:int", b"1", b"2", b"3", b"-7", b"100000"]);
    ok(c, &[b"SADD", b"set:str", b"a", b"b", b"c"]);
    let mut args: Vec<&[u8]> = vec![b"SADD", b"set:big"];
    args.extend(many.iter().map(Vec::as_slice));
    ok(c, &args);
    ok(c, &[b"ZADD", b"zset:small", b"1", b"a", b"2.5", b"b", b"-3", b"c"]);
    let scores: Vec<Vec<u8>> = (0..1000).map(|i| format!("{}", i as f64 * 0.5)).map(String::into_bytes).collect();
    let mut args: Vec<&[u8]> = vec![b"ZADD", b"zset:big"];
    for (s, m) in scores.iter().zip(&many) {
        args.push(s);
        args.push(m);
    }
    ok(c, &args);
    ok(c, &[b"EXPIRE", b"zset:big", b"86400"]);
    for i in 0..50 {
        let f = format!("f{}", i % 5);
        // Explicit IDs: two servers filled alike hold the same stream.
        ok(c, &[b"XADD", b"stream", format!("{}-1", 1000 + i).as_bytes(), f.as_bytes(), format!("v{i}").as_bytes()]);
    }
    ok(c, &[b"XGROUP", b"CREATE", b"stream", b"g1", b"0"]);
    ok(c, &[b"XGROUP", b"CREATE", b"stream", b"g2", b"$"]);
    ok(c, &[b"XREADGROUP", b"GROUP", b"g1", b"alice", b"COUNT", b"10", b"STREAMS", b"stream", b">"]);
    ok(c, &[b"XREADGROUP", b"GROUP", b"g1", b"bob", b"COUNT", b"5", b"STREAMS", b"stream", b">"]);
    // Acknowledge some of alice's entries so the pending list is partial.
    let pend = c.cmd(&[b"XPENDING".as_slice(), b"stream", b"g1", b"-", b"+", b"3", b"alice"]).expect("XPENDING");
    for e in pend.as_array().unwrap_or(&[]) {
        if let Some(id) = e.as_array().and_then(|a| a.first()).and_then(|f| f.as_bytes()) {
            ok(c, &[b"XACK", b"stream", b"g1", id]);
        }
    }
    ok(c, &[b"SELECT", b"3"]);
    ok(c, &[b"SET", b"db3:key", b"in db 3"]);
    ok(c, &[b"HSET", b"db3:hash", b"a", b"1"]);
    ok(c, &[b"SELECT", b"15"]);
    ok(c, &[b"SET", b"\xff\xfe db15 binary name", b"v"]);
    ok(c, &[b"SELECT", b"0"]);
    if functions {
        let code = b"#!lua name=fastrepl_test\nredis.register_function{function_name='echo_first', callback=function(keys, args) return args[1] end, flags={'no-writes'}}";
        ok(c, &[b"FUNCTION", b"LOAD", b"REPLACE", code]);
    }
}

/// `n` values of `size` bytes each (the dataset of BACKGROUND.md is 256 × ~3.66 MB), pipelined.
pub fn fill_big_values(c: &mut Client, n: usize, size: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(8) {
        let cmds: Vec<Vec<Vec<u8>>> =
            chunk.iter().map(|i| vec![b"SET".to_vec(), format!("value:{i}").into_bytes(), bytes(*i as u64 + 100, size)]).collect();
        for r in c.pipeline(&cmds).expect("SET pipeline") {
            assert!(!r.is_error(), "SET failed: {r:?}");
        }
    }
}

/// `n` small keys of mixed types (strings, hashes, lists, sets, sorted sets) in batches.
pub fn fill_small_mixed(c: &mut Client, n: usize) {
    for base in (0..n).step_by(1000) {
        let cmds: Vec<Vec<Vec<u8>>> = (base..(base + 1000).min(n))
            .map(|i| {
                let k = format!("small:{i}");
                match i % 5 {
                    0 => command(&["SET", &k, &format!("value-{i}")]),
                    1 => command(&["HSET", &k, "a", &i.to_string(), "b", "x"]),
                    2 => command(&["RPUSH", &k, "1", "2", &i.to_string()]),
                    3 => command(&["SADD", &k, "x", "y", &i.to_string()]),
                    _ => command(&["ZADD", &k, "1", "a", &i.to_string(), "b"]),
                }
            })
            .collect();
        for r in c.pipeline(&cmds).expect("fill pipeline") {
            assert!(!r.is_error(), "fill failed: {r:?}");
        }
    }
}

/// A client writing to a server until stopped: SETs, INCRs, list pushes, in two databases, some with
/// TTLs. Bounded in count and time.
pub struct Writer {
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
    handle: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl Writer {
    /// Start writing to `c`.
    pub fn start(mut c: Client, max_ops: u64, max_time: Duration) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let (s, n) = (stop.clone(), count.clone());
        let handle = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut i: u64 = 0;
            while !s.load(Ordering::SeqCst) && i < max_ops && t0.elapsed() < max_time {
                let db = if i % 2 == 0 { "0" } else { "1" };
                let cmds = vec![
                    command(&["SELECT", db]),
                    command(&["SET", &format!("w:{i}"), &format!("{i}")]),
                    command(&["INCR", "w:counter"]),
                    command(&["RPUSH", "w:list", &i.to_string()]),
                    command(&["SET", &format!("w:ttl:{i}"), "t", "EX", "3600"]),
                ];
                for r in c.pipeline(&cmds).map_err(|e| e.to_string())? {
                    if r.is_error() {
                        return Err(format!("writer: {r:?}"));
                    }
                }
                i += 1;
                n.store(i, Ordering::SeqCst);
            }
            Ok(())
        });
        Writer { stop, count, handle: Some(handle) }
    }

    /// Batches written so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// Stop and return how many batches were written.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            h.join().expect("writer thread").expect("writer");
        }
        self.count()
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// `n` small string values of `size` bytes (the "small keys" benchmark), pipelined in batches.
pub fn fill_small_values(c: &mut Client, n: usize, size: usize) {
    for base in (0..n).step_by(1000) {
        let cmds: Vec<Vec<Vec<u8>>> =
            (base..(base + 1000).min(n)).map(|i| vec![b"SET".to_vec(), format!("k:{i}").into_bytes(), bytes(i as u64, size)]).collect();
        for r in c.pipeline(&cmds).expect("SET pipeline") {
            assert!(!r.is_error(), "SET failed: {r:?}");
        }
    }
}
