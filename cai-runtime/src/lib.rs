//! caijit's runtime: the CUDA Array Interface model, NVRTC compilation and caches,
//! kernel parameter layouts, stream-ordered launches.
//!
//! | concept | CPU | CUDA | CAI |
//! | --- | --- | --- | --- |
//! | an array | `&[T]` | device pointer + layout | [`cai::ArrayView`] |
//! | element type | `T` | C++ type | [`cai::DType`] (typestr) |
//! | producer's pending work | — | `CUstream` | [`cai::StreamRef`] |
//!
//! # Examples
//!
//! Without a GPU, NVRTC alone compiles a kernel and says how its parameters are laid out
//! (what `python -m caijit compile` prints); here for sm_90, without the disk cache:
//!
//! ```
//! use cai_runtime::compile::{compile_with, Arch, CompileOptions, Program};
//!
//! # fn main() -> Result<(), cai_runtime::Error> {
//! # std::env::set_var("CAIJIT_CACHE", "0"); // (a test: the user's disk cache is left alone)
//! let program = Program::new(
//!     r#"extern "C" __global__ void scale(float* y, double a, int n) {
//!         int i = blockIdx.x * blockDim.x + threadIdx.x;
//!         if (i < n) y[i] *= a;
//!     }"#,
//! );
//! let mut options = CompileOptions::default();
//! options.disk_cache = Some(None);
//! let compiled = compile_with(&program, Arch(90), &options)?;
//! let scale = compiled.kernel("scale")?;
//! let layout: Vec<(&str, usize, usize)> = scale.params.iter().map(|p| (p.cpp_type.as_str(), p.offset, p.size)).collect();
//! assert_eq!(layout, [("float*", 0, 8), ("double", 8, 8), ("int", 16, 4)]);
//! assert_eq!(scale.param_buffer_size(), 20);
//! # Ok(())
//! # }
//! ```
//!
//! With a GPU: compile a kernel with NVRTC, launch it on two CUDA arrays (here described by a type of
//! your own that derives the CUDA Array Interface; any producer's `__cuda_array_interface__`
//! works the same through [`cai::Descriptor`]), and read a producer's array back into that
//! type. The launch waits for the work pending on each array's stream first, as CAI v3
//! requires.
//!
//! ```no_run
//! use cai_runtime::cai::ArrayView;
//! use cai_runtime::compile::Program;
//! use cai_runtime::launch::{Arg, Num};
//! use cai_runtime::runtime::Context;
//! use cai_runtime::{CudaArrayInterface, FromCudaArrayInterface};
//!
//! /// A device buffer of `f32`s owned elsewhere (by a Rust GPU library, say).
//! #[derive(CudaArrayInterface)]
//! #[cai(dtype = f32)]
//! struct Buffer {
//!     #[cai(data)]
//!     ptr: u64,
//!     #[cai(shape)]
//!     len: usize,
//!     /// The stream its pending work is on (`None`: nothing pending).
//!     #[cai(stream)]
//!     stream: Option<u64>,
//! }
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let ctx = Context::new(0)?;
//!     let module = ctx.compile(&Program::new(
//!         r#"extern "C" __global__ void axpy(float a, const float* x, float* y, long long n) {
//!             long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
//!             if (i < n) y[i] = a * x[i] + y[i];
//!         }"#,
//!     ))?;
//!     let axpy = module.kernel("axpy")?;
//!
//!     # let (x_ptr, y_ptr, n) = (0x7f00_0000_0000_u64, 0x7f00_1000_0000_u64, 1_usize << 20);
//!     let x = Buffer { ptr: x_ptr, len: n, stream: None };
//!     let y = Buffer { ptr: y_ptr, len: n, stream: Some(2) };
//!     let (xv, yv): (ArrayView, ArrayView) = (x.cai_view()?, y.cai_view()?);
//!     let args = [
//!         Arg::Scalar { value: Num::Float(2.0), dtype: None },
//!         Arg::Array(&xv),
//!         Arg::Array(&yv),
//!         Arg::Scalar { value: Num::Int(n as i128), dtype: None },
//!     ];
//!     // An occupancy-chosen block size over n elements, on the legacy default stream.
//!     axpy.forall(n, &args, None, true)?;
//!
//!     // Any producer's array (a descriptor read from Python, say) into the type, checked.
//!     let back = Buffer::from_descriptor(&yv.to_descriptor())?;
//!     assert_eq!((back.ptr, back.len), (y_ptr, n));
//!     Ok(())
//! }
//! ```
//!
//! # Dispatch, as in Python
//!
//! A [`dispatch::Dispatcher`] launches a kernel by name, Numba-style: a template's instance
//! is deduced from the arguments' types (`axpy<float>` for float32 arrays and a typed
//! float), an overload is picked by them, and each instance is compiled on first use and
//! cached per argument-type signature, exactly as for a Python launch. The launch is
//! stream-ordered as above.
//!
//! ```no_run
//! use cai_runtime::cai::ArrayView;
//! use cai_runtime::compile::Program;
//! use cai_runtime::dispatch::Dispatcher;
//! use cai_runtime::launch::Arg;
//! use cai_runtime::{CudaArrayInterface, FromCudaArrayInterface};
//!
//! /// A device buffer of `f32`s owned elsewhere (by a Rust GPU library, say).
//! #[derive(CudaArrayInterface)]
//! #[cai(dtype = f32)]
//! struct Buffer {
//!     #[cai(data)]
//!     ptr: u64,
//!     #[cai(shape)]
//!     len: usize,
//!     /// The stream its pending work is on (`None`: nothing pending).
//!     #[cai(stream)]
//!     stream: Option<u64>,
//! }
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let axpy = Dispatcher::new(
//!         Program::new(
//!             r#"template <typename T> __global__ void axpy(T a, const T* x, T* y, long long n) {
//!                 long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
//!                 if (i < n) y[i] = a * x[i] + y[i];
//!             }"#,
//!         ),
//!         Some("axpy"),
//!     )?;
//!
//!     # let (x_ptr, y_ptr, n) = (0x7f00_0000_0000_u64, 0x7f00_1000_0000_u64, 1_usize << 20);
//!     let x = Buffer { ptr: x_ptr, len: n, stream: None };
//!     let y = Buffer { ptr: y_ptr, len: n, stream: Some(2) };
//!     let (xv, yv): (ArrayView, ArrayView) = (x.cai_view()?, y.cai_view()?);
//!     // float32 arrays and a typed float: axpy<float>; `n` converts to `long long`.
//!     let args = [Arg::scalar(2.0f32), Arg::Array(&xv), Arg::Array(&yv), Arg::untyped(n)];
//!     // An occupancy-chosen block size over n elements, on the arrays' device.
//!     axpy.forall(n, &args, None)?;
//!
//!     // Any producer's array (a descriptor read from Python, say) into the type, checked.
//!     let back = Buffer::from_descriptor(&yv.to_descriptor())?;
//!     assert_eq!((back.ptr, back.len), (y_ptr, n));
//!     Ok(())
//! }
//! ```
//!
//! Without a GPU, the same dispatcher says which instance arguments select, compiled for
//! the inspection architecture ([`kernel::inspection_arch`]: device 0's, else
//! `CAIJIT_ARCH`, else sm_90), with its parameters as compiled:
//!
//! ```
//! use cai_runtime::cai::DType;
//! use cai_runtime::compile::Program;
//! use cai_runtime::dispatch::Dispatcher;
//! use cai_runtime::kernel::inspection_arch;
//! use cai_runtime::signature::ArgType;
//!
//! # std::env::set_var("CAIJIT_CACHE", "0"); // (a test: the user's disk cache is left alone)
//! let src = r#"
//!     template <typename T, int BLOCK = 256> __global__ void axpy(T a, const T* x, T* y, long long n) {}
//!     __global__ void scale(float* x, float a, int n) {}
//!     __global__ void scale(double* x, double a, int n) {}"#;
//! let axpy = Dispatcher::new(Program::new(src), Some("axpy"))?;
//! let f64s = ArgType::Array { dtype: DType::F64, rank: 1 };
//! let chosen = axpy.select(inspection_arch()?, &[ArgType::UntypedScalar, f64s, f64s, ArgType::UntypedScalar])?;
//! assert_eq!(chosen.name, "axpy<double>"); // BLOCK keeps its default
//! assert_eq!(chosen.info()?.params[0].cpp_type, "double");
//!
//! let scale = Dispatcher::new(Program::new(src), Some("scale"))?;
//! let chosen = scale.select(inspection_arch()?, &[f64s, ArgType::UntypedScalar, ArgType::UntypedScalar])?;
//! assert_eq!(chosen.info()?.params[0].cpp_type, "double*"); // the overload for doubles
//! # Ok::<(), cai_runtime::Error>(())
//! ```

// `unsafe` lives in `sys`; elsewhere only a call of one of its `unsafe fn`s, allowed where
// it is made, whose caller upholds the function's `# Safety` section (tests/architecture.rs
// checks both, and every `unsafe` block says why it is sound in a `// SAFETY:` comment).
#![deny(unsafe_code, clippy::undocumented_unsafe_blocks)]

/// The README's Rust code, compiled as a doc test (and without unused imports).
#[cfg(doctest)]
#[doc(test(attr(deny(unused_imports))))]
#[doc = include_str!("../../README.md")]
mod readme {}

pub mod array;
pub mod cai;
mod error;
mod files;

pub use error::{ArgumentError, ArgumentInterfaceError, CompileError, DriverError, Error, Fault, NvrtcError, Result};
pub mod bundle;
pub mod compile;
pub mod diag;
pub mod dispatch;
pub mod graph;
pub mod interop;
pub mod kernel;
pub mod launch;
pub mod ops;
pub mod params;
#[cfg(feature = "python")]
pub mod python;
pub mod runtime;
pub mod signature;
pub mod stats;
pub mod sync;
/// The only module with `unsafe` code: FFI to the CUDA driver, NVRTC and C libraries.
/// Its functions whose callers must uphold something are `unsafe fn` with a `# Safety`
/// section, and their bodies still mark each unsafe operation.
#[allow(unsafe_code)]
#[deny(unsafe_op_in_unsafe_fn)]
mod sys;
pub mod tune;
pub mod xla;

pub use cai::{CudaArrayInterface, FromCudaArrayInterface};
#[cfg(feature = "derive")]
pub use cai_macros::{CudaArrayInterface, KernelParams};
pub use params::{KernelStruct, ParamBytes};

/// Paths generated code uses; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::cai::{
        check_import, export_view, ArrayView, DType, DataField, Element, InterfaceError, ShapeField, StreamField, StreamFieldImport,
        StridesField,
    };
    #[cfg(feature = "python")]
    pub use crate::python;
    pub use crate::{CudaArrayInterface, FromCudaArrayInterface, KernelStruct, ParamBytes};
}
