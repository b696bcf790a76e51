"""The derive's Python side, through the example extension (examples/rust-extension):
a Rust type exporting CAI v3 to Python and built from any CAI object (no GPU needed:
pointers are only described), and a Rust function launching a caijit kernel on a
PyTorch or CuPy array whose Rust-owned result CuPy reads (GPU)."""

from __future__ import annotations

from typing import Any

import numpy
import pytest

import caijit

cai_image = pytest.importorskip("cai_image", reason="examples/rust-extension is not built (scripts/setup.sh builds it)")

PTR = 0x7F00_1234_0000


class Producer:
    def __init__(self, **kw: Any) -> None:
        self.__cuda_array_interface__ = {"shape": (3, 4), "typestr": "<f4", "data": (PTR, False), "version": 3, "strides": None, "stream": 7, **kw}


def test_rust_type_exports_cai_v3_with_its_stream() -> None:
    img = cai_image.Image(PTR, 3, 4, stream=2)
    cai = img.__cuda_array_interface__
    assert cai["version"] == 3 and cai["stream"] == 2 and cai["strides"] is None
    i = caijit.parse_interface(img)
    assert (i.shape, i.strides, str(i.dtype), i.ptr) == ((3, 4), (16, 4), "float32", PTR)
    assert caijit.parse_interface(cai_image.Image(0, 0, 5)).ptr == 0  # empty: data (0, readonly)


def test_rust_function_takes_any_cai_object() -> None:
    assert cai_image.describe(Producer()) == (PTR, (3, 4), 7)
    assert cai_image.describe(cai_image.Image(PTR, 2, 8)) == (PTR, (2, 8), None)
    flat = cai_image.flatten(Producer(stream=1))
    assert caijit.parse_interface(flat).shape == (1, 12)


@pytest.mark.parametrize(
    "bad,key",
    [
        ({"typestr": "<f8"}, "typestr"),
        ({"shape": (2, 3, 4)}, "shape"),
        ({"strides": (4, 12)}, "strides"),
        ({"data": (PTR, True)}, "data"),
        ({"stream": 0}, "stream"),
    ],
)
def test_rust_import_checks_and_names_the_key(bad: dict[str, Any], key: str) -> None:
    with pytest.raises(ValueError, match=f"'{key}'"):
        cai_image.describe(Producer(**bad))


def test_objects_without_an_interface_are_type_errors() -> None:
    with pytest.raises(TypeError, match="no __cuda_array_interface__"):
        cai_image.describe(object())


@pytest.mark.gpu
def test_torch_tensor_through_a_rust_kernel_read_by_cupy() -> None:
    torch = pytest.importorskip("torch")
    cupy = pytest.importorskip("cupy")
    t = torch.randn(300, 500, device="cuda")
    out = cai_image.scaled(t, 2.5)
    cai = out.__cuda_array_interface__
    # torch exports no stream: the kernel ran on the legacy default stream, which orders it
    # after torch's default-stream work, and the result says so.
    assert out.shape == (300, 500) and cai["version"] == 3 and cai["stream"] == 1
    c = cupy.asarray(out)
    assert c.data.ptr == cai["data"][0]  # zero-copy
    numpy.testing.assert_allclose(cupy.asnumpy(c), 2.5 * t.cpu().numpy(), rtol=1e-6)


SPIN_FILL = r"""
extern "C" __global__ void spin_fill(float* x, long long n, long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        x[i] = 1.0f + (float)(i % 1000);
}
"""


@pytest.mark.gpu
def test_rust_launch_waits_for_the_cupy_producer_stream() -> None:
    cupy = pytest.importorskip("cupy")
    spin_fill = cupy.RawKernel(SPIN_FILL, "spin_fill")
    s = cupy.cuda.Stream(non_blocking=True)  # no implicit ordering with the default stream
    with s:
        x = cupy.zeros((1024, 1024), dtype=cupy.float32)
        # ~20 ms of spinning before x is written, on s: only the CAI v3 edge from s orders
        # the Rust launch (on the legacy default stream) after it.
        spin_fill((264,), (256,), (x, numpy.int64(x.size), numpy.int64(40_000_000)))
        assert cai_image.describe(x)[2] == s.ptr
        out = cai_image.scaled(x, 4.0)
    expected = 4.0 * (1.0 + (numpy.arange(x.size) % 1000)).astype(numpy.float32).reshape(1024, 1024)
    numpy.testing.assert_array_equal(cupy.asnumpy(cupy.asarray(out)), expected)
