//! CUDA Array Interface ⇄ Python (feature `python`): reading any producer's
//! `__cuda_array_interface__` dict into a [`Descriptor`] with every key type-checked, and
//! writing a descriptor back as a dict. Used by caijit's Python extension and by
//! `#[derive(CudaArrayInterface)]` with `#[cai(python)]`.

use pyo3::exceptions::{PyAttributeError, PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyString, PyTuple};

use crate::cai::{shorten_plain, Data, Descriptor, InterfaceError};

pub mod dlpack;

/// C functions of other extensions, exported through Cython's `__pyx_capi__` capsules.
pub mod capi {
    pub use crate::sys::capi::*;
}

/// The running Python code of this thread: the innermost frame's code object and
/// instruction offset (launch call sites).
pub mod frame {
    pub use crate::sys::frame::*;
}

/// Why a Python object could not be read as a CUDA array.
#[derive(Debug)]
#[non_exhaustive]
pub enum FromPyError {
    /// A `__cuda_array_interface__` that breaks the rules (names the key).
    Interface(InterfaceError),
    /// The object has no `__cuda_array_interface__` at all.
    NoInterface(String),
    /// Python raised while the object was read (outside the producer's property).
    Py(PyErr),
    /// The object's `__cuda_array_interface__` property itself raised: `error` is the
    /// producer's exception, kept as the `__cause__` of the error made from this one.
    Producer { type_name: String, error: PyErr },
}

impl std::fmt::Display for FromPyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FromPyError::Interface(e) => write!(f, "{e}"),
            FromPyError::NoInterface(m) => f.write_str(m),
            FromPyError::Py(e) => write!(f, "{e}"),
            FromPyError::Producer { type_name, error } => f.write_str(&producer_message(type_name, error)),
        }
    }
}

fn producer_message(type_name: &str, error: &PyErr) -> String {
    Python::attach(|py| {
        let kind = error.get_type(py).name().map(|n| n.to_string()).unwrap_or_else(|_| "an exception".into());
        let text = error.value(py).str().map(|s| s.to_string()).unwrap_or_default();
        format!("the __cuda_array_interface__ of a {type_name} raised {kind}: {}", shorten_plain(&text))
    })
}

/// The exception for a producer whose `__cuda_array_interface__` raised `error`: `make`'s
/// exception, with the message [`FromPyError::Producer`] displays and `error` as its
/// `__cause__`.
pub fn producer_exception(type_name: &str, error: PyErr, make: impl FnOnce(String) -> PyErr) -> PyErr {
    let err = make(producer_message(type_name, &error));
    Python::attach(|py| err.set_cause(py, Some(error)));
    err
}

impl From<InterfaceError> for FromPyError {
    fn from(e: InterfaceError) -> Self {
        FromPyError::Interface(e)
    }
}

impl From<PyErr> for FromPyError {
    fn from(e: PyErr) -> Self {
        FromPyError::Py(e)
    }
}

/// For extensions without caijit's exception classes: `ValueError` for a malformed
/// interface, `TypeError` for an object without one, the producer's exception unchanged.
impl From<FromPyError> for PyErr {
    fn from(e: FromPyError) -> PyErr {
        match e {
            FromPyError::Interface(e) => PyValueError::new_err(e.to_string()),
            FromPyError::NoInterface(m) => PyTypeError::new_err(m),
            FromPyError::Py(e) => e,
            FromPyError::Producer { type_name, error } => producer_exception(&type_name, error, PyValueError::new_err::<String>),
        }
    }
}

/// The descriptor of `obj`'s `__cuda_array_interface__` (or of `obj` itself, a dict).
pub fn descriptor_from_object(obj: &Bound<'_, PyAny>) -> Result<Descriptor, FromPyError> {
    descriptor_from_dict(&interface_dict(obj)?)
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// Whether `v` is a NumPy bool scalar (`numpy.bool_`, named `numpy.bool` since NumPy 2).
fn is_numpy_bool(v: &Bound<'_, PyAny>) -> bool {
    let ty = v.get_type();
    let named = |attr: &str, want: &[&str]| {
        ty.getattr(attr).ok().and_then(|n| n.extract::<String>().ok()).is_some_and(|n| want.contains(&n.as_str()))
    };
    named("__module__", &["numpy"]) && named("__name__", &["bool_", "bool"])
}

fn wrong(key: &'static str, expected: &'static str, got: &Bound<'_, PyAny>) -> InterfaceError {
    // A value whose repr fails (a list nested too deeply for the recursion limit, a
    // broken __repr__) is named by its type alone, and said so.
    let repr = match got.repr() {
        Ok(r) => shorten_plain(&r.to_string()),
        Err(e) => {
            let why = e.get_type(got.py()).name().map(|n| n.to_string()).unwrap_or_else(|_| "an exception".into());
            format!("(its repr() raised {why})")
        }
    };
    InterfaceError::WrongType { key, expected, got: format!("{} {repr}", type_name(got)) }
}

/// A Python integer that fits `T`: an `int` or any other integer with `__index__`
/// (`numpy.int64`), but not a bool (NumPy's `bool_` included) or a float; `None` otherwise.
pub fn index_integer<'py, T: FromPyObjectOwned<'py>>(v: &Bound<'py, PyAny>) -> Option<T> {
    if v.is_instance_of::<PyBool>() || !(v.is_instance_of::<PyInt>() || is_index_integer(v)) {
        return None;
    }
    v.extract::<T>().ok()
}

/// [`index_integer`], or the error naming `key`.
fn int<'py, T: FromPyObjectOwned<'py>>(key: &'static str, expected: &'static str, v: &Bound<'py, PyAny>) -> Result<T, InterfaceError> {
    index_integer(v).ok_or_else(|| wrong(key, expected, v))
}

/// An object with `__index__` that is not a bool (NumPy's `bool_` included): an integer
/// by Python's own rule (`operator.index`).
fn is_index_integer(v: &Bound<'_, PyAny>) -> bool {
    let bool_like = v.get_type().name().is_ok_and(|n| n == "bool" || n == "bool_");
    !bool_like && v.get_type().hasattr("__index__").unwrap_or(false)
}

/// A tuple (or list) of ints.
fn int_seq(key: &'static str, v: &Bound<'_, PyAny>) -> Result<Vec<i64>, InterfaceError> {
    const EXPECTED: &str = "a tuple of ints that fit in 64 bits";
    let item = |x: Bound<'_, PyAny>| int::<i64>(key, EXPECTED, &x).map_err(|_| wrong(key, EXPECTED, v));
    if let Ok(t) = v.cast::<PyTuple>() {
        t.iter().map(item).collect()
    } else if let Ok(l) = v.cast::<PyList>() {
        l.iter().map(item).collect()
    } else {
        Err(wrong(key, EXPECTED, v))
    }
}

/// The keys of a CAI dict, as Python strings made once (a key made from a `&str` on every
/// lookup would cost more than the lookup).
macro_rules! key {
    ($d:expr, $key:literal) => {
        ($key, pyo3::intern!($d.py(), $key))
    };
}

type Key<'a, 'py> = (&'static str, &'a Bound<'py, PyString>);

fn get<'py>(d: &Bound<'py, PyDict>, (_, k): Key<'_, 'py>) -> Result<Option<Bound<'py, PyAny>>, FromPyError> {
    Ok(d.get_item(k)?)
}

fn required<'py>(d: &Bound<'py, PyDict>, key: Key<'_, 'py>) -> Result<Bound<'py, PyAny>, FromPyError> {
    get(d, key)?.ok_or_else(|| InterfaceError::MissingKey { key: key.0 }.into())
}

/// Present and not `None`.
fn optional<'py>(d: &Bound<'py, PyDict>, key: Key<'_, 'py>) -> Result<Option<Bound<'py, PyAny>>, FromPyError> {
    Ok(get(d, key)?.filter(|v| !v.is_none()))
}

/// Read the keys of a CAI dict into a [`Descriptor`], type-checking each.
pub fn descriptor_from_dict(d: &Bound<'_, PyDict>) -> Result<Descriptor, FromPyError> {
    let version = int::<i64>("version", "an int", &required(d, key!(d, "version"))?)?;
    let shape = int_seq("shape", &required(d, key!(d, "shape"))?)?;
    let typestr_obj = required(d, key!(d, "typestr"))?;
    // (A str that is not valid Unicode, with a lone surrogate, is no typestr either.)
    let typestr = typestr_obj
        .cast::<PyString>()
        .ok()
        .and_then(|s| s.to_cow().ok())
        .ok_or_else(|| wrong("typestr", "a str (of valid Unicode)", &typestr_obj))?
        .into_owned();
    let data_obj = required(d, key!(d, "data"))?;
    let data = {
        const EXPECTED: &str = "a tuple (ptr: int, readonly: bool)";
        let t = data_obj.cast::<PyTuple>().map_err(|_| wrong("data", EXPECTED, &data_obj))?;
        if t.len() != 2 {
            return Err(wrong("data", EXPECTED, &data_obj).into());
        }
        let ptr = int::<u64>("data", "a tuple (ptr: int, readonly: bool) with 0 <= ptr < 2**64", &t.get_item(0)?)
            .map_err(|_| wrong("data", "a tuple (ptr: int, readonly: bool) with 0 <= ptr < 2**64", &data_obj))?;
        let ro = t.get_item(1)?;
        // A bool, or NumPy's (`np.True_`, as NumPy ints are taken for the ints).
        let readonly = match ro.cast::<PyBool>() {
            Ok(b) => b.is_true(),
            Err(_) if is_numpy_bool(&ro) => ro.is_truthy()?,
            Err(_) => return Err(wrong("data", EXPECTED, &data_obj).into()),
        };
        Data { ptr, readonly }
    };
    let strides = optional(d, key!(d, "strides"))?.map(|s| int_seq("strides", &s)).transpose()?;
    let descr = optional(d, key!(d, "descr"))?.map(|v| read_descr(&v)).transpose()?;
    let mask = optional(d, key!(d, "mask"))?.is_some();
    let stream =
        optional(d, key!(d, "stream"))?.map(|s| int::<u64>("stream", "None or an int (1, 2, or a CUstream handle)", &s)).transpose()?;
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
pub fn interface_dict<'py>(obj: &Bound<'py, PyAny>) -> Result<Bound<'py, PyDict>, FromPyError> {
    if let Ok(d) = obj.cast::<PyDict>() {
        return Ok(d.clone());
    }
    let attr = match obj.getattr(pyo3::intern!(obj.py(), "__cuda_array_interface__")) {
        Ok(a) => a,
        Err(e) if e.is_instance_of::<PyAttributeError>(obj.py()) => {
            return Err(FromPyError::NoInterface(format!(
                "object of type {} has no __cuda_array_interface__ and is not a dict",
                type_name(obj)
            )));
        }
        // The producer's property itself failed: an interface error caused by its
        // exception (KeyboardInterrupt and other non-`Exception`s pass unchanged).
        Err(e) if e.is_instance_of::<PyException>(obj.py()) => {
            return Err(FromPyError::Producer { type_name: type_name(obj), error: e });
        }
        Err(e) => return Err(e.into()),
    };
    attr.cast_into::<PyDict>().map_err(|e| InterfaceError::NotADict { got: type_name(e.into_inner().as_any()) }.into())
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
    if d.version >= 3 {
        out.set_item("stream", d.stream)?; // the key exists from version 3 on
    }
    Ok(out)
}
