//! A converted launch argument ([`PyArg`]), holding what must stay alive until its launch
//! is done, and the release of the DLPack capsules among them once the launch's work has
//! finished. (The device a launch runs on is the runtime's rule: `dispatch::launch_device`.)

use cai_runtime::cai::{ArrayView, DType};
use cai_runtime::launch::{Arg, NamedScalar, Num};
use cai_runtime::runtime::Context;
use pyo3::prelude::*;

use crate::array::DeviceArray;
use crate::errors::PyCaiResult;

/// A launch argument converted from Python, holding what must stay alive until the launch.
pub enum PyArg {
    Array(ArrayView),
    /// An array imported by DLPack, with its device when the capsule named one, and the
    /// capsule that keeps it alive (released by [`release_after`] once the work that reads
    /// it has finished).
    Dlpack {
        view: ArrayView,
        device: Option<usize>,
        holder: Py<PyAny>,
    },
    /// An array whose device is known without asking the driver.
    ArrayOn(ArrayView, usize),
    /// A caijit array: its view is borrowed for the launch (the reference keeps it alive),
    /// never copied.
    Own(Py<DeviceArray>),
    /// A view of a caijit array (an `Interface`), holding the array.
    OwnView(ArrayView, Py<DeviceArray>),
    Scalar(Num, Option<DType>),
    /// A scalar named as an input of the graph being captured (`caijit.GraphScalar`).
    ScalarInput(NamedScalar),
    Bytes(Vec<u8>),
}

impl PyArg {
    /// The array's view; `None` for a scalar or struct bytes.
    pub fn view(&self) -> Option<&ArrayView> {
        match self {
            PyArg::Array(v) | PyArg::Dlpack { view: v, .. } | PyArg::ArrayOn(v, _) | PyArg::OwnView(v, _) => Some(v),
            PyArg::Own(a) => Some(a.get().inner.as_view()),
            PyArg::Scalar(..) | PyArg::ScalarInput(..) | PyArg::Bytes(_) => None,
        }
    }

    pub fn as_arg(&self) -> Arg<'_> {
        match self {
            PyArg::Array(v) | PyArg::Dlpack { view: v, device: None, .. } => Arg::Array(v),
            PyArg::ArrayOn(v, d) | PyArg::Dlpack { view: v, device: Some(d), .. } => Arg::ArrayOn(v, *d),
            PyArg::Own(a) => {
                let inner = &a.get().inner;
                Arg::ArrayOn(inner.as_view(), inner.context().ordinal())
            }
            PyArg::OwnView(v, a) => Arg::ArrayOn(v, a.get().inner.context().ordinal()),
            PyArg::Scalar(value, dtype) => Arg::Scalar { value: *value, dtype: *dtype },
            PyArg::ScalarInput(s) => s.arg(),
            PyArg::Bytes(b) => Arg::Bytes(b),
        }
    }
}

/// Hand the DLPack capsules among `args`, and the objects `kept` (the arguments a launch
/// keeps while a caijit graph captures: [`ArgContext::keep`](super::ArgContext::keep); the
/// objects a graph's replay stopped binding), to
/// `ctx`, to be released once the work enqueued so far on `stream` (a CAI value) has
/// finished: a capsule's deleter gives the memory back to its producer (PyTorch's caching
/// allocator, say), which must not reuse it while the kernel still reads it. On a stream
/// being captured that is when the captured graph is destroyed. Other arguments are dropped
/// now. They go together, behind one event, however many there are.
pub fn release_after(ctx: &Context, stream: u64, args: impl IntoIterator<Item = PyArg>, kept: Vec<Py<PyAny>>) -> PyCaiResult<()> {
    let mut holders = kept; // (empty unless a graph captures or rebinds, or for a capsule)
    for a in args {
        if let PyArg::Dlpack { holder, .. } = a {
            holders.push(holder);
        }
    }
    if holders.is_empty() {
        return Ok(());
    }
    // (a failure waits for the stream before it drops the capsules: see release_after)
    Ok(ctx.release_after(stream, Box::new(holders))?)
}
