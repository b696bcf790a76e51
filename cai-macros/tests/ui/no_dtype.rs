use cai_runtime::CudaArrayInterface;

#[derive(CudaArrayInterface)]
struct Image {
    #[cai(data)]
    ptr: u64,
    #[cai(shape)]
    shape: [usize; 2],
}

fn main() {
    // The stub impl keeps this from adding errors of its own.
    let _ = Image { ptr: 0, shape: [0, 0] }.cai_view();
}
