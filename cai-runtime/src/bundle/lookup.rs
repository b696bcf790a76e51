//! The lookup table: the SHA-256 of every program's bundle key, family key and name
//! expressions, sorted, each with its program number, verified at open and searched in
//! place; and each program's record section.

use sha2::{Digest, Sha256};

use super::format::{DIGEST, EXPR_RECORD, KEY_RECORD, LOOKUP_HEADER, SECTION_RECORD};
use super::toc::Toc;

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
pub(super) struct Lookup {
    raw: Vec<u8>,
    pub(super) programs: usize,
}

impl Lookup {
    /// The table in `raw`, for a bundle of `sections`; `Err`: what is wrong with it.
    pub(super) fn parse(raw: Vec<u8>, sections: &Toc) -> std::result::Result<Lookup, String> {
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
    pub(super) fn record_section(&self, i: usize) -> usize {
        let at = LOOKUP_HEADER + 4 * i;
        u32::from_le_bytes(self.raw[at..at + 4].try_into().unwrap_or_default()) as usize
    }

    pub(super) fn keys(&self) -> &[[u8; KEY_RECORD]] {
        let at = LOOKUP_HEADER + 4 * self.programs;
        self.raw[at..at + KEY_RECORD * self.programs].as_chunks().0
    }

    pub(super) fn families(&self) -> &[[u8; KEY_RECORD]] {
        let at = LOOKUP_HEADER + (4 + KEY_RECORD) * self.programs;
        self.raw[at..at + KEY_RECORD * self.programs].as_chunks().0
    }

    pub(super) fn exprs(&self) -> &[[u8; EXPR_RECORD]] {
        self.raw[LOOKUP_HEADER + (4 + 2 * KEY_RECORD) * self.programs..].as_chunks().0
    }

    /// The programs whose records in `table` start with `prefix`, lowest first.
    fn matching<'a, const W: usize>(table: &'a [[u8; W]], prefix: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
        let first = table.partition_point(|r| &r[..prefix.len()] < prefix);
        table[first..].iter().take_while(move |r| r.starts_with(prefix)).map(|r| program_of(r))
    }

    /// The lowest program of bundle key digest `key`.
    pub(super) fn by_key(&self, key: &[u8; DIGEST]) -> Option<usize> {
        Lookup::matching(self.keys(), key).next()
    }

    /// The lowest program of family digest `family` that has every name expression of
    /// digests `exprs`.
    pub(super) fn by_family(&self, family: &[u8; DIGEST], exprs: &[[u8; DIGEST]]) -> Option<usize> {
        let Some((first, rest)) = exprs.split_first() else { return Lookup::matching(self.families(), family).next() };
        let mut prefix = [0; 2 * DIGEST];
        prefix[..DIGEST].copy_from_slice(family);
        prefix[DIGEST..].copy_from_slice(first);
        let found = Lookup::matching(self.exprs(), &prefix).find(|&p| rest.iter().all(|e| self.has_expr(family, e, p)));
        found
    }

    pub(super) fn has_expr(&self, family: &[u8; DIGEST], expr: &[u8; DIGEST], program: usize) -> bool {
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
pub(super) fn program_of(record: &[u8]) -> usize {
    u32::from_be_bytes(record[record.len() - 4..].try_into().unwrap_or_default()) as usize
}

pub(super) fn key_record(digest: &[u8; DIGEST], program: usize) -> [u8; KEY_RECORD] {
    let mut r = [0; KEY_RECORD];
    r[..DIGEST].copy_from_slice(digest);
    r[DIGEST..].copy_from_slice(&(program as u32).to_be_bytes());
    r
}

pub(super) fn expr_record(family: &[u8; DIGEST], expr: &[u8; DIGEST], program: usize) -> [u8; EXPR_RECORD] {
    let mut r = [0; EXPR_RECORD];
    r[..DIGEST].copy_from_slice(family);
    r[DIGEST..2 * DIGEST].copy_from_slice(expr);
    r[2 * DIGEST..].copy_from_slice(&(program as u32).to_be_bytes());
    r
}

/// What the lookup table holds of a key, a family key or a name expression: the SHA-256 of
/// its text.
pub(super) fn digest(text: &str) -> [u8; DIGEST] {
    Sha256::digest(text.as_bytes()).into()
}
