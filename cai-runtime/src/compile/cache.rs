//! The disk cache: one file per key, written atomically, verified on load.
//!
//! An entry is `MAGIC | key | sections | sha256(all before)`. A truncated, corrupt or
//! mismatched entry is never loaded: the caller recompiles and replaces it. Files are
//! created readable by the user only (`tempfile` creates them 0600), in a directory
//! created 0700; names are the key's hex digits, so nothing can escape the directory.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::Image;

const MAGIC: &[u8; 8] = b"CAIJIT\x00\x01";

/// What a cache entry holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub image: Image,
    pub ptx: String,
    pub log: String,
    pub lowered: Vec<(String, String)>,
}

/// The disk cache directory, or none when disabled (`CAIJIT_CACHE=0`).
#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: PathBuf,
}

impl DiskCache {
    /// `CAIJIT_CACHE_DIR`, else `<user cache dir>/caijit`; `None` when `CAIJIT_CACHE=0`.
    pub fn from_env() -> Option<DiskCache> {
        if std::env::var("CAIJIT_CACHE").is_ok_and(|v| v == "0") {
            return None;
        }
        let dir = std::env::var_os("CAIJIT_CACHE_DIR").map(PathBuf::from).or_else(|| dirs::cache_dir().map(|d| d.join("caijit")))?;
        Some(DiskCache { dir })
    }

    pub fn at(dir: impl Into<PathBuf>) -> DiskCache {
        DiskCache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn path(&self, key: &str) -> PathBuf {
        debug_assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
        self.dir.join(format!("{key}.cubin-entry"))
    }

    /// `Ok(None)`: no entry. `Err`: an entry exists but is corrupt (the caller replaces it).
    pub(crate) fn load(&self, key: &str) -> Result<Option<Entry>, String> {
        let bytes = match std::fs::read(self.path(key)) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read {}: {e}", self.path(key).display())),
        };
        decode(key, &bytes).map(Some)
    }

    pub(crate) fn store(&self, key: &str, entry: &Entry) -> Result<(), String> {
        let ctx = |e: std::io::Error| format!("cannot write the cache entry in {}: {e}", self.dir.display());
        create_private_dir(&self.dir).map_err(ctx)?;
        let mut tmp = tempfile::Builder::new().prefix(".tmp-").tempfile_in(&self.dir).map_err(ctx)?;
        tmp.write_all(&encode(key, entry)).map_err(ctx)?;
        tmp.as_file().sync_all().map_err(ctx)?;
        // rename(2) is atomic: readers see the old entry, no entry, or the whole new one.
        tmp.persist(self.path(key)).map_err(|e| ctx(e.error))?;
        Ok(())
    }

    /// Remove every entry; returns how many were removed.
    pub fn clear(&self) -> std::io::Result<usize> {
        let mut n = 0;
        match std::fs::read_dir(&self.dir) {
            Ok(entries) => {
                for e in entries.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if name.ends_with(".cubin-entry") || name.starts_with(".tmp-") {
                        std::fs::remove_file(e.path())?;
                        n += 1;
                    }
                }
                Ok(n)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// `(entries, bytes)` currently in the cache.
    pub fn size(&self) -> (usize, u64) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return (0, 0) };
        entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".cubin-entry"))
            .fold((0, 0), |(n, b), e| (n + 1, b + e.metadata().map_or(0, |m| m.len())))
    }
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

pub(crate) fn encode(key: &str, e: &Entry) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + e.image.bytes().len() + e.ptx.len());
    out.extend_from_slice(MAGIC);
    put(&mut out, key.as_bytes());
    out.push(match e.image {
        Image::Cubin(_) => 0,
        Image::Ptx(_) => 1,
    });
    put(&mut out, e.image.bytes());
    put(&mut out, e.ptx.as_bytes());
    put(&mut out, e.log.as_bytes());
    out.extend_from_slice(&(e.lowered.len() as u32).to_le_bytes());
    for (expr, lowered) in &e.lowered {
        put(&mut out, expr.as_bytes());
        put(&mut out, lowered.as_bytes());
    }
    let digest = Sha256::digest(&out);
    out.extend_from_slice(digest.as_slice());
    out
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.buf.len() < n {
            return Err("truncated".into());
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = usize::try_from(self.u64()?).map_err(|_| "length overflows".to_string())?;
        self.take(n)
    }
    fn string(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| "not UTF-8".to_string())
    }
}

pub(crate) fn decode(key: &str, bytes: &[u8]) -> Result<Entry, String> {
    let corrupt = |why: String| format!("corrupt cache entry for {key}: {why}");
    if bytes.len() < MAGIC.len() + 32 {
        return Err(corrupt("truncated".into()));
    }
    let (body, digest) = bytes.split_at(bytes.len() - 32);
    if Sha256::digest(body).as_slice() != digest {
        return Err(corrupt("checksum mismatch".into()));
    }
    let mut r = Reader { buf: body };
    if r.take(MAGIC.len()).map_err(corrupt)? != MAGIC {
        return Err(corrupt("bad magic (another version of caijit?)".into()));
    }
    if r.bytes().map_err(corrupt)? != key.as_bytes() {
        return Err(corrupt("the entry belongs to another key".into()));
    }
    let kind = r.take(1).map_err(corrupt)?[0];
    let image = r.bytes().map_err(corrupt)?.to_vec();
    let image = match kind {
        0 => Image::Cubin(image),
        1 => Image::Ptx(String::from_utf8(image).map_err(|_| corrupt("PTX is not UTF-8".into()))?),
        k => return Err(corrupt(format!("unknown image kind {k}"))),
    };
    let ptx = r.string().map_err(corrupt)?;
    let log = r.string().map_err(corrupt)?;
    let n = u32::from_le_bytes(r.take(4).map_err(corrupt)?.try_into().expect("4 bytes"));
    let mut lowered = Vec::new();
    for _ in 0..n {
        lowered.push((r.string().map_err(corrupt)?, r.string().map_err(corrupt)?));
    }
    if !r.buf.is_empty() {
        return Err(corrupt("trailing bytes".into()));
    }
    Ok(Entry { image, ptx, log, lowered })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            image: Image::Cubin(vec![0x7f, b'E', b'L', b'F', 1, 2, 3]),
            ptx: ".entry k()".into(),
            log: "warning: x".into(),
            lowered: vec![("axpy<float>".into(), "_Z4axpyIfEvv".into())],
        }
    }

    const KEY: &str = "00ff";

    #[test]
    fn round_trip() {
        assert_eq!(decode(KEY, &encode(KEY, &entry())).unwrap(), entry());
    }

    #[test]
    fn every_truncation_and_every_bit_flip_is_detected() {
        let good = encode(KEY, &entry());
        for n in 0..good.len() {
            assert!(decode(KEY, &good[..n]).is_err(), "truncated to {n}");
        }
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            assert!(decode(KEY, &bad).is_err(), "flip at {i}");
        }
        assert!(decode("abcd", &good).is_err(), "another key");
    }

    #[test]
    fn store_load_and_private_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::at(dir.path().join("nested"));
        assert_eq!(cache.load(KEY).unwrap(), None);
        cache.store(KEY, &entry()).unwrap();
        assert_eq!(cache.load(KEY).unwrap(), Some(entry()));
        let mode = std::fs::metadata(cache.path(KEY)).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "entry readable by others: {mode:o}");
        let dmode = std::fs::metadata(cache.dir()).unwrap().permissions().mode();
        assert_eq!(dmode & 0o077, 0, "directory open to others: {dmode:o}");
        assert_eq!(cache.size().0, 1);
        std::fs::write(cache.path(KEY), b"garbage").unwrap();
        assert!(cache.load(KEY).is_err());
        assert_eq!(cache.clear().unwrap(), 1);
    }
}
