//! The bundles this process has loaded, which compilations search ([`loaded`]): those of
//! `CAIJIT_BUNDLES` (read at the first call), those [`install`]ed or [`load`]ed, each once,
//! and the shipped bundles of [`add_default`] (opened at the next lookup).

use std::path::Path;
use std::sync::{Arc, OnceLock, RwLock};

use super::read::Bundle;
use crate::error::{Error, Result};

static LOADED: RwLock<Vec<Arc<Bundle>>> = RwLock::new(Vec::new());
static FROM_ENV: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// Make `bundle` searched by every compilation of this process (after those of
/// `CAIJIT_BUNDLES` and those loaded before it). A bundle already loaded (same origin and
/// contents) is not added twice. Every program record and the tunings it ships are read
/// first: a bundle with a damaged one is an error, and is not loaded.
pub fn install(bundle: Bundle) -> Result<Arc<Bundle>> {
    read_index(&bundle)?;
    // `CAIJIT_BUNDLES` comes first however the process began (its error is reported by
    // the compilations that search the bundles).
    let _ = from_env();
    Ok(insert(bundle))
}

/// The bundle at `path` with every program record and its tunings read (a damaged one
/// is an error).
fn open_whole(path: &Path) -> Result<Bundle> {
    let b = Bundle::open(path)?;
    read_index(&b)?;
    Ok(b)
}

/// Read what a loaded bundle must have whole: every program record, and the tunings.
fn read_index(b: &Bundle) -> Result<()> {
    b.programs()?;
    b.tunings()?;
    Ok(())
}

fn insert(bundle: Bundle) -> Arc<Bundle> {
    let mut loaded = LOADED.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(same) = loaded.iter().find(|b| b.origin == bundle.origin && b.toc_crc32 == bundle.toc_crc32) {
        return same.clone();
    }
    let b = Arc::new(bundle);
    loaded.push(b.clone());
    b
}

/// Read and install the bundle at `path` ([`Bundle::open`]).
pub fn load(path: impl AsRef<Path>) -> Result<Arc<Bundle>> {
    install(Bundle::open(path)?)
}

/// Every bundle loaded: those of `CAIJIT_BUNDLES` (a `:`-separated list of files, read at
/// the first call; an unreadable one is an error naming it, at every call), then those
/// loaded explicitly.
pub fn loaded() -> Result<Vec<Arc<Bundle>>> {
    from_env().map_err(|e| Error::Bundle(e.to_string()))?;
    // Shipped bundles are opened under the lock that holds them, so that a lookup racing
    // the first one waits until they are installed (not finding them would compile, or,
    // without NVRTC, fail).
    let mut defaults = crate::sync::lock(&DEFAULTS);
    for path in std::mem::take(&mut *defaults) {
        match open_whole(&path) {
            Ok(b) => {
                insert(b);
            }
            Err(e) => eprintln!("caijit: warning: not using a shipped kernel bundle: {e}; compiling with NVRTC instead"),
        }
    }
    drop(defaults);
    Ok(LOADED.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
}

/// The bundles of `CAIJIT_BUNDLES` (a `:`-separated list of files), loaded at the first
/// call, all or none; an unreadable one is an error naming it, at every call.
fn from_env() -> std::result::Result<(), &'static str> {
    let env = FROM_ENV.get_or_init(|| {
        let Some(list) = std::env::var_os("CAIJIT_BUNDLES") else { return Ok(()) };
        let mut all = Vec::new();
        for path in std::env::split_paths(&list).filter(|p| !p.as_os_str().is_empty()) {
            match open_whole(&path) {
                Ok(b) => all.push(b),
                Err(e) => return Err(format!("CAIJIT_BUNDLES: {e}")),
            }
        }
        for b in all {
            insert(b);
        }
        Ok(())
    });
    env.as_ref().map(|_| ()).map_err(String::as_str)
}

static DEFAULTS: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());

/// A bundle shipped with a package (the Python wheel's precompiled kernel library): opened
/// at the next lookup, after those of `CAIJIT_BUNDLES`. One that cannot be used is skipped
/// with a warning (compilation goes on with NVRTC), not an error.
pub fn add_default(path: impl Into<std::path::PathBuf>) {
    crate::sync::lock(&DEFAULTS).push(path.into());
}
