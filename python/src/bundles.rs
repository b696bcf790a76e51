//! Kernel bundles from Python: load, inspect, bake, record (`caijit.bundles`).

use std::path::PathBuf;

use cai_runtime::bundle::{self, Bundle};
use cai_runtime::compile::bake::{bake, BakeOptions};
use cai_runtime::compile::{read_manifest, record_to, Arch, Program};
use cai_runtime::dispatch::instance_programs;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::PyCaiResult;

/// What a bundle holds: its programs' and kernels' names (every program's record is read).
fn summary<'py>(py: Python<'py>, b: &Bundle) -> PyCaiResult<Bound<'py, PyDict>> {
    let programs = b.programs()?;
    let d = PyDict::new(py);
    d.set_item("path", b.origin())?;
    d.set_item("archs", b.archs().iter().map(|a| format!("sm_{a}")).collect::<Vec<_>>())?;
    d.set_item("nvrtc", b.nvrtc_version())?;
    d.set_item("programs", programs.iter().map(|p| p.name.clone()).collect::<Vec<_>>())?;
    d.set_item("kernels", programs.iter().flat_map(|p| p.kernel_names.iter().cloned()).collect::<Vec<_>>())?;
    d.set_item("tunings", b.tunings()?.len())?;
    Ok(d)
}

/// Read (the table of contents and index verified) and load a bundle for every later
/// compilation; its summary.
#[pyfunction]
pub fn load_bundle(py: Python<'_>, path: PathBuf) -> PyCaiResult<Bound<'_, PyDict>> {
    let b = py.detach(|| bundle::load(&path))?;
    summary(py, &b)
}

/// The bundles loaded (`CAIJIT_BUNDLES` first), as summaries.
#[pyfunction]
pub fn loaded_bundles(py: Python<'_>) -> PyCaiResult<Vec<Bound<'_, PyDict>>> {
    let all = bundle::loaded()?;
    all.iter().map(|b| summary(py, b)).collect()
}

/// A bundle's listing (`python -m caijit bundle info`); every section is verified, and the
/// bundle is not loaded.
#[pyfunction]
pub fn bundle_info(py: Python<'_>, path: PathBuf) -> PyCaiResult<String> {
    Ok(py.detach(|| {
        let b = Bundle::open(&path)?;
        cai_runtime::compile::verify_bundle(&b)?;
        b.describe()
    })?)
}

/// Bake the programs of `manifests` (and the tuning results they recorded; with `ops`, every
/// instance of the kernel library) and of `files` (every kernel of each,
/// and the template instances `instances` names) for `archs` into `output`; returns the
/// number of programs read, the number in the bundle (programs of one source are merged)
/// and the file's size.
#[pyfunction]
#[pyo3(signature = (manifests, files, archs, output, ptx = true, jobs = None, progress = false, ops = false, instances = vec![], merge = None))]
#[allow(clippy::too_many_arguments)]
pub fn bundle_build(
    py: Python<'_>,
    manifests: Vec<PathBuf>,
    files: Vec<PathBuf>,
    archs: Vec<String>,
    output: PathBuf,
    ptx: bool,
    jobs: Option<i64>,
    progress: bool,
    ops: bool,
    instances: Vec<String>,
    merge: Option<i64>,
) -> PyCaiResult<(usize, usize, usize)> {
    Ok(py.detach(|| -> cai_runtime::Result<(usize, usize, usize)> {
        let archs = archs.iter().map(|a| Arch::parse(a)).collect::<cai_runtime::Result<Vec<_>>>()?;
        let (mut programs, mut tunings) = (Vec::new(), Vec::new());
        for m in &manifests {
            let read = read_manifest(m)?;
            programs.extend(read.programs);
            tunings.extend(read.tunings);
        }
        for f in &files {
            let file = Program::from_file(f)?;
            programs.extend(instance_programs(&file, &instances)?);
            programs.push(file);
        }
        if ops {
            programs.extend(cai_runtime::ops::library_programs()?);
        }
        let mut options = BakeOptions::new(archs).ptx(ptx).progress(progress).tunings(tunings);
        let at_least_one = |n: i64, what: &str| {
            usize::try_from(n)
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| cai_runtime::Error::argument(format!("{what} must be at least 1, not {n}")))
        };
        if let Some(j) = jobs {
            options = options.jobs(at_least_one(j, "jobs (compilations at once)")?);
        }
        if let Some(m) = merge {
            options = options.merge(at_least_one(m, "merge (instances per module)")?);
        }
        let bytes = bake(&programs, &options)?;
        bundle::save(&output, &bytes)?;
        let written = Bundle::open(&output)?;
        cai_runtime::compile::verify_bundle(&written)?;
        Ok((programs.len(), written.program_count(), bytes.len()))
    })?)
}

/// Record into the manifest `path` (`None`: stop); returns the manifest recorded into before.
#[pyfunction]
#[pyo3(signature = (path))]
pub fn record(path: Option<PathBuf>) -> Option<PathBuf> {
    record_to(path)
}

/// A bundle shipped with the package (the precompiled kernel library): opened at the first
/// compilation; one that cannot be used is skipped with a warning.
#[pyfunction]
pub fn add_default_bundle(path: PathBuf) {
    bundle::add_default(path);
}
