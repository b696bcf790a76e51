//! Reading a bundle: [`Bundle`] opens one (a file, kept open, or bytes in memory),
//! verifying its header, table of contents, metadata and lookup table, and reads each other
//! section when it is first used (its checksum verified, inflated): programs' records and
//! descriptions, `.entry` declarations and code; and verifies or lists a bundle whole.

use std::borrow::Cow;
use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value;

use super::format::{
    BundledProgram, ImageKind, ImageRef, KernelSummary, ParamSummary, ProgramDetails, ShippedTuning, StoredDetails, StoredMetadata,
    StoredProgram, CAIJIT_VERSION, DIGEST, FLAG_DEFLATE, FORMAT_VERSION, HEADER, MAGIC, MAX_SECTION, MAX_SECTIONS, SECTION_CUBIN,
    SECTION_DESCRIPTION, SECTION_ENTRIES, SECTION_LOOKUP, SECTION_METADATA, SECTION_PTX, SECTION_TUNINGS, TOC_CHECKSUM, TOC_ENTRY,
};
use super::lookup::{digest, key_record, Lookup};
use super::toc::Toc;
use crate::error::{Error, Result};
use crate::stats::timing::{self, LoadPhase};

/// A bundle whose header, table of contents, metadata and lookup table were read and
/// verified; the other sections are verified when first used.
#[derive(Debug)]
pub struct Bundle {
    pub(super) origin: String,
    data: Bytes,
    pub(super) sections: Toc,
    /// The checksum of the header and table of contents (which hold every section's
    /// checksum): a bundle loaded again from the same file has the same.
    pub(super) toc_crc32: u32,
    nvrtc: String,
    nvrtc_build: String,
    archs: Vec<u32>,
    pub(super) lookup: Lookup,
    /// Each program's record and details, read at their first use (a failure is kept: the
    /// bytes do not change); a pointer each until then.
    pub(super) slots: Vec<OnceLock<Box<LoadedProgram>>>,
    /// The section of the tunings it ships, if any, and the tunings, read at their first use.
    tunings_section: Option<usize>,
    tunings: OnceLock<std::result::Result<Vec<ShippedTuning>, String>>,
}

#[derive(Debug)]
pub(super) struct LoadedProgram {
    program: std::result::Result<BundledProgram, String>,
    details: OnceLock<std::result::Result<ProgramDetails, String>>,
}

/// A bundle's bytes: in memory (embedded, or given), or a file read a section at a time, so
/// that opening one reads only its header, table of contents, metadata and lookup table, however large it
/// is (the kernel library's bundle for four architectures and PTX is 12.7 MB).
#[derive(Debug)]
enum Bytes {
    Memory(Cow<'static, [u8]>),
    File { file: std::fs::File, len: u64 },
}

impl Bytes {
    fn len(&self) -> u64 {
        match self {
            Bytes::Memory(b) => b.len() as u64,
            Bytes::File { len, .. } => *len,
        }
    }

    /// `len` bytes from `start` (within [`Bytes::len`], which the caller checked).
    fn read(&self, start: usize, len: usize) -> std::io::Result<Cow<'_, [u8]>> {
        match self {
            Bytes::Memory(b) => Ok(Cow::Borrowed(&b[start..start + len])),
            Bytes::File { file, .. } => {
                // The length comes from the file: a damaged one must be an error, not an
                // abort for want of memory.
                let mut out = Vec::new();
                out.try_reserve_exact(len).map_err(|_| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
                out.resize(len, 0);
                read_exact_at(file, &mut out, start as u64)?;
                Ok(Cow::Owned(out))
            }
        }
    }
}

#[cfg(unix)]
fn read_exact_at(file: &std::fs::File, out: &mut [u8], at: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, out, at)
}

#[cfg(windows)]
fn read_exact_at(file: &std::fs::File, mut out: &mut [u8], mut at: u64) -> std::io::Result<()> {
    while !out.is_empty() {
        match std::os::windows::fs::FileExt::seek_read(file, out, at)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => {
                out = &mut out[n..];
                at += n as u64;
            }
        }
    }
    Ok(())
}

/// Raw DEFLATE `packed` inflated to exactly `len` bytes (libdeflate: more than twice as fast
/// as a streaming inflater, and the first lookup of a bundled program inflates its CUBIN);
/// `Err`: what is wrong with it ("does not inflate", "inflates to … bytes").
pub(super) fn inflate(packed: &[u8], len: usize) -> std::result::Result<Vec<u8>, String> {
    // `len` is bounded (`MAX_SECTION`), and the allocation fallible.
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|_| format!("inflates to {len} bytes, more than this process can allocate"))?;
    out.resize(len, 0);
    match libdeflater::Decompressor::new().deflate_decompress(packed, &mut out) {
        Ok(n) if n == len => Ok(out),
        Ok(n) => Err(format!("inflates to {n} bytes, not {len}")),
        Err(libdeflater::DecompressionError::InsufficientSpace) => Err(format!("inflates to more than {len} bytes")),
        Err(libdeflater::DecompressionError::BadData) => Err("does not inflate (it is not valid DEFLATE data)".into()),
    }
}

/// What a tuner's record must be to be shipped: its own key, one trial per candidate, and a
/// winner among them (the tuner checks the rest when it reads it).
fn check_tuning(t: &ShippedTuning) -> std::result::Result<(), &'static str> {
    let r = &t.record;
    if r["key"].as_str() != Some(t.key.as_str()) {
        return Err("its record is another key's");
    }
    let (Some(candidates), Some(trials)) = (r["candidates"].as_array(), r["trials"].as_array()) else {
        return Err("its record has no candidates or trials");
    };
    if candidates.len() != trials.len() {
        return Err("its record has not one trial per candidate");
    }
    match r["best"].as_u64() {
        Some(b) if (b as usize) < candidates.len() => Ok(()),
        _ => Err("its record names no winner among its candidates"),
    }
}

fn bad(origin: &str, what: impl std::fmt::Display) -> Error {
    Error::Bundle(format!("bundle {origin} {what}"))
}

impl Bundle {
    /// Read a bundle file, verifying its header, table of contents and index (the other
    /// sections are verified when first used).
    pub fn open(path: impl AsRef<Path>) -> Result<Bundle> {
        let path = path.as_ref();
        let origin = path.display().to_string();
        let unreadable = |e: std::io::Error| bad(&origin, format!("cannot be read: {e}"));
        let (file, meta) = crate::files::open_regular(path, false).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidInput => bad(&origin, format!("{e}: a bundle is a file `python -m caijit bundle build` wrote")),
            _ => unreadable(e),
        })?;
        Bundle::parse(Bytes::File { file, len: meta.len() }, origin)
    }

    /// A bundle embedded in the binary (`include_bytes!("app.caijit")`), verified as
    /// [`Bundle::open`] does.
    pub fn from_bytes(bytes: &'static [u8]) -> Result<Bundle> {
        Bundle::parse(Bytes::Memory(Cow::Borrowed(bytes)), "<embedded>".into())
    }

    /// A bundle in memory; `origin` names it in messages.
    pub fn from_vec(bytes: Vec<u8>, origin: impl Into<String>) -> Result<Bundle> {
        Bundle::parse(Bytes::Memory(Cow::Owned(bytes)), origin.into())
    }

    /// Read and verify the header, table of contents, metadata and lookup table (timed as
    /// `module.bundle_open`).
    fn parse(data: Bytes, origin: String) -> Result<Bundle> {
        let probe = timing::start();
        let parsed = Bundle::parse_untimed(data, origin);
        probe.stop(LoadPhase::BundleOpen);
        parsed
    }

    fn parse_untimed(data: Bytes, origin: String) -> Result<Bundle> {
        let size = usize::try_from(data.len()).unwrap_or(usize::MAX);
        let read = |start: usize, len: usize| data.read(start, len).map_err(|e| bad(&origin, format!("cannot be read: {e}")));
        let head = read(0, size.min(HEADER))?;
        if head.len() < 8 || &head[..8] != MAGIC {
            return Err(bad(&origin, "is not a caijit bundle (its first bytes are not \"CAIJITBN\")"));
        }
        if head.len() < HEADER {
            return Err(bad(&origin, format!("is truncated ({size} bytes)")));
        }
        let u32_at = |b: &[u8], i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or_default());
        let u64_at = |b: &[u8], i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        let version = u32_at(&head, 8);
        if version != FORMAT_VERSION {
            return Err(bad(
                &origin,
                format!(
                    "has format version {version}; this caijit ({CAIJIT_VERSION}) reads version {FORMAT_VERSION}: \
                     build it again with `python -m caijit bundle build`"
                ),
            ));
        }
        let count = u32_at(&head, 12) as usize;
        if count > MAX_SECTIONS {
            return Err(bad(&origin, format!("is corrupt (it claims {count} sections; a bundle has at most {MAX_SECTIONS})")));
        }
        let toc_end = HEADER.saturating_add(count.saturating_mul(TOC_ENTRY));
        if toc_end.saturating_add(TOC_CHECKSUM) > size {
            return Err(bad(&origin, format!("is truncated (its table of contents of {count} sections is cut off)")));
        }
        let b = read(0, toc_end + TOC_CHECKSUM)?;
        let toc_crc32 = libdeflater::crc32(&b[..toc_end]);
        if u32_at(&b, toc_end) != toc_crc32 {
            return Err(bad(&origin, "is corrupt (the CRC-32 checksum of its table of contents does not match)"));
        }
        // Sections follow the table one after the other, up to the end of the file.
        let mut at = toc_end + TOC_CHECKSUM;
        for i in 0..count {
            let e = HEADER + i * TOC_ENTRY;
            let (flags, start, stored, len) = (u32_at(&b, e + 4), u64_at(&b, e + 8), u64_at(&b, e + 16), u64_at(&b, e + 24));
            if start != at as u64
                || len > MAX_SECTION
                || stored > MAX_SECTION
                || flags & !FLAG_DEFLATE != 0
                || (flags & FLAG_DEFLATE == 0 && stored != len)
            {
                return Err(bad(&origin, format!("is corrupt (section {i}'s entry in the table of contents is not valid)")));
            }
            if stored > (size - at) as u64 {
                return Err(bad(&origin, format!("is truncated (section {i} of {count} ends past the end of the file)")));
            }
            at += stored as usize;
        }
        if at != size {
            return Err(bad(&origin, "is corrupt (its sections do not end where the file does)"));
        }
        let sections = Toc { raw: b.into_owned(), count };
        drop(head);
        let mut bundle = Bundle {
            origin,
            data,
            sections,
            toc_crc32,
            nvrtc: String::new(),
            nvrtc_build: String::new(),
            archs: vec![],
            lookup: Lookup::default(),
            slots: vec![],
            tunings_section: None,
            tunings: OnceLock::new(),
        };
        bundle.read_metadata()?;
        Ok(bundle)
    }

    /// Read the metadata (section 0) and the lookup table (section 1).
    fn read_metadata(&mut self) -> Result<()> {
        if self.sections.get(0).map(|s| s.kind) != Some(SECTION_METADATA) {
            return Err(bad(&self.origin, "is corrupt (its first section is not the metadata)"));
        }
        let raw = self.section(0)?;
        let meta: StoredMetadata = match serde_json::from_slice(&raw) {
            Ok(meta) => meta,
            Err(e) => return Err(self.metadata_error(&raw, e)),
        };
        if meta.caijit != CAIJIT_VERSION {
            return Err(self.built_by(&meta.caijit));
        }
        if self.sections.get(1).map(|s| s.kind) != Some(SECTION_LOOKUP) {
            return Err(bad(&self.origin, "is corrupt (its second section is not the lookup table)"));
        }
        let lookup = Lookup::parse(self.section(1)?, &self.sections)
            .map_err(|e| bad(&self.origin, format!("is corrupt (its lookup table is not valid: {e})")))?;
        if lookup.programs != meta.programs {
            return Err(bad(
                &self.origin,
                format!("is corrupt (its metadata counts {} programs, its lookup table {})", meta.programs, lookup.programs),
            ));
        }
        self.slots = (0..lookup.programs).map(|_| OnceLock::new()).collect();
        self.lookup = lookup;
        self.nvrtc = meta.nvrtc;
        self.nvrtc_build = meta.nvrtc_build;
        self.archs = meta.archs;
        if let Some(t) = meta.tunings {
            if self.sections.get(t).map(|s| s.kind) != Some(SECTION_TUNINGS) {
                return Err(bad(&self.origin, format!("is corrupt (its metadata names section {t} as its tunings, which it is not)")));
            }
        }
        self.tunings_section = meta.tunings;
        Ok(())
    }

    /// Why `raw` is no metadata this caijit reads: another version's (whose metadata may
    /// have another shape), not JSON, or JSON without what the metadata has (`e`).
    fn metadata_error(&self, raw: &[u8], e: serde_json::Error) -> Error {
        match serde_json::from_slice::<Value>(raw) {
            Err(e) => bad(&self.origin, format!("is corrupt (its metadata is not JSON: {e})")),
            Ok(v) => match v["caijit"].as_str() {
                Some(made_by) if made_by != CAIJIT_VERSION => self.built_by(made_by),
                _ => bad(&self.origin, format!("is corrupt (its metadata is not valid: {e})")),
            },
        }
    }

    fn built_by(&self, made_by: &str) -> Error {
        bad(
            &self.origin,
            format!(
                "was built by caijit {made_by}; this is caijit {CAIJIT_VERSION} (bundles are read by the version that built them): \
                 build it again with `python -m caijit bundle build`"
            ),
        )
    }

    /// Program `i` (of [`Bundle::program_count`]): its record, verified and read at the
    /// first call.
    pub fn program_at(&self, i: usize) -> Result<&BundledProgram> {
        let slot = self.slots.get(i).ok_or_else(|| bad(&self.origin, format!("has no program {i} (it has {})", self.slots.len())))?;
        let slot = slot
            .get_or_init(|| Box::new(LoadedProgram { program: self.read_program(i).map_err(|e| e.to_string()), details: OnceLock::new() }));
        slot.program.as_ref().map_err(|e| Error::Bundle(e.clone()))
    }

    fn read_program(&self, i: usize) -> Result<BundledProgram> {
        let section = self.lookup.record_section(i);
        let raw = self.section(section)?;
        let corrupt = |what: &str| bad(&self.origin, format!("is corrupt (the record of program {i}, section {section}, {what})"));
        let p: StoredProgram = serde_json::from_slice(&raw).map_err(|e| corrupt(&format!("is not valid: {e}")))?;
        let section_of = |i: usize, kind: u32, what: &str| -> Result<usize> {
            match self.sections.get(i) {
                Some(s) if s.kind == kind => Ok(i),
                _ => Err(corrupt(&format!("has no valid {what}"))),
            }
        };
        let mut images = Vec::with_capacity(p.images.len());
        for im in p.images {
            let (kind, want) = match im.kind.as_str() {
                "cubin" => (ImageKind::Cubin, SECTION_CUBIN),
                "ptx" => (ImageKind::Ptx, SECTION_PTX),
                _ => return Err(corrupt("has no valid image kind")),
            };
            images.push(ImageRef { arch: im.arch, kind, section: section_of(im.section, want, "image section")? });
        }
        // The lookup table lists the program as its record says (each program has one key
        // and one family record: then both are right).
        let family = digest(&p.family);
        let listed = self.lookup.keys().binary_search(&key_record(&digest(&p.key), i)).is_ok()
            && self.lookup.families().binary_search(&key_record(&family, i)).is_ok()
            && p.name_expressions.iter().all(|e| self.lookup.has_expr(&family, &digest(e), i));
        if !listed {
            return Err(corrupt("does not match the lookup table"));
        }
        Ok(BundledProgram {
            description_section: section_of(p.description_section, SECTION_DESCRIPTION, "description section")?,
            entries_section: section_of(p.entries_section, SECTION_ENTRIES, "entries section")?,
            key: p.key,
            family: p.family,
            name: p.name,
            name_expressions: p.name_expressions,
            kernel_names: p.kernels,
            images,
            position: i,
        })
    }

    /// `program` is one of this bundle's (its sections are this bundle's to read), else an
    /// error: a program of another bundle must not be served this one's bytes.
    fn own(&self, program: &BundledProgram) -> Result<&LoadedProgram> {
        match self.slots.get(program.position).and_then(OnceLock::get) {
            Some(slot) if slot.program.as_ref().is_ok_and(|p| std::ptr::eq(p, program)) => Ok(slot),
            _ => Err(Error::Bundle(format!("the program {} is not one of bundle {}'s", program.name, self.origin))),
        }
    }

    /// What the bundle says of `program` beyond its record: its description section,
    /// verified and read at the first call.
    pub fn details(&self, program: &BundledProgram) -> Result<&ProgramDetails> {
        let slot = self.own(program)?;
        let read = || -> Result<ProgramDetails> {
            let raw = self.section(program.description_section)?;
            let d: StoredDetails = serde_json::from_slice(&raw)
                .map_err(|e| bad(&self.origin, format!("is corrupt (the description of {} is not valid: {e})", program.name)))?;
            let kernels = d
                .kernels
                .into_iter()
                .map(|k| KernelSummary {
                    name: k.name,
                    lowered_name: k.lowered,
                    params: k
                        .params
                        .into_iter()
                        .map(|q| ParamSummary { name: q.name, cpp_type: q.cpp_type, offset: q.offset, size: q.size })
                        .collect(),
                })
                .collect();
            Ok(ProgramDetails {
                source_sha256: d.source_sha256,
                options: d.options,
                nvrtc_options: d.nvrtc_options,
                lowered: d.lowered,
                kernels,
                layouts: d.layouts,
            })
        };
        slot.details.get_or_init(|| read().map_err(|e| e.to_string())).as_ref().map_err(|e| Error::Bundle(e.clone()))
    }

    /// Section `i`'s bytes, its checksum verified, inflated.
    pub(super) fn section(&self, i: usize) -> Result<Vec<u8>> {
        let s = self.sections.get(i).ok_or_else(|| bad(&self.origin, format!("has no section {i}")))?;
        let raw = self.data.read(s.start, s.stored).map_err(|e| bad(&self.origin, format!("cannot be read (section {i}): {e}")))?;
        if libdeflater::crc32(&raw) != s.crc32 {
            return Err(bad(&self.origin, format!("is corrupt (the CRC-32 checksum of section {i} does not match its contents)")));
        }
        if s.flags & FLAG_DEFLATE == 0 {
            // (Read from a file, the bytes are already this section's own.)
            return Ok(raw.into_owned());
        }
        inflate(&raw, s.len as usize).map_err(|e| bad(&self.origin, format!("is corrupt (section {i} {e})")))
    }

    fn text_section(&self, i: usize) -> Result<String> {
        String::from_utf8(self.section(i)?).map_err(|_| bad(&self.origin, format!("is corrupt (section {i} is not UTF-8 text)")))
    }

    /// The autotuning results the bundle ships (read and verified at the first call).
    pub fn tunings(&self) -> Result<&[ShippedTuning]> {
        let read = || -> std::result::Result<Vec<ShippedTuning>, String> {
            let Some(section) = self.tunings_section else { return Ok(Vec::new()) };
            let raw = self.section(section).map_err(|e| e.to_string())?;
            let corrupt = |e: &dyn std::fmt::Display| {
                bad(&self.origin, format!("is corrupt (its tunings, section {section}, are not valid: {e})")).to_string()
            };
            let tunings: Vec<ShippedTuning> = serde_json::from_slice(&raw).map_err(|e| corrupt(&e))?;
            for t in &tunings {
                check_tuning(t).map_err(|e| corrupt(&format!("the tuning of kernel {} for key {:?}: {e}", t.kernel, t.tuning_key)))?;
            }
            Ok(tunings)
        };
        match self.tunings.get_or_init(read) {
            Ok(t) => Ok(t),
            Err(e) => Err(Error::Bundle(e.clone())),
        }
    }

    /// The shipped tuning of key `key` (the tuner's), if the bundle has one.
    pub fn tuning(&self, key: &str) -> Result<Option<&ShippedTuning>> {
        Ok(self.tunings()?.iter().find(|t| t.key == key))
    }

    /// Verify every section's checksum (and that it inflates), every program's record and
    /// description, the tunings, and that the lookup table lists each program as its record
    /// says, and nothing else: what `python -m caijit bundle info` and baking do; loading
    /// verifies sections lazily.
    pub fn verify(&self) -> Result<()> {
        for i in 0..self.sections.len() {
            self.section(i)?;
        }
        self.tunings()?;
        let mut exprs = 0;
        for p in self.programs()? {
            self.details(p)?;
            let mut own: Vec<&String> = p.name_expressions.iter().collect();
            own.sort_unstable();
            own.dedup();
            exprs += own.len();
        }
        // Each program's name expressions are listed (its record was checked): no others are.
        if exprs != self.lookup.exprs().len() {
            return Err(bad(
                &self.origin,
                format!(
                    "is corrupt (its lookup table has {} name expression records; its programs have {exprs} name expressions)",
                    self.lookup.exprs().len()
                ),
            ));
        }
        Ok(())
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
    /// How many programs it holds.
    pub fn program_count(&self) -> usize {
        self.slots.len()
    }

    /// Every program, in order: each one's record read (and verified) at its first use, so
    /// an error if one is damaged.
    pub fn programs(&self) -> Result<Vec<&BundledProgram>> {
        (0..self.slots.len()).map(|i| self.program_at(i)).collect()
    }

    /// The program of bundle key `key`: `Ok(None)` when the bundle has none, `Err` when its
    /// record is damaged.
    pub fn program(&self, key: &str) -> Result<Option<&BundledProgram>> {
        let Some(i) = self.lookup.by_key(&digest(key)) else { return Ok(None) };
        let p = self.program_at(i)?;
        // The table listed its record's key (checked when the record was read).
        self.confirm(p, p.key == key)
    }

    /// The program of bundle key `key`, else the first of family `family` that has every
    /// name expression of `exprs`: a binary search of the lookup table, then that program's
    /// record read (at its first use). `Err` when the record is damaged.
    pub fn find(&self, key: &str, family: &str, exprs: &[String]) -> Result<Option<&BundledProgram>> {
        if let Some(p) = self.program(key)? {
            return Ok(Some(p));
        }
        let digests: Vec<[u8; DIGEST]> = exprs.iter().map(|e| digest(e)).collect();
        let Some(i) = self.lookup.by_family(&digest(family), &digests) else { return Ok(None) };
        let p = self.program_at(i)?;
        self.confirm(p, p.family == family && exprs.iter().all(|e| p.name_expressions.contains(e)))
    }

    /// `program`, found by the lookup table, if it is what was looked for (`is`): a table
    /// naming another program is corruption, never that program served.
    fn confirm<'a>(&self, program: &'a BundledProgram, is: bool) -> Result<Option<&'a BundledProgram>> {
        if !is {
            return Err(bad(
                &self.origin,
                format!("is corrupt (its lookup table names program {}, which is not what was looked up)", program.position),
            ));
        }
        Ok(Some(program))
    }

    /// The PTX `.entry` declarations of `program` (what its stored parameter layouts are
    /// checked against, or without them read from).
    pub fn entries(&self, program: &BundledProgram) -> Result<String> {
        self.own(program)?;
        self.text_section(program.entries_section)
    }

    /// The code of `program` for a device of architecture `arch`: the CUBIN of the newest
    /// architecture of the same major version not newer than `arch` (a CUBIN runs on such
    /// devices), else the PTX when its architecture is not newer than `arch` (the driver
    /// compiles it). `Err`: a message saying what the bundle has.
    pub fn image(&self, program: &BundledProgram, arch: u32) -> Result<(ImageRef, Vec<u8>)> {
        self.own(program)?;
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

    /// What names the contents of `image` of program `p`: the program's key (its source,
    /// options and headers), the NVRTC build that compiled it, the architecture and kind,
    /// and the checksum of the stored bytes. (Two bundles holding the same program compiled
    /// by the same NVRTC build for the same architecture hold the same code.)
    pub fn image_identity(&self, p: &BundledProgram, image: &ImageRef) -> [u8; DIGEST] {
        let crc = self.sections.get(image.section).map_or(0, |s| s.crc32);
        let kind = match image.kind {
            ImageKind::Cubin => "cubin",
            ImageKind::Ptx => "ptx",
        };
        digest(&format!("{}\0{}\0{}\0{kind}\0{crc:08x}", p.key, self.nvrtc_build, image.arch))
    }

    /// A listing: the bundle's versions, architectures, and each program's kernels with
    /// their parameters (`python -m caijit bundle info`). Reads every program's
    /// description (an error if one is damaged).
    pub fn describe(&self) -> Result<String> {
        let mut s = format!(
            "{}: caijit bundle format {FORMAT_VERSION}, caijit {CAIJIT_VERSION}, NVRTC {} (build {})\narchitectures: {}\n",
            self.origin,
            self.nvrtc,
            self.nvrtc_build,
            self.archs.iter().map(|a| format!("sm_{a}")).collect::<Vec<_>>().join(", "),
        );
        s.push_str(&format!("{} bytes, {} programs\n", self.data.len(), self.slots.len()));
        for p in self.programs()? {
            let images: Vec<String> = p
                .images
                .iter()
                .map(|i| {
                    let size = self.sections.get(i.section).map_or(0, |s| s.len);
                    match i.kind {
                        ImageKind::Cubin => format!("sm_{} cubin {size} B", i.arch),
                        ImageKind::Ptx => format!("compute_{} ptx {size} B", i.arch),
                    }
                })
                .collect();
            let d = self.details(p)?;
            s.push_str(&format!(
                "\nprogram {} (key {}, source sha256 {})\n  options: {:?}\n  images: {}\n",
                p.name,
                p.key.chars().take(16).collect::<String>(),
                d.source_sha256.chars().take(16).collect::<String>(),
                d.options,
                images.join(", ")
            ));
            for k in &d.kernels {
                let params: Vec<String> = k
                    .params
                    .iter()
                    .map(|q| format!("{} {} @{}+{}", q.cpp_type, q.name.as_deref().unwrap_or("_"), q.offset, q.size))
                    .collect();
                s.push_str(&format!("  kernel {}({})\n", k.name, params.join(", ")));
            }
        }
        let tunings = self.tunings()?;
        if !tunings.is_empty() {
            s.push_str(&format!("\n{} tunings (autotune results, launched without timing)\n", tunings.len()));
            for t in tunings {
                s.push_str(&format!(
                    "  kernel {} on {}, key {:?}: {} ({:.3} µs)\n",
                    t.kernel, t.device, t.tuning_key, t.winner, t.median_us
                ));
            }
        }
        Ok(s)
    }
}
