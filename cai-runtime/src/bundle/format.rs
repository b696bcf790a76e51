//! The format's constants, its JSON sections as stored, and the public types a reader gets
//! of a bundled program (`docs/bundles.md` documents the format).

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
/// The tuning results the bundle ships (JSON: a list of [`ShippedTuning`]); the metadata
/// names its section, if any.
pub const SECTION_TUNINGS: u32 = 8;

pub(super) const FLAG_DEFLATE: u32 = 1;
/// Bytes of the header before the table of contents, and of one entry of it.
pub(super) const HEADER: usize = 16;
pub(super) const TOC_ENTRY: usize = 36;
/// The CRC-32 after the table of contents.
pub(super) const TOC_CHECKSUM: usize = 4;
pub(super) const DIGEST: usize = 32;
/// Bytes of the lookup table's header (program count, name expression record count), of a
/// key or family record (digest, program number), and of a name expression record (family
/// digest, name expression digest, program number).
pub(super) const LOOKUP_HEADER: usize = 8;
pub(super) const KEY_RECORD: usize = DIGEST + 4;
pub(super) const EXPR_RECORD: usize = 2 * DIGEST + 4;
/// No section is stored in, or inflates to, more than this (a corrupt length must not
/// exhaust memory).
pub(super) const MAX_SECTION: u64 = 1 << 30;
/// No bundle has more sections than this (its table of contents is read whole at open).
pub(super) const MAX_SECTIONS: usize = 1 << 20;

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
/// ([`ProgramDetails`]) is read when it is first asked for
/// ([`Bundle::details`](crate::bundle::Bundle::details)).
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
    pub(super) position: usize,
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

/// An autotuning result a bundle ships beside the programs it was tuned on: a process that
/// loads the bundle launches the winner without timing anything (`cai_runtime::tune`
/// reads it; this module only carries it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShippedTuning {
    /// What the tuner looks it up by: the kernel's program (its family key), the kernel, the
    /// device model and compute capability, the tuning key and the candidates.
    pub key: String,
    /// The family key of the kernel's program: a bundle ships a tuning only with its program.
    pub family: String,
    /// For listings: the kernel, the device it was tuned on, and the tuning key.
    pub kernel: String,
    pub device: String,
    pub tuning_key: String,
    /// The winner's label and its median time (µs).
    pub winner: String,
    pub median_us: f64,
    /// The tuner's own record (candidates, their trials, the winner).
    pub record: Value,
}

/// The metadata (section 0) as stored.
#[derive(Deserialize)]
pub(super) struct StoredMetadata {
    pub(super) caijit: String,
    #[serde(default)]
    pub(super) nvrtc: String,
    #[serde(default)]
    pub(super) nvrtc_build: String,
    pub(super) archs: Vec<u32>,
    pub(super) programs: usize,
    /// The section of the shipped tunings, if any.
    #[serde(default)]
    pub(super) tunings: Option<usize>,
}

/// A program's record as stored: what
/// [`Bundle::program_at`](crate::bundle::Bundle::program_at) reads into a [`BundledProgram`].
#[derive(Deserialize)]
pub(super) struct StoredProgram {
    pub(super) key: String,
    pub(super) family: String,
    pub(super) name: String,
    pub(super) name_expressions: Vec<String>,
    pub(super) kernels: Vec<String>,
    pub(super) description_section: usize,
    pub(super) entries_section: usize,
    pub(super) images: Vec<StoredImage>,
}

#[derive(Deserialize)]
pub(super) struct StoredImage {
    pub(super) arch: u32,
    pub(super) kind: String,
    pub(super) section: usize,
}

/// A program's description section as stored: what
/// [`Bundle::details`](crate::bundle::Bundle::details) reads into [`ProgramDetails`] (a
/// kernel's listing is read leniently, as it is only shown).
#[derive(Deserialize)]
pub(super) struct StoredDetails {
    pub(super) source_sha256: String,
    pub(super) options: Vec<String>,
    pub(super) nvrtc_options: Vec<String>,
    pub(super) lowered: Vec<(String, String)>,
    pub(super) kernels: Vec<StoredKernel>,
    #[serde(default)]
    pub(super) layouts: Option<Value>,
}

#[derive(Deserialize)]
pub(super) struct StoredKernel {
    #[serde(default)]
    pub(super) name: String,
    #[serde(default)]
    pub(super) lowered: String,
    pub(super) params: Vec<StoredParam>,
}

#[derive(Deserialize)]
pub(super) struct StoredParam {
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default, rename = "type")]
    pub(super) cpp_type: String,
    #[serde(default)]
    pub(super) offset: usize,
    #[serde(default)]
    pub(super) size: usize,
}
