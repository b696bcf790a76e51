//! PyTorch tensors without the exchange API (PyTorch before 2.10, or
//! `CAIJIT_DLPACK_EXCHANGE=0`), read through their attributes: the facts torch's
//! `__cuda_array_interface__` would give, and torch's current stream as the producer stream
//! (PyTorch enqueues a tensor's work and frees its memory for reuse on it).

use cai_runtime::cai::{ArrayView, DType, StreamRef};
use pyo3::intern;
use pyo3::prelude::*;

use super::{cached_dtype, ints, object_device, ArgContext};
use crate::errors::{PyCaiError, PyCaiResult};

pub fn is_type(qualified_name: &str) -> bool {
    qualified_name == "torch.Tensor"
}

pub fn view(obj: &Bound<'_, PyAny>, ctx: &mut ArgContext) -> PyCaiResult<Option<(ArrayView, usize)>> {
    let py = obj.py();
    // Exactly when torch's own __cuda_array_interface__ would refuse or differ, take the
    // generic path (it raises torch's own error).
    if !obj.getattr(intern!(py, "is_cuda"))?.extract::<bool>()? || obj.getattr(intern!(py, "requires_grad"))?.extract::<bool>()? {
        return Ok(None);
    }
    let dtype_obj = obj.getattr(intern!(py, "dtype"))?;
    let dtype = cached_dtype(&dtype_obj, || {
        let name = dtype_obj.str()?.to_string();
        Ok(DType::from_name(name.trim_start_matches("torch.")))
    })?;
    let Some(dtype) = dtype else { return Ok(None) };
    if matches!(dtype, DType::C64 | DType::C128) && obj.call_method0(intern!(py, "is_conj"))?.extract::<bool>()? {
        return Ok(None);
    }
    let ptr: u64 = obj.call_method0(intern!(py, "data_ptr"))?.extract()?;
    let shape = ints::<usize>(&obj.getattr(intern!(py, "shape"))?)?;
    let item = dtype.itemsize() as i64;
    let mut strides = ints::<i64>(&obj.call_method0(intern!(py, "stride"))?)?;
    for s in &mut strides {
        *s = s.checked_mul(item).ok_or_else(|| PyCaiError::argument(format!("stride {s} of a torch tensor overflows")))?;
    }
    let ptr = if shape.contains(&0) { 0 } else { ptr };
    let device = object_device(obj, || Ok(obj.call_method0(intern!(py, "get_device"))?.extract()?))?;
    let stream = StreamRef::from_cai(ctx.torch_stream(py, device)?)?;
    Ok(Some((ArrayView::new(ptr, &shape, Some(&strides), dtype, false, Some(stream))?, device)))
}
