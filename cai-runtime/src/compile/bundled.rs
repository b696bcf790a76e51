//! Programs from kernel bundles ([`crate::bundle`]): their bundle and family keys, their
//! lookup in the loaded bundles, and the parameter layouts a bundle stores for them.
//!
//! A bundle finds a program by its *bundle key*: the part of the cache key that does not
//! depend on the NVRTC found at run time (which a process without NVRTC cannot name):
//! the source, the file name, the options and defines, the name expressions, caijit's
//! embedded headers, and the program's own headers as the compilation read them (the names
//! it reaches without passing through a toolkit header, each with its file's contents, and
//! the program's own headers that only a toolkit header reaches: `includes::Includes::bundle`).
//! The toolkit's headers belong to the NVRTC build the bundle records. Include directories
//! are not in it, so a bundle works wherever the program's headers are found.
//!
//! A bundled program also serves a program of its *family* (the same key without the name
//! expressions) whose name expressions it has: baking compiles each family once, with the
//! name expressions of all its recorded programs, and the one module serves them all, each
//! with the kernels its own compilation would have.
//!
//! Recording the programs a run uses into a manifest to bake (`CAIJIT_RECORD`) is
//! `record.rs`'s job; it names programs by the keys made here.

use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::compiled::{CacheSource, Compiled, Image, KernelInfo};
use super::describe::describe_kernels;
use super::key::{embedded_headers_digest, hash_parts, sha256_hex};
use super::program::{Arch, Program};
use super::{includes, options};
use crate::bundle::{self, Bundle, BundledProgram, ImageKind};
use crate::cai::DType;
use crate::error::{Error, Result};
use crate::signature::{ParamKind, ParamLayout};
use crate::stats::timing::{self, LoadPhase};
use crate::sync::{lock, OnceMap};

/// Bumped whenever what a bundle key covers changes.
const BUNDLE_KEY_VERSION: u32 = 3;

/// A program's bundle key and family key (see the module's documentation), or why it has
/// none (caijit cannot name every header it may read: it is then compiled, and never
/// bundled).
pub(crate) type Keys = std::result::Result<(String, String), String>;

/// The bundle key of `program` (see the module's documentation): `Ok(Err(why))` when it
/// cannot have one. Its headers are read as a compilation reads them, once; a compilation
/// computes its keys from its own reads (`keys`), never from a second one.
pub fn bundle_key(program: &Program) -> Result<std::result::Result<String, String>> {
    Ok(keys_read(program)?.map(|(key, _)| key))
}

/// The family key of `program` (its bundle key without the name expressions).
pub fn family_key(program: &Program) -> Result<std::result::Result<String, String>> {
    Ok(keys_read(program)?.map(|(_, family)| family))
}

/// [`keys`] of `program`, its headers read now (as a compilation would: with the toolkit's
/// include directories when NVRTC can be loaded).
fn keys_read(program: &Program) -> Result<Keys> {
    let sorted = options::sort(&program.options);
    let toolkit_dirs = super::toolkit().map(|tk| tk.include_dirs.as_slice()).unwrap_or_default();
    Ok(keys(program, &includes::resolve(program, &sorted, toolkit_dirs)?))
}

/// The bundle key, and the *family* key: the same without the name expressions (a bundled
/// program of the same family whose name expressions include the program's serves it), of
/// `program` whose headers `found` read (the bytes a compilation hands NVRTC). Its options
/// count as NVRTC reads them, less the include directories (however spelled, as options or
/// as the program's own: where the headers are is not in the key, what they hold is).
pub(super) fn keys(program: &Program, found: &includes::Includes) -> Keys {
    let headers = found.bundle.clone()?;
    let sorted = options::sort(&program.options);
    let version = BUNDLE_KEY_VERSION.to_le_bytes();
    let defines: Vec<String> = program
        .defines
        .iter()
        .map(|(k, v)| match v {
            Some(v) => format!("-D{k}={v}"),
            None => format!("-D{k}"),
        })
        .collect();
    let mut parts: Vec<&[u8]> = vec![b"caijit-bundle-key", &version, program.source.as_bytes(), program.name.as_bytes(), b"--options"];
    parts.extend(sorted.rest.iter().map(|o| o.as_bytes()));
    if !sorted.pre_includes.is_empty() {
        parts.push(b"--pre-includes");
        parts.extend(sorted.pre_includes.iter().map(|h| h.as_bytes()));
    }
    parts.push(b"--defines");
    parts.extend(defines.iter().map(|d| d.as_bytes()));
    parts.push(b"--headers");
    parts.push(embedded_headers_digest());
    parts.push(&headers);
    // The key is the family's parts and then the name expressions: one pass over the source.
    let mut h = Sha256::new();
    hash_parts(&mut h, &parts);
    let family = hex::encode(h.clone().finalize());
    let exprs: Vec<&[u8]> = std::iter::once(&b"--exprs"[..]).chain(program.name_expressions.iter().map(|e| e.as_bytes())).collect();
    hash_parts(&mut h, &exprs);
    Ok((hex::encode(h.finalize()), family))
}

/// `program` (of bundle keys `keys`) for `arch` from `bundles`: `Ok(None)` when none holds
/// it. A bundle that holds it but cannot serve it (a damaged record or section, no code for
/// `arch`) is an error when NVRTC cannot compile it instead (`nvrtc_available`), else it is
/// passed over with a warning naming the bundle and the reason.
pub(super) fn lookup(
    bundles: &[Arc<Bundle>],
    program: &Program,
    keys: &Keys,
    arch: Arch,
    nvrtc_available: impl Fn() -> bool,
) -> Result<Option<Arc<Compiled>>> {
    let Ok((key, family)) = keys else { return Ok(None) };
    let mut unusable = None;
    for b in bundles {
        // A damaged record makes the bundle unusable for the program, as a damaged section does.
        match b.find(key, family, &program.name_expressions).and_then(|p| p.map(|p| hit(b, p, program, key, arch)).transpose()) {
            Ok(None) => {}
            Ok(Some(c)) => return Ok(Some(c)),
            Err(e) if nvrtc_available() => {
                crate::stats::bump(&crate::stats::COUNTERS.bundle_skips);
                warn_once(&format!(
                    "caijit: warning: not using the bundle {} for {}: {e}; compiling with NVRTC instead",
                    b.origin(),
                    program.name
                ));
            }
            Err(e) => {
                unusable.get_or_insert(e);
            }
        }
    }
    unusable.map_or(Ok(None), Err)
}

/// Print `message` once per process (the lookup's warnings, and recording's: `record`).
pub(super) fn warn_once(message: &str) {
    static WARNED: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut warned = lock(&WARNED);
    if !warned.iter().any(|m| m == message) {
        warned.push(message.to_string());
        eprintln!("{message}");
    }
}

/// The error for a program no loaded bundle holds, when NVRTC cannot be loaded (`why`):
/// naming the instance, the bundles searched and how to make one that holds it. Without
/// bundles, `why` itself, unless this build has no NVRTC at all (then no installation
/// would help, and only a bundle can).
pub(super) fn miss(program: &Program, arch: Arch, why: Error) -> Error {
    let Ok(bundles) = bundle::loaded() else { return why };
    let instance = match program.name_expressions.as_slice() {
        [] => program.name.clone(),
        exprs => format!("{} ({})", program.name, exprs.join(", ")),
    };
    let key = match bundle_key(program) {
        Ok(Ok(k)) => format!("bundle key {}", &k[..16]),
        Ok(Err(why)) => format!("it cannot be bundled: {why}"),
        Err(e) => format!("its bundle key cannot be computed: {e}"),
    };
    let searched: Vec<&str> = bundles.iter().map(|b| b.origin()).collect();
    let searched = if searched.is_empty() { "no bundle is loaded".to_string() } else { format!("searched: {}", searched.join(", ")) };
    if let Some(left_out) = crate::sys::NVRTC_LEFT_OUT {
        return Error::Bundle(format!(
            "{left_out}: load a bundle holding the kernel instance {instance} for {arch} ({key}; {searched}) with \
             cai_runtime::bundle::install(Bundle::from_bytes(include_bytes!(\"app.caijit\"))?)?, or enable the feature. Make \
             the bundle where NVRTC is installed: `python -m caijit bundle build` (docs/bundles.md)"
        ));
    }
    if bundles.is_empty() {
        return why;
    }
    Error::Bundle(format!(
        "no loaded bundle holds the kernel instance {instance} for {arch} ({key}; {searched}), and NVRTC is not available \
         to compile it ({why}). Record it: run once where NVRTC is installed with CAIJIT_RECORD=manifest.json, then \
         `python -m caijit bundle build manifest.json --arch {arch} -o app.caijit`, and load that bundle"
    ))
}

/// A bundled program made a [`Compiled`] (once per process per bundle, program and
/// architecture): its kernels' parameter layouts as the bake described them (the same
/// caijit version, from the same source and compilation), else read again from its
/// `.entry` declarations and lowered names, as after a compilation, with no NVRTC.
///
/// A program served by another of its family (`p` has more name expressions: the instances
/// a bake merged into one module) has the kernels its own compilation would have: those
/// of `p`'s other name expressions are left out (the module holds them, nothing names them).
fn hit(b: &Arc<Bundle>, p: &BundledProgram, program: &Program, key: &str, arch: Arch) -> Result<Arc<Compiled>> {
    type Hits = OnceMap<(usize, String, u32), Arc<Compiled>>;
    static HITS: OnceLock<Hits> = OnceLock::new();
    let id = (Arc::as_ptr(b) as usize, key.to_string(), arch.0);
    HITS.get_or_init(Hits::default).get_or_try_insert_with(id, || {
        let probe = timing::start();
        let (im, bytes) = b.image(p, arch.0)?;
        let details = b.details(p)?;
        let ptx = b.entries(p)?;
        let (kernels, unusable, notes) = match current_layouts(details.layouts.as_ref()) {
            Some(stored) => {
                let (kernels, notes) = layouts_from_json(stored, &ptx)
                    .map_err(|e| Error::Bundle(format!("bundle {} is corrupt (the layouts of {}: {e})", b.origin(), p.name)))?;
                (kernels, Vec::new(), notes)
            }
            None => {
                let declared = program.declarations();
                let d = describe_kernels(&ptx, &details.lowered, &declared.kernels, declared.notes.clone());
                (d.kernels, d.unusable, d.notes)
            }
        };
        // The name expressions of `p` that `program` does not have, and what they lowered to.
        let others: Vec<&(String, String)> =
            details.lowered.iter().filter(|(e, _)| p.name_expressions.contains(e) && !program.name_expressions.contains(e)).collect();
        let own = |expr: &Option<String>, lowered: &String| match expr {
            Some(e) if others.iter().any(|(o, _)| o == e) => {
                details.lowered.iter().any(|(f, l)| l == lowered && program.name_expressions.contains(f))
            }
            _ => true,
        };
        let kernels: Vec<KernelInfo> = kernels.into_iter().filter(|k| own(&k.name_expression, &k.lowered_name)).collect();
        let unusable: Vec<_> = unusable.into_iter().filter(|k| own(&k.name_expression, &k.lowered_name)).collect();
        let lowered: Vec<(String, String)> = details.lowered.iter().filter(|pair| !others.contains(pair)).cloned().collect();
        let aliases = super::compiled::aliases(&lowered, &kernels, &unusable);
        // What names the image's bytes (without hashing them); and, for a program served by
        // another of its family, which program (its kernels are fewer than the image's).
        let image_key = sha256_hex(&[b"bundled", &b.image_identity(p, &im)]);
        let key = if others.is_empty() { image_key } else { format!("{image_key}/{key}") };
        let image = match im.kind {
            ImageKind::Cubin => Image::Cubin(bytes),
            ImageKind::Ptx => Image::Ptx(
                String::from_utf8(bytes).map_err(|_| Error::Bundle(format!("bundle {} is corrupt (its PTX is not text)", b.origin())))?,
            ),
        };
        crate::stats::bump(&crate::stats::COUNTERS.bundle_hits);
        probe.stop(LoadPhase::BundleRead);
        Ok(Arc::new(Compiled {
            key,
            arch,
            image,
            ptx,
            log: String::new(),
            kernels,
            unusable,
            notes,
            source: CacheSource::Bundle,
            untrusted: None,
            nvrtc_options: details.nvrtc_options.clone(),
            aliases,
        }))
    })
}

// ----- Stored layouts -----

/// The rules stored layouts were made by: bumped whenever what [`describe_kernels`] and the
/// layout rules it applies (`crate::signature`) make of a compilation changes. Layouts made
/// by other rules are not read: the hit describes the program again.
const LAYOUT_RULES: u32 = 1;

/// No kernel's parameters take more than this many bytes (CUDA's limit).
const MAX_PARAM_BYTES: usize = 32764;

/// A compilation's kernels as a bundle stores them (a program description's `"layouts"`,
/// `docs/bundles.md`): read back by a bundle hit instead of demangling, parsing the
/// source's declarations and laying the parameters out again.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredLayouts {
    rules: u32,
    kernels: Vec<StoredKernel>,
    notes: Vec<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredKernel {
    name_expression: Option<String>,
    lowered: String,
    demangled: Option<String>,
    qualified: String,
    params: Vec<StoredParam>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredParam {
    name: Option<String>,
    #[serde(rename = "type")]
    cpp_type: String,
    kind: StoredKind,
    offset: usize,
    size: usize,
    align: usize,
}

/// [`ParamKind`], dtypes by name.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum StoredKind {
    Pointer { dtype: Option<String>, is_const: bool },
    Array { dtype: Option<String>, is_const: bool, rank: usize },
    Scalar { dtype: String },
    Struct { name: String },
}

/// `compiled`'s kernels and notes as a bundle stores them; `None` when a kernel could not be
/// described (its reason is not stored: a bundle hit then describes the program again, and
/// says why).
pub(super) fn layouts_json(compiled: &Compiled) -> Option<Value> {
    if !compiled.unusable.is_empty() {
        return None;
    }
    let dtype = |d: &Option<DType>| d.map(|d| d.name().to_string());
    let kernels = compiled
        .kernels
        .iter()
        .map(|k| StoredKernel {
            name_expression: k.name_expression.clone(),
            lowered: k.lowered_name.clone(),
            demangled: k.demangled.clone(),
            qualified: k.qualified_name.clone(),
            params: k
                .params
                .iter()
                .map(|q| StoredParam {
                    name: q.name.clone(),
                    cpp_type: q.cpp_type.clone(),
                    kind: match &q.kind {
                        ParamKind::Pointer { dtype: d, is_const } => StoredKind::Pointer { dtype: dtype(d), is_const: *is_const },
                        ParamKind::Array { dtype: d, is_const, rank } => {
                            StoredKind::Array { dtype: dtype(d), is_const: *is_const, rank: *rank }
                        }
                        ParamKind::Scalar(d) => StoredKind::Scalar { dtype: d.name().to_string() },
                        ParamKind::Struct { name } => StoredKind::Struct { name: name.clone() },
                    },
                    offset: q.offset,
                    size: q.size,
                    align: q.align,
                })
                .collect(),
        })
        .collect();
    serde_json::to_value(StoredLayouts { rules: LAYOUT_RULES, kernels, notes: compiled.notes.clone() }).ok()
}

/// Stored layouts made by this caijit's rules ([`LAYOUT_RULES`]), if any.
fn current_layouts(stored: Option<&Value>) -> Option<&Value> {
    stored.filter(|v| v.get("rules") == Some(&json!(LAYOUT_RULES)))
}

/// The kernels and notes [`layouts_json`] stored, for the program whose `.entry`
/// declarations are `entries`; `Err`: what is wrong with them. They must agree with the
/// binary's entries as a compilation's layouts do: each kernel is an entry with as many
/// parameters, each of the entry's size and alignment and of a kind the entry's parameter
/// holds, at the first offset of its alignment past the one before (at most
/// [`MAX_PARAM_BYTES`] in all).
fn layouts_from_json(stored: &Value, entries: &str) -> std::result::Result<(Vec<KernelInfo>, Vec<String>), String> {
    let stored = StoredLayouts::deserialize(stored).map_err(|e| e.to_string())?;
    let dtype = |name: &str| DType::from_name(name).ok_or_else(|| format!("{name:?} is not a dtype"));
    let optional = |name: &Option<String>| name.as_deref().map(dtype).transpose();
    let mut entries = crate::signature::ptx_entries_each(entries);
    let mut kernels = Vec::with_capacity(stored.kernels.len());
    for k in stored.kernels {
        let ptx = match entries.remove(&k.lowered) {
            Some(Ok(ptx)) => ptx,
            _ => return Err(format!("{} is not an entry of the binary (or is listed twice)", k.lowered)),
        };
        if ptx.len() != k.params.len() {
            return Err(format!("{} has {} parameters, its entry {}", k.lowered, k.params.len(), ptx.len()));
        }
        let mut params = Vec::with_capacity(k.params.len());
        let mut end = 0usize;
        for (index, (q, p)) in k.params.into_iter().zip(&ptx).enumerate() {
            let kind = match q.kind {
                StoredKind::Pointer { dtype: d, is_const } => ParamKind::Pointer { dtype: optional(&d)?, is_const },
                StoredKind::Array { dtype: d, is_const, rank } if rank <= crate::cai::MAX_RANK => {
                    ParamKind::Array { dtype: optional(&d)?, is_const, rank }
                }
                StoredKind::Array { rank, .. } => return Err(format!("parameter {index} of {} has rank {rank}", k.lowered)),
                StoredKind::Scalar { dtype: d } => ParamKind::Scalar(dtype(&d)?),
                StoredKind::Struct { name } => ParamKind::Struct { name },
            };
            // Laid out as a compilation lays out its entry's parameter.
            if kind.place(p, end) != Ok(Some(q.offset)) || (q.size, q.align) != (p.size, p.align.max(1)) {
                return Err(format!("parameter {index} of {} is not laid out as its entry's parameter", k.lowered));
            }
            end = q.offset + q.size;
            if end > MAX_PARAM_BYTES {
                return Err(format!("the parameters of {} take more than {MAX_PARAM_BYTES} bytes", k.lowered));
            }
            params.push(ParamLayout { index, name: q.name, cpp_type: q.cpp_type, kind, size: q.size, align: q.align, offset: q.offset });
        }
        kernels.push(KernelInfo {
            name_expression: k.name_expression,
            lowered_name: k.lowered,
            demangled: k.demangled,
            qualified_name: k.qualified,
            params,
        });
    }
    Ok((kernels, stored.notes))
}

/// [`Bundle::verify`], and every program's stored layouts read as a hit reads them: what
/// `bundle info` and `bundle build` check of a bundle.
pub fn verify(b: &Bundle) -> Result<()> {
    b.verify()?;
    for p in b.programs()? {
        if let Some(stored) = current_layouts(b.details(p)?.layouts.as_ref()) {
            layouts_from_json(stored, &b.entries(p)?)
                .map_err(|e| Error::Bundle(format!("bundle {} is corrupt (the layouts of {}: {e})", b.origin(), p.name)))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
