//! `caijit._native`: thin pyo3 wrappers over `cai-runtime`.
//!
//! Python objects are converted here; every rule lives in `cai-runtime`.

mod errors;
mod interface;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<interface::Interface>()?;
    m.add_function(wrap_pyfunction!(interface::parse_interface, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
