"""DLPack import: capsules read on the CPU (NumPy's), CUDA producers seen only through
__dlpack__ on the GPU."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import caijit
from caijit import _dlpack


def test_capsule_parsing_matches_numpy() -> None:
    a = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    try:
        capsule = a.__dlpack__(max_version=(1, 0))
    except TypeError:
        capsule = a.__dlpack__()
    cai = _dlpack.interface_from_capsule(capsule)
    assert cai["shape"] == a.shape
    assert cai["strides"] == a.strides
    assert cai["typestr"] == "<f4"
    assert cai["data"][0] == a.__array_interface__["data"][0]
    assert cai["stream"] is None


def test_dtype_codes() -> None:
    assert _dlpack._typestr(2, 16, 1) == "<f2"
    assert _dlpack._typestr(4, 16, 1) == "<V2"
    assert _dlpack._typestr(6, 8, 1) == "|b1"
    assert _dlpack._typestr(5, 128, 1) == "<c16"
    with pytest.raises(caijit.InterfaceError, match="lanes"):
        _dlpack._typestr(2, 32, 4)


def test_host_dlpack_is_refused() -> None:
    k = caijit.kernel('extern "C" __global__ void k(const float* x) {}')

    class OnlyDLPack:
        def __init__(self, a: Any) -> None:
            self.a = a

        def __dlpack__(self, **kw: Any) -> Any:
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self) -> Any:
            return self.a.__dlpack_device__()

    with pytest.raises(caijit.ArgumentError, match="host memory"):
        k[1, 1](OnlyDLPack(np.zeros(3, np.float32)))


class OnlyDLPack:
    """A producer that speaks nothing but DLPack (records the stream it was asked for)."""

    def __init__(self, a: Any) -> None:
        self.a = a
        self.streams: list[Any] = []

    def __dlpack__(self, stream: Any = None, **kw: Any) -> Any:
        self.streams.append(stream)
        return self.a.__dlpack__(stream=stream, **kw)

    def __dlpack_device__(self) -> Any:
        return self.a.__dlpack_device__()


@pytest.mark.gpu
def test_cuda_dlpack_producers() -> None:
    torch = pytest.importorskip("torch")
    k = caijit.kernel(r"""
        #include <caijit/caijit.cuh>
        template <typename T, int N>
        __global__ void twice(caijit::Array<const T, N> x, caijit::Array<T, N> y) {
            for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < y.size(); i += (long long)gridDim.x * blockDim.x) y[i] = x[i] + x[i];
        }""")
    x = torch.randn(33, 17, device="cuda").t()  # strided
    y = torch.empty(17, 33, device="cuda")
    src = OnlyDLPack(x)
    k.forall(y.numel())(src, y)
    torch.testing.assert_close(y, 2 * x)
    assert src.streams == [1], "asked to order its work before the legacy stream it launched on"
    s = caijit.Stream()
    k.forall(y.numel(), stream=s)(src, y)
    s.synchronize()
    assert src.streams[-1] == s.handle
    bf = OnlyDLPack(torch.randn(64, device="cuda", dtype=torch.bfloat16))
    out = torch.empty(64, device="cuda", dtype=torch.bfloat16)
    k.forall(64)(bf, out)
    torch.testing.assert_close(out, 2 * bf.a)


@pytest.mark.gpu
def test_caijit_arrays_export_dlpack() -> None:
    torch = pytest.importorskip("torch")
    h = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = caijit.to_device(h)
    assert a.__dlpack_device__() == (2, 0)
    t = torch.from_dlpack(a)
    assert t.device.type == "cuda" and t.shape == (3, 4)
    np.testing.assert_array_equal(t.cpu().numpy(), h)
    t.mul_(2)  # zero-copy: the caijit array sees the write
    np.testing.assert_array_equal(a.copy_to_host(), 2 * h)
    del a  # the tensor keeps the memory alive
    np.testing.assert_array_equal(t.cpu().numpy(), 2 * h)
    # A consumer on another stream is ordered after the array's pending work.
    s = caijit.Stream()
    b = caijit.to_device(np.ones(1000, np.float32), stream=s)
    consumer = torch.cuda.Stream()  # torch's default stream is handle 0, which DLPack forbids
    before = caijit.stats()["waits"]
    cap = b.__dlpack__(stream=consumer.cuda_stream)
    assert type(cap).__name__ == "PyCapsule" and _dlpack._is_valid(id(cap), b"dltensor")
    assert caijit.stats()["waits"] == before + 1, "the consumer's stream waits for the array's stream"
    with pytest.raises(caijit.ArgumentError, match="stream=0"):
        b.__dlpack__(stream=0)
    jax = pytest.importorskip("jax")
    c = caijit.to_device(np.arange(5, dtype=np.int32))
    try:
        j = jax.dlpack.from_dlpack(c)
    except Exception as e:  # noqa: BLE001 - JAX without a GPU backend
        pytest.skip(f"jax cannot take a CUDA DLPack tensor here: {e}")
    np.testing.assert_array_equal(np.asarray(j), np.arange(5))
