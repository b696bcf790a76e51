//! Scalars from Python: Python numbers, and NumPy scalars, whose dtype deduces templates
//! (read alike by launches, `caijit.ops` and `caijit.jax`).

use cai_runtime::cai::DType;
use cai_runtime::launch::{NamedScalar, Num};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyComplex, PyFloat, PyInt};

use crate::errors::{PyCaiError, PyCaiResult};
use crate::pyobj::type_name;

/// A Python number (bool, int, float or complex, subclasses included) as a scalar's value;
/// `None` for anything else.
pub fn python_number(index: usize, obj: &Bound<'_, PyAny>) -> PyCaiResult<Option<Num>> {
    // NumPy's float64 and complex128 subclass float and complex: they are NumPy scalars,
    // whose dtype takes part in deduction (`numpy_scalar`). (Anything that is no number at
    // all, an array say, is told by its type alone, before that slower look.)
    let exact = obj.is_exact_instance_of::<PyInt>() || obj.is_exact_instance_of::<PyFloat>() || obj.is_exact_instance_of::<PyBool>();
    let number = exact || obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyFloat>() || obj.is_instance_of::<PyComplex>();
    if !number || (!exact && is_numpy_scalar(obj)?) {
        return Ok(None);
    }
    Ok(Some(if obj.is_instance_of::<PyBool>() {
        Num::Bool(obj.extract()?)
    } else if obj.is_instance_of::<PyInt>() {
        Num::Int(int_value(index, obj)?)
    } else if obj.is_instance_of::<PyFloat>() {
        Num::Float(obj.extract()?)
    } else if let Ok(c) = obj.cast::<PyComplex>() {
        Num::Complex(c.real(), c.imag())
    } else {
        return Ok(None);
    }))
}

/// A Python number, or a NumPy scalar with its dtype (which deduces templates); `None` for
/// anything else.
pub fn number(index: usize, obj: &Bound<'_, PyAny>) -> PyCaiResult<Option<(Num, Option<DType>)>> {
    if let Some(n) = python_number(index, obj)? {
        return Ok(Some((n, None)));
    }
    numpy_scalar(index, obj)
}

/// A NumPy scalar (`numpy.float32(1.5)`): its value, and its dtype, which also drives
/// template deduction; `None` for anything else.
pub fn numpy_scalar(index: usize, obj: &Bound<'_, PyAny>) -> PyCaiResult<Option<(Num, Option<DType>)>> {
    if !is_numpy_scalar(obj)? {
        return Ok(None);
    }
    let name: String = obj.getattr("dtype")?.getattr("name")?.extract()?;
    match python_number(index, &obj.call_method0("item")?)? {
        Some(value) => Ok(Some((value, DType::from_name(&name)))),
        None => Err(PyCaiError::argument(format!("argument {index}: unsupported NumPy scalar {name}"))),
    }
}

/// An int's value: through `i64` (one C call), and only beyond that through the limited
/// API's slower 128-bit path.
pub fn int_value(index: usize, obj: &Bound<'_, PyAny>) -> PyCaiResult<i128> {
    if let Ok(v) = obj.extract::<i64>() {
        return Ok(v.into());
    }
    obj.extract::<i128>().map_err(|_| PyCaiError::argument(format!("argument {index}: integer {obj} does not fit in 128 bits")))
}

/// `numpy.float32(1.5)` and friends (0-d, typed), but not `numpy.ndarray`.
fn is_numpy_scalar(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    if !type_name(obj).starts_with("numpy.") || obj.get_type().name().is_ok_and(|n| n == "ndarray") {
        return Ok(false);
    }
    Ok(obj.hasattr("dtype")? && obj.hasattr("item")?)
}

/// A scalar named as an input of a caijit graph (`g.input("alpha", 0.5)` inside
/// `caijit.graph()`): passed to launches in the capture where the scalar goes, rebound by
/// name at each replay. Outside a capture it is its value.
#[pyclass(frozen, module = "caijit", name = "GraphScalar")]
pub struct GraphScalar {
    pub scalar: NamedScalar,
    /// The Python object it was made from (what `value` gives back).
    pub source: Py<PyAny>,
}

#[pymethods]
impl GraphScalar {
    /// The graph input's name.
    #[getter]
    fn name(&self) -> &str {
        &self.scalar.name
    }
    /// The value it was captured with.
    #[getter]
    fn value(&self, py: Python<'_>) -> Py<PyAny> {
        self.source.clone_ref(py)
    }
    fn __repr__(&self, py: Python<'_>) -> String {
        let value = self.source.bind(py).repr().map(|r| r.to_string()).unwrap_or_default();
        format!("caijit.GraphScalar({:?}, {value})", self.scalar.name)
    }
}
