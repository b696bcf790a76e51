//! Writing a bundle: [`write()`] makes a bundle's bytes from its programs (each program's
//! record, description, `.entry` declarations and code a section, the lookup table and the
//! metadata), compressing sections where that makes them smaller and sealing them under the
//! table of contents; [`save`] writes them to a file whole.

use std::path::Path;

use serde_json::{json, Value};

use super::format::{
    ShippedTuning, CAIJIT_VERSION, EXPR_RECORD, FLAG_DEFLATE, FORMAT_VERSION, HEADER, KEY_RECORD, LOOKUP_HEADER, MAGIC, SECTION_CUBIN,
    SECTION_DESCRIPTION, SECTION_ENTRIES, SECTION_LOOKUP, SECTION_METADATA, SECTION_PTX, SECTION_RECORD, SECTION_TUNINGS, TOC_CHECKSUM,
    TOC_ENTRY,
};
use super::lookup::{digest, expr_record, key_record};
use crate::error::{Error, Result};

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
/// baked; `tunings` are shipped beside the programs (none: no section). Sections but the
/// metadata and the lookup table are compressed (raw DEFLATE) where that makes them smaller.
pub fn write(nvrtc: &str, nvrtc_build: &str, archs: &[u32], programs: Vec<ProgramBlobs>, tunings: &[ShippedTuning]) -> Vec<u8> {
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
    let tunings_section = (!tunings.is_empty()).then(|| {
        sections.push((SECTION_TUNINGS, serde_json::to_vec(tunings).unwrap_or_default()));
        sections.len() - 1
    });
    let metadata = json!({
        "format": FORMAT_VERSION,
        "caijit": CAIJIT_VERSION,
        "nvrtc": nvrtc,
        "nvrtc_build": nvrtc_build,
        "archs": archs,
        "programs": count,
        "tunings": tunings_section,
    });
    sections[0].1 = serde_json::to_vec(&metadata).unwrap_or_default();
    seal(sections)
}

/// A bundle of `sections` (kind, bytes): each compressed where that makes it smaller but
/// the metadata and the lookup table (read at every open: inflating them would take longer
/// than reading them), the table of contents and its checksum before them.
pub(super) fn seal(sections: Vec<(u32, Vec<u8>)>) -> Vec<u8> {
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

/// `raw` as raw DEFLATE, at libdeflate's strongest level (a bundle is written once and read
/// often), if that is smaller.
pub(super) fn deflate(raw: &[u8]) -> Option<Vec<u8>> {
    let mut c = libdeflater::Compressor::new(libdeflater::CompressionLvl::best());
    let mut out = vec![0; c.deflate_compress_bound(raw.len())];
    let n = c.deflate_compress(raw, &mut out).ok()?;
    out.truncate(n);
    (n < raw.len()).then_some(out)
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

#[cfg(test)]
mod tests {
    use super::*;

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
