"""caijit in PyTorch programs (caijit/torch.py): the kernel library as PyTorch operators,
any kernel as one, torch.compile without graph breaks, CUDA graphs, autograd.

The CPU tests use fake and meta tensors (registration, schemas, fake implementations,
tracing); the GPU tests run the operators."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Callable

import numpy as np
import pytest

import caijit
from conftest import SCALE_IN_PLACE, has, nvrtc_missing

pytestmark = pytest.mark.skipif(not has("torch"), reason="PyTorch is not installed (pip install torch)")
gpu = pytest.mark.gpu

if has("torch"):
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    import caijit.torch as ct

BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]
#: Every function of caijit.ops (each is an operator).
OPS = [n for n in caijit.ops.__all__ if n != "CPP_TYPES"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTS = ["int8", "int16", "int32", "int64", "uint8"]

SCALED_ADD = r"""
extern "C" __global__ void scaled_add(const float* x, const float* y, float* out, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}
"""

CUBE = r"""
extern "C" __global__ void cube(const double* x, double* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] * x[i] * x[i];
}
extern "C" __global__ void cube_grad(const double* x, const double* g, double* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 3.0 * x[i] * x[i] * g[i];
}
"""


def needs_nvrtc() -> None:
    reason = nvrtc_missing()
    if reason:
        pytest.skip(reason)


# ----- registration and fake implementations (CPU) -----


def test_every_op_is_an_operator_with_an_out_overload() -> None:
    for name in OPS:
        packet = getattr(torch.ops.caijit, name)
        if name == "fill":
            assert str(packet.default._schema) == "caijit::fill(Tensor(a!) out, Scalar value) -> ()"
            continue
        assert str(packet.default._schema).endswith("-> Tensor"), name
        assert str(packet.out._schema).endswith(", *, Tensor(a!) out) -> ()"), name
    assert str(torch.ops.caijit.sum.default._schema) == "caijit::sum(Tensor x, int? axis=None) -> Tensor"
    assert str(torch.ops.caijit.cast.default._schema) == "caijit::cast(Tensor x, ScalarType dtype) -> Tensor"


def test_fake_results_follow_the_ops_own_rules() -> None:
    with FakeTensorMode():
        a = torch.empty(3, 1, device="cuda")
        b = torch.empty(4, device="cuda")
        assert torch.ops.caijit.add(a, b).shape == (3, 4)
        i8 = torch.empty(3, 5, dtype=torch.int8, device="cuda")
        s = torch.ops.caijit.sum(i8, -1)
        assert (s.shape, s.dtype) == ((3,), torch.int64)  # NumPy's result dtype
        assert torch.ops.caijit.sum(i8).shape == ()
        assert torch.ops.caijit.transpose(i8).shape == (5, 3)
        assert torch.ops.caijit.cast(a, torch.bfloat16).dtype == torch.bfloat16
        assert torch.ops.caijit.softmax(a).device == a.device
        with pytest.raises(caijit.ArgumentError, match="add: operands are float32 and float64; cast one first"):
            torch.ops.caijit.add(a, torch.empty(4, dtype=torch.float64, device="cuda"))
        with pytest.raises(caijit.ArgumentError, match="do not broadcast"):
            torch.ops.caijit.multiply(b, torch.empty(5, device="cuda"))
        with pytest.raises(caijit.ArgumentError, match="softmax: int8 is not a floating type"):
            torch.ops.caijit.softmax(i8)
        with pytest.raises(caijit.ArgumentError, match="axis must be None or the last axis"):
            torch.ops.caijit.max(i8, 0)
        # An out= the op could not write is refused while tracing, as by the op.
        torch.ops.caijit.add.out(a, b, out=torch.empty(3, 4, device="cuda"))
        with pytest.raises(caijit.ArgumentError, match=r"add: out must be a float32 array of shape \[3, 4\]"):
            torch.ops.caijit.add.out(a, b, out=torch.empty(3, device="cuda"))
        with pytest.raises(caijit.ArgumentError, match="out has elements that share memory"):
            torch.ops.caijit.add.out(a, b, out=torch.empty(4, device="cuda").expand(3, 4))
        torch.ops.caijit.sum.out(i8, out=torch.empty((), dtype=torch.float32, device="cuda"))


def test_a_tensor_in_host_memory_is_refused_as_by_a_launch() -> None:
    for call in (lambda t: caijit.ops.add(t, t), lambda t: caijit.ops.add(t, t, out=t), lambda t: caijit.ops.softmax(t)):
        with pytest.raises(caijit.ArgumentError, match="a torch.Tensor is host memory"):
            call(torch.ones(3))


def test_written_tensors_have_their_version_bumped_and_gradients_are_never_silently_missing() -> None:
    with FakeTensorMode():
        t = torch.empty(3, device="cuda")
        before = t._version
        torch.ops.caijit.fill(t, 1.0)
        torch.ops.caijit.add.out(t, t, out=t)
        assert t._version == before + 2  # autograd sees the writes, as PyTorch's in-place ops
        a = torch.empty(3, device="cuda", requires_grad=True)
        for call in (lambda: torch.ops.caijit.maximum(a, a), lambda: torch.ops.caijit.max(a)):
            with pytest.raises(caijit.ArgumentError, match="has no derivative"):
                call()
        with pytest.raises(caijit.ArgumentError, match="an out= argument"):
            torch.ops.caijit.add.out(a, a, out=torch.empty(3, device="cuda"))
        with torch.no_grad():
            assert torch.ops.caijit.maximum(a, a).shape == (3,)
        y = torch.ops.caijit.multiply(a, a)  # differentiable: recorded
        assert y.requires_grad


def test_cast_reads_a_dtype_as_the_op_does_on_every_path() -> None:
    import numpy

    with FakeTensorMode():
        x = torch.empty(3, device="cuda")
        for spelling, want in [("float", torch.float64), ("int", torch.int64), ("<f2", torch.float16), (numpy.int8, torch.int8),
                               (numpy.dtype("V2"), torch.bfloat16), ("bfloat16", torch.bfloat16), (torch.int16, torch.int16)]:
            assert ct._eager("cast", (x, spelling), None, None).dtype == want, spelling
        with pytest.raises(caijit.ArgumentError, match="cast: dtype must be a dtype, not None"):
            ct._eager("cast", (x, None), None, None)


def every_op(x: Any, y: Any) -> Any:
    """One call of every caijit.ops function (float32 x and y of one shape, 2-D)."""
    ops = caijit.ops
    r = [ops.axpy(2.0, x, y), ops.scale(x, 3.0), ops.cast(x, "float64"), ops.cast(x, torch.float16)]
    r += [getattr(ops, b)(x, y) for b in BINARY]
    r += [ops.ascontiguous(x.t()), ops.transpose(x), ops.sum(x), ops.sum(x, -1), ops.max(x, axis=-1), ops.softmax(x)]
    r += [getattr(ops, u)(x) for u in ops.UNARY_OPS]
    o = torch.empty_like(x)
    ops.add(x, y, out=o)
    f = torch.empty_like(x)
    ops.fill(f, 1.5)
    return (*r, o, f)


def test_compiled_functions_over_every_op_have_no_graph_breaks() -> None:
    x, y = torch.ones(4, 8, device="meta"), torch.ones(4, 8, device="meta")
    explained = torch._dynamo.explain(every_op)(x, y)
    assert explained.graph_break_count == 0, explained.break_reasons
    code = explained.graphs[0].code
    for name in OPS:
        assert f"torch.ops.caijit.{name}" in code, name
    assert "torch.ops.caijit.add.out(" in code
    got = torch.compile(every_op, backend="eager", fullgraph=True)(x, y)
    assert [t.shape for t in got[:3]] == [(4, 8)] * 3


def test_dynamic_shapes_specialize_and_stay_right() -> None:
    def f(x: Any, y: Any) -> Any:
        return caijit.ops.add(x, y) * 2, caijit.ops.sum(x, -1)

    for dynamic in (True, None):  # declared, and automatic (a recompilation per new shape)
        torch._dynamo.reset()
        compiled = torch.compile(f, backend="eager", fullgraph=True, dynamic=dynamic)
        for n in (4, 8, 16):
            got = compiled(torch.ones(n, 3, device="meta"), torch.ones(3, device="meta"))
            assert [t.shape for t in got] == [(n, 3), (n,)]


def test_registration_comes_with_torch_and_import_caijit_does_not_import_torch() -> None:
    code = (
        "import sys, caijit; assert 'torch' not in sys.modules; "
        "import torch; print('caijit.torch' in sys.modules, hasattr(torch.ops.caijit, 'softmax'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True"]
    # Whichever is imported first; and PyTorch's switch for entry points is honoured.
    code = "import torch, sys; print('caijit.torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True"]
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.split() == ["False"]


# ----- any kernel as an operator (CPU: registration, schema, fake, tracing) -----


_REGISTERED: dict[str, Any] = {}


def registered(key: str, make: Callable[[], Any]) -> Any:
    """An operator registered once per test process (PyTorch keeps a name for good)."""
    if key not in _REGISTERED:
        _REGISTERED[key] = make()
    return _REGISTERED[key]


def scaled_add_op() -> Any:
    k = caijit.kernel(SCALED_ADD, "scaled_add")
    return registered("scaled_add", lambda: ct.op(k, name="caijit_test::scaled_add", outputs={"out": ct.like("x")}))


def test_a_kernel_is_an_operator_in_one_call() -> None:
    needs_nvrtc()
    op = scaled_add_op()
    assert op.schema == "(Tensor x, Tensor y, float a, int n) -> Tensor"
    scale = registered(
        "scale", lambda: ct.op(caijit.kernel(SCALE_IN_PLACE, "scale"), name="caijit_test::scale_", forall=lambda x, a, n: n)
    )
    assert scale.schema == "(Tensor(a!) x, float a, int n) -> ()"  # non-const pointer: mutated
    with FakeTensorMode():
        x = torch.empty(10, device="cuda")
        out = op(x, x, 2.0, 10)
        assert (out.shape, out.dtype, out.device) == (x.shape, x.dtype, x.device)

    def f(x: Any, y: Any) -> Any:
        z = op(x, y, 0.5, x.numel())
        scale(z, 2.0, z.numel())
        return z * 2

    m = torch.ones(16, device="meta")
    explained = torch._dynamo.explain(f)(m, m)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert "torch.ops.caijit_test.scaled_add" in explained.graphs[0].code


def test_operator_declarations_are_checked_against_the_kernel() -> None:
    needs_nvrtc()
    k = caijit.kernel(SCALED_ADD, "scaled_add")
    with pytest.raises(caijit.ArgumentError, match=r"outputs \['z'\] are not parameters of kernel 'scaled_add'"):
        ct.op(k, name="caijit_test::bad1", outputs={"z": ct.like("x")})
    with pytest.raises(caijit.ArgumentError, match="output 'x' must be a non-const pointer"):
        ct.op(k, name="caijit_test::bad2", outputs={"x": ct.like("y")})
    with pytest.raises(caijit.ArgumentError, match="name must be 'namespace::name'"):
        ct.op(k, name="scaled_add", outputs={"out": ct.like("x")})
    with pytest.raises(caijit.ArgumentError, match=r"mutates names \['a'\]"):
        ct.op(k, name="caijit_test::bad3", outputs={"out": ct.like("x")}, mutates=["a"])
    with pytest.raises(caijit.ArgumentError, match="mutates must be a list of parameter names"):
        ct.op(k, name="caijit_test::bad4", outputs={"out": ct.like("x")}, mutates="y")
    with pytest.raises(caijit.ArgumentError, match="which is not an array input"):
        ct.op(k, name="caijit_test::bad5", outputs={"out": ct.like("n")})
    with pytest.raises(caijit.ArgumentError, match="must be like"):
        ct.op(k, name="caijit_test::bad6", outputs={"out": ((4,), "float32")})
    with pytest.raises(caijit.ArgumentError, match="not PyTorch's own namespaces"):
        ct.op(k, name="aten::scaled_add2", outputs={"out": ct.like("x")})
    scale = registered(
        "scale", lambda: ct.op(caijit.kernel(SCALE_IN_PLACE, "scale"), name="caijit_test::scale_", forall=lambda x, a, n: n)
    )
    with pytest.raises(caijit.ArgumentError, match="writes its inputs"):
        scale.register_autograd(lambda ctx, g: g)
    with FakeTensorMode():
        x = torch.empty(10, device="cuda")
        v = x._version
        scale(x, 2.0, 10)
        assert x._version == v + 1
        with pytest.raises(caijit.ArgumentError, match="has no derivative"):
            scaled_add_op()(torch.empty(10, device="cuda", requires_grad=True), x, 1.0, 10)


def test_a_traced_operator_refuses_what_its_launch_refuses_with_the_same_error() -> None:
    needs_nvrtc()
    op = scaled_add_op()
    with FakeTensorMode():
        x = torch.empty(10, device="cuda")
        wrong = [
            ((x.double(), x, 1.0, 10), r"argument 0 `x` \(`const float\*`\): expected an array of float32 \(float\), got float64"),
            ((x, torch.empty(10, 2, device="cuda")[:, 0], 1.0, 10), r"argument 1 `y`.*C-contiguous"),
            ((x, x, 1.0, 2**40), r"argument 4 `n`.*out of range"),
            ((x, torch.empty(10), 1.0, 10), r"argument 1: a torch.Tensor is host memory"),
        ]
        for args, message in wrong:
            with pytest.raises(caijit.ArgumentError, match=message):
                op(*args)
        assert op(x, x, 1.0, 10).shape == (10,)


def test_operator_inputs_by_name() -> None:
    needs_nvrtc()
    op = scaled_add_op()
    with FakeTensorMode():
        x = torch.empty(10, device="cuda")
        assert op(x, x, a=2.0, n=10).shape == op(x=x, y=x, a=2.0, n=10).shape == (10,)
        with pytest.raises(caijit.ArgumentError, match="no input named 'b'"):
            op(x, x, b=2.0, n=10)
        with pytest.raises(caijit.ArgumentError, match=r"missing inputs \['n'\]"):
            op(x, x, a=2.0)
        with pytest.raises(caijit.ArgumentError, match="input 'x' given by position and by name"):
            op(x, x, 2.0, 10, x=x)


# ----- on the GPU -----


def rand(shape: Any, dtype: str) -> Any:
    t = getattr(torch, dtype)
    if t.is_floating_point:
        return torch.randn(shape, device="cuda").to(t)
    return torch.randint(1, 50, shape, device="cuda").to(t)


@gpu
def test_ops_on_tensors_return_tensors_from_torchs_allocator() -> None:
    x, y = torch.randn(1000, 256, device="cuda"), torch.randn(256, device="cuda")
    caijit.ops.add(x, y)  # warm: the kernel's module is loaded
    before = torch.cuda.memory_allocated()
    z = caijit.ops.add(x, y)
    assert isinstance(z, torch.Tensor) and z.device == x.device
    assert torch.cuda.memory_allocated() - before >= z.numel() * 4
    torch.testing.assert_close(z, x + y)
    torch.testing.assert_close(caijit.ops.add(x, y) * 2, (x + y) * 2)  # a tensor: PyTorch's operators apply
    torch.testing.assert_close(caijit.ops.sum(x, -1), x.sum(-1), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(caijit.ops.cast(x, "float16"), x.half())
    torch.testing.assert_close(caijit.ops.softmax(x), torch.softmax(x, -1))
    torch.testing.assert_close(caijit.ops.transpose(x), x.t().contiguous())
    # out= stays as it is: the given tensor, written.
    o = torch.empty_like(x)
    assert caijit.ops.multiply(x, y, out=o) is o
    torch.testing.assert_close(o, x * y)
    # On a side stream (PyTorch's current one, or stream=).
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        w = caijit.ops.scale(x, 2.0)
    s2 = torch.cuda.Stream()
    s2.wait_stream(torch.cuda.current_stream())
    w2 = caijit.ops.scale(x, 3.0, stream=s2)
    # Streams PyTorch has no object for: a handle (the legacy default stream), caijit's own.
    w3 = caijit.ops.scale(x, 4.0, stream=1)
    own = caijit.Stream()
    w4 = caijit.ops.scale(x, 5.0, stream=own)
    own.synchronize()
    torch.cuda.synchronize()
    torch.testing.assert_close(w, 2 * x)
    torch.testing.assert_close(w2, 3 * x)
    assert isinstance(w3, torch.Tensor) and isinstance(w4, torch.Tensor)
    torch.testing.assert_close(w3, 4 * x)
    torch.testing.assert_close(w4, 5 * x)


@gpu
def test_cupy_in_cupy_out() -> None:
    if not has("cupy"):
        pytest.skip("CuPy is not installed")
    import cupy

    a = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)
    r = caijit.ops.add(a, a[0])
    assert isinstance(r, cupy.ndarray)
    cupy.testing.assert_array_equal(r, a + a[0])
    assert isinstance(caijit.ops.sum(a, -1), cupy.ndarray)
    own = caijit.to_device(np.ones(4, np.float32))
    assert isinstance(caijit.ops.add(own, own), caijit.DeviceArray)  # caijit's arrays: caijit's result


@gpu
def test_compiled_functions_equal_eager_with_and_without_cuda_graphs() -> None:
    x, y = torch.randn(64, 128, device="cuda"), torch.randn(64, 128, device="cuda")
    want = every_op(x, y)
    explained = torch._dynamo.explain(every_op)(x, y)
    assert explained.graph_break_count == 0, explained.break_reasons
    for mode in (None, "reduce-overhead"):
        torch._dynamo.reset()
        f = torch.compile(every_op, fullgraph=True, mode=mode)
        for step in range(3):  # new input values each call (CUDA graph replays)
            x.copy_(torch.randn_like(x))
            y.copy_(torch.randn_like(y))
            want = every_op(x, y)
            got = f(x, y)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, rtol=2e-3, atol=2e-3, msg=f"mode={mode} step={step}")


@gpu
def test_torch_cuda_graph_captures_the_operators() -> None:
    x = torch.randn(1 << 16, device="cuda")
    y = torch.randn(1 << 16, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up outside the capture (module loads)
        caijit.ops.softmax(caijit.ops.add(x, y).view(256, 256))
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        z = caijit.ops.softmax(caijit.ops.add(x, y).view(256, 256))
    for _ in range(2):
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.testing.assert_close(z, torch.softmax((x + y).view(256, 256), -1))


OPCHECK_DTYPES = {
    **{b: FLOATS + INTS for b in BINARY},
    "axpy": FLOATS + INTS,
    "scale": FLOATS + INTS,
    "cast": FLOATS + INTS,
    "ascontiguous": FLOATS + INTS + ["bool"],
    "transpose": FLOATS + INTS,
    "sum": FLOATS + INTS,
    "max": FLOATS + INTS,
    "softmax": FLOATS,
    "abs": FLOATS + INTS,
}


def op_args(name: str, dtype: str) -> tuple:
    x, y = rand((8, 16), dtype), rand((8, 16), dtype)
    if name in BINARY:
        return (x, y[0])  # broadcast
    return {
        "axpy": (2, x, y),
        "scale": (x, 3),
        "cast": (x, torch.float32 if dtype != "float32" else torch.float64),
        "sum": (x, -1),
        "max": (x, None),
    }.get(name, (x,))


@gpu
@pytest.mark.parametrize("name", sorted(OPCHECK_DTYPES))
def test_opcheck_every_op_on_every_dtype(name: str) -> None:
    for dtype in OPCHECK_DTYPES[name]:
        args = op_args(name, dtype)
        utils = ("test_schema", "test_faketensor", "test_autograd_registration")
        if dtype in ("float32", "float64"):
            utils += ("test_aot_dispatch_dynamic",)
        torch.library.opcheck(getattr(torch.ops.caijit, name).default, args, test_utils=utils)
    x = rand((8, 16), "float32")
    torch.library.opcheck(torch.ops.caijit.fill.default, (x, 2.0))


DIFFERENTIABLE = {
    **{b: lambda a, b, op=b: getattr(caijit.ops, op)(a, b) for b in ("add", "subtract", "multiply", "divide")},
    "axpy": lambda a, b: caijit.ops.axpy(0.5, a, b),
    "scale": lambda a, b: caijit.ops.scale(a, 3.0),
    "cast": lambda a, b: caijit.ops.cast(a, "float64"),
    "ascontiguous": lambda a, b: caijit.ops.ascontiguous(a.t()),
    "transpose": lambda a, b: caijit.ops.transpose(a),
    "sum": lambda a, b: caijit.ops.sum(a, -1) + caijit.ops.sum(b),
    "softmax": lambda a, b: caijit.ops.softmax(a),
    "abs": lambda a, b: caijit.ops.abs(a),
}


@gpu
@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_gradcheck(name: str) -> None:
    a = torch.randn(6, 5, dtype=torch.float64, device="cuda").requires_grad_()
    b = (torch.rand(5, dtype=torch.float64, device="cuda") + 0.5).requires_grad_()  # broadcast, away from 0
    if name in ("axpy",):
        b = torch.randn(6, 5, dtype=torch.float64, device="cuda").requires_grad_()
    assert torch.autograd.gradcheck(DIFFERENTIABLE[name], (a, b))


@gpu
def test_a_kernel_operator_runs_traces_and_differentiates() -> None:
    op = scaled_add_op()
    x, y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    torch.testing.assert_close(op(x, y, 2.0, 1000), 2 * x + y)
    f = torch.compile(lambda x, y: torch.relu(op(x, y, 0.5, x.numel())), fullgraph=True)
    torch.testing.assert_close(f(x, y), torch.relu(0.5 * x + y))

    k = caijit.kernel(CUBE, "cube")
    kg = caijit.kernel(CUBE, "cube_grad")
    cube = registered("cube", lambda: ct.op(k, name="caijit_test::cube", outputs={"out": ct.like("x")}))
    cube_grad = registered("cube_grad", lambda: ct.op(kg, name="caijit_test::cube_grad", outputs={"out": ct.like("x")}))

    def setup(ctx: Any, inputs: tuple, output: Any) -> None:
        ctx.save_for_backward(inputs[0])

    def backward(ctx: Any, g: Any) -> tuple:
        (x,) = ctx.saved_tensors
        return cube_grad(x, g.contiguous(), x.numel()), None

    registered("cube_autograd", lambda: cube.register_autograd(backward, setup_context=setup))
    xd = torch.randn(50, dtype=torch.float64, device="cuda", requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: cube(t, t.numel()), (xd,))
    torch.library.opcheck(cube.operator, (xd.detach(), 50))
