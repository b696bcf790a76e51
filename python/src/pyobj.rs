//! Python objects every part of the binding reads or makes: a type's name (for messages)
//! and the `numpy.dtype` of a caijit dtype.

use cai_runtime::cai::DType;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// An object's type as messages name it: `module.Name`, or `Name` for a builtin.
pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    let t = obj.get_type();
    let module = t.module().map(|m| m.to_string()).unwrap_or_default();
    let name = t.name().map(|n| n.to_string()).unwrap_or_default();
    if module.is_empty() || module == "builtins" {
        name
    } else {
        format!("{module}.{name}")
    }
}

/// The `numpy.dtype` of a dtype, made once per process (ops read it on every call).
pub fn numpy_dtype(py: Python<'_>, dtype: DType) -> PyResult<Bound<'_, PyAny>> {
    static MADE: [PyOnceLock<Py<PyAny>>; DType::ALL.len()] = [const { PyOnceLock::new() }; DType::ALL.len()];
    let make = || -> PyResult<Py<PyAny>> {
        let np_dtype = py.import("numpy")?.getattr("dtype")?;
        if dtype == DType::BF16 {
            if let Ok(m) = py.import("ml_dtypes") {
                return Ok(np_dtype.call1((m.getattr("bfloat16")?,))?.unbind());
            }
        }
        Ok(np_dtype.call1((dtype.typestr(),))?.unbind())
    };
    match MADE.get(dtype as usize) {
        Some(cell) => Ok(cell.get_or_try_init(py, make)?.bind(py).clone()),
        None => Ok(make()?.into_bound(py)),
    }
}
