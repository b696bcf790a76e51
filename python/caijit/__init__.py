"""caijit: launch CUDA C++ kernels on any CUDA Array Interface array.

>>> import caijit
>>> d = {"shape": (2, 3), "typestr": "<f4", "data": (0x7F0000000000, False), "version": 3}
>>> caijit.parse_interface(d).strides
(12, 4)
"""

from __future__ import annotations

from ._native import Interface, __version__, parse_interface
from .errors import (
    ArgumentError,
    CaijitError,
    CompileError,
    CudaNotAvailable,
    InterfaceError,
    LaunchError,
)

__all__ = [
    "Interface",
    "parse_interface",
    "CaijitError",
    "InterfaceError",
    "ArgumentError",
    "CompileError",
    "LaunchError",
    "CudaNotAvailable",
    "__version__",
]
