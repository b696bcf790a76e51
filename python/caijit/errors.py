"""caijit's exception hierarchy, rooted at :class:`CaijitError`."""

from __future__ import annotations

__all__ = [
    "CaijitError",
    "InterfaceError",
    "ArgumentError",
    "CompileError",
    "LaunchError",
    "CudaNotAvailable",
]


class CaijitError(Exception):
    """Base class of every error caijit raises."""


class InterfaceError(CaijitError, ValueError):
    """A ``__cuda_array_interface__`` (or DLPack capsule) that caijit cannot accept.

    The message names the offending key and value."""


class ArgumentError(CaijitError, TypeError):
    """An argument that does not match the kernel's parameter (count, dtype, rank,
    const-ness, a host array where a device array is needed, ...)."""


class CompileError(CaijitError):
    """NVRTC rejected the program. ``.log`` holds NVRTC's whole log, verbatim."""

    log: str = ""


class LaunchError(CaijitError):
    """The driver refused a launch, an allocation or a copy."""


class CudaNotAvailable(CaijitError):
    """No CUDA driver or no NVRTC could be loaded; the message lists where caijit looked."""
