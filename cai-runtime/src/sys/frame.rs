//! The Python code running on this thread, for launch call sites: the innermost frame's
//! code object and instruction offset (the line is found from them only when a fault is
//! reported; no frame is kept).

use std::ffi::c_int;
use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;

type GetLasti = unsafe extern "C" fn(*mut ffi::PyFrameObject) -> c_int;

/// `PyFrame_GetLasti` (Python 3.11+), which the limited API caijit is built against does
/// not declare: looked up in the running interpreter once. `None` on Python 3.10.
fn get_lasti() -> Option<GetLasti> {
    static F: OnceLock<Option<GetLasti>> = OnceLock::new();
    *F.get_or_init(|| {
        let this = libloading::os::unix::Library::this();
        // SAFETY: `PyFrame_GetLasti` has had this signature since it was added (3.11); the
        // interpreter exporting it stays loaded for the life of the process.
        unsafe { this.get::<GetLasti>(b"PyFrame_GetLasti\0") }.ok().map(|s| *s)
    })
}

/// The code object of the innermost Python frame of this thread and the byte offset of its
/// current instruction; `None` without a Python frame, or on Python 3.10.
pub fn current(py: Python<'_>) -> Option<(Bound<'_, PyAny>, u32)> {
    let lasti = get_lasti()?;
    // SAFETY: the GIL is held (`py`); the result is a borrowed reference to this thread's
    // innermost frame (alive while its code runs, i.e. during this call), or NULL.
    let frame = unsafe { ffi::PyEval_GetFrame() };
    if frame.is_null() {
        return None;
    }
    // SAFETY: `frame` is live (above); `PyFrame_GetCode` returns a new, non-NULL reference.
    let code = unsafe { Bound::from_owned_ptr(py, ffi::PyFrame_GetCode(frame).cast()) };
    // SAFETY: `frame` is live (above), and `lasti` is the interpreter's `PyFrame_GetLasti`.
    let at = unsafe { lasti(frame) };
    Some((code, u32::try_from(at).ok()?))
}
