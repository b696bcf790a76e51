//! Sticky faults as Python sees them: the recent launches as dicts and the Python call
//! site that reported the fault (`caijit.LaunchError`'s attributes, and
//! `caijit.recent_launches()`'s items).

use cai_runtime::diag::LaunchRecord;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A launch record as a dict.
pub fn record_dict<'py>(py: Python<'py>, r: &LaunchRecord) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("seq", r.seq)?;
    d.set_item("device", r.device)?;
    d.set_item("kernel", r.kernel)?;
    d.set_item("grid", (r.grid[0], r.grid[1], r.grid[2]))?;
    d.set_item("block", (r.block[0], r.block[1], r.block[2]))?;
    d.set_item("shared_mem", r.shared_mem)?;
    d.set_item("stream", r.stream)?;
    d.set_item("arguments", r.arguments())?;
    d.set_item("site", r.call_site())?;
    d.set_item("text", r.to_string())?;
    Ok(d)
}

/// `message` with the Python call site that reported a sticky fault appended, and the
/// site (`"file:line"`): the innermost frame outside the caijit package (read only when
/// such an error is raised; in launch-blocking mode, the call that launched the kernel).
pub fn with_call_site(py: Python<'_>, message: String) -> (String, Option<String>) {
    let site = call_site(py).ok().flatten();
    match &site {
        Some(s) => (format!("{message}\n(reported at {s})"), site),
        None => (message, None),
    }
}

fn call_site(py: Python<'_>) -> PyResult<Option<String>> {
    let sys = py.import("sys")?;
    let package = py.import("caijit")?.getattr("__file__")?.extract::<String>()?;
    let package_dir = std::path::Path::new(&package).parent().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
    let mut frame = match sys.call_method1("_getframe", (0,)) {
        Ok(f) => f,
        Err(_) => return Ok(None),
    };
    while !frame.is_none() {
        let code = frame.getattr("f_code")?;
        let file: String = code.getattr("co_filename")?.extract()?;
        if package_dir.is_empty() || !file.starts_with(&package_dir) {
            let line: i64 = frame.getattr("f_lineno")?.extract().unwrap_or(-1);
            return Ok(Some(format!("{file}:{line}")));
        }
        frame = frame.getattr("f_back")?;
    }
    Ok(None)
}
