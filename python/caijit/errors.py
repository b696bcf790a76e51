"""caijit's exception hierarchy, rooted at :class:`CaijitError`."""

from __future__ import annotations

from typing import Any

__all__ = [
    "CaijitError",
    "InterfaceError",
    "ArgumentError",
    "CompileError",
    "LaunchError",
    "CudaNotAvailable",
    "CacheError",
    "BundleError",
]


class CaijitError(Exception):
    """Base class of every error caijit raises."""


class InterfaceError(CaijitError, ValueError):
    """A ``__cuda_array_interface__`` (or DLPack capsule) that caijit cannot accept.

    The message names the offending key and value. When the array was an argument of a
    launch or of a ``caijit.ops`` function, ``.index``, ``.argument`` and ``.ctype`` say
    which, as :class:`ArgumentError`'s do; otherwise they are ``None``."""

    index: int | None = None
    argument: str | None = None
    ctype: str | None = None


class ArgumentError(CaijitError, TypeError):
    """An argument that does not match the kernel's parameter (count, dtype, rank,
    const-ness, a host array where a device array is needed, ...).

    ``.index`` is the argument's position in the call, ``.argument`` the parameter's name
    and ``.ctype`` its C++ type, each ``None`` where the error is not about one argument
    (or the kernel's declaration does not name it)."""

    index: int | None = None
    argument: str | None = None
    ctype: str | None = None


class CompileError(CaijitError):
    """NVRTC rejected the program. ``.log`` holds NVRTC's whole log, verbatim; where an
    NVRTC call failed, ``.code`` is its ``nvrtcResult`` and ``.code_name`` the name of it
    (``"NVRTC_ERROR_INVALID_OPTION"``, say)."""

    log: str = ""
    code: int | None = None
    code_name: str | None = None


class LaunchError(CaijitError):
    """The driver refused a launch, an allocation or a copy, or caijit refused a launch
    before asking it. When the driver refused, ``.code`` is its ``CUresult``,
    ``.code_name`` the name of it (``"CUDA_ERROR_OUT_OF_MEMORY"``, say) and ``.call`` the
    driver function; otherwise all three are ``None``.

    A sticky error (a kernel faulted: illegal address, misaligned access, trap, ...) also
    carries ``.recent_launches``, caijit's last launches (newest first, each a dict: the
    kernels that may have caused it) and ``.site``, the Python ``file:line`` that reported
    it. In launch-blocking mode (``caijit.debug(True)``) the error is raised by the faulting
    launch itself, and ``.kernel``, ``.grid``, ``.block`` and ``.arguments`` describe it
    (``None`` otherwise). See ``docs/debugging.md``."""

    code: int | None = None
    code_name: str | None = None
    call: str | None = None
    kernel: str | None = None
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    arguments: list[str] | None = None
    recent_launches: list[dict[str, Any]] | None = None
    site: str | None = None


class CudaNotAvailable(CaijitError):
    """No CUDA driver or no NVRTC could be loaded; the message lists where caijit looked."""


class CacheError(CaijitError, OSError):
    """caijit's disk cache could not be read, written or cleared: ``.path`` is the file or
    directory, ``.errno`` the operating system's error number (``None`` if there is none)."""

    path: str | None = None


class BundleError(CaijitError):
    """A kernel bundle that cannot be used (unreadable, corrupt, truncated, built by
    another caijit version, without code for the device), or a kernel instance that no
    loaded bundle holds while NVRTC cannot be loaded. The message names the bundle(s) and
    what to do (see ``docs/bundles.md``)."""
