"""01: a template kernel launched on caijit arrays, then on CuPy and PyTorch arrays if
they are installed. Runs on any machine with an NVIDIA GPU: python examples/01_axpy.py"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np

import caijit

axpy = caijit.kernel(r"""
#include <caijit/caijit.cuh>
template <typename T>
__global__ void axpy(T a, const T* x, T* y, long long n) {
    for (long long i = caijit::global_thread(); i < n; i += caijit::grid_threads()) y[i] = a * x[i] + y[i];
}
""")


def missing_gpu() -> str | None:
    """None where a GPU can be used, else why not."""
    try:
        if caijit.device_count() > 0:
            return None
        return "the CUDA driver reports no device"
    except caijit.CudaNotAvailable as e:
        return str(e)


def main() -> int:
    why = missing_gpu()
    if why is not None:
        print(f"this example needs an NVIDIA GPU: {why}")
        return 0
    n = 1 << 20
    rng = np.random.default_rng()
    x_h = rng.standard_normal(n).astype(np.float32)
    y_h = rng.standard_normal(n).astype(np.float32)
    x, y = caijit.to_device(x_h), caijit.to_device(y_h)
    axpy.forall(n)(np.float32(2), x, y, n)  # compiles axpy<float> once
    assert np.allclose(y.copy_to_host(), 2 * x_h + y_h)
    print("caijit arrays: ok")
    if importlib.util.find_spec("cupy"):
        import cupy

        cx, cy = cupy.asarray(x_h), cupy.asarray(y_h)
        axpy.forall(n)(np.float32(2), cx, cy, n)
        assert np.allclose(cupy.asnumpy(cy), 2 * x_h + y_h)
        print("CuPy arrays: ok")
    if importlib.util.find_spec("torch"):
        import torch

        tx, ty = torch.from_numpy(x_h).cuda(), torch.from_numpy(y_h).cuda()
        axpy.forall(n)(np.float32(2), tx, ty, n)
        assert np.allclose(ty.cpu().numpy(), 2 * x_h + y_h)
        print("PyTorch tensors: ok")
    print(caijit.stats())
    return 0


if __name__ == "__main__":
    sys.exit(main())
