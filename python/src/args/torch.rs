//! PyTorch tensors without the exchange API (PyTorch before 2.10, or
//! `CAIJIT_DLPACK_EXCHANGE=0`), read through their attributes: the facts torch's
//! `__cuda_array_interface__` would give, and torch's current stream as the producer stream
//! (PyTorch enqueues a tensor's work and frees its memory for reuse on it).

use cai_runtime::cai::{exported_ptr, ArrayView, DType};
use pyo3::intern;
use pyo3::prelude::*;

use super::arg::PyArg;
use super::context::ArgContext;
use super::producer::{Framework, Producer};
use super::read::{cached_dtype, ints, object_device};
use crate::errors::{PyCaiError, PyCaiResult};
use crate::timing::Phase;

pub static PRODUCER: Producer = Producer {
    name: "torch",
    is_type,
    view,
    phase: Phase::ArgTorch,
    framework: Framework::Torch,
    refuse: Some(refuse_lazy_views),
    declines: Some(requires_grad),
};

fn is_type(qualified_name: &str) -> bool {
    qualified_name == "torch.Tensor"
}

/// A tensor that requires grad: torch's own interfaces refuse it (and say why).
fn requires_grad(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    obj.getattr(intern!(obj.py(), "requires_grad"))?.is_truthy()
}

/// Refuse a tensor whose values are not what its memory holds: a conjugate view (complex
/// dtypes: `complex` is `None` when the dtype is not known yet) or a tensor with the
/// negative bit set (`z.conj().imag`, say). PyTorch resolves those lazily; its
/// `__cuda_array_interface__` exports the memory as it is, which a kernel would misread.
fn refuse_lazy_views(index: usize, obj: &Bound<'_, PyAny>, complex: Option<bool>) -> PyCaiResult<()> {
    let py = obj.py();
    if obj.call_method0(intern!(py, "is_neg"))?.is_truthy()? {
        return Err(PyCaiError::argument(format!(
            "argument {index}: a PyTorch tensor with its negative bit set (a view such as z.conj().imag) holds the negated values; \
             pass x.resolve_neg()"
        )));
    }
    if complex != Some(false) && obj.call_method0(intern!(py, "is_conj"))?.is_truthy()? {
        return Err(PyCaiError::argument(format!(
            "argument {index}: a conjugate view of a PyTorch tensor holds the unconjugated values; pass x.resolve_conj()"
        )));
    }
    Ok(())
}

fn view(index: usize, obj: &Bound<'_, PyAny>, _exact: bool, ctx: &mut ArgContext) -> PyCaiResult<Option<PyArg>> {
    let py = obj.py();
    // Exactly when torch's own __cuda_array_interface__ would refuse or differ, take the
    // generic path (it raises torch's own error).
    if !obj.getattr(intern!(py, "is_cuda"))?.extract::<bool>()? || requires_grad(obj)? {
        return Ok(None);
    }
    let dtype_obj = obj.getattr(intern!(py, "dtype"))?;
    let dtype = cached_dtype(&dtype_obj, || {
        let name = dtype_obj.str()?.to_string();
        Ok(DType::from_name(name.trim_start_matches("torch.")))
    })?;
    let Some(dtype) = dtype else { return Ok(None) };
    refuse_lazy_views(index, obj, Some(matches!(dtype, DType::C64 | DType::C128)))?;
    let ptr: u64 = obj.call_method0(intern!(py, "data_ptr"))?.extract()?;
    let shape = ints::<usize>(&obj.getattr(intern!(py, "shape"))?)?;
    let item = dtype.itemsize() as i64;
    let mut strides = ints::<i64>(&obj.call_method0(intern!(py, "stride"))?)?;
    for s in &mut strides {
        *s = s.checked_mul(item).ok_or_else(|| PyCaiError::argument(format!("stride {s} of a torch tensor overflows")))?;
    }
    let ptr = exported_ptr(ptr, &shape);
    let device = object_device(|| Ok(obj.call_method0(intern!(py, "get_device"))?.extract()?))?;
    let stream = ctx.torch_stream(py, device)?;
    Ok(Some(PyArg::ArrayOn(ArrayView::new(ptr, &shape, Some(&strides), dtype, false, Some(stream))?, device)))
}
