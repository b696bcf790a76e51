//! The table of contents: one entry per section (its kind, flags, place, lengths and
//! checksum), kept as read at open and decoded when its section is used.

use super::format::{HEADER, TOC_ENTRY};

/// One entry of the table of contents.
#[derive(Clone, Copy, Debug)]
pub(super) struct Section {
    pub(super) kind: u32,
    pub(super) flags: u32,
    pub(super) start: usize,
    pub(super) stored: usize,
    pub(super) len: u64,
    /// CRC-32 (zlib's) of the stored bytes.
    pub(super) crc32: u32,
}

/// The table of contents as read at open (its checksum, and that its sections follow each
/// other to the end of the file, verified then): an entry is decoded when its section is
/// used, so that opening allocates nothing per section.
#[derive(Debug, Default)]
pub(super) struct Toc {
    pub(super) raw: Vec<u8>,
    pub(super) count: usize,
}

impl Toc {
    pub(super) fn len(&self) -> usize {
        self.count
    }

    pub(super) fn get(&self, i: usize) -> Option<Section> {
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
