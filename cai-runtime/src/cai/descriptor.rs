//! The keys of a `__cuda_array_interface__` dict, as given by a producer. Validating them
//! ([`Descriptor::validate`]) is in `view.rs`, beside the view it yields.

/// The `data` entry: a device pointer and whether the array may be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Data {
    pub ptr: u64,
    pub readonly: bool,
}

/// A `__cuda_array_interface__` as given, key by key, before validation.
///
/// Every key of the specification is held: the values are the ones the producer wrote,
/// already converted from Python objects into integers and strings, but not yet checked.
/// [`Descriptor::validate`] applies caijit's consumer rules and yields an
/// [`ArrayView`](super::ArrayView).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Descriptor {
    /// `version`: 0 to 3 are accepted.
    pub version: i64,
    /// `shape`: one extent per dimension; `[]` is a 0-d array.
    pub shape: Vec<i64>,
    /// `typestr`: a NumPy typestr such as `"<f4"`.
    pub typestr: String,
    /// `data`: `(ptr, readonly)`.
    pub data: Data,
    /// `strides`: bytes per dimension; `None` means C-contiguous.
    pub strides: Option<Vec<i64>>,
    /// `descr`: NumPy's structured description, kept as `(name, typestr)` pairs.
    pub descr: Option<Vec<(String, String)>>,
    /// `mask`: `true` when a mask other than `None` was given (always rejected).
    pub mask: bool,
    /// `stream`: `None` when absent or `None`, else the integer given (0 is rejected).
    pub stream: Option<u64>,
}

impl Descriptor {
    /// A version-3 descriptor of a C-contiguous array with no stream.
    pub fn new(shape: Vec<i64>, typestr: impl Into<String>, ptr: u64, readonly: bool) -> Self {
        Self {
            version: 3,
            shape,
            typestr: typestr.into(),
            data: Data { ptr, readonly },
            strides: None,
            descr: None,
            mask: false,
            stream: None,
        }
    }
}
