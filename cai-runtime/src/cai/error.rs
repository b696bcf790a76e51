use thiserror::Error;

/// A `__cuda_array_interface__` that caijit cannot accept, naming the offending key.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum InterfaceError {
    #[error("__cuda_array_interface__ must be a dict, got {}", shorten_plain(got))]
    NotADict { got: String },
    #[error("__cuda_array_interface__ is missing the required key '{key}'")]
    MissingKey { key: &'static str },
    #[error("__cuda_array_interface__['{key}'] must be {expected}, got {got}")]
    WrongType { key: &'static str, expected: &'static str, got: String },
    #[error("__cuda_array_interface__['version'] is {version}; versions 0 to 3 are supported")]
    UnsupportedVersion { version: i64 },
    #[error("__cuda_array_interface__['typestr'] {} is not supported: {reason}", shorten(typestr))]
    UnsupportedTypestr { typestr: String, reason: &'static str },
    #[error(
        "__cuda_array_interface__['typestr'] {} is big-endian; CUDA devices are little-endian, so it is rejected rather than reinterpreted",
        shorten(typestr)
    )]
    NonNativeByteOrder { typestr: String },
    #[error("__cuda_array_interface__['shape'][{axis}] is {value}; extents must be non-negative")]
    NegativeExtent { axis: usize, value: i64 },
    #[error("__cuda_array_interface__['shape'] {shape:?} has more elements than fit in 64 bits")]
    ShapeOverflow { shape: Vec<i64> },
    #[error(
        "__cuda_array_interface__['shape'] {shape:?} of {itemsize}-byte elements is more bytes than fit in 63 bits (the largest array is 2**63 - 1 bytes)"
    )]
    ByteSizeOverflow { shape: Vec<i64>, itemsize: usize },
    #[error("__cuda_array_interface__['strides'] has {strides} entries but 'shape' has {shape}; they must match")]
    StridesRank { shape: usize, strides: usize },
    #[error("__cuda_array_interface__['strides'] {strides:?} with shape {shape:?} addresses bytes outside the 64-bit address space")]
    ExtentOverflow { shape: Vec<usize>, strides: Vec<i64> },
    #[error(
        "__cuda_array_interface__['data'] pointer is null (0) but the array has {size} elements; only empty arrays may have a null pointer"
    )]
    NullPointer { size: usize },
    #[error("__cuda_array_interface__['data'] pointer {ptr:#x} with strides {strides:?} addresses bytes outside the 64-bit address space")]
    AddressOverflow { ptr: u64, strides: Vec<i64> },
    #[error("__cuda_array_interface__['mask'] is set; masked arrays are not supported")]
    MaskUnsupported,
    #[error(
        "__cuda_array_interface__['stream'] is 0, which the CUDA Array Interface forbids (it is ambiguous); use 1 for the legacy default stream or 2 for the per-thread default stream"
    )]
    StreamZero,
    #[error("__cuda_array_interface__ rank {rank} exceeds the supported maximum of {max}")]
    RankTooLarge { rank: usize, max: usize },
    #[error("__cuda_array_interface__['typestr'] is {got}, but this type holds {expected}")]
    DtypeMismatch { expected: crate::cai::DType, got: crate::cai::DType },
    #[error("__cuda_array_interface__['shape'] has {got} dimensions, but this type holds {expected}")]
    RankMismatch { expected: usize, got: usize },
    #[error("__cuda_array_interface__['strides'] {strides:?} is not C-contiguous, and this type has no strides field")]
    NotContiguous { strides: Vec<i64> },
    #[error("__cuda_array_interface__['data'] is readonly, but this type's data field is writable")]
    Readonly,
}

/// The longest value quoted in a message, in characters; longer ones are cut with `…`.
pub(crate) const MAX_QUOTED: usize = 80;

/// `s`'s first [`MAX_QUOTED`] characters, and what to add after them: `…` and the length
/// when they are not all of it.
fn cut(s: &str) -> (&str, String) {
    match s.char_indices().nth(MAX_QUOTED) {
        None => (s, String::new()),
        Some((end, _)) => (&s[..end], format!("… ({} characters)", s.chars().count())),
    }
}

/// `s` cut to `MAX_QUOTED` characters (with `…` and its length when cut): how error
/// messages quote values of any length.
pub fn shorten_plain(s: &str) -> String {
    let (kept, rest) = cut(s);
    format!("{kept}{rest}")
}

/// `s` quoted (`{:?}`), cut to [`MAX_QUOTED`] characters.
pub(crate) fn shorten(s: &str) -> String {
    let (kept, rest) = cut(s);
    format!("{kept:?}{rest}")
}
