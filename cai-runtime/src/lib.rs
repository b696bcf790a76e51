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
pub mod launch;
pub mod params;
pub mod runtime;
pub mod signature;
pub mod stats;
mod sys;
