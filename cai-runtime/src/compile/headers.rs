//! The device-side headers of `kernels/include` and the kernel library of `kernels/ops`,
//! embedded so an installed wheel has them. Every program can `#include <caijit/...>`
//! them. The lists are made by `build.rs` from the folders' contents.

include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
