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
//! name expressions, kernels and the positions of its other sections). A bundle may also
//! ship autotuning results ([`ShippedTuning`]), in one section the metadata names.
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
//! # Files
//! One file per job. This one declares them and re-exports what is public, and defines
//! nothing, so that the others share types and constants (`format.rs`'s) without a file
//! importing one that imports it back (`tests/architecture.rs`).
//! - `format.rs`: the format's constants, the sections' JSON as stored, and the public
//!   types a reader gets of a program ([`BundledProgram`], [`ProgramDetails`], …);
//! - `toc.rs`: the table of contents, its entries decoded when their sections are used;
//! - `lookup.rs`: the lookup table (its records, their SHA-256 digests), verified at open
//!   and searched in place;
//! - `read.rs`: [`Bundle`]: opening (a file or bytes), reading each section when it is
//!   first used (checksum verified, inflated), lookups, [`Bundle::verify`] and
//!   [`Bundle::describe`];
//! - `write.rs`: [`write()`] (and [`save`]): a bundle's bytes made from [`ProgramBlobs`],
//!   sections compressed and sealed under the table of contents;
//! - `loaded.rs`: the bundles this process has loaded ([`install`], [`load`], [`loaded()`],
//!   `CAIJIT_BUNDLES`, the shipped bundles of [`add_default`]);
//! - `tests.rs`: bundles written, then read back (whole, damaged, malformed).
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

mod format;
mod loaded;
mod lookup;
mod read;
#[cfg(test)]
mod tests;
mod toc;
mod write;

pub use format::{
    BundledProgram, ImageKind, ImageRef, KernelSummary, ParamSummary, ProgramDetails, ShippedTuning, CAIJIT_VERSION, FORMAT_VERSION, MAGIC,
    SECTION_CUBIN, SECTION_DESCRIPTION, SECTION_ENTRIES, SECTION_LOOKUP, SECTION_METADATA, SECTION_PTX, SECTION_RECORD, SECTION_TUNINGS,
};
pub use loaded::{add_default, install, load, loaded};
pub use read::Bundle;
pub use write::{entry_declarations, save, write, ProgramBlobs};
