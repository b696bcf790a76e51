"""Custom GPU ops built on caijit's kernel library (``kernels/ops/*.cu``).

Every op accepts any CUDA Array Interface array (CuPy, PyTorch, Numba, JAX, caijit),
takes ``out=`` (otherwise returns a new :class:`caijit.DeviceArray`; any view whose elements
are distinct memory, strided ones written through a temporary) and ``stream=``.
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
# Each op is one native call (caijit._native, python/src/ops.rs): each argument converted
# once, then one op call of the runtime (cai_runtime::ops), which makes the checks, NumPy's
# result shape and dtype, the result when no ``out=`` is given, C-ordered copies of strided
# inputs for the ops whose kernels need them (the op registry says which), the streams and
# the launches. The functions here only give the native calls their names, signatures and docs.


@functools.lru_cache(maxsize=None)
def _dtype_name(dtype: Any) -> str:
    """The library's name of a dtype, typestr or dtype name ("void16", the typestr of a
    2-byte opaque type, is bfloat16). Cached: NumPy's ``dtype.name`` costs microseconds.
    (``cast`` asks it of any ``dtype`` that is not a dtype's own name.)"""
    if isinstance(dtype, str) and dtype == "bfloat16":
        return dtype
    name = np.dtype(dtype).name
    return "bfloat16" if name == "void16" else name


def axpy(a: Any, x: Any, y: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``out = a * x + y`` (``out=y`` updates ``y`` in place)."""
    return _native.axpy(a, x, y, out, stream)


def scale(x: Any, a: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``out = a * x``."""
    return _native.scale(x, a, out, stream)


def fill(out: Any, value: Any, *, stream: Any = None) -> Any:
    """Set every element of the C-contiguous ``out`` to ``value``."""
    _native.fill(out, value, stream)
    return out


def cast(x: Any, dtype: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``x`` converted to ``dtype`` (real types: bool, integers, float16/32/64, bfloat16);
    a given ``out`` must be of ``dtype``."""
    return _native.cast(x, dtype, out, stream)


def add(a: Any, b: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``a + b`` with NumPy broadcasting."""
    return _native.binary("add", a, b, out, stream)


def subtract(a: Any, b: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``a - b`` with NumPy broadcasting."""
    return _native.binary("subtract", a, b, out, stream)


def multiply(a: Any, b: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``a * b`` with NumPy broadcasting."""
    return _native.binary("multiply", a, b, out, stream)


def divide(a: Any, b: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``a / b`` with NumPy broadcasting (integer division truncates, as in C++)."""
    return _native.binary("divide", a, b, out, stream)


def maximum(a: Any, b: Any, *, out: Any = None, stream: Any = None) -> Any:
    """Elementwise maximum with NumPy broadcasting."""
    return _native.binary("maximum", a, b, out, stream)


def minimum(a: Any, b: Any, *, out: Any = None, stream: Any = None) -> Any:
    """Elementwise minimum with NumPy broadcasting."""
    return _native.binary("minimum", a, b, out, stream)


def ascontiguous(x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """A C-contiguous copy of any strided view (rank ≤ 8; negative and zero strides too)."""
    return _native.ascontiguous(x, out, stream)


def sum(x: Any, axis: Optional[int] = None, *, out: Any = None, stream: Any = None) -> Any:  # noqa: A001
    """Sum over the whole array (``axis=None``) or the last axis. 16-bit floats accumulate in
    float32; integers are summed in 64 bits, as NumPy does."""
    return _native.reduce("sum", x, out, axis, stream)


def max(x: Any, axis: Optional[int] = None, *, out: Any = None, stream: Any = None) -> Any:  # noqa: A001
    """Maximum over the whole array (``axis=None``) or the last axis."""
    return _native.reduce("max", x, out, axis, stream)


def transpose(x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """The transpose of a 2-D array, as a C-contiguous array."""
    return _native.transpose(x, out, stream)


def softmax(x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """Softmax over the last axis (numerically stable; float16/bfloat16/float32/float64)."""
    return _native.softmax(x, out, stream)


# ------------------------------------------------------------------- the op registry
# Elementwise unary ops come from the runtime's registry (cai_runtime::ops::UNARY_OPS):
# one function per entry, made here, so adding an op is a .cu file and a table entry.


def _make_unary(name: str, doc: str, dtypes: Sequence[str]) -> Callable[..., Any]:
    def op(x: Any, *, out: Any = None, stream: Any = None) -> Any:
        return _native.unary(name, x, out, stream)

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
