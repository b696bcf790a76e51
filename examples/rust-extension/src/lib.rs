//! Example extension: a Rust struct that speaks the CUDA Array Interface to Python.
//!
//! `#[derive(CudaArrayInterface)]` with `#[cai(python)]` gives `Image` a
//! `__cuda_array_interface__` (v3, with its stream) that CuPy, PyTorch, Numba and caijit
//! read, and lets a `#[pyfunction]` take an `Image` from *any* CUDA array object (a
//! PyTorch tensor, a CuPy array, ...), with dtype, rank and contiguity checked.
//!
//! `scaled` goes the whole way: it takes a tensor from PyTorch as an `Image`, launches a
//! caijit kernel on it, and returns an `OwnedImage` (Rust-owned device memory, also
//! deriving the interface) that CuPy reads with `cupy.asarray`, ordered by the stream the
//! kernel ran on.

use std::sync::Arc;

use cai_runtime::array::DeviceArray;
use cai_runtime::cai::DType;
use cai_runtime::compile::Program;
use cai_runtime::launch::{Arg, LaunchConfig, Num};
use cai_runtime::runtime::{pointer_device, Context, Stream};
use cai_runtime::CudaArrayInterface;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
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

/// A float32 image in device memory owned by Rust (freed, stream-ordered, when Python drops
/// it); `stream` is where the work that wrote it was enqueued, exported as the CAI stream.
#[pyclass(frozen)]
#[derive(CudaArrayInterface)]
#[cai(python)]
struct OwnedImage {
    #[cai(data)]
    data: DeviceArray,
    #[cai(shape)]
    shape: [usize; 2],
    #[cai(stream)]
    stream: u64,
}

#[pymethods]
impl OwnedImage {
    #[getter]
    fn shape(&self) -> (usize, usize) {
        (self.shape[0], self.shape[1])
    }
}

const SCALE: &str = r#"
extern "C" __global__ void scale(const float* x, float* y, float a, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = a * x[i];
}
"#;

fn runtime_error(e: cai_runtime::Error) -> PyErr {
    match e {
        cai_runtime::Error::Argument(_) | cai_runtime::Error::Interface(_) => PyValueError::new_err(e.to_string()),
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

/// `a * image`, computed by a caijit kernel on the image's device into new Rust-owned
/// memory. The launch is ordered after the producer's stream (CAI v3) and the result
/// exports the stream it ran on; nothing waits on the host.
#[pyfunction]
fn scaled(py: Python<'_>, image: Image, a: f32) -> PyResult<OwnedImage> {
    let input = image.cai_view().map_err(|e| PyValueError::new_err(e.to_string()))?;
    py.detach(|| -> cai_runtime::Result<OwnedImage> {
        let ctx = Context::new(pointer_device(input.ptr())?.unwrap_or(0))?;
        let out = DeviceArray::empty(&ctx, &image.shape, DType::F32, &Arc::new(Stream::legacy()))?;
        let n = image.shape[0] * image.shape[1];
        let args = [
            Arg::Array(&input),
            Arg::Array(&out.view()),
            Arg::Scalar { value: Num::Float(a.into()), dtype: None },
            Arg::Scalar { value: Num::Int(n as i128), dtype: None },
        ];
        // No stream given: the protocol launches on the producers' common stream, else the
        // legacy default stream, and returns the one it used.
        // Compiled once per process (caijit's memory and disk caches), loaded once per device.
        let scale = ctx.compile(&Program::new(SCALE))?.kernel("scale")?;
        let stream = scale.launch(&LaunchConfig::for_elements(n, 256), &args, None, true)?;
        Ok(OwnedImage { data: out, shape: image.shape, stream })
    })
    .map_err(runtime_error)
}

#[pymodule]
fn cai_image(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Image>()?;
    m.add_class::<OwnedImage>()?;
    m.add_function(wrap_pyfunction!(scaled, m)?)?;
    m.add_function(wrap_pyfunction!(describe, m)?)?;
    m.add_function(wrap_pyfunction!(flatten, m)?)?;
    Ok(())
}
