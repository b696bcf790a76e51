//! caijit's runtime: the CUDA Array Interface model, NVRTC compilation and caches,
//! kernel parameter layouts, stream-ordered launches.
//!
//! | concept | CPU | CUDA | CAI |
//! | --- | --- | --- | --- |
//! | an array | `&[T]` | device pointer + layout | [`cai::ArrayView`] |
//! | element type | `T` | C++ type | [`cai::DType`] (typestr) |
//! | producer's pending work | — | `CUstream` | [`cai::StreamRef`] |

pub mod array;
pub mod cai;
mod error;

pub use error::{Error, Result};
pub mod compile;
pub mod interop;
pub mod launch;
pub mod ops;
pub mod params;
#[cfg(feature = "python")]
pub mod python;
pub mod runtime;
pub mod signature;
pub mod stats;
mod sys;

pub use cai::{CudaArrayInterface, FromCudaArrayInterface};
#[cfg(feature = "derive")]
pub use cai_macros::{CudaArrayInterface, KernelParams};

/// A value that can be written into a kernel's parameter buffer as the bytes of its CUDA
/// twin: scalars, arrays of them, and `#[derive(KernelParams)]` structs (which lay their
/// fields out at the offsets Rust's `#[repr(C)]` gives, asserted at compile time).
pub trait ParamBytes {
    /// `size_of::<Self>()` for the types here.
    const SIZE: usize;
    /// Write the value into `out[..SIZE]`.
    fn write_param(&self, out: &mut [u8]);
    /// The value's bytes (padding zeroed).
    fn param_bytes(&self) -> Vec<u8> {
        let mut v = vec![0u8; Self::SIZE];
        self.write_param(&mut v);
        v
    }
}

macro_rules! param_bytes {
    ($($t:ty),*) => {$(
        impl ParamBytes for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn write_param(&self, out: &mut [u8]) {
                out[..Self::SIZE].copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
param_bytes!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64, half::f16, half::bf16);

impl ParamBytes for bool {
    const SIZE: usize = 1;
    fn write_param(&self, out: &mut [u8]) {
        out[0] = u8::from(*self);
    }
}

impl<T: ParamBytes, const N: usize> ParamBytes for [T; N] {
    const SIZE: usize = T::SIZE * N;
    fn write_param(&self, out: &mut [u8]) {
        for (i, v) in self.iter().enumerate() {
            v.write_param(&mut out[i * T::SIZE..]);
        }
    }
}

/// Marks `#[derive(KernelParams)]` structs: usable as a kernel's struct argument.
pub trait KernelStruct: ParamBytes {}

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
