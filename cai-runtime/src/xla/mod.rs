//! Kernels as XLA custom calls: launches described by their call's attributes, resolved
//! once per process into a registry keyed by content, served by an XLA FFI handler.
//!
//! # Examples
//! ```no_run
//! use cai_runtime::cai::DType;
//! use cai_runtime::compile::Program;
//! use cai_runtime::launch::{LaunchConfig, Num};
//! use cai_runtime::xla::{prepare, Binding, BufferSpec};
//! let program = Program::new(r#"extern "C" __global__ void scale(const float* x, float* y, float a, int n) {
//!     int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i]; }"#);
//! let spec = BufferSpec { dtype: DType::F32, shape: vec![1024] };
//! let launch = prepare(
//!     &program, "scale", &[spec.clone()], &[spec], &[],
//!     &[Binding::Buffer(0), Binding::Buffer(1), Binding::Scalar(Num::Float(2.0)), Binding::Scalar(Num::Int(1024))],
//!     LaunchConfig::new([4, 1, 1], [256, 1, 1]), &[0],
//! )?;
//! // The custom call `caijit_launch` with the attributes
//! // `caijit_fingerprint = launch.fingerprint` and `caijit_launch = launch.description`
//! // now launches it, in this process or any other.
//! # Ok::<(), cai_runtime::Error>(())
//! ```
//!
//! # Rationale
//! A jitted JAX program calls the handler ([`handler_address`], registered with
//! `jax.ffi.register_ffi_target(..., platform="CUDA")`) once per execution, with XLA's
//! buffers and stream. Everything that can be decided before that — the template instance,
//! which kernel parameter is which buffer, the bytes of every static scalar, the launch
//! configuration — is decided once by [`prepare`], when the program is traced.
//!
//! A compiled program outlives the process that traced it (`serialize_executable`,
//! `jax.export`), so the custom call carries the launch itself, not a reference into this
//! process: its attribute `caijit_launch` is a full description (the program: source,
//! options, defines, include directories, name expressions; the kernel's name; the buffers'
//! dtypes and shapes; every parameter's binding; the launch configuration), and
//! `caijit_fingerprint` the SHA-256 of that description (its first 128 bits, in hex). The
//! process's launches live in a registry keyed by fingerprint. [`prepare`] fills it; a call
//! whose fingerprint it lacks (a program made elsewhere) is resolved from its description,
//! which must hash to its fingerprint, compiled through the caches, loaded on every device
//! the driver lists, and registered. The
//! handler resolves at XLA's *instantiate* stage (when XLA builds the program's thunks, at
//! compilation or deserialization: outside any CUDA graph capture), where it also checks
//! that the description is the registered launch's byte for byte; an execute-stage call
//! then costs one map lookup by a 128-bit key (no hashing of the source), the buffer check
//! (count, dtype, element count), the parameter bytes and `cuLaunchKernel` on XLA's stream:
//! no compilation, no allocation beyond the stack, no event, no host synchronisation. XLA
//! orders the call against the rest of its program, so none of the CAI stream protocol
//! applies; and since the launch is one `cuLaunchKernel` on the given stream, the handler
//! declares itself compatible with XLA's command buffers (CUDA graphs).
//!
//! A call whose fingerprint is malformed, whose description does not hash to it or differs
//! from the launch registered under it, or whose buffers differ from the description's, is
//! an XLA error: never another kernel.
//!
//! # Limitations
//! Registered launches live for the process (a jitted function may run at any time). A
//! device a launch was not loaded on is loaded on its first call (from the compilation
//! caches; the architecture's first compilation would then happen there). Include
//! directories are host paths: a description made on another machine compiles only where
//! they exist. A launch asking for more dynamic shared memory than a kernel's default
//! limit (48 KiB) raises that kernel's limit on each device it is loaded on.

mod description;
mod handler;
mod plan;
mod registry;
mod spec;
#[cfg(test)]
mod tests;

pub use handler::{ffi_api_version, ffi_layout, handler_address};
pub use registry::{prepare, resolve_launch, Prepared};
pub use spec::{bind, check_aliases, Binding, BufferSpec, Launch, FINGERPRINT, TARGET};
