//! What a producer caijit reads through its own attributes (a fast path) is: its row
//! ([`Producer`]), which every path reads — the type's route, the argument's conversion, an
//! op's result type, the timing phase and `_route`'s name. The table of rows is
//! `PRODUCERS` (`args/mod.rs`); a new producer is a module with `is_type`, `view` and its
//! row, and a line there.

use pyo3::prelude::*;

use super::arg::PyArg;
use super::context::ArgContext;
use crate::errors::PyCaiResult;
use crate::timing::Phase;

/// The array library an argument comes from: an op gives its result back in the type of
/// its first array argument's library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framework {
    Torch,
    Cupy,
    Other,
}

/// `view(index, obj, exact, ctx)`: see [`Producer::view`].
pub type ViewFn = fn(usize, &Bound<'_, PyAny>, bool, &mut ArgContext) -> PyCaiResult<Option<PyArg>>;
/// `refuse(index, obj, complex)`: see [`Producer::refuse`].
pub type RefuseFn = fn(usize, &Bound<'_, PyAny>, Option<bool>) -> PyCaiResult<()>;
/// `declines(obj)`: see [`Producer::declines`].
pub type DeclinesFn = fn(&Bound<'_, PyAny>) -> PyResult<bool>;

/// A producer's row.
pub struct Producer {
    /// Its name in `caijit._native._route`.
    pub name: &'static str,
    /// Whether a class of a type's MRO (by its qualified name, `module.qualname`) is the
    /// producer's array type.
    pub is_type: fn(&str) -> bool,
    /// The argument as the producer's own interface gives it (view, device, producer
    /// stream); `None`: the generic paths read it (and report what is wrong with it).
    /// `exact`: the object's type is the producer's own, not a Python subclass.
    pub view: ViewFn,
    /// The timing phase of its conversions.
    pub phase: Phase,
    /// The library whose type an op's result on its arrays takes.
    pub framework: Framework,
    /// Rules of the producer's own interfaces that other paths must apply too: called
    /// before its arrays take the generic paths or the DLPack exchange API (with
    /// `complex: Some(..)` when the dtype is known), it refuses what those would misread.
    pub refuse: Option<RefuseFn>,
    /// Whether the producer's own interfaces decline the object (the exchange API, which
    /// does not, then leaves it to them).
    pub declines: Option<DeclinesFn>,
}

/// A producer a type was matched to, and whether the type is exactly its own.
#[derive(Clone, Copy)]
pub struct Known {
    pub producer: &'static Producer,
    pub exact: bool,
}

impl std::fmt::Debug for Known {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Known({}, exact: {})", self.producer.name, self.exact)
    }
}
