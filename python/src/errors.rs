//! The one mapping from `cai_runtime::Error` to the `caijit` exception hierarchy.
//!
//! The classes are defined in Python (`caijit/errors.py`) so that they can inherit from
//! both `CaijitError` and `ValueError`/`TypeError`.

use cai_runtime::cai::InterfaceError as CaiInterfaceError;
use cai_runtime::Error;
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

pyo3::import_exception!(caijit.errors, InterfaceError);
pyo3::import_exception!(caijit.errors, ArgumentError);
pyo3::import_exception!(caijit.errors, CompileError);
pyo3::import_exception!(caijit.errors, LaunchError);
pyo3::import_exception!(caijit.errors, CudaNotAvailable);
pyo3::import_exception!(caijit.errors, BundleError);
pyo3::import_exception!(caijit.errors, CacheError);

/// An error on its way to Python: caijit's own, or a Python exception raised by a
/// producer's code that passes through unchanged. (A local type, so `From` can be
/// implemented for both.)
pub enum PyCaiError {
    Cai(Error),
    Py(PyErr),
}

impl PyCaiError {
    pub fn argument(message: impl Into<String>) -> Self {
        PyCaiError::Cai(Error::argument(message))
    }
}

impl PyCaiError {
    /// [`Error::at_argument`]: an argument or interface error with its index, parameter
    /// name and C++ type filled in where it does not say them yet. A caijit exception
    /// already made (a producer's `__cuda_array_interface__` that raised, made an
    /// `InterfaceError` with the producer's exception as its cause) gets the same
    /// attributes where they are `None`; other Python exceptions pass unchanged.
    pub fn at_argument(self, index: usize, name: Option<&str>, ctype: Option<&str>) -> Self {
        match self {
            PyCaiError::Cai(e) => PyCaiError::Cai(e.at_argument(index, name, ctype)),
            PyCaiError::Py(e) => Python::attach(|py| {
                let about_an_argument = e.is_instance_of::<InterfaceError>(py) || e.is_instance_of::<ArgumentError>(py);
                if about_an_argument {
                    let value = e.value(py);
                    // Named in the message too, as caijit's own errors are (once: the first
                    // call that says which argument it is).
                    if value.getattr("index").is_ok_and(|a| a.is_none()) {
                        let said = value.getattr("args").ok().and_then(|a| a.extract::<(String,)>().ok());
                        if let Some((message,)) = said {
                            let label = cai_runtime::ArgumentInterfaceError::label_of(index, name, ctype);
                            let _ = value.setattr("args", (format!("{label}: {message}"),));
                        }
                    }
                    let attributes =
                        [("index", index.into_py_any(py)), ("argument", name.into_py_any(py)), ("ctype", ctype.into_py_any(py))];
                    for (attr, v) in attributes {
                        let unset = value.getattr(attr).is_ok_and(|a| a.is_none());
                        if let Err(failed) = v.and_then(|v| if unset { value.setattr(attr, v) } else { Ok(()) }) {
                            return PyCaiError::Py(failed);
                        }
                    }
                }
                PyCaiError::Py(e)
            }),
        }
    }
}

impl From<Error> for PyCaiError {
    fn from(e: Error) -> Self {
        PyCaiError::Cai(e)
    }
}

impl From<CaiInterfaceError> for PyCaiError {
    fn from(e: CaiInterfaceError) -> Self {
        PyCaiError::Cai(Error::Interface(e))
    }
}

impl From<cai_runtime::python::FromPyError> for PyCaiError {
    fn from(e: cai_runtime::python::FromPyError) -> Self {
        use cai_runtime::python::FromPyError as E;
        match e {
            E::Interface(e) => PyCaiError::Cai(Error::Interface(e)),
            E::NoInterface(m) => PyCaiError::argument(m),
            E::Py(e) => PyCaiError::Py(e),
            // `except caijit.CaijitError` catches it; the producer's exception is its cause.
            E::Producer { type_name, error } => {
                PyCaiError::Py(cai_runtime::python::producer_exception(&type_name, error, InterfaceError::new_err::<String>))
            }
            other => PyCaiError::Py(other.into()),
        }
    }
}

impl From<PyErr> for PyCaiError {
    fn from(e: PyErr) -> Self {
        PyCaiError::Py(e)
    }
}

impl From<PyCaiError> for PyErr {
    fn from(e: PyCaiError) -> PyErr {
        match e {
            PyCaiError::Cai(e) => cai_to_py(e),
            PyCaiError::Py(e) => e,
        }
    }
}

/// An exception attribute's name and value.
type Attribute = (&'static str, PyResult<Py<PyAny>>);

/// The exception for `e`, with its data as attributes (see `caijit/errors.py`).
fn cai_to_py(e: Error) -> PyErr {
    let message = e.to_string();
    Python::attach(|py| {
        let (err, attrs): (PyErr, Vec<Attribute>) = match e {
            Error::Interface(_) => (InterfaceError::new_err(message), vec![]),
            Error::InterfaceAt(a) => (
                InterfaceError::new_err(message),
                vec![("index", a.index.into_py_any(py)), ("argument", a.name.into_py_any(py)), ("ctype", a.ctype.into_py_any(py))],
            ),
            Error::Argument(a) => (
                ArgumentError::new_err(message),
                vec![("index", a.index.into_py_any(py)), ("argument", a.name.into_py_any(py)), ("ctype", a.ctype.into_py_any(py))],
            ),
            Error::Compile(c) => {
                let nvrtc = c.nvrtc.as_ref();
                let attrs = vec![
                    ("log", c.log.into_py_any(py)),
                    ("code", nvrtc.map(|n| n.code).into_py_any(py)),
                    ("code_name", nvrtc.map(|n| n.name.clone()).into_py_any(py)),
                ];
                (CompileError::new_err(message), attrs)
            }
            Error::Driver { error, .. } => (
                LaunchError::new_err(message),
                vec![("code", error.code.into_py_any(py)), ("code_name", error.name.into_py_any(py)), ("call", error.call.into_py_any(py))],
            ),
            Error::Fault(f) => {
                let (message, site) = crate::fault::with_call_site(py, message);
                let launched = f.launch.as_ref();
                let attrs = vec![
                    ("code", f.error.code.into_py_any(py)),
                    ("code_name", f.error.name.clone().into_py_any(py)),
                    ("call", f.error.call.into_py_any(py)),
                    ("kernel", launched.map(|l| l.kernel).into_py_any(py)),
                    ("grid", launched.map(|l| (l.grid[0], l.grid[1], l.grid[2])).into_py_any(py)),
                    ("block", launched.map(|l| (l.block[0], l.block[1], l.block[2])).into_py_any(py)),
                    ("arguments", launched.map(|l| l.arguments()).into_py_any(py)),
                    (
                        "recent_launches",
                        f.recent
                            .iter()
                            .map(|r| crate::fault::record_dict(py, r))
                            .collect::<PyResult<Vec<_>>>()
                            .and_then(|v| v.into_py_any(py)),
                    ),
                    ("site", site.into_py_any(py)),
                ];
                (LaunchError::new_err(message), attrs)
            }
            Error::Cache { path, source } => (
                CacheError::new_err(message),
                vec![("path", path.display().to_string().into_py_any(py)), ("errno", source.raw_os_error().into_py_any(py))],
            ),
            Error::CudaNotAvailable(_) => (CudaNotAvailable::new_err(message), vec![]),
            Error::Bundle(_) => (BundleError::new_err(message), vec![]),
            _ => (LaunchError::new_err(message), vec![]),
        };
        for (name, value) in attrs {
            let set = value.and_then(|v| err.value(py).setattr(name, v));
            if let Err(e) = set {
                return e;
            }
        }
        err
    })
}

pub type PyCaiResult<T> = Result<T, PyCaiError>;
