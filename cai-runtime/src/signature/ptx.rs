//! The `.entry` lists of PTX: each parameter's type class, size and alignment as compiled.

use std::collections::BTreeMap;

use super::error::SignatureError;

/// The type class of a PTX parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PtxClass {
    /// `.f16`/`.f32`/`.f64`.
    Float,
    /// `.s8` … `.s64`.
    Signed,
    /// `.u8` … `.u64` (also pointers, as `.u64`).
    Unsigned,
    /// `.b8` … `.b64`, not an array.
    Bits,
    /// `.b8 name[N]` (any element type with `[N]`): an aggregate of `N` elements.
    Aggregate,
}

/// One `.param` of a PTX `.entry`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PtxParam {
    pub size: usize,
    pub align: usize,
    pub class: PtxClass,
}

impl PtxParam {
    /// An integer of `size` bytes (any of `.s`/`.u`/`.b`).
    pub fn is_integer(&self, size: usize) -> bool {
        matches!(self.class, PtxClass::Signed | PtxClass::Unsigned | PtxClass::Bits) && self.size == size
    }

    /// `.param .f32`, `.u64`, `.align 8 .b8 [24]`.
    pub fn describe(&self) -> String {
        let bits = self.size.saturating_mul(8);
        match self.class {
            PtxClass::Float => format!(".f{bits}"),
            PtxClass::Signed => format!(".s{bits}"),
            PtxClass::Unsigned => format!(".u{bits}"),
            PtxClass::Bits => format!(".b{bits}"),
            PtxClass::Aggregate => format!(".align {} .b8[{}]", self.align, self.size),
        }
    }
}

/// The parameters of every `.entry` in `ptx`, by lowered name; an error if any cannot be
/// read.
pub fn ptx_entries(ptx: &str) -> Result<BTreeMap<String, Vec<PtxParam>>, SignatureError> {
    ptx_entries_each(ptx).into_iter().map(|(name, params)| params.map(|p| (name, p))).collect()
}

/// The parameters of every `.entry` in `ptx`, by lowered name, each read on its own: an
/// entry that cannot be read spoils no other (an unterminated one ends the list).
pub fn ptx_entries_each(ptx: &str) -> BTreeMap<String, Result<Vec<PtxParam>, SignatureError>> {
    let mut out = BTreeMap::new();
    let mut rest = ptx;
    while let Some(pos) = rest.find(".entry ") {
        rest = &rest[pos + ".entry ".len()..];
        let name_end = rest.find(|c: char| c == '(' || c.is_whitespace()).unwrap_or(rest.len());
        let name = rest[..name_end].to_string();
        let after = &rest[name_end..];
        let Some(open) = after.trim_start().strip_prefix('(') else {
            out.insert(name, Ok(Vec::new()));
            continue;
        };
        let Some(close) = open.find(')') else {
            out.insert(name.clone(), Err(SignatureError::PtxEntry { entry: name }));
            break;
        };
        let params = open[..close]
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(|decl| ptx_param(decl).ok_or_else(|| SignatureError::PtxParam { entry: name.clone(), decl: decl.into() }))
            .collect();
        out.insert(name, params);
    }
    out
}

fn ptx_param(decl: &str) -> Option<PtxParam> {
    let words: Vec<&str> = decl.split_whitespace().collect();
    if words.first() != Some(&".param") {
        return None;
    }
    let last = *words.last()?;
    let ty = words
        .iter()
        .find(|w| matches!(w.get(..2), Some(".b" | ".u" | ".s" | ".f")) && w[2..].chars().all(|c| c.is_ascii_digit()) && w.len() > 2)?;
    let bits: usize = ty[2..].parse().ok()?;
    let elem = bits / 8;
    if let Some((_, count)) = last.split_once('[') {
        let n: usize = count.strip_suffix(']')?.parse().ok()?;
        let align = words.iter().position(|w| *w == ".align").and_then(|i| words.get(i + 1)).and_then(|a| a.parse().ok()).unwrap_or(elem);
        return Some(PtxParam { size: elem.checked_mul(n)?, align, class: PtxClass::Aggregate });
    }
    let class = match &ty[..2] {
        ".f" => PtxClass::Float,
        ".s" => PtxClass::Signed,
        ".u" => PtxClass::Unsigned,
        _ => PtxClass::Bits,
    };
    Some(PtxParam { size: elem, align: elem, class })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(size: usize, align: usize, class: PtxClass) -> PtxParam {
        PtxParam { size, align, class }
    }

    #[test]
    fn ptx_params_with_their_classes() {
        let ptx = ".visible .entry k2(\n\t.param .u64 k2_param_0,\n\t.param .u64 .ptr .global .align 4 k2_param_1\n)\n{\n}\n\
                   .weak .entry _Z1fv(\n\t.param .align 8 .b8 _Z1fv_param_0[24],\n\t.param .u8 _Z1fv_param_1,\n\t.param .align 2 .b8 _Z1fv_param_2[2]\n)\n";
        let e = ptx_entries(ptx).unwrap();
        assert_eq!(e["k2"], [p(8, 8, PtxClass::Unsigned), p(8, 8, PtxClass::Unsigned)]);
        assert_eq!(e["_Z1fv"], [p(24, 8, PtxClass::Aggregate), p(1, 1, PtxClass::Unsigned), p(2, 2, PtxClass::Aggregate)]);
        let ptx = ".entry k(.param .f32 a, .param .s16 b, .param .b32 c[3], .param .f64 d, .param .b16 e)\n.entry e()\n";
        let e = ptx_entries(ptx).unwrap();
        assert_eq!(
            e["k"],
            [
                p(4, 4, PtxClass::Float),
                p(2, 2, PtxClass::Signed),
                p(12, 4, PtxClass::Aggregate),
                p(8, 8, PtxClass::Float),
                p(2, 2, PtxClass::Bits)
            ]
        );
        assert_eq!(e["e"], []);
        assert!(e["k"][1].is_integer(2) && !e["k"][0].is_integer(4));
        assert_eq!(e["k"].iter().map(PtxParam::describe).collect::<Vec<_>>(), [".f32", ".s16", ".align 4 .b8[12]", ".f64", ".b16"]);
        assert!(matches!(ptx_entries(".entry k(.param .u32 a").unwrap_err(), SignatureError::PtxEntry { .. }));
        assert!(matches!(ptx_entries(".entry k(.reg .u32 a)").unwrap_err(), SignatureError::PtxParam { .. }));
    }

    #[test]
    fn malformed_ptx_array_params_are_errors() {
        for decl in
            [".param .b8 k_param_1[", ".param .b8 k_param_1[é", ".param .b8 k_param_1[5é", ".param .b8 k_param_1[5", ".param .b8 k[]"]
        {
            let ptx = format!(".entry k({decl})");
            let e = ptx_entries(&ptx).unwrap_err();
            assert!(e.to_string().contains("cannot read PTX parameter"), "{decl}: {e}");
        }
        assert_eq!(ptx_entries(".entry k(.param .b8 k_param_1[0])").unwrap()["k"], [p(0, 1, PtxClass::Aggregate)]);
    }

    #[test]
    fn ptx_array_sizes_that_overflow_are_errors() {
        assert!(ptx_entries(".entry k(.param .b64 k_param_0[18446744073709551615])").is_err());
        let e = ptx_entries(".entry k(.param .b8 k_param_0[18446744073709551615])").unwrap();
        assert_eq!(e["k"][0].size, usize::MAX);
    }
}
