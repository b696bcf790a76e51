//! `caijit.debug`, `caijit.nvtx`, `caijit.profile` and the ring of recent launches: thin
//! wrappers over `cai_runtime::diag` and `cai_runtime::launch::Profiler`.

use std::sync::Mutex;

use cai_runtime::diag;
use cai_runtime::launch::{ProfileRow, Profiler};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::PyCaiResult;
use crate::fault::record_dict;

/// Turn a switch on or off (`"blocking"`, `"bounds"`, `"nvtx"`). Returns its previous state.
#[pyfunction]
pub fn _set_switch(which: &str, on: bool) -> PyCaiResult<bool> {
    let mask = switch(which)?;
    let was = diag::enabled(mask);
    diag::set(mask, on);
    Ok(was)
}

/// Whether a switch is on (`"blocking"`, `"bounds"`, `"nvtx"`, `"profile"`).
#[pyfunction]
pub fn _switch(which: &str) -> PyCaiResult<bool> {
    Ok(diag::enabled(switch(which)?))
}

fn switch(which: &str) -> PyCaiResult<u32> {
    Ok(match which {
        "blocking" => diag::BLOCKING,
        "nvtx" => diag::NVTX,
        "profile" => diag::PROFILE,
        "bounds" => diag::BOUNDS,
        other => return Err(crate::errors::PyCaiError::argument(format!("unknown switch {other:?}"))),
    })
}

/// `(attached, why not)`: whether an NVTX tool is attached, and why the one
/// `NVTX_INJECTION64_PATH` names could not be.
#[pyfunction]
pub fn _nvtx_tool() -> (bool, Option<String>) {
    match cai_runtime::launch::nvtx_tool() {
        Ok(attached) => (attached, None),
        Err(e) => (false, Some(e)),
    }
}

/// Whether `CAIJIT_LINEINFO` asks for line-info builds.
#[pyfunction]
pub fn _lineinfo_by_env() -> bool {
    diag::lineinfo_by_env()
}

/// The launches the rings keep, newest first per device, each a dict.
#[pyfunction]
pub fn recent_launches(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    diag::recent_all().iter().map(|r| record_dict(py, r)).collect()
}

/// The native side of `caijit.profile()`: one active at a time.
#[pyclass(module = "caijit._native")]
pub struct Profile {
    active: Mutex<Option<Profiler>>,
}

#[pymethods]
impl Profile {
    #[new]
    fn new() -> Self {
        Profile { active: Mutex::new(None) }
    }

    /// Start timing every caijit launch.
    fn start(&self) -> PyCaiResult<()> {
        let mut a = self.active.lock().unwrap_or_else(|p| p.into_inner());
        if a.is_some() {
            return Err(crate::errors::PyCaiError::argument("this profile is already running"));
        }
        *a = Some(Profiler::start()?);
        Ok(())
    }

    /// Stop, wait for the timed launches, and return one dict per kernel instance.
    fn finish<'py>(&self, py: Python<'py>) -> PyCaiResult<Vec<Bound<'py, PyDict>>> {
        let taken = self.active.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(p) = taken else { return Err(crate::errors::PyCaiError::argument("this profile is not running")) };
        let rows = py.detach(|| p.finish())?;
        Ok(rows.iter().map(|r| row_dict(py, r)).collect::<PyResult<_>>()?)
    }
}

fn row_dict<'py>(py: Python<'py>, r: &ProfileRow) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("kernel", &r.kernel)?;
    d.set_item("device", r.device)?;
    d.set_item("launches", r.launches)?;
    d.set_item("untimed", r.untimed)?;
    d.set_item("gpu_ms", r.gpu_ms)?;
    d.set_item("host_ms", r.host_ms)?;
    Ok(d)
}
