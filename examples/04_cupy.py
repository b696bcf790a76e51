"""04: caijit for CuPy users: a custom kernel and library ops on CuPy arrays, on CuPy
streams, with results CuPy reads without copying.

    python examples/04_cupy.py        (needs CuPy and an NVIDIA GPU)

- `caijit::Array<const float, 2>` takes a strided CuPy view (here a transpose) as it is:
  no copy to make it contiguous first.
- Launched with no stream, caijit uses the one every argument's interface names: CuPy
  exports its current stream (CAI v3), so the kernel runs on `s`, in order with CuPy's
  own work there, with no synchronisation.
- caijit.ops on CuPy arrays give CuPy arrays, allocated by CuPy's memory pool on CuPy's
  current stream (the stream the op runs on).
"""

from __future__ import annotations

import sys

import numpy as np

import caijit
import caijit.ops as ops

ROW_NORMS = caijit.kernel(r"""
#include <caijit/caijit.cuh>
// out[i] = sqrt(sum_j x[i, j]^2) for any 2-D float view (any strides).
extern "C" __global__ void row_norms(caijit::Array<const float, 2> x, float* out) {
    for (long long i = caijit::global_thread(); i < x.shape[0]; i += caijit::grid_threads()) {
        float acc = 0.0f;
        for (long long j = 0; j < x.shape[1]; ++j) acc += x(i, j) * x(i, j);
        out[i] = sqrtf(acc);
    }
}
""")


def main() -> int:
    try:
        import cupy
    except ImportError:
        print("this example needs CuPy (pip install cupy-cuda13x) and an NVIDIA GPU: CuPy is not installed")
        return 0
    try:
        devices = caijit.device_count()
        why = "the CUDA driver reports no device"
    except caijit.CudaNotAvailable as error:
        devices, why = 0, str(error)
    if devices == 0:
        print(f"this example needs an NVIDIA GPU: {why}")
        return 0
    rng = np.random.default_rng()
    h = rng.standard_normal((300, 500)).astype(np.float32)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        a = cupy.asarray(h) * 2.0  # CuPy work on s
        norms = cupy.empty(500, dtype=cupy.float32)
        ROW_NORMS.forall(500)(a.T, norms)  # the transpose, as a strided view, on s
        soft = ops.softmax(a)  # a caijit op on a CuPy array: a CuPy array
        s.synchronize()
    np.testing.assert_allclose(cupy.asnumpy(norms), np.linalg.norm(2 * h, axis=0), rtol=1e-4)
    e = np.exp(2 * h - (2 * h).max(axis=1, keepdims=True))
    np.testing.assert_allclose(cupy.asnumpy(soft), e / e.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-7)
    print("custom kernel on a strided CuPy view, on CuPy's stream: ok")
    assert isinstance(soft, cupy.ndarray)
    print("caijit.ops.softmax on a CuPy array, a CuPy array back: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
