//! C functions other extension modules export to C callers through capsules: Cython puts
//! each `cdef` function a module's `.pxd` declares into the module's `__pyx_capi__` dict,
//! as a capsule named by the function's C signature (what a Cython `cimport` of that
//! module calls). caijit calls CuPy's `cupy_backends.cuda.stream.get_current_stream_ptr`
//! this way: the current stream without building a Python `Stream` object.

use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

/// A `intptr_t f(void)` exported by a Cython module, checked by its capsule's signature.
#[derive(Clone, Copy, Debug)]
pub struct IntptrFn {
    f: unsafe extern "C" fn() -> isize,
}

impl IntptrFn {
    /// `module.__pyx_capi__[name]` when its capsule's name is exactly `intptr_t (void)`;
    /// `None` otherwise (not a Cython module, another signature, another version).
    pub fn from_pyx_capi(module: &Bound<'_, PyModule>, name: &str) -> Option<IntptrFn> {
        let capi = module.getattr("__pyx_capi__").ok()?;
        let capsule = capi.cast::<PyDict>().ok()?.get_item(name).ok()??;
        let capsule = capsule.cast::<PyCapsule>().ok()?;
        let p = capsule.pointer_checked(Some(c"intptr_t (void)")).ok()?;
        // The capsule is kept for the process, so the module's code stays loaded.
        std::mem::forget(capsule.clone().unbind());
        // SAFETY: Cython names the capsule by the exported function's C signature, checked
        // above to be `intptr_t (void)`; the pointer is that function.
        let f = unsafe { std::mem::transmute::<*mut std::ffi::c_void, unsafe extern "C" fn() -> isize>(p.as_ptr()) };
        Some(IntptrFn { f })
    }

    /// Call it, with the GIL held. The capsule's name leaves the function's exception
    /// clause out, so both conventions are handled: a function that reports a Python
    /// exception returns -1 with the error set, and that error is returned; a `noexcept` one
    /// (CuPy's releases) prints the error and returns 0, which is what CuPy's own
    /// `__cuda_array_interface__` then exports too (the legacy default stream).
    pub fn call(&self, py: Python<'_>) -> PyResult<isize> {
        // SAFETY: the function takes no arguments and needs the GIL, which `py` proves.
        let r = unsafe { (self.f)() };
        if r == -1 {
            if let Some(e) = PyErr::take(py) {
                return Err(e);
            }
        }
        Ok(r)
    }
}
