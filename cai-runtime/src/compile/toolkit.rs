//! Finding NVRTC, its builtins library and the CUDA headers at run time.
//!
//! Search order: `CAIJIT_NVRTC_PATH` (a file or a directory), the loader's
//! search path, the pip packages `nvidia-cuda-nvrtc` / `nvidia-cuda-runtime` in the running
//! Python's site-packages (CUDA 13 `nvidia/cu13` and CUDA 12 `nvidia/cuda_nvrtc` layouts),
//! `CUDA_HOME`, `CUDA_PATH`, `/usr/local/cuda`. Headers are searched next to the library
//! found, then in the same places. Nothing here panics: a failed search is a
//! [`Error::CudaNotAvailable`] listing every place tried.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::error::Error;
use crate::sync::lock;
use crate::sys;

/// NVRTC as found and loaded in this process.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Toolkit {
    /// The NVRTC library's path (or the soname the loader resolved, when its path is unknown).
    pub nvrtc_path: PathBuf,
    /// NVRTC's `(major, minor)` version.
    pub version: (i32, i32),
    /// The exact NVRTC build: each loaded NVRTC library file (`libnvrtc`, its builtins) by
    /// its GNU build ID, or the SHA-256 of its contents where it has none. Part of every
    /// cache key (13.0.48 and 13.0.88 are both "13.0", and make different binaries).
    pub build: String,
    /// Directories holding the CUDA headers (`cuda_fp16.h`, …), passed as `-I`.
    pub include_dirs: Vec<PathBuf>,
    /// Real architectures NVRTC can compile to (`90` is sm_90).
    pub supported_archs: Vec<i32>,
    pub(crate) nvrtc: &'static sys::Nvrtc,
}

static EXTRA_SITE_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static TOOLKIT: OnceLock<Result<Toolkit, String>> = OnceLock::new();

/// Add directories (a Python interpreter's `sys.path`) where pip packages may hold NVRTC.
/// Effective until the first compilation.
pub fn add_site_dirs<I: IntoIterator<Item = PathBuf>>(dirs: I) {
    let mut extra = lock(&EXTRA_SITE_DIRS);
    for d in dirs {
        if !extra.contains(&d) {
            extra.push(d);
        }
    }
}

fn site_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = lock(&EXTRA_SITE_DIRS).clone();
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        for lib in ["lib", "lib64"] {
            if let Ok(entries) = std::fs::read_dir(Path::new(&venv).join(lib)) {
                for e in entries.flatten() {
                    if e.file_name().to_string_lossy().starts_with("python") {
                        dirs.push(e.path().join("site-packages"));
                    }
                }
            }
        }
    }
    dirs.retain(|d| d.is_dir());
    dirs.dedup();
    dirs
}

fn cuda_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"].iter().filter_map(std::env::var_os).map(PathBuf::from).collect();
    roots.push(PathBuf::from("/usr/local/cuda"));
    roots
}

const SONAMES: [&str; 3] = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];

fn nvrtc_in(dir: &Path) -> Option<PathBuf> {
    SONAMES.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

/// The path the loader resolved for a loaded library, read from `/proc/self/maps`.
fn loaded_path(fragment: &str) -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| Path::new(p).file_name().is_some_and(|f| f.to_string_lossy().starts_with(fragment)))
        .map(PathBuf::from)
}

/// NVRTC needs `libnvrtc-builtins` from its own directory; the pip wheels do not put that
/// directory on the loader's path, so it is loaded here first.
fn preload_builtins(dir: &Path, major: Option<&str>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut candidates: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            n.starts_with("libnvrtc-builtins.so") && !n.contains(".alt.")
        })
        .collect();
    candidates.sort();
    if let Some(m) = major {
        candidates.sort_by_key(|p| !p.to_string_lossy().contains(&format!(".so.{m}")));
    }
    if let Some(p) = candidates.first() {
        let _ = sys::load_library(p);
    }
}

fn find_and_load() -> Result<(PathBuf, &'static sys::Nvrtc), String> {
    let mut tried: Vec<String> = Vec::new();
    let try_file = |path: &Path, tried: &mut Vec<String>| -> Option<&'static sys::Nvrtc> {
        let major = path.file_name().and_then(|f| f.to_str()).and_then(|f| f.strip_prefix("libnvrtc.so.")).map(str::to_owned);
        if let Some(dir) = path.parent() {
            preload_builtins(dir, major.as_deref());
        }
        sys::load_nvrtc(path).map_err(|e| tried.push(format!("{}: {e}", path.display()))).ok()
    };
    // 1. The explicit override: honoured, or an error naming it (never silently another NVRTC).
    if let Some(p) = std::env::var_os("CAIJIT_NVRTC_PATH").filter(|p| !p.is_empty()).map(PathBuf::from) {
        return explicit_nvrtc(&p, try_file);
    }
    // 2. The loader's search path.
    for soname in SONAMES {
        match sys::load_nvrtc(Path::new(soname)) {
            Ok(nv) => {
                let path = loaded_path("libnvrtc.so").unwrap_or_else(|| PathBuf::from(soname));
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    preload_builtins(dir, soname.strip_prefix("libnvrtc.so."));
                }
                return Ok((path, nv));
            }
            Err(_) => tried.push(format!("{soname} on the loader's search path")),
        }
    }
    // 3. pip wheels, 4. CUDA_HOME / CUDA_PATH / /usr/local/cuda.
    let mut dirs = Vec::new();
    for site in site_dirs() {
        dirs.push(site.join("nvidia/cu13/lib"));
        dirs.push(site.join("nvidia/cuda_nvrtc/lib"));
    }
    for root in cuda_roots() {
        dirs.push(root.join("lib64"));
        dirs.push(root.join("lib"));
    }
    for dir in dirs {
        match nvrtc_in(&dir) {
            Some(f) => {
                if let Some(nv) = try_file(&f, &mut tried) {
                    return Ok((f, nv));
                }
            }
            None => tried.push(format!("{}", dir.display())),
        }
    }
    Err(format!(
        "NVRTC was not found; install it with `pip install nvidia-cuda-nvrtc nvidia-cuda-runtime`, or set CAIJIT_NVRTC_PATH. Looked in: {}",
        tried.join("; ")
    ))
}

/// The NVRTC `CAIJIT_NVRTC_PATH` names (a library file, or a directory holding one).
fn explicit_nvrtc(
    p: &Path,
    try_file: impl Fn(&Path, &mut Vec<String>) -> Option<&'static sys::Nvrtc>,
) -> Result<(PathBuf, &'static sys::Nvrtc), String> {
    let unusable = |why: String| format!("CAIJIT_NVRTC_PATH={}: {why} (unset it to search the usual places)", p.display());
    let file = if p.is_dir() {
        nvrtc_in(p).ok_or_else(|| unusable(format!("no {} in this directory", SONAMES.join(" or "))))?
    } else if p.exists() {
        p.to_path_buf()
    } else {
        return Err(unusable("no such file or directory".into()));
    };
    let mut tried = Vec::new();
    match try_file(&file, &mut tried) {
        Some(nv) => Ok((file, nv)),
        None => Err(unusable(format!("cannot be loaded: {}", tried.join("; ")))),
    }
}

fn find_include_dirs(nvrtc: &Path) -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(p) = std::env::var_os("CAIJIT_CUDA_INCLUDE") {
        candidates.push(PathBuf::from(p));
    }
    if let Some(lib) = nvrtc.parent() {
        if let Some(root) = lib.parent() {
            candidates.push(root.join("include"));
            // CUDA 12 wheels: nvidia/cuda_nvrtc/lib → nvidia/cuda_runtime/include.
            if let Some(nvidia) = root.parent() {
                candidates.push(nvidia.join("cuda_runtime/include"));
            }
        }
    }
    for site in site_dirs() {
        candidates.push(site.join("nvidia/cu13/include"));
        candidates.push(site.join("nvidia/cuda_runtime/include"));
    }
    for root in cuda_roots() {
        candidates.push(root.join("include"));
    }
    let Some(dir) = candidates.into_iter().find(|d| d.join("cuda_fp16.h").is_file()) else { return Vec::new() };
    // CUDA 13 keeps CCCL (libcu++, needed by cooperative_groups and <cuda/std/...>) in
    // include/cccl; the pip layout is the same (nvidia-cuda-cccl). CUDA 12's wheels put it
    // beside the runtime's headers: nvidia/cuda_cccl/include (nvidia-cuda-cccl-cu12).
    let beside = dir.parent().and_then(Path::parent).map(|nvidia| nvidia.join("cuda_cccl/include"));
    let cccl = [Some(dir.join("cccl")), beside].into_iter().flatten().find(|d| d.is_dir());
    let mut found = vec![dir];
    found.extend(cccl);
    found
}

/// The identity of the NVRTC build loaded: every loaded library file whose name starts
/// with `libnvrtc` (the library and its builtins, as the loader mapped them), by GNU build
/// ID or, lacking one, by the SHA-256 of its contents. Computed once per process.
fn build_identity(nvrtc_path: &Path, version: (i32, i32)) -> Result<String, String> {
    let mut files: Vec<PathBuf> = std::fs::read_to_string("/proc/self/maps")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| Path::new(p).file_name().is_some_and(|f| f.to_string_lossy().starts_with("libnvrtc")))
        .map(PathBuf::from)
        .collect();
    if files.is_empty() {
        files.push(nvrtc_path.to_path_buf());
    }
    files.sort();
    files.dedup();
    let mut out = format!("nvrtc {}.{}", version.0, version.1);
    for f in files {
        let id = match gnu_build_id(&f) {
            Some(id) => format!("build-id {}", hex::encode(id)),
            None => {
                use sha2::Digest;
                use std::io::Read;
                let unreadable = |e: std::io::Error| format!("cannot read NVRTC's library {}: {e}", f.display());
                let mut h = sha2::Sha256::new();
                let mut file = std::fs::File::open(&f).map_err(unreadable)?;
                let mut buf = vec![0; 1 << 20];
                loop {
                    match file.read(&mut buf).map_err(unreadable)? {
                        0 => break,
                        n => h.update(&buf[..n]),
                    }
                }
                format!("sha256 {}", hex::encode(h.finalize()))
            }
        };
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        out.push_str(&format!("; {name} {id}"));
    }
    Ok(out)
}

/// The GNU build ID of a 64-bit little-endian ELF file (its `NT_GNU_BUILD_ID` note, read
/// from the note segments), or `None`.
fn gnu_build_id(path: &Path) -> Option<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let mut read_at = |offset: u64, len: usize| -> Option<Vec<u8>> {
        let mut buf = vec![0; len];
        f.seek(SeekFrom::Start(offset)).ok()?;
        f.read_exact(&mut buf).ok()?;
        Some(buf)
    };
    let header = read_at(0, 64)?;
    if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4])) as usize;
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    let (phoff, phentsize, phnum) = (u64_at(&header, 32), u16_at(&header, 54), u16_at(&header, 56));
    if phentsize < 56 || phnum > 4096 {
        return None;
    }
    let table = read_at(phoff, phentsize * phnum)?;
    for i in 0..phnum {
        let ph = &table[i * phentsize..(i + 1) * phentsize];
        // PT_NOTE
        if u32_at(ph, 0) != 4 {
            continue;
        }
        let (offset, size) = (u64_at(ph, 8), u64_at(ph, 32).min(1 << 20) as usize);
        let notes = read_at(offset, size)?;
        let mut at = 0;
        let align = |n: usize| (n + 3) & !3;
        while at + 12 <= notes.len() {
            let (namesz, descsz, kind) = (u32_at(&notes, at), u32_at(&notes, at + 4), u32_at(&notes, at + 8));
            let name_at = at + 12;
            let desc_at = name_at + align(namesz);
            let end = desc_at + align(descsz);
            if end > notes.len() {
                break;
            }
            // NT_GNU_BUILD_ID, owner "GNU\0".
            if kind == 3 && &notes[name_at..name_at + namesz] == b"GNU\0" {
                return Some(notes[desc_at..desc_at + descsz].to_vec());
            }
            at = end;
        }
    }
    None
}

/// Whether NVRTC is loaded (a [`toolkit`] call found it): a later call costs nothing.
pub(crate) fn loaded() -> bool {
    TOOLKIT.get().is_some_and(Result::is_ok)
}

/// Find and load NVRTC once per process. A build without the `nvrtc` feature looks for
/// none: its error says that the build has no NVRTC.
pub fn toolkit() -> crate::error::Result<&'static Toolkit> {
    if let Some(why) = sys::NVRTC_LEFT_OUT {
        return Err(Error::CudaNotAvailable(why.to_string()));
    }
    TOOLKIT
        .get_or_init(|| {
            let (nvrtc_path, nvrtc) = find_and_load()?;
            let version = nvrtc.version().map_err(|e| e.to_string())?;
            let supported_archs = nvrtc.supported_archs().map_err(|e| e.to_string())?;
            let include_dirs = find_include_dirs(&nvrtc_path);
            let build = build_identity(&nvrtc_path, version)?;
            Ok(Toolkit { nvrtc_path, version, build, include_dirs, supported_archs, nvrtc })
        })
        .as_ref()
        .map_err(|e| Error::CudaNotAvailable(e.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key names NVRTC's exact build: its library files' build IDs.
    #[cfg(feature = "nvrtc")]
    #[test]
    fn the_build_identity_names_every_nvrtc_library_by_build_id() {
        let tk = toolkit().expect("NVRTC must be installed for the CPU suite (scripts/setup.sh)");
        assert!(tk.build.starts_with(&format!("nvrtc {}.{};", tk.version.0, tk.version.1)), "{}", tk.build);
        assert!(tk.build.contains("libnvrtc.so") && tk.build.contains("libnvrtc-builtins"), "{}", tk.build);
        let id = gnu_build_id(&tk.nvrtc_path).expect("NVRTC has a GNU build ID");
        assert!(tk.build.contains(&hex::encode(id)), "{}", tk.build);
        let dir = tempfile::tempdir().unwrap();
        let not_elf = dir.path().join("libnvrtc.so");
        std::fs::write(&not_elf, b"not a library").unwrap();
        assert_eq!(gnu_build_id(&not_elf), None);
    }

    #[test]
    fn an_explicit_nvrtc_path_that_cannot_be_used_is_an_error_naming_it() {
        let never = |_: &Path, _: &mut Vec<String>| -> Option<&'static sys::Nvrtc> { panic!("nothing to load") };
        let e = explicit_nvrtc(Path::new("/nonexistent/libnvrtc.so"), never).unwrap_err();
        assert!(e.starts_with("CAIJIT_NVRTC_PATH=/nonexistent/libnvrtc.so: no such file"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let e = explicit_nvrtc(dir.path(), never).unwrap_err();
        assert!(e.contains("CAIJIT_NVRTC_PATH=") && e.contains("no libnvrtc.so.13"), "{e}");
        let file = dir.path().join("libnvrtc.so");
        std::fs::write(&file, b"not a library").unwrap();
        let refuse = |p: &Path, tried: &mut Vec<String>| -> Option<&'static sys::Nvrtc> {
            tried.push(format!("{}: invalid ELF header", p.display()));
            None
        };
        let e = explicit_nvrtc(&file, refuse).unwrap_err();
        assert!(e.contains("CAIJIT_NVRTC_PATH=") && e.contains("cannot be loaded") && e.contains("invalid ELF header"), "{e}");
    }
}
