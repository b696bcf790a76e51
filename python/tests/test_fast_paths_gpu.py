"""Every fast path gives the view the generic path gives (pointer, shape, strides, dtype,
readonly, device and producer stream), for every producer and layout, and the stream
protocol holds through each path: the DLPack C exchange API (PyTorch 2.10+), the
attribute-reading paths of PyTorch and CuPy, `__cuda_array_interface__`, `__dlpack__`.

Run on a GPU machine: CAIJIT_REQUIRE_GPU=1 python -m pytest -q tests/test_fast_paths_gpu.py
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

import numpy as np
import pytest

import caijit
from conftest import has
from caijit import _native

pytestmark = pytest.mark.gpu


Facts = dict[str, Any]
#: What every path must agree on; `device` and `stream` are compared where a path knows them.
CORE = ("shape", "dtype", "readonly", "ptr", "strides")


def facts(obj: Any, path: str, stream: Any = None) -> Union[Facts, str]:
    """What a conversion path gives (pointer and strides only when the array has elements:
    an empty array addresses nothing), or the name of the exception it raises."""
    try:
        v = _native.launch_view(obj, stream, path=path)
    except Exception as e:  # noqa: BLE001 - compared between paths
        return type(e).__name__
    f = {"shape": v.shape, "dtype": str(v.dtype), "readonly": v.readonly, "device": v.device, "stream": v.stream}
    if v.size:
        f.update(ptr=v.ptr, strides=v.strides)
    return f


def same(a: Union[Facts, str], b: Union[Facts, str], keys: tuple[str, ...] = CORE) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return all(a.get(k) == b.get(k) for k in keys)


def torch_layouts(torch: Any) -> list[Any]:
    t = torch.arange(60, device="cuda", dtype=torch.float64).reshape(3, 4, 5)
    return [
        t,
        t.transpose(0, 2),
        t[:, ::2, 1:],
        t[1],
        t[:, :, 2],
        torch.zeros(0, 3, device="cuda"),
        torch.zeros((), device="cuda", dtype=torch.int16),
        torch.ones(7, device="cuda", dtype=torch.bfloat16),
        torch.ones(7, device="cuda", dtype=torch.float16),
        torch.ones(2, 3, device="cuda", dtype=torch.complex64).t(),
        torch.ones(5, device="cuda", dtype=torch.bool),
        torch.ones(5, device="cuda", dtype=torch.uint8),
        torch.ones(4, 4, device="cuda").expand(3, 4, 4),  # a zero stride
        torch.empty(8, device="cuda").as_strided((2, 2), (4, 1), 1),  # a storage offset
    ]


@pytest.mark.skipif(not has("torch"), reason="PyTorch is not installed")
def test_torch_paths_agree() -> None:
    import torch

    exchange = _native._testing._route(torch.zeros(1, device="cuda")).startswith("exchange 1.")
    if hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        assert exchange, "PyTorch offers the exchange API: caijit must route tensors through it"
    side = torch.cuda.Stream()
    for ctx_stream in (None, side):
        with torch.cuda.stream(ctx_stream):
            current = torch.cuda.current_stream().cuda_stream or 1
            for v in torch_layouts(torch):
                known = facts(v, "known")
                assert not isinstance(known, str), (v.shape, v.dtype, known)
                assert known["stream"] == current and known["device"] == 0, "torch's current stream, the tensor's device"
                assert facts(v, "auto") == known
                if exchange:
                    assert facts(v, "exchange") == known, (v.shape, v.stride(), v.dtype)
                generic = facts(v, "generic")
                if not isinstance(generic, str):  # torch's CAI refuses bfloat16
                    assert same(generic, known), (v.shape, v.stride(), v.dtype)
                dl = facts(v, "dlpack")
                assert not isinstance(dl, str), (v.shape, v.dtype, dl)
                assert same(dl, known, CORE + ("device",)), (v.shape, v.stride(), v.dtype)
                assert dl["stream"] == 1, "a DLPack import carries the stream it asked the producer to order before"


@pytest.mark.skipif(not has("torch"), reason="PyTorch is not installed")
def test_torch_refusals_agree() -> None:
    import torch

    grad = torch.zeros(3, device="cuda", requires_grad=True)
    conj = torch.ones(3, device="cuda", dtype=torch.complex64).conj()
    for v in (grad, conj, torch.zeros(3)):
        assert facts(v, "auto") == facts(v, "known") == facts(v, "exchange"), v
    with pytest.raises(caijit.InterfaceError):
        _native.launch_view(grad)
    with pytest.raises(caijit.ArgumentError, match="host memory"):
        _native.launch_view(torch.zeros(3))


@pytest.mark.skipif(not has("cupy"), reason="CuPy is not installed")
def test_cupy_paths_agree() -> None:
    import cupy

    a = cupy.arange(60, dtype=cupy.float32).reshape(3, 4, 5)
    layouts = [a, a.T, a[:, ::2, ::-1], a[1], cupy.zeros((0, 3)), cupy.zeros((), cupy.int8), cupy.ones(5, cupy.complex128)]
    for stream in (None, cupy.cuda.Stream(non_blocking=True)):
        with stream if stream is not None else cupy.cuda.Stream.null:
            for v in layouts:
                known = facts(v, "known")
                assert not isinstance(known, str) and known["device"] == 0
                assert facts(v, "auto") == known
                # CuPy's CAI names its current stream: the generic path agrees on it too.
                assert same(facts(v, "generic"), known, CORE + ("stream",)), (v.shape, v.strides)
                dl = facts(v, "dlpack")
                if not isinstance(dl, str):
                    assert same(dl, known, CORE + ("device",))


@pytest.mark.skipif(not has("numba"), reason="Numba is not installed")
def test_numba_paths_agree() -> None:
    from numba import cuda

    a = cuda.to_device(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert _native._testing._route(a) == "numba"
    for v in (a, a[:, ::2], a.T, a[1:2], cuda.device_array((0, 3), np.float64), cuda.device_array((), np.int16)):
        auto = facts(v, "auto")
        # One GPU: the device is known at once; several: from the pointer, at the launch.
        assert not isinstance(auto, str) and auto["device"] == (0 if caijit.device_count() == 1 else None)
        assert facts(v, "known") == auto
        assert same(auto, facts(v, "generic"), CORE + ("stream",)), (v.shape, v.strides)
    s = cuda.stream()
    b = cuda.device_array(4, np.float32, stream=s)
    auto, generic = facts(b, "auto"), facts(b, "generic")
    assert not isinstance(auto, str) and not isinstance(generic, str)
    assert auto["stream"] == generic["stream"] == int(s)


def test_caijit_arrays_paths_agree() -> None:
    """caijit's own arrays: their shortcut, their CAI, and a DLPack round trip (export,
    then import) address the same memory."""
    a = caijit.to_device(np.arange(24, dtype=np.float32).reshape(4, 6))
    for v in (a, caijit.zeros((0, 2)), caijit.to_device(np.ones((), np.int64))):
        own = facts(v, "auto")
        assert not isinstance(own, str) and own["device"] == 0
        assert same(facts(v, "generic"), own, CORE + ("stream",))
        dl = facts(v, "dlpack")
        assert same(dl, own, CORE + ("device",)), dl


COPY = r"""
extern "C" __global__ void copy(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}"""


def _ordered_through(path: Optional[str], make: Callable[[], Any], torch: Any) -> None:
    """A slow producer write on torch's side stream, then a caijit copy on caijit's own
    stream through `path`: the copy must see the write (forward edge), and torch's side
    stream must wait for the copy (reverse edge)."""
    n = 1 << 16
    k = caijit.kernel(COPY)
    s = caijit.Stream()
    side = torch.cuda.Stream()
    x = make()
    y = torch.zeros(n, device="cuda")
    # Warm up every kernel used (a first launch may synchronise the device).
    with torch.cuda.stream(side):
        torch.cuda._sleep(1000)
        x.fill_(1)
    k.forall(n, stream=s)(x, y, n)
    torch.cuda.synchronize()
    s.synchronize()
    before = caijit.stats()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of producer work
        x.fill_(2)
        arg = x if path is None else _native.launch_view(x, s, path=path)
        k.forall(n, stream=s)(arg, y, n)
    s.synchronize()
    assert float(y.min()) == 2.0, f"the launch ran before the producer's write ({path})"
    after = caijit.stats()
    assert after["waits"] > before["waits"] and after["reverse_waits"] > before["reverse_waits"], path
    side.synchronize()


@pytest.mark.skipif(not has("torch"), reason="PyTorch is not installed")
@pytest.mark.parametrize("path", [None, "exchange", "known", "dlpack"])
def test_torch_stream_protocol_through_each_path(path: Optional[str]) -> None:
    """(torch's CAI names no stream, so its generic path orders nothing: caijit reads
    PyTorch's current stream on the fast paths, and a generic import of a tensor orders
    through the DLPack handshake.)"""
    import torch

    if path == "exchange" and not _native._testing._route(torch.zeros(1, device="cuda")).startswith("exchange"):
        pytest.skip("this PyTorch has no DLPack exchange API")
    _ordered_through(path, lambda: torch.zeros(1 << 16, device="cuda"), torch)


@pytest.mark.skipif(not has("torch"), reason="PyTorch is not installed")
def test_exchange_stream_is_torchs_current_stream() -> None:
    import torch

    t = torch.zeros(4, device="cuda")
    if not _native._testing._route(t).startswith("exchange"):
        pytest.skip("this PyTorch has no DLPack exchange API")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert _native.launch_view(t).stream == side.cuda_stream
        assert torch._C._cuda_getCurrentRawStream(0) == side.cuda_stream
    assert _native.launch_view(t).stream == (torch.cuda.current_stream().cuda_stream or 1)


@pytest.mark.skipif(not has("torch"), reason="PyTorch is not installed")
def test_torch_launch_through_the_exchange_api_computes() -> None:
    import torch

    k = caijit.kernel(r"""
        #include <caijit/caijit.cuh>
        template <typename T, int N>
        __global__ void twice(caijit::Array<const T, N> x, caijit::Array<T, N> y) {
            for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < y.size(); i += (long long)gridDim.x * blockDim.x) y[i] = x[i] + x[i];
        }""")
    for x in (torch.randn(33, 17, device="cuda").t(), torch.randn(8, device="cuda", dtype=torch.float64)[::2]):
        y = torch.empty_like(x)
        k.forall(y.numel())(x, y)
        torch.testing.assert_close(y, 2 * x)


@pytest.mark.skipif(not has("torch"), reason="PyTorch is not installed")
def test_phase_times_cover_a_launch() -> None:
    import torch

    k = caijit.kernel('extern "C" __global__ void k(const float* a, const float* b, float* c, int n) {}')
    t = torch.zeros(16, device="cuda")
    k[1, 32](t, t, t, 16)
    _native.phase_times(reset=True, enable=True)
    try:
        for _ in range(10):
            k[1, 32](t, t, t, 16)
        times = _native.phase_times(reset=True)
    finally:
        _native.phase_times(enable=False)
    assert times["total"][0] == 10 and times["launch"][0] == 10 and times["arg.scalar"][0] == 10
    assert times["arg.exchange"][0] + times["arg.torch"][0] == 30
    # The steps inside the runtime's launch, once per launch each.
    for step in ("runtime", "check", "bind", "scan", "events", "driver"):
        assert times[f"launch.{step}"][0] == 10, step
    assert times["launch.driver"][1] <= times["launch.runtime"][1] <= times["launch"][1]


@pytest.mark.parametrize("path", ["auto", "known", "exchange", "generic"])
def test_torch_views_whose_values_are_not_their_memory_are_refused_on_every_path(path: str) -> None:
    """A conjugate view (complex) and a tensor with the negative bit set (``z.conj().imag``)
    hold values PyTorch resolves lazily: their memory is not their values. torch's own
    ``__cuda_array_interface__`` exports the memory as it is, so every path refuses them,
    naming the fix; the resolved tensors are accepted."""
    torch = pytest.importorskip("torch")
    if path == "exchange" and not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip("this PyTorch has no DLPack C exchange API")
    z = torch.complex(torch.arange(4.0, device="cuda"), torch.ones(4, device="cuda"))
    neg = z.conj().imag
    assert neg.is_neg() and z.conj().is_conj()
    with pytest.raises(caijit.ArgumentError, match="resolve_conj"):
        _native.launch_view(z.conj(), path=path)
    with pytest.raises(caijit.ArgumentError, match="resolve_neg"):
        _native.launch_view(neg, path=path)
    _native.launch_view(z.conj().resolve_conj(), path=path)
    _native.launch_view(neg.resolve_neg(), path=path)
    if path == "auto":
        k = caijit.kernel(COPY)
        out = torch.zeros(4, device="cuda")
        with pytest.raises(caijit.ArgumentError, match="argument 0.*resolve_neg"):
            k[1, 32](neg, out, 4)
        k[1, 32](neg.resolve_neg(), out, 4)
        torch.testing.assert_close(out, -torch.ones(4, device="cuda"))


@pytest.mark.parametrize("library", ["torch", "cupy"])
def test_an_empty_view_with_a_pointer_has_pointer_0_on_every_path(library: str) -> None:
    """One rule (cai_runtime::cai::exported_ptr): an array of no elements is addressed by
    pointer 0 whichever path read it, also where its producer hands out a pointer into
    memory (CuPy does; PyTorch 2.11 itself says 0)."""
    lib = pytest.importorskip(library)
    empty = (lib.ones(4, device="cuda") if library == "torch" else lib.ones(4, dtype=lib.float32))[2:2]
    if library == "cupy":
        assert empty.data.ptr != 0, "CuPy's own pointer of an empty slice is not 0 (the case this test is for)"
    for path in ("auto", "exchange", "known", "generic", "dlpack"):
        v = _native.launch_view(empty, path=path)
        assert (v.shape, v.size, v.ptr) == ((0,), 0, 0), (path, v)
