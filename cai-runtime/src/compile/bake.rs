//! Baking kernel bundles: every program compiled by NVRTC for every architecture asked
//! for, in parallel, and written as one bundle ([`crate::bundle`]).
//!
//! Programs of one family (the same but for their name expressions: the instances of one
//! source's templates) are merged into programs of up to [`MERGED_EXPRESSIONS`] name
//! expressions ([`BakeOptions::merge`]), so that a source is compiled a few times per
//! architecture, not once per instance, while the module a first launch loads stays small.
//! Each (program, architecture) is compiled trusted (every header in memory, no search
//! path) through a private disk cache, whose entry gives the CUBIN, the PTX and the lowered
//! name of every name expression; a program caijit cannot compile trusted cannot be
//! bundled (its key would not cover what NVRTC read) and is an error naming it. The PTX of
//! the newest architecture is stored too unless [`BakeOptions::ptx`] is off; the `.entry`
//! declarations and every kernel's parameter layout (as the compilation described them)
//! always are.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde_json::json;

use super::compiled::{Compiled, Image};
use super::key::sha256_hex;
use super::program::{Arch, Program};
use super::{bundled, compile_keyed, record, toolkit, CompileOptions, DiskCache};
use crate::bundle::{self, ProgramBlobs, ShippedTuning};
use crate::error::{Error, Result};
use crate::sync::lock;

/// How to bake a bundle.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct BakeOptions {
    /// Real architectures to compile CUBINs for.
    pub archs: Vec<Arch>,
    /// Also store PTX of the newest architecture (the driver JIT-compiles it on newer devices).
    pub ptx: bool,
    /// Compilations run at once.
    pub jobs: usize,
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// At most this many name expressions in a merged program (default
    /// [`MERGED_EXPRESSIONS`]; 1: each program as given; 0 is taken as 1).
    pub merge: usize,
    /// Autotuning results to ship beside the programs they were tuned on (a manifest
    /// records them); one whose program is not baked is left out, with a warning.
    pub tunings: Vec<ShippedTuning>,
}

impl BakeOptions {
    pub fn new(archs: Vec<Arch>) -> BakeOptions {
        let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
        BakeOptions { archs, ptx: true, jobs, progress: false, merge: MERGED_EXPRESSIONS, tunings: Vec::new() }
    }
    pub fn ptx(mut self, ptx: bool) -> Self {
        self.ptx = ptx;
        self
    }
    pub fn jobs(mut self, jobs: usize) -> Self {
        self.jobs = jobs.max(1);
        self
    }
    pub fn progress(mut self, progress: bool) -> Self {
        self.progress = progress;
        self
    }
    /// Merge the programs of one family into programs of up to `merge` name expressions
    /// (0 is taken as 1): fewer compilations and a smaller bundle against larger modules, which a
    /// first launch loads whole.
    pub fn merge(mut self, merge: usize) -> Self {
        self.merge = merge;
        self
    }
    /// Ship these tuning results (see [`BakeOptions::tunings`]).
    pub fn tunings(mut self, tunings: Vec<ShippedTuning>) -> Self {
        self.tunings = tunings;
        self
    }
}

/// One compilation's result: the compiled program, its cache entry, and its bundle and
/// family keys.
type Made = (std::sync::Arc<Compiled>, super::cache::Entry, (String, String));

/// Compile every program for every architecture of `options` and write the bundle.
pub fn bake(programs: &[Program], options: &BakeOptions) -> Result<Vec<u8>> {
    let tk = toolkit()?;
    let mut archs = options.archs.clone();
    archs.sort_unstable();
    archs.dedup();
    let Some(&newest) = archs.last() else { return Err(Error::argument("no architecture to bake for (give --arch sm_90, say)")) };
    for a in &archs {
        if !tk.supported_archs.contains(&(a.0 as i32)) {
            return Err(Error::argument(format!(
                "NVRTC {}.{} cannot compile CUBIN for {a} (it knows: {})",
                tk.version.0,
                tk.version.1,
                tk.supported_archs.iter().map(|a| format!("sm_{a}")).collect::<Vec<_>>().join(", ")
            )));
        }
    }
    if programs.is_empty() {
        return Err(Error::argument("no program to bake (the manifest is empty and no file was given)"));
    }
    let programs = merged(programs, options.merge.max(1))?;
    let programs = programs.as_slice();
    let dir = tempfile::Builder::new()
        .prefix("caijit-bake-")
        .tempdir()
        .map_err(|e| Error::argument(format!("cannot make a temporary directory: {e}")))?;
    let disk = DiskCache::at(dir.path().join("cache"));
    let jobs: Vec<(usize, Arch)> = (0..programs.len()).flat_map(|p| archs.iter().map(move |&a| (p, a))).collect();
    let results: Mutex<Vec<Option<Result<Made>>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    let (next, done) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let one = |program: &Program, arch: Arch| -> Result<Made> {
        let opts = CompileOptions { disk_cache: Some(Some(disk.clone())), skip_memory_cache: true, skip_bundles: true };
        // The keys hash the headers this compilation read (what NVRTC was handed), not a
        // later read: a header saved during the bake cannot give old code a new key.
        let (c, _, keys) = compile_keyed(program, arch, &opts, true)?;
        let keys = keys.ok_or_else(|| Error::argument("a compilation gave no bundle key"))?;
        let keys = keys.map_err(|why| Error::argument(format!("{} cannot be bundled: {why}", program.name)))?;
        if let Some(why) = &c.untrusted {
            return Err(Error::argument(format!("{} cannot be bundled: {why}", program.name)));
        }
        if !matches!(c.image, Image::Cubin(_)) {
            return Err(Error::argument(format!("NVRTC made no CUBIN of {} for {arch}", program.name)));
        }
        match disk.load(&c.key) {
            Ok(Some(entry)) => Ok((c, entry, keys)),
            Ok(None) => Err(Error::argument(format!(
                "the compilation of {} for {arch} was not stored (is the temporary directory writable?)",
                program.name
            ))),
            Err(e) => Err(Error::argument(e)),
        }
    };
    std::thread::scope(|s| {
        for _ in 0..options.jobs.clamp(1, jobs.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(p, arch)) = jobs.get(i) else { break };
                let r = one(&programs[p], arch);
                lock(&results)[i] = Some(r);
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if options.progress {
                    progress(n, jobs.len(), &programs[p].name, arch);
                }
            });
        }
    });
    if options.progress {
        eprintln!();
    }
    let mut results = results.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner).into_iter();
    let mut blobs = Vec::new();
    for program in programs {
        let mut cubins = Vec::new();
        let mut last: Option<Made> = None;
        for &arch in &archs {
            let made = results.next().flatten().unwrap_or_else(|| Err(Error::argument("a compilation did not finish")))?;
            if let Image::Cubin(b) = &made.1.image {
                cubins.push((arch.0, b.clone()));
            }
            // Every architecture's compilation read the same headers, or the bundle would
            // hold code of two versions of them under one key.
            if last.as_ref().is_some_and(|l| l.2 != made.2) {
                return Err(Error::argument(format!(
                    "the headers of {} changed while the bundle was being built: build it again",
                    program.name
                )));
            }
            last = Some(made);
        }
        let Some((c, entry, (key, family))) = last else { continue };
        let description = json!({
            "key": key,
            "family": family,
            "name": program.name,
            "source_sha256": sha256_hex(&[program.source.as_bytes()]),
            "options": program.options,
            "defines": program.defines,
            "name_expressions": program.name_expressions,
            "nvrtc_options": c.nvrtc_options,
            "lowered": entry.lowered,
            "kernels": record::kernels_json(&c),
            "layouts": bundled::layouts_json(&c),
        });
        blobs.push(ProgramBlobs {
            description,
            entries: bundle::entry_declarations(&entry.ptx),
            cubins,
            ptx: options.ptx.then(|| (newest.0, entry.ptx.clone())),
        });
    }
    let archs: Vec<u32> = archs.iter().map(|a| a.0).collect();
    let tunings = shipped_tunings(&options.tunings, &blobs);
    Ok(bundle::write(&format!("{}.{}", tk.version.0, tk.version.1), &tk.build, &archs, blobs, &tunings))
}

/// The tunings of `tunings` whose program is among `blobs` (each key once, the first given);
/// the others are left out with a warning: their winners' code is not in the bundle.
fn shipped_tunings(tunings: &[ShippedTuning], blobs: &[ProgramBlobs]) -> Vec<ShippedTuning> {
    let families: std::collections::HashSet<&str> = blobs.iter().filter_map(|b| b.description["family"].as_str()).collect();
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for t in tunings {
        if !families.contains(t.family.as_str()) {
            eprintln!(
                "caijit: warning: not shipping the tuning of kernel {} for key {:?}: its program is not in the bundle (record the run that launches it)",
                t.kernel, t.tuning_key
            );
        } else if seen.insert(t.key.as_str()) {
            out.push(t.clone());
        }
    }
    out
}

/// By default, at most this many name expressions in a merged program (a program given
/// with more stays whole). A module's load time, and the reading of its kernels' parameter layouts
/// when it is first used, grow with its kernels: the kernel library's elementwise file
/// merged whole (331 instances) cost some 75 ms at its first launch, 16 to a program
/// 4.3-5.5 ms on the H200 (a 568 KB CUBIN to inflate and load), 4 to a program 2.6-3.9 ms
/// (70 KB), for a bundle a quarter larger (`python/benchmarks/bench_first_call.py`
/// measures a first op from the bundle).
pub const MERGED_EXPRESSIONS: usize = 4;

/// Programs of one family merged (every name expression of each, in the order first seen,
/// a program's own kept together) into programs of up to `limit` name expressions, in the
/// order each is first seen.
fn merged(programs: &[Program], limit: usize) -> Result<Vec<Program>> {
    let mut out: Vec<(String, Program)> = Vec::new();
    for p in programs {
        let family = match bundled::family_key(p)? {
            Ok(f) => f,
            Err(why) => return Err(Error::argument(format!("{} cannot be bundled: {why}", p.name))),
        };
        let same = |(f, m): &(String, Program)| *f == family && p.name_expressions.iter().all(|e| m.name_expressions.contains(e));
        if out.iter().any(same) {
            continue;
        }
        let new = |m: &Program| p.name_expressions.iter().filter(|e| !m.name_expressions.contains(e)).count();
        match out.iter_mut().rev().find(|(f, m)| *f == family && m.name_expressions.len() + new(m) <= limit) {
            Some((_, m)) => {
                for e in &p.name_expressions {
                    if !m.name_expressions.contains(e) {
                        m.name_expressions.push(e.clone());
                    }
                }
            }
            None => out.push((family, p.clone())),
        }
    }
    Ok(out.into_iter().map(|(_, p)| p).collect())
}

fn progress(done: usize, total: usize, name: &str, arch: Arch) {
    const WIDTH: usize = 30;
    let filled = done * WIDTH / total.max(1);
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\rcaijit bundle [{}{}] {done}/{total} {name} {arch}\x1b[K", "#".repeat(filled), ".".repeat(WIDTH - filled));
    let _ = err.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_is_merged_into_programs_of_a_few_instances() {
        let src = "template <typename T, int K> __global__ void k(T* x) { x[0] = K; }";
        let one = |e: String| Program::new(src).name("k.cu").name_expression(e);
        let mut programs: Vec<Program> = (0..40).map(|i| one(format!("k<float, {i}>"))).collect();
        programs.push(one("k<float, 3>".into())); // already merged: dropped
        let mut big = Program::new(src).name("k.cu");
        for i in 0..20 {
            big = big.name_expression(format!("k<double, {i}>"));
        }
        programs.push(big);
        programs.push(Program::new(src).name("other.cu").name_expression("k<float, 0>")); // another family
        let sizes: Vec<usize> = merged(&programs, 16).unwrap().iter().map(|p| p.name_expressions.len()).collect();
        assert_eq!(sizes, [16, 16, 8, 20, 1]);
        let all: Vec<String> = merged(&programs, 16).unwrap().into_iter().take(3).flat_map(|p| p.name_expressions).collect();
        assert_eq!(all, (0..40).map(|i| format!("k<float, {i}>")).collect::<Vec<_>>(), "every instance once, in order");
    }
}
