//! Fuzz entry point of the wire's decoders (control messages, descriptors, response headers, ucx keys,
//! requests).

use super::control::{recv_control, Control};
use super::descriptor;
use super::request::{Request, REQUEST_LEN};
use super::response::{ResponseHeader, RESPONSE_HEADER_LEN};
use super::ucx_key::UcxKey;

/// Fuzz entry point: decoding arbitrary control and data messages never panics.
pub fn fuzz_one(data: &[u8]) {
    if let Ok(Control::Descriptor(d)) = recv_control(&mut &data[..]) {
        // Table entries said to have come before, and the bytes they place.
        let before = descriptor::Before { entries: (data.len() % 4) as u64, stored: (data.len() % 3) as u64 * 4096, ..Default::default() };
        if let Ok(s) = d.validate(before) {
            assert!(s.block_size >= descriptor::BLOCK_MIN, "a validated descriptor has a usable block size");
            // Every entry fits its block and the table places exactly the stored bytes.
            assert!(s.table.iter().all(|e| u64::from(e.stored_len) <= s.block_size), "an entry longer than a block");
            assert_eq!(before.stored + s.table.iter().map(|e| u64::from(e.stored_len)).sum::<u64>(), s.stored);
            assert!(s.stored <= s.published + before.stored);
        }
    }
    if let Ok(h) = <&[u8; RESPONSE_HEADER_LEN]>::try_from(data.get(..RESPONSE_HEADER_LEN).unwrap_or(&[])) {
        if let Ok(r) = ResponseHeader::decode(h) {
            assert_eq!(ResponseHeader::decode(&r.encode()).unwrap(), r);
        }
    }
    if let Ok(k) = UcxKey::decode(data) {
        assert_eq!(UcxKey::decode(&k.encode()).unwrap(), k);
    }
    if let Ok(b) = <&[u8; REQUEST_LEN]>::try_from(data.get(..REQUEST_LEN).unwrap_or(&[])) {
        if let Ok(r) = Request::decode(b) {
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
    }
}

#[cfg(test)]
mod fuzz_smoke {
    use super::*;

    #[test]
    fn fuzz_smoke() {
        let mut x: u64 = 0x1234_5678_9ABC_DEF1;
        for len in 0..4000usize {
            let mut d = Vec::with_capacity(len % 64);
            for _ in 0..len % 64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                d.push(x as u8);
            }
            if len % 3 == 0 && d.len() > 4 {
                let body = (d.len() - 4) as u32;
                d[..4].copy_from_slice(&body.to_be_bytes());
            }
            fuzz_one(&d);
        }
        // Descriptors as a relay frames them, with numbers replaced by arbitrary ones (zero and huge
        // block sizes and counts among them): decode and validation never panic.
        let mut decoded = 0;
        for i in 0..2000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = |k: u64| [0, 1, 4096, 1 << 20, u64::MAX, x.rotate_left(k as u32)][((x >> k) % 6) as usize];
            let body = format!(
                r#"{{"descriptor":{{"generation":1,"replid":"r","offset":{},"block_size":{},"length":{},"published":{},"stored":{},"table":{:?},"rdb_version":null,"log_end":{},"state":"capturing","error":null}}}}"#,
                n(1),
                n(5),
                n(9),
                n(13),
                n(21),
                vec![[7u64, n(25) % (1 << 32), (x >> 40) % 4]; (i % 5) as usize],
                n(17)
            );
            let mut d = (body.len() as u32).to_be_bytes().to_vec();
            d.extend_from_slice(body.as_bytes());
            decoded += usize::from(matches!(recv_control(&mut &d[..]), Ok(Control::Descriptor(_))));
            fuzz_one(&d);
        }
        assert_eq!(decoded, 2000, "every framed descriptor reaches validation");
    }
}
