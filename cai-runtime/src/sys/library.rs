//! Loading shared libraries (the CUDA driver, NVRTC and its builtins, an NVTX tool) by
//! absolute path or soname, kept loaded for the life of the process.

use std::path::Path;

/// Load a shared library by absolute path or soname and keep it loaded for the process.
pub(crate) fn load_library(name: &Path) -> Result<(), String> {
    open_library(name).map(drop)
}

/// [`load_library`], handing out the library.
pub(super) fn open_library(name: &Path) -> Result<&'static libloading::Library, String> {
    // SAFETY: loading runs the library's initialisers; the libraries loaded here (NVRTC,
    // its builtins, the CUDA driver) have no initialisers with preconditions on the caller.
    let lib = unsafe { libloading::Library::new(name.as_os_str()) }.map_err(|e| {
        // libloading puts dlerror()'s text in the source chain.
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            message = format!("{message}: {s}");
            source = s.source();
        }
        message
    })?;
    // Never unloaded: cudarc resolves symbols from it for the life of the process.
    Ok(Box::leak(Box::new(lib)))
}
