//! The one mapping from `cai_runtime::Error` to the `caijit` exception hierarchy.
//!
//! The classes are defined in Python (`caijit/errors.py`) so that they can inherit from
//! both `CaijitError` and `ValueError`/`TypeError`.

use cai_runtime::cai::InterfaceError as CaiInterfaceError;
use cai_runtime::Error;
use pyo3::prelude::*;

pyo3::import_exception!(caijit.errors, InterfaceError);
pyo3::import_exception!(caijit.errors, ArgumentError);
pyo3::import_exception!(caijit.errors, CompileError);
pyo3::import_exception!(caijit.errors, LaunchError);
pyo3::import_exception!(caijit.errors, CudaNotAvailable);

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
            producer @ E::Producer { .. } => {
                // `except caijit.CaijitError` catches it; the producer's exception is its cause.
                let message = producer.to_string();
                let E::Producer { error, .. } = producer else { unreachable!() };
                PyCaiError::Py(Python::attach(|py| {
                    let err = InterfaceError::new_err(message);
                    err.set_cause(py, Some(error));
                    err
                }))
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

fn cai_to_py(e: Error) -> PyErr {
    {
        let message = e.to_string();
        match e {
            Error::Interface(_) => InterfaceError::new_err(message),
            Error::Argument(_) => ArgumentError::new_err(message),
            Error::Compile { message, log } => Python::attach(|py| {
                let err = CompileError::new_err(format!("{message}\n{log}"));
                // `.log` carries NVRTC's log verbatim.
                if let Err(e) = err.value(py).setattr("log", log) {
                    return e;
                }
                err
            }),
            Error::Launch(_) => LaunchError::new_err(message),
            Error::CudaNotAvailable(_) => CudaNotAvailable::new_err(message),
            _ => LaunchError::new_err(message),
        }
    }
}

pub type PyCaiResult<T> = Result<T, PyCaiError>;
