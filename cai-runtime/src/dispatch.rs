//! Numba-style dispatch: a [`Dispatcher`] owns a program and a kernel name and turns
//! (device, argument types) into a loaded kernel: any name expression, template deduction
//! from the arguments (with default template arguments), overloads picked by the
//! arguments, explicit instances by template arguments ([`Dispatcher::instance`]), and one
//! instance cache per argument-type signature or template arguments. Rust launches
//! ([`Dispatcher::launch`], [`Dispatcher::forall`]), Python launches, `caijit.jax` and the
//! kernel library ([`crate::ops`], one dispatcher per library kernel, instances named by
//! dtypes and integers) all select their instances here.
//!
//! # Examples
//! Deduce and compile an instance without a GPU (for the inspection architecture):
//! ```
//! use cai_runtime::cai::DType;
//! use cai_runtime::compile::Program;
//! use cai_runtime::dispatch::Dispatcher;
//! use cai_runtime::kernel::inspection_arch;
//! use cai_runtime::signature::ArgType;
//! # std::env::set_var("CAIJIT_CACHE", "0"); // (a test: the user's disk cache is left alone)
//!
//! let src = "template <typename T> __global__ void axpy(T a, const T* x, T* y, int n) {}";
//! let axpy = Dispatcher::new(Program::new(src), Some("axpy"))?;
//! let f32s = ArgType::Array { dtype: DType::F32, rank: 1 };
//! let types = [ArgType::TypedScalar(DType::F32), f32s, f32s, ArgType::UntypedScalar];
//! let chosen = axpy.select(inspection_arch()?, &types)?;
//! assert_eq!(chosen.name, "axpy<float>");
//! assert_eq!(chosen.info()?.params[1].cpp_type, "const float*");
//! # Ok::<(), cai_runtime::Error>(())
//! ```
//!
//! # Rationale
//! Selection is a rule of the runtime, not of a binding: a Rust caller, a Python launch and
//! a JAX lowering given the same arguments must get the same instance, compiled the same
//! way. Bindings convert their arguments into [`Arg`]s (or [`ArgType`]s) and ask.
//!
//! The instance cache is built for the launch path: a kernel that is neither a deduced
//! template nor an overload set has one instance per device, read without a lock after the
//! first launch; otherwise the key is the device and the argument types (or, for an
//! explicit instance, the template arguments), inline (no allocation), behind one mutex.
//!
//! # Limitations
//! Overloads are picked among non-template kernels only; a template overload set is named
//! by an explicit instance (`k<float>`) or an overload cast.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use smallvec::SmallVec;

use crate::compile::{self, Arch, CacheSource, CompileOptions, Compiled, KernelInfo, Program};
use crate::error::{Error, Result};

mod rules;
#[cfg(test)]
mod tests;

use crate::kernel::{inspection_arch, Kernel};
use crate::launch::{Arg, LaunchConfig};
use crate::runtime::{Context, Stream};
use crate::signature::{deduce, headers_for, ArgType, KernelDecl, SignatureError};
use crate::sync::lock;
pub use rules::{admits, launch_device, overload_cast, overload_list, pick_overload, template_instance, TemplateArg};

/// (device, what selects the instance), inline so that looking an instance up allocates
/// nothing.
type InstanceKey = (usize, Selector);

/// What selects an instance of a dispatcher's kernel on a device.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Selector {
    /// A launch's argument types (empty unless the kernel is selected by them).
    Types(SmallVec<[ArgType; 8]>),
    /// Explicit template arguments ([`Dispatcher::instance`]).
    Explicit(SmallVec<[TemplateArg; 4]>),
}

/// A kernel of a program, by any name: compiled on first use (per device, and per argument
/// types for a deduced template or an overload set) and cached.
#[derive(Debug)]
pub struct Dispatcher {
    program: Program,
    /// The name asked for: a `__global__` name, or any name expression NVRTC accepts
    /// (`axpy<float>`, `ns::k`, `(void(*)(double, int))k`).
    name: String,
    /// What the source declares of the name: read when the dispatcher is made, except for
    /// [`Dispatcher::template`]'s (read when first needed).
    declared: OnceLock<Declared>,
    /// Made by [`Dispatcher::template`]: the caller vouches that the name is a template the
    /// source declares once, in no namespace, so explicit instances need no reading.
    vouched: bool,
    instances: Mutex<HashMap<InstanceKey, Arc<Kernel>>>,
    /// The first instance resolved, read without a lock: a kernel that is not selected by
    /// its argument types has one instance per device, and most programs use one device.
    first: OnceLock<(usize, Arc<Kernel>)>,
    /// [`Dispatcher::by_argument_types`], fixed at construction (name and declaration never
    /// change): read by every launch.
    by_types: bool,
}

/// What a source declares of a dispatcher's name.
#[derive(Debug)]
struct Declared {
    decl: Option<KernelDecl>,
    /// Several non-template kernels have this qualified name: the launch's arguments pick
    /// one.
    overloaded: bool,
    /// A plain name the source declares in several namespaces (`a::k`, `b::k`): not an
    /// overload set. The compiled program decides (an error unless one of them is
    /// compiled).
    namespaces: Vec<String>,
}

impl Declared {
    /// The declaration `name` refers to among `decls`, if the tokenizer found one: by
    /// qualified name, else by plain name. A name it did not find (made by a macro, an
    /// overload cast) is handed to NVRTC as a name expression; NVRTC decides.
    fn read(decls: &[KernelDecl], name: &str) -> Declared {
        let base = name.split('<').next().unwrap_or(name).trim();
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
        Declared { decl: mine.first().map(|d| (*d).clone()), overloaded, namespaces }
    }
}

/// An instance chosen for an architecture: the program compiled, the name that finds the
/// instance in it (a name expression, or an overload's lowered name), and the compilation.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Selection {
    pub program: Program,
    pub name: String,
    pub compiled: Arc<Compiled>,
}

impl Selection {
    /// The chosen kernel's parameters, as compiled.
    pub fn info(&self) -> Result<&KernelInfo> {
        self.compiled.kernel(&self.name)
    }
}

impl Dispatcher {
    /// The kernel `name` of `program` (`None`: the one kernel the source declares).
    pub fn new(program: Program, name: Option<&str>) -> Result<Dispatcher> {
        let declared = program.declarations();
        let decls = &declared.kernels;
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
                    [] => return Err(Error::argument("the source declares no __global__ function")),
                    many => {
                        return Err(Error::argument(format!(
                            "the source declares {} kernels ({}); pass name=...",
                            many.len(),
                            many.join(", ")
                        )))
                    }
                }
            }
        };
        if name.is_empty() {
            return Err(Error::argument("a kernel name must not be empty"));
        }
        let k = Dispatcher {
            declared: OnceLock::from(Declared::read(decls, &name)),
            program,
            name,
            vouched: false,
            instances: Mutex::new(HashMap::new()),
            first: OnceLock::new(),
            by_types: false,
        };
        Ok(k.typed())
    }

    /// The template kernel `name` of `program`, made without reading the program's
    /// declarations, for callers that know `name` is a template the source declares once,
    /// in no namespace (the kernel library's, which a test checks): its explicit instances
    /// ([`Dispatcher::instance`]) need no reading, and anything else reads them when first
    /// needed.
    pub(crate) fn template(program: Program, name: &str) -> Dispatcher {
        Dispatcher {
            program,
            name: name.trim().to_string(),
            declared: OnceLock::new(),
            vouched: true,
            instances: Mutex::new(HashMap::new()),
            first: OnceLock::new(),
            by_types: true,
        }
    }

    /// `self` with [`Dispatcher::by_argument_types`] decided.
    fn typed(mut self) -> Dispatcher {
        self.by_types = self.is_deduced_template() || self.declared().overloaded;
        self
    }

    /// What the source declares of the name, read at the first call for a
    /// [`Dispatcher::template`].
    fn declared(&self) -> &Declared {
        self.declared.get_or_init(|| Declared::read(&self.program.declarations().kernels, &self.name))
    }

    /// The name asked for.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The program, as given (without the name expressions instances add).
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// An explicit instance: `specialize("axpy<float>")` or `specialize("float")`.
    pub fn specialize(&self, args: &str) -> Result<Dispatcher> {
        let base = self.name.split('<').next().unwrap_or(&self.name).trim();
        let args = args.trim();
        let full = args.strip_prefix(base).is_some_and(|rest| rest.trim_start().starts_with('<'));
        let expr = match (full, args.ends_with('>')) {
            (true, _) => args.to_string(),
            (false, true) => format!("{base}<{args} >"),
            (false, false) => format!("{base}<{args}>"),
        };
        Dispatcher::new(self.program.clone(), Some(&expr))
    }

    /// Whether the name is a template's, without template arguments: each launch's argument
    /// types deduce them.
    pub fn is_deduced_template(&self) -> bool {
        self.declared().decl.as_ref().is_some_and(|d| d.is_template()) && !self.name.contains('<')
    }

    /// The one declaration the name refers to, if the source declares it so (`None` also
    /// for a plain name declared in several namespaces).
    #[cfg(test)]
    pub(crate) fn declaration(&self) -> Option<&KernelDecl> {
        self.declared().decl.as_ref()
    }

    /// Whether several non-template kernels share this kernel's qualified name.
    pub fn is_overloaded(&self) -> bool {
        self.declared().overloaded
    }

    /// Whether the launch's argument types choose the instance (a deduced template, or one
    /// of several overloads).
    #[inline]
    pub fn by_argument_types(&self) -> bool {
        self.by_types
    }

    /// Whether NVRTC must be given the name as a name expression: anything but the plain
    /// name of a kernel the tokenizer found (those caijit asks about itself).
    fn needs_name_expression(&self) -> bool {
        // Overloads (one name expression cannot name several) and a plain name declared in
        // several namespaces are found among the compiled kernels.
        let plain = !self.name.contains(['<', ':', '(']);
        let declared = self.declared();
        if declared.overloaded || (plain && !declared.namespaces.is_empty()) {
            return false;
        }
        declared.decl.is_none() || !plain
    }

    /// The program to compile and the name to look up for arguments of `types` (read only
    /// for a deduced template; an overload set's name finds every overload, see
    /// [`Dispatcher::select`]).
    pub fn instance_for(&self, types: &[ArgType]) -> Result<(Program, String)> {
        match &self.declared().decl {
            Some(d) if self.is_deduced_template() => {
                let i = deduce(d, types).map_err(|e| {
                    // Two arguments that deduce a template parameter differently: the second
                    // is the one at fault.
                    let at = match &e {
                        SignatureError::Conflict { index, .. } => Some(*index),
                        _ => None,
                    };
                    match at {
                        Some(i) => self.name_argument(i, e.into()),
                        None => e.into(),
                    }
                })?;
                Ok(self.instance_program(i.expression))
            }
            _ if self.needs_name_expression() => Ok(self.instance_program(self.name.clone())),
            _ => Ok((self.program.clone(), self.name.clone())),
        }
    }

    /// This kernel's program with the one name expression `expr`, and the headers of the
    /// CUDA types it names (`cuda_fp16.h` for `__half`), and `expr`: how an instance is
    /// compiled however it is asked for (deduced, named, by template arguments), so that
    /// one instance is one program, and a bundle baked for it serves each way.
    fn instance_program(&self, expr: String) -> (Program, String) {
        (with_name_expressions(self.program.clone(), [expr.clone()]), expr)
    }

    /// The declared parameters' names, in order (`None` for a kernel the source does not
    /// declare by this name, or an unnamed parameter).
    pub fn declared_params(&self) -> Option<Vec<Option<String>>> {
        self.declared().decl.as_ref().map(|d| d.params.iter().map(|(n, _)| n.clone()).collect())
    }

    /// Give an error about argument `index` (one found before the kernel's parameters were
    /// looked at: a host array, an object that is no argument, a malformed interface) the
    /// index, and the parameter's name and declared type where the source declares them
    /// ([`Error::at_argument`]). Other errors, and argument errors that already say, are
    /// returned as they are.
    pub fn name_argument(&self, index: usize, e: Error) -> Error {
        let (name, ctype) = self.parameter(index);
        e.at_argument(index, name, ctype.as_deref())
    }

    /// Parameter `index`'s name and declared C++ type, each where the source declares
    /// them (a template's parameter types as written: `T*`).
    pub fn parameter(&self, index: usize) -> (Option<&str>, Option<String>) {
        match self.declared().decl.as_ref().and_then(|d| d.params.get(index)) {
            Some((name, ty)) => (name.as_deref(), Some(ty.to_string())),
            None => (None, None),
        }
    }

    /// A compile error of the program given this kernel's name as a name expression, when
    /// the source declares no kernel of that name (a misspelt one, most likely): NVRTC's
    /// log would show the name map it generates. Say instead which kernels the program has,
    /// as `python -m caijit compile` does, when it compiles without the name.
    fn unknown_name(&self, e: Error, arch: Arch) -> Error {
        if self.declared().decl.is_some() || !self.needs_name_expression() || !matches!(e, Error::Compile(_)) {
            return e;
        }
        match compile::compile(&self.program, arch) {
            Ok(c) if c.kernels_named(&self.name).is_ok_and(|found| found.is_empty()) => {
                // The compiled kernels and the declared ones (templates nobody instantiated).
                let compiled = c.kernels.iter().map(|k| k.name_expression.clone().unwrap_or_else(|| k.qualified_name.clone()));
                let mut names: Vec<String> =
                    compiled.chain(self.program.declarations().kernels.iter().map(KernelDecl::qualified_name)).collect();
                names.sort();
                names.dedup();
                Error::argument(format!("no kernel named {:?} in the program (it has: {})", self.name, names.join(", ")))
            }
            _ => e,
        }
    }

    /// Compile `program` (this kernel's, with its instance's name expression) for `arch`.
    fn compile(&self, program: &Program, arch: Arch) -> Result<Arc<Compiled>> {
        compile::compile(program, arch).map_err(|e| self.unknown_name(e, arch))
    }

    /// Choose and compile the instance that arguments of `types` select, for `arch` (no GPU
    /// needed): a deduced template's instance, the one overload whose parameters admit
    /// them, or the kernel the name names.
    pub fn select(&self, arch: Arch, types: &[ArgType]) -> Result<Selection> {
        let (program, name) = self.instance_for(types)?;
        let compiled = self.compile(&program, arch)?;
        let name = if self.declared().overloaded { pick_overload(compiled.kernels_named(&name)?, types)? } else { name };
        Ok(Selection { program, name, compiled })
    }

    /// The explicit instance `name<args>`'s name expression: an error unless this kernel's
    /// name is a template's without template arguments (or a name the tokenizer did not
    /// find: NVRTC decides).
    fn explicit_name(&self, args: &[TemplateArg]) -> Result<String> {
        let wrong = if args.is_empty() {
            Some("needs template arguments for an explicit instance")
        } else if self.name.contains(['<', '(']) {
            Some("names one instance already")
        } else if self.vouched {
            None
        } else if self.declared().overloaded {
            Some("is an overload set, not a template")
        } else if !self.declared().namespaces.is_empty() {
            Some("is declared in several namespaces (name one, `a::k`)")
        } else if self.declared().decl.as_ref().is_some_and(|d| !d.is_template()) {
            Some("is not a template")
        } else {
            None
        };
        match wrong {
            Some(why) => Err(Error::argument(format!("`{}` {why}: no instance `{}`", self.name, template_instance(&self.name, args)))),
            None => Ok(template_instance(&self.name, args)),
        }
    }

    /// The program to compile and the name to look up for the explicit instance
    /// `name<args>` ([`template_instance`]): the program [`Dispatcher::specialize`] and a
    /// deduced instance ([`Dispatcher::instance_for`]) compile for it (with the headers of
    /// the CUDA types it names), so that a bundle baked for it (`bundle build --instance`,
    /// the library's [`crate::ops::library_programs`]) serves each way of asking.
    pub fn explicit_instance_for(&self, args: &[TemplateArg]) -> Result<(Program, String)> {
        Ok(self.instance_program(self.explicit_name(args)?))
    }

    /// Compile the explicit instance `name<args>` for `arch` (no GPU needed;
    /// [`Dispatcher::explicit_instance_for`]).
    ///
    /// ```
    /// use cai_runtime::cai::DType;
    /// use cai_runtime::compile::Program;
    /// use cai_runtime::dispatch::{Dispatcher, TemplateArg};
    /// use cai_runtime::kernel::inspection_arch;
    /// # std::env::set_var("CAIJIT_CACHE", "0"); // (a test: the user's disk cache is left alone)
    ///
    /// let src = "template <typename T, int N> __global__ void fill(T* x, T v) { x[N] = v; }";
    /// let fill = Dispatcher::new(Program::new(src), Some("fill"))?;
    /// let chosen = fill.select_instance(inspection_arch()?, &[TemplateArg::Type(DType::F64), TemplateArg::Int(3)])?;
    /// assert_eq!(chosen.name, "fill<double, 3>");
    /// assert_eq!(chosen.info()?.params[1].cpp_type, "double");
    /// # Ok::<(), cai_runtime::Error>(())
    /// ```
    pub fn select_instance(&self, arch: Arch, args: &[TemplateArg]) -> Result<Selection> {
        let (program, name) = self.explicit_instance_for(args)?;
        let compiled = self.compile(&program, arch)?;
        Ok(Selection { program, name, compiled })
    }

    /// The loaded explicit instance `name<args>` on `ctx`'s device: from the instance
    /// cache (a lookup by device and template arguments, without allocating for up to four
    /// arguments), else compiled ([`Dispatcher::select_instance`]: memory cache, bundles,
    /// disk cache, NVRTC) and loaded, once per device and template arguments. Every call
    /// with the same device and arguments gets the same [`Kernel`].
    pub fn instance(&self, ctx: &Arc<Context>, args: &[TemplateArg]) -> Result<Arc<Kernel>> {
        let key = (ctx.ordinal(), Selector::Explicit(SmallVec::from_slice(args)));
        let hit = lock(&self.instances).get(&key).cloned();
        if let Some(k) = hit {
            return Ok(k);
        }
        let chosen = self.select_instance(ctx.arch(), args)?;
        let k = ctx.load_compiled(&chosen.program, chosen.compiled)?.kernel(&chosen.name)?;
        // Two threads asking first load one module (loads are once per key); keep the kernel
        // the first one cached.
        Ok(lock(&self.instances).entry(key).or_insert(k).clone())
    }

    /// Choose the instance for parameters bound by name (`caijit.jax`: buffers and named
    /// scalars), for `arch`. `bind` binds a kernel's parameter names to values and says the
    /// argument types it made; `what` describes the arguments for messages ("buffers
    /// (float32\[4\]) and scalars"). A template is deduced from the bindings its
    /// declaration's names make, and those must be the compiled instance's; an overload is
    /// the one whose own names bind and whose parameters admit the result.
    pub fn select_bound<B>(
        &self,
        arch: Arch,
        bind: impl Fn(&[Option<String>]) -> Result<(B, Vec<ArgType>)>,
        what: impl Fn() -> String,
    ) -> Result<(Selection, B)> {
        let names_of = |info: &KernelInfo| info.params.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        let k = &self.name;
        if self.is_deduced_template() {
            let declared = self.declared_params().unwrap_or_default();
            let (_, guess) = bind(&declared)?;
            let chosen = self.select(arch, &guess)?;
            let (bound, types) = bind(&names_of(chosen.info()?))?;
            if types != guess && self.instance_for(&types)?.1 != chosen.name {
                return Err(Error::argument(format!(
                    "the declarations of `{k}` name its parameters differently: caijit cannot tell which instance to deduce; give each parameter one name in every declaration"
                )));
            }
            return Ok((chosen, bound));
        }
        let (program, name) = self.instance_for(&[])?;
        let compiled = self.compile(&program, arch)?;
        if !self.declared().overloaded {
            let (bound, _) = bind(&names_of(compiled.kernel(&name)?))?;
            return Ok((Selection { program, name, compiled }, bound));
        }
        // As a launch does: the overload whose parameters admit the bound arguments.
        let candidates = compiled.kernels_named(&name)?;
        let mut fits: Vec<(&KernelInfo, B)> = Vec::new();
        for c in &candidates {
            if let Ok((b, types)) = bind(&names_of(c)) {
                if admits(c, &types) {
                    fits.push((c, b));
                }
            }
        }
        if fits.len() != 1 {
            return Err(Error::argument(if fits.is_empty() {
                format!("no overload of `{k}` takes these {}; it has: {}", what(), overload_list(candidates.iter().copied()))
            } else {
                format!(
                    "the {} fit several overloads of `{k}` ({}); pass typed scalars (e.g. numpy.float32) or name one with an overload cast",
                    what(),
                    overload_list(fits.iter().map(|(k, _)| *k))
                )
            }));
        }
        let (chosen, bound) = fits.remove(0);
        let name = chosen.lowered_name.clone();
        Ok((Selection { program, name, compiled: compiled.clone() }, bound))
    }

    /// The argument types that select the instance for `args`: none unless the kernel is
    /// selected by them.
    #[inline]
    fn types(&self, args: &[Arg<'_>]) -> SmallVec<[ArgType; 8]> {
        if self.by_types {
            args.iter().map(Arg::arg_type).collect()
        } else {
            SmallVec::new()
        }
    }

    /// The instance for `device` and `args` when it was resolved before: the launch path's
    /// lookup (no compilation, no driver call; no lock for a kernel not selected by its
    /// argument types).
    #[inline]
    pub fn cached(&self, device: usize, args: &[Arg<'_>]) -> Option<Arc<Kernel>> {
        if let Some((_, k)) = self.first.get().filter(|(d, _)| !self.by_types && *d == device) {
            return Some(k.clone());
        }
        lock(&self.instances).get(&(device, Selector::Types(self.types(args)))).cloned()
    }

    /// The compiled, loaded kernel for `device` and the types of `args` (read only for a
    /// deduced template or an overload set): from the cache, else compiled (memory cache,
    /// disk cache, NVRTC) and loaded, once per argument-type signature.
    pub fn resolve(&self, device: usize, args: &[Arg<'_>]) -> Result<Arc<Kernel>> {
        if let Some(k) = self.cached(device, args) {
            return Ok(k);
        }
        let types = self.types(args);
        let ctx = Context::new(device)?;
        let chosen = self.select(ctx.arch(), &types)?;
        let k = ctx.load_compiled(&chosen.program, chosen.compiled)?.kernel(&chosen.name)?;
        lock(&self.instances).insert((device, Selector::Types(types)), k.clone());
        if !self.by_types {
            let _ = self.first.set((device, k.clone()));
        }
        Ok(k)
    }

    /// Check `args` as a launch checks them (their count, and each against its parameter:
    /// dtype, constness, contiguity, alignment, scalar range) against the instance they
    /// select, compiled for the inspection architecture: no GPU is needed. A launch on a
    /// machine without one reports through this the argument error it would have raised.
    pub fn check_args(&self, args: &[Arg<'_>]) -> Result<()> {
        let chosen = self.select(inspection_arch()?, &self.types(args))?;
        let info = chosen.info()?;
        let alignment: Vec<usize> = info.params.iter().map(crate::kernel::pointee_alignment).collect();
        crate::kernel::check_args(info, &alignment, args)
    }

    /// Launch with `cfg` on `args`: the instance the arguments select (compiled on first
    /// use), on the device of the first non-empty array (else the stream's, else 0), on
    /// `stream` or the stream the protocol picks ([`Kernel::launch`]). Returns the stream
    /// launched on (its CAI value).
    pub fn launch(&self, cfg: &LaunchConfig, args: &[Arg<'_>], stream: Option<&Stream>) -> Result<u64> {
        let mut args: SmallVec<[Arg<'_>; 8]> = SmallVec::from_slice(args);
        let k = self.resolve(launch_device(&mut args, stream)?, &args)?;
        k.launch(cfg, &args, stream, true)
    }

    /// Launch over `n` elements with the occupancy-maximising block size ([`Kernel::forall`]).
    pub fn forall(&self, n: usize, args: &[Arg<'_>], stream: Option<&Stream>) -> Result<u64> {
        let mut args: SmallVec<[Arg<'_>; 8]> = SmallVec::from_slice(args);
        let k = self.resolve(launch_device(&mut args, stream)?, &args)?;
        k.forall(n, &args, stream, true)
    }

    /// An error unless this name has one instance per device (what attributes and
    /// parameter lists are read from): a deduced template or an overload set has several.
    /// For an overload set, the message lists the overload casts that name each one (by
    /// compiling the program for the inspection architecture).
    pub fn check_single_instance(&self) -> Result<()> {
        if self.declared().overloaded {
            let compiled = compile::compile(&self.program_for([]), inspection_arch()?)?;
            let casts: Vec<String> = compiled.kernels_named(&self.name)?.into_iter().map(|k| format!("\"{}\"", overload_cast(k))).collect();
            return Err(Error::argument(format!(
                "`{}` is overloaded: the launch's arguments pick one, or name one with an overload cast: {}",
                self.name,
                casts.join(", ")
            )));
        }
        if self.is_deduced_template() {
            return Err(Error::argument(format!(
                "`{}` is a template: its attributes exist per instance; use .specialize(\"{}<...>\")",
                self.name, self.name
            )));
        }
        Ok(())
    }

    /// Compile this kernel for `arch` with every instance launched so far (a deduced
    /// template's, and the explicit instances asked for), and say where the compilation
    /// came from. Its kernels are this one's where [`Dispatcher::is_mine`] says so.
    pub fn compile_launched(&self, arch: Arch) -> Result<(Arc<Compiled>, CacheSource)> {
        let selectors: Vec<Selector> = lock(&self.instances).keys().map(|(_, s)| s.clone()).collect();
        let mut launched = Vec::new();
        for s in &selectors {
            match s {
                Selector::Types(t) if self.is_deduced_template() => launched.push(self.instance_for(t)?.1),
                Selector::Types(_) => {}
                Selector::Explicit(a) => launched.push(template_instance(&self.name, a)),
            }
        }
        launched.sort();
        launched.dedup();
        let (compiled, source) = compile::compile_reporting(&self.program_for(launched), arch, &CompileOptions::default())
            .map_err(|e| self.unknown_name(e, arch))?;
        if !self.declared().namespaces.is_empty() {
            // A plain name declared in several namespaces: an error unless one is compiled.
            compiled.kernels_named(&self.name)?;
        }
        Ok((compiled, source))
    }

    /// This kernel's program, with its name expression when it has one, and `exprs`.
    fn program_for(&self, exprs: impl IntoIterator<Item = String>) -> Program {
        let own = self.needs_name_expression().then(|| self.name.clone());
        with_name_expressions(self.program.clone(), own.into_iter().chain(exprs))
    }

    /// Whether a kernel of the compiled program is this kernel (or, for a deduced
    /// template, one of its instances).
    pub fn is_mine(&self, k: &KernelInfo) -> bool {
        if self.name.contains(['<', '(']) {
            k.name_expression.as_deref() == Some(self.name.as_str())
        } else {
            let plain = self.name.strip_prefix("::").unwrap_or(&self.name);
            k.qualified_name == plain || k.base_name() == self.name || k.lowered_name == self.name
        }
    }
}

/// `program` with name expressions `exprs`, and the headers their types need
/// (`axpy<__half>`: `cuda_fp16.h`), in [`headers_for`]'s order: the one way every path
/// (a launch, deduced or named, `compile()`, the CLI, a bake's `--instance`) makes an
/// instance's program, so that one request is one program.
pub fn with_name_expressions(mut program: Program, exprs: impl IntoIterator<Item = String>) -> Program {
    let mut all = String::new();
    for e in exprs {
        all.push_str(&e);
        all.push(' ');
        program = program.name_expression(e);
    }
    program.including(&headers_for(&all))
}

/// The programs that make the instances `instances` (name expressions as caijit spells a
/// deduced instance: `axpy<float>`, `k<float, 4>`) of `program`: each exactly what a launch
/// of that instance, named or deduced, compiles (with the headers its types need). A
/// bundle baked from them serves those launches.
pub fn instance_programs(program: &Program, instances: &[String]) -> Result<Vec<Program>> {
    let one = |e: &String| -> Result<Program> {
        let d = Dispatcher::new(program.clone(), Some(e))?;
        if d.is_deduced_template() || d.is_overloaded() {
            let what = if d.is_overloaded() { "an overload set" } else { "a template" };
            return Err(Error::argument(format!(
                "the instance {e:?} names {what}, not one kernel: name it exactly (`axpy<float>`, or an overload cast `(void(*)(float*, int))k`)"
            )));
        }
        Ok(d.instance_for(&[])?.0)
    };
    instances.iter().map(one).collect()
}
