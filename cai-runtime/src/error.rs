//! The runtime's one error type; each variant maps to one Python exception class.

use thiserror::Error;

pub use crate::cai::InterfaceError;

/// Every way a caijit call can fail.
///
/// | variant | Python class |
/// | --- | --- |
/// | [`Error::Interface`] | `caijit.InterfaceError` (also `ValueError`) |
/// | [`Error::Argument`] | `caijit.ArgumentError` (also `TypeError`) |
/// | [`Error::Compile`] | `caijit.CompileError` (`.log`) |
/// | [`Error::Launch`] | `caijit.LaunchError` |
/// | [`Error::CudaNotAvailable`] | `caijit.CudaNotAvailable` |
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Interface(#[from] InterfaceError),
    /// An argument does not match what the kernel or function expects.
    #[error("{0}")]
    Argument(String),
    /// NVRTC rejected the program; `log` is its whole log, verbatim.
    #[error("{message}\n{log}")]
    Compile { message: String, log: String },
    /// The driver refused a launch, an allocation or a copy.
    #[error("{0}")]
    Launch(String),
    /// No CUDA driver or no NVRTC could be loaded; the message lists where caijit looked.
    #[error("{0}")]
    CudaNotAvailable(String),
}

impl Error {
    /// An argument error with a message (which names the argument and what was wrong).
    pub fn argument(message: impl Into<String>) -> Self {
        Error::Argument(message.into())
    }

    /// A launch, allocation or copy the driver refused.
    pub fn launch(message: impl Into<String>) -> Self {
        Error::Launch(message.into())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
