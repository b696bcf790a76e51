//! A converted launch argument ([`PyArg`]), holding what must stay alive until its launch
//! is done, and what a launch decides from its converted arguments: the device it runs on,
//! and when the DLPack capsules among them may be released.

use cai_runtime::cai::{ArrayView, DType};
use cai_runtime::launch::{Arg, Num};
use cai_runtime::runtime::{Context, Stream as RtStream};
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
    Bytes(Vec<u8>),
}

impl PyArg {
    /// The array's view; `None` for a scalar or struct bytes.
    pub fn view(&self) -> Option<&ArrayView> {
        match self {
            PyArg::Array(v) | PyArg::Dlpack { view: v, .. } | PyArg::ArrayOn(v, _) | PyArg::OwnView(v, _) => Some(v),
            PyArg::Own(a) => Some(a.get().inner.as_view()),
            PyArg::Scalar(..) | PyArg::Bytes(_) => None,
        }
    }

    /// The device of an array argument's memory: the one its conversion learnt, else the
    /// pointer's (asked of the driver only with several devices; the answer is kept, so a
    /// launch does not ask again); `None` for a scalar, struct bytes, or a pointer no device
    /// owns.
    pub fn device(&mut self) -> PyCaiResult<Option<usize>> {
        let asked = match self {
            PyArg::ArrayOn(_, d) | PyArg::Dlpack { device: Some(d), .. } => return Ok(Some(*d)),
            PyArg::Own(a) | PyArg::OwnView(_, a) => return Ok(Some(a.get().inner.context().ordinal())),
            PyArg::Scalar(..) | PyArg::Bytes(_) => return Ok(None),
            _ if cai_runtime::runtime::device_count()? <= 1 => return Ok(Some(0)),
            PyArg::Array(v) | PyArg::Dlpack { view: v, device: None, .. } => cai_runtime::runtime::pointer_device(v.ptr())?,
        };
        match (&mut *self, asked) {
            (PyArg::Array(v), Some(d)) => *self = PyArg::ArrayOn(v.clone(), d),
            (PyArg::Dlpack { device, .. }, Some(d)) => *device = Some(d),
            _ => {}
        }
        Ok(asked)
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
            PyArg::Bytes(b) => Arg::Bytes(b),
        }
    }
}

/// Which device a launch runs on: the device of its first non-empty array, else the
/// stream's, else 0.
pub fn launch_device(args: &mut [PyArg], stream: Option<&RtStream>) -> PyCaiResult<usize> {
    if cai_runtime::runtime::device_count()? <= 1 {
        return Ok(0);
    }
    for a in args {
        if a.view().is_some_and(|v| !v.is_empty()) {
            if let Some(d) = a.device()? {
                return Ok(d);
            }
        }
    }
    match stream {
        Some(s) => Ok(s.device_from_driver()?.unwrap_or(0)),
        None => Ok(0),
    }
}

/// Hand the DLPack capsules among `args` to `ctx`, to be released once the work enqueued
/// so far on `stream` (a CAI value) has finished: a capsule's deleter gives the memory back
/// to its producer (PyTorch's caching allocator, say), which must not reuse it while the
/// kernel still reads it. Other arguments are dropped now.
pub fn release_after(ctx: &Context, stream: u64, args: impl IntoIterator<Item = PyArg>) -> PyCaiResult<()> {
    let mut result: cai_runtime::Result<()> = Ok(());
    for a in args {
        if let PyArg::Dlpack { holder, .. } = a {
            // (a failure waits for the stream before it drops the capsule: see release_after)
            result = result.and(ctx.release_after(stream, Box::new(holder)));
        }
    }
    Ok(result?)
}
