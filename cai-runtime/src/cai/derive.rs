//! The traits `#[derive(CudaArrayInterface)]` implements, and what generated code uses.
//!
//! # Passing a derived struct to a kernel
//!
//! ```no_run
//! use cai_runtime::compile::Program;
//! use cai_runtime::launch::{Arg, LaunchConfig, Num};
//! use cai_runtime::runtime::Context;
//! use cai_runtime::CudaArrayInterface;
//!
//! /// A float32 image in device memory, with the stream its pending work is on.
//! #[derive(CudaArrayInterface)]
//! #[cai(dtype = f32)]
//! struct Image {
//!     #[cai(data)]
//!     ptr: u64,
//!     #[cai(shape)]
//!     shape: [usize; 2],
//!     #[cai(stream)]
//!     stream: Option<u64>,
//! }
//!
//! fn brighten(image: &Image, by: f32) -> cai_runtime::Result<()> {
//!     let ctx = Context::new(0)?;
//!     let k = ctx
//!         .compile(&Program::new(
//!             r#"extern "C" __global__ void brighten(float* p, float by, long long n) {
//!                 long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
//!                 if (i < n) p[i] += by;
//!             }"#,
//!         ))?
//!         .kernel("brighten")?;
//!     let view = image.cai_view()?; // dtype, shape and stream, validated
//!     let n = view.size();
//!     let args = [Arg::Array(&view), Arg::Scalar { value: Num::Float(by.into()), dtype: None }, Arg::Scalar {
//!         value: Num::Int(n as i128),
//!         dtype: None,
//!     }];
//!     // Ordered after `image.stream` (CAI v3), and that stream after the kernel.
//!     k.launch(&LaunchConfig::for_elements(n, 256), &args, None, true)?;
//!     Ok(())
//! }
//! ```
//!
//! # Exporting to Python and importing from it
//!
//! With `#[cai(python)]` on a `#[pyclass]` (and this crate's `python` feature), the type gets
//! a `__cuda_array_interface__` getter (v3, with its stream) that CuPy, PyTorch and Numba
//! read, and `FromPyObject`, so a `#[pyfunction]` takes it from any object carrying the
//! interface (dtype, rank, contiguity and writability checked, errors naming the key).
//! `examples/rust-extension` is the complete, tested version: a function taking a PyTorch
//! tensor, launching a caijit kernel on it and returning Rust-owned memory CuPy reads.
//!
//! ```ignore
//! #[pyclass(frozen)]
//! #[derive(CudaArrayInterface)]
//! #[cai(dtype = f32, python)]
//! struct Image {
//!     #[cai(data)] ptr: u64,
//!     #[cai(shape)] shape: [usize; 2],
//!     #[cai(stream)] stream: Option<u64>,
//! }
//!
//! #[pyfunction]
//! fn flatten(image: Image) -> Image { // accepts a torch tensor, a CuPy array, ...
//!     Image { ptr: image.ptr, shape: [1, image.shape[0] * image.shape[1]], stream: image.stream }
//! }   // ... and returns an object `cupy.asarray` reads
//! ```
//!
//! # A kernel-parameter struct and its CUDA twin
//!
//! `#[derive(KernelParams)]` checks at compile time that the Rust layout is the one written
//! down (size, alignment, each field's offset), which is the layout of the C++ twin; the
//! struct is then passed by value as its bytes.
//!
//! ```no_run
//! use cai_runtime::launch::Arg;
//! use cai_runtime::{KernelParams, ParamBytes};
//!
//! // CUDA: struct Params { double scale; int n; float bias[2]; };  // 24 bytes, align 8
//! #[derive(KernelParams, Clone, Copy)]
//! #[repr(C)]
//! #[cai(size = 24, align = 8)]
//! struct Params {
//!     #[cai(offset = 0)]
//!     scale: f64,
//!     #[cai(offset = 8)]
//!     n: i32,
//!     #[cai(offset = 12)]
//!     bias: [f32; 2],
//! }
//!
//! let bytes = Params { scale: 2.0, n: 10, bias: [0.5, -0.5] }.param_bytes();
//! let arg = Arg::Bytes(&bytes); // for `__global__ void k(Params p, ...)`
//! # let _ = arg;
//! ```

use super::{ArrayView, DType, Descriptor, InterfaceError, TypestrOptions};

/// A Rust element type with a CAI dtype.
pub trait Element: Copy + 'static {
    const DTYPE: DType;
}

macro_rules! elements {
    ($($t:ty => $d:ident),* $(,)?) => { $(impl Element for $t { const DTYPE: DType = DType::$d; })* };
}
elements! {
    bool => Bool, i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64,
    half::f16 => F16, half::bf16 => BF16, f32 => F32, f64 => F64,
}

/// A type that exports itself as a CUDA Array Interface (CAI v3, by its producer rules).
pub trait CudaArrayInterface {
    /// The array this value describes.
    fn cai_view(&self) -> Result<ArrayView, InterfaceError>;

    /// The `__cuda_array_interface__` keys: version 3, `strides: None` when C-contiguous,
    /// `data: (0, readonly)` when empty, the stream as 1/2/handle.
    fn cai_descriptor(&self) -> Result<Descriptor, InterfaceError> {
        Ok(self.cai_view()?.to_descriptor())
    }
}

/// A type that can be built from any producer's CUDA Array Interface (borrowing the memory).
pub trait FromCudaArrayInterface: Sized {
    fn from_cai(view: &ArrayView) -> Result<Self, InterfaceError>;

    /// Validate a producer's descriptor (consumer rules), then build.
    fn from_descriptor(d: &Descriptor) -> Result<Self, InterfaceError> {
        Self::from_cai(&ArrayView::from_descriptor(d, TypestrOptions::BFLOAT16_V2)?)
    }
}

/// A shape field: `[usize; N]`, `Vec<usize>` or a single `usize` (1-D).
pub trait ShapeField: Sized {
    /// `Some(N)` for fixed-rank shapes.
    const RANK: Option<usize>;
    fn dims(&self) -> Vec<usize>;
    fn from_dims(dims: &[usize]) -> Option<Self>;
}

impl<const N: usize> ShapeField for [usize; N] {
    const RANK: Option<usize> = Some(N);
    fn dims(&self) -> Vec<usize> {
        self.to_vec()
    }
    fn from_dims(dims: &[usize]) -> Option<Self> {
        dims.try_into().ok()
    }
}

impl ShapeField for Vec<usize> {
    const RANK: Option<usize> = None;
    fn dims(&self) -> Vec<usize> {
        self.clone()
    }
    fn from_dims(dims: &[usize]) -> Option<Self> {
        Some(dims.to_vec())
    }
}

impl ShapeField for usize {
    const RANK: Option<usize> = Some(1);
    fn dims(&self) -> Vec<usize> {
        vec![*self]
    }
    fn from_dims(dims: &[usize]) -> Option<Self> {
        match dims {
            [n] => Some(*n),
            _ => None,
        }
    }
}

/// A strides field (bytes): `[i64; N]`, `Vec<i64>`, or `Option` of either (`None`: C order).
pub trait StridesField: Sized {
    fn strides(&self) -> Option<Vec<i64>>;
    fn from_strides(strides: &[i64]) -> Option<Self>;
}

impl<const N: usize> StridesField for [i64; N] {
    fn strides(&self) -> Option<Vec<i64>> {
        Some(self.to_vec())
    }
    fn from_strides(s: &[i64]) -> Option<Self> {
        s.try_into().ok()
    }
}

impl StridesField for Vec<i64> {
    fn strides(&self) -> Option<Vec<i64>> {
        Some(self.clone())
    }
    fn from_strides(s: &[i64]) -> Option<Self> {
        Some(s.to_vec())
    }
}

impl<S: StridesField> StridesField for Option<S> {
    fn strides(&self) -> Option<Vec<i64>> {
        self.as_ref().and_then(StridesField::strides)
    }
    fn from_strides(s: &[i64]) -> Option<Self> {
        Some(S::from_strides(s))
    }
}

/// A stream field: a raw handle (`u64`: 1, 2 or a `CUstream`), `Option<u64>` (`None`: no
/// stream), or a caijit [`crate::runtime::Stream`] (export only). A raw `0` is exported as
/// it is, and so refused ([`InterfaceError::StreamZero`]): the CAI forbids it as ambiguous,
/// and caijit does not guess which default stream it meant.
pub trait StreamField {
    fn stream(&self) -> Option<u64>;
}

impl StreamField for u64 {
    fn stream(&self) -> Option<u64> {
        Some(*self)
    }
}

impl StreamField for Option<u64> {
    fn stream(&self) -> Option<u64> {
        *self
    }
}

impl<S: StreamField> StreamField for std::sync::Arc<S> {
    fn stream(&self) -> Option<u64> {
        (**self).stream()
    }
}

/// A stream field that import can fill from a producer's stream.
pub trait StreamFieldImport: StreamField + Sized {
    fn from_stream(stream: Option<u64>) -> Option<Self>;
}

impl StreamFieldImport for u64 {
    fn from_stream(stream: Option<u64>) -> Option<Self> {
        Some(stream.unwrap_or(0))
    }
}

impl StreamFieldImport for Option<u64> {
    fn from_stream(stream: Option<u64>) -> Option<Self> {
        Some(stream)
    }
}

/// A data field: a raw device pointer (`u64`), or an owning device array (export only).
pub trait DataField {
    fn device_ptr(&self) -> u64;
    /// Whether the memory may be written through this field (`false` for views that know
    /// they are readonly).
    fn writable(&self) -> bool {
        true
    }
}

impl DataField for u64 {
    fn device_ptr(&self) -> u64 {
        *self
    }
}

/// Build the view of a derived struct (used by generated code).
#[doc(hidden)]
pub fn export_view(
    ptr: u64,
    shape: &[usize],
    strides: Option<Vec<i64>>,
    dtype: DType,
    readonly: bool,
    stream: Option<u64>,
) -> Result<ArrayView, InterfaceError> {
    let stream = stream.map(super::StreamRef::from_cai).transpose()?;
    ArrayView::new(ptr, shape, strides.as_deref(), dtype, readonly, stream)
}

/// Check an imported view against a derived struct's expectations (used by generated code).
#[doc(hidden)]
pub fn check_import(
    view: &ArrayView,
    dtype: DType,
    rank: Option<usize>,
    needs_c_contiguous: bool,
    needs_writable: bool,
) -> Result<(), InterfaceError> {
    if view.dtype() != dtype {
        return Err(InterfaceError::DtypeMismatch { expected: dtype, got: view.dtype() });
    }
    if let Some(r) = rank {
        if view.ndim() != r {
            return Err(InterfaceError::RankMismatch { expected: r, got: view.ndim() });
        }
    }
    if needs_c_contiguous && !view.is_c_contiguous() {
        return Err(InterfaceError::NotContiguous { strides: view.strides().to_vec() });
    }
    if needs_writable && view.readonly() {
        return Err(InterfaceError::Readonly);
    }
    Ok(())
}
