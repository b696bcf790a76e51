//! `parse_interface`: a `__cuda_array_interface__` dict → a validated `Interface`.

use cai_runtime::cai::{ArrayView, DType, Data, Descriptor, InterfaceError, StreamRef, TypestrOptions};
use pyo3::exceptions::PyAttributeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyString, PyTuple};

use crate::errors::{PyCaiError, PyCaiResult};

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

fn wrong(key: &'static str, expected: &'static str, got: &Bound<'_, PyAny>) -> InterfaceError {
    let repr = got.repr().map(|r| r.to_string()).unwrap_or_default();
    let repr = if repr.len() > 80 { format!("{}…", &repr[..repr.floor_char_boundary(80)]) } else { repr };
    InterfaceError::WrongType { key, expected, got: format!("{} {repr}", type_name(got)) }
}

/// A Python int (not a bool) that fits `T`.
fn int<'py, T: FromPyObjectOwned<'py>>(
    key: &'static str,
    expected: &'static str,
    v: &Bound<'py, PyAny>,
) -> Result<T, InterfaceError> {
    if !v.is_instance_of::<PyInt>() || v.is_instance_of::<PyBool>() {
        return Err(wrong(key, expected, v));
    }
    v.extract::<T>().map_err(|_| wrong(key, expected, v))
}

/// A tuple (or list) of ints.
fn int_seq(key: &'static str, v: &Bound<'_, PyAny>) -> Result<Vec<i64>, InterfaceError> {
    const EXPECTED: &str = "a tuple of ints that fit in 64 bits";
    let items: Vec<Bound<'_, PyAny>> = if let Ok(t) = v.cast::<PyTuple>() {
        t.iter().collect()
    } else if let Ok(l) = v.cast::<PyList>() {
        l.iter().collect()
    } else {
        return Err(wrong(key, EXPECTED, v));
    };
    items.iter().map(|x| int::<i64>(key, EXPECTED, x).map_err(|_| wrong(key, EXPECTED, v))).collect()
}

fn get<'py>(d: &Bound<'py, PyDict>, key: &'static str) -> PyCaiResult<Option<Bound<'py, PyAny>>> {
    Ok(d.get_item(key)?)
}

fn required<'py>(d: &Bound<'py, PyDict>, key: &'static str) -> PyCaiResult<Bound<'py, PyAny>> {
    get(d, key)?.ok_or_else(|| InterfaceError::MissingKey { key }.into())
}

/// Present and not `None`.
fn optional<'py>(d: &Bound<'py, PyDict>, key: &'static str) -> PyCaiResult<Option<Bound<'py, PyAny>>> {
    Ok(get(d, key)?.filter(|v| !v.is_none()))
}

/// Read the keys of a CAI dict into a [`Descriptor`], type-checking each.
pub fn descriptor_from_dict(d: &Bound<'_, PyDict>) -> PyCaiResult<Descriptor> {
    let version = int::<i64>("version", "an int", &required(d, "version")?)?;
    let shape = int_seq("shape", &required(d, "shape")?)?;
    let typestr_obj = required(d, "typestr")?;
    let typestr = typestr_obj
        .cast::<PyString>()
        .map_err(|_| wrong("typestr", "a str", &typestr_obj))?
        .to_string();
    let data_obj = required(d, "data")?;
    let data = {
        const EXPECTED: &str = "a tuple (ptr: int, readonly: bool)";
        let t = data_obj.cast::<PyTuple>().map_err(|_| wrong("data", EXPECTED, &data_obj))?;
        if t.len() != 2 {
            return Err(wrong("data", EXPECTED, &data_obj).into());
        }
        let ptr = int::<u64>("data", "a tuple (ptr: int, readonly: bool) with 0 <= ptr < 2**64", &t.get_item(0)?)
            .map_err(|_| wrong("data", "a tuple (ptr: int, readonly: bool) with 0 <= ptr < 2**64", &data_obj))?;
        let ro = t.get_item(1)?;
        let readonly = ro.cast::<PyBool>().map_err(|_| wrong("data", EXPECTED, &data_obj))?.is_true();
        Data { ptr, readonly }
    };
    let strides = optional(d, "strides")?.map(|s| int_seq("strides", &s)).transpose()?;
    let descr = optional(d, "descr")?.map(|v| read_descr(&v)).transpose()?;
    let mask = optional(d, "mask")?.is_some();
    let stream = optional(d, "stream")?
        .map(|s| int::<u64>("stream", "None or an int (1, 2, or a CUstream handle)", &s))
        .transpose()?;
    let mut desc = Descriptor::new(shape, typestr, data.ptr, data.readonly);
    desc.version = version;
    desc.strides = strides;
    desc.descr = descr;
    desc.mask = mask;
    desc.stream = stream;
    Ok(desc)
}

fn read_descr(v: &Bound<'_, PyAny>) -> Result<Vec<(String, String)>, InterfaceError> {
    const EXPECTED: &str = "a list of (name, typestr) tuples";
    let list = v.cast::<PyList>().map_err(|_| wrong("descr", EXPECTED, v))?;
    list.iter()
        .map(|item| {
            let t = item.cast::<PyTuple>().map_err(|_| wrong("descr", EXPECTED, v))?;
            let field = |i| -> Result<String, InterfaceError> {
                t.get_item(i).ok().and_then(|x| x.extract::<String>().ok()).ok_or_else(|| wrong("descr", EXPECTED, v))
            };
            Ok((field(0)?, field(1)?))
        })
        .collect()
}

/// The `__cuda_array_interface__` dict of `obj` (or `obj` itself when it is a dict).
pub fn interface_dict<'py>(obj: &Bound<'py, PyAny>) -> PyCaiResult<Bound<'py, PyDict>> {
    if let Ok(d) = obj.cast::<PyDict>() {
        return Ok(d.clone());
    }
    let attr = match obj.getattr("__cuda_array_interface__") {
        Ok(a) => a,
        Err(e) if e.is_instance_of::<PyAttributeError>(obj.py()) => {
            return Err(PyCaiError::argument(format!(
                "object of type {} has no __cuda_array_interface__ and is not a dict",
                type_name(obj)
            )));
        }
        // The producer's property itself failed: surface its exception unchanged.
        Err(e) => return Err(e.into()),
    };
    attr.cast_into::<PyDict>()
        .map_err(|e| InterfaceError::NotADict { got: type_name(e.into_inner().as_any()) }.into())
}

/// A validated `__cuda_array_interface__`: the facts caijit derived from it.
#[pyclass(frozen, module = "caijit", name = "Interface")]
pub struct Interface {
    pub view: ArrayView,
    typestr: String,
}

impl Interface {
    pub fn from_view(view: ArrayView, typestr: String) -> Interface {
        Interface { view, typestr }
    }
}

#[pymethods]
impl Interface {
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.view.shape())
    }
    /// Byte strides, always explicit.
    #[getter]
    fn strides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.view.strides())
    }
    /// A `numpy.dtype` (`ml_dtypes.bfloat16` for bfloat16 where installed).
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        numpy_dtype(py, self.view.dtype())
    }
    /// The typestr as the producer wrote it.
    #[getter]
    fn typestr(&self) -> &str {
        &self.typestr
    }
    #[getter]
    fn ptr(&self) -> u64 {
        self.view.ptr()
    }
    #[getter]
    fn readonly(&self) -> bool {
        self.view.readonly()
    }
    #[getter]
    fn version(&self) -> u8 {
        self.view.version()
    }
    /// `None` (no ordering needed) or the CAI stream value: 1, 2 or a handle.
    #[getter]
    fn stream(&self) -> Option<u64> {
        self.view.stream().map(StreamRef::to_cai)
    }
    #[getter]
    fn ndim(&self) -> usize {
        self.view.ndim()
    }
    #[getter]
    fn size(&self) -> usize {
        self.view.size()
    }
    #[getter]
    fn itemsize(&self) -> usize {
        self.view.dtype().itemsize()
    }
    #[getter]
    fn nbytes(&self) -> usize {
        self.view.nbytes()
    }
    #[getter]
    fn is_c_contiguous(&self) -> bool {
        self.view.is_c_contiguous()
    }
    #[getter]
    fn is_f_contiguous(&self) -> bool {
        self.view.is_f_contiguous()
    }
    /// `(lo, hi)`: the bytes addressed, relative to `ptr` (lo < 0 with negative strides).
    #[getter]
    fn byte_extent(&self) -> (i128, i128) {
        self.view.byte_extent()
    }
    #[getter]
    fn is_itemsize_aligned(&self) -> bool {
        self.view.is_itemsize_aligned()
    }
    /// The array re-exported as a CAI v3 dict (producer rules), so an `Interface` is
    /// itself a CUDA array that other libraries can consume.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        descriptor_to_dict(py, &self.view.to_descriptor())
    }
    fn __repr__(&self) -> String {
        let v = &self.view;
        format!(
            "Interface(shape={:?}, strides={:?}, dtype={}, ptr={:#x}, readonly={}, version={}, stream={})",
            v.shape(),
            v.strides(),
            v.dtype(),
            v.ptr(),
            if v.readonly() { "True" } else { "False" },
            v.version(),
            v.stream().map_or("None".to_string(), |s| s.to_cai().to_string())
        )
    }
}

pub fn numpy_dtype(py: Python<'_>, dtype: DType) -> PyResult<Bound<'_, PyAny>> {
    if dtype == DType::BF16 {
        if let Ok(m) = py.import("ml_dtypes") {
            return py.import("numpy")?.getattr("dtype")?.call1((m.getattr("bfloat16")?,));
        }
    }
    py.import("numpy")?.getattr("dtype")?.call1((dtype.typestr(),))
}

pub fn descriptor_to_dict<'py>(py: Python<'py>, d: &Descriptor) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("shape", PyTuple::new(py, &d.shape)?)?;
    out.set_item("typestr", &d.typestr)?;
    out.set_item("data", (d.data.ptr, d.data.readonly))?;
    out.set_item("version", d.version)?;
    match &d.strides {
        Some(s) => out.set_item("strides", PyTuple::new(py, s)?)?,
        None => out.set_item("strides", py.None())?,
    }
    out.set_item("descr", vec![("", d.typestr.as_str())])?;
    out.set_item("stream", d.stream)?;
    Ok(out)
}

/// Validate `obj`'s `__cuda_array_interface__` (or `obj` itself when it is a dict)
/// without touching the GPU. `bfloat16=True` reads `<V2` as bfloat16.
#[pyfunction]
#[pyo3(signature = (obj, *, bfloat16 = false))]
pub fn parse_interface(obj: &Bound<'_, PyAny>, bfloat16: bool) -> PyCaiResult<Interface> {
    let dict = interface_dict(obj)?;
    let desc = descriptor_from_dict(&dict)?;
    let options = if bfloat16 { TypestrOptions::BFLOAT16_V2 } else { TypestrOptions::default() };
    let view = ArrayView::from_descriptor(&desc, options)?;
    Ok(Interface { view, typestr: desc.typestr })
}
