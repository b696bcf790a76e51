//! `caijit._native`: thin pyo3 wrappers over `cai-runtime`.
//!
//! Python objects are converted here; every rule lives in `cai-runtime`.

#![forbid(unsafe_code)]

mod args;
mod array;
mod bundles;
mod diag;
mod dlpack;
mod errors;
mod fault;
mod graph;
mod interface;
mod jax;
mod kernel;
mod ops;
mod pyobj;
mod stream;
mod timing;
mod tune;

use cai_runtime::compile::{toolkit, CacheStatus, DiskCache};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use errors::PyCaiResult;

/// Every counter of `cai_runtime::stats` as a dict.
#[pyfunction]
fn stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in cai_runtime::stats::stats().entries() {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// Number of CUDA devices (`CudaNotAvailable` without a driver).
#[pyfunction]
fn device_count() -> PyCaiResult<usize> {
    Ok(cai_runtime::runtime::device_count()?)
}

/// Give the memory caijit's caching allocator keeps for reuse back to the system.
#[pyfunction]
fn empty_cache(py: Python<'_>) -> PyCaiResult<()> {
    // (It waits for the device: without the GIL, so that a host callback needing it can run.)
    Ok(py.detach(cai_runtime::runtime::empty_cache)?)
}

/// What caijit's arrays on a device hold and what its caching allocator keeps, in bytes.
#[pyfunction]
#[pyo3(signature = (device = 0))]
fn memory_stats(py: Python<'_>, device: usize) -> PyCaiResult<Bound<'_, PyDict>> {
    let s = cai_runtime::runtime::Context::new(device)?.memory_stats();
    let d = PyDict::new(py);
    d.set_item("allocated_bytes", s.allocated_bytes)?;
    d.set_item("reserved_bytes", s.reserved_bytes)?;
    d.set_item("segments", s.segments)?;
    d.set_item("active_blocks", s.active_blocks)?;
    Ok(d)
}

/// The device owning a device pointer; `None` for host memory or an unknown pointer.
#[pyfunction]
fn pointer_device(ptr: u64) -> PyCaiResult<Option<usize>> {
    Ok(cai_runtime::runtime::pointer_device(ptr)?)
}

/// `(name, (major, minor), total memory in bytes)` of a device.
#[pyfunction]
#[pyo3(signature = (device = 0))]
fn device_info(device: usize) -> PyCaiResult<(String, (i32, i32), usize)> {
    let ctx = cai_runtime::runtime::Context::new(device)?;
    let (_, total) = ctx.mem_info()?;
    Ok((ctx.name().to_string(), ctx.compute_capability(), total))
}

#[pyfunction]
fn driver_version() -> PyCaiResult<i32> {
    Ok(cai_runtime::runtime::driver_version()?)
}

/// Whether the driver cross-checks loaded kernels' parameters (CUDA 12.4+).
#[pyfunction]
fn driver_checks_parameters() -> PyCaiResult<bool> {
    Ok(cai_runtime::runtime::driver_checks_parameters()?)
}

/// `(path, (major, minor), include_dirs, supported_archs)`
type NvrtcInfo = (String, (i32, i32), Vec<String>, Vec<i32>);

/// Where NVRTC was found.
#[pyfunction]
fn nvrtc_info() -> PyCaiResult<NvrtcInfo> {
    let tk = toolkit()?;
    Ok((
        tk.nvrtc_path.display().to_string(),
        tk.version,
        tk.include_dirs.iter().map(|d| d.display().to_string()).collect(),
        tk.supported_archs.clone(),
    ))
}

/// The exact NVRTC build every cache key names (its library files' build IDs).
#[pyfunction]
fn nvrtc_build() -> PyCaiResult<String> {
    Ok(toolkit()?.build.clone())
}

/// Tell the runtime where Python's packages live (for pip-installed NVRTC).
#[pyfunction]
fn add_site_dirs(dirs: Vec<std::path::PathBuf>) {
    cai_runtime::compile::add_site_dirs(dirs);
}

/// The disk cache's state: `{"state": "usable" | "refused" | "disabled", "dir", "why",
/// "mode", "entries", "bytes"}` (the keys that apply).
#[pyfunction]
fn cache_info(py: Python<'_>) -> PyCaiResult<Bound<'_, PyDict>> {
    use std::os::unix::fs::PermissionsExt;
    let d = PyDict::new(py);
    match DiskCache::status()? {
        CacheStatus::Disabled => d.set_item("state", "disabled")?,
        CacheStatus::Refused { dir, why } => {
            d.set_item("state", "refused")?;
            d.set_item("dir", dir.display().to_string())?;
            d.set_item("why", why)?;
        }
        CacheStatus::Usable(dir) => {
            let (entries, bytes) = DiskCache::at(&dir).size();
            let mode = std::fs::metadata(&dir).map(|m| m.permissions().mode() & 0o777).unwrap_or(0);
            d.set_item("state", "usable")?;
            d.set_item("dir", dir.display().to_string())?;
            d.set_item("mode", format!("{mode:o}"))?;
            d.set_item("entries", entries)?;
            d.set_item("bytes", bytes)?;
        }
    }
    Ok(d)
}

/// Remove every disk cache entry; returns how many.
#[pyfunction]
fn cache_clear() -> PyCaiResult<usize> {
    match DiskCache::from_env()? {
        Some(c) => Ok(c.clear()?),
        None => Ok(0),
    }
}

/// The source of a kernel-library file (`kernels/ops/<name>.cu`), embedded in the wheel.
#[pyfunction]
fn op_source(name: &str) -> PyResult<&'static str> {
    cai_runtime::compile::OPS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(name.to_string()))
}

/// Make stream `waiter` wait for the work pending on stream `producer` (CAI values), without
/// blocking the host: the DLPack producer handshake.
#[pyfunction]
#[pyo3(signature = (waiter, producer, device = 0))]
fn order_streams(waiter: u64, producer: u64, device: usize) -> PyCaiResult<()> {
    let ctx = cai_runtime::runtime::Context::new(device)?;
    let (w, p) = (cai_runtime::runtime::Stream::borrowed(waiter)?, cai_runtime::runtime::Stream::borrowed(producer)?);
    Ok(ctx.order_streams(&w, &p)?)
}

/// Test support: make the next pass through a fault point fail once (`"reverse_edge"`: after
/// a kernel is enqueued, before its reverse edges).
#[pyfunction]
fn _inject_fault(point: &str) -> PyCaiResult<()> {
    use cai_runtime::launch::fault::{arm, Point};
    match point {
        "reverse_edge" => arm(Point::ReverseEdge),
        other => return Err(errors::PyCaiError::argument(format!("no fault point {other:?}"))),
    }
    Ok(())
}

/// The extension module, by topic. Names with a leading underscore are the package's own
/// (`caijit.diag` reads its switches through them); test support lives in `_testing`.
#[pymodule]
mod _native {
    use pyo3::prelude::*;

    // Arrays, views and streams.
    #[pymodule_export]
    use super::order_streams;
    #[pymodule_export]
    use crate::array::DeviceArray;
    #[pymodule_export]
    use crate::interface::{parse_interface, Interface};
    #[pymodule_export]
    use crate::stream::Stream;

    // Kernels: compilation, launches and their arguments.
    #[pymodule_export]
    use crate::args::{launch_view, phase_times};
    #[pymodule_export]
    use crate::kernel::{compile_program, declarations, make_kernel, Kernel, Launcher};

    // The kernel library (`caijit.ops` is the `ops` submodule, added below).
    #[pymodule_export]
    use super::op_source;
    #[pymodule_export]
    use crate::ops::{cast_dtype_name, copy_contiguous, op_result, unary, unary_ops};

    // Autotuning (`caijit.autotune`).
    #[pymodule_export]
    use crate::tune::Tuner;

    // Graphs: captured launches replayed with new arguments (`caijit.graph`).
    #[pymodule_export]
    use crate::args::GraphScalar;
    #[pymodule_export]
    use crate::graph::{graph, Graph};

    // JAX: launches prepared for XLA custom calls.
    #[pymodule_export]
    use crate::jax::{xla_ffi_layout, xla_handler_address, xla_prepare, xla_resolve};

    // Devices, memory and the driver.
    #[pymodule_export]
    use super::{device_count, device_info, driver_checks_parameters, driver_version, empty_cache, memory_stats, pointer_device};

    // NVRTC, the caches and bundles.
    #[pymodule_export]
    use super::{add_site_dirs, cache_clear, cache_info, nvrtc_build, nvrtc_info};
    #[pymodule_export]
    use crate::bundles::{add_default_bundle, bundle_build, bundle_info, load_bundle, loaded_bundles, record};

    // Diagnostics: counters, profiles, recent launches and the package's switches.
    #[pymodule_export]
    use super::stats;
    #[pymodule_export]
    use crate::diag::{_lineinfo_by_env, _nvtx_tool, _set_switch, recent_launches, Profile};

    /// Hooks for caijit's own tests: conversion routes, DLPack capsules by hand, diagnostic
    /// switches read back, and injected faults. Not an interface.
    #[pymodule]
    mod _testing {
        #[pymodule_export]
        use super::super::_inject_fault;
        #[pymodule_export]
        use crate::args::_route;
        #[pymodule_export]
        use crate::diag::_switch;
        #[pymodule_export]
        use crate::dlpack::{_dlpack_consume, _dlpack_export_host, _dlpack_layouts, _dlpack_read};
    }

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        crate::timing::init();
        crate::diag::name_sites();
        m.add("ops", crate::ops::module(m.py())?)?;
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        Ok(())
    }
}
