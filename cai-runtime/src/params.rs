//! Marshalling launch arguments into a kernel's parameter buffer.

use crate::signature::{array_param_size, ArrayLayout};

/// The Rust mirror of `caijit::Array<T, N>` (`kernels/include/caijit/array.cuh`):
/// a data pointer, `N` extents and `N` byte strides, all 64-bit.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayParam<const N: usize> {
    pub data: u64,
    pub shape: [i64; N],
    pub strides: [i64; N],
}

const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<ArrayParam<0>>() == array_param_size(0));
    assert!(size_of::<ArrayParam<1>>() == array_param_size(1));
    assert!(size_of::<ArrayParam<3>>() == array_param_size(3));
    assert!(size_of::<ArrayParam<8>>() == array_param_size(8));
    assert!(align_of::<ArrayParam<2>>() == ArrayLayout::ALIGN);
    assert!(offset_of!(ArrayParam<3>, data) == ArrayLayout::DATA);
    assert!(offset_of!(ArrayParam<3>, shape) == ArrayLayout::extent(0));
    assert!(offset_of!(ArrayParam<3>, strides) == ArrayLayout::stride(3, 0));
};
