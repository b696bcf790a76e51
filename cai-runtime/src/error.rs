//! The runtime's one error type. Each variant carries data, not only text (the driver's
//! `CUresult`, NVRTC's result and log, the argument's index, name and C++ type, the cache
//! path and its I/O error), and maps to one Python exception class, whose attributes carry
//! the same data.

use std::path::PathBuf;

use thiserror::Error;

pub use crate::cai::InterfaceError;
pub use crate::sys::{DriverError, NvrtcError};

/// Every way a caijit call can fail.
///
/// | variant | Python class | attributes |
/// | --- | --- | --- |
/// | [`Error::Interface`] | `caijit.InterfaceError` (also `ValueError`) | (`index`, `argument`, `ctype` are `None`) |
/// | [`Error::InterfaceAt`] | `caijit.InterfaceError` | `index`, `argument`, `ctype` |
/// | [`Error::Argument`] | `caijit.ArgumentError` (also `TypeError`) | `index`, `argument`, `ctype` |
/// | [`Error::Compile`] | `caijit.CompileError` | `log`, `code`, `code_name` |
/// | [`Error::Driver`] | `caijit.LaunchError` | `code`, `code_name`, `call` |
/// | [`Error::Fault`] | `caijit.LaunchError` | `code`, `code_name`, `call`, `kernel`, `grid`, `block`, `arguments`, `recent_launches`, `site` |
/// | [`Error::Launch`] | `caijit.LaunchError` | (`code` is `None`) |
/// | [`Error::Cache`] | `caijit.CacheError` (also `OSError`) | `path`, `errno` |
/// | [`Error::CudaNotAvailable`] | `caijit.CudaNotAvailable` | |
/// | [`Error::Bundle`] | `caijit.BundleError` | |
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Interface(#[from] InterfaceError),
    /// A producer's array that caijit cannot accept, found while converting an argument
    /// of a call: the interface error, with the argument's place ([`Error::at_argument`]).
    #[error(transparent)]
    InterfaceAt(Box<ArgumentInterfaceError>),
    /// An argument does not match what the kernel or function expects.
    #[error(transparent)]
    Argument(#[from] ArgumentError),
    /// NVRTC rejected the program, or failed on it.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// The driver refused a call (a launch, an allocation, a copy, loading a module);
    /// `context` says what caijit was doing.
    #[error("{context}{error}")]
    Driver { context: String, error: DriverError },
    /// A sticky CUDA error ([`crate::diag::is_sticky`]: a kernel faulted, and the context
    /// is unusable): the driver's error, with the launch that caused it where caijit knows
    /// it (launch-blocking mode) and the recent launches that may have.
    #[error(transparent)]
    Fault(Box<Fault>),
    /// A launch caijit refuses before asking the driver (a grid beyond the device's limits,
    /// a parameter layout the driver disagrees with).
    #[error("{0}")]
    Launch(String),
    /// The disk cache could not be read, written or cleared.
    #[error("disk cache {}: {source}", path.display())]
    Cache { path: PathBuf, source: std::io::Error },
    /// No CUDA driver or no NVRTC could be loaded; the message lists where caijit looked.
    #[error("{0}")]
    CudaNotAvailable(String),
    /// A kernel bundle that cannot be used (unreadable, corrupt, truncated, of another
    /// format or caijit version, without code for the device), or an instance that no
    /// loaded bundle holds when NVRTC is not available.
    #[error("{0}")]
    Bundle(String),
}

/// An argument that does not match its parameter: which argument (its index, and the
/// parameter's name and C++ type when the kernel's signature is known) and what is wrong.
#[derive(Clone, Debug, Default, PartialEq, Eq, Error)]
#[error("{message}")]
pub struct ArgumentError {
    /// The whole message (naming the argument when known).
    pub message: String,
    /// The argument's position in the call.
    pub index: Option<usize>,
    /// The parameter's name in the kernel's declaration.
    pub name: Option<String>,
    /// The parameter's C++ type.
    pub ctype: Option<String>,
}

/// A `__cuda_array_interface__` (or DLPack tensor) that caijit cannot accept, given as
/// argument `index` of a call, for parameter `name` of C++ type `ctype` where known. The
/// message names the argument (by `label` when given, else by its position, name and
/// type), then what is wrong with the array.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{}: {error}", label.clone().unwrap_or_else(|| Self::label_of(*index, name.as_deref(), ctype.as_deref())))]
pub struct ArgumentInterfaceError {
    pub error: InterfaceError,
    /// The argument's position in the call.
    pub index: usize,
    /// The parameter's name in the kernel's declaration.
    pub name: Option<String>,
    /// The parameter's C++ type.
    pub ctype: Option<String>,
    /// What the message calls the argument instead ("graph input `x`", for a replay's
    /// argument, whose position in the call means nothing).
    pub label: Option<String>,
}

impl ArgumentInterfaceError {
    /// How a message names argument `index` (parameter `name`, of C++ type `ctype`):
    /// ``argument 2 `x` (`const float*`)``.
    pub fn label_of(index: usize, name: Option<&str>, ctype: Option<&str>) -> String {
        let name = name.map(|n| format!(" `{n}`")).unwrap_or_default();
        let ctype = ctype.map(|c| format!(" (`{c}`)")).unwrap_or_default();
        format!("argument {index}{name}{ctype}")
    }
}

/// A sticky CUDA error and the launches that may have caused it.
#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    /// What caijit was doing when the driver reported it.
    pub context: String,
    pub error: DriverError,
    /// The launch that faulted, when caijit knows it (launch-blocking mode synchronizes
    /// after each launch).
    pub launch: Option<crate::diag::LaunchRecord>,
    /// The launches kept in the rings when the error was reported, newest first.
    pub recent: Vec<crate::diag::LaunchRecord>,
}

impl std::error::Error for Fault {}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.context, self.error)?;
        match &self.launch {
            Some(l) => write!(f, "\nthe faulting launch: {l}")?,
            None if self.recent.is_empty() => write!(f, "\n(caijit launched no kernel before it)")?,
            None => write!(f, "\nthe kernel that faulted is one of caijit's recent launches (newest first; set CAIJIT_LAUNCH_BLOCKING=1 to stop at the faulting one):")?,
        }
        if self.launch.is_none() {
            for r in &self.recent {
                write!(f, "\n  {r}")?;
            }
        }
        Ok(())
    }
}

/// NVRTC's verdict on a program: the message, NVRTC's whole log verbatim, and the
/// `nvrtcResult` when an NVRTC call failed (absent when caijit rejected what NVRTC made).
#[derive(Clone, Debug, Default, PartialEq, Eq, Error)]
#[error("{message}{}{log}", if log.is_empty() { "" } else { "\n" })]
pub struct CompileError {
    pub message: String,
    pub log: String,
    pub nvrtc: Option<NvrtcError>,
}

impl Error {
    /// An argument error with a message (which names the argument and what was wrong).
    pub fn argument(message: impl Into<String>) -> Self {
        Error::Argument(ArgumentError { message: message.into(), ..Default::default() })
    }

    /// An error about argument `index` of a call, for parameter `name` of C++ type `ctype`;
    /// the message names all three.
    pub fn argument_at(index: usize, name: Option<&str>, ctype: &str, what: impl std::fmt::Display) -> Self {
        Error::Argument(ArgumentError {
            message: format!("{}: {what}", ArgumentInterfaceError::label_of(index, name, Some(ctype))),
            index: Some(index),
            name: name.map(str::to_string),
            ctype: Some(ctype.to_string()),
        })
    }

    /// This error, when it is about an argument, with what it does not say yet filled in:
    /// the argument's `index`, its parameter's `name` and C++ type `ctype` (for an error
    /// found while converting an argument, before its parameter was looked at). An
    /// argument error keeps its message; an interface error becomes
    /// [`Error::InterfaceAt`], whose message names the argument. Other errors are returned
    /// as they are.
    pub fn at_argument(self, index: usize, name: Option<&str>, ctype: Option<&str>) -> Self {
        let fill = |have: &mut Option<String>, given: Option<&str>| {
            if have.is_none() {
                *have = given.map(str::to_string);
            }
        };
        match self {
            Error::Argument(mut a) => {
                a.index.get_or_insert(index);
                fill(&mut a.name, name);
                fill(&mut a.ctype, ctype);
                Error::Argument(a)
            }
            Error::Interface(error) => Error::InterfaceAt(Box::new(ArgumentInterfaceError {
                error,
                index,
                name: name.map(str::to_string),
                ctype: ctype.map(str::to_string),
                label: None,
            })),
            Error::InterfaceAt(mut a) => {
                fill(&mut a.name, name);
                fill(&mut a.ctype, ctype);
                Error::InterfaceAt(a)
            }
            other => other,
        }
    }

    /// A launch caijit refuses itself (see [`Error::Launch`]).
    pub fn launch(message: impl Into<String>) -> Self {
        Error::Launch(message.into())
    }

    /// A driver error while doing `context` ("allocating 4096 bytes on device 0", say).
    /// A sticky error becomes an [`Error::Fault`] naming the recent launches.
    pub fn driver(context: impl std::fmt::Display, error: DriverError) -> Self {
        Error::from_driver(format!("{context}: "), error)
    }

    fn from_driver(context: String, error: DriverError) -> Self {
        if crate::diag::is_sticky(error.code) {
            return Error::Fault(Box::new(Fault { context, error, launch: None, recent: crate::diag::recent_all() }));
        }
        Error::Driver { context, error }
    }

    /// A sticky error at a known launch (launch-blocking mode).
    pub fn fault_at(context: impl std::fmt::Display, error: DriverError, launch: crate::diag::LaunchRecord) -> Self {
        let recent = crate::diag::recent_all();
        Error::Fault(Box::new(Fault { context: format!("{context}: "), error, launch: Some(launch), recent }))
    }

    /// A compile error: `message`, then NVRTC's log (empty when there is none).
    pub fn compile(message: impl Into<String>, log: impl Into<String>) -> Self {
        Error::Compile(CompileError { message: message.into(), log: log.into(), nvrtc: None })
    }

    /// The driver's `CUresult` code, when the driver reported this error.
    pub fn driver_code(&self) -> Option<u32> {
        match self {
            Error::Driver { error, .. } => Some(error.code),
            Error::Fault(f) => Some(f.error.code),
            _ => None,
        }
    }
}

impl From<DriverError> for Error {
    fn from(error: DriverError) -> Self {
        Error::from_driver(String::new(), error)
    }
}

impl From<NvrtcError> for Error {
    fn from(e: NvrtcError) -> Self {
        Error::Compile(CompileError { message: e.to_string(), log: String::new(), nvrtc: Some(e) })
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_errors_name_the_argument_and_keep_its_data() {
        let e = Error::argument_at(2, Some("x"), "const float*", "expected float32, got int32");
        assert_eq!(e.to_string(), "argument 2 `x` (`const float*`): expected float32, got int32");
        let Error::Argument(a) = e else { panic!() };
        assert_eq!((a.index, a.name.as_deref(), a.ctype.as_deref()), (Some(2), Some("x"), Some("const float*")));
        assert_eq!(Error::argument_at(0, None, "int", "too big").to_string(), "argument 0 (`int`): too big");
    }

    #[test]
    fn interface_errors_at_an_argument_name_it_and_keep_its_data() {
        let e = Error::Interface(InterfaceError::StreamZero).at_argument(1, None, None).at_argument(1, Some("x"), Some("const float*"));
        let Error::InterfaceAt(a) = &e else { panic!("{e:?}") };
        assert_eq!((a.index, a.name.as_deref(), a.ctype.as_deref()), (1, Some("x"), Some("const float*")));
        assert_eq!(a.error, InterfaceError::StreamZero);
        assert!(e.to_string().starts_with("argument 1 `x` (`const float*`): __cuda_array_interface__['stream'] is 0"), "{e}");
        let first = Error::Interface(InterfaceError::StreamZero).at_argument(2, Some("y"), None).at_argument(2, Some("z"), Some("int*"));
        assert!(first.to_string().starts_with("argument 2 `y` (`int*`): "), "the first name given stays: {first}");
        assert!(matches!(Error::launch("x").at_argument(0, None, None), Error::Launch(_)));
    }

    #[test]
    fn driver_errors_keep_their_code_and_say_what_was_done() {
        let error =
            DriverError { call: "cuMemAllocAsync", code: 2, name: "CUDA_ERROR_OUT_OF_MEMORY".into(), message: "out of memory".into() };
        let e = Error::driver("allocating 8 bytes on device 0", error);
        assert_eq!(e.driver_code(), Some(2));
        assert_eq!(e.to_string(), "allocating 8 bytes on device 0: cuMemAllocAsync failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory");
        assert_eq!(Error::launch("grid too large").driver_code(), None);
    }

    #[test]
    fn sticky_driver_errors_name_the_recent_launches() {
        let error = DriverError { call: "cuMemcpyDtoH", code: 700, name: "CUDA_ERROR_ILLEGAL_ADDRESS".into(), message: "illegal".into() };
        let e = Error::driver("copying", error.clone());
        assert_eq!(e.driver_code(), Some(700));
        let Error::Fault(f) = &e else { panic!("{e:?}") };
        assert!(f.launch.is_none());
        assert!(e.to_string().starts_with("copying: cuMemcpyDtoH failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)"));
        let not_sticky = DriverError { code: 2, ..error };
        assert!(matches!(Error::from(not_sticky), Error::Driver { .. }));
    }

    #[test]
    fn compile_errors_show_the_log_after_the_message() {
        assert_eq!(Error::compile("NVRTC could not compile k.cu:", "error: x").to_string(), "NVRTC could not compile k.cu:\nerror: x");
        assert_eq!(Error::compile("no kernel named k", "").to_string(), "no kernel named k");
    }
}
