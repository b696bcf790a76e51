"""The stream protocol at its edges: lifetimes of temporaries, the opt-outs, borrowed
streams, misaligned views, the caller's current context, graph capture, failures after
enqueue. Each test is a reproducer of a way the protocol once broke, checked by values
(counters alone cannot tell an ordered launch from a lucky one).

A producer stream is kept busy with a spinning kernel (~50 ms) so that an edge that is
missing shows as a wrong value. Every kernel and library is warmed up first: a first launch
loads its module and can synchronise the device, which would hide a missing edge. Cases
that set environment variables, or that could kill the CUDA context, run in a subprocess.
"""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import textwrap
import threading
from typing import Any, Callable, Iterator

import numpy as np
import pytest

import caijit
import caijit.ops as ops
from caijit import _native
from conftest import DLPackOnly, has

pytestmark = pytest.mark.gpu

N = 1 << 20
CYCLES = 100_000_000  # ~50 ms on an H200

KERNELS = r"""
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}
extern "C" __global__ void copy(const float* x, float* y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) y[i] = x[i];
}
extern "C" __global__ void add_to(const float* x, float* y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) y[i] += x[i];
}
"""

STRIDED = r"""
#include <caijit/array.cuh>
extern "C" __global__ void sum_view(caijit::Array<const float, 1> x, float* out) {
    if (threadIdx.x == 0) { float s = 0; for (long long i = 0; i < x.shape[0]; ++i) s += x(i); *out = s; }
}
"""

GRID, BLOCK = 256, 256

# The prelude of a subprocess case: the same kernels, every library warmed up.
PRELUDE = f"""
import gc, sys, numpy as np
np.row_stack = np.vstack
import caijit, caijit.ops as ops
m = caijit.module({KERNELS!r})
spin, copy = m["spin"], m["copy"]
N, CYCLES = {N}, {CYCLES}
s = caijit.Stream()
w = caijit.to_device(np.ones(N, np.float32))
spin[1, 1, s](1); copy[{GRID}, {BLOCK}, s](w, w, N); ops.scale(w, 2.0, stream=s); ops.fill(w, 1.0)
s.synchronize()
"""


def run_case(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `PRELUDE + code` in a fresh interpreter with `env` added to this one's."""
    return subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


def assert_ok(r: subprocess.CompletedProcess[str], expected: str) -> None:
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    assert expected in r.stdout, f"{r.stdout}\n{r.stderr}"


@pytest.fixture(scope="module")
def k() -> Any:
    """The test kernels, each launched once (modules loaded before any test races)."""
    m = caijit.module(KERNELS)
    s = caijit.Stream()
    a = caijit.to_device(np.ones(16, np.float32))
    m["spin"][1, 1, s](1)
    m["copy"][1, 32, s](a, a, 16)
    m["add_to"][1, 32, s](a, a, 16)
    ops.fill(a, 1.0, stream=s)
    ops.scale(a, 2.0, out=a, stream=s)
    s.synchronize()
    return m


@pytest.fixture(scope="module")
def torch() -> Any:
    if not has("torch"):
        pytest.skip("PyTorch is not installed")
    import torch

    torch.full((16,), 1.0, device="cuda").clone().sum().item()
    torch.equal(torch.zeros(4, device="cuda"), torch.zeros(4, device="cuda"))
    return torch


@pytest.fixture(scope="module")
def cupy() -> Any:
    if not has("cupy"):
        pytest.skip("CuPy is not installed")
    import cupy

    x = cupy.full(16, 1.0, cupy.float32)
    (x.copy() * 1).sum().get()
    bool((x == 1).all())
    cupy.asarray(caijit.zeros(16))
    return cupy


def spin_on(k: Any, stream: Any) -> None:
    k["spin"][1, 1, stream](CYCLES)


# ---------------------------------------------------------------------------------------
# The opt-outs govern other libraries' arrays only


def test_own_temporary_survives_cai_sync_opt_out() -> None:
    r = run_case(
        """
        spin[1, 1, s](CYCLES)
        y = ops.scale(caijit.to_device(np.ones(N, np.float32)), 2.0, stream=s)
        junk = caijit.to_device(np.full(N, 7, np.float32))
        h = y.copy_to_host()
        print("values", h.min(), h.max())
        """,
        CAIJIT_CAI_SYNC="0",
    )
    assert_ok(r, "values 2.0 2.0")


def test_sync_false_keeps_own_arrays_ordered(k: Any) -> None:
    s, p = caijit.Stream(), caijit.Stream()
    # Forward: an own array written on p, read on s with sync=False.
    x = caijit.zeros(N, stream=p)
    y = caijit.zeros(N, stream=s)
    p.synchronize()
    spin_on(k, p)
    ops.fill(x, 3.0, stream=p)
    k["copy"].launch(x, y, N, grid=GRID, block=BLOCK, stream=s, sync=False)
    assert (y.copy_to_host() == 3).all()
    # Reverse: a temporary whose memory goes back to the pool right after the launch.
    z = caijit.zeros(N, stream=s)
    s.synchronize()
    spin_on(k, s)
    k["copy"].launch(caijit.to_device(np.ones(N, np.float32)), z, N, grid=GRID, block=BLOCK, stream=s, sync=False)
    junk = caijit.to_device(np.full(N, 7, np.float32))
    assert (z.copy_to_host() == 1).all()
    del junk


@pytest.mark.parametrize("env", [{"CAIJIT_CAI_EXPORT_STREAM": "0"}, {"CAIJIT_CAI_EXPORT_VERSION": "2"}])
def test_dlpack_export_waits_under_export_opt_outs(env: dict[str, str]) -> None:
    if not has("torch"):
        pytest.skip("PyTorch is not installed")
    r = run_case(
        """
        import torch
        torch.zeros(4, device="cuda").sum().item()
        a = caijit.zeros(N, stream=s)
        s.synchronize()
        spin[1, 1, s](CYCLES)
        ops.fill(a, 3.0, stream=s)
        t = torch.from_dlpack(a)
        print("values", float(t.min()), float(t.max()))
        v = caijit.as_cuda_array(a)
        print("stream", v.stream == s.handle, "device", v.device)
        """,
        **env,
    )
    assert_ok(r, "values 3.0 3.0")
    assert "stream True device 0" in r.stdout


def test_cai_export_carries_pending_stream(k: Any, cupy: Any) -> None:
    s = caijit.Stream()
    a = caijit.zeros(N, stream=s)
    s.synchronize()
    spin_on(k, s)
    ops.fill(a, 3.0, stream=s)
    b = cupy.asarray(a)  # CuPy waits for the exported stream before using the array
    assert bool((b == 3).all())


# ---------------------------------------------------------------------------------------
# Borrowed streams and per-thread default streams


@pytest.mark.parametrize("library", ["cupy", "numba"])
def test_array_outlives_borrowed_stream(library: str) -> None:
    if not has(library):
        pytest.skip(f"{library} is not installed")
    make = {
        "cupy": "import cupy; fs = cupy.cuda.Stream(non_blocking=True)",
        "numba": "from numba import cuda; fs = cuda.stream()",
    }[library]
    r = run_case(
        f"""
        {make}
        a = caijit.empty(N, stream=fs)
        ops.fill(a, 2.0)
        del fs
        gc.collect()
        b = ops.scale(a, 2.0)          # on the array's stream, whose object is gone
        print("values", a.copy_to_host()[0], b.copy_to_host()[0])
        del a, b
        gc.collect()
        c = caijit.to_device(np.ones(N, np.float32))
        print("done", c.copy_to_host()[0])
        """
    )
    assert_ok(r, "values 2.0 4.0")
    assert "done 1.0" in r.stdout


def test_freed_array_waits_for_its_stream(k: Any) -> None:
    """A dropped array is freed on its own stream, after the work enqueued there: memory
    allocated next on another stream cannot be handed the bytes a kernel still reads."""
    s = caijit.Stream()
    a = caijit.to_device(np.ones(N, np.float32), stream=s)
    out = caijit.zeros(N, stream=s)
    s.synchronize()
    spin_on(k, s)
    k["copy"][GRID, BLOCK, s](a, out, N)  # reads a after the spin
    del a
    junk = caijit.to_device(np.full(N, 7, np.float32))  # the legacy stream: not ordered after s
    assert (out.copy_to_host() == 1).all()
    del junk


def test_per_thread_array_freed_from_another_thread(k: Any) -> None:
    """The per-thread default stream names another stream on every thread: an array made
    on this thread's and dropped on another waits for the device before its free."""
    out = caijit.zeros(N, stream=2)
    held = [caijit.to_device(np.ones(N, np.float32), stream=2)]
    spin_on(k, 2)
    k["copy"][GRID, BLOCK, 2](held[0], out, N)  # reads after the spin
    before = caijit.stats()["host_syncs"]

    def drop_and_scribble() -> None:
        held.pop()  # the last reference: freed on this thread
        junk = caijit.to_device(np.full(N, 7, np.float32), stream=2)
        del junk

    t = threading.Thread(target=drop_and_scribble)
    t.start()
    t.join()
    assert (out.copy_to_host() == 1).all()
    assert caijit.stats()["host_syncs"] == before + 1


# ---------------------------------------------------------------------------------------
# Checks before launch: nothing reaches the GPU that could fault it


def test_misaligned_array_view_is_refused() -> None:
    r = run_case(
        f"""
        k = caijit.kernel({STRIDED!r})
        base = caijit.to_device(np.arange(64, dtype=np.float32))
        out = caijit.zeros(1)

        class Shifted:
            def __init__(self, offset, strides=None):
                self.__cuda_array_interface__ = {{"shape": (8,), "typestr": "<f4", "data": (base.ptr + offset, False),
                                                  "strides": strides, "version": 3, "stream": 1}}

        for name, arg in [("pointer", Shifted(1)), ("stride", Shifted(0, (6,)))]:
            for launch in [lambda: k[1, 32](arg, out), lambda: copy[1, 32](arg, out, 1), lambda: ops.scale(arg, 2.0)]:
                try:
                    launch()
                    print("BUG: launched", name)
                except caijit.ArgumentError as e:
                    # (a strided view for a pointer parameter is refused as not contiguous)
                    assert "aligned" in str(e) or "C-contiguous" in str(e), e
        k[1, 32](Shifted(4), out)
        print("sum", out.copy_to_host()[0])
        """
    )
    assert_ok(r, "sum 36.0")  # 1 + 2 + ... + 8: the process is usable
    assert "BUG" not in r.stdout


def test_dtype_mismatch_is_refused(k: Any) -> None:
    x64 = caijit.to_device(np.ones(16))
    y = caijit.zeros(16)
    with pytest.raises(caijit.ArgumentError, match=r"argument 0 `x`.*float32.*got float64"):
        k["copy"][1, 32](x64, y, 16)
    strided = caijit.kernel(STRIDED)
    with pytest.raises(caijit.ArgumentError, match=r"argument 0 `x`.*float32.*got float64"):
        strided[1, 32](x64, y)
    with pytest.raises(caijit.ArgumentError, match=r"float32"):
        ops.scale(x64, 2.0, out=y)


def test_readonly_array_for_mutable_pointer_is_refused(k: Any) -> None:
    y = caijit.zeros(16)

    class ReadOnly:
        __cuda_array_interface__ = {**y.__cuda_array_interface__, "data": (y.ptr, True)}

    with pytest.raises(caijit.ArgumentError, match=r"argument 1 `y`.*readonly"):
        k["copy"][1, 32](y, ReadOnly(), 16)
    k["copy"][1, 32](ReadOnly(), y, 16)  # const: fine


def test_array_on_other_device_is_refused(k: Any) -> None:
    if caijit.device_count() < 2:
        pytest.skip("needs two GPUs")
    x = caijit.zeros(16, device=0)
    y = caijit.zeros(16, device=1)
    for a, b in [(x, y), (y, x)]:
        with pytest.raises(caijit.ArgumentError, match="on device"):
            k["copy"][1, 32](a, b, 16)
        with pytest.raises(caijit.ArgumentError, match="on device"):
            ops.add(a, b, out=b)


# ---------------------------------------------------------------------------------------
# The caller's current context is left as it was


@pytest.fixture
def foreign_context() -> Iterator[Any]:
    """A context of device 0 that is not the primary one, current on this thread (what a
    library with contexts of its own leaves current); destroyed afterwards."""
    cuda = ctypes.CDLL("libcuda.so.1")
    dev = ctypes.c_int()
    assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    ctx = ctypes.c_void_p()
    assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0  # created current

    def current() -> int:
        c = ctypes.c_void_p()
        assert cuda.cuCtxGetCurrent(ctypes.byref(c)) == 0
        return c.value or 0

    assert current() == ctx.value
    yield current, ctx.value
    cuda.cuCtxSetCurrent(None)
    cuda.cuCtxDestroy_v2(ctx)


def test_stream_drop_keeps_current_context(foreign_context: Any) -> None:
    current, ctx = foreign_context
    t = caijit.Stream()
    assert current() == ctx
    del t
    gc.collect()
    assert current() == ctx


def test_launch_keeps_current_context(k: Any, foreign_context: Any) -> None:
    current, ctx = foreign_context
    a = caijit.to_device(np.ones(64, np.float32))
    assert current() == ctx
    b = ops.scale(a, 2.0)
    k["add_to"][1, 64](a, b, 64)
    assert current() == ctx
    assert (b.copy_to_host() == 3).all()
    del a, b
    gc.collect()
    caijit.empty_cache()
    assert current() == ctx


def test_stream_drop_keeps_current_device(cupy: Any) -> None:
    if caijit.device_count() < 2:
        pytest.skip("needs two GPUs")
    cupy.cuda.Device(0).use()
    t = caijit.Stream(device=1)
    a = caijit.zeros(16, stream=t, device=1)
    del t, a
    gc.collect()
    assert cupy.cuda.runtime.getDevice() == 0


# ---------------------------------------------------------------------------------------
# caijit's caching allocator: who may take a freed block


def _ptr(a: Any) -> int:
    return int(a.__cuda_array_interface__["data"][0])


def _device_synchronize() -> None:
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuCtxSynchronize() == 0


def _allocated_bytes(until: Callable[[int, int], bool]) -> int:
    """What caijit's arrays hold once `until(now, before)` holds for two readings a moment
    apart, or after a second: the driver hands a destroyed graph's part (of this test's, or
    of an earlier test's graph) back asynchronously."""
    before = -1
    for _ in range(100):
        gc.collect()
        caijit.empty_cache()
        now = caijit.memory_stats()["allocated_bytes"]
        if until(now, before):
            break
        before = now
        threading.Event().wait(0.01)
    return now


def _settled_allocated_bytes() -> int:
    """Allocated bytes once they no longer change."""
    return _allocated_bytes(lambda now, before: now == before)


def _wait_for_allocated_bytes(want: int) -> int:
    """Allocated bytes once they are down to `want`."""
    return _allocated_bytes(lambda now, _: now <= want)


def test_a_block_freed_under_a_running_kernel_goes_to_its_stream_only(k: Any) -> None:
    """Freed while its stream's kernel still writes it, a block is reused at once by that
    stream (ordered after the kernel), never by another stream (which would race it)."""
    s, t = caijit.Stream(), caijit.Stream()
    before = caijit.memory_stats()
    a = caijit.empty(N, "float32", stream=s)
    assert caijit.memory_stats()["allocated_bytes"] - before["allocated_bytes"] == 4 * N
    freed = _ptr(a)
    spin_on(k, s)
    ops.fill(a, 7.0, stream=s)  # runs after the spin
    del a
    assert caijit.memory_stats()["allocated_bytes"] == before["allocated_bytes"]
    other = caijit.zeros(N, stream=t)
    assert _ptr(other) != freed
    again = caijit.empty(N, "float32", stream=s)
    assert _ptr(again) == freed, "its own stream reuses it at once"
    s.synchronize()
    assert (other.copy_to_host() == 0).all()


@pytest.mark.parametrize("library", ["caijit", "cupy"])
def test_a_stream_that_goes_away_leaves_its_blocks_until_its_work_is_done(k: Any, library: str, request: Any) -> None:
    """A stream's handle may name a new stream once it is destroyed: the blocks kept for
    it go to other streams only after its last work, never to the stream that takes its
    handle over (CuPy hands a destroyed stream's handle to the next stream it makes)."""
    make: Any = caijit.Stream
    if library == "cupy":
        cupy = request.getfixturevalue("cupy")
        make = lambda: cupy.cuda.Stream(non_blocking=True)  # noqa: E731
    gone = make()
    a = caijit.empty(N, "float32", stream=gone)
    spin_on(k, gone)
    ops.fill(a, 7.0, stream=gone)  # runs after the spin
    del a, gone
    gc.collect()
    arrays = [caijit.zeros(N, stream=make()) for _ in range(4)]
    _device_synchronize()  # the spin and the fill are done
    for x in arrays:
        assert (x.copy_to_host() == 0).all(), "an array shared memory with a destroyed stream's pending kernel"


@pytest.mark.parametrize("kind", ["object", "int"])
def test_a_busy_foreign_stream_reuses_memory_across_calls(k: Any, cupy: Any, kind: str) -> None:
    """Each call wraps a CuPy stream (or its handle) anew: the memory of an array freed by
    one call serves the next while the stream is still busy (a stream wait, no host
    synchronisation), instead of a new segment per call."""
    cs = cupy.cuda.Stream(non_blocking=True)
    on = cs if kind == "object" else cs.ptr
    caijit.empty_cache()
    before, syncs = caijit.memory_stats()["reserved_bytes"], caijit.stats()["host_syncs"]
    spin_on(k, on)
    for i in range(20):
        x = caijit.empty(N, "float32", stream=on)
        ops.fill(x, float(i), stream=on)
        del x
    grown = caijit.memory_stats()["reserved_bytes"] - before
    assert caijit.stats()["host_syncs"] == syncs
    cs.synchronize()
    assert grown <= 20 << 20, f"{grown >> 20} MiB reserved for twenty 4 MiB arrays, one at a time"


def test_blocks_of_exited_threads_serve_later_threads(k: Any) -> None:
    """Memory freed on the per-thread default stream is kept for that thread's stream; when
    the thread exits, it goes to the threads after it (behind its stream's last work, no
    host synchronisation) instead of staying in the cache for a stream that is gone."""
    big = 8 << 20  # 32 MiB arrays: a segment each

    def work(spin: bool) -> None:
        a = caijit.zeros(big, stream=2)
        if spin:
            spin_on(k, 2)  # still running on this thread's stream when the thread exits
        ops.fill(a, 1.0, stream=2)
        del a

    for spin in (False, True):  # warm-up (every kernel loaded), on a thread of its own
        t = threading.Thread(target=work, args=(spin,))
        t.start()
        t.join(60)
    _device_synchronize()
    caijit.empty_cache()
    before, syncs = caijit.memory_stats()["reserved_bytes"], caijit.stats()["host_syncs"]
    for i in range(8):
        t = threading.Thread(target=work, args=(i == 0,))
        t.start()
        t.join(60)
    grown = caijit.memory_stats()["reserved_bytes"] - before
    assert caijit.stats()["host_syncs"] == syncs
    assert grown <= 2 * 4 * big, f"{grown >> 20} MiB reserved for eight threads' 32 MiB arrays, one thread at a time"
    _device_synchronize()


@pytest.mark.parametrize("env", [{"CAIJIT_NO_MEMORY_CACHING": "1"}, {"NV_SANITIZER_INJECTION_PORT_BASE": "49152"}])
def test_without_caching_every_array_is_its_own_allocation(env: dict[str, str]) -> None:
    """For compute-sanitizer (which caijit recognises by its environment), or on request,
    arrays bypass the cache: memcheck then sees an access past an array's end."""
    r = run_case(
        """
        a = ops.scale(w, 3.0, stream=s)
        print(caijit.memory_stats()["segments"], (a.copy_to_host() == 3).all())
        """,
        **env,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "True"], r.stdout


def test_memory_freed_during_a_capture_is_kept_by_the_graph(k: Any, cupy: Any) -> None:
    """An array freed while its stream is being captured may be used by the graph at every
    replay: the graph keeps its block until the graph is destroyed."""
    s = caijit.Stream()
    cs = cupy.cuda.ExternalStream(s.handle)
    x = caijit.to_device(np.arange(N, dtype=np.float32), stream=s)
    y = caijit.zeros(N, stream=s)
    s.synchronize()
    freed = _ptr(y)
    cs.begin_capture()
    k["add_to"][GRID, BLOCK, s](x, y, N)  # the graph writes y's memory at every replay
    temp = caijit.empty(N, "float32", stream=s)  # allocated in the capture: the graph's memory
    k["copy"][GRID, BLOCK, s](x, temp, N)
    del temp, y
    graph = cs.end_capture()
    z = caijit.zeros(N, stream=s)
    assert _ptr(z) != freed, "a block the graph writes was handed out"
    for _ in range(2):
        graph.launch(cs)
    s.synchronize()
    assert (z.copy_to_host() == 0).all()
    held = _settled_allocated_bytes()
    del graph
    # At least the graph's block comes back (a graph an earlier test dropped may hand its
    # memory back meanwhile, too).
    assert _wait_for_allocated_bytes(held - 4 * N) <= held - 4 * N, "the graph's block came back"


class AsCai:
    """An array read through its CUDA Array Interface alone: an op on it makes a caijit
    array (on CuPy's own arrays, it makes CuPy arrays, from CuPy's pool)."""

    def __init__(self, a: Any) -> None:
        self.a = a

    @property
    def __cuda_array_interface__(self) -> Any:
        return self.a.__cuda_array_interface__


@pytest.mark.parametrize("keep", [False, True], ids=["dropped in the capture", "kept past it"])
def test_an_op_result_written_by_a_foreign_capture_is_kept_by_its_graph(cupy: Any, keep: bool) -> None:
    """An op on CuPy memory (read through its interface: the result is caijit's) inside a
    capture of CuPy's stream launches there (captured) and puts its result on the legacy
    stream (a producer's stream handle is valid only for the call). Every replay writes
    that result: its memory goes back to the allocator only once both the array and the
    graph have let go, never to a new eager array while the graph lives. Kept past the
    capture, the result holds the graph's output after each replay."""
    import caijit.ops as ops

    c = cupy.cuda.Stream(non_blocking=True)
    x = AsCai(cupy.ones(N, dtype=cupy.float32))
    with c:  # warm-up, eagerly and in a capture (modules loaded, the capture path taken)
        ops.scale(x, 2.0)
        c.begin_capture()
        ops.scale(x, 2.0)
        c.end_capture()
    c.synchronize()
    cupy.cuda.Device().synchronize()
    with c:
        c.begin_capture()
        r = ops.scale(x, 3.0)
        written = _ptr(r)
        if not keep:
            del r
        graph = c.end_capture()
    z = caijit.zeros(N)  # eager, on the legacy stream, as the result
    assert _ptr(z) != written, "memory a captured graph writes was handed to a new array"
    cupy.cuda.Device().synchronize()
    graph.launch(c)
    c.synchronize()
    assert (z.copy_to_host() == 0).all(), "the graph wrote into a new array"
    if keep:
        assert (r.copy_to_host() == 3).all(), "the kept result holds the graph's output"
        del r
    held = _settled_allocated_bytes()
    del graph
    assert _wait_for_allocated_bytes(held - 4 * N) <= held - 4 * N, "the result's memory came back"


def test_an_op_result_written_by_a_foreign_capture_takes_no_memory_still_in_use(k: Any, cupy: Any) -> None:
    """The graph's replays are ordered after no work of the legacy stream, where the result
    lives: so the result is memory no work may still use, never a block kept for the legacy
    stream whose last array a queued kernel still reads."""
    c = cupy.cuda.Stream(non_blocking=True)
    x = AsCai(cupy.ones(N, dtype=cupy.float32))  # (the result is caijit's)
    with c:  # warm-up
        ops.scale(x, 2.0)
        c.begin_capture()
        ops.scale(x, 2.0)
        c.end_capture()
    spin_on(k, 1)
    ops.scale(caijit.zeros(N), 2.0)
    _device_synchronize()
    a = caijit.to_device(np.full(N, 7, np.float32))
    _device_synchronize()
    spin_on(k, 1)
    b = ops.scale(a, 2.0)  # queued on the legacy stream behind the spin: reads a
    freed = _ptr(a)
    del a  # its block is kept for the legacy stream, still to be read
    with c:
        c.begin_capture()
        r = ops.scale(x, 3.0)
        graph = c.end_capture()
    assert _ptr(r) != freed, "a captured result took memory that queued work still reads"
    graph.launch(c)  # while the spin still runs
    c.synchronize()
    _device_synchronize()
    assert (b.copy_to_host() == 14).all() and (r.copy_to_host() == 3).all()


@pytest.mark.parametrize(
    "capture",
    [
        "CuPy, relaxed, non-blocking stream",
        "CuPy, relaxed, blocking stream",
        "CuPy, relaxed, a caijit stream memory is kept for",
        "PyTorch, global",
    ],
)
def test_empty_cache_during_a_foreign_capture_leaves_the_capture_whole(k: Any, cupy: Any, torch: Any, capture: str) -> None:
    """`caijit.empty_cache()` while another library captures a stream: caijit waits for each
    stream it keeps memory for and each event parked memory waits for, not for the device
    (illegal while any stream is being captured, and it would invalidate that capture). The
    capture ends and replays right; the memory goes back, except what is kept for a stream
    that may not be waited for: the stream being captured, and the legacy default stream
    while a blocking stream is being captured. After the capture, that goes back too."""
    M = (24 << 20) // 4  # 24 MiB arrays: a segment each (no 20 MiB segment holds one)
    seg = 4 * M
    s = caijit.Stream()
    y = cupy.zeros(N, dtype=cupy.float32)
    t = torch.zeros(N, device="cuda")
    if capture == "CuPy, relaxed, a caijit stream memory is kept for":
        c = cupy.cuda.ExternalStream(s.handle)
    else:
        c = cupy.cuda.Stream(non_blocking=capture != "CuPy, relaxed, blocking stream")
    with c:  # warm-up: CuPy's kernel, and a capture nothing disturbs (y is 1 after it)
        y += 1
        c.begin_capture()
        y += 1
        c.end_capture()
    t += 1  # (t is 1)
    torch.cuda.synchronize()
    _device_synchronize()

    def reserved() -> int:
        return int(caijit.memory_stats()["reserved_bytes"])

    def legacy_usable() -> bool:
        try:
            cupy.cuda.runtime.streamIsCapturing(1)
            return True
        except cupy.cuda.runtime.CUDARuntimeError:  # a blocking stream is being captured
            return False

    caijit.empty_cache()
    baseline = reserved()  # (segments live arrays of earlier tests use stay)
    arrays = [
        caijit.zeros(M),  # memory kept for the legacy stream,
        caijit.zeros(M, stream=s),  # for a caijit stream,
        caijit.zeros(M, stream=2),  # for this thread's per-thread default stream,
        caijit.zeros(M, stream=c),  # and parked behind an event (its Stream object goes)
    ]
    del arrays
    gc.collect()
    _device_synchronize()
    assert reserved() == baseline + 4 * seg, "the cache keeps the memory, a segment per array"
    if capture == "PyTorch, global":
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            t += 1
            caijit.empty_cache()
            status = cupy.cuda.runtime.streamIsCapturing(torch.cuda.current_stream().cuda_stream)
            usable = legacy_usable()
        assert status == 1, "the capture is still active after empty_cache()"
        g.replay()
        torch.cuda.synchronize()
        assert (t == 2).all(), "the graph replays its work"
    else:
        with c:
            c.begin_capture()
            y += 1
            caijit.empty_cache()
            status = cupy.cuda.runtime.streamIsCapturing(c.ptr)
            usable = legacy_usable()
            graph = c.end_capture()
        assert status == 1, "the capture is still active after empty_cache()"
        graph.launch(c)
        c.synchronize()
        assert (y == 2).all(), "the graph replays its work"
    if capture.startswith("CuPy"):
        assert usable == (capture != "CuPy, relaxed, blocking stream")
    left = (0 if usable else seg) + (seg if capture == "CuPy, relaxed, a caijit stream memory is kept for" else 0)
    # (A graph of an earlier test may hand memory back meanwhile: at most this much stays.)
    assert reserved() <= baseline + left, f"memory kept: {caijit.memory_stats()}, {baseline} reserved before, {left} to stay"
    caijit.empty_cache()
    assert reserved() <= baseline, f"all of it goes back after the capture: {caijit.memory_stats()}, {baseline} reserved before"


# ---------------------------------------------------------------------------------------
# Graph capture


def replay_three_times(k: Any, capture: Any) -> None:
    """`capture(x, y)` captures `y += x` once; replayed three times, y == 3 x."""
    x = caijit.to_device(np.arange(N, dtype=np.float32))
    y = caijit.zeros(N)
    replay = capture(x, y)
    for _ in range(3):
        replay()
    assert (y.copy_to_host() == 3 * np.arange(N, dtype=np.float32)).all()


def capture_on_cupy(k: Any, cupy: Any, non_blocking: bool) -> None:
    def capture(x: Any, y: Any) -> Any:
        cs = cupy.cuda.Stream(non_blocking=non_blocking)
        with cs:
            cs.begin_capture()
            k["add_to"][GRID, BLOCK, cs](x, y, N)
            graph = cs.end_capture()
        return lambda: (graph.launch(cs), cs.synchronize())

    replay_three_times(k, capture)


def test_capture_on_blocking_cupy_stream_with_legacy_producer(k: Any, cupy: Any) -> None:
    """The arrays live on the legacy stream, which no capture may touch (not even to ask)."""
    capture_on_cupy(k, cupy, non_blocking=False)


def test_capture_on_non_blocking_cupy_stream_with_legacy_producer(k: Any, cupy: Any) -> None:
    capture_on_cupy(k, cupy, non_blocking=True)


def test_capture_on_a_caijit_stream(k: Any, cupy: Any) -> None:
    def capture(x: Any, y: Any) -> Any:
        s = caijit.Stream()
        cs = cupy.cuda.ExternalStream(s.handle)
        cs.begin_capture()
        k["add_to"][GRID, BLOCK, s](x, y, N)
        graph = cs.end_capture()
        return lambda: (graph.launch(cs), s.synchronize())

    replay_three_times(k, capture)


def test_capture_with_torch_graph(k: Any, torch: Any) -> None:
    x = torch.arange(N, dtype=torch.float32, device="cuda")
    y = torch.zeros(N, device="cuda")
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        k["add_to"][GRID, BLOCK](x, y, N)  # on torch's capture stream, the tensors' stream
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, 3 * x)


@pytest.mark.parametrize("where", ["first", "last", "explicit stream", "op"])
def test_capture_with_torch_graph_of_a_dlpack_only_producer(k: Any, torch: Any, where: str) -> None:
    """A producer that speaks only DLPack, wrapping a tensor, inside `torch.cuda.graph`: it
    is asked for the stream the launch will use (the capturing stream, which the tensor
    beside it carries, or the one given), never the legacy stream a capture forbids."""
    x = torch.arange(N, dtype=torch.float32, device="cuda")
    y = torch.zeros(N, device="cuda")
    add_to = k["add_to"]
    # Every kernel and path warmed up outside the capture (a first launch loads a module).
    add_to[GRID, BLOCK](DLPackOnly(x), y, N)
    add_to[GRID, BLOCK](y, DLPackOnly(y), N)
    ops.add(DLPackOnly(x), y, out=y)
    torch.cuda.synchronize()
    y.zero_()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        if where == "first":
            add_to[GRID, BLOCK](DLPackOnly(x), y, N)
        elif where == "last":
            add_to[GRID, BLOCK](x, DLPackOnly(y), N)
        elif where == "explicit stream":
            add_to[GRID, BLOCK, torch.cuda.current_stream()](DLPackOnly(x), DLPackOnly(y), N)
        else:
            ops.add(DLPackOnly(x), y, out=y)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, 3 * x)


def test_launch_waiting_on_a_capturing_stream_is_an_error(k: Any, cupy: Any) -> None:
    x = caijit.to_device(np.ones(N, np.float32))
    y = caijit.zeros(N)
    other = caijit.Stream()
    cs = cupy.cuda.Stream(non_blocking=True)
    with cs:
        cs.begin_capture()

        class OnCapture:  # an array whose pending work is in the capture
            __cuda_array_interface__ = {**y.__cuda_array_interface__, "stream": cs.ptr}

        with pytest.raises(caijit.ArgumentError, match="captured"):
            k["add_to"][GRID, BLOCK, other](x, OnCapture(), N)
        k["add_to"][GRID, BLOCK, cs](x, OnCapture(), N)  # in the capture: fine
        graph = cs.end_capture()
    graph.launch(cs)
    cs.synchronize()
    assert (y.copy_to_host() == 1).all()


# ---------------------------------------------------------------------------------------
# Foreign temporaries: their memory is not recycled under the kernel


def test_foreign_producer_is_waited_for(k: Any, cupy: Any, torch: Any) -> None:
    s = caijit.Stream()
    y = caijit.zeros(N, stream=s)
    cs = cupy.cuda.Stream(non_blocking=True)
    x = cupy.zeros(N, cupy.float32)
    cupy.cuda.runtime.deviceSynchronize()
    with cs:  # CuPy's current stream is the producer stream of its arrays
        spin_on(k, cs)
        x.fill(3)
        k["copy"][GRID, BLOCK, s](x, y, N)
    assert (y.copy_to_host() == 3).all()

    ts = torch.cuda.Stream()
    t = torch.zeros(N, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(ts):
        spin_on(k, ts)
        t.fill_(5)
        k["copy"][GRID, BLOCK, s](t, y, N)
    assert (y.copy_to_host() == 5).all()


def test_torch_temporary_on_side_stream_is_not_recycled(k: Any, torch: Any) -> None:
    ts = torch.cuda.Stream()
    ref = torch.arange(N, dtype=torch.float32, device="cuda")
    out = torch.zeros(N, device="cuda")
    torch.cuda.synchronize()
    spin_on(k, ts)
    k["copy"][GRID, BLOCK, ts](ref.clone(), out, N)
    junk = [torch.full((N,), -1.0, device="cuda") for _ in range(4)]
    torch.cuda.synchronize()
    assert torch.equal(out, ref)
    del junk


def test_cupy_temporary_on_side_stream_is_not_recycled(k: Any, cupy: Any) -> None:
    cs = cupy.cuda.Stream(non_blocking=True)
    ref = cupy.arange(N, dtype=cupy.float32)
    out = cupy.zeros(N, cupy.float32)
    cupy.cuda.runtime.deviceSynchronize()
    spin_on(k, cs)
    k["copy"][GRID, BLOCK, cs](ref.copy(), out, N)
    junk = [cupy.full(N, -1.0, cupy.float32) for _ in range(4)]
    cupy.cuda.runtime.deviceSynchronize()
    assert bool((out == ref).all())
    del junk


@pytest.mark.parametrize("library", ["torch", "cupy"])
def test_dlpack_temporary_released_after_kernel(k: Any, library: str, request: pytest.FixtureRequest) -> None:
    """A DLPack-only temporary: the capsule is all that keeps its memory from the producer's
    pool (the output lives on the launch stream, so no edge reaches the producer's stream),
    and it must outlive the kernel. PyTorch also protects its export itself; CuPy does not."""
    lib = request.getfixturevalue(library)
    s = caijit.Stream()
    out = caijit.zeros(N, stream=s)
    if library == "torch":
        ref = lib.arange(N, dtype=lib.float32, device="cuda")
        scribble = lambda: lib.full((N,), -1.0, device="cuda")  # noqa: E731
        sync = lib.cuda.synchronize
    else:
        ref = lib.arange(N, dtype=lib.float32)
        scribble = lambda: lib.full(N, -1.0, lib.float32)  # noqa: E731
        sync = lib.cuda.runtime.deviceSynchronize
    want = np.arange(N, dtype=np.float32)
    sync()
    s.synchronize()
    spin_on(k, s)
    k["copy"][GRID, BLOCK, s](DLPackOnly(ref.copy() if library == "cupy" else ref.clone()), out, N)
    gc.collect()
    junk = [scribble() for _ in range(4)]
    assert (out.copy_to_host() == want).all()
    del junk
    # Released once the work is done: by the next launch (or caijit.empty_cache()).
    k["copy"][1, 32, s](out, out, 16)
    s.synchronize()


def test_reverse_edge_failure_waits_for_the_kernel(k: Any, torch: Any) -> None:
    ts = torch.cuda.Stream()
    ref = torch.arange(N, dtype=torch.float32, device="cuda")
    out = torch.zeros(N, device="cuda")
    torch.cuda.synchronize()
    before = caijit.stats()
    spin_on(k, ts)
    _native._testing._inject_fault("reverse_edge")
    with pytest.raises(caijit.LaunchError, match="injected fault"):
        k["copy"][GRID, BLOCK, ts](ref.clone(), out, N)
    junk = [torch.full((N,), -1.0, device="cuda") for _ in range(4)]
    torch.cuda.synchronize()
    assert torch.equal(out, ref)
    assert caijit.stats()["host_syncs"] == before["host_syncs"] + 1
    del junk
    k["copy"][GRID, BLOCK, ts](ref, out, N)  # the process is usable
    ts.synchronize()


# ---------------------------------------------------------------------------------------
# Found by review: subclasses, caijit.ops with DLPack, per-thread arrays on other threads,
# vector pointees, streams of another device


def test_torch_subclass_is_ordered_like_a_tensor(k: Any, torch: Any) -> None:
    class Tagged(torch.Tensor):  # a subclass: PyTorch's interface for it names no stream
        pass

    s = caijit.Stream()
    y = caijit.zeros(N, stream=s)
    ts = torch.cuda.Stream()
    x = torch.zeros(N, device="cuda").as_subclass(Tagged)
    torch.cuda.synchronize()
    with torch.cuda.stream(ts):
        spin_on(k, ts)
        x.fill_(3)
        k["copy"][GRID, BLOCK, s](x, y, N)  # must wait for ts, torch's current stream
    assert (y.copy_to_host() == 3).all()


class CopyingDLPack:
    """A DLPack-only producer whose every export is a fresh buffer that only the capsule owns
    (DLPack allows a copy when the producer must make one)."""

    def __init__(self, t: Any) -> None:
        self.t = t

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.t.clone().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return self.t.__dlpack_device__()


def test_ops_hold_dlpack_capsules_until_the_kernel_is_done(k: Any, torch: Any, request: pytest.FixtureRequest) -> None:
    ta, tb = torch.full((N,), 1.0, device="cuda"), torch.full((N,), 2.0, device="cuda")
    ops.add(ta, tb)  # warm-up
    torch.cuda.synchronize()
    a, b = CopyingDLPack(ta), CopyingDLPack(tb)
    out = ops.add(a, b)  # each view holds its capsule until the kernel reading it is done
    view = _native.launch_view(a)
    fresh = torch.empty(N, device="cuda")
    assert fresh.data_ptr() != view.ptr, "a view's memory was handed to a new tensor while the view lives"
    assert (out.copy_to_host() == 3).all()
    if has("cupy"):  # a producer that does not protect its exports itself
        cupy = request.getfixturevalue("cupy")
        c = cupy.full(N, 1.0, cupy.float32)
        s = caijit.Stream()
        cupy.cuda.runtime.deviceSynchronize()
        spin_on(k, s)
        out2 = ops.scale(DLPackOnly(c.copy()), 2.0, stream=s)
        gc.collect()
        junk = [cupy.full(N, -1.0, cupy.float32) for _ in range(4)]
        assert (out2.copy_to_host() == 2).all()
        del junk


def test_capsules_are_released_by_stream_a_running_one_holding_only_its_own(k: Any, torch: Any) -> None:
    """Capsules wait for the stream their launch ran on: those behind a stream still running
    stay, those of a stream that finished after them go at the next launch."""
    slow, fast = caijit.Stream(), caijit.Stream()
    src = torch.arange(N, dtype=torch.float32, device="cuda")
    outs = [caijit.zeros(N, stream=slow) for _ in range(3)]
    fast_out = caijit.zeros(N, stream=fast)
    spin_on(k, slow)  # warm-ups: both kernels loaded, nothing pending
    k["copy"][GRID, BLOCK, fast](CopyingDLPack(src), fast_out, N)
    slow.synchronize()
    fast.synchronize()
    torch.cuda.synchronize()
    k["copy"][1, 32, fast](fast_out, fast_out, 16)
    fast.synchronize()
    base = torch.cuda.memory_allocated()
    one = src.clone()
    per = torch.cuda.memory_allocated() - base
    del one
    assert per >= N * 4

    # ~200 ms: the slow stream still runs through every check below (no collection here,
    # which in a loaded process can take longer than a short spin).
    k["spin"][1, 1, slow](4 * CYCLES)
    for o in outs:  # each export a fresh buffer that only its capsule owns
        k["copy"][GRID, BLOCK, slow](CopyingDLPack(src), o, N)
    for _ in range(3):
        k["copy"][GRID, BLOCK, fast](CopyingDLPack(src), fast_out, N)
    # (the fast stream's may already be going: each launch releases what has finished)
    assert torch.cuda.memory_allocated() >= base + 3 * per, "capsules of a running stream were released"
    fast.synchronize()
    k["copy"][1, 32, fast](fast_out, fast_out, 16)  # a launch releases what has finished
    assert not torch.cuda.ExternalStream(slow.handle).query(), "the slow stream finished before the check: the test proves nothing"
    assert torch.cuda.memory_allocated() == base + 3 * per, "the finished stream's capsules were not released, or the running one's were"
    slow.synchronize()
    k["copy"][1, 32, fast](fast_out, fast_out, 16)
    assert torch.cuda.memory_allocated() == base
    want = torch.arange(N, dtype=torch.float32).numpy()
    for o in (*outs, fast_out):
        assert (o.copy_to_host() == want).all()


def test_per_thread_array_is_refused_on_another_thread() -> None:
    a = caijit.to_device(np.arange(16, dtype=np.float32), stream=2)
    errors: list[BaseException] = []
    seen: list[Any] = []

    def use() -> None:
        seen.append(a.copy_to_host())  # a host copy waits for the device instead
        for f in (lambda: ops.scale(a, 2.0), lambda: a.__cuda_array_interface__, lambda: a.__dlpack__()):
            try:
                f()
            except caijit.ArgumentError as e:
                errors.append(e)

    t = threading.Thread(target=use)
    t.start()
    t.join()
    assert (seen[0] == np.arange(16)).all()
    assert len(errors) == 3 and all("per-thread default stream of another thread" in str(e) for e in errors)
    assert (ops.scale(a, 2.0, stream=2).copy_to_host() == 2 * np.arange(16)).all()  # its own thread: fine


def test_vector_pointee_alignment_is_checked() -> None:
    r = run_case(
        r"""
        k = caijit.kernel('extern "C" __global__ void sum4(const float4* x, float* out) { float4 v = x[0]; *out = v.x + v.y + v.z + v.w; }')
        base = caijit.to_device(np.arange(64, dtype=np.float32))
        out = caijit.zeros(1)

        class At:
            def __init__(self, offset):
                self.__cuda_array_interface__ = {"shape": (8,), "typestr": "<f4", "data": (base.ptr + offset, False), "version": 3, "stream": 1}

        try:
            k[1, 1](At(4), out)
            print("BUG: launched")
        except caijit.ArgumentError as e:
            assert "16 bytes" in str(e), e
        k[1, 1](At(16), out)
        print("sum", out.copy_to_host()[0])
        """
    )
    assert_ok(r, "sum 22.0")  # 4 + 5 + 6 + 7
    assert "BUG" not in r.stdout


def test_stream_of_other_device_is_refused(k: Any) -> None:
    if caijit.device_count() < 2:
        pytest.skip("needs two GPUs")
    on1 = caijit.Stream(device=1)
    x = caijit.zeros(16, device=0)
    with pytest.raises(caijit.ArgumentError, match="stream is on device 1"):
        k["copy"][1, 32, on1](x, x, 16)
    with pytest.raises(caijit.ArgumentError, match="stream is on device 1"):
        caijit.empty(16, stream=on1, device=0)
    if has("cupy"):
        import cupy

        with cupy.cuda.Device(1):
            cs1 = cupy.cuda.Stream(non_blocking=True)
        with pytest.raises(caijit.ArgumentError, match="stream is on device 1"):
            k["copy"][1, 32, cs1](x, x, 16)
        k["spin"][1, 1, cs1](10)  # no arrays: the stream's device
        cs1.synchronize()


# ---------------------------------------------------------------------------------------
# Views of caijit arrays carry their owner and its rules (issue #26, part 4)


def test_view_of_per_thread_array_is_refused_on_another_thread(k: Any) -> None:
    """A view of an array on the per-thread default stream follows the array's rule: on
    another thread, where "2" names another stream (an idle one: a wait on it orders
    nothing), launching it, viewing it again or exporting it is an ArgumentError."""
    s = caijit.Stream()
    out = caijit.zeros(N, stream=s)
    a = caijit.zeros(N, stream=2)
    a.copy_to_host()
    view = caijit.as_cuda_array(a)  # on the home thread: allowed
    deeper = _native.launch_view(view)
    assert view.stream == 2 and deeper.stream == 2
    outcomes: dict[str, str] = {}

    def worker() -> None:
        attempts = {
            "launch": lambda: k["copy"][GRID, BLOCK, s](view, out, N),
            "launch of a view of the view": lambda: k["copy"][GRID, BLOCK, s](deeper, out, N),
            "op": lambda: ops.scale(view, 2.0, out=out, stream=s),
            "view again": lambda: _native.launch_view(view),
            "export": lambda: view.__cuda_array_interface__,
        }
        for what, attempt in attempts.items():
            try:
                attempt()
                outcomes[what] = "accepted"
            except caijit.ArgumentError as e:
                outcomes[what] = "refused" if "per-thread default stream of another thread" in str(e) else f"other: {e}"
            except Exception as e:  # noqa: BLE001
                outcomes[what] = f"{type(e).__name__}: {e}"
        s.synchronize()

    sevens = caijit.to_device(np.full(N, 7.0, np.float32), stream=2)
    spin_on(k, 2)  # pending work on the home stream: a view accepted elsewhere would not wait for it
    k["copy"][GRID, BLOCK, 2](sevens, a, N)
    t = threading.Thread(target=worker)
    t.start()
    t.join(60)
    assert not t.is_alive()
    assert outcomes == dict.fromkeys(outcomes, "refused") and len(outcomes) == 5, outcomes
    # On its home thread the view works, and waits for the home stream's work.
    k["copy"][GRID, BLOCK, s](view, out, N)
    assert (out.copy_to_host() == 7).all()
    assert view.__cuda_array_interface__["stream"] == 2


@pytest.mark.parametrize("depth", [2, 3])
def test_view_of_a_view_holds_the_array(k: Any, depth: int) -> None:
    """`launch_view(as_cuda_array(a))` (a view an op or a launch takes of a view) holds `a`
    as the first view does: once `a` and the first view are gone, no new allocation may be
    handed the memory the surviving view addresses, and a launch through it writes only
    that memory."""
    a = caijit.to_device(np.full(N, 5.0, np.float32))
    view = caijit.as_cuda_array(a)
    for _ in range(depth - 1):
        view = _native.launch_view(view)
    lo, hi = view.ptr, view.ptr + view.nbytes
    del a
    gc.collect()
    fresh = [caijit.zeros(N) for _ in range(8)]  # the pool hands back freed blocks of this size first
    aliased = [b for b in fresh if b.ptr < hi and lo < b.ptr + b.nbytes]
    assert not aliased, f"a view of depth {depth} did not hold its array: its memory {lo:#x} went to a new array"
    k["copy"][GRID, BLOCK](caijit.to_device(np.full(N, 1.0, np.float32)), view, N)
    assert all((b.copy_to_host() == 0).all() for b in fresh)


def test_dlpack_only_argument_in_a_capture_is_capture_legal(k: Any, cupy: Any) -> None:
    """A DLPack-only argument of a launch into a capturing stream: the producer is asked
    for no synchronisation (`stream=-1`), as caijit leaves out its own edges to streams
    outside a capture; the capturing stream passed instead makes the producer wait on its
    own stream, outside the capture, which invalidates it. The same array through CuPy's
    fast path is the control."""
    x = cupy.arange(N, dtype=cupy.float32)
    k["add_to"][GRID, BLOCK](DLPackOnly(x), caijit.zeros(N), N)  # the import path, warm
    cupy.cuda.runtime.deviceSynchronize()
    want = 3 * np.arange(N, dtype=np.float32)
    for arg in (x, DLPackOnly(x)):
        y = caijit.zeros(N)
        cs = cupy.cuda.Stream(non_blocking=True)
        cupy.cuda.runtime.deviceSynchronize()
        cs.begin_capture()  # CuPy's current stream stays the null stream, outside the capture
        try:
            k["add_to"][GRID, BLOCK, cs](arg, y, N)
        finally:
            graph = cs.end_capture()
        for _ in range(3):
            graph.launch(cs)
        cs.synchronize()
        assert (y.copy_to_host() == want).all(), type(arg).__name__


class OneShotDLPack:
    """A DLPack-only producer that lets go of its tensor when it exports it: the capsule is
    then all that keeps the memory from the producer's pool."""

    def __init__(self, t: Any) -> None:
        self.t = t

    def __dlpack__(self, **kwargs: Any) -> Any:
        t, self.t = self.t, None
        return t.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return (2, 0)


def test_capsule_in_a_capture_lives_with_the_graph(k: Any, torch: Any) -> None:
    """A DLPack capsule read by a captured launch is kept by the graph: the graph reads its
    memory at every replay, so it may go back to its producer only when the graph is gone,
    not at the next launch (the event recorded in the capture cannot be queried; taking
    that error for "done" released the capsule at once)."""
    ref = torch.arange(N, dtype=torch.float32, device="cuda")
    y = caijit.zeros(N)
    k["add_to"][GRID, BLOCK](OneShotDLPack(ref.clone()), y, N)  # warm
    src = OneShotDLPack(ref.clone())  # allocated outside the capture, from PyTorch's general pool
    y = caijit.zeros(N)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.graph(g, stream=s):
        k["add_to"][GRID, BLOCK, s](src, y, N)
    del src
    gc.collect()
    for _ in range(3):
        k["copy"][1, 32](y, y, 16)  # launches release the capsules whose work is done
    junk = [torch.full((N,), -1.0, device="cuda") for _ in range(8)]  # would reuse a released block
    torch.cuda.synchronize()
    for _ in range(2):
        g.replay()
    torch.cuda.synchronize()
    assert (y.copy_to_host() == 2 * np.arange(N, dtype=np.float32)).all(), "the capsule was released while its graph lives"
    del junk, g
    gc.collect()
    k["copy"][1, 32](y, y, 16)  # the graph is gone: a later launch releases its capsule
    torch.cuda.synchronize()


def test_dlpack_export_release_outlives_the_consumers_stream(k: Any, cupy: Any) -> None:
    """`cupy.from_dlpack(a)` on a CuPy stream that the consumer lets go of before it
    releases the tensor: the release still makes the array's stream wait for the
    consumer's pending work (the export holds the consumer's stream object until then;
    naming a destroyed handle at release ordered nothing), so the array's memory is not
    handed to a new array under the consumer's last write."""

    def consume(a: Any) -> Any:
        cs = cupy.cuda.Stream(non_blocking=True)
        with cs:
            t = cupy.from_dlpack(a)  # __dlpack__(stream=cs.ptr)
            spin_on(k, cs)
            t.fill(3)  # the consumer's last write, pending behind the spin
        return t  # cs: no reference left here

    s = caijit.Stream()
    warm = caijit.zeros(N, stream=s)
    del warm
    consume(caijit.zeros(N, stream=s))
    cupy.cuda.runtime.deviceSynchronize()
    s.synchronize()
    a = caijit.zeros(N, stream=s)
    t = consume(a)
    gc.collect()
    del t  # released: a's stream waits for the consumer's
    gc.collect()
    del a  # freed on its stream, after the consumer's write
    fresh = [caijit.zeros(N, stream=s) for _ in range(4)]
    got = [b.copy_to_host() for b in fresh]
    assert all((g == 0).all() for g in got), "the consumer's write landed in a new array"
