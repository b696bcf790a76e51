//! `caijit.debug`, `caijit.nvtx`, `caijit.profile` and the ring of recent launches: thin
//! wrappers over `cai_runtime::diag` and `cai_runtime::launch::Profiler`.

use std::collections::VecDeque;
use std::sync::Mutex;

use cai_runtime::diag;
use cai_runtime::launch::{ProfileRow, Profiler};
use cai_runtime::sync::lock;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::PyCaiResult;
use crate::fault::record_dict;

/// Turn a switch on or off (`"blocking"`, `"bounds"`, `"nvtx"`, `"sites"`). Returns its previous state.
#[pyfunction]
pub fn _set_switch(which: &str, on: bool) -> PyCaiResult<bool> {
    let mask = switch(which)?;
    let was = diag::enabled(mask);
    diag::set(mask, on);
    Ok(was)
}

/// Whether a switch is on (`"blocking"`, `"bounds"`, `"nvtx"`, `"profile"`, `"sites"`).
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
        "sites" => diag::SITES,
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
        let mut a = lock(&self.active);
        if a.is_some() {
            return Err(crate::errors::PyCaiError::argument("this profile is already running"));
        }
        *a = Some(Profiler::start()?);
        Ok(())
    }

    /// Stop, wait for the timed launches, and return one dict per kernel instance.
    fn finish<'py>(&self, py: Python<'py>) -> PyCaiResult<Vec<Bound<'py, PyDict>>> {
        let taken = lock(&self.active).take();
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

// ---------------------------------------------------------------------------------------
// Launch sites in the ring (`caijit.launch_sites`, `CAIJIT_LAUNCH_SITES=1`)

/// Code objects of recent launch sites, each under an id that is never reused: a ring
/// record's site token names one by id, so a code object freed and another allocated at
/// its address is never mistaken for it. Holding code objects (not frames) keeps no
/// locals alive.
struct Sites {
    /// The id the newest code object got; ids start at 1.
    newest: u32,
    held: VecDeque<(u32, Py<PyAny>)>,
}

/// How many code objects are held: enough for every record of several devices' rings
/// even when each launch comes from another function.
const SITES_HELD: usize = 4 * diag::RING_LEN;

static SITES: Mutex<Sites> = Mutex::new(Sites { newest: 0, held: VecDeque::new() });

/// Before a launch: with [`diag::SITES`] on, leave the Python call site for its ring
/// record (a relaxed load when off). The launch takes it; dropping the guard forgets it
/// if the launch failed before it did (so that no later launch takes it).
#[inline]
pub fn leave_site(py: Python<'_>) -> SiteLeft {
    let on = diag::flags() & diag::SITES != 0;
    if on {
        leave_site_now(py);
    }
    SiteLeft(on)
}

/// See [`leave_site`].
pub struct SiteLeft(bool);

impl Drop for SiteLeft {
    fn drop(&mut self) {
        if self.0 {
            diag::take_site();
        }
    }
}

/// The innermost frame's code object (held, under its id) and instruction offset, as the
/// site token `id << 32 | offset`. Consecutive launches from one function share one id.
#[cold]
fn leave_site_now(py: Python<'_>) {
    let Some((code, at)) = cai_runtime::python::frame::current(py) else { return diag::set_site(0) };
    let mut s = lock(&SITES);
    let id = match s.held.back() {
        Some((id, held)) if held.as_ptr() == code.as_ptr() => *id,
        _ => {
            s.newest = s.newest.checked_add(1).unwrap_or(1);
            let id = s.newest;
            s.held.push_back((id, code.unbind()));
            if s.held.len() > SITES_HELD {
                s.held.pop_front();
            }
            id
        }
    };
    diag::set_site(u64::from(id) << 32 | u64::from(at));
}

/// `file:line` of a site token ([`leave_site_now`]), while its code object is still held:
/// the line is the one `co_lines()` gives the instruction offset.
fn site_name(token: u64) -> Option<String> {
    let (id, at) = ((token >> 32) as u32, u64::from(token as u32));
    Python::attach(|py| {
        let code = lock(&SITES).held.iter().find(|(i, _)| *i == id).map(|(_, c)| c.clone_ref(py))?;
        let code = code.bind(py);
        let file: String = code.getattr("co_filename").ok()?.extract().ok()?;
        let lines = code.call_method0("co_lines").ok()?;
        let line = lines.try_iter().ok()?.find_map(|item| {
            let (start, end, line): (u64, u64, Option<i64>) = item.ok()?.extract().ok()?;
            (start <= at && at < end).then_some(line).flatten()
        })?;
        Some(format!("{file}:{line}"))
    })
}

/// Let the ring name the sites [`leave_site`] leaves (once, at import).
pub fn name_sites() {
    diag::set_site_names(site_name);
}
