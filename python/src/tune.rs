//! `caijit.autotune`'s native half: a tuner (`cai_runtime::tune::Tuner`) over candidates the
//! Python side computes for each call (their grids may follow the arguments), launched on
//! arguments converted as a launch converts them.

use std::sync::Arc;

use cai_runtime::cai::DType;
use cai_runtime::dispatch::{launch_device, TemplateArg};
use cai_runtime::launch::{Arg, LaunchConfig};
use cai_runtime::runtime::{Context, Stream as RtStream};
use cai_runtime::tune::{Candidate, Trial, Tuned, Tuner as RtTuner};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use smallvec::SmallVec;

use crate::args::{args_from_py, release_after, ArgContext, PyArg};
use crate::errors::{PyCaiError, PyCaiResult};
use crate::kernel::Kernel;
use crate::pyobj::type_name;
use crate::stream::stream_from_py;

/// A candidate as Python describes it: `(label, grid, block, shared_mem, template args)`.
type PyCandidate<'py> = (String, [u32; 3], [u32; 3], u32, Vec<Bound<'py, PyAny>>);

fn template_arg(a: &Bound<'_, PyAny>) -> PyCaiResult<TemplateArg> {
    if let Ok(n) = a.extract::<i64>() {
        return Ok(TemplateArg::Int(n));
    }
    let name: String = a.str()?.extract()?;
    DType::from_name(&name).map(TemplateArg::Type).ok_or_else(|| {
        PyCaiError::argument(format!("autotune: template argument {name:?} ({}) is neither an integer nor a dtype", type_name(a)))
    })
}

fn candidates(list: Vec<PyCandidate<'_>>) -> PyCaiResult<Vec<Candidate>> {
    list.into_iter()
        .map(|(label, grid, block, shared_mem, template)| {
            let template = template.iter().map(template_arg).collect::<PyCaiResult<Vec<_>>>()?;
            Ok(Candidate { config: LaunchConfig::new(grid, block).shared_mem(shared_mem), template, label })
        })
        .collect()
}

/// The tunings of one `caijit.autotune` launcher.
#[pyclass(module = "caijit._native", frozen)]
pub struct Tuner {
    inner: RtTuner,
}

impl Tuner {
    /// Convert `args`, then run `f` with them (the GIL released), and hand the DLPack
    /// capsules among them over to be released after the work that reads them.
    fn with_args<R: Send>(
        &self,
        py: Python<'_>,
        kernel: &Kernel,
        stream: Option<&Arc<RtStream>>,
        args: &Bound<'_, PyTuple>,
        f: impl FnOnce(&[Arg<'_>]) -> cai_runtime::Result<(R, Option<u64>)> + Send,
    ) -> PyCaiResult<R> {
        let mut cx = ArgContext::new(stream.map(|s| s.handle()));
        let mut converted: SmallVec<[PyArg; 8]> = SmallVec::new();
        args_from_py(args.iter().enumerate(), &mut cx, |i, e| kernel.name_argument(i, e), &mut converted)?;
        let mut launch_args: SmallVec<[Arg<'_>; 8]> = converted.iter().map(PyArg::as_arg).collect();
        let (r, on) = py.detach(|| f(&launch_args))?;
        // Only DLPack imports (and the arguments kept while a graph captures) are held past
        // the launch (their device's context releases them).
        let kept = cx.take_kept();
        match on.filter(|_| !kept.is_empty() || converted.iter().any(|a| matches!(a, PyArg::Dlpack { .. }))) {
            Some(on) => {
                let ctx = Context::new(launch_device(&mut launch_args, stream.map(|s| &**s))?)?;
                drop(launch_args);
                release_after(&ctx, on, converted.drain(..), kept)?;
            }
            None => drop(launch_args),
        }
        Ok(r)
    }
}

#[pymethods]
impl Tuner {
    #[new]
    fn new() -> Self {
        Tuner { inner: RtTuner::new() }
    }

    /// Launch `kernel` with the winning candidate of `key` on `args` (tuning first when
    /// neither this process nor the disk cache knows it).
    #[pyo3(signature = (kernel, key, candidates, args, stream = None))]
    fn launch(
        &self,
        py: Python<'_>,
        kernel: PyRef<'_, Kernel>,
        key: &str,
        candidates: Vec<PyCandidate<'_>>,
        args: &Bound<'_, PyTuple>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyCaiResult<()> {
        let stream = stream.map(stream_from_py).transpose()?.flatten();
        let candidates = self::candidates(candidates)?;
        let d = kernel.dispatcher();
        self.with_args(py, &kernel, stream.as_ref(), args, |a| {
            let on = self.inner.launch(d, key, &candidates, a, stream.as_deref())?;
            Ok(((), Some(on)))
        })
    }

    /// The tuning of `key` (tuned first when unknown), as a dict: `candidates` (labels),
    /// `trials` (`{"median_us", "min_us", "max_us", "spread", "samples", "batch"}` or
    /// `{"failed": why}`), `best`, `source` (`"measured"`, `"disk"`, `"bundle"` or `"off"`),
    /// `table`.
    #[pyo3(signature = (kernel, key, candidates, args, stream = None))]
    fn result<'py>(
        &self,
        py: Python<'py>,
        kernel: PyRef<'_, Kernel>,
        key: &str,
        candidates: Vec<PyCandidate<'_>>,
        args: &Bound<'_, PyTuple>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyCaiResult<Bound<'py, PyDict>> {
        let stream = stream.map(stream_from_py).transpose()?.flatten();
        let candidates = self::candidates(candidates)?;
        let d = kernel.dispatcher();
        let tuned = self
            .with_args(py, &kernel, stream.as_ref(), args, |a| Ok((self.inner.tuned(d, key, &candidates, a, stream.as_deref())?, None)))?;
        tuned_dict(py, &tuned)
    }
}

fn tuned_dict<'py>(py: Python<'py>, t: &Tuned) -> PyCaiResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("candidates", t.record.candidates.clone())?;
    let trials = PyList::empty(py);
    for trial in &t.record.trials {
        let e = PyDict::new(py);
        match trial {
            Trial::Timed(t) => {
                e.set_item("median_us", t.median_us)?;
                e.set_item("min_us", t.min_us)?;
                e.set_item("max_us", t.max_us)?;
                e.set_item("spread", t.spread())?;
                e.set_item("samples", t.samples)?;
                e.set_item("batch", t.batch)?;
            }
            Trial::Failed(why) => e.set_item("failed", why)?,
        }
        trials.append(e)?;
    }
    d.set_item("trials", trials)?;
    d.set_item("best", t.best())?;
    d.set_item("source", t.source.name())?;
    d.set_item("table", t.table())?;
    Ok(d)
}
