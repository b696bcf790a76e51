//! The stand-in for NVRTC's calls when the `nvrtc` feature is off: the same names as
//! `nvrtc.rs`, so that the compiler above builds unchanged, but its [`Nvrtc`] token is an
//! empty enum. No value of it can exist, so no path reaches a compiler call (each method
//! is the empty match that proves it), no NVRTC library is looked for, and loading one
//! answers why. Kernels then come from loaded bundles only.

use std::path::Path;

use super::nvrtc_error::NvrtcError;

/// Why NVRTC cannot be used: this build left it out.
pub(crate) const LEFT_OUT: Option<&str> = Some("this build of cai-runtime has no NVRTC (the `nvrtc` feature is off)");

/// NVRTC, which this build cannot load: no value exists.
#[derive(Debug)]
pub(crate) enum Nvrtc {}

/// An NVRTC program, which this build cannot make: no value exists.
pub(crate) enum NvProgram {}

/// Always the error saying that this build has no NVRTC.
pub(crate) fn load_nvrtc(name: &Path) -> Result<&'static Nvrtc, String> {
    Err(format!("{}: {}", name.display(), LEFT_OUT.unwrap_or_default()))
}

impl Nvrtc {
    pub fn version(&self) -> Result<(i32, i32), NvrtcError> {
        match *self {}
    }

    pub fn supported_archs(&self) -> Result<Vec<i32>, NvrtcError> {
        match *self {}
    }

    pub fn create_program(&self, _source: &str, _name: &str, _headers: &[(String, String)]) -> Result<NvProgram, NvrtcError> {
        match *self {}
    }
}

impl NvProgram {
    pub fn add_name_expression(&mut self, _expr: &str) -> Result<(), NvrtcError> {
        match *self {}
    }

    pub fn compile(&mut self, _options: &[String]) -> Result<bool, NvrtcError> {
        match *self {}
    }

    pub fn log(&self) -> Result<String, NvrtcError> {
        match *self {}
    }

    pub fn ptx(&self) -> Result<String, NvrtcError> {
        match *self {}
    }

    pub fn cubin(&self) -> Result<Option<Vec<u8>>, NvrtcError> {
        match *self {}
    }

    pub fn lowered_name(&self, _expr: &str) -> Result<String, NvrtcError> {
        match *self {}
    }
}
