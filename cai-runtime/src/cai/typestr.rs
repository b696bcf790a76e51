//! Reading a NumPy typestr (`"<f4"`, `"|u1"`, …) into a [`DType`], or the
//! [`InterfaceError`] that says why it names no dtype caijit has.

use super::dtype::{DType, TypestrOptions};
use super::error::InterfaceError;

impl DType {
    /// Parse a typestr with default options (`<V2` is rejected).
    pub fn from_typestr(typestr: &str) -> Result<DType, InterfaceError> {
        Self::from_typestr_with(typestr, TypestrOptions::default())
    }

    /// Parse a typestr: a byte-order character, a kind character and an itemsize.
    ///
    /// `<` (little), `|` (not applicable) and `=` (native) are accepted; `>` (big-endian)
    /// is rejected for multi-byte types, since every CUDA device is little-endian.
    pub fn from_typestr_with(typestr: &str, options: TypestrOptions) -> Result<DType, InterfaceError> {
        let unsupported = |reason: &'static str| InterfaceError::UnsupportedTypestr { typestr: typestr.to_owned(), reason };
        let mut chars = typestr.chars();
        let order = chars.next().ok_or_else(|| unsupported("it is empty"))?;
        let kind = chars.next().ok_or_else(|| unsupported("it has no kind character"))?;
        let size: usize = chars.as_str().parse().map_err(|_| unsupported("its itemsize is not a number"))?;
        if !matches!(order, '<' | '>' | '|' | '=') {
            return Err(unsupported("its first character must be one of '<', '>', '|', '='"));
        }
        let dtype = match (kind, size) {
            ('b', 1) => DType::Bool,
            ('i', 1) => DType::I8,
            ('i', 2) => DType::I16,
            ('i', 4) => DType::I32,
            ('i', 8) => DType::I64,
            ('u', 1) => DType::U8,
            ('u', 2) => DType::U16,
            ('u', 4) => DType::U32,
            ('u', 8) => DType::U64,
            ('f', 2) => DType::F16,
            ('f', 4) => DType::F32,
            ('f', 8) => DType::F64,
            ('c', 8) => DType::C64,
            ('c', 16) => DType::C128,
            ('V', 2) if options.v2_is_bfloat16 => DType::BF16,
            ('V', _) => {
                return Err(unsupported("opaque void elements are not supported (pass bfloat16 explicitly to read <V2 as bfloat16)"))
            }
            ('b' | 'i' | 'u' | 'f' | 'c', _) => return Err(unsupported("this itemsize is not supported for its kind")),
            _ => return Err(unsupported("the kind is not one of b, i, u, f, c")),
        };
        if order == '>' && dtype.itemsize() > 1 {
            return Err(InterfaceError::NonNativeByteOrder { typestr: typestr.to_owned() });
        }
        Ok(dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_canonical_typestr_round_trips() {
        for d in DType::ALL {
            let opts = TypestrOptions::BFLOAT16_V2;
            assert_eq!(DType::from_typestr_with(d.typestr(), opts), Ok(d), "{d}");
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
    }

    #[test]
    fn native_and_not_applicable_orders_are_accepted() {
        assert_eq!(DType::from_typestr("=f4"), Ok(DType::F32));
        assert_eq!(DType::from_typestr("|u1"), Ok(DType::U8));
        assert_eq!(DType::from_typestr("<u1"), Ok(DType::U8));
        assert_eq!(DType::from_typestr(">u1"), Ok(DType::U8), "byte order is moot for one byte");
        assert_eq!(DType::from_typestr("|b1"), Ok(DType::Bool));
    }

    #[test]
    fn big_endian_multibyte_is_rejected() {
        let err = DType::from_typestr(">i4").unwrap_err();
        assert!(matches!(err, InterfaceError::NonNativeByteOrder { .. }));
        assert!(err.to_string().contains("typestr") && err.to_string().contains(">i4"), "{err}");
    }

    #[test]
    fn v2_needs_the_bfloat16_opt_in() {
        assert!(DType::from_typestr("<V2").is_err());
        assert_eq!(DType::from_typestr_with("<V2", TypestrOptions::BFLOAT16_V2), Ok(DType::BF16));
        assert!(DType::from_typestr_with("<V4", TypestrOptions::BFLOAT16_V2).is_err());
    }

    #[test]
    fn malformed_typestrs_are_rejected() {
        for bad in ["", "<", "<f", "<f3", "<x4", "f4", "<f4x", "<i16", "<c4", "<O8", "<M8", "<U4", "<f-4"] {
            assert!(DType::from_typestr(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn rejections_say_what_is_wrong_with_the_typestr() {
        let reason = |s: &str| match DType::from_typestr(s) {
            Err(InterfaceError::UnsupportedTypestr { typestr, reason }) => {
                assert_eq!(typestr, s);
                reason
            }
            other => panic!("{s:?}: {other:?}"),
        };
        assert_eq!(reason(""), "it is empty");
        assert_eq!(reason("<"), "it has no kind character");
        assert_eq!(reason("<fx"), "its itemsize is not a number");
        assert_eq!(reason("!f4"), "its first character must be one of '<', '>', '|', '='");
        assert_eq!(reason("<f3"), "this itemsize is not supported for its kind");
        assert_eq!(reason("<b2"), "this itemsize is not supported for its kind");
        assert_eq!(reason("<x4"), "the kind is not one of b, i, u, f, c");
        assert!(reason("<V2").contains("opaque void"));
    }

    #[test]
    fn long_typestrs_are_cut_in_messages() {
        let long = format!("<f{}", "9".repeat(10 << 20));
        let message = DType::from_typestr(&long).unwrap_err().to_string();
        assert!(message.len() < 300, "{} bytes", message.len());
        assert!(message.contains("'typestr'") && message.contains(&format!("({} characters)", long.len())), "{message}");
        let big_endian = format!(">f4{}", "x".repeat(200));
        let message = InterfaceError::NonNativeByteOrder { typestr: big_endian }.to_string();
        assert!(message.len() < 300 && message.contains("…"), "{message}");
    }
}
