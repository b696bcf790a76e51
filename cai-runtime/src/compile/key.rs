//! A compilation's cache key: everything that decides what NVRTC makes of a program,
//! hashed; and the hashing the bundle keys share.

use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use super::headers::HEADERS;
use super::includes::Includes;
use super::program::{Arch, Program};
use super::toolkit::Toolkit;

/// Bumped whenever the cache entry format or what a key covers changes.
const SCHEMA_VERSION: u32 = 5;

/// A program's cache key: everything that decides what NVRTC makes of it, `opts` (the
/// untrusted form, which names every directory and option) and the headers found.
pub(super) fn cache_key(program: &Program, arch: Arch, opts: &[String], tk: &Toolkit, includes: &Includes) -> String {
    let (schema, arch) = (SCHEMA_VERSION.to_le_bytes(), arch.0.to_le_bytes());
    let mut parts: Vec<&[u8]> = vec![&schema, tk.build.as_bytes(), &arch, program.source.as_bytes(), program.name.as_bytes()];
    parts.extend(opts.iter().map(|o| o.as_bytes()));
    parts.push(b"--exprs");
    parts.extend(program.name_expressions.iter().map(|e| e.as_bytes()));
    parts.push(b"--headers");
    parts.push(embedded_headers_digest());
    parts.push(&includes.digest);
    sha256_hex(&parts)
}

/// The digest of caijit's embedded headers (constant for a build, hashed once).
pub(super) fn embedded_headers_digest() -> &'static [u8] {
    static DIGEST: OnceLock<Vec<u8>> = OnceLock::new();
    DIGEST.get_or_init(|| {
        let mut h = Sha256::new();
        for (name, contents) in HEADERS {
            for part in [name.as_bytes(), contents.as_bytes()] {
                h.update((part.len() as u64).to_le_bytes());
                h.update(part);
            }
        }
        h.finalize().to_vec()
    })
}

/// SHA-256 of `parts`, each preceded by its length (so that no two lists of parts hash
/// alike), in hex.
pub(super) fn sha256_hex(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    hash_parts(&mut h, parts);
    hex::encode(h.finalize().as_slice())
}

/// Feed `parts` to `h` as [`sha256_hex`] does (each with its length first), so that a digest
/// of more parts can continue from a clone of `h`.
pub(super) fn hash_parts(h: &mut Sha256, parts: &[&[u8]]) {
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
}
