//! DLPack-only producers as launch arguments: the object's `__dlpack__` capsule, imported
//! with the stream handshake (the producer orders its work before the launch stream).

use cai_runtime::cai::StreamRef;
use cai_runtime::python::dlpack::{self as dl, DLDevice, Memory};
use pyo3::prelude::*;

use super::arg::PyArg;
use super::context::ArgContext;
use crate::dlpack::{call_dlpack, dlpack_device};
use crate::errors::{PyCaiError, PyCaiResult};
use crate::pyobj::type_name;

/// Argument `index` by DLPack, when `obj` is a DLPack producer on a CUDA device (`None`
/// otherwise). The producer orders its pending work before the launch's stream, which the
/// view then carries as its producer stream (in a graph capture: neither, see
/// [`ArgContext::dlpack_stream`]); the capsule, left unconsumed, keeps the memory alive
/// until the launch's work is done. The capsule's own device must be the CUDA device
/// `__dlpack_device__` named.
pub fn import(index: usize, obj: &Bound<'_, PyAny>, ctx: &mut ArgContext) -> PyCaiResult<Option<PyArg>> {
    let bad = |why: String| PyCaiError::argument(format!("argument {index}: a {} by DLPack: {why}", type_name(obj)));
    let device = dlpack_device(obj).map_err(|e| match e {
        PyCaiError::Cai(cai_runtime::Error::Argument(a)) => bad(a.message),
        other => other,
    })?;
    let Some((dev_type, dev_id)) = device else { return Ok(None) };
    let Some(device) = Memory::of(DLDevice { device_type: dev_type, device_id: dev_id }).device() else { return Ok(None) };
    let (ask, carried) = ctx.dlpack_stream()?;
    let capsule = call_dlpack(obj, ask)?;
    let info = dl::read_capsule(&capsule).map_err(bad)?;
    if info.device != (DLDevice { device_type: dev_type, device_id: dev_id }) {
        let host = Memory::of(info.device) == Memory::Host;
        return Err(bad(format!(
            "__dlpack_device__() says ({dev_type}, {dev_id}) but its capsule's tensor is on ({}, {}){}",
            info.device.device_type,
            info.device.device_id,
            if host { ", host memory (caijit never copies implicitly)" } else { "" }
        )));
    }
    let view = dl::view_of(&info, carried.map(StreamRef::from_cai).transpose()?).map_err(bad)?;
    Ok(Some(PyArg::Dlpack { view, device: Some(device), holder: capsule.unbind() }))
}

/// Whether `obj` is a DLPack producer of host memory (a NumPy array, a CPU tensor).
pub fn is_host(obj: &Bound<'_, PyAny>) -> PyCaiResult<bool> {
    Ok(matches!(dlpack_device(obj)?, Some((device_type, device_id)) if Memory::of(DLDevice { device_type, device_id }) == Memory::Host))
}
