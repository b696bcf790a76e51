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

import functools
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

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
# The ops themselves (checks, grids, launches) are cai_runtime::ops, reached through
# caijit._native; this module adds what NumPy users expect around them: results allocated
# when no ``out=`` is given, NumPy's result dtypes, strided inputs copied to C order first.
# Each input array is converted once (its view is what the op receives); the views do not
# own memory, so the functions keep their arguments referenced until the op is enqueued.


def _view(x: Any, stream: Any) -> caijit.Interface:
    """The view an op on ``stream`` reads of ``x``; for a DLPack object it holds the capsule
    (the producer ordered its work before ``stream``), and the op's launch holds it until
    its kernel is done."""
    return _native.launch_view(x, stream)


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


def _device(like: caijit.Interface) -> int:
    """The device of ``like``'s memory: the one its conversion learnt, else the pointer's."""
    if like.device is not None:
        return like.device
    if like.ptr and _device_count() > 1:
        return _native.pointer_device(like.ptr) or 0
    return 0


def _out(out: Any, shape: Sequence[int], dtype: Any, stream: Any, like: caijit.Interface) -> Any:
    """``out``, or a new array for the result on the device of ``like``'s memory."""
    if out is not None:
        return out
    return caijit.empty(tuple(shape), dtype, stream=stream, device=_device(like))


def _contiguous(x: Any, xv: caijit.Interface, stream: Any) -> Any:
    """What an op reads: the view ``xv`` of ``x`` when it is C-contiguous, else a contiguous
    copy. The caller keeps ``x`` referenced until the op is enqueued (never rebinds it)."""
    return xv if xv.is_c_contiguous else ascontiguous(x, stream=stream)


def axpy(a: Any, x: Any, y: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``out = a * x + y`` (``out=y`` updates ``y`` in place)."""
    xv, yv = _view(x, stream), _view(y, stream)
    xa, ya = _contiguous(x, xv, stream), _contiguous(y, yv, stream)
    out = _out(out, xv.shape, _name(xv), stream, xv)
    _native.axpy(a, xa, ya, out, stream)
    return out


def scale(x: Any, a: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``out = a * x``."""
    xv = _view(x, stream)
    xa = _contiguous(x, xv, stream)
    out = _out(out, xv.shape, _name(xv), stream, xv)
    _native.scale(xa, a, out, stream)
    return out


def fill(out: Any, value: Any, *, stream: Any = None) -> Any:
    """Set every element of the C-contiguous ``out`` to ``value``."""
    _native.fill(out, value, stream)
    return out


def cast(x: Any, dtype: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``x`` converted to ``dtype`` (real types: bool, integers, float16/32/64, bfloat16)."""
    xv = _view(x, stream)
    xa = _contiguous(x, xv, stream)
    out = _out(out, xv.shape, _dtype_name(dtype), stream, xv)
    _native.cast(xa, out, stream)
    return out


def _binary(op: str, a: Any, b: Any, out: Any, stream: Any) -> Any:
    av, bv = _view(a, stream), _view(b, stream)
    if out is None:  # (a given out is checked against the broadcast shape by the op)
        try:
            shape = np.broadcast_shapes(tuple(av.shape), tuple(bv.shape))
        except ValueError as e:
            raise caijit.ArgumentError(f"{op}: {e}") from None
        out = _out(out, shape, _name(av), stream, av)
    _native.binary(op, av, bv, out, stream)
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
    xv = _view(x, stream)
    out = _out(out, xv.shape, _name(xv), stream, xv)
    _native.ascontiguous(xv, out, stream)
    return out


def _reduce(name: str, x: Any, axis: Optional[int], out: Any, stream: Any) -> Any:
    xv = _view(x, stream)
    if axis is not None and axis not in (-1, xv.ndim - 1):
        raise caijit.ArgumentError(f"{name}: axis must be None or the last axis")
    dt = _name(xv)
    # NumPy's result dtypes: integer sums in 64 bits.
    result = dt
    if name == "sum" and dt.startswith(("int", "uint")):
        result = "uint64" if dt.startswith("uint") else "int64"
    xa = _contiguous(x, xv, stream)
    out = _out(out, () if axis is None else xv.shape[:-1], result, stream, xv)
    _native.reduce(name, xa, out, None if axis is None else -1, stream)
    return out


def sum(x: Any, axis: Optional[int] = None, *, out: Any = None, stream: Any = None) -> Any:  # noqa: A001
    """Sum over the whole array (``axis=None``) or the last axis. 16-bit floats accumulate in
    float32; integers are summed in 64 bits, as NumPy does."""
    return _reduce("sum", x, axis, out, stream)


def max(x: Any, axis: Optional[int] = None, *, out: Any = None, stream: Any = None) -> Any:  # noqa: A001
    """Maximum over the whole array (``axis=None``) or the last axis."""
    return _reduce("max", x, axis, out, stream)


def transpose(x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """The transpose of a 2-D array, as a C-contiguous array."""
    xv = _view(x, stream)
    if xv.ndim != 2:
        raise caijit.ArgumentError(f"transpose: expected a 2-D array, got {xv.ndim}-d")
    xa = _contiguous(x, xv, stream)
    rows, cols = xv.shape
    out = _out(out, (cols, rows), _name(xv), stream, xv)
    _native.transpose(xa, out, stream)
    return out


def softmax(x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """Softmax over the last axis (numerically stable; float16/bfloat16/float32/float64)."""
    xv = _view(x, stream)
    xa = _contiguous(x, xv, stream)
    out = _out(out, xv.shape, _name(xv), stream, xv)
    _native.softmax(xa, out, stream)
    return out


# ------------------------------------------------------------------- the op registry
# Elementwise unary ops come from the runtime's registry (cai_runtime::ops::UNARY_OPS):
# one function per entry, made here, so adding an op is a .cu file and a table entry.


def _make_unary(name: str, doc: str, dtypes: Sequence[str]) -> Callable[..., Any]:
    def op(x: Any, *, out: Any = None, stream: Any = None) -> Any:
        xv = _view(x, stream)
        xa = _contiguous(x, xv, stream)
        out = _out(out, xv.shape, _name(xv), stream, xv)
        _native.unary(name, xa, out, stream)
        return out

    op.__name__ = op.__qualname__ = name
    op.__module__ = __name__
    op.__doc__ = f"{doc}\n\nSupported dtypes: {', '.join(dtypes)}."
    return op


#: The registry's ops by name (each is also this module's attribute of that name).
UNARY_OPS: dict[str, Callable[..., Any]] = {n: _make_unary(n, d, t) for n, d, t in _native.unary_ops()}
globals().update(UNARY_OPS)
__all__ += list(UNARY_OPS)

if TYPE_CHECKING:
    # The registry's ops, for type checkers (they are set above, from the registry).
    def __getattr__(name: str) -> Callable[..., Any]:
        raise AttributeError(name)
