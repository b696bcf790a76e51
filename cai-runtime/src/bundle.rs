//! Kernel bundles: compiled programs shipped in one file, launched without NVRTC.
//!
//! A bundle (`app.caijit`) holds, for each program it was baked from, a CUBIN per
//! architecture (and PTX of the newest one, for devices newer than every CUBIN), the
//! `.entry` declarations its parameter layouts are checked against (or, without stored
//! layouts, read from), the lowered names of its kernels, and a description (source hash,
//! options, kernels and their parameters, and their layouts as the bake made them).
//! `docs/bundles.md` documents the format; this module reads and writes it and keeps the
//! bundles a process has loaded. It knows nothing of CUDA: compilation looks programs up
//! here (`compile::bundled`), and baking (`compile::bake`) writes bundles.
//!
//! # Format
//! `MAGIC`, the format version (u32 LE), the section count (u32 LE), the table of contents
//! (per section `kind: u32, flags: u32, offset: u64, stored length: u64, length: u64` (LE)
//! and the CRC-32 of its stored bytes), the CRC-32 of everything before it, then the
//! sections' stored bytes. Flag bit 0: the stored bytes are raw DEFLATE (RFC 1951).
//! Section 0 is the metadata (JSON: versions, architectures, the number of programs);
//! section 1 the lookup table: fixed-size records, sorted, that map the SHA-256 of a bundle
//! key, of a family key, and of a family key with a name expression, to a program number,
//! and each program number to the section of the program's record (JSON: its key, name,
//! name expressions, kernels and the positions of its other sections).
//!
//! Opening a bundle reads the header, the table of contents, the metadata and the lookup
//! table, and checks those (and that every section lies within the file, and that the
//! table's records are in order and name programs that exist); a section's checksum is
//! checked and its bytes inflated only when it is first used (a program's record when a
//! lookup finds it, its description, its `.entry` declarations and the code for the
//! device when one of its instances is looked up). A lookup is a binary search of the
//! table, in place: opening a bundle and finding a program cost nearly the same however
//! many programs it holds. A bundle file is kept open and read a section at a time, never
//! whole.
//!
//! # Examples
//! ```no_run
//! let bundle = cai_runtime::bundle::Bundle::open("app.caijit")?;
//! for p in bundle.programs()? {
//!     println!("{} ({} kernels)", p.name, p.kernel_names.len());
//! }
//! cai_runtime::bundle::install(bundle)?;
//! # Ok::<(), cai_runtime::Error>(())
//! ```

use std::borrow::Cow;
use std::path::Path;
use std::sync::{Arc, OnceLock, RwLock};

use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::stats::timing::{self, LoadPhase};
use crate::{Error, Result};

/// The first eight bytes of every bundle.
pub const MAGIC: &[u8; 8] = b"CAIJITBN";
/// The format version this caijit reads and writes.
pub const FORMAT_VERSION: u32 = 4;
/// The caijit version a bundle must have been baked by (its keys and layouts are this
/// version's).
pub const CAIJIT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Section kinds.
/// The metadata (JSON), section 0: versions, architectures, the number of programs.
pub const SECTION_METADATA: u32 = 1;
pub const SECTION_CUBIN: u32 = 2;
pub const SECTION_PTX: u32 = 3;
pub const SECTION_ENTRIES: u32 = 4;
/// A program's description (JSON): what its record leaves out.
pub const SECTION_DESCRIPTION: u32 = 5;
/// The lookup table (binary), section 1.
pub const SECTION_LOOKUP: u32 = 6;
/// A program's record (JSON): what a lookup needs, and where its other sections are.
pub const SECTION_RECORD: u32 = 7;

const FLAG_DEFLATE: u32 = 1;
/// Bytes of the header before the table of contents, and of one entry of it.
const HEADER: usize = 16;
const TOC_ENTRY: usize = 36;
/// The CRC-32 after the table of contents.
const TOC_CHECKSUM: usize = 4;
const DIGEST: usize = 32;
/// Bytes of the lookup table's header (program count, name expression record count), of a
/// key or family record (digest, program number), and of a name expression record (family
/// digest, name expression digest, program number).
const LOOKUP_HEADER: usize = 8;
const KEY_RECORD: usize = DIGEST + 4;
const EXPR_RECORD: usize = 2 * DIGEST + 4;
/// No section is stored in, or inflates to, more than this (a corrupt length must not
/// exhaust memory).
const MAX_SECTION: u64 = 1 << 30;
/// No bundle has more sections than this (its table of contents is read whole at open).
const MAX_SECTIONS: usize = 1 << 20;

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

/// A kernel parameter as a program's description lists it (for listings; launches read the
/// description's stored layouts, `compile::bundled`).
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

/// One bundled program, as its record lists it: what a lookup needs. The rest
/// ([`ProgramDetails`]) is read when it is first asked for ([`Bundle::details`]).
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
    pub name_expressions: Vec<String>,
    /// Its kernels' names (the name expression, else the qualified name).
    pub kernel_names: Vec<String>,
    /// The section holding its [`ProgramDetails`].
    pub description_section: usize,
    /// The section holding the PTX `.entry` declarations.
    pub entries_section: usize,
    pub images: Vec<ImageRef>,
    /// Its position among the bundle's programs.
    position: usize,
}

/// What the bundle says of a program beyond its record (its description section).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProgramDetails {
    pub source_sha256: String,
    pub options: Vec<String>,
    /// What NVRTC was given for the newest architecture.
    pub nvrtc_options: Vec<String>,
    /// `(name expression, lowered name)` of every expression NVRTC was given.
    pub lowered: Vec<(String, String)>,
    pub kernels: Vec<KernelSummary>,
    /// Every kernel's parameter layout as the bake described it (`compile::bundled` reads
    /// it; absent when a kernel could not be described, or the bundle predates it).
    pub layouts: Option<Value>,
}

/// The metadata (section 0) as stored.
#[derive(Deserialize)]
struct StoredMetadata {
    caijit: String,
    #[serde(default)]
    nvrtc: String,
    #[serde(default)]
    nvrtc_build: String,
    archs: Vec<u32>,
    programs: usize,
}

/// A program's record as stored: what [`Bundle::program_at`] reads into a [`BundledProgram`].
#[derive(Deserialize)]
struct StoredProgram {
    key: String,
    family: String,
    name: String,
    name_expressions: Vec<String>,
    kernels: Vec<String>,
    description_section: usize,
    entries_section: usize,
    images: Vec<StoredImage>,
}

#[derive(Deserialize)]
struct StoredImage {
    arch: u32,
    kind: String,
    section: usize,
}

/// A program's description section as stored: what [`Bundle::details`] reads into
/// [`ProgramDetails`] (a kernel's listing is read leniently, as it is only shown).
#[derive(Deserialize)]
struct StoredDetails {
    source_sha256: String,
    options: Vec<String>,
    nvrtc_options: Vec<String>,
    lowered: Vec<(String, String)>,
    kernels: Vec<StoredKernel>,
    #[serde(default)]
    layouts: Option<Value>,
}

#[derive(Deserialize)]
struct StoredKernel {
    #[serde(default)]
    name: String,
    #[serde(default)]
    lowered: String,
    params: Vec<StoredParam>,
}

#[derive(Deserialize)]
struct StoredParam {
    #[serde(default)]
    name: Option<String>,
    #[serde(default, rename = "type")]
    cpp_type: String,
    #[serde(default)]
    offset: usize,
    #[serde(default)]
    size: usize,
}

/// One entry of the table of contents.
#[derive(Clone, Copy, Debug)]
struct Section {
    kind: u32,
    flags: u32,
    start: usize,
    stored: usize,
    len: u64,
    /// CRC-32 (zlib's) of the stored bytes.
    crc32: u32,
}

/// A bundle whose header, table of contents, metadata and lookup table were read and
/// verified; the other sections are verified when first used.
#[derive(Debug)]
pub struct Bundle {
    origin: String,
    data: Bytes,
    sections: Toc,
    /// The checksum of the header and table of contents (which hold every section's
    /// checksum): a bundle loaded again from the same file has the same.
    toc_crc32: u32,
    nvrtc: String,
    nvrtc_build: String,
    archs: Vec<u32>,
    lookup: Lookup,
    /// Each program's record and details, read at their first use (a failure is kept: the
    /// bytes do not change); a pointer each until then.
    slots: Vec<OnceLock<Box<Slot>>>,
}

#[derive(Debug)]
struct Slot {
    program: std::result::Result<BundledProgram, String>,
    details: OnceLock<std::result::Result<ProgramDetails, String>>,
}

/// The table of contents as read at open (its checksum, and that its sections follow each
/// other to the end of the file, verified then): an entry is decoded when its section is
/// used, so that opening allocates nothing per section.
#[derive(Debug, Default)]
struct Toc {
    raw: Vec<u8>,
    count: usize,
}

impl Toc {
    fn len(&self) -> usize {
        self.count
    }

    fn get(&self, i: usize) -> Option<Section> {
        if i >= self.count {
            return None;
        }
        let e = &self.raw[HEADER + i * TOC_ENTRY..HEADER + (i + 1) * TOC_ENTRY];
        let u32_at = |k: usize| u32::from_le_bytes(e[k..k + 4].try_into().unwrap_or_default());
        let u64_at = |k: usize| u64::from_le_bytes(e[k..k + 8].try_into().unwrap_or_default());
        Some(Section {
            kind: u32_at(0),
            flags: u32_at(4),
            // Verified at open to lie within the file.
            start: u64_at(8) as usize,
            stored: u64_at(16) as usize,
            len: u64_at(24),
            crc32: u32_at(32),
        })
    }
}

/// The lookup table (section 1), its shape and order verified at open, searched in place.
///
/// After its header (the program count `n` and the name expression record count `m`, u32
/// LE): `n` section numbers (u32 LE), program `i`'s record's at `i`; then `n` key records
/// (the SHA-256 of a program's bundle key, its program number), `n` family records (of its
/// family key), and `m` name expression records (the SHA-256 of a family key, of one of the
/// program's name expressions, its program number). Program numbers there are u32
/// big-endian, so that each list, sorted by its records' bytes, is sorted by digest, then
/// program number; each is strictly increasing.
#[derive(Debug, Default)]
struct Lookup {
    raw: Vec<u8>,
    programs: usize,
}

impl Lookup {
    /// The table in `raw`, for a bundle of `sections`; `Err`: what is wrong with it.
    fn parse(raw: Vec<u8>, sections: &Toc) -> std::result::Result<Lookup, String> {
        let count = |at: usize| raw.get(at..at + 4).map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap_or_default()) as usize);
        let (n, m) = (count(0), count(4));
        // Every program has a record section of its own: `n` is bounded by the sections.
        if raw.len() < LOOKUP_HEADER || n > sections.len() || m > raw.len() / EXPR_RECORD {
            return Err(format!("its counts ({n} programs, {m} name expression records) are not valid"));
        }
        let want = LOOKUP_HEADER + n * (4 + 2 * KEY_RECORD) + m * EXPR_RECORD;
        if raw.len() != want {
            return Err(format!("it is {} bytes, not the {want} of {n} programs and {m} name expression records", raw.len()));
        }
        let lookup = Lookup { raw, programs: n };
        for i in 0..n {
            let s = lookup.record_section(i);
            if sections.get(s).map(|s| s.kind) != Some(SECTION_RECORD) {
                return Err(format!("program {i}'s record is section {s}, which is not a program record"));
            }
        }
        check(lookup.keys(), "key", n, true)?;
        check(lookup.families(), "family", n, true)?;
        check(lookup.exprs(), "name expression", n, false)?;
        Ok(lookup)
    }

    /// The section of program `i`'s record (`i` below the program count).
    fn record_section(&self, i: usize) -> usize {
        let at = LOOKUP_HEADER + 4 * i;
        u32::from_le_bytes(self.raw[at..at + 4].try_into().unwrap_or_default()) as usize
    }

    fn keys(&self) -> &[[u8; KEY_RECORD]] {
        let at = LOOKUP_HEADER + 4 * self.programs;
        self.raw[at..at + KEY_RECORD * self.programs].as_chunks().0
    }

    fn families(&self) -> &[[u8; KEY_RECORD]] {
        let at = LOOKUP_HEADER + (4 + KEY_RECORD) * self.programs;
        self.raw[at..at + KEY_RECORD * self.programs].as_chunks().0
    }

    fn exprs(&self) -> &[[u8; EXPR_RECORD]] {
        self.raw[LOOKUP_HEADER + (4 + 2 * KEY_RECORD) * self.programs..].as_chunks().0
    }

    /// The programs whose records in `table` start with `prefix`, lowest first.
    fn matching<'a, const W: usize>(table: &'a [[u8; W]], prefix: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
        let first = table.partition_point(|r| &r[..prefix.len()] < prefix);
        table[first..].iter().take_while(move |r| r.starts_with(prefix)).map(|r| program_of(r))
    }

    /// The lowest program of bundle key digest `key`.
    fn by_key(&self, key: &[u8; DIGEST]) -> Option<usize> {
        Lookup::matching(self.keys(), key).next()
    }

    /// The lowest program of family digest `family` that has every name expression of
    /// digests `exprs`.
    fn by_family(&self, family: &[u8; DIGEST], exprs: &[[u8; DIGEST]]) -> Option<usize> {
        let Some((first, rest)) = exprs.split_first() else { return Lookup::matching(self.families(), family).next() };
        let mut prefix = [0; 2 * DIGEST];
        prefix[..DIGEST].copy_from_slice(family);
        prefix[DIGEST..].copy_from_slice(first);
        let found = Lookup::matching(self.exprs(), &prefix).find(|&p| rest.iter().all(|e| self.has_expr(family, e, p)));
        found
    }

    fn has_expr(&self, family: &[u8; DIGEST], expr: &[u8; DIGEST], program: usize) -> bool {
        self.exprs().binary_search(&expr_record(family, expr, program)).is_ok()
    }
}

/// `table` (of `what` records) is strictly increasing and names programs below `n`, each
/// exactly once when `once`; `Err`: what is wrong.
fn check<const W: usize>(table: &[[u8; W]], what: &str, n: usize, once: bool) -> std::result::Result<(), String> {
    if table.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("its {what} records are not in order"));
    }
    let mut seen = vec![false; if once { n } else { 0 }];
    for r in table {
        let p = program_of(r);
        if p >= n {
            return Err(format!("a {what} record names program {p}, of {n}"));
        }
        if once && std::mem::replace(&mut seen[p], true) {
            return Err(format!("program {p} has more than one {what} record"));
        }
    }
    // `n` records, each program at most once: each exactly once.
    Ok(())
}

/// The program number at the end of a lookup record.
fn program_of(record: &[u8]) -> usize {
    u32::from_be_bytes(record[record.len() - 4..].try_into().unwrap_or_default()) as usize
}

fn key_record(digest: &[u8; DIGEST], program: usize) -> [u8; KEY_RECORD] {
    let mut r = [0; KEY_RECORD];
    r[..DIGEST].copy_from_slice(digest);
    r[DIGEST..].copy_from_slice(&(program as u32).to_be_bytes());
    r
}

fn expr_record(family: &[u8; DIGEST], expr: &[u8; DIGEST], program: usize) -> [u8; EXPR_RECORD] {
    let mut r = [0; EXPR_RECORD];
    r[..DIGEST].copy_from_slice(family);
    r[DIGEST..2 * DIGEST].copy_from_slice(expr);
    r[2 * DIGEST..].copy_from_slice(&(program as u32).to_be_bytes());
    r
}

/// What the lookup table holds of a key, a family key or a name expression: the SHA-256 of
/// its text.
fn digest(text: &str) -> [u8; DIGEST] {
    Sha256::digest(text.as_bytes()).into()
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
fn inflate(packed: &[u8], len: usize) -> std::result::Result<Vec<u8>, String> {
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

/// `raw` as raw DEFLATE, at libdeflate's strongest level (a bundle is written once and read
/// often), if that is smaller.
fn deflate(raw: &[u8]) -> Option<Vec<u8>> {
    let mut c = libdeflater::Compressor::new(libdeflater::CompressionLvl::best());
    let mut out = vec![0; c.deflate_compress_bound(raw.len())];
    let n = c.deflate_compress(raw, &mut out).ok()?;
    out.truncate(n);
    (n < raw.len()).then_some(out)
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
        // Opened without blocking (a FIFO nobody writes would block `open` itself), then
        // refused unless it is a regular file.
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(unreadable)?;
        let meta = file.metadata().map_err(unreadable)?;
        if !meta.is_file() {
            let what = crate::error::file_kind_name(meta.file_type());
            return Err(bad(&origin, format!("is {what}, not a regular file: a bundle is a file `python -m caijit bundle build` wrote")));
        }
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
        let slot =
            slot.get_or_init(|| Box::new(Slot { program: self.read_program(i).map_err(|e| e.to_string()), details: OnceLock::new() }));
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
    fn own(&self, program: &BundledProgram) -> Result<&Slot> {
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
    fn section(&self, i: usize) -> Result<Vec<u8>> {
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

    /// Verify every section's checksum (and that it inflates), every program's record and
    /// description, and that the lookup table lists each program as its record says, and
    /// nothing else: what `python -m caijit bundle info` and baking do; loading verifies
    /// sections lazily.
    pub fn verify(&self) -> Result<()> {
        for i in 0..self.sections.len() {
            self.section(i)?;
        }
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
        Ok(s)
    }
}

/// One program to write into a bundle.
#[derive(Clone, Debug, Default)]
pub struct ProgramBlobs {
    /// The program's description (`key`, `name`, … as `docs/bundles.md` lists): its own
    /// section; [`write()`] puts what lookups need into its record and the lookup table.
    pub description: Value,
    pub entries: String,
    /// `(arch, CUBIN)`.
    pub cubins: Vec<(u32, Vec<u8>)>,
    /// `(arch, PTX)`, if any.
    pub ptx: Option<(u32, String)>,
}

/// Write a bundle's bytes to `path` whole, or not at all: into a temporary file beside it,
/// then renamed over it. A process that has the old file open (bundles are read a section
/// at a time) keeps reading the old bytes, never a mix.
pub fn save(path: &Path, bytes: &[u8]) -> Result<()> {
    let fail = |e: &dyn std::fmt::Display| Error::argument(format!("cannot write the bundle {}: {e}", path.display()));
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new().prefix(".caijit-bundle-").tempfile_in(dir).map_err(|e| fail(&e))?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(|e| fail(&e))?;
    // Readable as a file written directly would be (a temporary file is private).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o644)).map_err(|e| fail(&e))?;
    }
    tmp.persist(path).map_err(|e| fail(&e.error))?;
    Ok(())
}

/// Write a bundle: `nvrtc` / `nvrtc_build` name the compiler, `archs` the architectures
/// baked. Sections but the metadata and the lookup table are compressed (raw DEFLATE)
/// where that makes them smaller.
pub fn write(nvrtc: &str, nvrtc_build: &str, archs: &[u32], programs: Vec<ProgramBlobs>) -> Vec<u8> {
    let count = programs.len();
    let mut sections: Vec<(u32, Vec<u8>)> = vec![(SECTION_METADATA, Vec::new()), (SECTION_LOOKUP, Vec::new())];
    let (mut records, mut keys, mut families, mut exprs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (i, p) in programs.into_iter().enumerate() {
        let d = p.description;
        let text = |k: &str| d[k].as_str().unwrap_or_default().to_string();
        let (key, family) = (text("key"), text("family"));
        let names: Vec<String> =
            d["name_expressions"].as_array().map(|a| a.iter().filter_map(|e| e.as_str().map(str::to_owned)).collect()).unwrap_or_default();
        let kernel_names: Vec<&Value> = d["kernels"].as_array().map(|ks| ks.iter().map(|k| &k["name"]).collect()).unwrap_or_default();
        let mut record = json!({
            "key": key, "family": family, "name": d["name"], "name_expressions": names, "kernels": kernel_names,
        });
        records.push(sections.len() as u32);
        sections.push((SECTION_RECORD, Vec::new()));
        let record_section = sections.len() - 1;
        sections.push((SECTION_DESCRIPTION, serde_json::to_vec(&d).unwrap_or_default()));
        record["description_section"] = json!(sections.len() - 1);
        sections.push((SECTION_ENTRIES, p.entries.into_bytes()));
        record["entries_section"] = json!(sections.len() - 1);
        let mut images = Vec::new();
        for (arch, cubin) in p.cubins {
            sections.push((SECTION_CUBIN, cubin));
            images.push(json!({"arch": arch, "kind": "cubin", "section": sections.len() - 1}));
        }
        if let Some((arch, ptx)) = p.ptx {
            sections.push((SECTION_PTX, ptx.into_bytes()));
            images.push(json!({"arch": arch, "kind": "ptx", "section": sections.len() - 1}));
        }
        record["images"] = Value::Array(images);
        sections[record_section].1 = serde_json::to_vec(&record).unwrap_or_default();
        let family = digest(&family);
        keys.push(key_record(&digest(&key), i));
        families.push(key_record(&family, i));
        exprs.extend(names.iter().map(|e| expr_record(&family, &digest(e), i)));
    }
    keys.sort_unstable();
    families.sort_unstable();
    exprs.sort_unstable();
    exprs.dedup();
    let mut lookup = Vec::with_capacity(LOOKUP_HEADER + count * (4 + 2 * KEY_RECORD) + exprs.len() * EXPR_RECORD);
    lookup.extend_from_slice(&(count as u32).to_le_bytes());
    lookup.extend_from_slice(&(exprs.len() as u32).to_le_bytes());
    lookup.extend(records.iter().flat_map(|s| s.to_le_bytes()));
    lookup.extend(keys.iter().chain(&families).flatten());
    lookup.extend(exprs.iter().flatten());
    sections[1].1 = lookup;
    let metadata = json!({
        "format": FORMAT_VERSION,
        "caijit": CAIJIT_VERSION,
        "nvrtc": nvrtc,
        "nvrtc_build": nvrtc_build,
        "archs": archs,
        "programs": count,
    });
    sections[0].1 = serde_json::to_vec(&metadata).unwrap_or_default();
    seal(sections)
}

/// A bundle of `sections` (kind, bytes): each compressed where that makes it smaller but
/// the metadata and the lookup table (read at every open: inflating them would take longer
/// than reading them), the table of contents and its checksum before them.
fn seal(sections: Vec<(u32, Vec<u8>)>) -> Vec<u8> {
    let stored: Vec<(u32, u32, Vec<u8>, u64)> = sections
        .into_iter()
        .map(|(kind, raw)| {
            let len = raw.len() as u64;
            match if matches!(kind, SECTION_METADATA | SECTION_LOOKUP) { None } else { deflate(&raw) } {
                Some(packed) => (kind, FLAG_DEFLATE, packed, len),
                None => (kind, 0, raw, len),
            }
        })
        .collect();
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(stored.len() as u32).to_le_bytes());
    let mut offset = (HEADER + stored.len() * TOC_ENTRY + TOC_CHECKSUM) as u64;
    for (kind, flags, bytes, len) in &stored {
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&libdeflater::crc32(bytes).to_le_bytes());
        offset += bytes.len() as u64;
    }
    let toc = libdeflater::crc32(&out);
    out.extend_from_slice(&toc.to_le_bytes());
    for (_, _, bytes, _) in stored {
        out.extend_from_slice(&bytes);
    }
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

/// Make `bundle` searched by every compilation of this process (after those of
/// `CAIJIT_BUNDLES` and those loaded before it). A bundle already loaded (same origin and
/// contents) is not added twice. Every program record is read first: a bundle with a
/// damaged one is an error, and is not loaded.
pub fn install(bundle: Bundle) -> Result<Arc<Bundle>> {
    bundle.programs()?;
    // `CAIJIT_BUNDLES` comes first however the process began (its error is reported by
    // the compilations that search the bundles).
    let _ = from_env();
    Ok(insert(bundle))
}

/// The bundle at `path` with every program record read (a damaged one is an error).
fn open_whole(path: &Path) -> Result<Bundle> {
    let b = Bundle::open(path)?;
    b.programs()?;
    Ok(b)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn blobs(key: &str, family: &str, exprs: &[&str]) -> ProgramBlobs {
        let lowered: Vec<Value> = exprs.iter().map(|e| json!([e, "_Z1kIfEvPT_"])).collect();
        let kernels: Vec<Value> = exprs
            .iter()
            .map(|e| json!({"name": e, "lowered": "_Z1kIfEvPT_", "params": [{"name": "x", "type": "float*", "offset": 0, "size": 8}]}))
            .collect();
        ProgramBlobs {
            description: json!({
                "key": key, "family": family, "name": "k.cu", "source_sha256": "cd".repeat(32), "options": ["-O3"],
                "name_expressions": exprs, "nvrtc_options": ["-arch=sm_90"], "lowered": lowered, "kernels": kernels,
            }),
            entries: ".entry _Z1kIfEvPT_(\n.param .u64 _Z1kIfEvPT__param_0\n)".into(),
            cubins: vec![(80, vec![7; 4000]), (90, vec![9; 4000])],
            ptx: Some((90, "// ptx for compute_90".into())),
        }
    }

    fn sample() -> Vec<u8> {
        write("13.0", "build-id", &[80, 90], vec![blobs(&"ab".repeat(32), &"ef".repeat(32), &["k<float>"])])
    }

    /// Programs of one family with overlapping name expressions, and one of another family
    /// without any.
    fn several() -> Vec<u8> {
        let (f, g) = ("ef".repeat(32), "01".repeat(32));
        let programs = vec![
            blobs("key a", &f, &["k<a>", "k<b>"]),
            blobs("key b", &f, &["k<b>", "k<c>"]),
            blobs("key c", &g, &[]),
            blobs("key d", &f, &["k<c>", "k<d>", "k<a>"]),
        ];
        write("13.0", "build-id", &[80, 90], programs)
    }

    /// Every section of `bundle`, inflated, to change and [`seal`] again.
    fn sections_of(bundle: &[u8]) -> Vec<(u32, Vec<u8>)> {
        let b = Bundle::from_vec(bundle.to_vec(), "t").unwrap();
        (0..b.sections.len()).map(|i| (b.sections.get(i).unwrap().kind, b.section(i).unwrap())).collect()
    }

    #[test]
    fn round_trip_and_architecture_choice() {
        let b = Bundle::from_vec(sample(), "t").unwrap();
        assert_eq!((b.archs(), b.program_count()), (&[80, 90][..], 1));
        let p = b.program(&"ab".repeat(32)).unwrap().unwrap();
        assert!(b.program("other").unwrap().is_none());
        // By family: a subset of its name expressions, not another one.
        let (family, float) = ("ef".repeat(32), vec!["k<float>".to_string()]);
        let found = |family: &str, exprs: &[String]| b.find("other", family, exprs).unwrap().map(|p| p.key.clone());
        assert_eq!(found(&family, &float), Some(p.key.clone()));
        assert_eq!(found(&family, &[]), Some(p.key.clone()));
        assert!(found(&family, &["k<int>".to_string()]).is_none());
        assert!(found("other", &float).is_none());
        assert_eq!(p.kernel_names, ["k<float>"]);
        assert_eq!(b.details(p).unwrap().lowered, vec![("k<float>".to_string(), "_Z1kIfEvPT_".to_string())]);
        assert!(b.entries(p).unwrap().contains(".param .u64"));
        // sm_86 runs the sm_80 CUBIN, sm_90 its own, sm_100 JITs the PTX.
        let (im, bytes) = b.image(p, 86).unwrap();
        assert_eq!((im.arch, im.kind, bytes), (80, ImageKind::Cubin, vec![7; 4000]));
        assert_eq!(b.image(p, 90).unwrap().0.arch, 90);
        let (im, bytes) = b.image(p, 100).unwrap();
        assert_eq!((im.kind, bytes), (ImageKind::Ptx, b"// ptx for compute_90".to_vec()));
        let e = b.image(p, 75).unwrap_err().to_string();
        assert!(e.contains("no code for this device's architecture sm_75") && e.contains("sm_80, sm_90"), "{e}");
        let listing = b.describe().unwrap();
        assert!(listing.contains("kernel k<float>(float* x @0+8)"), "{listing}");
        assert!(b.verify().is_ok());
        // Compressed: 8000 bytes of CUBIN take far less.
        assert!(sample().len() < 2000);
    }

    /// A lookup finds the program of its exact key, else the first program of its family
    /// that has every name expression it asks for, as a search of every record would.
    #[test]
    fn a_lookup_finds_the_first_program_of_the_key_or_the_family() {
        let b = Bundle::from_vec(several(), "t").unwrap();
        let (f, g) = ("ef".repeat(32), "01".repeat(32));
        let find = |key: &str, family: &str, exprs: &[&str]| {
            let exprs: Vec<String> = exprs.iter().map(|e| e.to_string()).collect();
            let found = b.find(key, family, &exprs).unwrap().map(|p| p.position);
            // The rule, over every program's record.
            let programs = b.programs().unwrap();
            let want = programs
                .iter()
                .position(|p| p.key == key)
                .or_else(|| programs.iter().position(|p| p.family == family && exprs.iter().all(|e| p.name_expressions.contains(e))));
            assert_eq!(found, want, "{key} {family} {exprs:?}");
            found
        };
        assert_eq!(find("key c", &f, &["k<a>"]), Some(2), "the key first");
        assert_eq!(find("none", &f, &["k<b>"]), Some(0), "the first of several");
        assert_eq!(find("none", &f, &["k<c>"]), Some(1));
        assert_eq!(find("none", &f, &["k<c>", "k<a>"]), Some(3));
        assert_eq!(find("none", &f, &["k<a>", "k<c>", "k<a>"]), Some(3));
        assert_eq!(find("none", &f, &["k<d>", "k<b>"]), None);
        assert_eq!(find("none", &f, &[]), Some(0));
        assert_eq!(find("none", &g, &[]), Some(2));
        assert_eq!(find("none", &g, &["k<a>"]), None);
        assert_eq!(find("none", "other", &[]), None);
        // Only the programs looked up are read.
        let b = Bundle::from_vec(several(), "t").unwrap();
        b.find("none", &f, &["k<c>".to_string()]).unwrap();
        let read: Vec<bool> = b.slots.iter().map(|s| s.get().is_some()).collect();
        assert_eq!(read, [false, true, false, false]);
        assert!(b.verify().is_ok());
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
        let flip = |at: usize| {
            let mut b = good.clone();
            b[at] ^= 1;
            b
        };
        // The table of contents, the metadata and the lookup table: refused at load.
        let sections = Bundle::from_vec(good.clone(), "t").unwrap().sections;
        assert!(err(flip(HEADER + 3)).contains("checksum of its table of contents"));
        assert!(err(flip(sections.get(0).unwrap().start + 1)).contains("checksum of section 0"));
        assert!(err(flip(sections.get(1).unwrap().start + 1)).contains("checksum of section 1"));
        // Another format version: versions 2 and 3 of caijit before this one, or any other.
        for v in [2, 3, 9] {
            let mut version = good.clone();
            version[8] = v;
            let e = err(version);
            assert!(e.contains(&format!("has format version {v}; this caijit ({CAIJIT_VERSION}) reads version 4")), "{e}");
        }
        assert!(err(b"ELF\x7f not a bundle at all, but long enough for a header".to_vec()).contains("not a caijit bundle"));
        // Another caijit version's bundle, correctly sealed.
        let other = write_metadata(json!({"format": FORMAT_VERSION, "caijit": "0.0.0-other", "archs": [], "programs": 0}));
        assert!(err(other).contains("was built by caijit 0.0.0-other"));
        // Another version's metadata of another shape is still named by its version; this
        // version's without what the metadata has is corrupt.
        let reshaped = write_metadata(json!({"caijit": "9.9.9", "programs": {"renamed": true}}));
        assert!(err(reshaped).contains("was built by caijit 9.9.9"));
        let e = err(write_metadata(json!({"caijit": CAIJIT_VERSION, "programs": 0})));
        assert!(e.contains("is corrupt (its metadata is not valid: missing field `archs`"), "{e}");
        assert!(err(write_metadata(json!("text"))).contains("metadata is not valid"));
        let e = err(write_metadata(json!({"caijit": CAIJIT_VERSION, "archs": [], "programs": 0})));
        assert!(e.contains("its second section is not the lookup table"), "{e}");
    }

    /// A lookup table that is not what the format says (its length, counts, order, program
    /// numbers, record sections) is refused at load; one whose records name the wrong
    /// programs makes a lookup an error, never another program served, and `verify` finds it.
    #[test]
    fn a_malformed_lookup_table_is_an_error_not_a_wrong_program() {
        let good = several();
        let n = 4;
        let table = sections_of(&good)[1].1.clone();
        let (keys, families, exprs) =
            (LOOKUP_HEADER + 4 * n, LOOKUP_HEADER + (4 + KEY_RECORD) * n, LOOKUP_HEADER + (4 + 2 * KEY_RECORD) * n);
        let with = |change: &dyn Fn(&mut Vec<u8>)| {
            let mut sections = sections_of(&good);
            change(&mut sections[1].1);
            Bundle::from_vec(seal(sections), "t")
        };
        let refused = |change: &dyn Fn(&mut Vec<u8>), why: &str| {
            let Err(e) = with(change) else { panic!("{why}: accepted") };
            let e = e.to_string();
            assert!(e.contains("is corrupt (its lookup table is not valid: ") && e.contains(why), "{why}: {e}");
        };
        refused(&|t| t.truncate(t.len() - 1), "it is 787 bytes, not the 788 of 4 programs and 7 name expression records");
        refused(&|t| t.truncate(4), "counts");
        refused(&|t| t[4] = 200, "counts");
        refused(&|t| t[0] = 200, "counts");
        // The first two records of a list exchanged.
        let swap = |t: &mut Vec<u8>, at: usize, width: usize| {
            let (first, second) = t[at..].split_at_mut(width);
            first.swap_with_slice(&mut second[..width]);
        };
        refused(&|t| swap(t, keys, KEY_RECORD), "key records are not in order");
        refused(&|t| swap(t, exprs, EXPR_RECORD), "name expression records are not in order");
        // The last record of a list given a larger program number (still in order).
        refused(&|t| t[exprs - 1] = 9, "a family record names program 9, of 4");
        refused(&|t| *t.last_mut().unwrap() = 4, "a name expression record names program 4, of 4");
        refused(&|t| t[LOOKUP_HEADER] = 3, "program 0's record is section 3, which is not a program record");
        refused(&|t| t[LOOKUP_HEADER] = 200, "program 0's record is section 200");
        // The second key record made the first's program's (still in order, by digest).
        refused(&|t| t[keys + 2 * KEY_RECORD - 1] = t[keys + KEY_RECORD - 1], "more than one key record");
        // The metadata counts other programs than the table.
        let mut sections = sections_of(&good);
        let mut meta: Value = serde_json::from_slice(&sections[0].1).unwrap();
        meta["programs"] = json!(5);
        sections[0].1 = serde_json::to_vec(&meta).unwrap();
        let e = Bundle::from_vec(seal(sections), "t").unwrap_err().to_string();
        assert!(e.contains("its metadata counts 5 programs, its lookup table 4"), "{e}");

        // Well formed, but wrong: the records of programs 0 and 2 swapped (their key records'
        // program numbers exchanged, kept in order).
        let swapped = with(&|t| {
            t.copy_from_slice(&table);
            for r in t[keys..families].chunks_exact_mut(KEY_RECORD) {
                match program_of(r) {
                    0 => r[KEY_RECORD - 1] = 2,
                    2 => r[KEY_RECORD - 1] = 0,
                    _ => {}
                }
            }
        })
        .unwrap();
        let e = swapped.program("key a").unwrap_err().to_string();
        assert!(e.contains("does not match the lookup table"), "{e}");
        assert!(swapped.verify().is_err());
        // A name expression record too many: a lookup by it finds a program without it.
        let f = digest(&"ef".repeat(32));
        let extra = with(&|t| {
            let mut records: Vec<[u8; EXPR_RECORD]> = t[exprs..].as_chunks().0.to_vec();
            records.push(expr_record(&f, &digest("k<z>"), 1));
            records.sort_unstable();
            t.truncate(exprs);
            t.extend(records.iter().flatten());
            t[4] += 1;
        })
        .unwrap();
        let e = extra.find("none", &"ef".repeat(32), &["k<z>".to_string()]).unwrap_err().to_string();
        assert!(e.contains("its lookup table names program 1, which is not what was looked up"), "{e}");
        assert!(extra.program("key b").unwrap().is_some(), "the other lookups still work");
        let e = extra.verify().unwrap_err().to_string();
        assert!(e.contains("has 8 name expression records; its programs have 7 name expressions"), "{e}");
        // A name expression record too few: a miss (as a search of every record would not
        // be), and `verify` finds it.
        let fewer = with(&|t| {
            t.truncate(t.len() - EXPR_RECORD);
            t[4] -= 1;
        })
        .unwrap();
        assert!(fewer.verify().unwrap_err().to_string().contains("does not match the lookup table"));
    }

    /// Checked, not reinterpreted: a program of another bundle is refused (not served this
    /// bundle's bytes), an architecture past `u32` is corruption (not read modulo 2^32), and
    /// a listing of non-ASCII keys is made, not a panic.
    #[test]
    fn foreign_programs_odd_numbers_and_odd_text_are_errors_not_reinterpreted() {
        let a = Bundle::from_vec(sample(), "a").unwrap();
        let b = Bundle::from_vec(sample(), "b").unwrap();
        let theirs = b.program_at(0).unwrap();
        for e in [a.image(theirs, 90).map(|_| ()), a.entries(theirs).map(|_| ()), a.details(theirs).map(|_| ())] {
            assert!(e.unwrap_err().to_string().contains("not one of bundle a's"));
        }
        let huge = write_metadata(json!({"format": FORMAT_VERSION, "caijit": CAIJIT_VERSION, "archs": [(1u64 << 32) + 90], "programs": 0}));
        let e = Bundle::from_vec(huge, "h").unwrap_err().to_string();
        assert!(e.contains("metadata is not valid") && e.contains("4294967386"), "{e}");
        let odd = write("13.0", "b", &[90], vec![blobs(&"ü".repeat(20), "f", &[])]);
        let odd = Bundle::from_vec(odd, "o").unwrap();
        assert!(odd.describe().unwrap().contains(&"ü".repeat(16)));
        assert!(odd.program(&"ü".repeat(20)).unwrap().is_some());
    }

    /// A section is verified when it is used, not at load: a damaged CUBIN of one
    /// architecture, or a damaged program record, costs nothing until it is asked for, and
    /// is an error naming the section then.
    #[test]
    fn sections_are_verified_when_first_used() {
        let good = several();
        let b = Bundle::from_vec(good.clone(), "t").unwrap();
        let p = b.program_at(0).unwrap();
        let sm80 = b.sections.get(p.images[0].section).unwrap();
        let mut damaged = good.clone();
        damaged[sm80.start + sm80.stored / 2] ^= 1;
        let d = Bundle::from_vec(damaged, "d").expect("loading reads the metadata and the lookup table only");
        let p = d.program_at(0).unwrap();
        assert_eq!(d.image(p, 90).unwrap().1, vec![9; 4000]);
        let e = d.image(p, 86).unwrap_err().to_string();
        assert!(e.contains(&format!("is corrupt (the CRC-32 checksum of section {} does not match", p.images[0].section)), "{e}");
        assert!(d.verify().is_err() && b.verify().is_ok());
        // A damaged description: the program's details, and the listing, say so.
        let description = b.sections.get(p.description_section).unwrap();
        let mut damaged = good.clone();
        damaged[description.start + 1] ^= 1;
        let d = Bundle::from_vec(damaged, "d").unwrap();
        assert!(d.details(d.program_at(0).unwrap()).unwrap_err().to_string().contains("checksum"));
        assert!(d.describe().is_err());
        // A damaged record: a lookup that finds it is an error; others are not.
        let record = b.sections.get(b.lookup.record_section(1)).unwrap();
        let mut damaged = good;
        damaged[record.start + 1] ^= 1;
        let d = Bundle::from_vec(damaged, "d").unwrap();
        assert!(d.program("key a").unwrap().is_some());
        let e = d.program("key b").unwrap_err().to_string();
        assert!(e.contains(&format!("checksum of section {}", b.lookup.record_section(1))), "{e}");
        assert!(d.programs().is_err() && d.verify().is_err());
    }

    /// A bundle file is read a section at a time: opened, it is refused as the same bytes
    /// in memory are (truncated, damaged); a file changed after opening is an error naming
    /// the section when that section is used, never another file's bytes served.
    #[test]
    fn a_file_is_read_a_section_at_a_time_and_checked_as_bytes_are() {
        let good = sample();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.caijit");
        std::fs::write(&path, &good).unwrap();
        let b = Bundle::open(&path).unwrap();
        assert!(b.verify().is_ok());
        assert_eq!(b.image(b.program_at(0).unwrap(), 90).unwrap().1, vec![9; 4000]);
        for cut in [0, 20, good.len() / 2, good.len() - 1] {
            std::fs::write(&path, &good[..cut]).unwrap();
            let e = Bundle::open(&path).unwrap_err().to_string();
            assert!(e.contains("truncated") || e.contains("not a caijit bundle") || e.contains("corrupt"), "{cut}: {e}");
        }
        // Changed under an open bundle: truncated, then rewritten with one byte flipped.
        std::fs::write(&path, &good).unwrap();
        let b = Bundle::open(&path).unwrap();
        let p = b.program_at(0).unwrap();
        let sm90 = b.sections.get(p.images.iter().find(|i| i.arch == 90).unwrap().section).unwrap();
        std::fs::write(&path, &good[..sm90.start + 1]).unwrap();
        assert!(b.image(p, 90).unwrap_err().to_string().contains("cannot be read"));
        let mut flipped = good.clone();
        flipped[sm90.start + sm90.stored / 2] ^= 1;
        std::fs::write(&path, &flipped).unwrap();
        assert!(b.image(p, 90).unwrap_err().to_string().contains("checksum"));
        assert!(Bundle::open(dir.path().join("missing.caijit")).unwrap_err().to_string().contains("cannot be read"));
    }

    /// Lengths read from a file are checked before anything is allocated for them: a file
    /// claiming 4 billion sections, or a section stored in a terabyte, is an error (the files
    /// are sparse: no disk is used), not an abort for want of memory.
    #[test]
    fn a_file_claiming_huge_lengths_is_an_error_not_an_allocation() {
        let dir = tempfile::tempdir().unwrap();
        let sparse = |name: &str, head: &[u8], len: u64| {
            let path = dir.path().join(name);
            let f = std::fs::File::create(&path).unwrap();
            std::io::Write::write_all(&mut &f, head).unwrap();
            f.set_len(len).unwrap();
            path
        };
        let mut head = MAGIC.to_vec();
        head.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        head.extend_from_slice(&u32::MAX.to_le_bytes());
        let path = sparse("sections.caijit", &head, (HEADER + TOC_ENTRY * u32::MAX as usize + TOC_CHECKSUM) as u64);
        let e = Bundle::open(&path).unwrap_err().to_string();
        assert!(e.contains("claims 4294967295 sections"), "{e}");
        // One deflated metadata section stored in 1 TiB, its table of contents sealed.
        let stored: u64 = 1 << 40;
        let start = (HEADER + TOC_ENTRY + TOC_CHECKSUM) as u64;
        let mut head = MAGIC.to_vec();
        head.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        head.extend_from_slice(&1u32.to_le_bytes());
        for word in [SECTION_METADATA, FLAG_DEFLATE] {
            head.extend_from_slice(&word.to_le_bytes());
        }
        for word in [start, stored, 100] {
            head.extend_from_slice(&word.to_le_bytes());
        }
        head.extend_from_slice(&0u32.to_le_bytes());
        let toc = libdeflater::crc32(&head);
        head.extend_from_slice(&toc.to_le_bytes());
        let e = Bundle::open(sparse("stored.caijit", &head, start + stored)).unwrap_err().to_string();
        assert!(e.contains("section 0's entry in the table of contents is not valid"), "{e}");
    }

    /// A bundle of its metadata section alone.
    fn write_metadata(metadata: Value) -> Vec<u8> {
        seal(vec![(SECTION_METADATA, serde_json::to_vec(&metadata).unwrap())])
    }

    /// Inflating gives exactly the stored length, or says what is wrong.
    #[test]
    fn inflate_gives_exactly_the_length_or_an_error() {
        let raw: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let packed = deflate(&raw).unwrap();
        assert_eq!(inflate(&packed, raw.len()).unwrap(), raw);
        assert!(inflate(&packed, raw.len() - 1).unwrap_err().contains("more than 9999 bytes"));
        assert!(inflate(&packed, raw.len() + 1).unwrap_err().contains("inflates to 10000 bytes, not 10001"));
        assert!(inflate(&[0xff; 64], 100).unwrap_err().contains("does not inflate"));
        assert!(deflate(b"x").is_none(), "stored as it is when deflating makes it no smaller");
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
