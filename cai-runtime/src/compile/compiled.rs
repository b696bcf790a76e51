//! What a compilation produced: the image for the loader ([`Image`]) and every kernel's
//! parameter layout ([`Compiled`]), found by name expression, lowered, qualified or plain
//! name.

use super::program::Arch;
use crate::error::{Error, Result};
use crate::signature::{self, ParamLayout};

/// What a compilation produced for the loader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Image {
    Cubin(Vec<u8>),
    /// PTX, when NVRTC does not know the device's architecture (the driver JIT-compiles it).
    Ptx(String),
}

impl Image {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Image::Cubin(b) => b,
            Image::Ptx(s) => s.as_bytes(),
        }
    }
}

/// Where a compilation's result came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheSource {
    Compiled,
    Memory,
    Disk,
    /// A loaded kernel bundle ([`crate::bundle`]).
    Bundle,
}

/// One kernel of a compiled program.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelInfo {
    /// The name expression it was instantiated by (`axpy<float>`), if any.
    pub name_expression: Option<String>,
    /// The symbol in the binary (`_Z4axpyIfEvT_PKS0_PS0_i`, or `scale` for `extern "C"`).
    pub lowered_name: String,
    /// The demangled signature of a C++ kernel.
    pub demangled: Option<String>,
    /// The name with its namespaces, without template arguments (`ns::axpy`).
    pub qualified_name: String,
    pub params: Vec<ParamLayout>,
}

impl KernelInfo {
    /// The name without template arguments or namespaces (`axpy`).
    pub fn base_name(&self) -> &str {
        self.qualified_name.rsplit("::").next().unwrap_or(&self.qualified_name)
    }

    /// The name messages give it: demangled where it could be, else the lowered name.
    pub fn display_name(&self) -> &str {
        self.demangled.as_deref().unwrap_or(&self.lowered_name)
    }

    /// Bytes of the parameter buffer.
    pub fn param_buffer_size(&self) -> usize {
        self.params.last().map_or(0, |p| p.offset + p.size)
    }
}

/// A kernel of a compiled program that caijit cannot launch, and why: the other kernels of
/// its program are not concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnusableKernel {
    pub name_expression: Option<String>,
    pub lowered_name: String,
    /// The demangled signature, where it could be demangled.
    pub demangled: Option<String>,
    /// The name with its namespaces (read off the mangled name where it could not be
    /// demangled; the lowered name where neither could be read).
    pub qualified_name: String,
    pub reason: signature::SignatureError,
}

impl UnusableKernel {
    fn base_name(&self) -> &str {
        self.qualified_name.rsplit("::").next().unwrap_or(&self.qualified_name)
    }

    /// The error naming it raises: an argument error carrying the parameter at fault, when
    /// one is.
    pub fn error(&self) -> Error {
        match &self.reason {
            signature::SignatureError::Param { .. } => Error::from(self.reason.clone()),
            r => Error::argument(format!("kernel `{}` cannot be launched: {r}", self.demangled.as_deref().unwrap_or(&self.qualified_name))),
        }
    }
}

/// A compiled program: its image and every kernel's parameter layout.
#[derive(Debug)]
#[non_exhaustive]
pub struct Compiled {
    /// The cache key (for an untrusted result, hashed with its binary too). A key with a
    /// `/` is a program served by another's binary (a bundled program of its family): the
    /// part before the `/` names the binary, which is loaded once for all of them.
    pub key: String,
    pub arch: Arch,
    pub image: Image,
    pub ptx: String,
    /// NVRTC's log (warnings), verbatim.
    pub log: String,
    pub kernels: Vec<KernelInfo>,
    /// What caijit could not learn (a declaration the tokenizer could not read, an
    /// `extern "C"` kernel whose types the compiler was not asked for, a kernel in
    /// `unusable` and why): kernels it concerns are left out of `kernels`.
    pub notes: Vec<String>,
    /// Kernels NVRTC compiled whose parameters caijit cannot read or lay out (a type it
    /// cannot pass, a name it cannot demangle): naming one is an error that says why.
    pub unusable: Vec<UnusableKernel>,
    pub source: CacheSource,
    /// Why NVRTC compiled this with its own search path (`None`: trusted, every header in
    /// memory and no search path). An untrusted result is never stored on disk nor kept
    /// in memory.
    pub untrusted: Option<String>,
    /// The options NVRTC was given (after caijit's defaults; for a disk hit, those it would
    /// be given).
    pub nvrtc_options: Vec<String>,
    /// Name expressions NVRTC was given that lower to a kernel known by another spelling
    /// (`k< float >` beside `k<float>`, when a bundle merged both into one program), with
    /// that kernel's lowered name: each finds the kernel as its own spelling does.
    pub aliases: Vec<(String, String)>,
}

/// The `(name expression, lowered name)` pairs of `lowered` (every name expression NVRTC
/// was given, with its lowered name) whose expression names no kernel of `kernels` or
/// `unusable` but whose lowered name is one's: what [`Compiled::aliases`] holds.
pub(crate) fn aliases(lowered: &[(String, String)], kernels: &[KernelInfo], unusable: &[UnusableKernel]) -> Vec<(String, String)> {
    let exprs =
        kernels.iter().map(|k| (&k.name_expression, &k.lowered_name)).chain(unusable.iter().map(|k| (&k.name_expression, &k.lowered_name)));
    let (named, symbols): (Vec<_>, Vec<_>) = exprs.unzip();
    lowered.iter().filter(|(e, l)| !named.iter().any(|n| n.as_deref() == Some(e.as_str())) && symbols.contains(&l)).cloned().collect()
}

impl Compiled {
    /// Find a kernel by name expression, lowered name, qualified name or plain name.
    pub fn kernel(&self, name: &str) -> Result<&KernelInfo> {
        match self.kernels_named(name)?.as_slice() {
            [one] => Ok(one),
            [] => {
                let known: Vec<_> = self.kernels.iter().map(|k| k.name_expression.clone().unwrap_or(k.qualified_name.clone())).collect();
                let mut message = format!("no kernel named {name:?} in the program (it has: {})", known.join(", "));
                for n in &self.notes {
                    message.push_str(&format!("\nnote: {n}"));
                }
                Err(Error::argument(message))
            }
            many => {
                let names: Vec<_> = many.iter().map(|k| k.display_name()).collect();
                Err(Error::argument(format!("kernel name {name:?} is ambiguous: {}", names.join(", "))))
            }
        }
    }

    /// Every kernel `name` may mean, by the first rule that finds any: name expression,
    /// lowered name, qualified name, plain name. Several kernels of one qualified name are
    /// an overload set; a plain name that finds kernels of several qualified names
    /// (`a::k`, `b::k`) is an error naming them.
    pub fn kernels_named(&self, name: &str) -> Result<Vec<&KernelInfo>> {
        let by = |f: &dyn Fn(&KernelInfo) -> bool| self.kernels.iter().filter(|k| f(k)).collect::<Vec<_>>();
        let name = name.trim();
        let plain = name.strip_prefix("::").unwrap_or(name);
        // A rule that finds only unusable kernels answers with why they are; they count
        // among the namespaces a plain name may mean.
        let unusable = |f: &dyn Fn(&UnusableKernel) -> bool| self.unusable.iter().filter(|k| f(k)).collect::<Vec<_>>();
        // A name expression, or another spelling of one ([`Compiled::aliases`]).
        let alias = self.aliases.iter().find(|(e, _)| e == name).map(|(_, l)| l.as_str());
        let expressed = |e: &Option<String>, l: &str| e.as_deref() == Some(name) || alias == Some(l);
        for (found, bad) in [
            (by(&|k| expressed(&k.name_expression, &k.lowered_name)), unusable(&|k| expressed(&k.name_expression, &k.lowered_name))),
            (by(&|k| k.lowered_name == name), unusable(&|k| k.lowered_name == name)),
            (by(&|k| k.qualified_name == plain), unusable(&|k| k.qualified_name == plain)),
            (by(&|k| k.base_name() == name), unusable(&|k| k.base_name() == name)),
        ] {
            let mut qualified: Vec<&str> =
                found.iter().map(|k| k.qualified_name.as_str()).chain(bad.iter().map(|k| k.qualified_name.as_str())).collect();
            qualified.sort_unstable();
            qualified.dedup();
            let exact = |e: &Option<String>, l: &str| e.as_deref() == Some(name) || l == name;
            if qualified.len() > 1
                && found.iter().all(|k| !exact(&k.name_expression, &k.lowered_name))
                && bad.iter().all(|k| !exact(&k.name_expression, &k.lowered_name))
            {
                return Err(ambiguous(name, &qualified));
            }
            if !found.is_empty() {
                return Ok(found);
            }
            if let Some(k) = bad.first() {
                return Err(k.error());
            }
        }
        Ok(Vec::new())
    }
}

/// The error for a plain name that means kernels of several namespaces.
pub fn ambiguous(name: &str, qualified: &[impl AsRef<str>]) -> Error {
    let all: Vec<&str> = qualified.iter().map(AsRef::as_ref).collect();
    Error::argument(format!("kernel name `{name}` is ambiguous: {}; name one of them", all.join(", ")))
}
