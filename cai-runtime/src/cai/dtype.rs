//! Element types of the CUDA Array Interface: their typestrs, NumPy names, C++ types and
//! DLPack type codes. Reading a typestr, which can fail, is `typestr.rs`.

// dlpack.h's `DLDataTypeCode`s of the element kinds caijit has.
const DLPACK_INT: u8 = 0;
const DLPACK_UINT: u8 = 1;
const DLPACK_FLOAT: u8 = 2;
const DLPACK_BFLOAT: u8 = 4;
const DLPACK_COMPLEX: u8 = 5;
const DLPACK_BOOL: u8 = 6;

/// An element type that caijit can pass to a kernel.
///
/// Parsed from a NumPy typestr (`"<f4"`, `"|u1"`, …). `<V2` means bfloat16 only where
/// the caller says so ([`TypestrOptions::v2_is_bfloat16`]): NumPy has no bfloat16, so
/// producers export it as an opaque 2-byte void.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DType {
    Bool,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F16,
    BF16,
    F32,
    F64,
    C64,
    C128,
}

/// How to read typestrs that NumPy cannot describe exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TypestrOptions {
    /// Read `<V2` (an opaque 2-byte element) as bfloat16.
    pub v2_is_bfloat16: bool,
}

impl TypestrOptions {
    /// Options that read `<V2` as bfloat16.
    pub const BFLOAT16_V2: Self = Self { v2_is_bfloat16: true };
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 15] = [
        DType::Bool,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::C64,
        DType::C128,
    ];

    /// Size of one element in bytes.
    pub const fn itemsize(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 | DType::C64 => 8,
            DType::C128 => 16,
        }
    }

    /// The canonical typestr, as NumPy writes it on a little-endian machine.
    pub const fn typestr(self) -> &'static str {
        match self {
            DType::Bool => "|b1",
            DType::I8 => "|i1",
            DType::I16 => "<i2",
            DType::I32 => "<i4",
            DType::I64 => "<i8",
            DType::U8 => "|u1",
            DType::U16 => "<u2",
            DType::U32 => "<u4",
            DType::U64 => "<u8",
            DType::F16 => "<f2",
            DType::BF16 => "<V2",
            DType::F32 => "<f4",
            DType::F64 => "<f8",
            DType::C64 => "<c8",
            DType::C128 => "<c16",
        }
    }

    /// The NumPy name (`float32`, …); `bfloat16` for [`DType::BF16`].
    pub const fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::C64 => "complex64",
            DType::C128 => "complex128",
        }
    }

    /// The CUDA C++ type a kernel uses for this element.
    pub const fn cpp_name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "signed char",
            DType::I16 => "short",
            DType::I32 => "int",
            DType::I64 => "long long",
            DType::U8 => "unsigned char",
            DType::U16 => "unsigned short",
            DType::U32 => "unsigned int",
            DType::U64 => "unsigned long long",
            DType::F16 => "__half",
            DType::BF16 => "__nv_bfloat16",
            DType::F32 => "float",
            DType::F64 => "double",
            DType::C64 => "caijit::complex<float>",
            DType::C128 => "caijit::complex<double>",
        }
    }

    /// Look a dtype up by its NumPy name (`"float32"`, `"bfloat16"`, …).
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// The dtype of a DLPack `DLDataType` (`code`, `bits`, `lanes`: dlpack.h's
    /// `DLDataTypeCode`, bfloat16 and bool included); `None` for vectors (`lanes != 1`) and
    /// types caijit has no dtype for. The one map DLPack imports (capsules, the exchange
    /// API) read, and [`DType::dlpack`] inverts.
    pub const fn from_dlpack(code: u8, bits: u8, lanes: u16) -> Option<DType> {
        if lanes != 1 {
            return None;
        }
        Some(match (code, bits) {
            (DLPACK_INT, 8) => DType::I8,
            (DLPACK_INT, 16) => DType::I16,
            (DLPACK_INT, 32) => DType::I32,
            (DLPACK_INT, 64) => DType::I64,
            (DLPACK_UINT, 8) => DType::U8,
            (DLPACK_UINT, 16) => DType::U16,
            (DLPACK_UINT, 32) => DType::U32,
            (DLPACK_UINT, 64) => DType::U64,
            (DLPACK_FLOAT, 16) => DType::F16,
            (DLPACK_FLOAT, 32) => DType::F32,
            (DLPACK_FLOAT, 64) => DType::F64,
            (DLPACK_BFLOAT, 16) => DType::BF16,
            (DLPACK_COMPLEX, 64) => DType::C64,
            (DLPACK_COMPLEX, 128) => DType::C128,
            (DLPACK_BOOL, 8) => DType::Bool,
            _ => return None,
        })
    }

    /// The DLPack `DLDataType` of this dtype as `(code, bits, lanes)` (one lane): what a
    /// DLPack export writes.
    pub const fn dlpack(self) -> (u8, u8, u16) {
        let code = match self {
            DType::I8 | DType::I16 | DType::I32 | DType::I64 => DLPACK_INT,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 => DLPACK_UINT,
            DType::F16 | DType::F32 | DType::F64 => DLPACK_FLOAT,
            DType::BF16 => DLPACK_BFLOAT,
            DType::C64 | DType::C128 => DLPACK_COMPLEX,
            DType::Bool => DLPACK_BOOL,
        };
        (code, (self.itemsize() * 8) as u8, 1)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dlpack_types_round_trip_and_vectors_are_refused() {
        for d in DType::ALL {
            let (code, bits, lanes) = d.dlpack();
            assert_eq!((bits as usize, lanes), (d.itemsize() * 8, 1), "{d}");
            assert_eq!(DType::from_dlpack(code, bits, lanes), Some(d), "{d}");
            assert_eq!(DType::from_dlpack(code, bits, 4), None, "{d} x4 is a vector");
        }
        // dlpack.h's codes: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLComplex 5, kDLBool 6.
        assert_eq!(DType::F32.dlpack(), (2, 32, 1));
        assert_eq!(DType::BF16.dlpack(), (4, 16, 1));
        assert_eq!(DType::C128.dlpack(), (5, 128, 1));
        assert_eq!(DType::Bool.dlpack(), (6, 8, 1));
        assert_eq!(DType::U16.dlpack(), (1, 16, 1));
        // kDLOpaqueHandle (3), float8 (code 2, 8 bits) and 1-bit bools have no caijit dtype.
        for (code, bits) in [(3, 64), (2, 8), (6, 1), (0, 128), (7, 8)] {
            assert_eq!(DType::from_dlpack(code, bits, 1), None, "({code}, {bits})");
        }
    }

    #[test]
    fn names_and_display_are_numpy_names() {
        assert_eq!(DType::F32.to_string(), "float32");
        assert_eq!(DType::from_name("bfloat16"), Some(DType::BF16));
        assert_eq!(DType::from_name("float"), None);
        assert_eq!(DType::C128.cpp_name(), "caijit::complex<double>");
    }
}
