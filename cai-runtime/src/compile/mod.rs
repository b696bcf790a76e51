//! Compiling CUDA C++ with NVRTC, knowing every kernel's parameters, caching the results.
//!
//! # Examples
//! ```no_run
//! use cai_runtime::compile::{compile, Arch, Program};
//! let src = "template <typename T> __global__ void axpy(T a, const T* x, T* y, int n) {}";
//! let program = Program::new(src).name_expression("axpy<float>");
//! let compiled = compile(&program, Arch::parse("sm_90")?)?;
//! let k = compiled.kernel("axpy<float>")?;
//! assert_eq!(k.params.len(), 4);
//! # Ok::<(), cai_runtime::Error>(())
//! ```
//!
//! # Rationale
//! A program is its source, options, include directories, defines and name expressions;
//! all of them (plus the exact NVRTC build, the architecture and every header it can
//! include, by name and contents) form the cache key. Compilation targets CUBIN for the
//! exact architecture, so loading costs no JIT; PTX is kept alongside because its `.entry`
//! lists are the ground truth for parameter sizes (see [`crate::signature`]).
//!
//! A hit must be the binary NVRTC would make, so a compilation whose result may be cached
//! is *trusted by construction*: caijit finds every header the program can include (see
//! `includes.rs`), hashes it into the key and hands it to NVRTC in memory, and gives NVRTC
//! no way to read anything else: no include directory (caijit applies `-I`,
//! `--include-path` and the program's directories itself, in every spelling NVRTC accepts),
//! `-no-source-include`, and pre-included headers (`-include`, `--pre-include`) by the
//! names they are handed under. If NVRTC still asks for a header (caijit's search did not
//! find one NVRTC's would), the compile fails and is done again *untrusted*, with NVRTC's
//! own search path; that result is neither stored on disk nor kept in memory, is counted
//! (`untrusted_compiles`, `trusted_fallbacks` in [`crate::stats`]), and a warning naming
//! the header is printed once. A disagreement costs a second compilation, never a stale
//! binary.
//!
//! The key names the NVRTC build by its library files (GNU build IDs, read once per
//! process), not by its major.minor version. NVRTC's automatic precompiled headers
//! (`-pch`, `--pch-dir=…`) are not passed on (NVRTC reuses a PCH made from a header's old
//! contents after the header changed); caijit's caches play their part. Explicit PCH files
//! (`-use-pch=…`, `-create-pch=…`) make a compilation untrusted.
//!
//! # Limitations
//! Some programs cannot be compiled trusted, because caijit cannot name every header they
//! may read without preprocessing them: a computed `#include MACRO`, an `#include_next`,
//! one name meaning different files from different including files, a `#pragma once`
//! header included by two names, an unreadable or non-UTF-8 header, a pre-included header
//! caijit does not find, an explicit PCH option. They are compiled untrusted (above) on
//! every call. A header that is not a regular file (a FIFO, a device, a directory) is an
//! error naming it, before NVRTC runs.

pub mod bake;
mod bundled;
mod cache;
mod headers;
mod includes;
mod lineinfo;
mod options;
mod toolkit;
pub use lineinfo::LINEINFO;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use sha2::{Digest, Sha256};

pub use bundled::{bundle_key, family_key, manifest_entry, read_manifest, record_to, recording};
pub use cache::{CacheStatus, DiskCache};
pub use headers::{HEADERS, OPS};
pub use toolkit::{add_site_dirs, toolkit, Toolkit};

use crate::error::CompileError;
use crate::signature::{self, Declarations, KernelDecl, ParamLayout};
use crate::stats::{bump, COUNTERS};
use crate::sync::OnceMap;
use crate::sys::NvrtcError;
use crate::{Error, Result};

/// Bumped whenever the cache entry format or what a key covers changes.
const SCHEMA_VERSION: u32 = 5;

/// A CUDA C++ program: source plus everything that changes what NVRTC makes of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Program {
    pub source: String,
    /// The file name NVRTC uses in its messages (`kernel.cu` by default).
    pub name: String,
    pub options: Vec<String>,
    pub include_dirs: Vec<PathBuf>,
    pub defines: Vec<(String, Option<String>)>,
    pub name_expressions: Vec<String>,
    /// The directory of the program's file, searched first for its `#include "…"`s (set by
    /// [`Program::located_at`]). `None`: NVRTC's own rule, the directory of `name`
    /// relative to the current directory.
    pub source_dir: Option<PathBuf>,
}

impl Program {
    pub fn new(source: impl Into<String>) -> Program {
        Program { source: source.into(), name: "kernel.cu".into(), ..Default::default() }
    }

    /// Read a `.cu` file; its directory becomes an include directory.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Program> {
        let path = path.as_ref();
        let source =
            std::fs::read_to_string(path).map_err(|e| Error::argument(format!("cannot read the kernel source {}: {e}", path.display())))?;
        Ok(Program::new(source).located_at(path))
    }

    /// Name the program after the file it came from, search that file's directory first for
    /// its `#include "…"`s, and add it to the include path (what [`Program::from_file`]
    /// does, for source already read). A bare file name is in the current directory.
    pub fn located_at(mut self, path: impl AsRef<Path>) -> Self {
        let path = path.as_ref();
        if let Some(n) = path.file_name() {
            self.name = n.to_string_lossy().into_owned();
        }
        match path.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(dir) => {
                self.include_dirs.push(dir.to_path_buf());
                self.source_dir = Some(dir.to_path_buf());
            }
            None => self.source_dir = Some(PathBuf::from(".")),
        }
        self
    }

    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
    pub fn option(mut self, option: impl Into<String>) -> Self {
        self.options.push(option.into());
        self
    }
    pub fn include_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.include_dirs.push(dir.into());
        self
    }
    pub fn define(mut self, name: impl Into<String>, value: Option<String>) -> Self {
        self.defines.push((name.into(), value));
        self
    }
    pub fn name_expression(mut self, expr: impl Into<String>) -> Self {
        let expr = expr.into();
        if !self.name_expressions.contains(&expr) {
            self.name_expressions.push(expr);
        }
        self
    }

    /// The `__global__` functions the tokenizer finds in the source (candidate names,
    /// template parameters, parameter names), with notes on what it could not read.
    pub fn declarations(&self) -> Declarations {
        signature::parse_kernels(&self.source)
    }

    /// The program with `headers` included before its source (`#line 1` keeps the source's
    /// line numbers in NVRTC's messages): what an instance caijit generates for a type
    /// needs (`cuda_fp16.h` for `__half`), whatever the source includes itself.
    pub fn including(mut self, headers: &[&str]) -> Self {
        if headers.is_empty() {
            return self;
        }
        let mut source = String::new();
        for h in headers {
            source.push_str(&format!("#include <{h}>\n"));
        }
        source.push_str("#line 1\n");
        source.push_str(&self.source);
        self.source = source;
        self
    }
}

/// A GPU architecture: `Arch(90)` is sm_90.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch(pub u32);

impl Arch {
    /// Parse `sm_90` or `90`. A virtual architecture (`compute_90`) and an architecture-specific one (`sm_90a`) are refused:
    /// caijit compiles CUBINs for a real one.
    pub fn parse(s: &str) -> Result<Arch> {
        if let Some(n) = s.trim().strip_prefix("compute_") {
            return Err(Error::argument(format!("{s:?} is a virtual architecture (PTX); caijit compiles for a real one: give sm_{n}")));
        }
        let digits = s.trim().trim_start_matches("sm_");
        if let Some(n) = digits.strip_suffix('a').or_else(|| digits.strip_suffix('f')) {
            return Err(Error::argument(format!(
                "{s:?} is an architecture-specific target (its code runs on sm_{n} only); caijit compiles portable CUBINs: give sm_{n}"
            )));
        }
        digits
            .parse::<u32>()
            .ok()
            .filter(|&n| (30..=200).contains(&n))
            .map(Arch)
            .ok_or_else(|| Error::argument(format!("cannot read {s:?} as a GPU architecture (expected e.g. sm_90)")))
    }

    /// From a compute capability `(major, minor)`.
    pub fn from_capability(major: i32, minor: i32) -> Arch {
        Arch((major * 10 + minor).max(0) as u32)
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sm_{}", self.0)
    }
}

/// What a compilation produced for the loader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Image {
    Cubin(Vec<u8>),
    /// PTX, when NVRTC does not know the device's architecture (the driver JIT-compiles it).
    Ptx(String),
}

impl Image {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Image::Cubin(b) => b,
            Image::Ptx(s) => s.as_bytes(),
        }
    }
}

/// Where a compilation's result came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheSource {
    Compiled,
    Memory,
    Disk,
    /// A loaded kernel bundle ([`crate::bundle`]).
    Bundle,
}

/// One kernel of a compiled program.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelInfo {
    /// The name expression it was instantiated by (`axpy<float>`), if any.
    pub name_expression: Option<String>,
    /// The symbol in the binary (`_Z4axpyIfEvT_PKS0_PS0_i`, or `scale` for `extern "C"`).
    pub lowered_name: String,
    /// The demangled signature of a C++ kernel.
    pub demangled: Option<String>,
    /// The name with its namespaces, without template arguments (`ns::axpy`).
    pub qualified_name: String,
    pub params: Vec<ParamLayout>,
}

impl KernelInfo {
    /// The name without template arguments or namespaces (`axpy`).
    pub fn base_name(&self) -> &str {
        self.qualified_name.rsplit("::").next().unwrap_or(&self.qualified_name)
    }

    /// The name messages give it: demangled where it could be, else the lowered name.
    pub fn display_name(&self) -> &str {
        self.demangled.as_deref().unwrap_or(&self.lowered_name)
    }

    /// Bytes of the parameter buffer.
    pub fn param_buffer_size(&self) -> usize {
        self.params.last().map_or(0, |p| p.offset + p.size)
    }
}

/// A kernel of a compiled program that caijit cannot launch, and why: the other kernels of
/// its program are not concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnusableKernel {
    pub name_expression: Option<String>,
    pub lowered_name: String,
    /// The demangled signature, where it could be demangled.
    pub demangled: Option<String>,
    /// The name with its namespaces (read off the mangled name where it could not be
    /// demangled; the lowered name where neither could be read).
    pub qualified_name: String,
    pub reason: signature::SignatureError,
}

impl UnusableKernel {
    fn base_name(&self) -> &str {
        self.qualified_name.rsplit("::").next().unwrap_or(&self.qualified_name)
    }

    /// The error naming it raises: an argument error carrying the parameter at fault, when
    /// one is.
    pub fn error(&self) -> Error {
        match &self.reason {
            signature::SignatureError::Param { .. } => Error::from(self.reason.clone()),
            r => Error::argument(format!("kernel `{}` cannot be launched: {r}", self.demangled.as_deref().unwrap_or(&self.qualified_name))),
        }
    }
}

/// A compiled program: its image and every kernel's parameter layout.
#[derive(Debug)]
#[non_exhaustive]
pub struct Compiled {
    /// The cache key (for an untrusted result, hashed with its binary too).
    pub key: String,
    pub arch: Arch,
    pub image: Image,
    pub ptx: String,
    /// NVRTC's log (warnings), verbatim.
    pub log: String,
    pub kernels: Vec<KernelInfo>,
    /// What caijit could not learn (a declaration the tokenizer could not read, an
    /// `extern "C"` kernel whose types the compiler was not asked for, a kernel in
    /// `unusable` and why): kernels it concerns are left out of `kernels`.
    pub notes: Vec<String>,
    /// Kernels NVRTC compiled whose parameters caijit cannot read or lay out (a type it
    /// cannot pass, a name it cannot demangle): naming one is an error that says why.
    pub unusable: Vec<UnusableKernel>,
    pub source: CacheSource,
    /// Why NVRTC compiled this with its own search path (`None`: trusted, every header in
    /// memory and no search path). An untrusted result is never stored on disk nor kept
    /// in memory.
    pub untrusted: Option<String>,
    /// The options NVRTC was given (after caijit's defaults; for a disk hit, those it would
    /// be given).
    pub nvrtc_options: Vec<String>,
}

impl Compiled {
    /// Find a kernel by name expression, lowered name, qualified name or plain name.
    pub fn kernel(&self, name: &str) -> Result<&KernelInfo> {
        match self.kernels_named(name)?.as_slice() {
            [one] => Ok(one),
            [] => {
                let known: Vec<_> = self.kernels.iter().map(|k| k.name_expression.clone().unwrap_or(k.qualified_name.clone())).collect();
                let mut message = format!("no kernel named {name:?} in the program (it has: {})", known.join(", "));
                for n in &self.notes {
                    message.push_str(&format!("\nnote: {n}"));
                }
                Err(Error::argument(message))
            }
            many => {
                let names: Vec<_> = many.iter().map(|k| k.display_name()).collect();
                Err(Error::argument(format!("kernel name {name:?} is ambiguous: {}", names.join(", "))))
            }
        }
    }

    /// Every kernel `name` may mean, by the first rule that finds any: name expression,
    /// lowered name, qualified name, plain name. Several kernels of one qualified name are
    /// an overload set; a plain name that finds kernels of several qualified names
    /// (`a::k`, `b::k`) is an error naming them.
    pub fn kernels_named(&self, name: &str) -> Result<Vec<&KernelInfo>> {
        let by = |f: &dyn Fn(&KernelInfo) -> bool| self.kernels.iter().filter(|k| f(k)).collect::<Vec<_>>();
        let name = name.trim();
        let plain = name.strip_prefix("::").unwrap_or(name);
        // A rule that finds only unusable kernels answers with why they are; they count
        // among the namespaces a plain name may mean.
        let unusable = |f: &dyn Fn(&UnusableKernel) -> bool| self.unusable.iter().filter(|k| f(k)).collect::<Vec<_>>();
        for (found, bad) in [
            (by(&|k| k.name_expression.as_deref() == Some(name)), unusable(&|k| k.name_expression.as_deref() == Some(name))),
            (by(&|k| k.lowered_name == name), unusable(&|k| k.lowered_name == name)),
            (by(&|k| k.qualified_name == plain), unusable(&|k| k.qualified_name == plain)),
            (by(&|k| k.base_name() == name), unusable(&|k| k.base_name() == name)),
        ] {
            let mut qualified: Vec<&str> =
                found.iter().map(|k| k.qualified_name.as_str()).chain(bad.iter().map(|k| k.qualified_name.as_str())).collect();
            qualified.sort_unstable();
            qualified.dedup();
            let exact = |e: &Option<String>, l: &str| e.as_deref() == Some(name) || l == name;
            if qualified.len() > 1
                && found.iter().all(|k| !exact(&k.name_expression, &k.lowered_name))
                && bad.iter().all(|k| !exact(&k.name_expression, &k.lowered_name))
            {
                return Err(ambiguous(name, &qualified));
            }
            if !found.is_empty() {
                return Ok(found);
            }
            if let Some(k) = bad.first() {
                return Err(k.error());
            }
        }
        Ok(Vec::new())
    }
}

/// The error for a plain name that means kernels of several namespaces.
pub fn ambiguous(name: &str, qualified: &[impl AsRef<str>]) -> Error {
    let all: Vec<&str> = qualified.iter().map(AsRef::as_ref).collect();
    Error::argument(format!("kernel name `{name}` is ambiguous: {}; name one of them", all.join(", ")))
}

fn sha256_hex(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    hex::encode(h.finalize().as_slice())
}

/// The NVRTC options for `program` at `arch` (caijit's defaults first), and whether the
/// image is CUBIN. Trusted (`Some(includes)`): no include directory, no search next to the
/// including file, pre-includes by the names their headers are handed under in memory: NVRTC
/// can open no file. Untrusted (`None`): NVRTC's own search path (the program's directories,
/// its options', the toolkit's); these options are also what the key hashes.
fn nvrtc_options(
    program: &Program,
    arch: Arch,
    tk: &Toolkit,
    sorted: &options::Sorted,
    trusted: Option<&includes::Includes>,
) -> Result<(Vec<String>, bool)> {
    for o in program.options.iter().map(|o| options::nvrtc_trim(o)) {
        if o.starts_with("-arch") || o.starts_with("--gpu-architecture") {
            return Err(Error::argument(format!("option {o:?}: give the architecture as the `arch` of the compilation, not as an option")));
        }
    }
    let known = tk.supported_archs.contains(&(arch.0 as i32));
    let mut opts = Vec::new();
    if known {
        opts.push(format!("-arch=sm_{}", arch.0));
    } else {
        // PTX for the newest architecture NVRTC knows that the device can run.
        let best = tk.supported_archs.iter().copied().filter(|&a| a as u32 <= arch.0).max().ok_or_else(|| {
            Error::argument(format!("NVRTC {}.{} cannot compile for {arch} or any older architecture", tk.version.0, tk.version.1))
        })?;
        opts.push(format!("-arch=compute_{best}"));
    }
    if !sorted.rest.iter().any(|o| o.starts_with("-std") || o.starts_with("--std")) {
        opts.push("-std=c++17".into());
    }
    opts.push("-DCAIJIT=1".into());
    for (k, v) in &program.defines {
        opts.push(match v {
            Some(v) => format!("-D{k}={v}"),
            None => format!("-D{k}"),
        });
    }
    match trusted {
        Some(includes) => {
            opts.extend(sorted.rest.iter().cloned());
            if !sorted.rest.iter().any(|o| options::is_no_source_include(o)) {
                opts.push("-no-source-include".into());
            }
            for name in &includes.pre_includes {
                opts.push(format!("--pre-include={name}"));
            }
        }
        None => {
            // The search order of `includes::resolve`: the program's directories, its
            // options', the toolkit's.
            // `=` spellings: NVRTC takes what follows `=` as it is (blanks included).
            for d in program.include_dirs.iter().chain(&sorted.include_dirs) {
                opts.push(format!("--include-path={}", d.display()));
            }
            for name in &sorted.pre_includes {
                opts.push(format!("--pre-include={name}"));
            }
            opts.extend(sorted.rest.iter().cloned());
            for d in &tk.include_dirs {
                opts.push(format!("--include-path={}", d.display()));
            }
        }
    }
    Ok((opts, known))
}

/// Name expressions to add: the program's own; every non-template, non-overloaded C++
/// kernel by its qualified name, so that its lowered name is known exactly; and a probe
/// ([`signature::probe_expression`]) for every `extern "C"` kernel found and every plain
/// name the program asks for, whose lowered name encodes the kernel's parameter types.
/// Returns `(name expressions, probes)`.
fn all_name_expressions(program: &Program, decls: &[KernelDecl]) -> (Vec<String>, Vec<String>) {
    let mut exprs = program.name_expressions.clone();
    let mut probes = Vec::new();
    for d in decls {
        let name = d.qualified_name();
        let overloaded = decls.iter().filter(|o| o.qualified_name() == name && o.params.len() != d.params.len()).count() > 0
            || decls.iter().filter(|o| o.qualified_name() == name && !o.extern_c).count() > 1;
        if d.extern_c {
            let probe = signature::probe_expression(&name);
            if !probes.contains(&probe) {
                probes.push(probe);
            }
        } else if !d.is_template() && !overloaded && !exprs.contains(&name) {
            exprs.push(name);
        }
    }
    for e in &program.name_expressions {
        let known_cpp = decls.iter().any(|d| !d.extern_c && (d.qualified_name() == *e || d.name == *e));
        let probe = signature::probe_expression(e);
        if !e.contains('<') && !e.trim_start().starts_with('(') && !known_cpp && !probes.contains(&probe) {
            probes.push(probe);
        }
    }
    (exprs, probes)
}

/// The name expressions caijit added (not the program's own) that NVRTC's log says it
/// could not look up (`Input name expression was: " b :: k"`).
fn failed_expressions<'a>(log: &str, exprs: &'a [String], program: &'a Program) -> impl Iterator<Item = &'a String> {
    let compact = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
    let log = compact(log);
    exprs
        .iter()
        .filter(move |e| !program.name_expressions.contains(e) && log.contains(&format!("Inputnameexpressionwas:\"{}\"", compact(e))))
}

/// A program's cache key: everything that decides what NVRTC makes of it, `opts` (the
/// untrusted form, which names every directory and option) and the headers found.
fn cache_key(program: &Program, arch: Arch, opts: &[String], tk: &Toolkit, includes: &includes::Includes) -> String {
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
fn embedded_headers_digest() -> &'static [u8] {
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

/// The in-memory cache: each key compiled once, however many threads ask for it together.
fn memory() -> &'static OnceMap<String, Arc<Compiled>> {
    static M: OnceLock<OnceMap<String, Arc<Compiled>>> = OnceLock::new();
    M.get_or_init(OnceMap::default)
}

/// Options for one compilation call.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct CompileOptions {
    /// The disk cache to use; `None` uses [`DiskCache::from_env`].
    pub disk_cache: Option<Option<DiskCache>>,
    /// Skip the in-memory cache (benchmarks, tests).
    pub skip_memory_cache: bool,
    /// Do not look in loaded bundles (baking a bundle).
    pub skip_bundles: bool,
}

/// Compile `program` for `arch`, through the memory and disk caches.
pub fn compile(program: &Program, arch: Arch) -> Result<Arc<Compiled>> {
    compile_with(program, arch, &CompileOptions::default())
}

/// [`compile`] with explicit cache choices.
pub fn compile_with(program: &Program, arch: Arch, options: &CompileOptions) -> Result<Arc<Compiled>> {
    compile_reporting(program, arch, options).map(|(c, _)| c)
}

/// [`compile_with`], also saying where this call's result came from: [`CacheSource::Memory`]
/// for a memory hit (the `Compiled` itself records how it was first made).
///
/// A trusted compilation (the module's documentation says when) gives NVRTC every header
/// in memory and no search path; if NVRTC still asks for a header, it is compiled again
/// untrusted. An untrusted result is never stored on disk nor kept in memory.
///
/// Loaded kernel bundles ([`crate::bundle`]) are looked in first; with a bundle loaded and
/// NVRTC absent, a program no bundle holds is an [`Error::Bundle`] naming it. With
/// `CAIJIT_RECORD` (or [`record_to`]), the program is recorded in the manifest.
pub fn compile_reporting(program: &Program, arch: Arch, options: &CompileOptions) -> Result<(Arc<Compiled>, CacheSource)> {
    let found = compile_unrecorded(program, arch, options)?;
    bundled::record(program, arch, &found.0);
    Ok(found)
}

fn compile_unrecorded(program: &Program, arch: Arch, options: &CompileOptions) -> Result<(Arc<Compiled>, CacheSource)> {
    let _range = lineinfo::nvtx_range(program);
    if !options.skip_bundles {
        if let Some(hit) = bundled::lookup(program, arch, || toolkit().is_ok())? {
            return Ok((hit, CacheSource::Bundle));
        }
    }
    let tk = toolkit().map_err(|e| if options.skip_bundles { e } else { bundled::miss(program, arch, e) })?;
    let sorted = options::sort(&program.options);
    let includes = includes::resolve(program, &sorted, &tk.include_dirs)?;
    let (untrusted_opts, cubin) = nvrtc_options(program, arch, tk, &sorted, None)?;
    // The key needs only what the caller gave and the headers it can include (the kernels'
    // names follow from the source): a memory hit parses no declarations.
    let key = cache_key(program, arch, &untrusted_opts, tk, &includes);
    let job = Job { program, arch, options, tk, untrusted_opts: &untrusted_opts, cubin, key: &key, includes: &includes };
    if let Some(why) = &includes.untrusted {
        return Ok((job.untrusted(why.clone())?, CacheSource::Compiled));
    }
    let (trusted_opts, _) = nvrtc_options(program, arch, tk, &sorted, Some(&includes))?;
    if options.skip_memory_cache {
        return job.trusted(&trusted_opts);
    }
    let mut made = None;
    let mut redone = None;
    let found = memory().get_or_try_insert_with(key.clone(), || {
        let (compiled, source) = job.trusted(&trusted_opts)?;
        if compiled.untrusted.is_some() {
            // Not kept: the files NVRTC read are not all in the key.
            redone = Some(compiled);
            return Err(None);
        }
        made = Some(source);
        Ok::<_, Option<Error>>(compiled)
    });
    match (found, redone) {
        (Ok(compiled), _) => {
            if made.is_none() {
                bump(&COUNTERS.memory_cache_hits);
            }
            Ok((compiled, made.unwrap_or(CacheSource::Memory)))
        }
        (Err(None), Some(compiled)) => Ok((compiled, CacheSource::Compiled)),
        (Err(e), _) => Err(e.unwrap_or_else(|| Error::compile("caijit lost a compilation's result", ""))),
    }
}

/// One compilation the memory cache did not answer, and what it needs.
struct Job<'a> {
    program: &'a Program,
    arch: Arch,
    options: &'a CompileOptions,
    tk: &'a Toolkit,
    untrusted_opts: &'a [String],
    cubin: bool,
    key: &'a str,
    includes: &'a includes::Includes,
}

impl Job<'_> {
    /// From the disk cache, else by NVRTC with every header in memory and no search path
    /// (then stored on disk); if NVRTC asks for a header it was not handed, again untrusted.
    fn trusted(&self, trusted_opts: &[String]) -> Result<(Arc<Compiled>, CacheSource)> {
        let Declarations { kernels: decls, notes } = self.program.declarations();
        let disk = self.disk()?;
        if let Some(d) = &disk {
            match d.load(self.key) {
                Ok(Some(entry)) => {
                    bump(&COUNTERS.disk_cache_hits);
                    return self.finish(entry, &decls, notes, CacheSource::Disk, None, trusted_opts);
                }
                Ok(None) => {}
                Err(_) => bump(&COUNTERS.disk_cache_corrupt),
            }
        }
        let (exprs, probes) = all_name_expressions(self.program, &decls);
        let entry =
            match nvrtc_retrying(self.tk, self.program, trusted_opts, exprs.clone(), probes.clone(), self.cubin, &self.includes.headers) {
                Err(Error::Compile(CompileError { log, .. })) if unhanded_header(&log).is_some() => {
                    let header = unhanded_header(&log).unwrap_or_default();
                    let entry = nvrtc_retrying(self.tk, self.program, self.untrusted_opts, exprs, probes, self.cubin, &[])?;
                    bump(&COUNTERS.compiles);
                    bump(&COUNTERS.untrusted_compiles);
                    bump(&COUNTERS.trusted_fallbacks);
                    if disk.is_some() {
                        bump(&COUNTERS.disk_cache_untrusted_keys);
                    }
                    let why = format!("NVRTC asked for the header {header:?}, which caijit's search did not find");
                    warn_once(
                        &header,
                        &format!(
                            "caijit: warning: compiling {} from the file system: {why} (NVRTC found it on its own search path); \
                     the result is not cached",
                            self.program.name
                        ),
                    );
                    return self.finish(entry, &decls, notes, CacheSource::Compiled, Some(why), self.untrusted_opts);
                }
                r => r?,
            };
        bump(&COUNTERS.compiles);
        if let Some(d) = &disk {
            if d.store(self.key, &entry).is_err() {
                bump(&COUNTERS.disk_cache_errors);
            }
        }
        self.finish(entry, &decls, notes, CacheSource::Compiled, None, trusted_opts)
    }

    /// By NVRTC with its own search path, for a program whose headers caijit cannot all
    /// name (`why`): neither stored on disk nor kept in memory.
    fn untrusted(&self, why: String) -> Result<Arc<Compiled>> {
        if self.disk()?.is_some() {
            bump(&COUNTERS.disk_cache_untrusted_keys);
        }
        let Declarations { kernels: decls, notes } = self.program.declarations();
        let (exprs, probes) = all_name_expressions(self.program, &decls);
        let entry = nvrtc_retrying(self.tk, self.program, self.untrusted_opts, exprs, probes, self.cubin, &[])?;
        bump(&COUNTERS.compiles);
        bump(&COUNTERS.untrusted_compiles);
        Ok(self.finish(entry, &decls, notes, CacheSource::Compiled, Some(why), self.untrusted_opts)?.0)
    }

    /// The disk cache to use. One given explicitly is held to the same trust as the
    /// environment's (silently).
    fn disk(&self) -> Result<Option<DiskCache>> {
        Ok(match self.options.disk_cache.clone() {
            Some(given) => given.filter(|c| c.trusted().is_ok()),
            None => DiskCache::from_env_trusted()?,
        })
    }

    fn finish(
        &self,
        entry: cache::Entry,
        decls: &[KernelDecl],
        notes: Vec<String>,
        source: CacheSource,
        untrusted: Option<String>,
        nvrtc_options: &[String],
    ) -> Result<(Arc<Compiled>, CacheSource)> {
        let Described { kernels, unusable, notes } = describe_kernels(&entry, decls, notes);
        // An untrusted key does not cover every file NVRTC read: the result's own key also
        // hashes the binary, so that what is cached by key downstream (a context's loaded
        // modules) never mistakes another binary for this one.
        let key = match &untrusted {
            None => self.key.to_string(),
            Some(_) => sha256_hex(&[self.key.as_bytes(), b"untrusted", entry.image.bytes()]),
        };
        let compiled = Compiled {
            key,
            arch: self.arch,
            image: entry.image,
            ptx: entry.ptx,
            log: entry.log,
            kernels,
            unusable,
            notes,
            source,
            untrusted,
            nvrtc_options: nvrtc_options.to_vec(),
        };
        Ok((Arc::new(compiled), source))
    }
}

/// The header NVRTC's log says it could not open (`could not open source file "x.h"`).
fn unhanded_header(log: &str) -> Option<String> {
    ["could not open source file \"", "cannot open source file \""].iter().find_map(|m| {
        let start = log.find(m)? + m.len();
        log[start..].find('"').map(|end| log[start..start + end].to_string())
    })
}

/// Print `message` once per process per `header`.
fn warn_once(header: &str, message: &str) {
    static WARNED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut warned = crate::sync::lock(&WARNED);
    if !warned.iter().any(|h| h == header) {
        warned.push(header.to_string());
        eprintln!("{message}");
    }
}

/// Compile with NVRTC. A probe, or a name expression caijit added, that does not compile
/// (a kernel the tokenizer found in a branch the preprocessor removed) must not cost the
/// program: compile again without the probes NVRTC's log names (without all of them if it
/// names none), and without the added expressions it names.
fn nvrtc_retrying(
    tk: &Toolkit,
    program: &Program,
    opts: &[String],
    mut exprs: Vec<String>,
    mut probes: Vec<String>,
    cubin: bool,
    found: &[(String, Arc<str>)],
) -> Result<cache::Entry> {
    loop {
        match run_nvrtc(tk, program, opts, &exprs, &probes, cubin, found) {
            Err(Error::Compile(CompileError { log, .. })) if !probes.is_empty() && log.contains(signature::PROBE_TEMPLATE) => {
                let before = probes.len();
                probes.retain(|p| !log.contains(p.as_str()));
                if probes.len() == before {
                    probes.clear();
                }
            }
            Err(Error::Compile(CompileError { log, .. })) if failed_expressions(&log, &exprs, program).next().is_some() => {
                let failed: Vec<String> = failed_expressions(&log, &exprs, program).cloned().collect();
                exprs.retain(|e| !failed.contains(e));
            }
            r => return r,
        }
    }
}

/// Compile with NVRTC, handing it caijit's embedded headers and `found` (the program's
/// headers, read and hashed by [`includes::resolve`]) in memory.
fn run_nvrtc(
    tk: &Toolkit,
    program: &Program,
    opts: &[String],
    exprs: &[String],
    probes: &[String],
    want_cubin: bool,
    found: &[(String, Arc<str>)],
) -> Result<cache::Entry> {
    let nvrtc = tk.nvrtc;
    let embedded = HEADERS.iter().map(|(n, c)| (n.to_string(), c.to_string()));
    let headers: Vec<(String, String)> = embedded.chain(found.iter().map(|(n, c)| (n.clone(), c.to_string()))).collect();
    let internal = |e: NvrtcError| {
        Error::Compile(CompileError { message: format!("NVRTC failed on {}: {e}", program.name), log: String::new(), nvrtc: Some(e) })
    };
    let source = if probes.is_empty() { program.source.clone() } else { format!("{}{}", program.source, signature::PROBE_SOURCE) };
    let mut prog = nvrtc.create_program(&source, &program.name, &headers).map_err(internal)?;
    for e in exprs.iter().chain(probes) {
        prog.add_name_expression(e).map_err(internal)?;
    }
    let ok = match prog.compile(opts) {
        Ok(ok) => ok,
        Err(e) if e.name.contains("INVALID_OPTION") => return Err(rejected_options(tk, program, &opts[0])),
        Err(e) => return Err(internal(e)),
    };
    let log = prog.log().map_err(internal)?;
    if !ok {
        return Err(Error::compile(format!("NVRTC could not compile {}:", program.name), log));
    }
    let ptx = prog.ptx().map_err(internal)?;
    let image = if want_cubin {
        Image::Cubin(
            prog.cubin().map_err(internal)?.ok_or_else(|| Error::compile(format!("NVRTC produced no CUBIN for {}", program.name), ""))?,
        )
    } else {
        Image::Ptx(ptx.clone())
    };
    let mut lowered = Vec::new();
    for e in exprs.iter().chain(probes) {
        lowered.push((e.clone(), prog.lowered_name(e).map_err(internal)?));
    }
    Ok(cache::Entry { image, ptx, log, lowered })
}

/// The error for options NVRTC refused: each of the program's own options is tried alone
/// (with the architecture) on an empty program, so the message names the ones at fault.
fn rejected_options(tk: &Toolkit, program: &Program, arch_option: &str) -> Error {
    let refused = |o: &String| {
        let Ok(mut p) = tk.nvrtc.create_program("", "option-check.cu", &[]) else { return false };
        p.compile(&[arch_option.to_string(), o.clone()]).is_err()
    };
    let bad: Vec<&String> = program.options.iter().filter(|o| refused(o)).collect();
    let message = match bad.as_slice() {
        [] => format!("NVRTC refused the options of {} (NVRTC_ERROR_INVALID_OPTION): {:?}", program.name, program.options),
        bad => format!(
            "NVRTC does not accept the option{} {} (compiling {})",
            if bad.len() > 1 { "s" } else { "" },
            bad.iter().map(|o| format!("{o:?}")).collect::<Vec<_>>().join(", "),
            program.name
        ),
    };
    Error::compile(message, "")
}

/// Every kernel of the PTX with its parameters: types from the compiler (demangled lowered
/// names, probes for `extern "C"` kernels), layouts from the PTX, names from the source.
/// A kernel whose types caijit has no way to learn is left out, with a note; one whose
/// types it cannot read or lay out is unusable, with the reason: no other kernel suffers.
fn describe_kernels(entry: &cache::Entry, decls: &[KernelDecl], mut notes: Vec<String>) -> Described {
    let entries = signature::ptx_entries_each(&entry.ptx);
    let probe_prefix = format!("{}<", signature::PROBE_TEMPLATE);
    // `extern "C"` kernel name → its parameter types, from its probe.
    let mut probed: HashMap<String, std::result::Result<Vec<signature::ParamType>, signature::SignatureError>> = HashMap::new();
    let mut probe_symbols = Vec::new();
    for (expr, lowered) in &entry.lowered {
        let Some(target) = expr.strip_prefix(&probe_prefix) else { continue };
        probe_symbols.push(lowered.as_str());
        let target = target.trim_end_matches('>').trim_start_matches("decltype(").trim_end_matches(')').trim_start_matches('&');
        let name = target.rsplit("::").next().unwrap_or(target).to_string();
        // An error names the kernel, not its probe.
        match signature::probe_types(lowered) {
            Ok(Some(types)) => {
                probed.insert(name, Ok(types));
            }
            Ok(None) => {}
            Err(e) => {
                let e = e.for_kernel(&name, &agreed_names(decls, target, None));
                probed.insert(name, Err(e));
            }
        }
    }
    let mut kernels = Vec::with_capacity(entries.len());
    let mut unusable = Vec::new();
    for (lowered, ptx_params) in entries {
        if probe_symbols.contains(&lowered.as_str()) || lowered.starts_with("_Z13caijit_probe_") {
            continue;
        }
        let name_expression = entry.lowered.iter().find(|(e, l)| *l == lowered && !e.starts_with(&probe_prefix)).map(|(e, _)| e.clone());
        let demangled = signature::demangled(&lowered);
        // The kernel's name: from its demangled name, else read off its mangled name.
        let shown = match &demangled {
            Some(t) => qualified_name_of(t),
            None => signature::mangled_qualified_name(&lowered).unwrap_or_else(|| lowered.clone()),
        };
        // An error names the kernel (its qualified name), not its lowered name.
        let named = |e: signature::SignatureError| e.for_kernel(&shown, &agreed_names(decls, &shown, None));
        let types = match signature::types_from_lowered(&lowered) {
            Ok(Some((_, types))) => Ok(types),
            Err(e) => Err(named(e)),
            Ok(None) => match probed.get(&lowered) {
                Some(types) => types.clone(),
                None => {
                    notes.push(format!(
                        "`extern \"C\"` kernel `{lowered}` is left out: caijit found no declaration of it to ask the compiler about \
                         (is it made by a macro?); name it (caijit.kernel(source, \"{lowered}\")) to launch it"
                    ));
                    continue;
                }
            },
        };
        let params = types.and_then(|types| {
            let names = agreed_names(decls, &shown, Some(&types));
            signature::layout_compiled(&shown, &types, &names, &ptx_params.map_err(named)?)
        });
        match params {
            Ok(params) => kernels.push(KernelInfo { name_expression, lowered_name: lowered, demangled, qualified_name: shown, params }),
            Err(reason) => {
                let k = UnusableKernel { name_expression, lowered_name: lowered, demangled, qualified_name: shown, reason };
                notes.push(k.error().to_string());
                unusable.push(k);
            }
        }
    }
    Described { kernels, unusable, notes }
}

/// What [`describe_kernels`] found.
struct Described {
    kernels: Vec<KernelInfo>,
    unusable: Vec<UnusableKernel>,
    notes: Vec<String>,
}

/// Parameter names from the declarations of `qualified` (of the compiled `types`' arity,
/// when given), where they agree: a position any two name differently is unnamed. A
/// declaration whose types the tokenizer read exactly (builtin scalars, pointers and
/// arrays of them) and that differ from the compiled ones is another `#if` branch's, and
/// has no say.
fn agreed_names(decls: &[KernelDecl], qualified: &str, types: Option<&[signature::ParamType]>) -> Vec<Option<String>> {
    use signature::{CType, ParamType, Rank};
    let exact = |t: &ParamType| match t {
        ParamType::Pointer { elem, .. } | ParamType::Value(elem) => matches!(elem, CType::Scalar(_)),
        ParamType::Array { elem, rank, .. } => matches!(elem, CType::Scalar(_)) && matches!(rank, Rank::Fixed(_)),
    };
    let arity = types.map(<[_]>::len);
    let other_branch =
        |d: &KernelDecl| types.is_some_and(|ts| d.params.iter().all(|(_, t)| exact(t)) && !d.params.iter().map(|(_, t)| t).eq(ts.iter()));
    let mut candidates =
        decls.iter().filter(|d| d.qualified_name() == qualified && arity.is_none_or(|n| d.params.len() == n) && !other_branch(d));
    let Some(first) = candidates.next() else { return vec![None; arity.unwrap_or(0)] };
    let mut names: Vec<Option<String>> = first.params.iter().map(|(n, _)| n.clone()).collect();
    for d in candidates {
        if d.params.len() != names.len() {
            return vec![None; arity.unwrap_or(0)];
        }
        for (mine, (theirs, _)) in names.iter_mut().zip(&d.params) {
            if mine != theirs {
                *mine = None;
            }
        }
    }
    names
}

/// `void ns::axpy<float>(float, ...)` → `ns::axpy`.
fn qualified_name_of(demangled: &str) -> String {
    let demangled = demangled.replace("(anonymous namespace)::", "");
    let head = demangled.split('(').next().unwrap_or(&demangled);
    let mut depth = 0i32;
    let mut no_templates = String::new();
    for c in head.chars() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            _ if depth == 0 => no_templates.push(c),
            _ => {}
        }
    }
    no_templates.split_whitespace().last().unwrap_or("").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_parsing() {
        assert_eq!(Arch::parse("sm_90").unwrap(), Arch(90));
        assert!(Arch::parse("sm_90a").unwrap_err().to_string().contains("give sm_90"));
        assert_eq!(Arch::parse("80").unwrap(), Arch(80));
        assert!(Arch::parse("sm_x").is_err());
        assert_eq!(Arch::from_capability(9, 0).to_string(), "sm_90");
    }

    #[test]
    fn base_names() {
        assert_eq!(qualified_name_of("void axpy<float>(float, float const*)"), "axpy");
        assert_eq!(qualified_name_of("void ns::inner::k<caijit::Array<float, 2> >(int)"), "ns::inner::k");
        assert_eq!(qualified_name_of("void (anonymous namespace)::k(int)"), "k");
        assert_eq!(qualified_name_of("void plain(int)"), "plain");
    }

    /// A build without the `nvrtc` feature refuses to compile, naming the instance and the
    /// way out (a bundle, or the feature), and looks for no NVRTC.
    #[cfg(not(feature = "nvrtc"))]
    #[test]
    fn a_build_without_nvrtc_refuses_to_compile_naming_the_instance() {
        let program = Program::new("template <typename T> __global__ void k(T* x) {}").name("refused.cu").name_expression("k<float>");
        let Err(Error::Bundle(message)) = compile(&program, Arch(90)) else { panic!("compiled without NVRTC") };
        for part in [
            "this build of cai-runtime has no NVRTC (the `nvrtc` feature is off)",
            "refused.cu (k<float>) for sm_90",
            "Bundle::from_bytes",
            "or enable the feature",
        ] {
            assert!(message.contains(part), "{part:?} is not in: {message}");
        }
        let Err(Error::CudaNotAvailable(why)) = toolkit() else { panic!("a toolkit without NVRTC") };
        assert!(why.contains("the `nvrtc` feature is off"), "{why}");
        let e = bake::bake(&[program], &bake::BakeOptions::new(vec![Arch(90)])).unwrap_err().to_string();
        assert!(e.contains("the `nvrtc` feature is off"), "{e}");
        assert!(!std::fs::read_to_string("/proc/self/maps").unwrap().contains("libnvrtc"), "NVRTC was loaded");
    }
}
