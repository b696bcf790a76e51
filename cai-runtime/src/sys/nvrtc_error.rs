//! NVRTC's error: what a failed call returns, in a build with NVRTC (`nvrtc.rs`) and in
//! its stand-in without it (`no_nvrtc.rs`).

/// A failed NVRTC call: the call's name, its `nvrtcResult` and NVRTC's description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvrtcError {
    pub call: &'static str,
    pub code: i32,
    pub name: String,
    pub message: String,
}

impl std::fmt::Display for NvrtcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {} ({}): {}", self.call, self.name, self.code, self.message)
    }
}

impl std::error::Error for NvrtcError {}
