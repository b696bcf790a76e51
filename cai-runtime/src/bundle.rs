//! Kernel bundles: compiled programs shipped in one file, launched without NVRTC.
//!
//! A bundle (`app.caijit`) holds, for each program it was baked from, a CUBIN per
//! architecture (and PTX of the newest one, for devices newer than every CUBIN), the
//! `.entry` declarations its parameter layouts are read from, the lowered names of its
//! kernels, and a description (source hash, options, kernels and their parameters).
//! `docs/bundles.md` documents the format; this module reads and writes it and keeps the
//! bundles a process has loaded. It knows nothing of CUDA: compilation looks programs up
//! here (`compile::bundled`), and baking (`compile::bake`) writes bundles.
//!
//! # Format
//! `MAGIC`, the format version (u32 LE), the section count (u32 LE), then each section as
//! `kind: u32, flags: u32, stored length: u64, length: u64` (LE) and its stored bytes,
//! then the SHA-256 of every byte before it. Flag bit 0: the stored bytes are raw DEFLATE
//! (RFC 1951). Section 0 is the index (JSON); the index names the other sections by
//! position.
//!
//! # Examples
//! ```no_run
//! let bundle = cai_runtime::bundle::Bundle::open("app.caijit")?;
//! for p in bundle.programs() {
//!     println!("{} ({} kernels)", p.name, p.kernels.len());
//! }
//! cai_runtime::bundle::install(bundle);
//! # Ok::<(), cai_runtime::Error>(())
//! ```

use std::borrow::Cow;
use std::path::Path;
use std::sync::{Arc, OnceLock, RwLock};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// The first eight bytes of every bundle.
pub const MAGIC: &[u8; 8] = b"CAIJITBN";
/// The format version this caijit reads and writes.
pub const FORMAT_VERSION: u32 = 1;
/// The caijit version a bundle must have been baked by (its keys and layouts are this
/// version's).
pub const CAIJIT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Section kinds.
pub const SECTION_INDEX: u32 = 1;
pub const SECTION_CUBIN: u32 = 2;
pub const SECTION_PTX: u32 = 3;
pub const SECTION_ENTRIES: u32 = 4;

const FLAG_DEFLATE: u32 = 1;
const SECTION_HEADER: usize = 24;
const DIGEST: usize = 32;
/// No section inflates beyond this (a corrupt length must not exhaust memory).
const MAX_SECTION: u64 = 1 << 30;

/// How one architecture's code is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    Cubin,
    Ptx,
}

/// One architecture's code of a program: its section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef {
    /// `90` is sm_90 (for PTX: the virtual architecture `compute_90`).
    pub arch: u32,
    pub kind: ImageKind,
    pub section: usize,
}

/// A kernel parameter as the index describes it (for listings; launches read layouts
/// from the `.entry` declarations, as after a compilation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamSummary {
    pub name: Option<String>,
    pub cpp_type: String,
    pub offset: usize,
    pub size: usize,
}

/// A kernel of a bundled program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSummary {
    /// The name expression, else the qualified name.
    pub name: String,
    pub lowered_name: String,
    pub params: Vec<ParamSummary>,
}

/// One bundled program.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BundledProgram {
    /// The bundle key (see `compile::bundle_key`): what lookups find it by.
    pub key: String,
    /// The family key: the bundle key without the name expressions. The program also
    /// serves a program of its family whose name expressions are among its own.
    pub family: String,
    /// The program's file name (`kernel.cu`).
    pub name: String,
    pub source_sha256: String,
    pub options: Vec<String>,
    pub name_expressions: Vec<String>,
    /// What NVRTC was given for the newest architecture.
    pub nvrtc_options: Vec<String>,
    /// `(name expression, lowered name)` of every expression NVRTC was given.
    pub lowered: Vec<(String, String)>,
    /// The section holding the PTX `.entry` declarations.
    pub entries_section: usize,
    pub images: Vec<ImageRef>,
    pub kernels: Vec<KernelSummary>,
}

/// A bundle, read and verified.
#[derive(Debug)]
pub struct Bundle {
    origin: String,
    data: Cow<'static, [u8]>,
    /// `(kind, flags, start, stored length, length)` of each section.
    sections: Vec<(u32, u32, usize, usize, u64)>,
    nvrtc: String,
    nvrtc_build: String,
    archs: Vec<u32>,
    programs: Vec<BundledProgram>,
}

fn bad(origin: &str, what: impl std::fmt::Display) -> Error {
    Error::Bundle(format!("bundle {origin} {what}"))
}

impl Bundle {
    /// Read and verify a bundle file.
    pub fn open(path: impl AsRef<Path>) -> Result<Bundle> {
        let path = path.as_ref();
        let origin = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| bad(&origin, format!("cannot be read: {e}")))?;
        Bundle::parse(Cow::Owned(bytes), origin)
    }

    /// A bundle embedded in the binary (`include_bytes!("app.caijit")`), verified.
    pub fn from_bytes(bytes: &'static [u8]) -> Result<Bundle> {
        Bundle::parse(Cow::Borrowed(bytes), "<embedded>".into())
    }

    /// A bundle in memory; `origin` names it in messages.
    pub fn from_vec(bytes: Vec<u8>, origin: impl Into<String>) -> Result<Bundle> {
        Bundle::parse(Cow::Owned(bytes), origin.into())
    }

    fn parse(data: Cow<'static, [u8]>, origin: String) -> Result<Bundle> {
        let b: &[u8] = &data;
        if b.len() < 8 || &b[..8] != MAGIC {
            return Err(bad(&origin, "is not a caijit bundle (its first bytes are not \"CAIJITBN\")"));
        }
        if b.len() < 16 + DIGEST {
            return Err(bad(&origin, format!("is truncated ({} bytes)", b.len())));
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or_default());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        let version = u32_at(8);
        if version != FORMAT_VERSION {
            return Err(bad(
                &origin,
                format!(
                    "has format version {version}; this caijit ({CAIJIT_VERSION}) reads version {FORMAT_VERSION}: \
                     build it again with `python -m caijit bundle build`"
                ),
            ));
        }
        let count = u32_at(12) as usize;
        let body_end = b.len() - DIGEST;
        let mut sections = Vec::new();
        let mut at = 16;
        for i in 0..count {
            if at + SECTION_HEADER > body_end {
                return Err(bad(&origin, format!("is truncated (section {i} of {count} is missing)")));
            }
            let (kind, flags, stored, len) = (u32_at(at), u32_at(at + 4), u64_at(at + 8), u64_at(at + 16));
            at += SECTION_HEADER;
            if stored > (body_end - at) as u64 {
                return Err(bad(&origin, format!("is truncated (section {i} of {count} ends past the file)")));
            }
            if len > MAX_SECTION || flags & !FLAG_DEFLATE != 0 || (flags & FLAG_DEFLATE == 0 && stored != len) {
                return Err(bad(&origin, format!("is corrupt (section {i}'s header is not valid)")));
            }
            sections.push((kind, flags, at, stored as usize, len));
            at += stored as usize;
        }
        if at != body_end {
            return Err(bad(&origin, "is corrupt or truncated (its sections do not end where its checksum starts)"));
        }
        if Sha256::digest(&b[..body_end]).as_slice() != &b[body_end..] {
            return Err(bad(&origin, "is corrupt (its SHA-256 checksum does not match its contents)"));
        }
        let mut bundle =
            Bundle { origin, data, sections, nvrtc: String::new(), nvrtc_build: String::new(), archs: vec![], programs: vec![] };
        bundle.read_index()?;
        Ok(bundle)
    }

    fn read_index(&mut self) -> Result<()> {
        let first = self.sections.first().map(|s| s.0);
        if first != Some(SECTION_INDEX) {
            return Err(bad(&self.origin, "is corrupt (its first section is not the index)"));
        }
        let text = self.section(0)?;
        let index: Value =
            serde_json::from_slice(&text).map_err(|e| bad(&self.origin, format!("is corrupt (its index is not JSON: {e})")))?;
        let origin = self.origin.clone();
        let corrupt = |what: &str| bad(&origin, format!("is corrupt (its index has no valid {what})"));
        let made_by = index["caijit"].as_str().ok_or_else(|| corrupt("caijit version"))?;
        if made_by != CAIJIT_VERSION {
            return Err(bad(
                &origin,
                format!(
                    "was built by caijit {made_by}; this is caijit {CAIJIT_VERSION} (bundles are read by the version that built them): \
                     build it again with `python -m caijit bundle build`"
                ),
            ));
        }
        self.nvrtc = index["nvrtc"].as_str().unwrap_or_default().to_string();
        self.nvrtc_build = index["nvrtc_build"].as_str().unwrap_or_default().to_string();
        self.archs = index["archs"]
            .as_array()
            .ok_or_else(|| corrupt("architectures"))?
            .iter()
            .filter_map(|a| a.as_u64())
            .map(|a| a as u32)
            .collect();
        let strings = |v: &Value, what: &str| -> Result<Vec<String>> {
            v.as_array().ok_or_else(|| corrupt(what))?.iter().map(|s| s.as_str().map(str::to_owned).ok_or_else(|| corrupt(what))).collect()
        };
        let section_of = |v: &Value, kinds: &[u32], what: &str| -> Result<usize> {
            let i = v.as_u64().ok_or_else(|| corrupt(what))? as usize;
            match self.sections.get(i) {
                Some(s) if kinds.contains(&s.0) => Ok(i),
                _ => Err(corrupt(what)),
            }
        };
        let mut programs = Vec::new();
        for p in index["programs"].as_array().ok_or_else(|| corrupt("program list"))? {
            let text = |k: &str| p[k].as_str().map(str::to_owned).ok_or_else(|| corrupt(k));
            let mut lowered = Vec::new();
            for pair in p["lowered"].as_array().ok_or_else(|| corrupt("lowered names"))? {
                match pair.as_array().map(Vec::as_slice) {
                    Some([Value::String(e), Value::String(l)]) => lowered.push((e.clone(), l.clone())),
                    _ => return Err(corrupt("lowered names")),
                }
            }
            let mut images = Vec::new();
            for im in p["images"].as_array().ok_or_else(|| corrupt("images"))? {
                let kind = match im["kind"].as_str() {
                    Some("cubin") => ImageKind::Cubin,
                    Some("ptx") => ImageKind::Ptx,
                    _ => return Err(corrupt("image kind")),
                };
                let want = if kind == ImageKind::Cubin { SECTION_CUBIN } else { SECTION_PTX };
                images.push(ImageRef {
                    arch: im["arch"].as_u64().ok_or_else(|| corrupt("image architecture"))? as u32,
                    kind,
                    section: section_of(&im["section"], &[want], "image section")?,
                });
            }
            let mut kernels = Vec::new();
            for k in p["kernels"].as_array().ok_or_else(|| corrupt("kernels"))? {
                let mut params = Vec::new();
                for q in k["params"].as_array().ok_or_else(|| corrupt("parameters"))? {
                    params.push(ParamSummary {
                        name: q["name"].as_str().map(str::to_owned),
                        cpp_type: q["type"].as_str().unwrap_or_default().to_string(),
                        offset: q["offset"].as_u64().unwrap_or_default() as usize,
                        size: q["size"].as_u64().unwrap_or_default() as usize,
                    });
                }
                kernels.push(KernelSummary {
                    name: k["name"].as_str().unwrap_or_default().to_string(),
                    lowered_name: k["lowered"].as_str().unwrap_or_default().to_string(),
                    params,
                });
            }
            programs.push(BundledProgram {
                key: text("key")?,
                family: text("family")?,
                name: text("name")?,
                source_sha256: text("source_sha256")?,
                options: strings(&p["options"], "options")?,
                name_expressions: strings(&p["name_expressions"], "name expressions")?,
                nvrtc_options: strings(&p["nvrtc_options"], "NVRTC options")?,
                lowered,
                entries_section: section_of(&p["entries_section"], &[SECTION_ENTRIES], "entries section")?,
                images,
                kernels,
            });
        }
        self.programs = programs;
        Ok(())
    }

    /// Section `i`'s bytes, inflated.
    fn section(&self, i: usize) -> Result<Vec<u8>> {
        let &(_, flags, start, stored, len) = self.sections.get(i).ok_or_else(|| bad(&self.origin, format!("has no section {i}")))?;
        let raw = &self.data[start..start + stored];
        if flags & FLAG_DEFLATE == 0 {
            return Ok(raw.to_vec());
        }
        let out = miniz_oxide::inflate::decompress_to_vec_with_limit(raw, len as usize)
            .map_err(|e| bad(&self.origin, format!("is corrupt (section {i} does not inflate: {e:?})")))?;
        if out.len() as u64 != len {
            return Err(bad(&self.origin, format!("is corrupt (section {i} inflates to {} bytes, not {len})", out.len())));
        }
        Ok(out)
    }

    fn text_section(&self, i: usize) -> Result<String> {
        String::from_utf8(self.section(i)?).map_err(|_| bad(&self.origin, format!("is corrupt (section {i} is not UTF-8 text)")))
    }

    /// The file it was read from (`<embedded>` for [`Bundle::from_bytes`]).
    pub fn origin(&self) -> &str {
        &self.origin
    }
    /// The NVRTC version (`13.0`) it was compiled by.
    pub fn nvrtc_version(&self) -> &str {
        &self.nvrtc
    }
    /// The exact NVRTC build it was compiled by (library build IDs).
    pub fn nvrtc_build(&self) -> &str {
        &self.nvrtc_build
    }
    /// The real architectures it has CUBINs for.
    pub fn archs(&self) -> &[u32] {
        &self.archs
    }
    pub fn programs(&self) -> &[BundledProgram] {
        &self.programs
    }

    /// The program of bundle key `key`.
    pub fn program(&self, key: &str) -> Option<&BundledProgram> {
        self.programs.iter().find(|p| p.key == key)
    }

    /// The program of bundle key `key`, else one of family `family` that has every name
    /// expression of `exprs`.
    pub fn find(&self, key: &str, family: &str, exprs: &[String]) -> Option<&BundledProgram> {
        self.program(key)
            .or_else(|| self.programs.iter().find(|p| p.family == family && exprs.iter().all(|e| p.name_expressions.contains(e))))
    }

    /// The PTX `.entry` declarations of `program` (what its parameter layouts are read from).
    pub fn entries(&self, program: &BundledProgram) -> Result<String> {
        self.text_section(program.entries_section)
    }

    /// The code of `program` for a device of architecture `arch`: the CUBIN of the newest
    /// architecture of the same major version not newer than `arch` (a CUBIN runs on such
    /// devices), else the PTX when its architecture is not newer than `arch` (the driver
    /// compiles it). `Err`: a message saying what the bundle has.
    pub fn image(&self, program: &BundledProgram, arch: u32) -> Result<(ImageRef, Vec<u8>)> {
        let cubin = program
            .images
            .iter()
            .filter(|i| i.kind == ImageKind::Cubin && i.arch / 10 == arch / 10 && i.arch <= arch)
            .max_by_key(|i| i.arch);
        let ptx = program.images.iter().filter(|i| i.kind == ImageKind::Ptx && i.arch <= arch).max_by_key(|i| i.arch);
        match cubin.or(ptx) {
            Some(i) => Ok((i.clone(), self.section(i.section)?)),
            None => {
                let has: Vec<String> = program
                    .images
                    .iter()
                    .map(|i| match i.kind {
                        ImageKind::Cubin => format!("sm_{}", i.arch),
                        ImageKind::Ptx => format!("PTX for compute_{}", i.arch),
                    })
                    .collect();
                Err(bad(
                    &self.origin,
                    format!(
                        "has no code for this device's architecture sm_{arch} in program {} (it has: {}); build it again \
                         with `--arch` naming sm_{arch}, or with PTX (`--ptx`) of an architecture not newer than sm_{arch}",
                        program.name,
                        has.join(", ")
                    ),
                ))
            }
        }
    }

    /// A listing: the bundle's versions, architectures, and each program's kernels with
    /// their parameters (`python -m caijit bundle info`).
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{}: caijit bundle format {FORMAT_VERSION}, caijit {CAIJIT_VERSION}, NVRTC {} (build {})\narchitectures: {}\n",
            self.origin,
            self.nvrtc,
            self.nvrtc_build,
            self.archs.iter().map(|a| format!("sm_{a}")).collect::<Vec<_>>().join(", "),
        );
        s.push_str(&format!("{} bytes, {} programs\n", self.data.len(), self.programs.len()));
        for p in &self.programs {
            let images: Vec<String> = p
                .images
                .iter()
                .map(|i| {
                    let size = self.sections.get(i.section).map_or(0, |s| s.4);
                    match i.kind {
                        ImageKind::Cubin => format!("sm_{} cubin {size} B", i.arch),
                        ImageKind::Ptx => format!("compute_{} ptx {size} B", i.arch),
                    }
                })
                .collect();
            s.push_str(&format!(
                "\nprogram {} (key {}, source sha256 {})\n  options: {:?}\n  images: {}\n",
                p.name,
                &p.key[..p.key.len().min(16)],
                &p.source_sha256[..p.source_sha256.len().min(16)],
                p.options,
                images.join(", ")
            ));
            for k in &p.kernels {
                let params: Vec<String> = k
                    .params
                    .iter()
                    .map(|q| format!("{} {} @{}+{}", q.cpp_type, q.name.as_deref().unwrap_or("_"), q.offset, q.size))
                    .collect();
                s.push_str(&format!("  kernel {}({})\n", k.name, params.join(", ")));
            }
        }
        s
    }
}

/// One program to write into a bundle.
#[derive(Clone, Debug, Default)]
pub struct ProgramBlobs {
    /// The program's description in the index (`key`, `name`, … as `docs/bundles.md` lists;
    /// `images` and `entries_section` are filled in by [`write()`]).
    pub description: Value,
    pub entries: String,
    /// `(arch, CUBIN)`.
    pub cubins: Vec<(u32, Vec<u8>)>,
    /// `(arch, PTX)`, if any.
    pub ptx: Option<(u32, String)>,
}

/// Write a bundle: `nvrtc` / `nvrtc_build` name the compiler, `archs` the architectures
/// baked. Sections are compressed (raw DEFLATE) where that makes them smaller.
pub fn write(nvrtc: &str, nvrtc_build: &str, archs: &[u32], programs: Vec<ProgramBlobs>) -> Vec<u8> {
    let mut sections: Vec<(u32, Vec<u8>)> = vec![(SECTION_INDEX, Vec::new())];
    let mut described = Vec::new();
    for p in programs {
        let mut d = p.description;
        sections.push((SECTION_ENTRIES, p.entries.into_bytes()));
        d["entries_section"] = json!(sections.len() - 1);
        let mut images = Vec::new();
        for (arch, cubin) in p.cubins {
            sections.push((SECTION_CUBIN, cubin));
            images.push(json!({"arch": arch, "kind": "cubin", "section": sections.len() - 1}));
        }
        if let Some((arch, ptx)) = p.ptx {
            sections.push((SECTION_PTX, ptx.into_bytes()));
            images.push(json!({"arch": arch, "kind": "ptx", "section": sections.len() - 1}));
        }
        d["images"] = Value::Array(images);
        described.push(d);
    }
    let index = json!({
        "format": FORMAT_VERSION,
        "caijit": CAIJIT_VERSION,
        "nvrtc": nvrtc,
        "nvrtc_build": nvrtc_build,
        "archs": archs,
        "programs": described,
    });
    sections[0].1 = serde_json::to_vec_pretty(&index).unwrap_or_default();
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(sections.len() as u32).to_le_bytes());
    for (kind, raw) in sections {
        let packed = miniz_oxide::deflate::compress_to_vec(&raw, 9);
        let (flags, stored) = if packed.len() < raw.len() { (FLAG_DEFLATE, packed) } else { (0, raw.clone()) };
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&(stored.len() as u64).to_le_bytes());
        out.extend_from_slice(&(raw.len() as u64).to_le_bytes());
        out.extend_from_slice(&stored);
    }
    let digest = Sha256::digest(&out);
    out.extend_from_slice(digest.as_slice());
    out
}

/// The `.entry` declarations of PTX (each `.entry name(…)` up to its closing parenthesis):
/// all that parameter layouts are read from, without the code.
pub fn entry_declarations(ptx: &str) -> String {
    let mut out = String::new();
    let mut rest = ptx;
    while let Some(pos) = rest.find(".entry ") {
        rest = &rest[pos..];
        let end = rest.find(')').map_or(rest.len(), |c| c + 1);
        // An entry without parameters has no parenthesis before its body.
        let end = match rest.find('{') {
            Some(b) if b < end => b,
            _ => end,
        };
        out.push_str(&rest[..end]);
        out.push('\n');
        rest = &rest[end..];
    }
    out
}

// ----- The bundles this process has loaded -----

static LOADED: RwLock<Vec<Arc<Bundle>>> = RwLock::new(Vec::new());
static FROM_ENV: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// Make `bundle` searched by every compilation of this process (after those loaded
/// before it). A bundle already loaded (same origin and contents) is not added twice.
pub fn install(bundle: Bundle) -> Arc<Bundle> {
    let mut loaded = LOADED.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(same) = loaded.iter().find(|b| b.origin == bundle.origin && b.data == bundle.data) {
        return same.clone();
    }
    let b = Arc::new(bundle);
    loaded.push(b.clone());
    b
}

/// Read, verify and install the bundle at `path`.
pub fn load(path: impl AsRef<Path>) -> Result<Arc<Bundle>> {
    Ok(install(Bundle::open(path)?))
}

/// Every bundle loaded: those of `CAIJIT_BUNDLES` (a `:`-separated list of files, read at
/// the first call; an unreadable one is an error naming it, at every call), then those
/// loaded explicitly.
pub fn loaded() -> Result<Vec<Arc<Bundle>>> {
    let env = FROM_ENV.get_or_init(|| {
        let Some(list) = std::env::var_os("CAIJIT_BUNDLES") else { return Ok(()) };
        for path in std::env::split_paths(&list).filter(|p| !p.as_os_str().is_empty()) {
            match Bundle::open(&path) {
                Ok(b) => {
                    install(b);
                }
                Err(e) => return Err(format!("CAIJIT_BUNDLES: {e}")),
            }
        }
        Ok(())
    });
    if let Err(e) = env {
        return Err(Error::Bundle(e.clone()));
    }
    let defaults = std::mem::take(&mut *crate::sync::lock(&DEFAULTS));
    for path in defaults {
        match Bundle::open(&path) {
            Ok(b) => {
                install(b);
            }
            Err(e) => eprintln!("caijit: warning: not using a shipped kernel bundle: {e}; compiling with NVRTC instead"),
        }
    }
    Ok(LOADED.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
}

static DEFAULTS: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());

/// A bundle shipped with a package (the Python wheel's precompiled kernel library): opened
/// at the next lookup, after those of `CAIJIT_BUNDLES`. One that cannot be used is skipped
/// with a warning (compilation goes on with NVRTC), not an error.
pub fn add_default(path: impl Into<std::path::PathBuf>) {
    crate::sync::lock(&DEFAULTS).push(path.into());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let p = ProgramBlobs {
            description: json!({
                "key": "ab".repeat(32), "family": "ef".repeat(32), "name": "k.cu", "source_sha256": "cd".repeat(32), "options": ["-O3"],
                "name_expressions": ["k<float>"], "nvrtc_options": ["-arch=sm_90"], "lowered": [["k<float>", "_Z1kIfEvPT_"]],
                "kernels": [{"name": "k<float>", "lowered": "_Z1kIfEvPT_", "params": [{"name": "x", "type": "float*", "offset": 0, "size": 8}]}],
            }),
            entries: ".entry _Z1kIfEvPT_(\n.param .u64 _Z1kIfEvPT__param_0\n)".into(),
            cubins: vec![(80, vec![7; 4000]), (90, vec![9; 4000])],
            ptx: Some((90, "// ptx for compute_90".into())),
        };
        write("13.0", "build-id", &[80, 90], vec![p])
    }

    #[test]
    fn round_trip_and_architecture_choice() {
        let b = Bundle::from_vec(sample(), "t").unwrap();
        assert_eq!(b.archs(), &[80, 90]);
        let p = b.program(&"ab".repeat(32)).unwrap();
        // By family: a subset of its name expressions, not another one.
        let (family, float) = ("ef".repeat(32), vec!["k<float>".to_string()]);
        assert_eq!(b.find("other", &family, &float).map(|p| &p.key), Some(&p.key));
        assert_eq!(b.find("other", &family, &[]).map(|p| &p.key), Some(&p.key));
        assert!(b.find("other", &family, &["k<int>".to_string()]).is_none());
        assert!(b.find("other", "other", &float).is_none());
        assert_eq!(p.lowered, vec![("k<float>".to_string(), "_Z1kIfEvPT_".to_string())]);
        assert!(b.entries(p).unwrap().contains(".param .u64"));
        // sm_86 runs the sm_80 CUBIN, sm_90 its own, sm_100 JITs the PTX.
        let (im, bytes) = b.image(p, 86).unwrap();
        assert_eq!((im.arch, im.kind, bytes), (80, ImageKind::Cubin, vec![7; 4000]));
        assert_eq!(b.image(p, 90).unwrap().0.arch, 90);
        let (im, bytes) = b.image(p, 100).unwrap();
        assert_eq!((im.kind, bytes), (ImageKind::Ptx, b"// ptx for compute_90".to_vec()));
        let e = b.image(p, 75).unwrap_err().to_string();
        assert!(e.contains("no code for this device's architecture sm_75") && e.contains("sm_80, sm_90"), "{e}");
        assert!(b.describe().contains("kernel k<float>(float* x @0+8)"), "{}", b.describe());
        // Compressed: 8000 bytes of CUBIN take far less.
        assert!(sample().len() < 2000);
    }

    #[test]
    fn damaged_bundles_are_refused_with_their_reason() {
        let good = sample();
        let err = |bytes: Vec<u8>| Bundle::from_vec(bytes, "t").unwrap_err().to_string();
        for cut in [0, 5, 20, good.len() / 2, good.len() - 1] {
            let e = err(good[..cut].to_vec());
            assert!(e.contains("truncated") || e.contains("not a caijit bundle") || e.contains("corrupt"), "{cut}: {e}");
        }
        assert!(err(good[..good.len() / 2].to_vec()).contains("truncated"));
        let mut flipped = good.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 1;
        assert!(err(flipped).contains("checksum"));
        let mut version = good.clone();
        version[8] = 9;
        assert!(err(version).contains("format version 9"));
        assert!(err(b"ELF\x7f not a bundle at all, but long enough for a header".to_vec()).contains("not a caijit bundle"));
        // Another caijit version's bundle, correctly sealed.
        let other = write_with_version("0.0.0-other");
        assert!(err(other).contains("was built by caijit 0.0.0-other"));
    }

    fn write_with_version(v: &str) -> Vec<u8> {
        let index = serde_json::to_vec(&json!({"format": 1, "caijit": v, "archs": [], "programs": []})).unwrap();
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&1u32.to_le_bytes());
        out.extend_from_slice(&SECTION_INDEX.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(index.len() as u64).to_le_bytes());
        out.extend_from_slice(&(index.len() as u64).to_le_bytes());
        out.extend_from_slice(&index);
        let d = Sha256::digest(&out);
        out.extend_from_slice(d.as_slice());
        out
    }

    #[test]
    fn entry_declarations_keep_only_parameter_lists() {
        let ptx = ".version 8.0\n.visible .entry _Z1kPf(\n\t.param .u64 _Z1kPf_param_0\n)\n{\n\tret;\n}\n.visible .entry e\n{\n ret;\n}\n";
        let d = entry_declarations(ptx);
        assert_eq!(d, ".entry _Z1kPf(\n\t.param .u64 _Z1kPf_param_0\n)\n.entry e\n\n");
        let parsed = crate::signature::ptx_entries(&d).unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed["_Z1kPf"].len(), 1);
    }
}
