"""caijit in PyTorch programs: the kernel library as PyTorch operators, any kernel as one.

Importing this module (PyTorch does it when it is imported, through the ``torch.backends``
entry point; ``import caijit.torch`` does it by hand) registers:

- every op of ``caijit.ops`` as ``torch.ops.caijit.<op>``, with an ``.out`` overload
  (``out`` mutated, nothing returned), a fake implementation from the op's own shape and
  dtype rule (``caijit._native.op_result``) and, where the op is differentiable, its
  derivative. ``caijit.ops.<op>(tensor, ...)`` without ``out`` is this operator: its result
  is a tensor from PyTorch's caching allocator, made on PyTorch's current stream.
- the ``caijit.ops`` functions in ``torch.compile``: Dynamo traces each as its operator,
  so a compiled function using them has no graph break;
- :func:`op`, which makes any caijit kernel a PyTorch operator in one call.

A kernel launched directly (``k[grid, block](...)``) in a compiled function is not traced:
Dynamo breaks the graph there (the launch runs eagerly, with correct results) or, with
``fullgraph=True``, refuses the function; :func:`op` makes the kernel traceable.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import math
import sys
from typing import Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import torch

from . import _native
from . import ops as _ops
from .errors import ArgumentError

__all__ = ["op", "like", "Operator"]


# ----- dtypes -----


#: caijit's name of each PyTorch dtype (the two libraries name their dtypes alike), and back.
_NAMES: Dict[torch.dtype, str] = {d: str(d)[len("torch.") :] for d in vars(torch).values() if isinstance(d, torch.dtype)}
_DTYPES: Dict[str, torch.dtype] = {n: d for d, n in _NAMES.items() if getattr(torch, n, None) is d}


def _name(dtype: torch.dtype) -> str:
    return _NAMES[dtype]


def _cast_dtype_name(dtype: Any) -> str:
    return _native.cast_dtype_name(dtype)


# (Dynamo calls it while tracing and keeps its result: `torch._dynamo.assume_constant_result`,
# without importing Dynamo here.)
_cast_dtype_name._dynamo_marked_constant = True  # type: ignore[attr-defined]


def _torch_dtype(dtype: Any) -> torch.dtype:
    """A PyTorch dtype as is; any other spelling read as ``caijit.ops.cast`` reads it
    (``_native.cast_dtype_name``: NumPy's reading, ``"float"`` is float64), then PyTorch's."""
    if isinstance(dtype, torch.dtype):
        return dtype
    name = _cast_dtype_name(dtype)
    found = _DTYPES.get(name)
    if found is None:
        raise ArgumentError(f"cast: {name} is not a dtype PyTorch has")
    return found


# ----- the kernel library's operators -----


class _Spec(NamedTuple):
    """One op of the library as an operator: its schema's arguments, the positions of its
    arrays, and the parameters (by position) its result depends on beside them."""

    args: str
    arrays: Tuple[int, ...]
    params: Tuple[Tuple[str, int], ...] = ()


_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum")

_SPECS: Dict[str, _Spec] = {
    "axpy": _Spec("Scalar a, Tensor x, Tensor y", (1, 2)),
    "scale": _Spec("Tensor x, Scalar a", (0,)),
    "cast": _Spec("Tensor x, ScalarType dtype", (0,), (("dtype", 1),)),
    **{b: _Spec("Tensor a, Tensor b", (0, 1)) for b in _BINARY},
    "ascontiguous": _Spec("Tensor x", (0,)),
    "transpose": _Spec("Tensor x", (0,)),
    "sum": _Spec("Tensor x, int? axis=None", (0,), (("axis", 1),)),
    "max": _Spec("Tensor x, int? axis=None", (0,), (("axis", 1),)),
    "softmax": _Spec("Tensor x", (0,)),
    **{u: _Spec("Tensor x", (0,)) for u in _ops.UNARY_OPS},
}


def _param(value: Any) -> Any:
    return _name(value) if isinstance(value, torch.dtype) else value


def _result(name: str, spec: _Spec, args: Sequence[Any], out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """A new tensor for the result of op ``name`` on ``args`` (fake tensors under tracing),
    by the op's own rule; raises the op's own error for arguments it refuses, and for an
    ``out`` it could not write."""
    arrays = [args[i] for i in spec.arrays]
    shape, dtype = _native.op_result(
        name,
        [a.shape for a in arrays],
        [_name(a.dtype) for a in arrays],
        out=None if out is None else (out.shape, _name(out.dtype), out.stride()),
        **{p: _param(args[i]) for p, i in spec.params if i < len(args)},
    )
    return torch.empty(shape, dtype=_DTYPES[dtype], device=arrays[0].device)


def _data(args: Iterable[Any]) -> List[Any]:
    """Arguments as the native op takes them: data without autograd (below autograd, a
    tensor still says it requires grad, and its CUDA Array Interface refuses it), dtypes by name."""
    return [a.detach() if isinstance(a, torch.Tensor) and a.requires_grad else _param(a) for a in args]


def _define(lib: Any, name: str, spec: _Spec) -> Callable[..., torch.Tensor]:
    """Define op ``name`` and its ``.out`` overload: schemas, CUDA kernels, fake kernels.
    Returns the CUDA kernel of the op."""
    native = getattr(_ops, name)
    lib.define(f"{name}({spec.args}) -> Tensor")
    lib.define(f"{name}.out({spec.args}, *, Tensor(a!) out) -> ()")

    def run(*args: Any) -> torch.Tensor:
        out = _result(name, spec, args)
        native(*_data(args), out=out)
        return out

    def run_out(*args: Any, out: torch.Tensor) -> None:
        native(*_data(args), out=out)

    def fake(*args: Any) -> torch.Tensor:
        return _result(name, spec, args)

    def fake_out(*args: Any, out: torch.Tensor) -> None:
        _result(name, spec, args, out)

    lib.impl(name, run, "CUDA")
    lib.impl(f"{name}.out", run_out, "CUDA")
    torch.library.register_fake(f"caijit::{name}", fake, lib=lib)
    torch.library.register_fake(f"caijit::{name}.out", fake_out, lib=lib)
    return run


def _define_fill(lib: Any) -> None:
    lib.define("fill(Tensor(a!) out, Scalar value) -> ()")
    def run(out: torch.Tensor, value: Any) -> None:
        _ops.fill(out, value)

    lib.impl("fill", run, "CUDA")
    torch.library.register_fake("caijit::fill", lambda out, value: None, lib=lib)


# ----- derivatives -----
#
# Each op's derivative as PyTorch expressions (the gradients of the inputs that have one);
# broadcast operands get their gradient summed back to their shape.


def _save(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    """The inputs a derivative reads (not the output: PyTorch's own ops let a caller change
    their result in place before backward)."""
    ctx.save_for_backward(*[i for i in inputs if isinstance(i, torch.Tensor)])
    ctx.scalars = [None if isinstance(i, torch.Tensor) else i for i in inputs]


def _save_output(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(output)


def _unbroadcast(g: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return g.sum_to_size(like.shape) if g.shape != like.shape else g


def _grad_binary(name: str) -> Callable[..., Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]]:
    def backward(ctx: Any, g: torch.Tensor) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        a, b = ctx.saved_tensors
        ga, gb = {
            "add": lambda: (g, g),
            "subtract": lambda: (g, -g),
            "multiply": lambda: (g * b, g * a),
            "divide": lambda: (g / b, -g * a / (b * b)),
        }[name]()
        return _unbroadcast(ga, a), _unbroadcast(gb, b)

    return backward


def _grad_axpy(ctx: Any, g: torch.Tensor) -> Tuple[None, torch.Tensor, torch.Tensor]:
    return None, g * ctx.scalars[0], g


def _grad_scale(ctx: Any, g: torch.Tensor) -> Tuple[torch.Tensor, None]:
    return g * ctx.scalars[1], None


def _grad_cast(ctx: Any, g: torch.Tensor) -> Tuple[torch.Tensor, None]:
    (x,) = ctx.saved_tensors
    return g.to(x.dtype), None


def _grad_identity(ctx: Any, g: torch.Tensor) -> torch.Tensor:
    return g


def _grad_transpose(ctx: Any, g: torch.Tensor) -> torch.Tensor:
    return g.t()


def _grad_sum(ctx: Any, g: torch.Tensor) -> Tuple[torch.Tensor, None]:
    (x,) = ctx.saved_tensors
    g = g.to(x.dtype)
    return (g.expand(x.shape) if ctx.scalars[1] is None else g.unsqueeze(-1).expand(x.shape)), None


def _grad_softmax(ctx: Any, g: torch.Tensor) -> torch.Tensor:
    (y,) = ctx.saved_tensors
    return y * (g - (g * y).sum(-1, keepdim=True))


def _grad_abs(ctx: Any, g: torch.Tensor) -> torch.Tensor:
    (x,) = ctx.saved_tensors
    return g * x.sign()


_DERIVATIVES: Dict[str, Callable[..., Any]] = {
    **{b: _grad_binary(b) for b in ("add", "subtract", "multiply", "divide")},
    "axpy": _grad_axpy,
    "scale": _grad_scale,
    "cast": _grad_cast,
    "ascontiguous": _grad_identity,
    "transpose": _grad_transpose,
    "sum": _grad_sum,
    "softmax": _grad_softmax,
    "abs": _grad_abs,
}


#: The keys a functional op's call passes after autograd (ADInplaceOrView falls through).
_BELOW_AUTOGRAD = torch._C._after_autograd_keyset.remove(torch._C.DispatchKey.ADInplaceOrView)
_CUDA = torch._C.DispatchKey.CUDA


_AFTER_AUTOGRAD = torch._C._after_autograd_keyset
_AFTER_INPLACE = torch._C._after_ADInplaceOrView_keyset


def _recorded(overload: Any, backward: Callable[..., Any], setup_context: Optional[Callable[..., Any]]) -> Callable[..., Any]:
    """PyTorch's Autograd kernel recording ``backward`` (the one ``register_autograd`` makes)."""
    from torch._library.autograd import Info, make_autograd_impl

    return make_autograd_impl(overload, Info(backward, setup_context))


def _autograd(lib: Any, name: str, overload: Any, run: Optional[Callable[..., Any]], derivative: Callable[[], Optional[Callable[..., Any]]]) -> None:
    """The Autograd kernel of op ``name`` (an overload's name): where a gradient is wanted,
    ``derivative()`` (PyTorch's recording kernel, see :func:`_recorded`), or an error when
    the op has none (PyTorch would only warn, and the gradient would be silently missing).
    Else, where nothing comes between autograd and CUDA (no mode, tensor subclass or
    functionalization) and ``run`` is given (a functional op), its CUDA kernel at once: what
    the dispatcher would do next, without a second pass through it; else the next layer."""

    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled() and torch._C._any_requires_grad(*args, *kwargs.values()):
            recorded = derivative()
            if recorded is None or kwargs:
                what = "an out= argument" if kwargs else "no derivative"
                raise ArgumentError(
                    f"{overload}: an argument requires grad, but the operator has {what}: autograd cannot record it "
                    "(detach the inputs, or use an operator that has a derivative)"
                )
            return recorded(keyset, *args)
        if run is not None and (keyset & _BELOW_AUTOGRAD).highestPriorityTypeId() == _CUDA:
            return run(*args)
        with torch._C._AutoDispatchBelowAutograd():
            return overload.redispatch(keyset & _AFTER_AUTOGRAD, *args, **kwargs)

    lib.impl(name, kernel, "Autograd", with_keyset=True)


def _in_place(lib: Any, name: str, overload: Any, positions: Sequence[int], keys: Sequence[str]) -> None:
    """The ADInplaceOrView kernel of a mutating op ``name``: each tensor it writes (argument
    ``positions``, keyword ``keys``) has its version bumped, as PyTorch's in-place ops do,
    so that autograd refuses a backward that would read a value saved before the write."""

    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        for i in positions:
            torch.autograd.graph.increment_version(args[i])
        for k in keys:
            torch.autograd.graph.increment_version(kwargs[k])
        with torch._C._AutoDispatchBelowADInplaceOrView():
            return overload.redispatch(keyset & _AFTER_INPLACE, *args, **kwargs)

    lib.impl(name, kernel, "ADInplaceOrView", with_keyset=True)


def _written(t: Any) -> None:
    """A tensor the native op wrote (``out=``, ``fill``): its version bumped (see :func:`_in_place`)."""
    torch.autograd.graph.increment_version(t)


def _constant(value: Optional[Callable[..., Any]]) -> Callable[[], Optional[Callable[..., Any]]]:
    return lambda: value


def _register() -> Tuple[Any, Dict[str, Callable[..., torch.Tensor]]]:
    lib = torch.library.Library("caijit", "DEF")
    runs = {name: _define(lib, name, spec) for name, spec in _SPECS.items()}
    _define_fill(lib)
    for name in _SPECS:
        packet = getattr(torch.ops.caijit, name)
        backward = _DERIVATIVES.get(name)
        setup = _save_output if name == "softmax" else _save
        recorded = None if backward is None else _recorded(packet.default, backward, setup)
        _autograd(lib, name, packet.default, runs[name], _constant(recorded))
        _autograd(lib, f"{name}.out", packet.out, None, lambda: None)
        _in_place(lib, f"{name}.out", packet.out, (), ("out",))
    _autograd(lib, "fill", torch.ops.caijit.fill.default, None, lambda: None)
    _in_place(lib, "fill", torch.ops.caijit.fill.default, (0,), ())
    return lib, runs


#: The library and each op's CUDA kernel.
_LIB, _RUNS = _register()
_OPERATORS: Dict[str, Any] = {name: getattr(torch.ops.caijit, name) for name in (*_SPECS, "fill")}
#: Each op's default overload (a call skips the packet's overload resolution).
_DEFAULTS: Dict[str, Any] = {name: op.default for name, op in _OPERATORS.items()}


# ----- caijit.ops on tensors -----


def _with_torch_dtype(spec: _Spec, args: Tuple[Any, ...]) -> Tuple[Any, ...]:
    """``args`` with a dtype argument (cast's) as a PyTorch dtype, as the schema types it."""
    at = dict(spec.params).get("dtype")
    if at is None or at >= len(args):
        return args
    return (*args[:at], _torch_dtype(args[at]), *args[at + 1 :])


_functorch_active = torch._C._are_functorch_transforms_active
_dispatch_modes = torch._C._len_torch_dispatch_stack
_Tensor = torch.Tensor


def _hint(value: Any) -> Any:
    """A symbolic size or scalar's value while PyTorch traces with dynamic shapes (its hint,
    without a guard), else the value."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        from torch.fx.experimental.symbolic_shapes import hint_int

        return hint_int(value, fallback=1) if isinstance(value, torch.SymInt) else (0.0 if isinstance(value, torch.SymFloat) else False)
    return value


def _described(a: Any) -> Any:
    """An argument as ``Kernel._check_described`` reads it: a tensor's facts without its
    memory (a fake tensor has none), or the scalar."""
    if isinstance(a, _Tensor):
        return (
            "torch.Tensor",
            [_hint(n) for n in a.shape],
            _NAMES.get(a.dtype, str(a.dtype)),
            [_hint(n) for n in a.stride()],
            _hint(a.storage_offset()) * a.element_size(),
            a.device.type in ("cuda", "meta"),  # (meta tensors: traced for any device)
        )
    return _hint(a)


def _plain(args: Iterable[Any]) -> bool:
    """Whether PyTorch's dispatcher would take a call on ``args`` straight to its CUDA
    kernel: plain tensors (no subclass: fake, functional, a user's), no gradient wanted, no
    dispatch mode, no functorch transform. Such a call is made by the kernel at once."""
    if _dispatch_modes() or _functorch_active():
        return False
    grad = torch.is_grad_enabled()
    return not any(isinstance(a, _Tensor) and (type(a) is not _Tensor or (grad and a.requires_grad)) for a in args)


def _mixed(name: str, spec: _Spec, args: Tuple[Any, ...], stream: Any) -> Any:
    """A call whose first array is a tensor and whose others are not (a CuPy array, any CAI
    or DLPack producer): the result is a tensor from PyTorch's allocator, written by the
    native op (autograd does not record it); a non-array is refused as the op refuses it."""
    shapes: List[Sequence[int]] = []
    dtypes: List[Any] = []
    for i in spec.arrays:
        a = args[i]
        if isinstance(a, _Tensor):
            shapes.append(a.shape)
            dtypes.append(_name(a.dtype))
        else:
            try:
                view = _native.launch_view(a)
            except ArgumentError as e:
                raise ArgumentError(f"{name}: argument {i} must be a CUDA array ({e})") from e
            shapes.append(view.shape)
            dtypes.append(view.dtype)
    shape, dtype = _native.op_result(name, shapes, dtypes, **{p: _param(args[i]) for p, i in spec.params if i < len(args)})
    out = torch.empty(shape, dtype=_DTYPES[dtype], device=args[spec.arrays[0]].device)
    getattr(_ops, name)(*_data(args), out=out, stream=stream)
    return out


def _eager(name: str, args: Tuple[Any, ...], params: Optional[Mapping[str, Any]], stream: Any) -> Any:
    """``caijit.ops.<name>(*args, **params, stream=stream)`` whose first array is a CUDA
    tensor and that has no ``out``: called by the native op, made by the operator (its CUDA
    kernel at once where the dispatcher would go straight there, see :func:`_plain`)."""
    spec = _SPECS[name]
    args = _with_torch_dtype(spec, args)
    if params:
        args = (*args, *params.values())  # (a reduction's axis, after its one array)
    if not all(isinstance(args[i], _Tensor) for i in spec.arrays):
        return _mixed(name, spec, args, stream)
    if stream is None or isinstance(stream, torch.cuda.Stream):
        call = _RUNS[name] if _plain(args) else _DEFAULTS[name]
        if stream is None:
            return call(*args)
        with torch.cuda.stream(stream):
            return call(*args)
    # Another library's stream (or a handle: the legacy and per-thread default streams have
    # no PyTorch stream object): the result is allocated by PyTorch on its current stream
    # and written on `stream`, which the stream protocol orders after PyTorch's work and
    # PyTorch's later work (the memory's reuse included) after. Autograd does not record it.
    out = _result(name, spec, args)
    getattr(_ops, name)(*_data(args), out=out, stream=stream)
    return out


# ----- torch.compile -----
#
# Dynamo cannot look inside a native function: each `caijit.ops` function (and the native
# entry of the elementwise unary ops) is given a traceable stand-in that calls the operator.


def _stand_in(name: str) -> Callable[..., Any]:
    operator = _OPERATORS[name]
    spec = _SPECS[name]

    def traced(*args: Any, out: Any = None, stream: Any = None, **params: Any) -> Any:
        if stream is not None:
            torch._dynamo.graph_break(
                msg=f"caijit.ops.{name}(..., stream=...) is not traced: in a compiled function, "
                "use torch.cuda.stream(s) around the call instead"
            )
        args = _with_torch_dtype(spec, args)
        if "dtype" in params:
            params["dtype"] = _torch_dtype(params["dtype"])
        if out is None:
            return operator(*args, **params)
        operator.out(*args, **params, out=out)
        return out

    return traced


def _fill_stand_in(out: Any, value: Any, *, stream: Any = None) -> Any:
    if stream is not None:
        torch._dynamo.graph_break(
            msg="caijit.ops.fill(..., stream=...) is not traced: in a compiled function, use torch.cuda.stream(s) around the call instead"
        )
    _OPERATORS["fill"](out, value)
    return out


def _unary_stand_in(op: str, x: Any, out: Any = None, stream: Any = None) -> Any:
    return _stand_in(op)(x, out=out, stream=stream)


def _substitute() -> None:
    substitute = getattr(torch.compiler, "substitute_in_graph", None)
    if substitute is None:  # PyTorch before 2.5: the calls graph-break (each runs eagerly)
        return
    for name in _SPECS:
        native = getattr(_ops, name)
        # (The unary ops are Python functions, traced down to _native.unary.)
        if name not in _ops.UNARY_OPS:
            substitute(native, skip_signature_check=True)(_stand_in(name))
    substitute(_ops.fill, skip_signature_check=True)(_fill_stand_in)
    substitute(_native.unary, skip_signature_check=True)(_unary_stand_in)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then`` once module ``name`` is imported: importing Dynamo here would make every
    ``import torch`` slower (this module is imported with PyTorch), so the stand-ins are
    registered when Dynamo is."""

    def __init__(self, name: str, then: Callable[[], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then(module: Any) -> None:
            exec_module(module)
            self.then()

        spec.loader.exec_module = exec_then  # type: ignore[method-assign]
        return spec


if "torch._dynamo" in sys.modules:
    _substitute()
else:
    sys.meta_path.insert(0, _AfterImport("torch._dynamo", _substitute))


def _autoload() -> None:
    """The ``torch.backends`` entry point: PyTorch imports this module when it is imported."""


# ----- any kernel as an operator -----


class like(NamedTuple):
    """An output with the shape (and, unless ``dtype`` is given, the dtype) of input ``name``."""

    name: str
    dtype: Optional[Any] = None


OutputSpec = Union[like, Callable[..., Tuple[Sequence[int], Any]]]

_SCALAR_SCHEMA = {
    "bool": "bool",
    **{f: "float" for f in ("float16", "bfloat16", "float32", "float64")},
    **{c: "complex" for c in ("complex64", "complex128")},
    **{i: "int" for i in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")},
}


_LIBRARIES: Dict[str, Any] = {}


def _library(namespace: str) -> Any:
    """The ``torch.library.Library`` caijit defines operators of ``namespace`` in."""
    if namespace not in _LIBRARIES:
        _LIBRARIES[namespace] = torch.library.Library(namespace, "FRAGMENT")
    return _LIBRARIES[namespace]


class Operator:
    """A caijit kernel registered as the PyTorch operator ``torch.ops.<namespace>.<name>``
    (made by :func:`op`). Calling it calls the operator: ``op(*inputs)`` returns the new
    outputs (one tensor, a tuple of several, or None)."""

    def __init__(
        self,
        kernel: Any,
        qualname: str,
        outputs: Mapping[str, OutputSpec],
        mutates: Optional[Iterable[str]],
        grid: Optional[Callable[..., Any]],
        block: Any,
        forall: Optional[Callable[..., int]],
    ) -> None:
        namespace, sep, name = qualname.partition("::")
        if not sep or not namespace.isidentifier() or not name.isidentifier() or namespace in ("aten", "prim", "prims"):
            raise ArgumentError(f"op: name must be 'namespace::name' (identifiers; not PyTorch's own namespaces), got {qualname!r}")
        if isinstance(mutates, str):
            raise ArgumentError(f"op: mutates must be a list of parameter names, got the string {mutates!r}")
        params = kernel.params
        names = [p["name"] for p in params]
        if any(n is None for n in names):
            raise ArgumentError(f"op: every parameter of kernel {kernel.name!r} needs a name (parameters: {[p['type'] for p in params]})")
        unknown = [o for o in outputs if o not in names]
        if unknown:
            raise ArgumentError(f"op: outputs {unknown} are not parameters of kernel {kernel.name!r} (it has {names})")
        for o in outputs:
            p = params[names.index(o)]
            if p["kind"] not in ("pointer", "array") or p["const"]:
                raise ArgumentError(f"op: output {o!r} must be a non-const pointer or caijit::Array parameter, it is {p['type']!r}")
        arrays = [p for p in params if p["kind"] in ("pointer", "array")]
        inputs = [p for p in params if p["name"] not in outputs]
        if mutates is None:
            mutated = {p["name"] for p in arrays if not p["const"] and p["name"] not in outputs}
        else:
            mutated = set(mutates)
            bad = [m for m in mutated if m not in {p["name"] for p in arrays} or m in outputs]
            if bad:
                raise ArgumentError(f"op: mutates names {bad}, which are not array inputs of kernel {kernel.name!r}")
        for p in params:
            if p["kind"] == "struct" or p["kind"] == "other":
                raise ArgumentError(f"op: parameter {p['name']!r} ({p['type']}) cannot be an operator argument (arrays and scalars only)")
        self.kernel, self.qualname, self.outputs = kernel, qualname, dict(outputs)
        self.params, self.inputs, self.mutated = params, [p["name"] for p in inputs], mutated
        self.grid, self.block, self.forall = grid, block, forall
        array_inputs = [p["name"] for p in inputs if p["kind"] in ("pointer", "array")]
        for o, spec in self.outputs.items():
            if isinstance(spec, like):
                if spec.name not in array_inputs:
                    raise ArgumentError(f"op: output {o!r} is like {spec.name!r}, which is not an array input (array inputs: {array_inputs})")
            elif not callable(spec):
                raise ArgumentError(f"op: output {o!r} must be like('input') or a function of the inputs giving (shape, dtype), got {spec!r}")
        if len(mutated) > 26:
            raise ArgumentError(f"op: kernel {kernel.name!r} writes {len(mutated)} inputs; an operator declares at most 26")
        # Each kernel parameter's argument: (True, j) the j-th new output, (False, i) the i-th input.
        out_names = list(self.outputs)
        self._fill = [(True, out_names.index(n)) if n in self.outputs else (False, self.inputs.index(n)) for n in names]
        self._makers = [self._maker(spec) for spec in self.outputs.values()]
        args = ", ".join(self._schema_arg(p, i) for i, p in enumerate(inputs))
        returns = ", ".join("Tensor" for _ in outputs)
        returns = "()" if not outputs else (returns if len(outputs) == 1 else f"({returns})")
        self.schema = f"({args}) -> {returns}"
        self._name, self._lib = name, _library(namespace)
        try:
            self._lib.define(name + self.schema)
        except RuntimeError as e:
            raise ArgumentError(f"op: {qualname} cannot be defined: {str(e).splitlines()[0]}") from e
        self._lib.impl(name, self._run, "CUDA")
        torch.library.register_fake(qualname, self._fake, lib=self._lib)
        self._operator = getattr(getattr(torch.ops, namespace), name).default
        self._derivative: Optional[Callable[..., Any]] = None
        _autograd(self._lib, name, self._operator, None if self.mutated else self._run, lambda: self._derivative)
        if self.mutated:
            _in_place(self._lib, name, self._operator, [i for i, n in enumerate(self.inputs) if n in self.mutated], ())

    def _schema_arg(self, p: Mapping[str, Any], alias: int) -> str:
        if p["kind"] in ("pointer", "array"):
            return f"Tensor({chr(ord('a') + alias % 26)}!) {p['name']}" if p["name"] in self.mutated else f"Tensor {p['name']}"
        kind = _SCALAR_SCHEMA.get(p["dtype"])
        if kind is None:
            raise ArgumentError(f"op: parameter {p['name']!r} ({p['type']}) has no PyTorch schema type")
        return f"{kind} {p['name']}"

    def _maker(self, spec: OutputSpec) -> Callable[[Sequence[Any]], torch.Tensor]:
        """A new C-ordered output tensor, of ``spec``, from the inputs."""
        if isinstance(spec, like):
            at = self.inputs.index(spec.name)
            dtype = None if spec.dtype is None else _torch_dtype(spec.dtype)
            return lambda inputs: torch.empty_like(inputs[at], dtype=dtype, memory_format=torch.contiguous_format)

        def made(inputs: Sequence[Any]) -> torch.Tensor:
            shape, dtype = spec(*inputs)
            device = next(a.device for a in inputs if isinstance(a, torch.Tensor))
            return torch.empty(tuple(shape), dtype=_torch_dtype(dtype), device=device)

        return made

    def _new_outputs(self, inputs: Sequence[Any]) -> List[torch.Tensor]:
        return [make(inputs) for make in self._makers]

    def _returned(self, outs: List[torch.Tensor]) -> Any:
        return None if not outs else (outs[0] if len(outs) == 1 else tuple(outs))

    def _fake(self, *inputs: Any) -> Any:
        """New outputs, after checking the launch's arguments as the launch would (its
        `ArgumentError`, raised while PyTorch traces)."""
        outs = self._new_outputs(inputs)
        self.kernel._check_described([_described(outs[i] if new else inputs[i]) for new, i in self._fill])
        return self._returned(outs)

    def _run(self, *inputs: Any) -> Any:
        outs = [make(inputs) for make in self._makers]
        data = _data(inputs)
        args = [outs[i] if new else data[i] for new, i in self._fill]
        if self.forall is not None:
            self.kernel.forall(int(self.forall(*inputs)))(*args)
        else:
            if self.grid is not None:
                grid = self.grid(*inputs)
            else:
                first = outs[0] if outs else next(a for a in inputs if isinstance(a, _Tensor))
                grid = math.ceil(max(1, first.numel()) / self.block)
            self.kernel[grid, self.block](*args)
        return self._returned(outs)

    def register_autograd(self, backward: Callable[..., Any], setup_context: Optional[Callable[..., Any]] = None) -> None:
        """The operator's derivative (``torch.library.register_autograd``'s arguments). An
        operator that writes its inputs has none (PyTorch records derivatives of functional
        operators only): give the written arrays as outputs instead."""
        if self.mutated:
            raise ArgumentError(
                f"{self.qualname} writes its inputs {sorted(self.mutated)}: PyTorch records derivatives of functional "
                "operators only; make the written arrays outputs (outputs={...}) to give it one"
            )
        self._derivative = _recorded(self._operator, backward, setup_context)

    def __call__(self, *inputs: Any, **named: Any) -> Any:
        """The operator's call, with its inputs by position or by parameter name (its CUDA
        kernel at once where the dispatcher would go straight there; a mutating operator
        always through the dispatcher)."""
        if named:
            inputs = self._by_position(inputs, named)
        if (
            not self.mutated
            and not torch.compiler.is_compiling()
            and _plain(inputs)
            and all(a.is_cuda for a in inputs if isinstance(a, _Tensor))
        ):
            return self._run(*inputs)
        return self._operator(*inputs)

    def _by_position(self, inputs: Tuple[Any, ...], named: Mapping[str, Any]) -> Tuple[Any, ...]:
        """``inputs`` followed by the ``named`` ones, in the kernel's order."""
        unknown = [n for n in named if n not in self.inputs]
        if unknown:
            raise ArgumentError(f"{self.qualname}: no input named {unknown[0]!r} (inputs: {self.inputs})")
        twice = [n for n in self.inputs[: len(inputs)] if n in named]
        if twice:
            raise ArgumentError(f"{self.qualname}: input {twice[0]!r} given by position and by name")
        missing = [n for n in self.inputs[len(inputs) :] if n not in named]
        if missing:
            raise ArgumentError(f"{self.qualname}: missing inputs {missing}")
        return tuple(inputs) + tuple(named[n] for n in self.inputs[len(inputs) :])

    @property
    def operator(self) -> Any:
        """The registered operator (``torch.ops.<namespace>.<name>``)."""
        return self._operator

    def __repr__(self) -> str:
        return f"caijit.torch.Operator({self.qualname}{self.schema})"


def op(
    kernel: Any,
    *,
    name: str,
    outputs: Optional[Mapping[str, OutputSpec]] = None,
    mutates: Optional[Iterable[str]] = None,
    grid: Optional[Callable[..., Any]] = None,
    block: Any = 256,
    forall: Optional[Callable[..., int]] = None,
) -> Operator:
    """Register the caijit kernel ``kernel`` (non-template or specialized) as the PyTorch
    operator ``name`` (``"namespace::name"``), traceable by ``torch.compile`` and captured in
    CUDA graphs.

    The operator's arguments are the kernel's parameters, in order, less ``outputs``: each
    pointer or ``caijit::Array`` parameter a tensor, each scalar typed from the kernel
    (``float``, ``int`` or ``bool``). ``outputs`` maps each output parameter's name to
    ``like("x")`` (the shape and dtype of input ``x``; ``like("x", dtype=...)``) or to a
    function of the inputs returning ``(shape, dtype)``; the operator allocates them with
    PyTorch and returns them. The inputs the kernel may write (non-const pointers and
    ``caijit::Array<T, N>`` of non-const ``T``) are declared mutated; ``mutates`` names them
    instead. The launch: ``grid`` (a function of the inputs) with ``block``; else ``forall``
    (a function of the inputs giving the number of threads); else one thread per element
    of the first output.

    >>> scaled_add = caijit.torch.op(k, name="mylib::scaled_add",       # doctest: +SKIP
    ...                              outputs={"out": caijit.torch.like("x")})
    >>> z = scaled_add(x, y, 2.0, x.numel())                            # doctest: +SKIP
    """
    return Operator(kernel, name, outputs or {}, mutates, grid, block, forall)
