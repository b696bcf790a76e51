"""Custom GPU ops built on caijit's kernel library (``kernels/ops/*.cu``).

Every op accepts any CUDA Array Interface array (CuPy, PyTorch, Numba, JAX, caijit),
takes ``out=`` (otherwise returns a new :class:`caijit.DeviceArray`) and ``stream=``.
Launches follow caijit's stream protocol, so foreign producers are ordered correctly.

>>> import caijit.ops as ops                       # doctest: +SKIP
>>> y = ops.axpy(2.0, x, y0)                       # y = 2 x + y0
>>> z = ops.add(a, b[None, :])                     # NumPy broadcasting
>>> c = ops.ascontiguous(t.T)                      # any strided view → C order
"""

from __future__ import annotations

import builtins
import functools
from typing import Any, Optional, Sequence

import numpy as np

import caijit

from . import _native

__all__ = [
    "axpy", "scale", "fill", "cast", "add", "subtract", "multiply", "divide", "maximum", "minimum",
    "ascontiguous", "sum", "max", "transpose", "softmax", "CPP_TYPES",
]

#: The C++ element type of each dtype the library supports.
CPP_TYPES = {
    "bool": "bool", "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
    "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int", "uint64": "unsigned long long",
    "float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float", "float64": "double",
    "complex64": "caijit::complex<float>", "complex128": "caijit::complex<double>",
}
_REAL = [k for k in CPP_TYPES if not k.startswith("complex")]
_BLOCK = 256
_CAST_BLOCK = 128
_SOFTMAX_VPT = 8  # 16-byte vectors of a row each thread holds (softmax_rows_reg)


@functools.lru_cache(maxsize=None)
def _module(name: str) -> caijit.Module:
    return caijit.module(_native.op_source(name))


@functools.lru_cache(maxsize=None)
def _instance(module: str, name: str, template_args: str) -> caijit.Kernel:
    """An explicit template instance, made once (each instance keeps its compiled kernels)."""
    return _module(module)[name].specialize(template_args)


@functools.lru_cache(maxsize=None)
def _blocks_cap(device: int) -> int:
    return _native.sm_count(device) * 16


# This module defines `sum` and `max` (the ops); the builtins are used by these names.
_builtin_max = builtins.max


def _grid(work: int, device: int = 0) -> int:
    return _builtin_max(1, min(-(-work // _BLOCK), _blocks_cap(device)))


def _elementwise_grid(n: int, itemsize: int) -> int:
    """One 16-byte vector per thread: a grid covering the array once (on the H200 this
    reaches 99 % of the copy bandwidth; a grid capped at 16 blocks per SM looping over the
    array, 93-96 %)."""
    per_thread = _builtin_max(1, 16 // itemsize)
    return _builtin_max(1, min(-(-n // per_thread // _BLOCK), 2**31 - 1))


def _view(x: Any) -> caijit.Interface:
    return _native.launch_view(x)


@functools.lru_cache(maxsize=None)
def _dtype_name(dtype: Any) -> str:
    """The library's name of a dtype, typestr or dtype name ("void16", the typestr of a
    2-byte opaque type, is bfloat16). Cached: NumPy's ``dtype.name`` costs microseconds."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        return dtype
    name = np.dtype(dtype).name
    return "bfloat16" if name == "void16" else name


def _name(v: caijit.Interface) -> str:
    return _dtype_name(v.typestr)


@functools.lru_cache(maxsize=None)
def _device_count() -> int:
    return _native.device_count()


def _new(shape: Sequence[int], dtype: Any, stream: Any, like: caijit.Interface) -> caijit.DeviceArray:
    """A result array on the device of ``like``'s memory."""
    device = 0
    if like.ptr and _device_count() > 1:
        device = _native.pointer_device(like.ptr) or 0
    return caijit.empty(tuple(shape), dtype, stream=stream, device=device)


def _check_out(out: Any, shape: Sequence[int], dtype: Any) -> caijit.Interface:
    """``out``'s view, checked against what the op writes (the launch takes the view)."""
    o = _view(out)
    if tuple(o.shape) != tuple(shape) or _name(o) != _dtype_name(dtype) or not o.is_c_contiguous:
        raise caijit.ArgumentError(
            f"out must be a C-contiguous {_dtype_name(dtype)} array of shape {tuple(shape)}, got {o.dtype} {o.shape}"
        )
    return o


def _contiguous(x: Any, xv: caijit.Interface, stream: Any) -> Any:
    """What to launch with: the view ``xv`` of ``x`` when it is C-contiguous (each array is
    converted once per op), else a contiguous copy. A view does not keep the memory alive:
    the caller keeps ``x`` referenced until the launch is enqueued (never rebind it)."""
    return xv if xv.is_c_contiguous else ascontiguous(x, stream=stream)


def axpy(a: Any, x: Any, y: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``out = a * x + y`` (``out=y`` updates ``y`` in place)."""
    xv, yv = _view(x), _view(y)
    if xv.shape != yv.shape or xv.dtype != yv.dtype:
        raise caijit.ArgumentError(f"axpy: x {xv.dtype}{xv.shape} and y {yv.dtype}{yv.shape} must match")
    xa, ya = _contiguous(x, xv, stream), _contiguous(y, yv, stream)
    out = _new(xv.shape, xv.dtype, stream, xv) if out is None else out
    ov = _check_out(out, xv.shape, xv.dtype)
    _module("elementwise")["axpy"][_elementwise_grid(xv.size, xv.itemsize), _BLOCK, stream](a, xa, ya, ov, xv.size)
    return out


def scale(x: Any, a: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``out = a * x``."""
    xv = _view(x)
    xa = _contiguous(x, xv, stream)
    out = _new(xv.shape, xv.dtype, stream, xv) if out is None else out
    ov = _check_out(out, xv.shape, xv.dtype)
    _module("elementwise")["scale"][_elementwise_grid(xv.size, xv.itemsize), _BLOCK, stream](a, xa, ov, xv.size)
    return out


def fill(out: Any, value: Any, *, stream: Any = None) -> Any:
    """Set every element of the C-contiguous ``out`` to ``value``."""
    o = _view(out)
    if not o.is_c_contiguous:
        raise caijit.ArgumentError("fill: out must be C-contiguous")
    _module("elementwise")["fill"][_elementwise_grid(o.size, o.itemsize), _BLOCK, stream](o, value, o.size)
    return out


def cast(x: Any, dtype: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``x`` converted to ``dtype`` (real types: bool, integers, float16/32/64, bfloat16)."""
    xv = _view(x)
    dst = _dtype_name(dtype)
    if _name(xv) not in _REAL or dst not in _REAL:
        raise caijit.ArgumentError(f"cast: {xv.dtype} → {dst} is not supported (real types only)")
    xa = _contiguous(x, xv, stream)
    out = _new(xv.shape, dtype, stream, xv) if out is None else out
    ov = _check_out(out, xv.shape, dtype)
    k = _module("elementwise")["cast"]
    # One chunk of 128 threads × 2 vectors × 4 elements per block (PyTorch's shape, which
    # matched its kernel time on the H200 where 256 threads reached 0.998x).
    k[_builtin_max(1, min(-(-xv.size // (8 * _CAST_BLOCK)), 2**31 - 1)), _CAST_BLOCK, stream](xa, ov, xv.size)
    return out


_OPS = {"add": 0, "subtract": 1, "multiply": 2, "divide": 3, "maximum": 4, "minimum": 5}


def _broadcast_view(v: caijit.Interface, shape: tuple[int, ...]) -> caijit.Interface:
    """``v`` viewed with ``shape`` (NumPy broadcasting: zero strides on new or unit axes)."""
    pad = len(shape) - v.ndim
    strides = [0] * pad + list(v.strides)
    dims = [1] * pad + list(v.shape)
    strides = [0 if d == 1 and s != 1 else st for d, s, st in zip(dims, shape, strides)]
    cai = dict(v.__cuda_array_interface__)
    cai.update(shape=shape, strides=tuple(strides), data=(v.ptr, True))
    return caijit.parse_interface(cai)


def _binary(op: str, a: Any, b: Any, out: Any, stream: Any) -> Any:
    av, bv = _view(a), _view(b)
    if av.dtype != bv.dtype:
        raise caijit.ArgumentError(f"{op}: operands are {av.dtype} and {bv.dtype}; cast one first")
    try:
        shape = tuple(np.broadcast_shapes(tuple(av.shape), tuple(bv.shape)))
    except ValueError as e:
        raise caijit.ArgumentError(f"{op}: {e}") from None
    out = _new(shape, av.dtype, stream, av) if out is None else out
    ov = _check_out(out, shape, av.dtype)
    n = int(np.prod(shape, dtype=np.int64))
    m = _module("elementwise")
    if av.shape == bv.shape == shape and av.is_c_contiguous and bv.is_c_contiguous:
        m["binary_contiguous"][_elementwise_grid(n, av.itemsize), _BLOCK, stream](av, bv, ov, n, _OPS[op])
    elif n:
        ab, bb = _broadcast_view(av, shape), _broadcast_view(bv, shape)
        tiles = (n // shape[-1]) * -(-shape[-1] // 1024) if shape else 1
        if not shape:
            ab, bb = (caijit.parse_interface({**v.__cuda_array_interface__, "shape": (1,), "strides": (v.itemsize,)}) for v in (ab, bb))
        m["binary_broadcast"][min(tiles, _blocks_cap(0) * 4), _BLOCK, stream](ab, bb, ov, _OPS[op])
    return out


def add(a: Any, b: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``a + b`` with NumPy broadcasting."""
    return _binary("add", a, b, out, stream)


def subtract(a: Any, b: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``a - b`` with NumPy broadcasting."""
    return _binary("subtract", a, b, out, stream)


def multiply(a: Any, b: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``a * b`` with NumPy broadcasting."""
    return _binary("multiply", a, b, out, stream)


def divide(a: Any, b: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``a / b`` with NumPy broadcasting (integer division truncates, as in C++)."""
    return _binary("divide", a, b, out, stream)


def maximum(a: Any, b: Any, *, out: Any = None, stream: Any = None) -> Any:
    """Elementwise maximum with NumPy broadcasting."""
    return _binary("maximum", a, b, out, stream)


def minimum(a: Any, b: Any, *, out: Any = None, stream: Any = None) -> Any:
    """Elementwise minimum with NumPy broadcasting."""
    return _binary("minimum", a, b, out, stream)


def ascontiguous(x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """A C-contiguous copy of any strided view (rank ≤ 8; negative and zero strides too)."""
    xv = _view(x)
    if xv.ndim > 8:
        raise caijit.ArgumentError(f"ascontiguous: rank {xv.ndim} > 8")
    out = _new(xv.shape, xv.dtype, stream, xv) if out is None else out
    ov = _check_out(out, xv.shape, xv.dtype)
    if xv.size == 0:
        return out
    if xv.is_c_contiguous:
        _native.copy_contiguous(xv, ov, stream)  # the driver's copy, as CuPy's and PyTorch's
        return out
    if xv.ndim == 0:
        xv = caijit.parse_interface({**xv.__cuda_array_interface__, "shape": (1,), "strides": (xv.itemsize,)})
    cols = xv.shape[-1]
    tiles = (xv.size // cols) * -(-cols // 4096)
    _module("strided_copy")["strided_copy"][min(tiles, _blocks_cap(0) * 4), _BLOCK, stream](xv, ov)
    return out


def _reduce(name: str, opcode: int, x: Any, axis: Optional[int], out: Any, stream: Any) -> Any:
    xv = _view(x)
    dt = _name(xv)
    if dt not in _REAL or dt == "bool":
        raise caijit.ArgumentError(f"{name}: {xv.dtype} is not supported")
    if xv.size == 0:
        raise caijit.ArgumentError(f"{name}: the array is empty")
    acc = "float32" if dt in ("float16", "bfloat16") else dt
    if opcode == 0 and dt.startswith(("int", "uint")):
        acc = "uint64" if dt.startswith("uint") else "int64"  # NumPy's sum promotes integers
    result_dtype = acc if opcode == 0 and acc.endswith("64") and dt.startswith(("int", "uint")) else dt
    xa = _contiguous(x, xv, stream)
    m = _module("reduce")
    if axis is None:
        blocks = _grid(xv.size)
        partial = _new((blocks,), acc, stream, xv)
        out = _new((), result_dtype, stream, xv) if out is None else out
        ov = _check_out(out, (), result_dtype)
        m["reduce_partial"][blocks, _BLOCK, stream](xa, partial, xv.size, opcode)
        m["reduce_final"][1, 1024, stream](partial, ov, blocks, opcode)
        return out
    if axis not in (-1, xv.ndim - 1):
        raise caijit.ArgumentError(f"{name}: axis must be None or the last axis")
    cols = xv.shape[-1]
    rows = xv.size // cols
    out = _new(xv.shape[:-1], dt, stream, xv) if out is None else out
    ov = _check_out(out, xv.shape[:-1], dt)
    k = _instance("reduce", "reduce_rows", f"{CPP_TYPES[dt]}, {CPP_TYPES[acc]}")
    k[min(rows, 65535 * 16), min(_BLOCK, _builtin_max(32, -(-cols // 32) * 32)), stream](xa, ov, rows, cols, opcode)
    return out


def sum(x: Any, axis: Optional[int] = None, *, out: Any = None, stream: Any = None) -> Any:  # noqa: A001
    """Sum over the whole array (``axis=None``) or the last axis. 16-bit floats accumulate in
    float32; integers are summed in 64 bits, as NumPy does."""
    return _reduce("sum", 0, x, axis, out, stream)


def max(x: Any, axis: Optional[int] = None, *, out: Any = None, stream: Any = None) -> Any:  # noqa: A001
    """Maximum over the whole array (``axis=None``) or the last axis."""
    return _reduce("max", 1, x, axis, out, stream)


def transpose(x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """The transpose of a 2-D array, as a C-contiguous array."""
    xv = _view(x)
    if xv.ndim != 2:
        raise caijit.ArgumentError(f"transpose: expected a 2-D array, got {xv.ndim}-d")
    xa = _contiguous(x, xv, stream)
    rows, cols = xv.shape
    out = _new((cols, rows), xv.dtype, stream, xv) if out is None else out
    ov = _check_out(out, (cols, rows), xv.dtype)
    tile = 64 if xv.itemsize <= 8 else 32  # the kernel's tile width; its block is (tile, 2)
    tiles = -(-rows // tile) * -(-cols // tile)
    _module("transpose")["transpose"][max_blocks(tiles), (tile, 2), stream](xa, ov, rows, cols)
    return out


def max_blocks(n: int) -> int:
    return _builtin_max(1, min(n, 65535 * 32))


def softmax(x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """Softmax over the last axis (numerically stable; float16/bfloat16/float32/float64)."""
    xv = _view(x)
    if _name(xv) not in ("float16", "bfloat16", "float32", "float64"):
        raise caijit.ArgumentError(f"softmax: {xv.dtype} is not a floating type")
    xa = _contiguous(x, xv, stream)
    cols = xv.shape[-1] if xv.ndim else 1
    rows = xv.size // cols if cols else 0
    out = _new(xv.shape, xv.dtype, stream, xv) if out is None else out
    ov = _check_out(out, xv.shape, xv.dtype)
    if not rows:
        return out
    # Rows that fit in registers are read once: 16-byte vectors, _SOFTMAX_VPT per thread.
    per_vec = 16 // xv.itemsize
    vectors = cols // per_vec
    if cols % per_vec == 0 and xa.ptr % 16 == 0 and ov.ptr % 16 == 0:
        k = _instance("softmax", "softmax_rows_reg", f"{CPP_TYPES[_name(xv)]}, {_SOFTMAX_VPT}")
        block = _builtin_max(32, -(-vectors // _SOFTMAX_VPT // 32) * 32)
        if block <= k.max_threads_per_block:
            k[max_blocks(rows), block, stream](xa, ov, rows, cols)
            return out
    block = min(1024, _builtin_max(32, -(-cols // 4 // 32) * 32))
    _module("softmax")["softmax_rows"][max_blocks(rows), block, stream](xa, ov, rows, cols)
    return out
