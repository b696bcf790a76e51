//! The DLPack C exchange API path: any type whose `__dlpack_c_exchange_api__` capsule
//! holds a `DLPackExchangeAPI` table (PyTorch 2.10+ today) is read through the table's C
//! functions, without Python attribute reads: pointer, shape, strides, dtype and device by
//! `dltensor_from_py_object_no_sync` (or the owning `managed_tensor_from_py_object_no_sync`),
//! and the producer's current work stream by `current_work_stream`, which the view carries
//! as its producer stream (the same stream the PyTorch fast path reads, so the stream
//! protocol orders and reverse-orders exactly as before).
//!
//! Whatever the table cannot give as caijit would read it through the producer's other
//! interfaces (a host tensor, an unsupported dtype, a producer error) takes the next path,
//! so errors stay the generic paths' own.

use cai_runtime::cai::DType;
use cai_runtime::python::dlpack::{view_of, ExchangeApi, Memory};
use pyo3::prelude::*;

use super::arg::PyArg;
use super::context::ArgContext;
use super::producer::Producer;
use crate::errors::PyCaiResult;

/// The view and device of `obj` through `api`; `None` to take the next path. `producer`:
/// the producer the type also is, whose rules the table does not apply itself (PyTorch's
/// `__dlpack__` and CAI refuse tensors that require grad, and conjugated views).
pub fn view(
    index: usize,
    obj: &Bound<'_, PyAny>,
    api: &ExchangeApi,
    producer: Option<&Producer>,
    ctx: &mut ArgContext,
) -> PyCaiResult<Option<PyArg>> {
    let py = obj.py();
    if let Some(declines) = producer.and_then(|p| p.declines) {
        if declines(obj)? {
            return Ok(None);
        }
    }
    let info = match api.tensor(obj) {
        Ok(Ok(info)) => info,
        Ok(Err(_)) | Err(_) => return Ok(None),
    };
    let Some(device) = Memory::of(info.device).device() else { return Ok(None) };
    if let Some(refuse) = producer.and_then(|p| p.refuse) {
        let complex = matches!(DType::from_dlpack(info.dtype.code, info.dtype.bits, info.dtype.lanes), Some(DType::C64 | DType::C128));
        refuse(index, obj, Some(complex))?;
    }
    let stream = ctx.exchange_stream(py, api, info.device.device_type, device)?;
    Ok(view_of(&info, Some(stream)).ok().map(|v| PyArg::ArrayOn(v, device)))
}
