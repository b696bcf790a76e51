//! Rust values written as the bytes of their CUDA twins: what `#[derive(KernelParams)]`
//! structs are made of, passed to a kernel as [`super::Arg::Bytes`].

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_their_little_endian_bytes_and_arrays_their_elements_in_order() {
        assert_eq!(0x0102_0304u32.param_bytes(), [4, 3, 2, 1]);
        assert_eq!(true.param_bytes(), [1]);
        assert_eq!([1i16, -1].param_bytes(), [1, 0, 0xff, 0xff]);
        assert_eq!(<[f64; 3]>::SIZE, 24);
        assert_eq!(half::f16::ONE.param_bytes(), 0x3c00u16.to_le_bytes());
    }
}
