//! The disk cache: one file per key, written atomically, verified on load.
//!
//! An entry is `MAGIC | key | sections | sha256(all before)`. A truncated, corrupt or
//! mismatched entry is never loaded: the caller recompiles and replaces it. Files are
//! created readable by the user only (`tempfile` creates them 0600), in a directory
//! created 0700; names are the key's hex digits, so nothing can escape the directory.
//!
//! # Trust
//! The digest detects damage, not forgery: whoever can write the directory can write an
//! entry with a matching digest, and caijit would load and launch its code. So the
//! directory is used only when this user owns it and nobody else can write it (what pip
//! and cuda.core's program cache require); otherwise compilation goes on without the disk
//! cache, with a warning naming the directory and the reason.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use super::compiled::Image;
use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"CAIJIT\x00\x01";

/// What a cache entry holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub image: Image,
    pub ptx: String,
    pub log: String,
    pub lowered: Vec<(String, String)>,
}

/// The disk cache directory.
#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: PathBuf,
}

/// Whether the disk cache is used, and why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheStatus {
    /// `CAIJIT_CACHE=0`.
    Disabled,
    /// The directory exists, or can be created, privately.
    Usable(PathBuf),
    /// The directory is not trusted (or cannot be made): compiling goes on without it.
    Refused { dir: PathBuf, why: String },
}

impl DiskCache {
    /// `CAIJIT_CACHE_DIR`, else `<user cache dir>/caijit`; `None` when `CAIJIT_CACHE=0`.
    /// An empty or relative `CAIJIT_CACHE_DIR` is an error naming it. The directory is not
    /// checked here (see [`DiskCache::trusted`]).
    pub fn from_env() -> Result<Option<DiskCache>> {
        if std::env::var("CAIJIT_CACHE").is_ok_and(|v| v == "0") {
            return Ok(None);
        }
        let dir = match std::env::var_os("CAIJIT_CACHE_DIR") {
            Some(d) if Path::new(&d).is_absolute() => PathBuf::from(d),
            Some(d) => {
                return Err(Error::argument(format!(
                    "CAIJIT_CACHE_DIR must be an absolute path, got {:?} (unset it for the default, or set CAIJIT_CACHE=0 to disable the disk cache)",
                    d
                )))
            }
            None => match dirs::cache_dir() {
                Some(d) => d.join("caijit"),
                None => return Ok(None),
            },
        };
        Ok(Some(DiskCache { dir }))
    }

    /// The cache of the environment when its directory can be trusted; a refused one is
    /// reported once per directory (a warning on stderr) and compilation goes on without it.
    pub fn from_env_trusted() -> Result<Option<DiskCache>> {
        let Some(cache) = DiskCache::from_env()? else { return Ok(None) };
        match cache.trusted() {
            Ok(()) => Ok(Some(cache)),
            Err(why) => {
                crate::stats::bump(&crate::stats::COUNTERS.disk_cache_errors);
                static WARNED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
                let mut warned = crate::sync::lock(&WARNED);
                if !warned.contains(&cache.dir) {
                    eprintln!("caijit: warning: not using the disk cache {}: {why}; compiling without it", cache.dir.display());
                    warned.push(cache.dir.clone());
                }
                Ok(None)
            }
        }
    }

    /// Whether the disk cache is used (for `caijit info`).
    pub fn status() -> Result<CacheStatus> {
        Ok(match DiskCache::from_env()? {
            None => CacheStatus::Disabled,
            Some(c) => match c.trusted() {
                Ok(()) => CacheStatus::Usable(c.dir),
                Err(why) => CacheStatus::Refused { dir: c.dir, why },
            },
        })
    }

    /// Create the directory (0700) if it does not exist; accept an existing one only if it
    /// is a directory this user owns that neither group nor others can write.
    pub fn trusted(&self) -> std::result::Result<(), String> {
        use std::os::unix::fs::MetadataExt;
        create_private_dir(&self.dir).map_err(|e| format!("it cannot be created: {e}"))?;
        let me = crate::sys::effective_uid();
        // A symbolic link (the path itself) must be this user's too: whoever owns it can
        // point it elsewhere between the check and the use.
        let link = std::fs::symlink_metadata(&self.dir).map_err(|e| format!("it cannot be read: {e}"))?;
        if link.file_type().is_symlink() && link.uid() != me {
            return Err(format!("it is a symbolic link owned by user {}, not by this user ({me})", link.uid()));
        }
        let m = std::fs::metadata(&self.dir).map_err(|e| format!("it cannot be read: {e}"))?;
        if !m.is_dir() {
            return Err("it is not a directory".into());
        }
        if m.uid() != me {
            return Err(format!("it is owned by user {}, not by this user ({me})", m.uid()));
        }
        if m.mode() & 0o022 != 0 {
            return Err(format!(
                "its mode {:o} lets others write it (entries in it may be anyone's: empty it and chmod 700 it to use it)",
                m.mode() & 0o777
            ));
        }
        // Nor may anyone else rename it away: every directory above must be this user's or
        // root's, or be closed to writers other than its owner, or be sticky (as /tmp is).
        let real = std::fs::canonicalize(&self.dir).map_err(|e| format!("it cannot be resolved: {e}"))?;
        for parent in real.ancestors().skip(1) {
            let Ok(pm) = std::fs::metadata(parent) else { continue };
            let open = pm.mode() & 0o022 != 0 && pm.mode() & 0o1000 == 0;
            if open && pm.uid() != me {
                return Err(format!("{} above it lets others rename it (mode {:o})", parent.display(), pm.mode() & 0o7777));
            }
        }
        Ok(())
    }

    pub fn at(dir: impl Into<PathBuf>) -> DiskCache {
        DiskCache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// For the fuzz targets and property tests only: decode `body` as the entry for `key`,
    /// sealed with its correct digest first when `seal` (so that the reader past the
    /// digest is reached); on success, the entry's PTX and `(name expression, lowered name)`
    /// pairs, which compilation then reads with [`crate::signature`].
    #[doc(hidden)]
    pub fn decode_entry_for_fuzzing(key: &str, body: &[u8], seal: bool) -> Result<(String, Vec<(String, String)>), String> {
        let mut bytes = body.to_vec();
        if seal {
            bytes.extend_from_slice(Sha256::digest(body).as_slice());
        }
        decode(key, &bytes).map(|e| (e.ptx, e.lowered))
    }

    pub(crate) fn path(&self, key: &str) -> PathBuf {
        debug_assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
        self.dir.join(format!("{key}.cubin-entry"))
    }

    /// `Ok(None)`: no entry. `Err`: an entry exists but is corrupt, or is not a regular file
    /// of this user's that only it can write (the caller replaces it).
    pub(crate) fn load(&self, key: &str) -> Result<Option<Entry>, String> {
        use std::io::Read;
        use std::os::unix::fs::MetadataExt;
        let path = self.path(key);
        let cannot = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
        // Never through a symbolic link, never blocking on a FIFO, and checked on the file
        // that was opened.
        let (mut file, m) = match crate::files::open_regular(&path, true) {
            Ok(opened) => opened,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(cannot(e)),
        };
        if m.uid() != crate::sys::effective_uid() || m.mode() & 0o022 != 0 {
            return Err(format!("{} is not a private file of this user's: not trusted", path.display()));
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(cannot)?;
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

    /// Remove every entry; returns how many were removed. An error names the file or the
    /// directory that could not be removed or read ([`Error::Cache`]).
    pub fn clear(&self) -> Result<usize> {
        let mut n = 0;
        match std::fs::read_dir(&self.dir) {
            Ok(entries) => {
                for e in entries.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if name.ends_with(".cubin-entry") || name.starts_with(".tmp-") {
                        let path = e.path();
                        std::fs::remove_file(&path).map_err(|source| Error::Cache { path, source })?;
                        n += 1;
                    }
                }
                Ok(n)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(source) => Err(Error::Cache { path: self.dir.clone(), source }),
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
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| "truncated".to_string())?))
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
    let kind = r.take(1).map_err(corrupt)?.first().copied().ok_or_else(|| corrupt("truncated".into()))?;
    let image = r.bytes().map_err(corrupt)?.to_vec();
    let image = match kind {
        0 => Image::Cubin(image),
        1 => Image::Ptx(String::from_utf8(image).map_err(|_| corrupt("PTX is not UTF-8".into()))?),
        k => return Err(corrupt(format!("unknown image kind {k}"))),
    };
    let ptx = r.string().map_err(corrupt)?;
    let log = r.string().map_err(corrupt)?;
    let n = u32::from_le_bytes(r.take(4).map_err(corrupt)?.try_into().map_err(|_| corrupt("truncated".into()))?);
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

    /// Whether this process can give files away (root): the ownership cases need it.
    fn can_chown() -> bool {
        crate::sys::effective_uid() == 0
    }

    #[test]
    fn entries_not_owned_by_this_user_or_open_to_others_are_not_loaded() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::at(dir.path().join("c"));
        cache.store(KEY, &entry()).unwrap();
        assert_eq!(cache.load(KEY).unwrap(), Some(entry()));
        // Writable by others (planted while the directory was open, say).
        std::fs::set_permissions(cache.path(KEY), std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(cache.load(KEY).unwrap_err().contains("not trusted"));
        std::fs::set_permissions(cache.path(KEY), std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(cache.load(KEY).unwrap(), Some(entry()));
        // A symbolic link to a valid entry elsewhere is never followed.
        let elsewhere = dir.path().join("elsewhere");
        std::fs::rename(cache.path(KEY), &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, cache.path(KEY)).unwrap();
        assert!(cache.load(KEY).is_err());
        std::fs::remove_file(cache.path(KEY)).unwrap();
        // Another user's file, even private and valid.
        if can_chown() {
            cache.store(KEY, &entry()).unwrap();
            std::os::unix::fs::chown(cache.path(KEY), Some(12345), Some(12345)).unwrap();
            assert!(cache.load(KEY).unwrap_err().contains("not trusted"));
            cache.store(KEY, &entry()).unwrap(); // replaced by this user's
            assert_eq!(cache.load(KEY).unwrap(), Some(entry()));
        }
    }

    #[test]
    fn a_directory_others_can_swap_is_not_trusted() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        // A world-writable parent without the sticky bit: anyone could rename the cache away.
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let cache = DiskCache::at(open.join("cache"));
        if can_chown() {
            std::os::unix::fs::chown(&open, Some(12345), None).unwrap();
            assert!(cache.trusted().unwrap_err().contains("lets others rename it"), "{:?}", cache.trusted());
        }
        // Sticky (as /tmp is): fine.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(cache.trusted(), Ok(()));
        // The cache path a symbolic link that another user owns.
        if can_chown() {
            let target = dir.path().join("target");
            std::fs::create_dir(&target).unwrap();
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
            let link = dir.path().join("link");
            std::os::unix::fs::symlink(&target, &link).unwrap();
            assert_eq!(DiskCache::at(&link).trusted(), Ok(()), "this user's own link");
            std::os::unix::fs::lchown(&link, Some(12345), Some(12345)).unwrap();
            assert!(DiskCache::at(&link).trusted().unwrap_err().contains("symbolic link owned by user 12345"));
        }
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
