//! Bundles written, then read back: lookups, the choice of code for an architecture,
//! lazy verification, and damaged or malformed bundles (bytes and files) refused with their
//! reason.

use serde_json::{json, Value};

use super::format::{EXPR_RECORD, FLAG_DEFLATE, HEADER, KEY_RECORD, LOOKUP_HEADER, TOC_CHECKSUM, TOC_ENTRY};
use super::lookup::{digest, expr_record, program_of};
use super::read::inflate;
use super::write::{deflate, seal};
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
    write("13.0", "build-id", &[80, 90], vec![blobs(&"ab".repeat(32), &"ef".repeat(32), &["k<float>"])], &[])
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
    write("13.0", "build-id", &[80, 90], programs, &[])
}

/// Every section of `bundle`, inflated, to change and [`seal`] again.
fn sections_of(bundle: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let b = Bundle::from_vec(bundle.to_vec(), "t").unwrap();
    (0..b.sections.len()).map(|i| (b.sections.get(i).unwrap().kind, b.section(i).unwrap())).collect()
}

/// `bundle` sealed again with its metadata changed by `change`.
fn with_metadata(bundle: &[u8], change: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut sections = sections_of(bundle);
    let mut meta: Value = serde_json::from_slice(&sections[0].1).unwrap();
    change(&mut meta);
    sections[0].1 = serde_json::to_vec(&meta).unwrap();
    seal(sections)
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
    let (keys, families, exprs) = (LOOKUP_HEADER + 4 * n, LOOKUP_HEADER + (4 + KEY_RECORD) * n, LOOKUP_HEADER + (4 + 2 * KEY_RECORD) * n);
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
    let e = Bundle::from_vec(with_metadata(&good, |m| m["programs"] = json!(5)), "t").unwrap_err().to_string();
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
    let odd = write("13.0", "b", &[90], vec![blobs(&"ü".repeat(20), "f", &[])], &[]);
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
fn shipped_tunings_are_read_back_by_key_and_a_wrong_section_is_refused() {
    let t = ShippedTuning {
        key: "k\nfamily".into(),
        family: "ef".repeat(32),
        kernel: "k".into(),
        device: "GPU sm_90".into(),
        tuning_key: "n".into(),
        winner: "block=256".into(),
        median_us: 2.0,
        record: json!({"key": "k\nfamily", "candidates": ["block=256"], "trials": [{"Failed": "-"}], "best": 0}),
    };
    let bytes = write("13.0", "build-id", &[90], vec![blobs(&"ab".repeat(32), &"ef".repeat(32), &[])], std::slice::from_ref(&t));
    let b = Bundle::from_vec(bytes.clone(), "t").unwrap();
    b.verify().unwrap();
    assert_eq!(b.tuning("k\nfamily").unwrap(), Some(&t));
    assert_eq!(b.tuning("other").unwrap(), None);
    assert!(b.describe().unwrap().contains("kernel k on GPU sm_90, key \"n\": block=256 (2.000 µs)"));
    assert!(Bundle::from_vec(sample(), "t").unwrap().tunings().unwrap().is_empty());

    // The metadata naming another section as the tunings; tunings that are not a list of them.
    let e = Bundle::from_vec(with_metadata(&bytes, |m| m["tunings"] = json!(2)), "t").unwrap_err().to_string();
    assert!(e.contains("names section 2 as its tunings"), "{e}");
    let mut sections = sections_of(&bytes);
    let last = sections.len() - 1;
    sections[last].1 = b"[{\"key\": 1}]".to_vec();
    let e = Bundle::from_vec(seal(sections), "t").unwrap().tunings().unwrap_err().to_string();
    assert!(e.contains("its tunings, section") && e.contains("are not valid"), "{e}");
    // A record that is not the tuning's own, or has no winner among its candidates: refused
    // when read, and a bundle with one is not loaded.
    for (field, value, why) in [("key", json!("other"), "another key's"), ("best", json!(1), "names no winner")] {
        let mut bad = t.clone();
        bad.record[field] = value;
        let bytes = write("13.0", "build-id", &[90], vec![blobs(&"cd".repeat(32), &"ef".repeat(32), &[])], &[bad]);
        let e = Bundle::from_vec(bytes.clone(), "t").unwrap().tunings().unwrap_err().to_string();
        assert!(e.contains(why), "{e}");
        assert!(install(Bundle::from_vec(bytes, "bad-tunings.caijit").unwrap()).is_err());
    }
}
