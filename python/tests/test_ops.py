"""The kernel library: every op compiles for every dtype it supports (CPU, real NVRTC), and
matches NumPy (float64 reference) on the GPU, contiguous and strided inputs alike."""

from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np
import pytest

import caijit
import caijit.ops as ops

REAL = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16", "float32", "float64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]


def cpp(name: str) -> str:
    return ops.CPP_TYPES[name]


@pytest.mark.parametrize("dtype", REAL + ["complex64", "complex128"])
def test_elementwise_compiles_for_every_dtype(dtype: str) -> None:
    m = caijit.module(caijit._native.op_source("elementwise"))
    for k in ("axpy", "scale", "fill"):
        m[k].specialize(cpp(dtype)).compile(arch="sm_90")
    if not dtype.startswith("complex"):
        m["binary_contiguous"].specialize(cpp(dtype)).compile(arch="sm_90")
        m["binary_broadcast"].specialize(f"{cpp(dtype)}, 3").compile(arch="sm_90")
        m["cast"].specialize(f"{cpp(dtype)}, float").compile(arch="sm_90")
        m["cast"].specialize(f"__half, {cpp(dtype)}").compile(arch="sm_90")


@pytest.mark.parametrize("dtype", REAL)
def test_reductions_copy_transpose_softmax_compile(dtype: str) -> None:
    acc = {"float16": "float", "bfloat16": "float"}.get(dtype, cpp(dtype))
    r = caijit.module(caijit._native.op_source("reduce"))
    r["reduce_partial"].specialize(f"{cpp(dtype)}, {acc}").compile(arch="sm_90")
    r["reduce_final"].specialize(f"{acc}, {cpp(dtype)}").compile(arch="sm_90")
    r["reduce_rows"].specialize(f"{cpp(dtype)}, {acc}, {cpp(dtype)}").compile(arch="sm_90")
    copies = caijit.module(caijit._native.op_source("strided_copy"))
    copies["strided_copy"].specialize(f"{cpp(dtype)}, 4").compile(arch="sm_80")
    copies["strided_scatter"].specialize(f"{cpp(dtype)}, 4").compile(arch="sm_80")
    caijit.module(caijit._native.op_source("transpose"))["transpose"].specialize(cpp(dtype)).compile(arch="sm_90")
    if dtype in FLOATS:
        sm = caijit.module(caijit._native.op_source("softmax"))
        sm["softmax_rows"].specialize(cpp(dtype)).compile(arch="sm_90")
        sm["softmax_rows_reg"].specialize(f"{cpp(dtype)}, 8").compile(arch="sm_90")


def test_registered_unary_ops_compile_for_their_dtypes_and_are_functions_of_caijit_ops() -> None:
    registry = caijit._native.unary_ops()
    assert "abs" in [name for name, _, _ in registry]
    for name, doc, dtypes in registry:
        f = getattr(ops, name)
        assert f is ops.UNARY_OPS[name] and name in ops.__all__ and f.__name__ == name
        assert doc in (f.__doc__ or "")
        m = caijit.module(caijit._native.op_source(name))
        for dtype in dtypes:
            m["unary"].specialize(cpp(dtype)).compile(arch="sm_90")


def test_unary_ops_refuse_what_they_do_not_support() -> None:
    with pytest.raises(caijit.ArgumentError, match='no unary op named "nope" .*abs'):
        caijit._native.unary("nope", None, None)


def test_ops_name_the_argument_that_is_not_an_array() -> None:
    """A scalar where an op takes an array is refused with the op's and the parameter's
    names (no GPU needed: the arguments are converted before any work)."""
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: ops.add(3, 4), "add: a must be a CUDA array, got int"),
        (lambda: ops.axpy(2.0, 1.5, None), "axpy: x must be a CUDA array, got float"),
        (lambda: ops.softmax(7), "softmax: x must be a CUDA array, got int"),
        (lambda: ops.fill(3, 0.0), "fill: out must be a CUDA array, got int"),
        (lambda: caijit._native.copy_contiguous(1, 2), "copy_contiguous: src must be a CUDA array, got int"),
    ]
    for f, message in cases:
        with pytest.raises(caijit.ArgumentError, match=re.escape(message)):
            f()


def test_cast_refuses_none_and_structured_dtypes() -> None:
    """NumPy reads ``None`` as float64 and a structured 2-byte dtype's name is ``void16``
    (bfloat16's): neither is taken for a dtype (no GPU needed: refused before any work)."""

    class Fake:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0x7F0000000000, False), "version": 3}

    with pytest.raises(caijit.ArgumentError, match="dtype must be a dtype, not None"):
        ops.cast(Fake(), None)
    for structured in ([("a", "i1"), ("b", "i1")], "i1,i1", np.dtype([("v", "<i2")]), "2i1", ("f2", (1,)), "(2,)u1"):
        with pytest.raises(caijit.ArgumentError, match="is a structured dtype"):
            ops.cast(Fake(), structured)


def test_caijit_ops_is_a_module_of_python_functions_and_signatures() -> None:
    """``caijit.ops`` (made natively) imports every way a Python module does, and its
    functions have their signatures, names and module, and pickle by name."""
    import importlib
    import importlib.util
    import inspect
    import pickle

    from caijit.ops import abs as ops_abs, add

    assert importlib.import_module("caijit.ops") is ops is caijit.ops and add is ops.add
    assert importlib.util.find_spec("caijit.ops") is not None
    assert str(inspect.signature(ops.add)) == "(a, b, *, out=None, stream=None)"
    assert str(inspect.signature(ops.sum)) == "(x, axis=None, *, out=None, stream=None)"
    assert list(inspect.signature(ops_abs).parameters) == ["x", "out", "stream"]
    for f in (ops.add, ops.softmax, ops_abs):
        assert f.__module__ == "caijit.ops" and pickle.loads(pickle.dumps(f)) is f
    assert sorted(ops.__all__) == sorted(set(ops.__all__)) and "CPP_TYPES" in ops.__all__
    assert ops.CPP_TYPES["complex64"] == "caijit::complex<float>" and ops.__doc__


# ---------------------------------------------------------------------------- GPU

rng = np.random.default_rng()
TOL = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 1e-5, "float64": 1e-12, "complex64": 1e-5, "complex128": 1e-12}


def rand(shape: Any, dtype: str) -> np.ndarray:
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -100), min(info.max, 100), shape).astype(dtype)
    if dtype.startswith("complex"):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def wide(a: np.ndarray) -> np.ndarray:
    """The float64 (complex128) reference of an array."""
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)


def host(a: Any) -> np.ndarray:
    return a.copy_to_host()


def close(got: np.ndarray, want: np.ndarray, dtype: str, scale: float = 1.0) -> None:
    if dtype in TOL:
        np.testing.assert_allclose(wide(got), want, rtol=TOL[dtype] * scale, atol=TOL[dtype] * scale)
    else:
        np.testing.assert_array_equal(got, want.astype(got.dtype))


gpu = pytest.mark.gpu
NP_REAL = [d for d in REAL if d != "bfloat16"]


@gpu
@pytest.mark.parametrize("dtype", NP_REAL + ["complex64", "complex128"])
def test_axpy_scale_fill(dtype: str) -> None:
    n = 100_003
    x_h, y_h = rand(n, dtype), rand(n, dtype)
    x, y = caijit.to_device(x_h), caijit.to_device(y_h)
    a: complex = 3
    close(host(ops.axpy(a, x, y)), a * wide(x_h) + y_h, dtype, 4)
    close(host(ops.scale(x, 2)), 2 * wide(x_h), dtype)
    if dtype.startswith("complex"):
        a = 0.5 - 2j
        close(host(ops.axpy(a, x, y)), a * wide(x_h) + y_h, dtype, 4)
    out = caijit.empty(n, dtype)
    ops.fill(out, 7)
    assert (host(out) == 7).all()
    # Misaligned start (offset by one element): the scalar path.
    xs = caijit.parse_interface({**x.__cuda_array_interface__, "shape": (n - 1,), "data": (x.ptr + x_h.itemsize, False)})
    ys = caijit.parse_interface({**y.__cuda_array_interface__, "shape": (n - 1,), "data": (y.ptr + y_h.itemsize, False)})
    close(host(ops.axpy(a, xs, ys)), a * wide(x_h[1:]) + y_h[1:], dtype, 4)


@gpu
@pytest.mark.parametrize("src,dst", [("float32", "float16"), ("float16", "float64"), ("int32", "float32"), ("float64", "int64"), ("uint8", "int16")])
def test_cast(src: str, dst: str) -> None:
    x_h = rand((257, 3), src)
    got = host(ops.cast(caijit.to_device(x_h), dst))
    np.testing.assert_array_equal(got, x_h.astype(dst))


@gpu
@pytest.mark.parametrize("dtype", NP_REAL + ["bool"])
def test_cast_every_dtype_both_ways(dtype: str) -> None:
    """Every dtype into float64 (exact), and float32 into every dtype (values in its range):
    C++'s conversions agree with NumPy's wherever both are defined."""
    x_h = rand(1000, dtype)
    np.testing.assert_array_equal(host(ops.cast(caijit.to_device(x_h), "float64")), x_h.astype(np.float64))
    f = x_h.astype(np.float32)
    np.testing.assert_array_equal(host(ops.cast(caijit.to_device(f), dtype)), f.astype(dtype))


@gpu
def test_bfloat16_ops_through_torch() -> None:
    """bfloat16, which NumPy lacks: PyTorch tensors in and out, float64 references."""
    torch = pytest.importorskip("torch")
    tol = {"rtol": 2e-2, "atol": 2e-2}
    x32, y32 = torch.randn(64, 130, device="cuda"), torch.randn(64, 130, device="cuda")
    x, y = x32.bfloat16(), y32.bfloat16()
    cast = torch.empty_like(x)
    ops.cast(x32, "bfloat16", out=cast)
    torch.testing.assert_close(cast, x, rtol=0, atol=0)  # both round to nearest even
    back = torch.empty_like(x32)
    ops.cast(x, "float32", out=back)
    torch.testing.assert_close(back, x.float(), rtol=0, atol=0)
    out = torch.empty_like(x)
    ops.axpy(2.0, x, y, out=out)
    torch.testing.assert_close(out.double(), 2 * x.double() + y.double(), **tol)
    ops.add(x, y[:1], out=out)  # broadcast row
    torch.testing.assert_close(out.double(), x.double() + y[:1].double(), **tol)
    ops.softmax(x, out=out)
    torch.testing.assert_close(out.double(), torch.softmax(x.double(), dim=-1), **tol)
    rows = torch.empty(64, device="cuda", dtype=torch.bfloat16)
    ops.sum(x, axis=-1, out=rows)
    torch.testing.assert_close(rows.double(), x.double().sum(-1), rtol=2e-2, atol=0.3)
    total = torch.empty((), device="cuda", dtype=torch.bfloat16)
    ops.max(x, out=total)
    assert total.item() == x.max().item()


@gpu
def test_cast_chunks_tails_and_unaligned_starts() -> None:
    """Every path of the cast kernel: many chunks with a partial last one and a scalar tail,
    a grid too small for the array (the loop over chunks), and a start that is not 16-byte
    aligned (the scalar loop)."""
    n = 100_003
    x_h = rand(n, "float32")
    x = caijit.to_device(x_h)
    np.testing.assert_array_equal(host(ops.cast(x, "float16")), x_h.astype("float16"))
    out = caijit.empty(n, "float16")
    k = caijit.module(caijit._native.op_source("elementwise"))["cast"].specialize("float, __half")
    k[3, 128](x, out, n)
    np.testing.assert_array_equal(host(out), x_h.astype("float16"))
    shifted = caijit.parse_interface({**x.__cuda_array_interface__, "shape": (n - 1,), "data": (x.ptr + 4, False)})
    np.testing.assert_array_equal(host(ops.cast(shifted, "float16")), x_h[1:].astype("float16"))


@gpu
@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "maximum", "minimum", "divide"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "float16"])
def test_binary_with_broadcasting(op: str, dtype: str) -> None:
    a_h, b_h = rand((64, 1, 33), dtype), rand((5, 33), dtype)
    if op == "divide":
        b_h = np.where(b_h == 0, 1, b_h).astype(dtype)
    ref = getattr(np, op)(a_h.astype(np.float64), b_h.astype(np.float64))
    if op == "divide" and dtype.startswith("int"):
        ref = np.trunc(ref)
    close(host(getattr(ops, op)(caijit.to_device(a_h), caijit.to_device(b_h))), ref, dtype, 4)
    same_h = rand((64, 5, 33), dtype)
    if op == "divide":
        same_h = np.where(same_h == 0, 1, same_h).astype(dtype)
    same = caijit.to_device(same_h)
    ref2 = getattr(np, op)(host(same).astype(np.float64), host(same).astype(np.float64))
    close(host(getattr(ops, op)(same, same)), ref2, dtype, 4)


def views(h: np.ndarray) -> list[tuple[str, np.ndarray, caijit.Interface]]:
    d = caijit.to_device(h)
    base = d.__cuda_array_interface__
    out = [("contiguous", h, caijit.parse_interface(base))]
    keep.append(d)
    for label, v in [("transpose", h.T), ("reversed", h[::-1]), ("step slice", h[:, ::3]), ("broadcast", np.broadcast_to(h[:1], h.shape))]:
        offset = (v.__array_interface__["data"][0] - h.__array_interface__["data"][0])
        out.append((label, v, caijit.parse_interface({**base, "shape": v.shape, "strides": v.strides, "data": (d.ptr + offset, False)})))
    return out


keep: list[Any] = []


@gpu
@pytest.mark.parametrize("dtype", ["int8", "float16", "float32", "float64", "uint64"])
def test_ascontiguous_every_view(dtype: str) -> None:
    h = rand((37, 41), dtype)
    for label, want, v in views(h):
        np.testing.assert_array_equal(host(ops.ascontiguous(v)), want, err_msg=label)
    h4 = rand((3, 4, 5, 6), dtype)
    d = caijit.to_device(h4)
    t = h4.transpose(2, 0, 3, 1)
    v = caijit.parse_interface({**d.__cuda_array_interface__, "shape": t.shape, "strides": t.strides})
    np.testing.assert_array_equal(host(ops.ascontiguous(v)), t)


@gpu
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "uint8", "int64"])
def test_reductions(dtype: str) -> None:
    h = rand((300, 1001), dtype)
    d = caijit.to_device(h)
    close(host(ops.sum(d)), np.sum(h.astype(np.float64)), dtype, 100)
    close(host(ops.max(d)), np.max(h.astype(np.float64)), dtype)
    close(host(ops.sum(d, axis=-1)), np.sum(h.astype(np.float64), axis=-1), dtype, 30)
    close(host(ops.max(d, axis=-1)), np.max(h.astype(np.float64), axis=-1), dtype)
    # NumPy's result dtypes (integer sums in 64 bits), whole array and per row alike.
    assert host(ops.sum(d)).dtype == np.sum(h).dtype
    assert host(ops.sum(d, axis=-1)).dtype == np.sum(h, axis=-1).dtype
    assert host(ops.max(d, axis=-1)).dtype == h.dtype
    # Strided input: made contiguous first.
    for label, want, v in views(h)[1:3]:
        close(host(ops.sum(v, axis=-1)), np.sum(want.astype(np.float64), axis=-1), dtype, 30)


@gpu
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "uint8", "int64"])
def test_small_whole_array_reductions(dtype: str) -> None:
    """Whole arrays of at most 64 KiB are reduced by one block in one kernel, larger ones in
    two passes: both match NumPy on each side of the edge, from 16-byte aligned and
    unaligned starts alike."""
    item = np.dtype(dtype).itemsize
    edge = (64 << 10) // item
    for n in (1, 7, 33, 4096, edge - 1, edge, edge + 1):
        h = rand(n + 1, dtype)
        d = caijit.to_device(h)
        cai = d.__cuda_array_interface__
        for start in (0, 1):
            v = caijit.parse_interface({**cai, "shape": (n,), "data": (cai["data"][0] + start * item, False)})
            want = h[start:start + n]
            close(host(ops.sum(v)), np.sum(want.astype(np.float64)), dtype, 100)
            close(host(ops.max(v)), np.max(want.astype(np.float64)), dtype)
            assert host(ops.sum(v)).dtype == np.sum(want).dtype


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64", "int16", "float16"])
def test_transpose(dtype: str) -> None:
    for shape in [(1, 1), (33, 65), (1000, 3), (512, 512)]:
        h = rand(shape, dtype)
        np.testing.assert_array_equal(host(ops.transpose(caijit.to_device(h))), h.T)
    # The kernel with blocks of other shapes than the planned (tile, 2): the same result.
    k = caijit.module(caijit._native.op_source("transpose"))["transpose"]
    h = rand((130, 77), dtype)
    for block in [(32, 8), (16, 3), (64, 1)]:
        out = caijit.empty((77, 130), dtype)
        k[7, block](caijit.to_device(h), out, 130, 77)
        np.testing.assert_array_equal(host(out), h.T)


@gpu
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_softmax(dtype: str) -> None:
    # Rows held in registers (widths divisible by the vector, up to 8 vectors per thread of
    # 1024) and rows too odd or too wide for that.
    for shape in [(7, 1), (100, 1000), (3, 5000), (2, 3, 65), (4, 8192), (5, 32768), (3, 40000)]:
        h = (rand(shape, dtype) * 10).astype(dtype)
        x = h.astype(np.float64)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        close(host(ops.softmax(caijit.to_device(h))), e / e.sum(axis=-1, keepdims=True), dtype, 10)


@gpu
def test_ops_accept_foreign_arrays_and_out() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(1000, device="cuda")
    y = torch.randn(1000, device="cuda")
    want = 2 * x + y
    ops.axpy(2.0, x, y, out=y)  # in place, into a PyTorch tensor
    torch.testing.assert_close(y, want)
    with pytest.raises(caijit.ArgumentError, match="out must be"):
        ops.scale(x, 2.0, out=torch.empty(999, device="cuda"))
    t = torch.randn(64, 48, device="cuda").t()
    torch.testing.assert_close(torch.as_tensor(ops.ascontiguous(t), device="cuda"), t.contiguous())


@gpu
def test_op_errors_name_what_was_wrong() -> None:
    x = caijit.to_device(np.arange(12, dtype=np.float32).reshape(3, 4))
    i = caijit.to_device(np.arange(4, dtype=np.int32))
    cases = [
        (lambda: ops.cast(x, "complex64"), "cast: complex64 is not supported (real types only)"),
        (lambda: ops.add(x, i), "add: operands are float32 and int32; cast one first"),
        (lambda: ops.add(x, caijit.zeros(3)), "add: shape mismatch"),
        # One message (the runtime's), with or without out=.
        (lambda: ops.add(x, caijit.zeros(3), out=caijit.empty((3, 4))), "add: shape mismatch: shapes [3, 4] and [3] do not broadcast"),
        (lambda: ops.cast(x, "float16", out=caijit.empty((3, 4))), "cast: out must be a float16 array of shape [3, 4], got float32"),
        (lambda: ops.add(x, x, out=caijit.parse_interface({**x.__cuda_array_interface__, "shape": (3, 4), "strides": (0, 4)})),
         "add: out has elements that share memory (shape [3, 4], byte strides [0, 4])"),
        (lambda: ops.add(x, caijit.zeros((1, 4)), out=caijit.empty((4, 4))),
         "add: out must be a float32 array of shape [3, 4], got float32 [4, 4]"),
        (lambda: ops.softmax(i), "softmax: int32 is not a floating type"),
        (lambda: ops.sum(caijit.zeros(0)), "sum: the array is empty"),
        (lambda: ops.max(caijit.zeros(3, "bool")), "max: bool is not supported"),
        (lambda: ops.sum(x, axis=0), "sum: axis must be None or the last axis"),
        (lambda: ops.transpose(i), "transpose: expected a 2-D array, got 1-d"),
        (lambda: ops.axpy(1.5, i, i), "1.5 is a float; the parameter is an integer"),  # never truncated
        (lambda: ops.fill(caijit.parse_interface({**x.__cuda_array_interface__, "shape": (4, 3), "strides": (4, 16)}), 0.0),
         "fill: needs C-contiguous arrays"),
        (lambda: ops.fill(3, 0.0), "fill: out must be a CUDA array, got int"),
        (lambda: ops.add(x, 3), "add: b must be a CUDA array, got int"),
        (lambda: ops.scale(x, 2.0, out=caijit.empty((3, 4), "float64")), "out must be a float32 array of shape [3, 4], got float64"),
    ]
    for f, message in cases:
        with pytest.raises(caijit.ArgumentError, match=re.escape(message)):
            f()


@gpu
def test_ops_from_many_threads(in_threads: Callable[[Callable[[int], None], int], None]) -> None:
    """8 threads × 200 rounds of four ops, each thread on its own stream or on one they
    share: every op's results come from the pool, kernels are looked up concurrently, and
    the results are exact."""
    shared = caijit.Stream()

    def work(seed: int) -> None:
        s = shared if seed % 2 else caijit.Stream()
        r = np.random.default_rng(seed)
        a_h = r.integers(-50, 50, (64, 96)).astype(np.int32)
        b_h = r.integers(-50, 50, (1, 96)).astype(np.int32)
        a, b = caijit.to_device(a_h, stream=s), caijit.to_device(b_h, stream=s)
        for _ in range(200):
            c = ops.add(a, b, stream=s)
            f = ops.cast(c, "float64", stream=s)
            total = ops.sum(c, stream=s)
            rows = ops.max(f, axis=-1, stream=s)
        np.testing.assert_array_equal(host(c), a_h + b_h)
        assert host(total) == (a_h + b_h).sum()
        np.testing.assert_array_equal(host(rows), (a_h + b_h).max(axis=-1).astype(np.float64))

    in_threads(work, 8)


@gpu
@pytest.mark.parametrize("dtype", NP_REAL)
def test_abs_matches_numpy(dtype: str) -> None:
    x_h = rand(100_003, dtype)
    x = caijit.to_device(x_h)
    np.testing.assert_array_equal(host(ops.abs(x)), np.abs(x_h))
    # In place, and a strided input (copied to C order first).
    ops.abs(x, out=x)
    np.testing.assert_array_equal(host(x), np.abs(x_h))
    m = caijit.to_device(x_h[:1000].reshape(40, 25))
    cai = m.__cuda_array_interface__
    t = caijit.parse_interface({**cai, "shape": (25, 40), "strides": (x_h.itemsize, 25 * x_h.itemsize)})
    np.testing.assert_array_equal(host(ops.abs(t)), np.abs(x_h[:1000].reshape(40, 25).T))


@gpu
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_abs_clears_the_sign_bit_as_numpy_does(dtype: str) -> None:
    x_h = np.array([-0.0, 0.0, -np.nan, np.nan, -np.inf, -1.5, 2.0], dtype)
    got = host(ops.abs(caijit.to_device(x_h)))
    want = np.abs(x_h)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@gpu
def test_abs_refuses_complex_and_bool() -> None:
    for dtype in ("complex64", "bool"):
        with pytest.raises(caijit.ArgumentError, match=f"abs: {dtype} is not supported"):
            ops.abs(caijit.zeros(4, dtype))


@gpu
def test_op_results_live_on_the_call_stream_and_strided_inputs_follow_the_op_registry() -> None:
    """The runtime's op call (cai_runtime::ops) decides where a new result lives and how
    strided inputs are read: the broadcasting kernel reads views as they are (one launch),
    pointer kernels read C-ordered copies (a copy kernel first)."""
    s = caijit.Stream()
    h = rand((40, 64), "float32")
    x = caijit.to_device(h, stream=s)
    # The stream asked for, else the one stream of the caijit arrays: the result lives there.
    mine = caijit.Stream()
    assert ops.scale(x, 2.0, stream=mine).__cuda_array_interface__["stream"] == mine.handle
    assert ops.scale(x, 2.0).__cuda_array_interface__["stream"] == s.handle
    t = caijit.parse_interface({**x.__cuda_array_interface__, "shape": (64, 40), "strides": (4, 256)})
    s.synchronize()
    before = caijit.stats()["launches"]
    got = ops.add(t, t)
    assert caijit.stats()["launches"] == before + 1, "add reads strided views as they are"
    np.testing.assert_array_equal(host(got), h.T + h.T)
    before = caijit.stats()["launches"]
    got = ops.scale(t, 2.0)
    assert caijit.stats()["launches"] == before + 2, "scale reads a C-ordered copy"
    np.testing.assert_array_equal(host(got), 2 * h.T)
    # Reductions read copies too, and make NumPy's result dtypes.
    hi = rand((40, 64), "int16")
    di = caijit.to_device(hi)
    ti = caijit.parse_interface({**di.__cuda_array_interface__, "shape": (64, 40), "strides": (2, 128)})
    rows = ops.sum(ti, axis=-1)
    assert host(rows).dtype == np.int64
    np.testing.assert_array_equal(host(rows), hi.T.astype(np.int64).sum(axis=-1))


@gpu
@pytest.mark.parametrize("dtype", ["float32", "int16", "float64"])
def test_ops_write_strided_outs(dtype: str) -> None:
    """out= may be any view whose elements are distinct memory (the op writes a C-ordered
    temporary and scatters it), in place too; the rest of the array is left alone."""
    h = rand((24, 40), dtype)
    base = caijit.to_device(np.zeros((40, 48), dtype))
    cai = base.__cuda_array_interface__
    item = np.dtype(dtype).itemsize
    # t: the transpose of base's first 24 columns, (24, 40).
    t = caijit.parse_interface({**cai, "shape": (24, 40), "strides": (item, 48 * item)})
    x = caijit.to_device(h)
    ops.add(x, x, out=t)
    want = np.zeros((40, 48), dtype)
    want[:, :24] = (h + h).T
    np.testing.assert_array_equal(host(base), want)
    ops.scale(t, 3, out=t)  # in place: reads a C-ordered copy of t, then writes t
    want[:, :24] = (3 * (h + h)).T
    np.testing.assert_array_equal(host(base), want)
    rows = caijit.parse_interface({**cai, "shape": (40,), "strides": (48 * item,), "data": (cai["data"][0] + 47 * item, False)})
    ops.max(caijit.to_device(want[:, :24].copy()), axis=-1, out=rows)
    want[:, 47] = want[:, :24].max(axis=-1)
    np.testing.assert_array_equal(host(base), want)


@pytest.mark.gpu
def test_an_out_overlapping_an_input_gets_the_numpy_result() -> None:
    """`out` sharing memory with an input (a square transpose into itself, a shifted add)
    is written through a temporary; an elementwise op's exact in-place write stays in place."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    x_h = rng.standard_normal((256, 256)).astype(np.float32)
    warm = torch.tensor(x_h, device="cuda")
    ops.transpose(warm, out=torch.empty_like(warm))  # warm-up
    x = torch.tensor(x_h, device="cuda")
    ops.transpose(x, out=x)
    np.testing.assert_array_equal(x.cpu().numpy(), x_h.T)
    a_h = rng.standard_normal(1 << 16).astype(np.float32)
    a = torch.tensor(a_h, device="cuda")
    ops.add(a[1:], a[:-1], out=a[:-1])
    want = a_h.copy()
    np.add(want[1:], want[:-1].copy(), out=want[:-1])
    np.testing.assert_array_equal(a.cpu().numpy(), want)
    y = torch.tensor(a_h, device="cuda")
    ops.axpy(2.0, torch.tensor(a_h, device="cuda"), y, out=y)
    np.testing.assert_allclose(y.cpu().numpy(), 3 * a_h, rtol=1e-6)
