//! Example extension: a Rust struct that speaks the CUDA Array Interface to Python.
//!
//! `#[derive(CudaArrayInterface)]` with `#[cai(python)]` gives `Image` a
//! `__cuda_array_interface__` (v3, with its stream) that CuPy, PyTorch, Numba and caijit
//! read, and lets a `#[pyfunction]` take an `Image` from *any* CUDA array object (a
//! PyTorch tensor, a CuPy array, ...), with dtype, rank and contiguity checked.

use cai_runtime::CudaArrayInterface;
use pyo3::prelude::*;

/// A float32 image in device memory: pointer, shape and the stream of its pending work.
#[pyclass(frozen)]
#[derive(CudaArrayInterface)]
#[cai(dtype = f32, python)]
struct Image {
    #[cai(data)]
    ptr: u64,
    #[cai(shape)]
    shape: [usize; 2],
    #[cai(stream)]
    stream: Option<u64>,
}

#[pymethods]
impl Image {
    #[new]
    #[pyo3(signature = (ptr, rows, cols, stream = None))]
    fn new(ptr: u64, rows: usize, cols: usize, stream: Option<u64>) -> Self {
        Image { ptr, shape: [rows, cols], stream }
    }

    #[getter]
    fn shape(&self) -> (usize, usize) {
        (self.shape[0], self.shape[1])
    }
}

/// `(ptr, (rows, cols), stream)` of any 2-D C-contiguous float32 CUDA array.
#[pyfunction]
fn describe(image: Image) -> (u64, (usize, usize), Option<u64>) {
    (image.ptr, (image.shape[0], image.shape[1]), image.stream)
}

/// The same memory seen as one row: a new `Image` that any CAI consumer can read.
#[pyfunction]
fn flatten(image: Image) -> Image {
    Image { ptr: image.ptr, shape: [1, image.shape[0] * image.shape[1]], stream: image.stream }
}

#[pymodule]
fn cai_image(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Image>()?;
    m.add_function(wrap_pyfunction!(describe, m)?)?;
    m.add_function(wrap_pyfunction!(flatten, m)?)?;
    Ok(())
}
