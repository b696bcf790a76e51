use cai_runtime::CudaArrayInterface;

#[derive(CudaArrayInterface)]
struct Image {
    #[cai(data)]
    ptr: u64,
    #[cai(shape)]
    shape: [usize; 2],
}

fn main() {}
