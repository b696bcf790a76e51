use cai_runtime::CudaArrayInterface;

#[derive(CudaArrayInterface)]
#[cai(dtype = f32, layout = "C")]
struct Image {
    #[cai(shape)]
    shape: [usize; 2],
    #[cai(pointer)]
    ptr: u64,
}

fn main() {}
