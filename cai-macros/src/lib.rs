//! `#[derive(CudaArrayInterface)]` and `#[derive(KernelParams)]` for caijit.
//!
//! ```ignore
//! use cai_runtime::{CudaArrayInterface, FromCudaArrayInterface};
//!
//! #[derive(CudaArrayInterface)]
//! #[cai(dtype = f32)]
//! struct Image {
//!     #[cai(data)] ptr: u64,
//!     #[cai(shape)] shape: [usize; 2],
//!     #[cai(stream)] stream: Option<u64>,
//! }
//! ```
//!
//! | attribute | on | meaning |
//! | --- | --- | --- |
//! | `dtype = T` | struct | element type (`f32`, `half::f16`, …); inferred from a `DeviceArray` data field |
//! | `crate = "path"` | struct | where `cai_runtime` is (default `::cai_runtime`) |
//! | `data` | field | `u64` device pointer (export and import) or `DeviceArray` (export only) |
//! | `shape` | field | `[usize; N]`, `Vec<usize>` or `usize` |
//! | `strides` | field | byte strides: `[i64; N]`, `Vec<i64>`, `Option<_>`; without it, C order |
//! | `stream` | field | `u64` / `Option<u64>` handle (1, 2 or a `CUstream`; `None`: no stream; a raw 0 is refused, as the CAI forbids it), or a caijit `Stream` |
//! | `readonly` | field | `bool` |
//!
//! Layout: parse (`attr.rs`) → validate (`check.rs`) → expand (`expand.rs`). Attribute
//! errors are collected and reported together, each at the user's token.

#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

mod attr;
mod check;
mod expand;

/// Derive CAI export (`CudaArrayInterface`) and, for borrowed data fields, import
/// (`FromCudaArrayInterface`).
#[proc_macro_derive(CudaArrayInterface, attributes(cai))]
pub fn derive_cuda_array_interface(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::cuda_array_interface(&input).into()
}

/// Derive `ParamBytes` + `KernelStruct` for a `#[repr(C)]` struct passed to a kernel by
/// value, with compile-time layout assertions (`#[cai(size = …, align = …)]` on the struct,
/// `#[cai(offset = …)]` on fields).
#[proc_macro_derive(KernelParams, attributes(cai))]
pub fn derive_kernel_params(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::kernel_params(&input).into()
}
