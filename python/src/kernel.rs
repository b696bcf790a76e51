//! `caijit.Kernel`: lazily compiled, per-signature instantiated, launched with
//! `kernel[grid, block(, stream(, shared_mem))](*args)`.

use std::sync::Arc;

use cai_runtime::cai::{ArrayView, DType};
use cai_runtime::compile::{compile_reporting, Arch, CacheSource, CompileOptions, KernelInfo, Program};
use cai_runtime::dispatch::{launch_device, with_name_expressions, Dispatcher};
use cai_runtime::kernel::Kernel as RtKernel;
use cai_runtime::launch::{Arg, LaunchConfig, Num};
use cai_runtime::runtime::{self as rt, Stream as RtStream};
use cai_runtime::signature::ArgType;
use cai_runtime::Error;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use smallvec::SmallVec;

use crate::args::{args_from_py, host_memory, number, release_after, ArgContext, PyArg};
use crate::array::dtype_from_py;
use crate::errors::{PyCaiError, PyCaiResult};
use crate::pyobj::type_name;
use crate::stream::stream_from_py;
use crate::timing::{self, Phase};

/// A kernel of a program: compiled on first launch (per device, per argument types for
/// templates and overloads) and cached. Which instance a launch gets is the runtime's
/// [`Dispatcher`]'s decision; this class converts Python arguments and launches.
#[pyclass(frozen, module = "caijit", name = "Kernel")]
pub struct Kernel {
    dispatcher: Dispatcher,
}

/// `(name, extern_c, template parameters, parameter types, an example argument per
/// template parameter)` of a declaration.
type DeclSummary = (String, bool, Vec<String>, Vec<String>, Vec<String>);

impl Kernel {
    pub fn new(program: Program, name: Option<String>) -> PyCaiResult<Kernel> {
        Ok(Kernel { dispatcher: Dispatcher::new(program, name.as_deref())? })
    }

    /// The runtime's dispatcher behind this kernel.
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.dispatcher
    }

    pub fn is_deduced_template(&self) -> bool {
        self.dispatcher.is_deduced_template()
    }

    /// Whether several non-template kernels share this kernel's qualified name.
    pub fn is_overloaded(&self) -> bool {
        self.dispatcher.is_overloaded()
    }

    /// [`Dispatcher::instance_for`]: the program to compile and the name to look up for the
    /// instance that arguments of `types` select.
    pub fn instance_for(&self, types: &[ArgType]) -> PyCaiResult<(Program, String)> {
        Ok(self.dispatcher.instance_for(types)?)
    }

    /// The declared parameters' names, in order (`None` for a kernel the source does not
    /// declare by this name, or an unnamed parameter).
    pub fn declared_params(&self) -> Option<Vec<Option<String>>> {
        self.dispatcher.declared_params()
    }

    /// The index and declared C++ type of the parameter named `name`, where the source
    /// declares one (`caijit.jax` binds scalars to parameters by name).
    pub fn parameter_named(&self, name: &str) -> Option<(usize, Option<String>)> {
        let index = self.dispatcher.declared_params()?.iter().position(|n| n.as_deref() == Some(name))?;
        Some((index, self.dispatcher.parameter(index).1))
    }

    /// The compiled, loaded kernel for a device and the launch's arguments: the
    /// dispatcher's cache with the GIL held (the launch path), else compiled and loaded with
    /// the GIL released.
    #[inline]
    pub fn resolve(&self, py: Python<'_>, device: usize, args: &[Arg<'_>]) -> PyCaiResult<Arc<RtKernel>> {
        if let Some(k) = self.dispatcher.cached(device, args) {
            return Ok(k);
        }
        Ok(py.detach(|| self.dispatcher.resolve(device, args))?)
    }

    /// An error converting argument `index`, with the index and the declared parameter's
    /// name and type ([`Dispatcher::parameter`], [`PyCaiError::at_argument`]).
    pub fn name_argument(&self, index: usize, e: PyCaiError) -> PyCaiError {
        let (name, ctype) = self.dispatcher.parameter(index);
        e.at_argument(index, name, ctype.as_deref())
    }

    /// `e`, the error of a launch that found no GPU, or the argument error the launch would
    /// have raised (checked against the parameters compiled without a GPU), which says
    /// what the caller must change first.
    fn argument_error_without_a_gpu(&self, py: Python<'_>, args: &[Arg<'_>], e: Error) -> PyCaiError {
        if !matches!(e, Error::CudaNotAvailable(_)) {
            return e.into();
        }
        match py.detach(|| self.dispatcher.check_args(args)) {
            Err(wrong @ Error::Argument(_)) => wrong.into(),
            _ => e.into(),
        }
    }

    fn resolved_for_attributes(&self, py: Python<'_>) -> PyCaiResult<Arc<RtKernel>> {
        self.not_a_deduced_template(py)?;
        self.resolve(py, 0, &[])
    }

    fn not_a_deduced_template(&self, py: Python<'_>) -> PyCaiResult<()> {
        Ok(py.detach(|| self.dispatcher.check_single_instance())?)
    }
}

/// Where the XLA binding has named them; they are the dispatcher's.
#[allow(unused_imports)]
pub use cai_runtime::dispatch::{admits, overload_list};

/// `cai_runtime::kernel::inspection_arch` (`params`, `compile()`, XLA lowerings), with the
/// GIL released (it may make device 0's context).
pub fn inspection_arch(py: Python<'_>) -> PyCaiResult<Arch> {
    Ok(py.detach(cai_runtime::kernel::inspection_arch)?)
}

/// Parse a grid or block: an int or a tuple of 1 to 3 ints, padded with 1s.
fn dims(what: &str, obj: &Bound<'_, PyAny>) -> PyCaiResult<[u32; 3]> {
    let bad = || PyCaiError::argument(format!("{what} must be an int or a tuple of 1 to 3 positive ints, got {obj}"));
    if let Ok(n) = obj.extract::<u32>() {
        return Ok([n, 1, 1]);
    }
    let v: Vec<u32> = obj.extract().map_err(|_| bad())?;
    if v.is_empty() || v.len() > 3 {
        return Err(bad());
    }
    let mut out = [1u32; 3];
    out[..v.len()].copy_from_slice(&v);
    Ok(out)
}

const SYNTAX: &str = "launch a kernel with a configuration: kernel[grid, block](*args), kernel[grid, block, stream](*args), kernel[grid, block, stream, shared_mem](*args), or kernel.forall(n)(*args)";

/// Launch configuration bound to a kernel: `kernel[grid, block, stream, shared_mem]`.
#[pyclass(frozen, module = "caijit", name = "Launcher")]
pub struct Launcher {
    kernel: Py<Kernel>,
    config: Option<LaunchConfig>,
    forall: Option<usize>,
    stream: Option<Arc<RtStream>>,
    sync: bool,
}

fn launch_now(
    py: Python<'_>,
    kernel: &Kernel,
    config: Option<LaunchConfig>,
    forall: Option<usize>,
    stream: Option<&RtStream>,
    sync: bool,
    args: &Bound<'_, PyTuple>,
) -> PyCaiResult<()> {
    let total = timing::start();
    let mut ctx = ArgContext::new(stream.map(RtStream::handle));
    let mut converted: SmallVec<[PyArg; 8]> = SmallVec::new();
    args_from_py(args.iter().enumerate(), &mut ctx, |i, e| kernel.name_argument(i, e), &mut converted)?;
    let mut launch_args: SmallVec<[Arg<'_>; 8]> = converted.iter().map(PyArg::as_arg).collect();
    let probe = timing::start();
    let device = match launch_device(&mut launch_args, stream) {
        Ok(d) => d,
        Err(e) => return Err(kernel.argument_error_without_a_gpu(py, &launch_args, e)),
    };
    probe.stop(Phase::Device);
    let probe = timing::start();
    let k = kernel.resolve(py, device, &launch_args)?;
    probe.stop(Phase::Resolve);
    let _site = crate::diag::leave_site(py);
    // The GIL is released while the driver enqueues: other Python threads keep running.
    let probe = timing::start();
    let on = py.detach(|| {
        let probe = timing::start();
        let on = match (config, forall) {
            (Some(cfg), _) => k.launch(&cfg, &launch_args, stream, sync),
            (None, Some(n)) => k.forall(n, &launch_args, stream, sync),
            (None, None) => Err(Error::argument(SYNTAX)),
        };
        probe.stop(Phase::LaunchRuntime);
        on
    })?;
    probe.stop(Phase::Launch);
    drop(launch_args);
    let probe = timing::start();
    // Only DLPack imports are held past the launch; every other argument is dropped here.
    let released = release_after(k.context(), on, converted.drain(..), ctx.take_kept());
    probe.stop(Phase::Release);
    total.stop(Phase::Total);
    released
}

#[pymethods]
impl Launcher {
    #[pyo3(signature = (*args))]
    fn __call__(&self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyCaiResult<()> {
        launch_now(py, self.kernel.get(), self.config, self.forall, self.stream.as_deref(), self.sync, args)
    }
    fn __repr__(&self) -> String {
        match (self.config, self.forall) {
            (Some(c), _) => format!("caijit.Launcher(grid={:?}, block={:?}, shared_mem={})", c.grid, c.block, c.shared_mem),
            (None, n) => format!("caijit.Launcher(forall={n:?})"),
        }
    }
}

fn param_dicts<'py>(py: Python<'py>, k: &KernelInfo) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for p in &k.params {
        let d = PyDict::new(py);
        d.set_item("index", p.index)?;
        d.set_item("name", p.name.clone())?;
        d.set_item("type", &p.cpp_type)?;
        // What a caller needs to know beside the layout: the element (or scalar) dtype, whether
        // the kernel may write through the parameter (`const`: a pointee or element declared
        // const), and an array's rank.
        d.set_item("kind", p.kind.name())?;
        d.set_item("dtype", p.kind.dtype().map(|d| d.name()))?;
        d.set_item("const", p.kind.is_const())?;
        d.set_item("rank", p.kind.rank())?;
        d.set_item("size", p.size)?;
        d.set_item("align", p.align)?;
        d.set_item("offset", p.offset)?;
        out.append(d)?;
    }
    Ok(out)
}

#[pymethods]
impl Kernel {
    /// Check a launch's arguments described without their memory, as the launch would
    /// check them (the same `ArgumentError`), compiling for the inspection architecture: what
    /// `caijit.torch` operators do while PyTorch traces them on fake tensors. Each item is a
    /// scalar or an array `(type name, shape, dtype, strides in elements, byte offset from an
    /// allocation, in device memory)`.
    fn _check_described(&self, py: Python<'_>, args: Vec<Bound<'_, PyAny>>) -> PyCaiResult<()> {
        /// Where the described arrays' allocations start (any address aligned past every
        /// alignment a parameter needs, as a caching allocator's blocks are).
        const BASE: u64 = 1 << 40;
        /// One described argument.
        enum Described {
            Array(ArrayView),
            Scalar(Num, Option<DType>),
        }
        let mut described: SmallVec<[Described; 8]> = SmallVec::new();
        for (index, a) in args.iter().enumerate() {
            if let Ok((what, shape, dtype, strides, offset, on_device)) =
                a.extract::<(String, Vec<usize>, Bound<'_, PyAny>, Vec<i64>, u64, bool)>()
            {
                if !on_device {
                    return Err(host_memory(index, &what));
                }
                let dtype = dtype_from_py(&dtype)?;
                let item = dtype.itemsize() as i64;
                let bytes: SmallVec<[i64; 4]> = strides.iter().map(|s| s.saturating_mul(item)).collect();
                let view = ArrayView::new(BASE + offset, &shape, Some(&bytes), dtype, false, None)
                    .map_err(|e| PyCaiError::from(e).at_argument(index, None, None))?;
                described.push(Described::Array(view));
            } else {
                let (value, dtype) = number(index, a)?.ok_or_else(|| {
                    PyCaiError::argument(format!("argument {index}: a {} is neither an array nor a number", type_name(a)))
                })?;
                described.push(Described::Scalar(value, dtype));
            }
        }
        let launch_args: SmallVec<[Arg<'_>; 8]> = described
            .iter()
            .map(|d| match d {
                Described::Array(v) => Arg::Array(v),
                Described::Scalar(value, dtype) => Arg::Scalar { value: *value, dtype: *dtype },
            })
            .collect();
        let args = &launch_args;
        Ok(py.detach(|| self.dispatcher.check_args(args))?)
    }

    #[getter]
    pub fn name(&self) -> &str {
        self.dispatcher.name()
    }

    fn __getitem__(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>) -> PyCaiResult<Launcher> {
        let items: Vec<Bound<'_, PyAny>> = match key.cast::<PyTuple>() {
            Ok(t) => t.iter().collect(),
            Err(_) => vec![key.clone()],
        };
        if !(2..=4).contains(&items.len()) {
            return Err(PyCaiError::argument(SYNTAX));
        }
        let mut cfg = LaunchConfig::new(dims("grid", &items[0])?, dims("block", &items[1])?);
        let stream = items.get(2).map(stream_from_py).transpose()?.flatten();
        if let Some(sm) = items.get(3) {
            cfg.shared_mem = sm.extract().map_err(|_| PyCaiError::argument("shared_mem must be a non-negative int"))?;
        }
        Ok(Launcher { kernel: slf.clone().unbind(), config: Some(cfg), forall: None, stream, sync: true })
    }

    /// Launch over `n` elements with an occupancy-chosen block size.
    #[pyo3(signature = (n, stream = None))]
    fn forall(slf: &Bound<'_, Self>, n: usize, stream: Option<&Bound<'_, PyAny>>) -> PyCaiResult<Launcher> {
        let stream = stream.map(stream_from_py).transpose()?.flatten();
        Ok(Launcher { kernel: slf.clone().unbind(), config: None, forall: Some(n), stream, sync: true })
    }

    /// Launch with keywords: `k.launch(*args, grid=..., block=..., stream=None,
    /// shared_mem=0, cluster=None, cooperative=False, sync=True)`.
    #[pyo3(signature = (*args, grid, block, stream = None, shared_mem = 0, cluster = None, cooperative = false, sync = true))]
    #[allow(clippy::too_many_arguments)] // the Python signature
    fn launch(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        grid: &Bound<'_, PyAny>,
        block: &Bound<'_, PyAny>,
        stream: Option<&Bound<'_, PyAny>>,
        shared_mem: u32,
        cluster: Option<&Bound<'_, PyAny>>,
        cooperative: bool,
        sync: bool,
    ) -> PyCaiResult<()> {
        let mut cfg = LaunchConfig::new(dims("grid", grid)?, dims("block", block)?).shared_mem(shared_mem).cooperative(cooperative);
        if let Some(c) = cluster {
            cfg = cfg.cluster(dims("cluster", c)?);
        }
        let stream = stream.map(stream_from_py).transpose()?.flatten();
        launch_now(py, self, Some(cfg), None, stream.as_deref(), sync, args)
    }

    #[pyo3(signature = (*_args, **_kwargs))]
    fn __call__(&self, _args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> PyCaiResult<()> {
        Err(PyCaiError::argument(format!("kernel `{}` has no launch configuration; {SYNTAX}", self.name())))
    }

    /// `(index, C++ type)` of the parameter named `name` (`None` when the source declares
    /// none): what `caijit.jax`'s errors about a scalar say.
    fn _parameter(&self, name: &str) -> Option<(usize, Option<String>)> {
        self.parameter_named(name)
    }

    /// An explicit instance: `k.specialize("axpy<float>")` or `k.specialize("float")`.
    fn specialize(&self, args: &str) -> PyCaiResult<Kernel> {
        Ok(Kernel { dispatcher: self.dispatcher.specialize(args)? })
    }

    /// Compile now and return the layouts of this kernel's instances (one, or for a
    /// template those launched so far): for `arch`, else device 0's architecture, else
    /// (no GPU) `CAIJIT_ARCH` or sm_90.
    #[pyo3(signature = (arch = None))]
    fn compile<'py>(&self, py: Python<'py>, arch: Option<&str>) -> PyCaiResult<Bound<'py, PyList>> {
        let arch = match arch {
            Some(a) => Arch::parse(a)?,
            None => inspection_arch(py)?,
        };
        let (compiled, source) = py.detach(|| self.dispatcher.compile_launched(arch))?;
        kernel_infos_of(py, &compiled, source, |k| self.dispatcher.is_mine(k))
    }

    /// Parameter layouts of this (non-template or specialized) kernel, by compiling it
    /// (for device 0, or without a GPU for `CAIJIT_ARCH` or sm_90).
    #[getter]
    fn params<'py>(&self, py: Python<'py>) -> PyCaiResult<Bound<'py, PyList>> {
        self.not_a_deduced_template(py)?;
        match rt::device_count() {
            Ok(n) if n > 0 => {
                let k = self.resolved_for_attributes(py)?;
                return Ok(param_dicts(py, k.info())?);
            }
            Ok(_) | Err(Error::CudaNotAvailable(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let arch = inspection_arch(py)?;
        let chosen = py.detach(|| self.dispatcher.select(arch, &[]))?;
        Ok(param_dicts(py, chosen.info()?)?)
    }
    #[getter]
    fn num_regs(&self, py: Python<'_>) -> PyCaiResult<i32> {
        Ok(self.resolved_for_attributes(py)?.attributes().num_regs)
    }
    #[getter]
    fn max_threads_per_block(&self, py: Python<'_>) -> PyCaiResult<i32> {
        Ok(self.resolved_for_attributes(py)?.attributes().max_threads_per_block)
    }
    #[getter]
    fn shared_size_bytes(&self, py: Python<'_>) -> PyCaiResult<i32> {
        Ok(self.resolved_for_attributes(py)?.attributes().shared_size_bytes)
    }
    #[getter]
    fn max_dynamic_shared_size_bytes(&self, py: Python<'_>) -> PyCaiResult<i32> {
        Ok(self.resolved_for_attributes(py)?.attributes().max_dynamic_shared_size_bytes)
    }
    #[setter]
    fn set_max_dynamic_shared_size_bytes(&self, py: Python<'_>, bytes: i32) -> PyCaiResult<()> {
        Ok(self.resolved_for_attributes(py)?.set_max_dynamic_shared_size_bytes(bytes)?)
    }
    fn __repr__(&self) -> String {
        format!("caijit.Kernel({:?})", self.name())
    }
}

/// `[{name_expression, lowered_name, demangled, params: [...]}, ...]` plus where this
/// compilation came from (`cache`: compiled, memory or disk).
pub fn kernel_infos<'py>(py: Python<'py>, c: &cai_runtime::compile::Compiled, source: CacheSource) -> PyCaiResult<Bound<'py, PyList>> {
    kernel_infos_of(py, c, source, |_| true)
}

/// [`kernel_infos`] of the kernels `keep` says.
fn kernel_infos_of<'py>(
    py: Python<'py>,
    c: &cai_runtime::compile::Compiled,
    source: CacheSource,
    keep: impl Fn(&KernelInfo) -> bool,
) -> PyCaiResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for k in c.kernels.iter().filter(|k| keep(k)) {
        let d = PyDict::new(py);
        d.set_item("name", &k.qualified_name)?;
        d.set_item("name_expression", k.name_expression.clone())?;
        d.set_item("lowered_name", &k.lowered_name)?;
        d.set_item("demangled", k.demangled.clone())?;
        d.set_item("params", param_dicts(py, k)?)?;
        d.set_item("param_bytes", k.param_buffer_size())?;
        d.set_item("arch", c.arch.to_string())?;
        d.set_item(
            "image",
            match c.image {
                cai_runtime::compile::Image::Cubin(_) => "cubin",
                cai_runtime::compile::Image::Ptx(_) => "ptx",
            },
        )?;
        d.set_item("cache", format!("{source:?}").to_lowercase())?;
        // Why NVRTC compiled it with its own search path (never cached); None: trusted.
        d.set_item("untrusted", c.untrusted.clone())?;
        d.set_item("nvrtc_options", c.nvrtc_options.clone())?;
        out.append(d)?;
    }
    Ok(out)
}

pub fn program_from_py(
    source: &str,
    filename: Option<&str>,
    options: Vec<String>,
    include_dirs: Vec<std::path::PathBuf>,
    defines: Vec<(String, Option<String>)>,
) -> Program {
    let mut p = Program::new(source);
    if let Some(f) = filename {
        p = p.located_at(f);
    }
    p.options = options;
    p.include_dirs.extend(include_dirs);
    p.defines = defines;
    // `-lineinfo` (from `lineinfo=True`, `CAIJIT_LINEINFO=1` or the options): name a file
    // program by its absolute path, so that tools show the real file.
    if p.has_lineinfo() {
        p = p.lineinfo();
    }
    p
}

/// `_native.Kernel` factory: `make_kernel(source, name, filename, options, include_dirs, defines)`.
#[pyfunction]
#[pyo3(signature = (source, name = None, filename = None, options = Vec::new(), include_dirs = Vec::new(), defines = Vec::new()))]
pub fn make_kernel(
    source: &str,
    name: Option<String>,
    filename: Option<&str>,
    options: Vec<String>,
    include_dirs: Vec<std::path::PathBuf>,
    defines: Vec<(String, Option<String>)>,
) -> PyCaiResult<Kernel> {
    Kernel::new(program_from_py(source, filename, options, include_dirs, defines), name)
}

/// Compile a program without a GPU: `compile_program(source, arch, ...)` → kernel infos
/// (`arch=None`: the architecture `k.params` uses).
/// Each name expression's types get their headers (`axpy<__half>`: `cuda_fp16.h`). With
/// `notes`, what caijit could not learn (see `Compiled::notes`) is appended to it; with
/// `ptx`, the program's PTX (what a differential test compares with NVRTC's own).
#[pyfunction]
#[pyo3(signature = (source, arch, filename = None, name_expressions = Vec::new(), options = Vec::new(), include_dirs = Vec::new(), defines = Vec::new(), notes = None, ptx = None))]
#[allow(clippy::too_many_arguments)] // the Python signature
pub fn compile_program<'py>(
    py: Python<'py>,
    source: &str,
    arch: Option<&str>,
    filename: Option<&str>,
    name_expressions: Vec<String>,
    options: Vec<String>,
    include_dirs: Vec<std::path::PathBuf>,
    defines: Vec<(String, Option<String>)>,
    notes: Option<&Bound<'py, PyList>>,
    ptx: Option<&Bound<'py, PyList>>,
) -> PyCaiResult<Bound<'py, PyList>> {
    let p = with_name_expressions(program_from_py(source, filename, options, include_dirs, defines), name_expressions);
    // No architecture: the one `k.params` and `k.compile()` use (the device's, else CAIJIT_ARCH).
    let arch = match arch {
        Some(a) => Arch::parse(a)?,
        None => inspection_arch(py)?,
    };
    let (c, source) = py.detach(|| compile_reporting(&p, arch, &CompileOptions::default()))?;
    if let Some(list) = notes {
        for n in &c.notes {
            list.append(n)?;
        }
    }
    if let Some(list) = ptx {
        list.append(&c.ptx)?;
    }
    kernel_infos(py, &c, source)
}

/// Declarations of the source's `__global__` functions (for the CLI and tools): the
/// tokenizer's candidates, by qualified name.
#[pyfunction]
pub fn declarations(source: &str) -> PyCaiResult<Vec<DeclSummary>> {
    let decls = cai_runtime::signature::parse_kernels(source).kernels;
    Ok(decls
        .into_iter()
        .map(|d| {
            (
                d.qualified_name(),
                d.extern_c,
                d.template_params.iter().map(|t| t.name.clone()).collect(),
                d.params.iter().map(|(_, t)| t.to_string()).collect(),
                d.template_params
                    .iter()
                    .map(|t| match (&t.default, t.is_type) {
                        (Some(v), true) => v.clone(),
                        (None, true) => "float".to_string(),
                        (_, false) => "1".to_string(),
                    })
                    .collect(),
            )
        })
        .collect())
}
