"""Launches on the GPU with caijit's own arrays and with CuPy, PyTorch, Numba and JAX
arrays; the stream protocol observed through counters and through results.

Skips without a GPU; fails with CAIJIT_REQUIRE_GPU=1. Inputs are fresh random numbers,
outputs are poisoned before each launch."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

import caijit
from conftest import DLPackOnly, has

pytestmark = pytest.mark.gpu

AXPY = r"""
#include <caijit/caijit.cuh>
template <typename T>
__global__ void axpy(T a, const T* __restrict__ x, T* __restrict__ y, long long n) {
    for (long long i = caijit::global_thread(); i < n; i += caijit::grid_threads()) y[i] = a * x[i] + y[i];
}
"""

COPY2D = r"""
#include <caijit/caijit.cuh>
template <typename T>
__global__ void copy2d(caijit::Array<const T, 2> src, caijit::Array<T, 2> dst) {
    long long n = src.size();
    for (long long i = caijit::global_thread(); i < n; i += caijit::grid_threads()) {
        long long r = i / src.shape[1], c = i % src.shape[1];
        dst(r, c) = src(r, c);
    }
}
"""

SLOW_FILL = r"""
extern "C" __global__ void slow_fill(float* y, float v, long long n, long long cycles) {
    if (threadIdx.x == 0) { long long t0 = clock64(); while (clock64() - t0 < cycles) {} }
    __syncthreads();
    for (long long i = threadIdx.x; i < n; i += blockDim.x) y[i] = v;
}
extern "C" __global__ void copy(const float* x, float* y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) y[i] = x[i];
}
"""

rng = np.random.default_rng()


@pytest.fixture(scope="module")
def axpy() -> caijit.Kernel:
    return caijit.kernel(AXPY)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.float16])
def test_axpy_on_caijit_arrays_every_dtype(axpy: caijit.Kernel, dtype: type) -> None:
    n = 50_001
    x_h = (rng.standard_normal(n) * 10).astype(dtype)
    y_h = (rng.standard_normal(n) * 10).astype(dtype)
    x, y = caijit.to_device(x_h), caijit.to_device(y_h)
    a = dtype(3)
    axpy.forall(n)(a, x, y, n)
    want = (a * x_h.astype(np.float64) + y_h).astype(dtype)
    tol = 1e-2 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(y.copy_to_host().astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


def test_deduction_errors_and_argument_errors(axpy: caijit.Kernel) -> None:
    x = caijit.to_device(rng.standard_normal(16).astype(np.float32))
    y = caijit.to_device(rng.standard_normal(16))  # float64
    with pytest.raises(caijit.ArgumentError, match="template parameter T"):
        axpy[1, 32](2.0, x, y, 16)
    with pytest.raises(caijit.ArgumentError, match="takes 4 arguments, got 3"):
        axpy[1, 32](np.float32(2.0), x, x)
    with pytest.raises(caijit.ArgumentError, match="argument 1: a numpy.ndarray is host memory"):
        axpy[1, 32](np.float32(2.0), np.zeros(16, np.float32), x, 16)
    with pytest.raises(caijit.ArgumentError, match="out of range"):
        axpy.specialize("float")[1, 32](2.0, x, x, 2**70)
    with pytest.raises(caijit.ArgumentError, match="no launch configuration"):
        axpy(1.0, x, x, 16)


def test_strided_views_through_caijit_array(axpy: caijit.Kernel) -> None:
    k = caijit.kernel(COPY2D)
    src_h = rng.standard_normal((64, 48)).astype(np.float32)
    src = caijit.to_device(src_h)
    dst = caijit.to_device(np.full((48, 64), np.nan, np.float32))
    t = caijit.parse_interface({**src.__cuda_array_interface__, "shape": (48, 64), "strides": (4, 48 * 4)})
    k.forall(t.size)(t, dst)
    np.testing.assert_array_equal(dst.copy_to_host(), src_h.T)
    # Negative strides: the rows reversed.
    rev = caijit.parse_interface(
        {**src.__cuda_array_interface__, "data": (src.ptr + 63 * 48 * 4, False), "strides": (-48 * 4, 4)}
    )
    out = caijit.to_device(np.full((64, 48), np.nan, np.float32))
    k.forall(rev.size)(rev, out)
    np.testing.assert_array_equal(out.copy_to_host(), src_h[::-1])


def test_caijit_arrays_export_v3_with_stream() -> None:
    s = caijit.Stream()
    a = caijit.zeros((3, 4), "int32", stream=s)
    cai = a.__cuda_array_interface__
    assert cai["version"] == 3 and cai["stream"] == s.handle and cai["strides"] is None
    assert caijit.zeros((0, 4)).__cuda_array_interface__["data"] == (0, False)
    assert caijit.zeros(4).__cuda_array_interface__["stream"] == 1


def test_a_view_of_a_caijit_array_keeps_the_array_alive() -> None:
    """`as_cuda_array` of a temporary caijit array: the view holds the array, so its memory
    is not freed (and handed to the next allocation) while the view is used."""
    import gc

    fill = caijit.kernel('extern "C" __global__ void fill(float* x, int n) { if (threadIdx.x < n) x[threadIdx.x] = 7.0f; }')
    view = caijit.as_cuda_array(caijit.zeros(64))
    gc.collect()
    other = caijit.zeros(64)  # would get the temporary's memory back from the pool
    assert other.__cuda_array_interface__["data"][0] != view.__cuda_array_interface__["data"][0]
    fill[1, 64](view, 64)
    np.testing.assert_array_equal(other.copy_to_host(), np.zeros(64, np.float32))


def test_a_view_of_a_dlpack_only_producer_holds_its_capsule() -> None:
    a = caijit.to_device(np.arange(6, dtype=np.float32))
    view = caijit.as_cuda_array(DLPackOnly(a))
    cai = view.__cuda_array_interface__
    assert (cai["shape"], cai["typestr"], cai["data"][0]) == ((6,), "<f4", a.__cuda_array_interface__["data"][0])


def test_stream_protocol_orders_both_ways() -> None:
    m = caijit.module(SLOW_FILL)
    slow, copy = m["slow_fill"], m["copy"]
    a, c = caijit.Stream(), caijit.Stream()
    n = 1 << 16
    x = caijit.zeros(n, stream=a)
    y = caijit.zeros(n, stream=a)
    z = caijit.zeros(n, stream=a)
    a.synchronize()
    before = caijit.stats()
    slow[1, 256, a](x, 7.0, n, 100_000_000)  # ~50 ms, then x = 7
    copy[64, 256, c](x, y, n)  # on c: must wait for a
    after = caijit.stats()
    copy[64, 256, a](y, z, n)  # on a: must come after the copy on c (reverse edge)
    assert after["waits"] - before["waits"] == 1
    assert after["reverse_waits"] - before["reverse_waits"] == 1
    assert after["host_syncs"] == before["host_syncs"]
    assert (z.copy_to_host() == 7).all()


@pytest.mark.parametrize("dtype", ["float32", "complex128", "int8", "bool"])
@pytest.mark.parametrize("shape", [(0,), (3, 5), (2, 0, 4), ()])
def test_copy_to_host_hands_out_a_writable_array_of_its_own(dtype: str, shape: tuple[int, ...]) -> None:
    host = (np.arange(int(np.prod(shape)), dtype=np.int64) % 7).astype(dtype).reshape(shape)
    # Any host layout (numpy.asfortranarray makes a 0-d array 1-d); a 0-d array stays 0-d.
    d = caijit.to_device(np.asfortranarray(host) if host.ndim else host)
    got = d.copy_to_host()
    assert (got.shape, got.dtype) == (host.shape, host.dtype)
    np.testing.assert_array_equal(got, host)
    assert got.flags.writeable
    if got.size:
        got.flat[0] = 1
        again = d.copy_to_host()
        np.testing.assert_array_equal(again, host)  # the device array is unchanged
        assert not np.shares_memory(got, again)


def test_contiguous_copies_follow_the_stream_protocol() -> None:
    """`ops.ascontiguous` of a contiguous array is the driver's copy, ordered as a launch."""
    import caijit.ops as ops

    slow = caijit.module(SLOW_FILL)["slow_fill"]
    a, c = caijit.Stream(), caijit.Stream()
    n = 1 << 16
    x, z = caijit.zeros(n, stream=a), caijit.zeros(n, stream=a)
    y = caijit.zeros(n, stream=c)
    a.synchronize()
    c.synchronize()
    before = caijit.stats()
    slow[1, 256, a](x, 7.0, n, 100_000_000)  # ~50 ms, then x = 7
    ops.ascontiguous(x, out=y, stream=c)  # on c: must wait for a
    ops.ascontiguous(y, out=z, stream=a)  # on a: must wait for the copy on c
    after = caijit.stats()
    assert after["copies"] - before["copies"] == 2
    assert after["waits"] - before["waits"] == 2
    assert after["reverse_waits"] - before["reverse_waits"] == 2
    assert after["host_syncs"] == before["host_syncs"]
    assert (z.copy_to_host() == 7).all()


def test_reductions_wait_for_their_producer_and_add_no_streams() -> None:
    """A whole-array sum reads x after its producer's kernel; its scratch lives on the
    stream the sum runs on, so the only waits are for x's producer stream."""
    import caijit.ops as ops

    slow = caijit.module(SLOW_FILL)["slow_fill"]
    a, c = caijit.Stream(), caijit.Stream()
    n = 1 << 16
    x = caijit.zeros(n, stream=a)
    out_c, out_a = caijit.zeros((), stream=c), caijit.zeros((), stream=a)
    a.synchronize()
    c.synchronize()
    before = caijit.stats()
    slow[1, 256, a](x, 7.0, n, 100_000_000)  # ~50 ms, then x = 7
    ops.sum(x, out=out_c, stream=c)  # two kernels on c: the first waits for a
    mid = caijit.stats()
    ops.sum(x, out=out_a)  # x and out on a: the sum runs on a, nothing to wait for
    after = caijit.stats()
    assert (mid["waits"] - before["waits"], mid["reverse_waits"] - before["reverse_waits"]) == (1, 1)
    assert after["waits"] == mid["waits"] and after["reverse_waits"] == mid["reverse_waits"]
    assert after["host_syncs"] == before["host_syncs"]
    assert out_c.copy_to_host() == out_a.copy_to_host() == 7 * n


def test_contiguous_copies_check_their_arrays() -> None:
    a, b = caijit.zeros((4, 6)), caijit.zeros(24, "int32")
    with pytest.raises(caijit.ArgumentError, match="differ"):
        caijit._native.copy_contiguous(a, b)

    class Strided:
        __cuda_array_interface__ = {
            "shape": (4, 3), "strides": (24, 8), "typestr": "<f4", "data": (a.__cuda_array_interface__["data"][0], False), "version": 3,
        }

    with pytest.raises(caijit.ArgumentError, match="copy source: the array is not C-contiguous"):
        caijit._native.copy_contiguous(Strided(), caijit.zeros(12))


@pytest.mark.skipif(not has("cupy"), reason="CuPy is not installed")
def test_cupy_arrays_and_streams(axpy: caijit.Kernel) -> None:
    import cupy

    n = 100_000
    x = cupy.asarray(rng.standard_normal(n).astype(np.float32))
    y = cupy.asarray(rng.standard_normal(n).astype(np.float32))
    y0 = y.copy()
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        before = caijit.stats()
        axpy.forall(n)(np.float32(2), x, y, n)  # CuPy exports its current stream: s
        after = caijit.stats()
        s.synchronize()
    assert after["waits"] == before["waits"], "one common producer stream: launched on it, no waits"
    cupy.testing.assert_allclose(y, 2 * x + y0, rtol=1e-6)
    # caijit arrays read by CuPy, zero-copy, ordered by the exported stream.
    c = caijit.to_device(np.arange(10, dtype=np.float64))
    assert cupy.asarray(c).sum().item() == 45.0
    # Explicit stream objects: CuPy's .ptr.
    y1 = y.copy()
    axpy[(n + 255) // 256, 256, s](np.float32(1), x, y, n)
    s.synchronize()
    cupy.testing.assert_allclose(y, x + y1, rtol=1e-6)
    # CuPy's null stream object (ptr 0) is the legacy default stream, not an error.
    y2 = y.copy()
    axpy[(n + 255) // 256, 256, cupy.cuda.Stream.null](np.float32(1), x, y, n)
    cupy.testing.assert_allclose(y, x + y2, rtol=1e-6)
    with pytest.raises(caijit.ArgumentError, match="ambiguous"):
        axpy[1, 32, 0](np.float32(1), x, y, n)  # a bare 0 is refused, as CAI refuses it


@pytest.mark.skipif(not has("torch"), reason="PyTorch is not installed")
def test_torch_tensors_streams_and_readonly(axpy: caijit.Kernel) -> None:
    import torch

    n = 100_000
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    want = 0.5 * x + y
    axpy.forall(n)(np.float32(0.5), x, y, n)  # v2, no stream: the legacy default stream
    torch.testing.assert_close(y, want)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y2 = y.clone()
        axpy[(n + 255) // 256, 256, s](np.float32(1.0), x, y2, n)  # .cuda_stream
    s.synchronize()
    torch.testing.assert_close(y2, x + y)
    # PyTorch's default stream (cuda_stream 0) is the legacy default stream.
    y3 = y.clone()
    axpy[(n + 255) // 256, 256, torch.cuda.default_stream()](np.float32(1.0), x, y3, n)
    torch.testing.assert_close(y3, x + y)
    # Non-contiguous tensor for a pointer parameter: a clear error.
    with pytest.raises(caijit.ArgumentError, match="C-contiguous"):
        axpy[1, 32](np.float32(1), x[::2], y[: n // 2], n // 2)
    # caijit arrays consumed by PyTorch.
    c = caijit.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))
    t = torch.as_tensor(c, device="cuda")
    assert t.sum().item() == 15.0


@pytest.mark.skipif(not has("torch"), reason="PyTorch is not installed")
def test_launch_inside_cuda_graph_capture(axpy: caijit.Kernel) -> None:
    import torch

    n = 4096
    x = torch.randn(n, device="cuda")
    y = torch.zeros(n, device="cuda")
    other = caijit.Stream()
    z = caijit.zeros(n, stream=other)  # exports a stream outside the capture
    k = axpy.specialize("float")
    g = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        k[(n + 255) // 256, 256, torch.cuda.current_stream()](2.0, x, y, n)
        k[(n + 255) // 256, 256, torch.cuda.current_stream()](1.0, x, z, n)
    y.zero_()
    g.replay()
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, 4 * x)
    torch.testing.assert_close(torch.as_tensor(z, device="cuda"), 2 * x)


@pytest.mark.skipif(not has("numba"), reason="Numba is not installed")
def test_numba_device_arrays(axpy: caijit.Kernel) -> None:
    from numba import cuda

    n = 10_000
    x_h = rng.standard_normal(n)
    y_h = rng.standard_normal(n)
    x, y = cuda.to_device(x_h), cuda.to_device(y_h)
    axpy.forall(n)(np.float64(2.0), x, y, n)
    np.testing.assert_allclose(y.copy_to_host(), 2 * x_h + y_h)
    # Numba reads caijit arrays.
    c = caijit.to_device(x_h)
    np.testing.assert_array_equal(cuda.as_cuda_array(c).copy_to_host(), x_h)


@pytest.mark.skipif(not has("jax"), reason="JAX is not installed")
def test_jax_readonly_arrays(axpy: caijit.Kernel) -> None:
    import jax.numpy as jnp

    n = 1000
    x_h = rng.standard_normal(n).astype(np.float32)
    x = jnp.asarray(x_h)
    if not hasattr(x, "__cuda_array_interface__"):
        pytest.skip("this JAX does not export __cuda_array_interface__ (CPU backend?)")
    y = caijit.to_device(np.ones(n, np.float32))
    axpy.forall(n)(np.float32(2), x, y, n)  # const T* accepts readonly
    np.testing.assert_allclose(y.copy_to_host(), 2 * x_h + 1, rtol=1e-6)
    with pytest.raises(caijit.ArgumentError, match="readonly"):
        axpy.forall(n)(np.float32(2), y, x, n)


def test_many_threads_share_kernels_and_streams(axpy: caijit.Kernel, in_threads: Callable[[Callable[[int], None], int], None]) -> None:
    """8 threads x 10,000 launches: four on their own streams, four sharing one."""
    k = axpy.specialize("float")
    n = 4096
    shared = caijit.Stream()
    before = caijit.stats()["launches"]

    def work(seed: int) -> None:
        s = shared if seed % 2 else caijit.Stream()
        r = np.random.default_rng(seed)
        x_h = r.integers(-8, 8, n).astype(np.float32)
        x = caijit.to_device(x_h, stream=s)
        y = caijit.zeros(n, stream=s)
        launcher = k[(n + 255) // 256, 256]
        for _ in range(10_000):
            launcher(1.0, x, y, n)
        np.testing.assert_array_equal(y.copy_to_host(), 10_000 * x_h)

    in_threads(work, 8)
    assert caijit.stats()["launches"] - before == 80_000


def _same_view(obj: object, stream: object = "the interface's") -> None:
    """The fast path reads what the interface says; `stream` is the producer stream the
    fast path gives instead, where caijit knows better (PyTorch's current stream)."""
    fast = caijit._native.launch_view(obj)
    slow = caijit.parse_interface(obj)
    assert (fast.shape, fast.dtype, fast.readonly) == (slow.shape, slow.dtype, slow.readonly)
    assert fast.stream == (slow.stream if stream == "the interface's" else stream)
    if fast.size:  # an empty array's pointer and strides address nothing
        assert (fast.ptr, fast.strides) == (slow.ptr, slow.strides)


@pytest.mark.skipif(not has("cupy"), reason="CuPy is not installed")
def test_cupy_fast_path_matches_the_interface() -> None:
    import cupy

    a = cupy.arange(60, dtype=cupy.float32).reshape(3, 4, 5)
    for v in (a, a.T, a[:, ::2, ::-1], a[1], cupy.zeros((0, 3)), cupy.zeros((), cupy.int8)):
        _same_view(v)
    with cupy.cuda.Stream(non_blocking=True):
        _same_view(a)


@pytest.mark.skipif(not has("torch"), reason="PyTorch is not installed")
def test_torch_fast_path_matches_the_interface() -> None:
    import torch

    t = torch.arange(60, device="cuda", dtype=torch.float64).reshape(3, 4, 5)
    # PyTorch's interface names no stream; its tensors' work is on its current stream,
    # which caijit orders against (the legacy stream, 1, for PyTorch's default stream).
    for v in (t, t.transpose(0, 2), t[:, ::2, 1:], t[1], torch.zeros(0, 3, device="cuda"), torch.zeros((), device="cuda", dtype=torch.int16)):
        _same_view(v, stream=1)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        _same_view(t, stream=side.cuda_stream)
    with pytest.raises(caijit.InterfaceError) as refused:  # torch's own refusal, as the cause
        caijit._native.launch_view(torch.zeros(3, device="cuda", requires_grad=True))
    assert isinstance(refused.value.__cause__, RuntimeError) and "requires grad" in str(refused.value.__cause__)
    with pytest.raises(caijit.ArgumentError, match="host memory"):
        caijit._native.launch_view(torch.zeros(3))


COOP = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// Grid-wide sum with one grid synchronisation (needs a cooperative launch).
extern "C" __global__ void grid_sum(const float* x, float* partial, float* out, int n) {
    cg::grid_group grid = cg::this_grid();
    __shared__ float acc;
    if (threadIdx.x == 0) acc = 0.f;
    __syncthreads();
    float s = 0.f;
    for (long long i = grid.thread_rank(); i < n; i += grid.size()) s += x[i];
    atomicAdd(&acc, s);
    __syncthreads();
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
    grid.sync();
    if (grid.thread_rank() == 0) {
        float t = 0.f;
        for (unsigned b = 0; b < gridDim.x; ++b) t += partial[b];
        *out = t;
    }
}

// Each block writes its rank within its thread-block cluster.
extern "C" __global__ void cluster_rank(int* out) {
    if (threadIdx.x == 0) out[blockIdx.x] = (int)cg::this_cluster().block_rank();
}
"""


def test_cooperative_and_cluster_launches() -> None:
    m = caijit.module(COOP)
    n = 1 << 16
    x_h = rng.standard_normal(n).astype(np.float32)
    x = caijit.to_device(x_h)
    partial = caijit.zeros(32)
    out = caijit.to_device(np.array([np.nan], np.float32))
    m["grid_sum"].launch(x, partial, out, n, grid=32, block=256, cooperative=True)
    np.testing.assert_allclose(out.copy_to_host()[0], x_h.astype(np.float64).sum(), rtol=1e-3, atol=1e-2)
    ranks = caijit.to_device(np.full(16, -1, np.int32))
    m["cluster_rank"].launch(ranks, grid=16, block=32, cluster=4)
    np.testing.assert_array_equal(ranks.copy_to_host(), np.tile(np.arange(4), 4))
    with pytest.raises(caijit.ArgumentError, match="divide the grid"):
        m["cluster_rank"].launch(ranks, grid=15, block=32, cluster=4)


ORDER = r"""
// Spins ~`cycles`, then copies x into y: a slow consumer.
extern "C" __global__ void slow_copy(const float* x, float* y, long long n, long long cycles) {
    if (threadIdx.x == 0) { long long t0 = clock64(); while (clock64() - t0 < cycles) {} }
    __syncthreads();
    for (long long i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i];
}
extern "C" __global__ void fill(float* y, float v, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) y[i] = v;
}
// Uses `n` floats of dynamic shared memory: y = reverse(x) through shared memory.
extern "C" __global__ void smem_reverse(const float* x, float* y, int n) {
    extern __shared__ float buf[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = x[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = buf[n - 1 - i];
}
"""


@pytest.mark.skipif(not has("cupy"), reason="CuPy is not installed")
def test_reverse_edge_protects_the_input_and_no_host_sync() -> None:
    import time

    import cupy

    m = caijit.module(ORDER)
    n = 1 << 14
    m["slow_copy"].compile()  # compile outside the timed launch
    m["slow_copy"].num_regs  # and load it
    producer = cupy.cuda.Stream(non_blocking=True)
    with producer:
        x = cupy.full(n, 3.0, cupy.float32)  # written on the producer stream
        x.fill(3.0)  # CuPy compiles its fill kernel on first use: not inside the timing below
    producer.synchronize()
    y = caijit.zeros(n)
    launch_stream = caijit.Stream()
    syncs = caijit.stats()["host_syncs"]
    with producer:  # CuPy exports its current stream: the producer
        t0 = time.perf_counter()
        m["slow_copy"][1, 256, launch_stream](x, y, n, 200_000_000)  # ~100 ms on the GPU
        returned_after = time.perf_counter() - t0
        still_running = not cupy.cuda.ExternalStream(launch_stream.handle).done
        x.fill(11.0)  # the producer's next kernel overwrites x: it must wait for slow_copy
    t1 = time.perf_counter()
    launch_stream.synchronize()
    spin = time.perf_counter() - t1
    facts = f"launch returned after {returned_after * 1e3:.1f} ms, still running: {still_running}, then {spin * 1e3:.1f} ms to finish"
    assert spin > 0.02, f"the spin kernel was not running long after the launch: {facts}"
    assert still_running, "the launch returned only after the kernel finished"
    assert returned_after < 0.05, f"launching took {returned_after * 1e3:.1f} ms: something synchronised"
    assert (y.copy_to_host() == 3.0).all(), "the producer overwrote x before the caijit kernel read it"
    assert caijit.stats()["host_syncs"] == syncs


def test_sync_disabled_skips_the_protocol_for_foreign_arrays_only() -> None:
    m = caijit.module(ORDER)
    a, b = caijit.Stream(), caijit.Stream()
    x = caijit.zeros(1024, stream=a)

    class Foreign:  # another library's array on stream a
        __cuda_array_interface__ = x.__cuda_array_interface__

    before = caijit.stats()
    m["fill"].launch(Foreign(), 1.0, 1024, grid=4, block=256, stream=b, sync=False)
    after = caijit.stats()
    assert (after["waits"], after["reverse_waits"]) == (before["waits"], before["reverse_waits"])
    m["fill"].launch(Foreign(), 2.0, 1024, grid=4, block=256, stream=b)
    again = caijit.stats()
    assert (again["waits"] - after["waits"], again["reverse_waits"] - after["reverse_waits"]) == (1, 1)
    # caijit's own array is ordered whatever `sync` says: its memory is caijit's to free.
    m["fill"].launch(x, 3.0, 1024, grid=4, block=256, stream=b, sync=False)
    last = caijit.stats()
    assert (last["waits"] - again["waits"], last["reverse_waits"] - again["reverse_waits"]) == (1, 1)
    assert (x.copy_to_host() == 3.0).all()


def test_dynamic_shared_memory_above_48k() -> None:
    k = caijit.module(ORDER)["smem_reverse"]
    n = 40_000  # 160 KB of shared memory
    x_h = rng.standard_normal(n).astype(np.float32)
    x, y = caijit.to_device(x_h), caijit.to_device(np.full(n, np.nan, np.float32))
    with pytest.raises(caijit.ArgumentError, match="dynamic shared memory"):
        k[1, 1024, None, n * 4](x, y, n)
    k.max_dynamic_shared_size_bytes = n * 4
    assert k.max_dynamic_shared_size_bytes == n * 4
    k[1, 1024, None, n * 4](x, y, n)
    np.testing.assert_array_equal(y.copy_to_host(), x_h[::-1])


def _device_free_bytes() -> int:
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    assert cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
    return free.value


def test_freed_memory_is_kept_for_reuse_until_empty_cache() -> None:
    """caijit arrays come from a pool that keeps freed memory (allocating again maps no new
    pages) until `caijit.empty_cache()` gives it back."""
    n = 1 << 30
    s = caijit.Stream()
    a = caijit.empty(n, "uint8", stream=s)
    ptr = a.__cuda_array_interface__["data"][0]
    del a
    b = caijit.empty(n, "uint8", stream=s)  # same stream: the freed block is reused at once
    assert b.__cuda_array_interface__["data"][0] == ptr
    del b
    s.synchronize()
    kept = _device_free_bytes()
    caijit.empty_cache()
    assert _device_free_bytes() - kept >= n, "empty_cache() gave the freed GiB back"
    c = caijit.zeros(1024, stream=s)  # and the pool still allocates afterwards
    assert (c.copy_to_host() == 0).all()


@pytest.mark.parametrize("env", [{"CAIJIT_CAI_EXPORT_STREAM": "0"}, {"CAIJIT_CAI_EXPORT_VERSION": "2"}])
def test_export_opt_outs_change_the_export_not_the_ordering(env: dict[str, str]) -> None:
    """The opt-outs withhold the stream from consumers; caijit's own launches still order
    against the array's stream."""
    import os
    import subprocess
    import sys
    import textwrap

    code = f"""
        import caijit
        k = caijit.module({SLOW_FILL!r})["slow_fill"]
        a, b = caijit.Stream(), caijit.Stream()
        x = caijit.zeros(1024, stream=a)
        cai = x.__cuda_array_interface__
        print("version", cai["version"], "stream", cai.get("stream", "absent"))
        before = caijit.stats()["waits"]
        k[1, 256, b](x, 3.0, 1024, 0)  # on b: must wait for x's stream a
        print("waits", caijit.stats()["waits"] - before, "ok", bool((x.copy_to_host() == 3).all()))
    """
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300, env={**os.environ, **env})
    assert r.returncode == 0, r.stderr
    want = "version 3 stream None" if "CAIJIT_CAI_EXPORT_STREAM" in env else "version 2 stream absent"
    assert want in r.stdout, r.stdout
    assert "waits 1 ok True" in r.stdout, r.stdout
