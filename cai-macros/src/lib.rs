//! `#[derive(CudaArrayInterface)]` for caijit (issue 5: not built yet).
//!
//! This crate is reserved in the workspace layout of DESIGN.md; it exports no macro yet.
