//! Arbitrary bytes as a disk-cache entry: the entry reader never panics, and what it reads
//! back (PTX, lowered names) goes through the signature readers as compilation would.
#![no_main]

#[path = "common/describe.rs"]
mod describe;

use cai_runtime::compile::DiskCache;
use libfuzzer_sys::fuzz_target;

/// `compile/cache.rs`'s MAGIC; with it and the key in front, the fuzzer starts at the sections.
const MAGIC: &[u8; 8] = b"CAIJIT\x00\x01";
const KEY: &str = "00ff";

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let body = if mode & 2 != 0 {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&(KEY.len() as u64).to_le_bytes());
        b.extend_from_slice(KEY.as_bytes());
        b.extend_from_slice(rest);
        b
    } else {
        rest.to_vec()
    };
    // Bit 0: seal the body with its digest, so that the reader past the checksum runs.
    if let Ok((ptx, lowered)) = DiskCache::decode_entry_for_fuzzing(KEY, &body, mode & 1 != 0) {
        describe::describe("", &ptx, &lowered);
    }
});
