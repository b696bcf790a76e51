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
//! every call. A header that is not a regular file (a FIFO, a device) is an error naming
//! it, before NVRTC runs; a directory of a header's name is passed over, as NVRTC does.

pub mod bake;
mod bundled;
mod cache;
mod compiled;
mod describe;
mod headers;
mod includes;
mod key;
mod lineinfo;
mod options;
mod program;
mod record;
mod toolkit;
pub use lineinfo::LINEINFO;

use std::path::Path;
use std::sync::{Arc, OnceLock};

pub use bundled::{bundle_key, family_key, verify as verify_bundle};
pub use cache::{CacheStatus, DiskCache};
pub use compiled::{ambiguous, CacheSource, Compiled, Image, KernelInfo, UnusableKernel};
use describe::{describe_kernels, Described};
pub use headers::{HEADERS, OPS};
use key::{cache_key, sha256_hex};
pub use program::{Arch, Program};
pub use record::{manifest_entry, read_manifest, record_to, record_tuning, recording, Manifest};
pub use toolkit::{add_site_dirs, toolkit, Toolkit};

use crate::error::CompileError;
use crate::error::{Error, Result};
use crate::signature::{self, KernelDecl};
use crate::stats::{bump, COUNTERS};
use crate::sync::OnceMap;
use crate::sys::NvrtcError;

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
        if ["-arch", "--arch", "--gpu-architecture", "-gpu-architecture"].iter().any(|a| o.starts_with(a)) {
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

/// A compilation that failed only in its name expressions (NVRTC compiles each in a
/// `__nv_name_map` pseudo-file of its own, and reports it in those terms), in caijit's words:
/// which expressions, and what the compiler found wrong in them (`identifier "flaot" is
/// undefined`). `None` when the program itself has errors.
fn name_expression_error(program: &Program, exprs: &[String], log: &str) -> Option<Error> {
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(": error: ")).collect();
    if errors.is_empty() || !errors.iter().all(|l| l.starts_with("__nv_name_map(")) {
        return None;
    }
    let compact = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
    let compact_log = compact(log);
    let failed: Vec<String> = exprs
        .iter()
        .filter(|e| compact_log.contains(&format!("Inputnameexpressionwas:\"{}\"", compact(e))))
        .map(|e| format!("\"{e}\""))
        .collect();
    let reasons: Vec<&str> = errors
        .iter()
        .filter_map(|l| l.split_once(": error: ").map(|(_, m)| m.trim()))
        .filter(|m| !m.starts_with("Error in parsing name expression"))
        .collect();
    let what = match failed.as_slice() {
        [] => return None,
        [one] => format!("the kernel name {one} is"),
        many => format!("the kernel names {} are", many.join(", ")),
    };
    let why = if reasons.is_empty() { String::new() } else { format!(": {}", reasons.join("; ")) };
    Some(Error::compile(
        format!("{what} not valid in {}{why} (a template argument must name a type or value the program declares)", program.name),
        "",
    ))
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
    compile_recorded(program, arch, options, false).map(|(compiled, source, _)| (compiled, source))
}

/// [`compile_reporting`], also giving the program's bundle keys when `want_keys` (see
/// [`compile_keyed`]).
pub(crate) fn compile_recorded(
    program: &Program,
    arch: Arch,
    options: &CompileOptions,
    want_keys: bool,
) -> Result<(Arc<Compiled>, CacheSource, Option<bundled::Keys>)> {
    let recording = record::recording().is_some();
    let (compiled, source, keys) = compile_keyed(program, arch, options, want_keys || recording)?;
    if let Some(keys) = keys.as_ref().filter(|_| recording) {
        record::record(program, arch, &compiled, keys);
    }
    Ok((compiled, source, keys))
}

/// [`compile_reporting`] without recording, also giving the program's bundle keys where a
/// bundle was searched or `want_keys`: computed from the headers this compilation read, the
/// bytes NVRTC was handed (or the bundle's program was found by), never read a second time.
pub(crate) fn compile_keyed(
    program: &Program,
    arch: Arch,
    options: &CompileOptions,
    want_keys: bool,
) -> Result<(Arc<Compiled>, CacheSource, Option<bundled::Keys>)> {
    let probe = crate::stats::timing::start();
    let found = compile_unrecorded(program, arch, options, want_keys);
    probe.stop(crate::stats::timing::LoadPhase::Compile);
    found
}

fn compile_unrecorded(
    program: &Program,
    arch: Arch,
    options: &CompileOptions,
    want_keys: bool,
) -> Result<(Arc<Compiled>, CacheSource, Option<bundled::Keys>)> {
    let _range = lineinfo::nvtx_range(program);
    let sorted = options::sort(&program.options);
    let bundles = if options.skip_bundles { Vec::new() } else { crate::bundle::loaded()? };
    let timed_keys = |found: &includes::Includes| {
        let probe = crate::stats::timing::start();
        let keys = bundled::keys(program, found);
        probe.stop(crate::stats::timing::LoadPhase::BundleKey);
        keys
    };
    // Until NVRTC is loaded, bundles are searched with the headers read without the
    // toolkit's (a bundle hit must not load NVRTC); the key is the same but where the
    // program's directories shadow a toolkit header's include (then the second search below).
    let mut searched = None;
    if !bundles.is_empty() && !toolkit::loaded() {
        let keys = timed_keys(&includes::resolve(program, &sorted, &[])?);
        if let Some(hit) = bundled::lookup(&bundles, program, &keys, arch, || toolkit().is_ok())? {
            return Ok((hit, CacheSource::Bundle, Some(keys)));
        }
        searched = Some(keys);
    }
    let tk = toolkit().map_err(|e| if options.skip_bundles { e } else { bundled::miss(program, arch, e) })?;
    // One read of every header: what the keys hash is what NVRTC is handed.
    let includes = includes::resolve(program, &sorted, &tk.include_dirs)?;
    let keys = std::cell::OnceCell::new();
    let keys_now = || keys.get_or_init(|| timed_keys(&includes));
    // The loaded bundles, asked (once NVRTC is loaded) only when the memory cache has not
    // the program: a memory hit costs what it costs without bundles.
    let from_bundles = || match keys_now() {
        k if bundles.is_empty() || searched.as_ref() == Some(k) => Ok(None),
        k => bundled::lookup(&bundles, program, k, arch, || true),
    };
    let (untrusted_opts, cubin) = nvrtc_options(program, arch, tk, &sorted, None)?;
    // The key needs only what the caller gave and the headers it can include (the kernels'
    // names follow from the source): a memory hit parses no declarations.
    let key = cache_key(program, arch, &untrusted_opts, tk, &includes);
    let job = Job { program, arch, options, tk, untrusted_opts: &untrusted_opts, cubin, key: &key, includes: &includes };
    let with_keys = |(compiled, source): (Arc<Compiled>, CacheSource)| (compiled, source, want_keys.then(|| keys_now().clone()));
    if let Some(why) = &includes.untrusted {
        // (No bundle holds it: a bundled program is one caijit could name every header of.)
        return Ok(with_keys((job.untrusted(why.clone())?, CacheSource::Compiled)));
    }
    let (trusted_opts, _) = nvrtc_options(program, arch, tk, &sorted, Some(&includes))?;
    if options.skip_memory_cache {
        if let Some(hit) = from_bundles()? {
            return Ok(with_keys((hit, CacheSource::Bundle)));
        }
        return job.trusted(&trusted_opts).map(with_keys);
    }
    let mut made = None;
    let mut redone = None;
    let found = memory().get_or_try_insert_with(key.clone(), || {
        // A bundled program is kept as a compiled one is: the binary of these very bytes.
        if let Some(hit) = from_bundles()? {
            made = Some(CacheSource::Bundle);
            return Ok(hit);
        }
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
            Ok(with_keys((compiled, made.unwrap_or(CacheSource::Memory))))
        }
        (Err(None), Some(compiled)) => Ok(with_keys((compiled, CacheSource::Compiled))),
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
        let declared = self.program.declarations();
        let (decls, notes) = (&declared.kernels, declared.notes.clone());
        let disk = self.disk()?;
        if let Some(d) = &disk {
            match d.load(self.key) {
                Ok(Some(entry)) => {
                    bump(&COUNTERS.disk_cache_hits);
                    return self.finish(entry, decls, notes, CacheSource::Disk, None, trusted_opts);
                }
                Ok(None) => {}
                Err(_) => bump(&COUNTERS.disk_cache_corrupt),
            }
        }
        let (exprs, probes) = all_name_expressions(self.program, decls);
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
                    return self.finish(entry, decls, notes, CacheSource::Compiled, Some(why), self.untrusted_opts);
                }
                r => r?,
            };
        bump(&COUNTERS.compiles);
        if let Some(d) = &disk {
            if d.store(self.key, &entry).is_err() {
                bump(&COUNTERS.disk_cache_errors);
            }
        }
        self.finish(entry, decls, notes, CacheSource::Compiled, None, trusted_opts)
    }

    /// By NVRTC with its own search path, for a program whose headers caijit cannot all
    /// name (`why`): neither stored on disk nor kept in memory.
    fn untrusted(&self, why: String) -> Result<Arc<Compiled>> {
        if self.disk()?.is_some() {
            bump(&COUNTERS.disk_cache_untrusted_keys);
        }
        let declared = self.program.declarations();
        let (decls, notes) = (&declared.kernels, declared.notes.clone());
        let (exprs, probes) = all_name_expressions(self.program, decls);
        let entry = nvrtc_retrying(self.tk, self.program, self.untrusted_opts, exprs, probes, self.cubin, &[])?;
        bump(&COUNTERS.compiles);
        bump(&COUNTERS.untrusted_compiles);
        Ok(self.finish(entry, decls, notes, CacheSource::Compiled, Some(why), self.untrusted_opts)?.0)
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
        let Described { kernels, unusable, notes } = describe_kernels(&entry.ptx, &entry.lowered, decls, notes);
        let aliases = compiled::aliases(&entry.lowered, &kernels, &unusable);
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
            aliases,
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
            // (Named in caijit's words after the retries, which read NVRTC's log.)
            Err(e) => {
                let named = match &e {
                    Error::Compile(c) => name_expression_error(program, &exprs, &c.log),
                    _ => None,
                };
                return Err(named.unwrap_or(e));
            }
            ok => return ok,
        }
    }
}

/// The name NVRTC is given for `program`. Where NVRTC searches the including file's
/// directory (without `-no-source-include`: an untrusted compilation), it takes the
/// program's from its name: a program read from a file is named by its path there, so that
/// NVRTC finds its headers where caijit's scan does (its file's directory), not in the
/// current directory.
fn nvrtc_name<'a>(program: &'a Program, opts: &[String]) -> std::borrow::Cow<'a, str> {
    let searches_own_dir = !opts.iter().any(|o| options::is_no_source_include(o));
    match &program.source_dir {
        Some(dir) if searches_own_dir && Path::new(&program.name).is_relative() => {
            dir.join(&program.name).to_string_lossy().into_owned().into()
        }
        _ => program.name.as_str().into(),
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
    let mut prog = nvrtc.create_program(&source, &nvrtc_name(program, opts), &headers).map_err(internal)?;
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

#[cfg(all(test, not(feature = "nvrtc")))]
mod tests;

#[cfg(all(test, feature = "nvrtc"))]
mod nvrtc_tests;
