"""caijit kernels as JAX operations: inside ``jax.jit``, ``vmap``, ``grad`` and ``shard_map``.

>>> import caijit, caijit.jax, jax, jax.numpy as jnp                      # doctest: +SKIP
>>> k = caijit.kernel('''
... template <typename T>
... __global__ void axpy(T a, const T* x, const T* y, T* out, int n) {
...     int i = blockIdx.x * blockDim.x + threadIdx.x;
...     if (i < n) out[i] = a * x[i] + y[i];
... }''')
>>> axpy = caijit.jax.kernel_call(
...     k, lambda x, y: jax.ShapeDtypeStruct(x.shape, x.dtype),
...     grid=lambda x, y: (x.size + 255) // 256, block=256,
...     a=2.0, n=lambda x, y: x.size)
>>> jax.jit(axpy)(jnp.ones(1000), jnp.ones(1000))                         # doctest: +SKIP

``kernel_call`` is modelled on :func:`jax.ffi.ffi_call`: it returns a function of JAX
arrays whose results XLA allocates. The kernel's parameters are bound in order: those
named by a keyword are static scalars (fixed when the function is traced); the others
take the input arrays, then the outputs. Template instances are deduced from the arrays'
dtypes when the function is traced, and compiled then (through caijit's caches); each call
of the compiled program is one ``cuLaunchKernel`` on XLA's stream, made by an XLA FFI
handler in caijit's extension, with no Python on the way. Each custom call carries its
launch in full (program, instance, buffers, bindings, configuration) with a fingerprint,
so a serialized executable or a ``jax.export`` artifact runs the same kernel in another
process (the handler compiles it there when XLA loads the program).

JAX is imported by this module only: ``import caijit`` does not need it.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from typing import Any, Callable, Mapping, Optional, Sequence, Union

try:
    import jax
except ImportError as e:  # (ModuleNotFoundError included)
    if sys.version_info < (3, 11):
        _need = (
            f"caijit.jax needs JAX >= 0.10.2, which needs Python >= 3.11 (this is Python "
            f"{sys.version_info[0]}.{sys.version_info[1]}; its last JAX has an XLA FFI API older than caijit's handler needs)"
        )
    else:
        _need = "caijit.jax needs JAX >= 0.10.2: pip install 'jax[cuda13]' (GPUs), or pip install jax (the CPU only)"
    raise ImportError(f"{_need}; JAX could not be imported: {e}", name=e.name) from e
import numpy

from . import _native
from .errors import ArgumentError
from ._native import Kernel

__all__ = ["kernel_call", "TARGET", "TARGET_DIRECT"]

#: The XLA custom call target caijit registers (for platform ``"CUDA"``).
TARGET = "caijit_launch"
#: The same handler, not declared compatible with XLA's command buffers: XLA calls it on
#: its stream every time instead of recording the launch into a CUDA graph.
TARGET_DIRECT = "caijit_launch_direct"

Dims = Union[int, Sequence[int]]
ShapeFn = Callable[..., Any]

#: The attribute carrying a launch's fingerprint (its description is in ``TARGET``).
FINGERPRINT = "caijit_fingerprint"

_lock = threading.Lock()
_registered = False
# Prepared launches by everything that decides them: (kernel kept alive, fingerprint, description).
_prepared: dict[tuple[Any, ...], tuple[Kernel, str, str]] = {}

# PyCapsule_New through a prototype of its own (jax.ffi.pycapsule sets the argument types of
# ctypes.pythonapi.PyCapsule_New, which every user of ctypes shares): a capsule without a
# name or destructor around the handler's address, as jax.ffi.register_ffi_target takes.
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(("PyCapsule_New", ctypes.pythonapi))

_VMAP_METHODS = ("sequential", "sequential_unrolled", "expand_dims", "broadcast_all")


def register() -> None:
    """Register caijit's XLA FFI handler as the custom call targets ``caijit_launch``
    (command-buffer compatible) and ``caijit_launch_direct`` for CUDA (once per process;
    importing this module does it, so that a process can load a program saved by another
    without tracing anything)."""
    global _registered
    with _lock:
        if _registered:
            return
        for target, command_buffer in ((TARGET, True), (TARGET_DIRECT, False)):
            address = _native.xla_handler_address(command_buffer)
            capsule = _capsule_new(address, None, None)
            # The same handler serves the instantiate stage (XLA builds the program, at
            # compilation or deserialization: the launch is resolved, and compiled in a
            # process that never traced it, outside any CUDA graph capture) and execute.
            try:
                jax.ffi.register_ffi_target(target, {"instantiate": capsule, "execute": capsule}, platform="CUDA", api_version=1)
            except (TypeError, ValueError, RuntimeError):  # a jaxlib without stage bundles: resolved on first execution
                jax.ffi.register_ffi_target(target, capsule, platform="CUDA", api_version=1)
        _registered = True


def _dims(what: str, value: Any) -> tuple[int, int, int]:
    if isinstance(value, (int, numpy.integer)):
        dims = [int(value)]
    elif isinstance(value, (tuple, list)) and 1 <= len(value) <= 3:
        dims = [int(v) for v in value]
    else:
        raise ArgumentError(f"{what} must be an int or a tuple of 1 to 3 ints (or a function of the shapes giving one), got {value!r}")
    if any(d < 0 for d in dims):
        raise ArgumentError(f"{what} dimensions must not be negative, got {tuple(dims)}")
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


def _gpu_ordinals() -> list[int]:
    """The CUDA ordinals of the GPUs this process's JAX uses (none on a CPU-only JAX)."""
    try:
        devices = jax.local_devices()
    except RuntimeError:
        return []
    return sorted({d.local_hardware_id for d in devices if d.platform == "gpu" and d.local_hardware_id is not None})


def _scalar_error(kernel: Kernel, name: str, message: str) -> ArgumentError:
    """An error about scalar ``name``, naming its parameter (``.argument``, and ``.index``
    and ``.ctype`` where the source declares it) as the extension's errors do."""
    e = ArgumentError(message)
    e.argument = name
    e.index, e.ctype = kernel._parameter(name) or (None, None)
    return e


def _static_scalar(kernel: Kernel, name: str, value: Any) -> Any:
    """A scalar as the extension takes it: concrete JAX scalars become NumPy scalars."""
    if not isinstance(value, jax.Array):
        return value
    try:
        concrete = numpy.asarray(value)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        raise _scalar_error(
            kernel,
            name,
            f"scalar `{name}` is a traced value; scalars are fixed when the function is traced (pass values computed inside jit as arrays)",
        ) from None
    if concrete.shape != ():
        raise _scalar_error(kernel, name, f"scalar `{name}` is an array of shape {concrete.shape}; pass a number")
    return concrete[()]


def _scalar_key(value: Any) -> tuple[str, str, str]:
    dtype = getattr(value, "dtype", None)
    return (type(value).__name__, str(dtype), repr(value))


def _prepare(
    kernel: Kernel,
    inputs: Sequence[jax.ShapeDtypeStruct],
    outputs: Sequence[jax.ShapeDtypeStruct],
    aliases: Mapping[int, int],
    scalars: Mapping[str, Any],
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    shared_mem: int,
) -> tuple[str, str]:
    """The custom call's attributes for this launch: ``(fingerprint, description)``."""
    ins = [(numpy.dtype(a.dtype).name, tuple(int(d) for d in a.shape)) for a in inputs]
    outs = [(numpy.dtype(a.dtype).name, tuple(int(d) for d in a.shape)) for a in outputs]
    pairs = sorted(aliases.items())
    devices = _gpu_ordinals()
    key = (
        id(kernel),
        tuple(ins),
        tuple(outs),
        tuple(pairs),
        tuple(sorted((n, _scalar_key(v)) for n, v in scalars.items())),
        grid,
        block,
        shared_mem,
        tuple(devices),
    )
    with _lock:
        hit = _prepared.get(key)
    if hit is not None:
        return hit[1], hit[2]
    (fingerprint, description), _name = _native.xla_prepare(
        kernel,
        [(d, list(s)) for d, s in ins],
        [(d, list(s)) for d, s in outs],
        pairs,
        list(scalars.items()),
        list(grid),
        list(block),
        shared_mem,
        devices,
    )
    with _lock:
        entry = _prepared.setdefault(key, (kernel, fingerprint, description))
    return entry[1], entry[2]


def kernel_call(
    kernel: Kernel,
    out_shapes: Any,
    *,
    grid: Union[Dims, ShapeFn],
    block: Union[Dims, ShapeFn],
    shared_mem: int = 0,
    input_output_aliases: Optional[Mapping[int, int]] = None,
    vmap_method: Optional[str] = "sequential",
    command_buffer: bool = True,
    **scalars: Any,
) -> Callable[..., Any]:
    """A JAX function that launches ``kernel``: ``kernel_call(k, out_shapes, grid=...,
    block=..., **scalars)(*arrays)``.

    - ``out_shapes``: a :class:`jax.ShapeDtypeStruct` (the function returns one array) or a
      sequence of them (it returns a list), or a function of the inputs' shapes (objects with
      ``shape``, ``dtype``, ``size``) returning either.
    - ``grid``, ``block``: an int or a tuple of 1 to 3 ints, or a function of the inputs'
      shapes returning one. ``shared_mem``: bytes of dynamic shared memory.
    - ``**scalars``: the kernel's scalar parameters by name, each a Python or NumPy number or
      a function of the inputs' shapes returning one (``n=lambda x: x.size``). A NumPy
      scalar's dtype takes part in template deduction; a Python number converts to the
      parameter's type.
    - ``input_output_aliases``: ``{input index: output index}``, as in
      :func:`jax.ffi.ffi_call`: the output is written in the input's memory (donate the
      input with ``jax.jit(..., donate_argnums=...)`` to avoid a copy). The input may then be
      bound to a non-const parameter; when the kernel has one parameter fewer per alias, the
      aliased outputs take no parameter of their own.
    - ``vmap_method``: ``"sequential"`` (default: one launch per batch element, always
      correct), ``"sequential_unrolled"``, or ``"broadcast_all"`` / ``"expand_dims"`` for
      kernels that handle a leading batch dimension themselves (elementwise kernels): the
      function is traced again with the batched shapes, so grid, scalars and callable
      ``out_shapes`` given as functions of the shapes follow; fixed ``out_shapes`` get the
      batch dimension in front. ``None`` refuses ``vmap`` (a :class:`caijit.ArgumentError`).
    - ``command_buffer``: whether XLA may record the launch into its command buffers (CUDA
      graphs) — the custom call ``caijit_launch`` — or calls the handler every time
      (``caijit_launch_direct``). Both launch on XLA's stream; which is faster depends on
      the program (see docs/jax.md).

    Inputs are never written unless aliased: a non-const pointer bound to an input that is
    not aliased is an error when the function is traced.
    """
    if not isinstance(kernel, Kernel):
        raise ArgumentError(f"kernel_call takes a caijit.Kernel (from caijit.kernel), got {type(kernel).__name__}")
    if vmap_method is not None and vmap_method not in _VMAP_METHODS:
        raise ArgumentError(f"vmap_method must be one of {_VMAP_METHODS} or None, got {vmap_method!r}")
    aliases = dict(input_output_aliases or {})
    register()

    def evaluate(value: Any, avals: Sequence[Any]) -> Any:
        return value(*avals) if callable(value) and not isinstance(value, jax.ShapeDtypeStruct) else value

    def launch(*args: Any, batch: tuple[int, ...] = ()) -> Any:
        avals = [jax.ShapeDtypeStruct(numpy.shape(a), jax.numpy.result_type(a)) for a in args]  # type: ignore[no-untyped-call]
        shapes = evaluate(out_shapes, avals)
        single = isinstance(shapes, jax.ShapeDtypeStruct)
        outs = [shapes] if single else list(shapes)
        if batch and not callable(out_shapes):
            outs = [jax.ShapeDtypeStruct((*batch, *o.shape), o.dtype) for o in outs]  # type: ignore[no-untyped-call]
        for o in outs:
            if not hasattr(o, "shape") or not hasattr(o, "dtype"):
                raise ArgumentError(f"out_shapes must give jax.ShapeDtypeStruct objects, got {o!r}")
        values = {n: _static_scalar(kernel, n, evaluate(v, avals)) for n, v in scalars.items()}
        g = _dims("grid", evaluate(grid, avals))
        b = _dims("block", evaluate(block, avals))
        if 0 in g:
            # Nothing to launch (an empty input with grid=(n + 255) // 256): the call is
            # still checked as one grid block would be, so that an empty input raises what
            # any other would; the outputs are zeros, an aliased output its input.
            _prepare(kernel, avals, outs, aliases, values, (1, 1, 1), b, int(shared_mem))
            alias_of = {o: i for i, o in aliases.items()}
            filled = [args[alias_of[k]] if k in alias_of else jax.numpy.zeros(o.shape, o.dtype) for k, o in enumerate(outs)]
            return filled[0] if single else filled
        fingerprint, description = _prepare(kernel, avals, outs, aliases, values, g, b, int(shared_mem))
        call = jax.ffi.ffi_call(
            TARGET if command_buffer else TARGET_DIRECT,
            outs,
            vmap_method=vmap_method if vmap_method in ("sequential", "sequential_unrolled") else "sequential",
            input_output_aliases=aliases or None,
        )
        results = call(*args, **{FINGERPRINT: fingerprint, TARGET: description})
        return results[0] if single else list(results)

    if vmap_method in ("sequential", "sequential_unrolled"):
        return launch

    def batched(prefix: tuple[int, ...]) -> Callable[..., Any]:
        """The launch with batch dimensions ``prefix`` in front of fixed ``out_shapes``; its
        own vmap rule adds the next one, so nested vmaps make one launch over every level."""

        @jax.custom_batching.custom_vmap
        def call(*args: Any) -> Any:
            return launch(*args, batch=prefix)

        @call.def_vmap
        def rule(axis_size: int, in_batched: Sequence[bool], *args: Any) -> Any:
            if vmap_method is None:
                raise ArgumentError(
                    f"this kernel_call of `{kernel.name}` was made with vmap_method=None: pass vmap_method='sequential' "
                    "(one launch per batch element) or 'broadcast_all' (the kernel handles a leading batch dimension)"
                )
            # Every input gets the batch dimension in front (custom_vmap puts it there), and
            # the kernel sees one launch over the whole batch.
            full = [
                a if bat else jax.numpy.broadcast_to(a, (axis_size, *numpy.shape(a)))
                for a, bat in zip(args, in_batched)
            ]
            out = batched((axis_size, *prefix))(*full)
            return out, (True if not isinstance(out, list) else [True] * len(out))

        return call

    return batched(())


register()
