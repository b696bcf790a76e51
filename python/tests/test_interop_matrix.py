"""The interop matrix: producers × parameter kinds × dtypes, checked against NumPy, plus
non-contiguous views (slices, transposes, negative and zero strides, Fortran order, ranks
0–4, empty arrays) through caijit::Array<T, N>. Outputs are poisoned before each launch."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import caijit
from conftest import has

pytestmark = pytest.mark.gpu

SRC = r"""
#include <caijit/caijit.cuh>
template <typename T>
__global__ void copy_ptr(const T* x, T* y, long long n) {
    for (long long i = caijit::global_thread(); i < n; i += caijit::grid_threads()) y[i] = x[i];
}
template <typename T>
__global__ void copy_mut(T* x, T* y, long long n) {  // non-const input pointer
    for (long long i = caijit::global_thread(); i < n; i += caijit::grid_threads()) y[i] = x[i];
}
template <typename T, int N>
__global__ void copy_arr(caijit::Array<const T, N> x, caijit::Array<T, N> y) {
    const long long n = y.size();
    for (long long i = caijit::global_thread(); i < n; i += caijit::grid_threads()) y[i] = x[i];
}
"""

DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
          np.float16, np.float32, np.float64, np.complex64, np.complex128]

rng = np.random.default_rng()


def random(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -(2**40)), min(info.max, 2**40), shape, dtype=np.int64 if dt.kind == "i" else np.uint64).astype(dt)
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    return rng.standard_normal(shape).astype(dt)


def poison(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    dt = np.dtype(dtype)
    return np.full(shape, 0x5A if dt.kind in "biu" else np.nan, dtype=dt) if dt.kind != "b" else np.ones(shape, dt)


class PlainCAI:
    """An object that carries nothing but a CAI dict (and keeps its owner alive)."""

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        self.__cuda_array_interface__ = dict(owner.__cuda_array_interface__)


def producers() -> dict[str, tuple[Callable[[np.ndarray], Any], Callable[[Any], np.ndarray]]]:
    out: dict[str, tuple[Callable[[np.ndarray], Any], Callable[[Any], np.ndarray]]] = {
        "caijit": (caijit.to_device, lambda a: a.copy_to_host()),
        "plain": (lambda h: PlainCAI(caijit.to_device(h)), lambda a: a.owner.copy_to_host()),
    }
    if has("cupy"):
        import cupy

        out["cupy"] = (cupy.asarray, cupy.asnumpy)
    if has("torch"):
        import torch

        def to_torch(h: np.ndarray) -> Any:
            return torch.from_numpy(np.ascontiguousarray(h)).cuda() if h.dtype.kind != "u" or h.dtype == np.uint8 else None

        out["torch"] = (to_torch, lambda t: t.cpu().numpy())
    if has("numba"):
        from numba import cuda

        out["numba"] = (cuda.to_device, lambda d: d.copy_to_host())
    return out


@pytest.fixture(scope="module")
def m() -> caijit.Module:
    return caijit.module(SRC)


@pytest.mark.parametrize("producer", ["caijit", "plain", "cupy", "torch", "numba"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_matrix(m: caijit.Module, producer: str, dtype: Any) -> None:
    p = producers()
    if producer not in p:
        pytest.skip(f"{producer} is not installed")
    make, back = p[producer]
    shape = (7, 33)
    x_h, y_h = random(shape, dtype), poison(shape, dtype)
    x, y = make(x_h), make(y_h)
    if x is None:
        pytest.skip(f"{producer} has no {np.dtype(dtype).name}")
    n = x_h.size
    for kernel, args in (("copy_ptr", (x, y, n)), ("copy_mut", (x, y, n)), ("copy_arr", (x, y))):
        y_reset = make(y_h)
        args = tuple(y_reset if a is y else a for a in args)
        m[kernel].forall(n)(*args)
        np.testing.assert_array_equal(back(y_reset), x_h, err_msg=f"{kernel} {producer} {np.dtype(dtype).name}")


def view(base: caijit.DeviceArray, shape: tuple[int, ...], strides: tuple[int, ...], offset_bytes: int = 0) -> caijit.Interface:
    cai = dict(base.__cuda_array_interface__)
    cai.update(shape=shape, strides=strides, data=(base.ptr + offset_bytes, False))
    return caijit.parse_interface(cai)


@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float64, np.complex128], ids=lambda d: np.dtype(d).name)
def test_strided_views_ranks_0_to_4(m: caijit.Module, dtype: Any) -> None:
    for shape in [(), (5,), (4, 6), (3, 4, 5), (2, 3, 4, 5)]:
        h = random(shape, dtype)
        d = caijit.to_device(h)
        cases: list[tuple[str, np.ndarray, caijit.Interface]] = [("C order", h, caijit.as_cuda_array(d))]
        if len(shape) >= 2:
            t = h.transpose()
            cases.append(("transpose (F order)", t, view(d, t.shape, t.strides)))
        if len(shape) >= 1:
            rev = h[::-1]
            cases.append(("negative stride", rev, view(d, rev.shape, rev.strides, (shape[0] - 1) * h.strides[0])))
            sl = h[..., ::2]
            cases.append(("step-2 slice", sl, view(d, sl.shape, sl.strides)))
            bc = np.broadcast_to(h[..., :1], shape)
            cases.append(("zero stride (broadcast)", bc, view(d, bc.shape, bc.strides)))
        for label, want, x in cases:
            y = caijit.to_device(poison(want.shape, dtype))
            m["copy_arr"].forall(max(want.size, 1))(x, y)
            np.testing.assert_array_equal(y.copy_to_host(), want, err_msg=f"{label} {shape} {np.dtype(dtype).name}")


def test_empty_arrays_launch(m: caijit.Module) -> None:
    for shape in [(0,), (3, 0), (0, 4, 5)]:
        x = caijit.zeros(shape, "float32")
        y = caijit.zeros(shape, "float32")
        assert x.__cuda_array_interface__["data"][0] == 0
        m["copy_arr"].forall(1)(x, y)
        m["copy_ptr"].forall(1)(x, y, 0)
    caijit.Stream().synchronize()


def test_second_call_of_a_signature_does_not_compile(m: caijit.Module) -> None:
    x = caijit.to_device(random((64,), np.float32))
    y = caijit.zeros(64, "float32")
    m["copy_ptr"].forall(64)(x, y, 64)
    before = caijit.stats()
    for _ in range(10):
        m["copy_ptr"].forall(64)(x, y, 64)
    after = caijit.stats()
    assert after["compiles"] == before["compiles"]
    assert after["memory_cache_hits"] == before["memory_cache_hits"], "the launcher keeps the loaded kernel"
    assert after["launches"] - before["launches"] == 10
