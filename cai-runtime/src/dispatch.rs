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

use crate::cai::DType;
use crate::compile::{self, Arch, CacheSource, CompileOptions, Compiled, KernelInfo, Program};
use crate::error::{Error, Result};
use crate::kernel::{inspection_arch, Kernel};
use crate::launch::{Arg, LaunchConfig};
use crate::runtime::{Context, Stream};
use crate::signature::{deduce, headers_for, ArgType, KernelDecl, SignatureError};
use crate::sync::lock;

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

/// A template argument of an explicit instance ([`Dispatcher::instance`]): a type, as a
/// dtype's C++ type (`float`, `__half`, `caijit::complex<double>`), or an integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TemplateArg {
    Type(DType),
    Int(i64),
}

impl std::fmt::Display for TemplateArg {
    /// As the name expression spells it: [`DType::cpp_name`], or the number.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TemplateArg::Type(d) => f.write_str(d.cpp_name()),
            // The literal 9223372036854775808 does not fit a `long long`: its negation is
            // no constant NVRTC can match to an integer parameter.
            TemplateArg::Int(i64::MIN) => f.write_str("(-9223372036854775807LL - 1)"),
            TemplateArg::Int(n) => write!(f, "{n}"),
        }
    }
}

impl From<DType> for TemplateArg {
    fn from(d: DType) -> Self {
        TemplateArg::Type(d)
    }
}

impl From<i64> for TemplateArg {
    fn from(n: i64) -> Self {
        TemplateArg::Int(n)
    }
}

/// The name expression of the instance `name<args>` (`axpy<float>`, `k<__half, 4>`): how
/// [`Dispatcher::instance`] names it, and what a bundle of such instances is baked with.
pub fn template_instance(name: &str, args: &[TemplateArg]) -> String {
    let list: Vec<String> = args.iter().map(TemplateArg::to_string).collect();
    crate::signature::instance_expression(name, &list)
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
        crate::params::check_count(|| info.base_name(), info.params.len(), args.len())?;
        let vector: Vec<usize> = info.params.iter().map(crate::kernel::pointee_alignment).collect();
        crate::params::marshal(&info.params, &vector, args, &mut crate::params::ParamBuffer::new(info.param_buffer_size()))
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

/// Which device a launch on `args` runs on: the device of its first non-empty array, else
/// the stream's, else 0 (without asking the driver when there is one device). The one rule
/// every launch follows (Rust's and Python's launches, the ops). An array whose device had
/// to be asked of the driver becomes [`Arg::ArrayOn`], so the launch does not ask again.
pub fn launch_device(args: &mut [Arg<'_>], stream: Option<&Stream>) -> Result<usize> {
    if crate::runtime::device_count()? <= 1 {
        return Ok(0);
    }
    for a in args.iter_mut() {
        let device = match *a {
            Arg::ArrayOn(v, d) if !v.is_empty() => Some(d),
            Arg::Array(v) if !v.is_empty() => {
                let asked = crate::runtime::pointer_device(v.ptr())?;
                if let Some(d) = asked {
                    *a = Arg::ArrayOn(v, d);
                }
                asked
            }
            _ => None,
        };
        if let Some(d) = device {
            return Ok(d);
        }
    }
    match stream {
        Some(s) => Ok(s.device_from_driver()?.unwrap_or(0)),
        None => Ok(0),
    }
}

/// The overload cast that names this overload: `(void(*)(float*, int))ns::k`.
pub fn overload_cast(k: &KernelInfo) -> String {
    let types: Vec<&str> = k.params.iter().map(|p| p.cpp_type.as_str()).collect();
    format!("(void(*)({})){}", types.join(", "), k.qualified_name)
}

/// The lowered name of the one overload whose parameters admit the launch's argument types.
pub fn pick_overload(candidates: Vec<&KernelInfo>, types: &[ArgType]) -> Result<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A timing harness, not a test: the first call's lookup of `caijit.ops.add`'s float32
    /// instance in a bundle, as a first call takes it (open the registered bundle, make the
    /// dispatcher, select the instance; `compile::bundled`'s harness of the same name times
    /// each step alone). In a fresh process each time, release build:
    ///
    /// ```sh
    /// CAIJIT_PHASES_BUNDLE=/tmp/ops90.caijit \
    ///     target/release/deps/cai_runtime-… --ignored --exact dispatch::tests::first_lookup_phases --nocapture
    /// ```
    ///
    /// Prints `phase<TAB>microseconds` lines.
    #[test]
    #[ignore = "a timing harness: CAIJIT_PHASES_BUNDLE names a kernel library bundle with sm_90"]
    fn first_lookup_phases() {
        use std::time::Instant;

        use crate::compile::{CacheSource, OPS};

        let Some(path) = std::env::var_os("CAIJIT_PHASES_BUNDLE") else { return };
        let source = OPS.iter().find(|(n, _)| *n == "elementwise").unwrap().1;
        let mut phases = Vec::new();
        let mut t = Instant::now();
        let mut lap = |name: &'static str, t: &mut Instant| {
            phases.push((name, t.elapsed()));
            *t = Instant::now();
        };
        crate::bundle::add_default(&path);
        lap("register the bundle", &mut t);
        crate::bundle::loaded().unwrap();
        lap("open the bundle (header, TOC, metadata, lookup table)", &mut t);
        let d = Dispatcher::new(Program::new(source).name("elementwise.cu"), Some("binary_contiguous")).unwrap();
        lap("Dispatcher::new (declarations of the source)", &mut t);
        let s = d.select_instance(Arch(90), &[TemplateArg::Type(DType::F32)]).unwrap();
        lap("select_instance (key, find, sections, layouts)", &mut t);
        assert_eq!((s.compiled.source, s.info().unwrap().params.len()), (CacheSource::Bundle, 5));
        for (name, d) in &phases {
            println!("{name}\t{}", d.as_micros());
        }
    }

    #[test]
    fn instances_to_bake_are_named_exactly() {
        let p = Program::new("template <typename T> __global__ void axpy(T a, const T* x, T* y, long long n) {}");
        let e = instance_programs(&p, &["axpy".to_string()]).unwrap_err().to_string();
        assert!(e.contains("names a template") && e.contains("axpy<float>"), "{e}");
        let made = instance_programs(&p, &["axpy<float>".to_string()]).unwrap();
        assert_eq!(made[0].name_expressions, ["axpy<float>"]);
    }

    #[test]
    fn names_resolve_to_declarations_overloads_and_namespaces() {
        let d = Dispatcher::new(Program::new("template <typename T> __global__ void axpy(T a, const T* x, T* y, int n) {}"), None).unwrap();
        assert_eq!(d.name(), "axpy");
        assert!(d.is_deduced_template() && d.by_argument_types() && !d.is_overloaded());
        let f32a = ArgType::Array { dtype: DType::F32, rank: 1 };
        let (p, e) = d.instance_for(&[ArgType::UntypedScalar, f32a, f32a, ArgType::UntypedScalar]).unwrap();
        assert_eq!((e.as_str(), p.name_expressions.as_slice()), ("axpy<float>", ["axpy<float>".to_string()].as_slice()));
        let s = d.specialize("double").unwrap();
        assert_eq!(s.name(), "axpy<double>");
        assert!(!s.is_deduced_template() && !s.by_argument_types());
        assert_eq!(s.instance_for(&[]).unwrap().1, "axpy<double>");

        let ov = Dispatcher::new(Program::new("__global__ void k(float* x) {}\n__global__ void k(double* x) {}"), Some("k")).unwrap();
        assert!(ov.is_overloaded() && ov.by_argument_types());
        assert!(ov.instance_for(&[]).unwrap().0.name_expressions.is_empty(), "overloads are found among the compiled kernels");

        let ns = "namespace a { __global__ void k(int n) {} }\nnamespace b { __global__ void k(int n) {} }";
        let amb = Dispatcher::new(Program::new(ns), Some("k")).unwrap();
        assert!(!amb.is_overloaded() && amb.instance_for(&[]).unwrap().0.name_expressions.is_empty());
        let qualified = Dispatcher::new(Program::new(ns), Some("a::k")).unwrap();
        assert_eq!(qualified.instance_for(&[]).unwrap().0.name_expressions, ["a::k"]);

        let two = Program::new("__global__ void f(int n) {}\n__global__ void g(int n) {}");
        assert!(Dispatcher::new(two, None).unwrap_err().to_string().contains("declares 2 kernels (f, g)"));
        assert!(Dispatcher::new(Program::new("__global__ void f() {}"), Some("  ")).is_err());
    }

    #[test]
    fn explicit_instances_are_the_program_with_one_name_expression() {
        use TemplateArg::{Int, Type};
        assert_eq!(template_instance("k", &[Type(DType::C64), Int(-4), Type(DType::U8)]), "k<caijit::complex<float>, -4, unsigned char>");
        let src = "template <typename T, int N> __global__ void k(T* x) {}";
        let d = Dispatcher::new(Program::new(src).name("k.cu"), None).unwrap();
        let (p, name) = d.explicit_instance_for(&[Type(DType::F16), Int(8)]).unwrap();
        assert_eq!(name, "k<__half, 8>");
        // The program `specialize` compiles (a deduced instance too): with the header of
        // `__half`, so that a bundle baked for the instance serves each way of asking.
        assert_eq!(p, Program::new(src).name("k.cu").including(&["cuda_fp16.h"]).name_expression("k<__half, 8>"));
        assert_eq!(p, d.specialize("__half, 8").unwrap().instance_for(&[]).unwrap().0);
        assert_eq!(
            d.explicit_instance_for(&[Type(DType::F32), Int(8)]).unwrap().0,
            Program::new(src).name("k.cu").name_expression("k<float, 8>")
        );
        // i64::MIN has no literal: written as NVRTC reads a `long long` constant.
        assert_eq!(template_instance("k", &[Int(i64::MIN)]), "k<(-9223372036854775807LL - 1)>");
        // Only a template's plain name has explicit instances.
        let e = |d: &Dispatcher, args: &[TemplateArg]| d.explicit_instance_for(args).unwrap_err().to_string();
        assert!(e(&d, &[]).contains("`k` needs template arguments"), "{}", e(&d, &[]));
        let one = d.specialize("float, 2").unwrap();
        assert!(e(&one, &[Type(DType::F32)]).contains("`k<float, 2>` names one instance already"), "{}", e(&one, &[Type(DType::F32)]));
        let plain = Dispatcher::new(Program::new("__global__ void f(int n) {}"), None).unwrap();
        assert!(e(&plain, &[Int(1)]).contains("`f` is not a template: no instance `f<1>`"), "{}", e(&plain, &[Int(1)]));
        let ov = Dispatcher::new(Program::new("__global__ void g(float* x) {}\n__global__ void g(double* x) {}"), None).unwrap();
        assert!(e(&ov, &[Int(1)]).contains("overload set"), "{}", e(&ov, &[Int(1)]));
        // A name the tokenizer does not find (made by a macro): NVRTC decides.
        let made = Dispatcher::new(Program::new("#define K template <class T> __global__ void m(T* x) {}\nK"), Some("m")).unwrap();
        assert_eq!(made.explicit_instance_for(&[Type(DType::F32)]).unwrap().1, "m<float>");
    }

    /// One request is one program, however it is made: named (`caijit.kernel(src,
    /// "k<__half>")`), deduced from argument types (a launch), by template arguments
    /// (`Dispatcher::instance`), by `specialize`, with name expressions (`compile()`, the
    /// CLI's `--instantiate`) and by `bundle build --instance`; so one bundle key.
    #[test]
    fn every_way_of_asking_for_an_instance_makes_one_program() {
        use TemplateArg::{Int, Type};
        let arr = |dtype| ArgType::Array { dtype, rank: 1 };
        let both = "template <typename A, typename B> __global__ void k(const A* a, B* b) {}";
        // (source, the plain name, the instance, argument types that deduce it, its template arguments)
        type Row<'a> = (&'a str, &'a str, &'a str, Vec<ArgType>, Vec<TemplateArg>);
        let table: Vec<Row> = vec![
            ("template <typename T> __global__ void k(T* x) {}", "k", "k<float>", vec![arr(DType::F32)], vec![Type(DType::F32)]),
            ("template <typename T> __global__ void k(T* x) {}", "k", "k<__half>", vec![arr(DType::F16)], vec![Type(DType::F16)]),
            (both, "k", "k<__half, __nv_bfloat16>", vec![arr(DType::F16), arr(DType::BF16)], vec![Type(DType::F16), Type(DType::BF16)]),
            (both, "k", "k<__nv_bfloat16, __half>", vec![arr(DType::BF16), arr(DType::F16)], vec![Type(DType::BF16), Type(DType::F16)]),
            // A default template argument is left to the compiler however it is asked for.
            (
                "template <typename T, int N = 4> __global__ void k(T* x) {}",
                "k",
                "k<caijit::complex<double> >",
                vec![arr(DType::C128)],
                vec![Type(DType::C128)],
            ),
            (
                "template <typename T, int N> __global__ void k(T* x) {}",
                "k",
                "k<unsigned char, -3>",
                vec![],
                vec![Type(DType::U8), Int(-3)],
            ),
            ("__global__ void k(int* x) {}\ntemplate <typename T> __global__ void k(T* x) {}", "k", "k<double>", vec![], vec![]),
        ];
        for (src, name, expr, types, targs) in table {
            let program = Program::new(src).name("k.cu");
            let named = Dispatcher::new(program.clone(), Some(expr)).unwrap().instance_for(&[]).unwrap().0;
            let mut made = vec![
                ("with name expressions", with_name_expressions(program.clone(), [expr.to_string()])),
                ("bundle build --instance", instance_programs(&program, &[expr.to_string()]).unwrap().remove(0)),
            ];
            let plain = Dispatcher::new(program.clone(), Some(name)).unwrap();
            if !targs.is_empty() {
                made.push(("by template arguments", plain.explicit_instance_for(&targs).unwrap().0));
            }
            if !types.is_empty() {
                made.push(("deduced", plain.instance_for(&types).unwrap().0));
            }
            if plain.is_deduced_template() {
                let args = expr.split_once('<').unwrap().1.strip_suffix('>').unwrap();
                made.push(("specialize", plain.specialize(args).unwrap().instance_for(&[]).unwrap().0));
            }
            let key = crate::compile::bundle_key(&named).unwrap().unwrap();
            for (how, p) in made {
                assert_eq!(p, named, "{expr} {how}");
                assert_eq!(crate::compile::bundle_key(&p).unwrap().unwrap(), key, "{expr} {how}");
            }
        }
    }

    #[test]
    fn argument_errors_get_the_index_and_the_declared_parameter() {
        let d = Dispatcher::new(Program::new("template <typename T> __global__ void k(int n, const T* x) {}"), None).unwrap();
        let Error::Argument(a) = d.name_argument(1, Error::argument("argument 1: a numpy.ndarray is host memory")) else { panic!() };
        assert_eq!((a.index, a.name.as_deref(), a.ctype.as_deref()), (Some(1), Some("x"), Some("const T*")));
        assert_eq!(a.message, "argument 1: a numpy.ndarray is host memory");
        // What an error already says is kept.
        let Error::Argument(a) = d.name_argument(0, Error::argument_at(0, Some("m"), "long", "too big")) else { panic!() };
        assert_eq!((a.index, a.name.as_deref(), a.ctype.as_deref()), (Some(0), Some("m"), Some("long")));
        // Without a declaration, the index alone.
        let macro_made = Dispatcher::new(Program::new("#define K(n) __global__ void n(int x) {}\nK(k)"), Some("k")).unwrap();
        // A deduction conflict names the argument that disagrees.
        let t = Dispatcher::new(Program::new("template <typename T> __global__ void t(T a, const T* x) {}"), None).unwrap();
        let f64a = ArgType::Array { dtype: DType::F64, rank: 1 };
        let Err(Error::Argument(a)) = t.instance_for(&[ArgType::TypedScalar(DType::F32), f64a]) else { panic!() };
        assert_eq!((a.index, a.name.as_deref(), a.ctype.as_deref()), (Some(1), Some("x"), Some("const T*")), "{}", a.message);
        let Error::Argument(a) = macro_made.name_argument(3, Error::argument("bad")) else { panic!() };
        assert_eq!((a.index, a.name, a.ctype), (Some(3), None, None));
        assert!(matches!(d.name_argument(0, Error::launch("x")), Error::Launch(_)));
        // A malformed interface, too: it names the argument, and stays an interface error.
        let Error::InterfaceAt(a) = d.name_argument(1, Error::Interface(crate::cai::InterfaceError::StreamZero)) else { panic!() };
        assert_eq!((a.index, a.name.as_deref(), a.ctype.as_deref()), (1, Some("x"), Some("const T*")));
        assert_eq!((d.parameter(0), d.parameter(2)), ((Some("n"), Some("int".to_string())), (None, None)));
    }

    #[test]
    fn expressions_bring_the_headers_their_types_need() {
        let p = with_name_expressions(Program::new("__global__ void k() {}"), ["k<__half>".to_string(), "k<float>".to_string()]);
        assert_eq!(p.name_expressions, ["k<__half>", "k<float>"]);
        assert!(p.source.starts_with("#include <cuda_fp16.h>\n#line 1\n"), "{}", p.source);
    }

    fn chosen_program(d: &Dispatcher, array: ArgType) -> Program {
        d.instance_for(&[ArgType::UntypedScalar, array, array, ArgType::UntypedScalar]).unwrap().0
    }

    /// A bundle made here, by hand, as `bake` writes one (fake CUBIN bytes: nothing is
    /// loaded on a device): the bundled instances of a template are deduced, found by the
    /// bundle key and laid out from the bundle's `.entry` declarations, with no NVRTC (the
    /// build without the `nvrtc` feature runs this too).
    #[test]
    fn a_template_is_deduced_and_laid_out_from_a_bundle_without_nvrtc() {
        use crate::bundle::{self, Bundle, ProgramBlobs};
        use crate::compile::{bundle_key, family_key, CacheSource};
        use serde_json::json;
        let src = "// dispatched from a bundle\ntemplate <typename T> __global__ void axpy(T a, const T* x, T* y, long long n) {}";
        let program = Program::new(src).name("axpy_bundled.cu");
        let exprs = ["axpy<float>", "axpy<double>"];
        let lowered = ["_Z4axpyIfEvT_PKS0_PS0_x", "_Z4axpyIdEvT_PKS0_PS0_x"];
        let whole = exprs.iter().fold(program.clone(), |p, e| p.name_expression(*e));
        let entries: String = lowered
            .iter()
            .zip([".f32", ".f64"])
            .map(|(l, a)| format!(".entry {l}(\n.param {a} {l}_param_0,\n.param .u64 {l}_param_1,\n.param .u64 {l}_param_2,\n.param .u64 {l}_param_3\n)\n"))
            .collect();
        let blobs = ProgramBlobs {
            description: json!({
                "key": bundle_key(&whole).unwrap().unwrap(), "family": family_key(&whole).unwrap().unwrap(),
                "name": "axpy_bundled.cu", "source_sha256": "", "options": [], "defines": [], "name_expressions": exprs,
                "nvrtc_options": [], "lowered": exprs.iter().zip(lowered).map(|(e, l)| json!([e, l])).collect::<Vec<_>>(), "kernels": [],
            }),
            entries,
            cubins: vec![(90, b"\x7fELF, not really".to_vec())],
            ptx: None,
        };
        bundle::install(Bundle::from_vec(bundle::write("13.0", "none", &[90], vec![blobs]), "by-hand.caijit").unwrap()).unwrap();

        let axpy = Dispatcher::new(program, Some("axpy")).unwrap();
        let f64s = ArgType::Array { dtype: DType::F64, rank: 1 };
        let chosen = axpy.select(Arch(90), &[ArgType::UntypedScalar, f64s, f64s, ArgType::UntypedScalar]).unwrap();
        assert_eq!((chosen.name.as_str(), chosen.compiled.source), ("axpy<double>", CacheSource::Bundle));
        let params: Vec<(&str, usize, usize)> =
            chosen.info().unwrap().params.iter().map(|p| (p.cpp_type.as_str(), p.offset, p.size)).collect();
        assert_eq!(params, [("double", 0, 8), ("const double*", 8, 8), ("double*", 16, 8), ("long long", 24, 8)]);
        let f32s = ArgType::Array { dtype: DType::F32, rank: 1 };
        let chosen = axpy.select(Arch(90), &[ArgType::TypedScalar(DType::F32), f32s, f32s, ArgType::UntypedScalar]).unwrap();
        assert_eq!(chosen.info().unwrap().params[0].cpp_type, "float");
        // What `bundle build --instance` bakes is what these launches look up.
        let baked = instance_programs(axpy.program(), &["axpy<double>".to_string()]).unwrap();
        assert_eq!(baked, [chosen_program(&axpy, f64s)]);
        // No code for sm_80 and, without NVRTC, nothing to compile it with: an error, not a guess.
        if crate::compile::toolkit().is_err() {
            let e = axpy.select(Arch(80), &[ArgType::UntypedScalar, f64s, f64s, ArgType::UntypedScalar]).unwrap_err().to_string();
            assert!(e.contains("no code for this device's architecture sm_80"), "{e}");
        }
    }
}
