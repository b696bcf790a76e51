"""Several GPUs (these run where two are present, and skip with the reason elsewhere):
arrays on device 1 launch on device 1 without the caller switching devices, mixing
devices in one launch is an error, caijit arrays made on device 1 are read by CuPy and
PyTorch, and the torch.distributed (NCCL) example agrees with its reference."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import caijit
import caijit.ops as ops


def _why_not() -> str | None:
    from conftest import gpu_unavailable_reason

    why = gpu_unavailable_reason()
    if why is not None:
        return why
    n = caijit.device_count()
    return None if n >= 2 else f"{n} CUDA device here; these tests need 2"


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")

SRC = r"""
extern "C" __global__ void twice_plus_one(const float* x, float* y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = 2.0f * x[i] + 1.0f;
}
"""
rng = np.random.default_rng()


def test_caijit_arrays_on_device_1() -> None:
    k = caijit.kernel(SRC)
    h = rng.standard_normal(5000).astype(np.float32)
    x, y = caijit.to_device(h, device=1), caijit.empty(5000, device=1)
    k[8, 256](x, y, h.size)
    assert y.device == 1
    np.testing.assert_array_equal(y.copy_to_host(), 2 * h + 1)
    s = ops.scale(x, 3.0)  # ops allocate their result beside the input
    assert s.device == 1
    np.testing.assert_allclose(s.copy_to_host(), 3 * h, rtol=1e-6)


def test_cupy_and_torch_arrays_on_device_1_while_device_0_is_current() -> None:
    cupy = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    k = caijit.kernel(SRC)
    h = rng.standard_normal(4096).astype(np.float32)
    with cupy.cuda.Device(1):
        cx = cupy.asarray(h)
        cy = cupy.empty_like(cx)
    assert cupy.cuda.runtime.getDevice() == 0
    k[8, 256](cx, cy, h.size)
    assert cupy.cuda.runtime.getDevice() == 0  # the caller's device is left as it was
    with cupy.cuda.Device(1):
        np.testing.assert_array_equal(cupy.asnumpy(cy), 2 * h + 1)
    tx = torch.from_numpy(h).to("cuda:1")
    ty = torch.empty_like(tx)
    assert torch.cuda.current_device() == 0
    k[8, 256](tx, ty, h.size)
    assert torch.cuda.current_device() == 0
    np.testing.assert_array_equal(ty.cpu().numpy(), 2 * h + 1)


def test_mixing_devices_in_one_launch_is_an_error() -> None:
    k = caijit.kernel(SRC)
    x0, y1 = caijit.zeros(16, device=0), caijit.zeros(16, device=1)
    with pytest.raises(caijit.ArgumentError, match="device 1.*device 0|device 0.*device 1"):
        k[1, 32](x0, y1, 16)


def test_device_1_exports_read_by_cupy_and_torch() -> None:
    cupy = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    h = rng.standard_normal((64, 33)).astype(np.float32)
    a = caijit.to_device(h, device=1)
    with cupy.cuda.Device(1):  # CuPy consumes another device's memory with that device current
        c = cupy.asarray(a)
        assert c.device.id == 1
        np.testing.assert_array_equal(cupy.asnumpy(c), h)
    t = torch.as_tensor(a, device="cuda:1")
    assert t.device.index == 1 and t.data_ptr() == a.ptr
    np.testing.assert_array_equal(t.cpu().numpy(), h)


def test_distributed_example_with_nccl() -> None:
    pytest.importorskip("torch")
    example = pathlib.Path(__file__).resolve().parents[2] / "examples" / "03_distributed.py"
    r = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=300, env=os.environ.copy())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ranks agree" in r.stdout, r.stdout
