//! `caijit.Kernel`: lazily compiled, per-signature instantiated, launched with
//! `kernel[grid, block(, stream(, shared_mem))](*args)`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cai_runtime::compile::{compile, compile_reporting, Arch, CacheSource, CompileOptions, KernelInfo, Program};
use cai_runtime::kernel::Kernel as RtKernel;
use cai_runtime::launch::{Arg, LaunchConfig};
use cai_runtime::runtime::{self as rt, Context, Stream as RtStream};
use cai_runtime::signature::{deduce, headers_for, ArgType, KernelDecl, ParamKind};
use cai_runtime::sync::lock;
use cai_runtime::Error;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use smallvec::SmallVec;

use crate::args::timing::{self, Phase};
use crate::args::{arg_from_py, launch_device, release_after, ArgContext, PyArg};
use crate::errors::{PyCaiError, PyCaiResult};
use crate::stream::stream_from_py;

/// A kernel of a program: compiled on first launch (per device, per argument types for
/// templates) and cached.
#[pyclass(frozen, module = "caijit", name = "Kernel")]
pub struct Kernel {
    program: Program,
    /// The name asked for: a `__global__` name, or any name expression NVRTC accepts
    /// (`axpy<float>`, `ns::k`, `(void(*)(double, int))k`).
    name: String,
    decl: Option<KernelDecl>,
    /// Several non-template kernels have this qualified name: the launch's arguments pick
    /// one.
    overloaded: bool,
    /// A plain name the source declares in several namespaces (`a::k`, `b::k`): not an
    /// overload set. The compiled program decides (an error unless one of them is
    /// compiled).
    namespaces: Vec<String>,
    instances: Mutex<HashMap<InstanceKey, Arc<RtKernel>>>,
    /// The first instance resolved, read without a lock: a kernel that is not a deduced
    /// template has one instance per device, and most programs use one device.
    first: OnceLock<(usize, Arc<RtKernel>)>,
    /// [`Kernel::by_argument_types`], fixed at construction (name and declaration never
    /// change): read by every launch.
    by_types: bool,
}

/// (device, argument types; empty unless the kernel is a deduced template), inline so that
/// looking an instance up allocates nothing.
type InstanceKey = (usize, SmallVec<[ArgType; 8]>);

/// `(name, extern_c, template parameters, parameter types, an example argument per
/// template parameter)` of a declaration.
type DeclSummary = (String, bool, Vec<String>, Vec<String>, Vec<String>);

impl Kernel {
    pub fn new(program: Program, name: Option<String>) -> PyCaiResult<Kernel> {
        let decls = program.declarations().kernels;
        let name = match name {
            Some(n) => n.trim().to_string(),
            None => {
                let mut names: Vec<String> = Vec::new();
                for n in decls.iter().map(KernelDecl::qualified_name) {
                    if !names.contains(&n) {
                        names.push(n);
                    }
                }
                match names.as_slice() {
                    [one] => one.clone(),
                    [] => return Err(PyCaiError::argument("the source declares no __global__ function")),
                    many => {
                        return Err(PyCaiError::argument(format!(
                            "the source declares {} kernels ({}); pass name=...",
                            many.len(),
                            many.join(", ")
                        )))
                    }
                }
            }
        };
        if name.is_empty() {
            return Err(PyCaiError::argument("a kernel name must not be empty"));
        }
        // The declaration this name refers to, if the tokenizer found one: by qualified
        // name, else by plain name. A name it did not find (made by a macro, an overload
        // cast) is handed to NVRTC as a name expression; NVRTC decides.
        let base = name.split('<').next().unwrap_or(&name).trim();
        let base = base.strip_prefix("::").unwrap_or(base);
        let mine: Vec<&KernelDecl> = match decls.iter().filter(|d| d.qualified_name() == base).collect::<Vec<_>>() {
            v if v.is_empty() && !base.contains("::") => decls.iter().filter(|d| d.name == base).collect(),
            v => v,
        };
        // Overloads share a qualified name; a plain name found in several namespaces names
        // none of them (unless the preprocessor keeps only one).
        let mut namespaces: Vec<String> = mine.iter().map(|d| d.qualified_name()).collect();
        namespaces.sort_unstable();
        namespaces.dedup();
        let (mine, namespaces) = if namespaces.len() > 1 { (Vec::new(), namespaces) } else { (mine, Vec::new()) };
        let overloaded =
            !name.contains('<') && !name.starts_with('(') && mine.len() > 1 && mine.iter().all(|d| !d.is_template() && !d.extern_c);
        let decl = mine.first().map(|d| (*d).clone());
        let mut k = Kernel {
            program,
            name,
            decl,
            overloaded,
            namespaces,
            instances: Mutex::new(HashMap::new()),
            first: OnceLock::new(),
            by_types: false,
        };
        k.by_types = k.is_deduced_template() || k.overloaded;
        Ok(k)
    }

    pub fn is_deduced_template(&self) -> bool {
        self.decl.as_ref().is_some_and(|d| d.is_template()) && !self.name.contains('<')
    }

    /// Whether the launch's argument types choose the instance (a deduced template, or one
    /// of several overloads).
    fn by_argument_types(&self) -> bool {
        self.by_types
    }

    /// Whether NVRTC must be given the name as a name expression: anything but the plain
    /// name of a kernel the tokenizer found (those caijit asks about itself).
    fn needs_name_expression(&self) -> bool {
        // Overloads (one name expression cannot name several) and a plain name declared in
        // several namespaces are found among the compiled kernels.
        let plain = !self.name.contains(['<', ':', '(']);
        if self.overloaded || (plain && !self.namespaces.is_empty()) {
            return false;
        }
        self.decl.is_none() || !plain
    }

    /// A compile error of the program given this kernel's name as a name expression, when
    /// the source declares no kernel of that name (a misspelt one, most likely): NVRTC's
    /// log would show the name map it generates. Say instead which kernels the program has,
    /// as `python -m caijit compile` does, when it compiles without the name.
    fn unknown_name(&self, py: Python<'_>, e: Error, arch: Arch) -> Error {
        if self.decl.is_some() || !self.needs_name_expression() || !matches!(e, Error::Compile(_)) {
            return e;
        }
        let program = self.program.clone();
        match py.detach(|| compile(&program, arch)) {
            Ok(c) if c.kernels_named(&self.name).is_ok_and(|found| found.is_empty()) => {
                // The compiled kernels and the declared ones (templates nobody instantiated).
                let compiled = c.kernels.iter().map(|k| k.name_expression.clone().unwrap_or_else(|| k.qualified_name.clone()));
                let mut names: Vec<String> =
                    compiled.chain(program.declarations().kernels.iter().map(KernelDecl::qualified_name)).collect();
                names.sort();
                names.dedup();
                Error::argument(format!("no kernel named {:?} in the program (it has: {})", self.name, names.join(", ")))
            }
            _ => e,
        }
    }

    /// Whether several non-template kernels share this kernel's qualified name.
    pub fn is_overloaded(&self) -> bool {
        self.overloaded
    }

    /// The program to compile and the name to look up for these argument types.
    fn instance(&self, types: &[ArgType]) -> PyCaiResult<(Program, String)> {
        match &self.decl {
            Some(d) if self.is_deduced_template() => {
                let i = deduce(d, types).map_err(Error::from)?;
                Ok((self.program.clone().including(&i.headers).name_expression(i.expression.clone()), i.expression))
            }
            _ if self.needs_name_expression() => {
                Ok((self.program.clone().including(&headers_for(&self.name)).name_expression(self.name.clone()), self.name.clone()))
            }
            _ => Ok((self.program.clone(), self.name.clone())),
        }
    }

    /// The program to compile and the name to look up for the instance that arguments of
    /// `types` select (what [`Kernel::resolve`] compiles). For `caijit.jax`.
    pub fn instance_for(&self, types: &[ArgType]) -> PyCaiResult<(Program, String)> {
        self.instance(types)
    }

    /// The declared parameters' names, in order (`None` for a kernel the source does not
    /// declare by this name, or an unnamed parameter).
    pub fn declared_params(&self) -> Option<Vec<Option<String>>> {
        self.decl.as_ref().map(|d| d.params.iter().map(|(n, _)| n.clone()).collect())
    }

    /// The compiled, loaded kernel for a device and, for a deduced template or an overload
    /// set, the types of the launch's arguments (read only then).
    pub fn resolve(&self, py: Python<'_>, device: usize, args: &[Arg<'_>]) -> PyCaiResult<Arc<RtKernel>> {
        let by_types = self.by_argument_types();
        if let Some((_, k)) = self.first.get().filter(|(d, _)| !by_types && *d == device) {
            return Ok(k.clone());
        }
        let types: SmallVec<[ArgType; 8]> = if by_types { args.iter().map(Arg::arg_type).collect() } else { SmallVec::new() };
        let key = (device, types);
        if let Some(k) = lock(&self.instances).get(&key) {
            return Ok(k.clone());
        }
        let (program, expr) = self.instance(&key.1)?;
        let overloaded = self.overloaded;
        let k = py
            .detach(|| -> cai_runtime::Result<_> {
                let ctx = Context::new(device)?;
                let module = ctx.compile(&program)?;
                if !overloaded {
                    return module.kernel(&expr);
                }
                let lowered = pick_overload(module.compiled().kernels_named(&expr)?, &key.1)?;
                module.kernel(&lowered)
            })
            .map_err(|e| match Context::new(device) {
                Ok(ctx) => self.unknown_name(py, e, ctx.arch()),
                Err(_) => e,
            })?;
        lock(&self.instances).insert(key, k.clone());
        if !by_types {
            let _ = self.first.set((device, k.clone()));
        }
        Ok(k)
    }

    fn resolved_for_attributes(&self, py: Python<'_>) -> PyCaiResult<Arc<RtKernel>> {
        self.not_a_deduced_template(py)?;
        self.resolve(py, 0, &[])
    }

    fn not_a_deduced_template(&self, py: Python<'_>) -> PyCaiResult<()> {
        if self.overloaded {
            let arch = inspection_arch(py)?;
            let program = self.program_for([]);
            let compiled = py.detach(|| compile(&program, arch))?;
            let casts: Vec<String> = compiled.kernels_named(&self.name)?.into_iter().map(|k| format!("\"{}\"", overload_cast(k))).collect();
            return Err(PyCaiError::argument(format!(
                "`{}` is overloaded: the launch's arguments pick one, or name one with an overload cast: {}",
                self.name,
                casts.join(", ")
            )));
        }
        if self.is_deduced_template() {
            return Err(PyCaiError::argument(format!(
                "`{}` is a template: its attributes exist per instance; use .specialize(\"{}<...>\")",
                self.name, self.name
            )));
        }
        Ok(())
    }

    /// This kernel's program, with its name expression when it has one.
    fn program_for(&self, exprs: impl IntoIterator<Item = String>) -> Program {
        let mut program = self.program.clone();
        let mut headers = Vec::new();
        if self.needs_name_expression() {
            headers.extend(headers_for(&self.name));
            program = program.name_expression(self.name.clone());
        }
        for e in exprs {
            headers.extend(headers_for(&e));
            program = program.name_expression(e);
        }
        headers.sort_unstable();
        headers.dedup();
        program.including(&headers)
    }

    /// Whether a kernel of the compiled program is this kernel (or, for a deduced
    /// template, one of its instances).
    fn is_mine(&self, k: &KernelInfo) -> bool {
        if self.name.contains(['<', '(']) {
            k.name_expression.as_deref() == Some(self.name.as_str())
        } else {
            let plain = self.name.strip_prefix("::").unwrap_or(&self.name);
            k.qualified_name == plain || k.base_name() == self.name || k.lowered_name == self.name
        }
    }
}

/// The overload cast that names this overload: `(void(*)(float*, int))ns::k`.
fn overload_cast(k: &KernelInfo) -> String {
    let types: Vec<&str> = k.params.iter().map(|p| p.cpp_type.as_str()).collect();
    format!("(void(*)({})){}", types.join(", "), k.qualified_name)
}

/// The one overload whose parameters admit the launch's argument types.
fn pick_overload(candidates: Vec<&KernelInfo>, types: &[ArgType]) -> cai_runtime::Result<String> {
    let fits: Vec<&KernelInfo> = candidates.iter().copied().filter(|k| admits(k, types)).collect();
    match fits.as_slice() {
        [one] => Ok(one.lowered_name.clone()),
        [] => Err(Error::argument(format!(
            "no overload of this kernel takes these arguments ({types:?}); it has: {}",
            overload_list(candidates.iter().copied())
        ))),
        many => Err(Error::argument(format!(
            "the arguments fit several overloads ({}); pass typed scalars (e.g. numpy.float32) or name one with an overload cast",
            overload_list(many.iter().copied())
        ))),
    }
}

/// Whether a kernel's parameters take arguments of `types`, one each.
pub fn admits(k: &KernelInfo, types: &[ArgType]) -> bool {
    k.params.len() == types.len() && k.params.iter().zip(types).all(|(p, t)| p.kind.admits(t))
}

/// Overloads as messages name them ([`KernelInfo::display_name`]).
pub fn overload_list<'a>(ks: impl Iterator<Item = &'a KernelInfo>) -> String {
    ks.map(KernelInfo::display_name).collect::<Vec<_>>().join(", ")
}

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
    // Filled in place: a launch moves each argument once, never the whole (large) vector.
    let mut converted: SmallVec<[PyArg; 8]> = SmallVec::new();
    for (i, a) in args.iter().enumerate() {
        converted.push(arg_from_py(i, &a, &mut ctx)?);
    }
    let probe = timing::start();
    let device = launch_device(&mut converted, stream)?;
    probe.stop(Phase::Device);
    let launch_args: SmallVec<[Arg<'_>; 8]> = converted.iter().map(PyArg::as_arg).collect();
    let probe = timing::start();
    let k = kernel.resolve(py, device, &launch_args)?;
    probe.stop(Phase::Resolve);
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
    let released = release_after(k.context(), on, converted.drain(..));
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
        let kind = match &p.kind {
            ParamKind::Pointer { .. } => "pointer",
            ParamKind::Array { .. } => "array",
            ParamKind::Scalar(_) => "scalar",
            ParamKind::Struct { .. } => "struct",
            _ => "other",
        };
        d.set_item("kind", kind)?;
        d.set_item("size", p.size)?;
        d.set_item("align", p.align)?;
        d.set_item("offset", p.offset)?;
        out.append(d)?;
    }
    Ok(out)
}

#[pymethods]
impl Kernel {
    #[getter]
    pub fn name(&self) -> &str {
        &self.name
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
        Err(PyCaiError::argument(format!("kernel `{}` has no launch configuration; {SYNTAX}", self.name)))
    }

    /// An explicit instance: `k.specialize("axpy<float>")` or `k.specialize("float")`.
    fn specialize(&self, args: &str) -> PyCaiResult<Kernel> {
        let base = self.name.split('<').next().unwrap_or(&self.name).trim();
        let args = args.trim();
        let full = args.strip_prefix(base).is_some_and(|rest| rest.trim_start().starts_with('<'));
        let expr = match (full, args.ends_with('>')) {
            (true, _) => args.to_string(),
            (false, true) => format!("{base}<{args} >"),
            (false, false) => format!("{base}<{args}>"),
        };
        Kernel::new(self.program.clone(), Some(expr))
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
        let launched: Vec<String> = if self.is_deduced_template() {
            let keys: Vec<_> = lock(&self.instances).keys().map(|(_, types)| types.clone()).collect();
            let mut exprs = keys.iter().map(|t| self.instance(t).map(|(_, e)| e)).collect::<PyCaiResult<Vec<_>>>()?;
            exprs.sort();
            exprs.dedup();
            exprs
        } else {
            Vec::new()
        };
        let program = self.program_for(launched);
        let (compiled, source) =
            py.detach(|| compile_reporting(&program, arch, &CompileOptions::default())).map_err(|e| self.unknown_name(py, e, arch))?;
        if !self.namespaces.is_empty() {
            // A plain name declared in several namespaces: an error unless one is compiled.
            compiled.kernels_named(&self.name)?;
        }
        kernel_infos_of(py, &compiled, source, |k| self.is_mine(k))
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
        let program = self.program_for([]);
        let compiled = py.detach(|| compile(&program, arch)).map_err(|e| self.unknown_name(py, e, arch))?;
        Ok(param_dicts(py, compiled.kernel(&self.name)?)?)
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
        format!("caijit.Kernel({:?})", self.name)
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
    let mut p = program_from_py(source, filename, options, include_dirs, defines);
    let mut headers = Vec::new();
    for e in name_expressions {
        headers.extend(headers_for(&e));
        p = p.name_expression(e);
    }
    headers.sort_unstable();
    headers.dedup();
    let p = p.including(&headers);
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
