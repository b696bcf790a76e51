//! Parameter layouts: kinds from the compiler's types, sizes, alignments and offsets from
//! the PTX, each cross-checked against the other.

use super::deduce::ArgType;
use super::error::SignatureError;
use super::ptx::{PtxClass, PtxParam};
use super::types::{CType, ParamType, Rank};
use crate::cai::DType;

/// What a parameter of a compiled kernel accepts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ParamKind {
    /// `T*` / `const T*`: a contiguous array of dtype `T` (`None`: an opaque pointee).
    Pointer { dtype: Option<DType>, is_const: bool },
    /// `caijit::Array<T, N>`: a strided array of dtype `T` and rank `N`.
    Array { dtype: Option<DType>, is_const: bool, rank: usize },
    /// A scalar converted to exactly this type.
    Scalar(DType),
    /// A struct passed by value: bytes of exactly the parameter's size.
    Struct { name: String },
}

/// One parameter of a compiled kernel: what it accepts and where it lives in the buffer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ParamLayout {
    pub index: usize,
    pub name: Option<String>,
    /// The C++ type as the compiler compiled it.
    pub cpp_type: String,
    pub kind: ParamKind,
    pub size: usize,
    pub align: usize,
    pub offset: usize,
}

/// The byte layout of `caijit::Array<T, N>` (`kernels/include/caijit/array.cuh`): the data
/// pointer, then `N` extents, then `N` byte strides, all 64-bit, aligned to 8. The one place
/// Rust writes it down: parameter packing, `params::ArrayParam` and the size checks use it,
/// and a test checks it against the header in the PTX of kernels reading each field.
pub struct ArrayLayout;

impl ArrayLayout {
    /// Alignment of the struct.
    pub const ALIGN: usize = 8;
    /// Offset of the data pointer.
    pub const DATA: usize = 0;

    /// Offset of extent `d`.
    pub const fn extent(d: usize) -> usize {
        8 + 8 * d
    }

    /// Offset of byte stride `d` of a rank-`rank` array.
    pub const fn stride(rank: usize, d: usize) -> usize {
        8 + 8 * rank + 8 * d
    }
}

/// Size of `caijit::Array<T, N>` ([`ArrayLayout`]). Saturates at `usize::MAX` for ranks no
/// array can have (a rank read from a declaration).
pub const fn array_param_size(rank: usize) -> usize {
    rank.saturating_mul(16).saturating_add(8)
}

impl ParamKind {
    /// The kind's name as caijit reports it (`Kernel.params` in Python): `"pointer"`,
    /// `"array"`, `"scalar"` or `"struct"`.
    pub fn name(&self) -> &'static str {
        match self {
            ParamKind::Pointer { .. } => "pointer",
            ParamKind::Array { .. } => "array",
            ParamKind::Scalar(_) => "scalar",
            ParamKind::Struct { .. } => "struct",
        }
    }

    /// The element dtype of an array parameter, or a scalar's dtype; `None` for an opaque
    /// pointee or a struct.
    pub fn dtype(&self) -> Option<DType> {
        match self {
            ParamKind::Pointer { dtype, .. } | ParamKind::Array { dtype, .. } => *dtype,
            ParamKind::Scalar(d) => Some(*d),
            ParamKind::Struct { .. } => None,
        }
    }

    /// For an array parameter, whether the kernel may not write through it (its pointee or
    /// element is declared `const`); `None` for a scalar or a struct.
    pub fn is_const(&self) -> Option<bool> {
        match self {
            ParamKind::Pointer { is_const, .. } | ParamKind::Array { is_const, .. } => Some(*is_const),
            ParamKind::Scalar(_) | ParamKind::Struct { .. } => None,
        }
    }

    /// The rank of a `caijit::Array<T, N>` parameter; `None` for every other kind.
    pub fn rank(&self) -> Option<usize> {
        match self {
            ParamKind::Array { rank, .. } => Some(*rank),
            ParamKind::Pointer { .. } | ParamKind::Scalar(_) | ParamKind::Struct { .. } => None,
        }
    }

    /// The size this kind must have, when the kind alone determines it.
    pub fn expected_size(&self) -> Option<usize> {
        match self {
            ParamKind::Pointer { .. } => Some(8),
            ParamKind::Array { rank, .. } => Some(array_param_size(*rank)),
            ParamKind::Scalar(d) => Some(d.itemsize()),
            ParamKind::Struct { .. } => None,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            ParamKind::Pointer { dtype, is_const } => format!(
                "a {}contiguous array of {}",
                if *is_const { "" } else { "writable " },
                dtype.map_or("any dtype".to_string(), |d| d.name().to_string())
            ),
            ParamKind::Array { dtype, is_const, rank } => format!(
                "a {}{rank}-d array of {}",
                if *is_const { "" } else { "writable " },
                dtype.map_or("any dtype".to_string(), |d| d.name().to_string())
            ),
            ParamKind::Scalar(d) => format!("a scalar converted to {} ({})", d.cpp_name(), d.name()),
            ParamKind::Struct { name } => format!("a `{name}` struct passed as bytes"),
        }
    }

    /// Whether an argument of type `arg` can be passed to a parameter of this kind (what
    /// picks an overload: a typed scalar only where its type is the parameter's).
    pub fn admits(&self, arg: &ArgType) -> bool {
        match (self, arg) {
            (ParamKind::Pointer { dtype, .. }, ArgType::Array { dtype: d, .. }) => dtype.is_none_or(|t| t == *d),
            (ParamKind::Pointer { .. }, ArgType::Opaque) => true,
            (ParamKind::Array { dtype, rank, .. }, ArgType::Array { dtype: d, rank: r }) => dtype.is_none_or(|t| t == *d) && rank == r,
            (ParamKind::Scalar(d), ArgType::TypedScalar(t)) => d == t,
            (ParamKind::Scalar(_), ArgType::UntypedScalar) => true,
            (ParamKind::Struct { .. }, ArgType::Opaque) => true,
            (ParamKind::Pointer { .. } | ParamKind::Array { .. } | ParamKind::Scalar(_) | ParamKind::Struct { .. }, _) => false,
        }
    }

    /// Where a parameter of this kind, compiled as the PTX parameter `p`, lies after
    /// parameters ending at `end`: at the first multiple of its alignment (`p.align`, at least
    /// 1), `Ok(None)` past `usize`. `Err` says why `p` is not this kind compiled (its size or
    /// its PTX class). The one placing rule of a compilation's layouts and of a bundle's
    /// stored ones.
    pub(crate) fn place(&self, p: &PtxParam, end: usize) -> Result<Option<usize>, String> {
        if let Some(size) = self.expected_size() {
            if size != p.size {
                return Err(format!("the compiler's type takes {size} bytes but the PTX has {} bytes", p.size));
            }
        }
        self.check_ptx(p)?;
        Ok(end.checked_next_multiple_of(p.align.max(1)))
    }

    /// Whether the PTX parameter `p` is what this kind compiles to; `Err` says what it
    /// should have been.
    fn check_ptx(&self, p: &PtxParam) -> Result<(), String> {
        // A `__grid_constant__` parameter is an aligned byte aggregate whatever its type.
        let grid_constant = p.class == PtxClass::Aggregate && self.expected_size().is_some_and(|s| s == p.size && p.align == s.min(8));
        let ok = match self {
            _ if grid_constant && !matches!(self, ParamKind::Array { .. }) => true,
            ParamKind::Pointer { .. } => p.is_integer(8),
            ParamKind::Array { .. } => p.class == PtxClass::Aggregate && p.align == 8,
            ParamKind::Scalar(DType::F32 | DType::F64) => p.class == PtxClass::Float,
            ParamKind::Scalar(DType::F16 | DType::BF16) => p.size == 2,
            ParamKind::Scalar(DType::C64 | DType::C128) => p.class == PtxClass::Aggregate,
            ParamKind::Scalar(d) => p.is_integer(d.itemsize()),
            // A struct is an aggregate; an enum an integer: either way bytes of its size.
            ParamKind::Struct { .. } => true,
        };
        if ok {
            return Ok(());
        }
        let want = match self {
            ParamKind::Pointer { .. } => ".u64 (a pointer)".to_string(),
            ParamKind::Array { rank, .. } => format!(".align 8 .b8[{}] (caijit::Array)", array_param_size(*rank)),
            ParamKind::Scalar(d @ (DType::F32 | DType::F64)) => format!(".f{}", d.itemsize() * 8),
            ParamKind::Scalar(d @ (DType::C64 | DType::C128)) => format!(".b8[{}] (a struct)", d.itemsize()),
            ParamKind::Scalar(d) => format!(".s{0}/.u{0}/.b{0}", d.itemsize() * 8),
            ParamKind::Struct { .. } => String::new(),
        };
        Err(format!("the compiler's type needs {want} but the PTX has {}", p.describe()))
    }
}

fn kind_of(t: &ParamType) -> Result<ParamKind, String> {
    let dtype = |c: &CType| match c {
        CType::Scalar(d) => Ok(Some(*d)),
        CType::Named(_) => Ok(None),
        CType::TemplateParam(p) => Err(format!("template parameter {p} is not substituted")),
    };
    Ok(match t {
        ParamType::Pointer { elem, is_const } => ParamKind::Pointer { dtype: dtype(elem)?, is_const: *is_const },
        ParamType::Array { elem, is_const, rank } => match rank {
            Rank::Fixed(n) if *n > crate::cai::MAX_RANK => {
                return Err(format!("caijit::Array of rank {n}: arrays have at most {} dimensions", crate::cai::MAX_RANK))
            }
            Rank::Fixed(n) => ParamKind::Array { dtype: dtype(elem)?, is_const: *is_const, rank: *n },
            Rank::TemplateParam(p) => return Err(format!("template parameter {p} is not substituted")),
        },
        ParamType::Value(CType::Scalar(d)) => ParamKind::Scalar(*d),
        ParamType::Value(CType::Named(n)) => ParamKind::Struct { name: n.clone() },
        ParamType::Value(CType::TemplateParam(p)) => return Err(format!("template parameter {p} is not substituted")),
    })
}

/// Lay out a compiled kernel's parameters: `types` from the compiler (demangled), `names`
/// from the source (or `None`s), `ptx` from its `.entry`.
pub fn layout_compiled(
    kernel: &str,
    types: &[ParamType],
    names: &[Option<String>],
    ptx: &[PtxParam],
) -> Result<Vec<ParamLayout>, SignatureError> {
    if types.len() != ptx.len() {
        return Err(SignatureError::Arity { kernel: kernel.into(), declared: types.len(), compiled: ptx.len() });
    }
    let mut offset = 0usize;
    let mut out = Vec::with_capacity(types.len());
    for (index, (ty, p)) in types.iter().zip(ptx).enumerate() {
        let name = names.get(index).cloned().flatten();
        let bad =
            |reason: String| SignatureError::Param { kernel: kernel.into(), index, name: name.clone(), ctype: ty.to_string(), reason };
        let kind = kind_of(ty).map_err(bad)?;
        let too_large = || SignatureError::TooLarge { kernel: kernel.into() };
        offset = kind.place(p, offset).map_err(bad)?.ok_or_else(too_large)?;
        out.push(ParamLayout { index, name: name.clone(), cpp_type: ty.to_string(), kind, size: p.size, align: p.align.max(1), offset });
        offset = offset.checked_add(p.size).ok_or_else(too_large)?;
    }
    Ok(out)
}

/// [`layout_compiled`] of `(name, type)` pairs.
pub fn layout(kernel: &str, declared: &[(Option<String>, ParamType)], ptx: &[PtxParam]) -> Result<Vec<ParamLayout>, SignatureError> {
    let (names, types): (Vec<_>, Vec<_>) = declared.iter().cloned().unzip();
    layout_compiled(kernel, &types, &names, ptx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(size: usize, align: usize, class: PtxClass) -> PtxParam {
        PtxParam { size, align, class }
    }
    fn ptr(d: DType, is_const: bool) -> ParamType {
        ParamType::Pointer { elem: CType::Scalar(d), is_const }
    }
    fn scalar(d: DType) -> ParamType {
        ParamType::Value(CType::Scalar(d))
    }
    fn named(n: &str) -> ParamType {
        ParamType::Value(CType::Named(n.into()))
    }
    const AGG: PtxClass = PtxClass::Aggregate;

    #[test]
    fn layout_offsets_and_cross_check() {
        let types = [
            scalar(DType::I8),
            ParamType::Array { elem: CType::Scalar(DType::F32), is_const: true, rank: Rank::Fixed(2) },
            scalar(DType::F16),
        ];
        let ptx = [p(1, 1, PtxClass::Unsigned), p(40, 8, AGG), p(2, 2, AGG)];
        let l = layout_compiled("k", &types, &[], &ptx).unwrap();
        assert_eq!(l.iter().map(|p| p.offset).collect::<Vec<_>>(), [0, 8, 48]);
        let e = layout_compiled("k", &types, &[Some("a".into())], &[p(4, 4, PtxClass::Signed), ptx[1], ptx[2]]).unwrap_err();
        assert!(matches!(&e, SignatureError::Param { index: 0, name: Some(n), .. } if n == "a"), "{e}");
        assert!(e.to_string().contains("parameter 0 `a` (`signed char`)") && e.to_string().contains("4 bytes"), "{e}");
        assert!(matches!(layout_compiled("k", &types, &[], &ptx[..2]), Err(SignatureError::Arity { declared: 3, compiled: 2, .. })));
    }

    #[test]
    fn kinds_are_checked_against_ptx_classes_not_only_sizes() {
        // `int` where the PTX has `.f32` (the #ifdef case): same size, different kind.
        let e = layout_compiled("scale", &[scalar(DType::I32)], &[Some("a".into())], &[p(4, 4, PtxClass::Float)]).unwrap_err();
        assert_eq!(e.to_string(), "kernel `scale` parameter 0 `a` (`int`): the compiler's type needs .s32/.u32/.b32 but the PTX has .f32");
        let e = layout_compiled("k", &[scalar(DType::F32)], &[], &[p(4, 4, PtxClass::Unsigned)]).unwrap_err();
        assert!(e.to_string().contains("needs .f32 but the PTX has .u32"), "{e}");
        let e = layout_compiled("k", &[ptr(DType::F32, false)], &[], &[p(8, 8, PtxClass::Float)]).unwrap_err();
        assert!(e.to_string().contains(".u64 (a pointer)"), "{e}");
        let arr = ParamType::Array { elem: CType::Scalar(DType::F32), is_const: false, rank: Rank::Fixed(1) };
        assert!(layout_compiled("k", std::slice::from_ref(&arr), &[], &[p(24, 4, AGG)]).is_err());
        assert!(layout_compiled("k", &[arr], &[], &[p(24, 8, AGG)]).is_ok());
        assert!(layout_compiled("k", &[scalar(DType::C64)], &[], &[p(8, 8, PtxClass::Unsigned)]).is_err());
        for (t, q) in [
            (scalar(DType::Bool), p(1, 1, PtxClass::Unsigned)),
            (scalar(DType::I64), p(8, 8, PtxClass::Unsigned)),
            (scalar(DType::U16), p(2, 2, PtxClass::Unsigned)),
            (scalar(DType::F16), p(2, 2, AGG)),
            (scalar(DType::BF16), p(2, 2, AGG)),
            (scalar(DType::C128), p(16, 16, AGG)),
            (named("E"), p(4, 4, PtxClass::Unsigned)),
            (named("S"), p(16, 16, AGG)),
            (scalar(DType::I32), p(4, 4, AGG)),
            (scalar(DType::F64), p(8, 8, AGG)),
            (ptr(DType::F32, true), p(8, 8, AGG)),
        ] {
            assert!(layout_compiled("k", std::slice::from_ref(&t), &[], &[q]).is_ok(), "{t} {q:?}");
        }
    }

    #[test]
    fn kinds_describe_themselves_and_their_sizes() {
        let p = ParamKind::Pointer { dtype: Some(DType::F32), is_const: true };
        assert_eq!((p.describe(), p.expected_size()), ("a contiguous array of float32".into(), Some(8)));
        let p = ParamKind::Pointer { dtype: None, is_const: false };
        assert_eq!(p.describe(), "a writable contiguous array of any dtype");
        let a = ParamKind::Array { dtype: Some(DType::I16), is_const: false, rank: 3 };
        assert_eq!((a.describe(), a.expected_size()), ("a writable 3-d array of int16".into(), Some(56)));
        let s = ParamKind::Scalar(DType::F64);
        assert_eq!((s.describe(), s.expected_size()), ("a scalar converted to double (float64)".into(), Some(8)));
        let s = ParamKind::Struct { name: "S".into() };
        assert_eq!((s.describe(), s.expected_size()), ("a `S` struct passed as bytes".into(), None));
    }

    #[test]
    fn layout_of_structs_and_unsubstituted_templates() {
        let l =
            layout("k", &[(Some("s".into()), named("S")), (None, ptr(DType::U8, false))], &[p(12, 4, AGG), p(8, 8, PtxClass::Unsigned)])
                .unwrap();
        assert_eq!(l[0].kind, ParamKind::Struct { name: "S".into() });
        assert_eq!((l[0].offset, l[0].size, l[1].offset, l[1].align), (0, 12, 16, 8));
        assert_eq!(l[1].cpp_type, "unsigned char*");
        let e = layout("k", &[(None, ParamType::Value(CType::TemplateParam("T".into())))], &[p(4, 4, PtxClass::Float)]).unwrap_err();
        assert!(e.to_string().contains("template parameter T is not substituted"), "{e}");
    }

    #[test]
    fn layouts_past_the_address_space_are_errors() {
        let big = p(usize::MAX - 2, 1, AGG);
        let e = layout_compiled("k", &[named("A"), named("B")], &[], &[big, p(1, 8, AGG)]).unwrap_err();
        assert!(matches!(e, SignatureError::TooLarge { .. }), "{e}");
        let e = layout_compiled("k", &[named("A"), named("B")], &[], &[big, p(8, 1, AGG)]).unwrap_err();
        assert!(e.to_string().contains("more than"), "{e}");
        assert_eq!(layout_compiled("k", &[named("A")], &[], &[p(usize::MAX, 1, AGG)]).unwrap()[0].size, usize::MAX);
    }

    #[test]
    fn huge_array_ranks_saturate_instead_of_overflowing() {
        assert_eq!(array_param_size(3), 56);
        assert_eq!(array_param_size(usize::MAX / 16 + 1), usize::MAX);
        let t = [ParamType::Array { elem: CType::Scalar(DType::F32), is_const: false, rank: Rank::Fixed(usize::MAX) }];
        for size in [40, usize::MAX] {
            let e = layout_compiled("f", &t, &[], &[p(size, 8, AGG)]).unwrap_err();
            assert!(e.to_string().contains("parameter 0") && e.to_string().contains("at most 64 dimensions"), "{e}");
        }
        let t = [ParamType::Array { elem: CType::Scalar(DType::F32), is_const: false, rank: Rank::Fixed(64) }];
        assert_eq!(layout_compiled("f", &t, &[], &[p(array_param_size(64), 8, AGG)]).unwrap()[0].size, 1032);
    }
}
