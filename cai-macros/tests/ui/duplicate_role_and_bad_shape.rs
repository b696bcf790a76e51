use cai_runtime::CudaArrayInterface;

#[derive(CudaArrayInterface)]
#[cai(dtype = f32)]
struct Twice {
    #[cai(data)]
    a: u64,
    #[cai(data)]
    b: u64,
    #[cai(shape)]
    shape: [usize; 2],
}

#[derive(CudaArrayInterface)]
#[cai(dtype = f32)]
struct BadShape {
    #[cai(data)]
    a: u64,
    #[cai(shape)]
    shape: [u32; 2],
}

fn main() {}
