"""`caijit.graph()`: launches captured once, replayed with new arguments.

Every replay is checked by values against the same launches made eagerly (bit-exact: the
same kernels on the same inputs). Kernels are warmed up before any test that relies on a
producer stream still running: a first launch loads its module and can synchronise the
device, which would hide a missing edge.
"""

from __future__ import annotations

import gc
import random
from typing import Any

import numpy as np
import pytest

import caijit
import caijit.ops as ops
from conftest import has

pytestmark = pytest.mark.gpu

KERNELS = r"""
#include <caijit/array.cuh>
extern "C" __global__ void axpy(float a, const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}
extern "C" __global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
extern "C" __global__ void add_view(caijit::Array<const float, 1> v, float* out) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < v.shape[0]) out[i] += v(i);
}
extern "C" __global__ void spin_then_fill(float* x, float value, long long cycles, int n) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = value;
}
"""

N = 256
CYCLES = 100_000_000  # ~50 ms on an H200


@pytest.fixture(scope="module")
def k() -> caijit.Module:
    m = caijit.module(KERNELS)
    # Warm every kernel up (module loads synchronise the device).
    a = caijit.zeros(N)
    m["axpy"][1, N](1.0, a, a, a, N)
    m["scale"][1, N](a, 1.0, N)
    m["add_view"][1, N](a, a)
    m["spin_then_fill"][1, N](a, 0.0, 1, N)
    a.copy_to_host()
    return m


def host(x: Any) -> np.ndarray:
    if isinstance(x, caijit.DeviceArray):
        return np.asarray(x.copy_to_host())
    if hasattr(x, "get"):
        return np.asarray(x.get())
    return x.cpu().numpy()  # torch


def rand(seed: int, n: int = N) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


class _Iface:
    """A bare CUDA Array Interface producer."""

    def __init__(self, d: dict[str, Any]) -> None:
        self.__cuda_array_interface__ = d


def every_other(a: Any, start: int) -> _Iface:
    """A strided view of every other float32 of `a` from element `start` (any CAI array)."""
    d = dict(a.__cuda_array_interface__)
    d.update(data=(d["data"][0] + 4 * start, False), shape=(N // 2,), strides=(8,))
    return _Iface(d)


def _readonly(a: Any) -> _Iface:
    d = dict(a.__cuda_array_interface__)
    d["data"] = (d["data"][0], True)
    return _Iface(d)


def _shifted(a: Any, by: int) -> _Iface:
    """The interface of `a` moved `by` bytes on (past its end: only captured, never run)."""
    d = dict(a.__cuda_array_interface__)
    d["data"] = (d["data"][0] + by, False)
    return _Iface(d)


def assert_not_reused(ptr: int, what: str) -> None:
    """After the last Python reference to the array at `ptr` went: new allocations of its
    size do not get its memory (something still holds it)."""
    gc.collect()
    others = [caijit.to_device(np.full(N, 9.0, np.float32)) for _ in range(8)]
    assert all(o.__cuda_array_interface__["data"][0] != ptr for o in others), what


def sequence(k: caijit.Module, x: Any, y: Any, out: Any, view: Any, alpha: Any, beta: Any) -> None:
    """The launches every test captures: out = alpha*x + y; out *= beta; out += view."""
    k["axpy"][1, N](alpha, x, y, out, N)
    k["scale"][1, N](out, beta, N)
    k["add_view"][1, N](view, out)


def test_a_replay_rebinds_arrays_and_scalars(k: caijit.Module) -> None:
    x, y, out, w = (caijit.to_device(rand(i)) for i in range(4))
    with caijit.graph() as g:
        gx = g.input("x", x)
        gy = g.input("y", y)
        go = g.input("out", out)
        gw = g.input("w", w)
        a = g.input("alpha", 2.0)
        b = g.input("beta", np.float32(0.5))
        assert isinstance(a, caijit.GraphScalar) and a.name == "alpha" and a.value == 2.0
        sequence(k, gx, gy, go, every_other(gw, 0), a, b)
    assert [name.split("(")[0] for name in g.kernels] == ["axpy", "scale", "add_view"], g.kernels
    assert g.inputs == ["x", "y", "out", "w", "alpha", "beta"]
    # Nothing ran at capture.
    np.testing.assert_array_equal(host(out), rand(2))

    before = caijit.stats()["graph_replays"]
    g()
    ref = caijit.zeros(N)
    sequence(k, x, y, ref, every_other(w, 0), 2.0, np.float32(0.5))
    np.testing.assert_array_equal(host(out), host(ref))
    x2, y2, out2, w2 = (caijit.to_device(rand(10 + i)) for i in range(4))
    g(x=x2, y=y2, out=out2, w=w2, alpha=-1.5, beta=3.0)
    ref2 = caijit.zeros(N)
    sequence(k, x2, y2, ref2, every_other(w2, 0), -1.5, 3.0)
    np.testing.assert_array_equal(host(out2), host(ref2))
    assert caijit.stats()["graph_replays"] == before + 2


def test_inputs_are_given_by_position_in_the_order_they_were_named(k: caijit.Module) -> None:
    x, y, out, w = (caijit.to_device(rand(20 + i)) for i in range(4))
    with caijit.graph() as g:
        gx, gy, go, gw = (g.input(name, a) for name, a in zip(("x", "y", "out", "w"), (x, y, out, w)))
        sequence(k, gx, gy, go, every_other(gw, 0), g.input("alpha", 2.0), g.input("beta", 0.5))
    x2, y2, out2, w2 = (caijit.to_device(rand(30 + i)) for i in range(4))
    g(x2, y2, out2, w2, -1.0, beta=4.0)
    ref = caijit.zeros(N)
    sequence(k, x2, y2, ref, every_other(w2, 0), -1.0, 4.0)
    np.testing.assert_array_equal(host(out2), host(ref))
    with pytest.raises(caijit.ArgumentError, match="graph input `x` is given twice"):
        g(x, x=x)
    with pytest.raises(caijit.ArgumentError, match=r"the graph has 6 inputs \(x, y, out, w, alpha, beta\), got 7 positional"):
        g(x, y, out, w, 1.0, 1.0, 1.0)
    # Refused: nothing changed.
    g()
    np.testing.assert_array_equal(host(out2), host(ref))


def test_ten_thousand_random_rebinds_match_eager_launches(k: caijit.Module) -> None:
    rng = random.Random(7)
    pools: list[list[Any]] = [[caijit.to_device(rand(100 + i)) for i in range(6)]]
    if has("cupy"):
        import cupy

        pools.append([cupy.asarray(rand(200 + i)) for i in range(6)])
    if has("torch"):
        import torch

        pools.append([torch.from_numpy(rand(300 + i)).cuda() for i in range(6)])
    flat = [a for p in pools for a in p]
    outs = [caijit.zeros(N) for _ in range(2)]
    refs = [caijit.zeros(N) for _ in range(2)]
    with caijit.graph() as g:
        x, y, w = (g.input(n, a) for n, a in zip("xyw", flat[:3]))
        out = g.input("out", outs[0])
        alpha, beta = g.input("alpha", 1.0), g.input("beta", 1.0)
        sequence(k, x, y, out, every_other(w, 1), alpha, beta)
    for i in range(10_000):
        x, y, w = rng.sample(flat, 3)
        o = rng.randrange(2)
        alpha, beta = rng.uniform(-4, 4), rng.uniform(-4, 4)
        g(x=x, y=y, w=w, out=outs[o], alpha=alpha, beta=beta)
        sequence(k, x, y, refs[o], every_other(w, 1), alpha, beta)
        if i % 97 == 0 or i == 9_999:
            np.testing.assert_array_equal(host(outs[o]), host(refs[o]), err_msg=f"rebind {i}")
    for o in range(2):
        np.testing.assert_array_equal(host(outs[o]), host(refs[o]))


def test_a_bad_rebinding_raises_and_leaves_the_graph_as_it_was(k: caijit.Module) -> None:
    x, y, out, w = (caijit.to_device(rand(i)) for i in range(4))
    with caijit.graph() as g:
        sequence(k, g.input("x", x), y, g.input("out", out), w, g.input("alpha", 2.0), 1.0)
    wrong = {
        "a float64 array": dict(x=caijit.to_device(rand(1).astype(np.float64))),
        "another shape": dict(x=caijit.to_device(rand(1, 2 * N))),
        "a scalar for an array": dict(x=1.0),
        "an array for a scalar": dict(alpha=x),
        "an unknown input": dict(z=x),
        "a readonly array for a non-const parameter": dict(out=_readonly(out)),
        "a misaligned view": dict(x=_shifted(x, 2)),
        "a scalar out of range": dict(alpha=1e300),
    }
    g()
    good = host(out).copy()
    for what, bad in wrong.items():
        with pytest.raises(caijit.CaijitError) as e:
            g(**bad)
        (name,) = bad
        assert name in str(e.value) or getattr(e.value, "argument", None) == name, (what, str(e.value))
        out_fresh = caijit.to_device(rand(3))
        g(out=out_fresh)
        np.testing.assert_array_equal(host(out_fresh), good, err_msg=what)
        g(out=out)


def test_a_replay_waits_for_the_producer_of_a_new_array(k: caijit.Module) -> None:
    x, y, out = (caijit.to_device(rand(i)) for i in range(3))
    with caijit.graph() as g:
        k["axpy"][1, N](1.0, g.input("x", x), y, g.input("out", out), N)
    side = caijit.Stream()
    slow = caijit.empty(N, stream=side)
    on = caijit.Stream()
    k["spin_then_fill"][1, N, side](slow, 5.0, CYCLES, N)
    g(x=slow, stream=on)  # it must wait for `side`, where `slow` is being written
    on.synchronize()
    np.testing.assert_array_equal(host(out), 5.0 + rand(1))


def test_constants_of_the_capture_are_waited_for_by_the_first_replay(k: caijit.Module) -> None:
    side = caijit.Stream()
    y = caijit.empty(N, stream=side)
    k["spin_then_fill"][1, N, side](y, 7.0, CYCLES, N)
    x, out = caijit.to_device(rand(0)), caijit.zeros(N)
    on = caijit.Stream()
    with caijit.graph() as g:
        k["axpy"][1, N](1.0, g.input("x", x), y, out, N)
    g(stream=on)  # the first replay waits for what `side` had enqueued at capture
    on.synchronize()
    np.testing.assert_array_equal(host(out), rand(0) + 7.0)


def test_what_a_capture_refuses(k: caijit.Module) -> None:
    x, other, elsewhere = caijit.to_device(rand(0)), caijit.zeros(N), caijit.Stream()
    with pytest.raises(caijit.ArgumentError, match="never passed"):
        with caijit.graph() as g:
            g.input("x", x)
            k["scale"][1, N](other, 1.0, N)
    with pytest.raises(caijit.ArgumentError, match="overlaps graph input"):
        with caijit.graph() as g:
            g.input("x", x)
            k["scale"][1, N](_shifted(x, 4), 1.0, N - 1)
    with pytest.raises(caijit.ArgumentError, match="named twice"):
        with caijit.graph() as g:
            g.input("x", x)
            g.input("x", other)
    with pytest.raises(caijit.ArgumentError, match="graph's stream"):
        with caijit.graph() as g:
            k["scale"][1, N, elsewhere](g.input("x", x), 1.0, N)
    with pytest.raises(ZeroDivisionError):
        with caijit.graph() as g:
            k["scale"][1, N](g.input("x", x), 1.0, N)
            1 / 0
    with pytest.raises(caijit.ArgumentError, match="cannot be replayed"):
        g()
    # The process is usable after each, and nothing captured ran.
    k["scale"][1, N](x, 2.0, N)
    np.testing.assert_array_equal(host(x), 2 * rand(0))


def test_ops_are_captured_and_their_inputs_rebound(k: caijit.Module) -> None:
    a, b, out = (caijit.to_device(rand(i)) for i in range(3))
    with caijit.graph() as g:
        ops.add(g.input("a", a), g.input("b", b), out=g.input("out", out))
    a2, b2, out2 = (caijit.to_device(rand(10 + i)) for i in range(3))
    g(a=a2, b=b2, out=out2)
    np.testing.assert_array_equal(host(out2), rand(10) + rand(11))


@pytest.mark.skipif(not has("torch"), reason="PyTorch is not installed")
def test_a_replay_inside_a_torch_capture_is_a_child_graph(k: caijit.Module) -> None:
    import torch

    x, out = torch.from_numpy(rand(0)).cuda(), torch.zeros(N, device="cuda")
    y = torch.from_numpy(rand(1)).cuda()
    with caijit.graph() as g:
        k["axpy"][1, N](g.input("alpha", 1.0), g.input("x", x), y, g.input("out", out), N)
    x2, out2 = torch.from_numpy(rand(5)).cuda(), torch.zeros(N, device="cuda")
    g()  # the first replay waits for what the captured arrays' producers had enqueued
    torch.cuda.synchronize()
    tg = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        with torch.cuda.graph(tg, stream=s):
            g(x=x2, out=out2, alpha=3.0, stream=s)
    tg.replay()
    torch.cuda.synchronize()
    np.testing.assert_allclose(out2.cpu().numpy(), np.float32(3.0) * rand(5) + rand(1), rtol=1e-6)


def test_arrays_the_graph_reads_live_as_long_as_it(k: caijit.Module) -> None:
    x, out = caijit.to_device(rand(0)), caijit.zeros(N)
    y = caijit.to_device(rand(1))
    with caijit.graph() as g:
        k["axpy"][1, N](2.0, g.input("x", x), y, out, N)
    ptr = y.__cuda_array_interface__["data"][0]
    del y
    assert_not_reused(ptr, "the captured array was freed")
    g()
    ref = caijit.zeros(N)
    k["axpy"][1, N](2.0, x, caijit.to_device(rand(1)), ref, N)
    np.testing.assert_array_equal(host(out), host(ref))


def test_a_graph_dropped_while_another_is_captured_leaves_that_capture_valid(k: caijit.Module) -> None:
    x, out = caijit.to_device(rand(0)), caijit.zeros(N)
    for alpha in (2.0, 3.0):
        # Rebinding `g` drops the previous graph inside the new capture (after __enter__).
        with caijit.graph() as g:
            k["axpy"][1, N](g.input("alpha", alpha), g.input("x", x), x, out, N)
        g()
        ref = caijit.zeros(N)
        k["axpy"][1, N](alpha, x, x, ref, N)
        np.testing.assert_array_equal(host(out), host(ref))


def test_a_stream_dropped_while_a_graph_is_captured_leaves_that_capture_valid(k: caijit.Module) -> None:

    x, out = caijit.to_device(rand(0)), caijit.zeros(N)
    s = caijit.Stream()
    scratch = caijit.zeros(N, stream=s)  # memory kept for the stream: its drop parks it too
    k["scale"][1, N, s](scratch, 2.0, N)
    s.synchronize()
    with caijit.graph() as g:
        k["axpy"][1, N](g.input("alpha", 2.0), g.input("x", x), x, out, N)
        del s, scratch
        gc.collect()
        k["scale"][1, N](out, 3.0, N)
    g()
    ref = caijit.zeros(N)
    k["axpy"][1, N](2.0, x, x, ref, N)
    k["scale"][1, N](ref, 3.0, N)
    np.testing.assert_array_equal(host(out), host(ref))


def test_a_replay_that_fails_after_binding_holds_what_it_bound(k: caijit.Module) -> None:
    from caijit import _native

    x, y, out = caijit.to_device(rand(0)), caijit.to_device(rand(1)), caijit.zeros(N)
    with caijit.graph() as g:
        k["axpy"][1, N](2.0, g.input("x", x), y, out, N)
    g()
    new = caijit.to_device(rand(5))
    ptr = new.__cuda_array_interface__["data"][0]
    # The graph is launched with `new` bound, then ordering its producers after it fails.
    _native._testing._inject_fault("reverse_edge")
    with pytest.raises(caijit.LaunchError, match="injected fault"):
        g(x=new)
    del new
    assert_not_reused(ptr, "the array the graph reads was freed")
    g()
    ref = caijit.zeros(N)
    k["axpy"][1, N](2.0, caijit.to_device(rand(5)), y, ref, N)
    np.testing.assert_array_equal(host(out), host(ref))


def test_a_replay_is_one_traced_launch_named_by_its_kernels(k: caijit.Module) -> None:
    """The launch ring and a profile see a replay as one launch, named by the graph's
    kernels (runs of one kernel counted), with the inputs it was given."""
    x, out = caijit.to_device(rand(11)), caijit.zeros(N)
    with caijit.graph() as g:
        gx = g.input("x", x)
        k["axpy"][1, N](2.0, gx, gx, out, N)
        k["scale"][1, N](out, 0.5, N)
        k["scale"][1, N](out, 0.5, N)
    g()
    with caijit.profile() as p:
        g()
        g(x=caijit.to_device(rand(12)))
    name = "graph[axpy, scale x2]"
    (row,) = [r for r in p.rows if r["kernel"] == name]
    assert row["launches"] == 2 and row["gpu_ms"] > 0, p.rows
    newest = caijit.recent_launches()[0]
    assert newest["kernel"] == name and len(newest["arguments"]) == 1, newest
    np.testing.assert_array_equal(host(out), (2.0 * rand(12) + rand(12)) * 0.25)
