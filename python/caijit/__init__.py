"""caijit: launch CUDA C++ kernels on any CUDA Array Interface array.

Kernels are CUDA C++ compiled with NVRTC on first launch (cached in memory and on disk),
instantiated per argument types for templates, and launched on a stream ordered against
every argument's producer stream, as CUDA Array Interface v3 requires.

>>> import caijit
>>> d = {"shape": (2, 3), "typestr": "<f4", "data": (0x7F0000000000, False), "version": 3}
>>> caijit.parse_interface(d).strides
(12, 4)
"""

from __future__ import annotations

import importlib.machinery
import os
import re
import stat
import sys
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from . import _native
from ._native import DeviceArray, Graph, GraphScalar, Interface, Kernel, Launcher, Stream, __version__, graph, parse_interface
from .diag import debug, launch_sites, nvtx, profile, recent_launches
from .diag import _options as _with_lineinfo
from .errors import (
    ArgumentError,
    BundleError,
    CacheError,
    CaijitError,
    CompileError,
    CudaNotAvailable,
    InterfaceError,
    LaunchError,
)

__all__ = [
    "kernel",
    "module",
    "Module",
    "Kernel",
    "Launcher",
    "Stream",
    "DeviceArray",
    "Interface",
    "empty",
    "zeros",
    "full",
    "to_device",
    "as_cuda_array",
    "parse_interface",
    "stats",
    "device_count",
    "empty_cache",
    "memory_stats",
    "ops",
    "debug",
    "launch_sites",
    "nvtx",
    "profile",
    "recent_launches",
    "__version__",
    # The exception hierarchy (errors.py), listed here too so type checkers see the export.
    "CaijitError",
    "InterfaceError",
    "ArgumentError",
    "CompileError",
    "LaunchError",
    "CudaNotAvailable",
    "CacheError",
    "BundleError",
    "load_bundle",
    "record",
    "autotune",
    "Config",
    "graph",
    "Graph",
    "GraphScalar",
]

from . import bundles
from ._autotune import Config, autotune
from .bundles import load_bundle, record

# The kernel library's functions, made natively with _native (importing them costs
# nothing), and one function per elementwise op of the runtime's registry
# (cai_runtime::ops::UNARY_OPS), made here: adding an op is a .cu file and a table entry.
from ._native import ops

ops.__spec__ = importlib.machinery.ModuleSpec(ops.__name__, None, origin=_native.__file__)
sys.modules[ops.__name__] = ops


def _unary_op(name: str, doc: str, dtypes: Sequence[str]) -> Any:
    def op(x: Any, *, out: Any = None, stream: Any = None) -> Any:
        return _native.unary(name, x, out, stream)

    op.__name__ = op.__qualname__ = name
    op.__module__ = ops.__name__
    op.__doc__ = f"{doc}\n\nSupported dtypes: {', '.join(dtypes)}."
    return op


for _name, _doc, _dtypes in _native.unary_ops():
    ops.UNARY_OPS[_name] = _unary_op(_name, _doc, _dtypes)
    setattr(ops, _name, ops.UNARY_OPS[_name])
    if _name not in ops.__all__:  # (`importlib.reload(caijit)` runs this again)
        ops.__all__.append(_name)
del _name, _doc, _dtypes

# The kernel library precompiled for sm_80 to sm_120 (+PTX), when the wheel carries it
# (scripts/build-wheel.sh bakes it): opened at the first compilation, not here.
# CAIJIT_PACKAGED_BUNDLE=0 leaves it out (caijit.ops then compiles with NVRTC, as from a
# source checkout: to check the library against this NVRTC, or to measure).
if os.environ.get("CAIJIT_PACKAGED_BUNDLE", "1") != "0" and os.path.isfile(bundles.OPS_BUNDLE):
    _native.add_default_bundle(bundles.OPS_BUNDLE)

# pip-installed NVRTC (nvidia-cuda-nvrtc) lives in site-packages: tell the runtime where.
_native.add_site_dirs([p for p in sys.path if p and os.path.isdir(p)])

Source = Union[str, "os.PathLike[str]"]


# A string ending in one of these, without a newline, is a path (not source text).
_SOURCE_SUFFIXES = (".cu", ".cuh", ".h", ".hpp")


def _looks_like_a_path(text: str) -> bool:
    """A one-line string that cannot be CUDA source: no blanks, brackets or semicolons, and a
    file name's shape (a directory part or an extension)."""
    t = text.strip()
    return bool(t) and not any(c in t for c in " \t(){};<>#") and ("/" in t or os.path.splitext(t)[1][1:].isalnum())


def _read_source(source: Source) -> tuple[str, Optional[str]]:
    if isinstance(source, str) and "\n" not in source and not source.rstrip().endswith(_SOURCE_SUFFIXES) and _looks_like_a_path(source):
        if os.path.isfile(source.strip()):
            raise ArgumentError(
                f"{source!r} is a file but not a CUDA source ({', '.join(_SOURCE_SUFFIXES)}): "
                "rename it, or pass its text (open(path).read()) to compile it as CUDA C++"
            )
        raise ArgumentError(f"{source!r}: no such file (and not CUDA source text: it declares nothing)")
    if isinstance(source, os.PathLike) or (
        isinstance(source, str) and "\n" not in source and source.rstrip().endswith(_SOURCE_SUFFIXES)
    ):
        path = os.fspath(source)
        if isinstance(path, bytes):
            raise ArgumentError(f"{path!r}: the file name is not UTF-8 (NVRTC names programs in UTF-8); rename the file")
        return _read_text(path, missing="no such file (a string ending in .cu is read as a path)"), path
    if not isinstance(source, str):
        raise ArgumentError(f"kernel source must be a str or a path, got {type(source).__name__}")
    return source, None


def _read_text(path: str, missing: str = "no such file") -> str:
    """The UTF-8 text of a CUDA source file, or an ArgumentError naming it and what is
    wrong (``missing`` says what a missing file is)."""
    if not _is_utf8(path):
        raise ArgumentError(f"{path!r}: the file name is not UTF-8 (NVRTC names programs in UTF-8); rename the file")
    try:
        # Opened without blocking (a FIFO nobody writes blocks `open` itself), and read only
        # when it is a regular file (not a FIFO, nor a device such as /dev/zero).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if not stat.S_ISREG(mode):
                kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))
                what = next((name for test, name in kinds if test(mode)), "not a regular file")
                raise ArgumentError(f"{path}: is {what}, not a CUDA source file")
            return f.read().decode("utf-8")
    except FileNotFoundError:
        raise ArgumentError(f"{path}: {missing}") from None
    except IsADirectoryError:
        raise ArgumentError(f"{path}: is a directory, not a CUDA source file") from None
    except UnicodeDecodeError as e:
        raise ArgumentError(f"{path}: not UTF-8 text (byte {e.start} is {e.object[e.start]:#04x}); is it a binary file?") from None
    except OSError as e:
        raise ArgumentError(f"{path}: cannot be read: {e.strerror or e}") from None


def _is_utf8(path: str) -> bool:
    """Whether a path (as Python decoded it from the OS) is valid UTF-8 text."""
    try:
        path.encode("utf-8")
        return True
    except UnicodeEncodeError:  # undecodable bytes, kept as surrogates
        return False


def _defines(defines: Optional[Mapping[str, Any]]) -> list[tuple[str, Optional[str]]]:
    return [(k, None if v is None else str(v)) for k, v in (defines or {}).items()]


def kernel(
    source: Source,
    name: Optional[str] = None,
    *,
    options: Sequence[str] = (),
    include_dirs: Iterable[Source] = (),
    defines: Optional[Mapping[str, Any]] = None,
    lineinfo: Optional[bool] = None,
) -> Kernel:
    """A kernel from CUDA C++ source text or a ``.cu`` path.

    ``name`` may be omitted when the source declares one ``__global__`` function. It may be
    any name expression NVRTC accepts: a template instance (``"axpy<float>"``), a qualified
    name (``"ns::k"``), an overload cast (``"(void(*)(float*, int))k"``), or the name of a
    kernel a macro makes. Templates named without arguments are instantiated per argument
    types on launch, Numba-style (default template arguments are used where no argument
    decides); overloads named without a cast are picked by the launch's arguments. The
    parameter types are the compiler's (its lowered names, demangled, checked against the
    PTX), so what ``#ifdef`` chose is what the launch checks against.
    Launch with ``k[grid, block](*args)``, ``k[grid, block, stream, shared_mem](*args)`` or
    ``k.forall(n)(*args)``.
    ``lineinfo=True`` (default: ``CAIJIT_LINEINFO=1``) compiles with ``-lineinfo``, the
    file named by its absolute path, for compute-sanitizer and Nsight Compute.
    """
    text, path = _read_source(source)
    if name is not None:
        _check_kernel_name(text, name)
    try:
        return _native.make_kernel(
            text,
            name,
            path,
            _with_lineinfo(options, lineinfo),
            [os.fspath(d) for d in include_dirs],
            _defines(defines),
        )
    except UnicodeEncodeError as e:
        # A str with a lone surrogate (from a file name decoded with surrogateescape, say).
        raise ArgumentError(f"the source, name, options or defines hold text that is not valid Unicode ({e.reason} at {e.start}: {e.object[e.start:e.end]!r}): NVRTC reads UTF-8") from None


def _kernel_name_base(name: str) -> Optional[str]:
    """The (qualified) function a name expression names: without a leading cast
    (``(void(*)(float*))k``) and template arguments; None where it is no plain name."""
    n = name.strip()
    if n.startswith("("):
        depth = 0
        for i, c in enumerate(n):
            depth += {"(": 1, ")": -1}.get(c, 0)
            if depth == 0:
                n = n[i + 1 :].strip()
                break
    n = n.split("<", 1)[0].strip().removeprefix("::")
    return n if n and all(part.isidentifier() for part in n.split("::")) else None


_INCLUDES = re.compile(r"#\s*include\s*[<\"]([^>\"/]+)")
#: Headers that declare no kernel a user names: the toolkit's and caijit's.
_KNOWN_INCLUDES = {"caijit", "cuda_fp16.h", "cuda_bf16.h", "cuda_runtime.h", "cooperative_groups.h", "cuda", "cuComplex.h", "mma.h"}


def _check_kernel_name(text: str, name: str) -> None:
    """A kernel name the source cannot have is an error here, naming the kernels it has.
    Where macros or quoted includes may declare kernels the text does not show, the
    compiler decides (at the first compilation, with the same list)."""
    base = _kernel_name_base(name)
    if base is None or "#define" in text or any(i not in _KNOWN_INCLUDES for i in _INCLUDES.findall(text)):
        return
    declared = list(dict.fromkeys(d[0] for d in _native.declarations(text)))
    last = base.split("::")[-1]
    if any(d == base or d.split("::")[-1] == last for d in declared):
        return
    has = ", ".join(declared) if declared else "no __global__ function"
    raise ArgumentError(f'no kernel named "{name}" in the program (it has: {has})')


class Module:
    """Several kernels of one program: ``m.kernel("name")`` or ``m["name"]``."""

    def __init__(
        self,
        source: Source,
        *,
        options: Sequence[str] = (),
        include_dirs: Iterable[Source] = (),
        defines: Optional[Mapping[str, Any]] = None,
        lineinfo: Optional[bool] = None,
    ) -> None:
        self._source, self._path = _read_source(source)
        self._options = _with_lineinfo(options, lineinfo)
        self._include_dirs = [os.fspath(d) for d in include_dirs]
        self._defines = _defines(defines)
        self._kernels: dict[str, Kernel] = {}

    @property
    def names(self) -> list[str]:
        """The ``__global__`` functions the source declares (qualified names, each once:
        overloads and ``#ifdef`` alternatives share one)."""
        return list(dict.fromkeys(d[0] for d in _native.declarations(self._source)))

    def kernel(self, name: str) -> Kernel:
        k = self._kernels.get(name)
        if k is None:
            k = _native.make_kernel(self._source, name, self._path, self._options, self._include_dirs, self._defines)
            self._kernels[name] = k
        return k

    __getitem__ = kernel

    def __repr__(self) -> str:
        return f"caijit.Module(kernels={self.names})"


def module(
    source: Source,
    *,
    options: Sequence[str] = (),
    include_dirs: Iterable[Source] = (),
    defines: Optional[Mapping[str, Any]] = None,
    lineinfo: Optional[bool] = None,
) -> Module:
    """A program with several kernels."""
    return Module(source, options=options, include_dirs=include_dirs, defines=defines, lineinfo=lineinfo)


def empty(shape: Union[int, Sequence[int]], dtype: Any = "float32", *, stream: Any = None, device: int = 0) -> DeviceArray:
    """Uninitialised device memory, allocated stream-ordered."""
    return DeviceArray.allocate(shape, dtype, stream=stream, device=device)


def zeros(shape: Union[int, Sequence[int]], dtype: Any = "float32", *, stream: Any = None, device: int = 0) -> DeviceArray:
    """Zero-filled device memory."""
    return DeviceArray.allocate(shape, dtype, zeroed=True, stream=stream, device=device)


def full(
    shape: Union[int, Sequence[int]], fill_value: Any, dtype: Any = "float32", *, stream: Any = None, device: int = 0
) -> DeviceArray:
    """Device memory filled with ``fill_value``."""
    import numpy

    return to_device(numpy.full(shape, fill_value, dtype=dtype), stream=stream, device=device)


def to_device(array: Any, *, stream: Any = None, device: int = 0) -> DeviceArray:
    """Copy a host array (anything ``numpy.asarray`` accepts) to the device."""
    import numpy

    a = numpy.asarray(array)
    # (`tobytes` writes C order whatever the layout; a 0-d array stays 0-d.)
    return DeviceArray.from_buffer(a.tobytes(), a.shape, a.dtype, stream=stream, device=device)


def as_cuda_array(obj: Any) -> Interface:
    """A zero-copy view of any CUDA Array Interface or DLPack object: validated, with the
    derived facts of :class:`Interface`, and itself exporting ``__cuda_array_interface__``.
    A view of a caijit array keeps the array alive, and one of a DLPack-only producer its
    capsule (the producer is asked, as for a launch, to order its work before the legacy
    default stream, which the view names as its stream); keep any other ``obj`` alive while
    the view is used."""
    if isinstance(obj, DeviceArray) or (not hasattr(obj, "__cuda_array_interface__") and hasattr(obj, "__dlpack__")):
        # The array's own view (its stream and device, whatever the export opt-outs say),
        # or the capsule's.
        return _native.launch_view(obj)
    return parse_interface(obj)


def stats() -> dict[str, int]:
    """caijit's counters: launches, compiles, cache hits, stream waits, host syncs, ..."""
    return _native.stats()


def device_count() -> int:
    """Number of CUDA devices; raises :class:`CudaNotAvailable` without a driver."""
    return _native.device_count()


def empty_cache() -> None:
    """Give the device memory caijit keeps for reuse back to the system, on every device it
    has used (like ``torch.cuda.empty_cache()``), once the work that used it has completed:
    caijit waits for the streams it was kept for, not for the device, so that another
    library's graph capture survives. caijit arrays come from a caching allocator that keeps
    freed memory, so that allocating again costs no driver call; memory still in use stays
    allocated."""
    _native.empty_cache()


def memory_stats(device: int = 0) -> dict[str, int]:
    """What caijit's caching allocator holds on ``device``, in bytes (like
    ``torch.cuda.memory_stats()``, fewer keys): ``allocated_bytes`` (held by live arrays,
    rounded up to whole blocks of 512 bytes), ``reserved_bytes`` (taken from the driver:
    allocated plus kept for reuse), ``segments`` (driver allocations) and ``active_blocks``."""
    return _native.memory_stats(device)
