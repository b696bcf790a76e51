use cai_runtime::KernelParams;

// Missing #[repr(C)]: the Rust layout could reorder fields.
#[derive(KernelParams, Clone, Copy)]
struct NotReprC {
    a: f64,
    b: i8,
}

// The CUDA twin puts `b` at offset 4; Rust's repr(C) puts it at 8.
#[derive(KernelParams, Clone, Copy)]
#[repr(C)]
struct Disagrees {
    a: f64,
    #[cai(offset = 4)]
    b: i8,
}

fn main() {}
