"""caijit kernels inside jitted JAX programs, on the GPU: values against jax.numpy for each
dtype, vmap, grad, shard_map over two GPUs, aliased and donated buffers, ordering against
XLA's own ops, and no compilation or host synchronisation per call.

Run on the GPU machine: CAIJIT_REQUIRE_GPU=1 python -m pytest -q tests/test_jax_ops.py
"""

from __future__ import annotations

import os
from typing import Any, Iterator

import numpy
import pytest

# JAX allocates as it goes, sharing the GPU with the other libraries of the test run (set
# before JAX's GPU backend starts).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import caijit  # noqa: E402

from conftest import AXPY, REQUIRE_GPU, ROW_SUM, SCALE_IN_PLACE, flatbuffers_missing, has, jax_missing, load_example  # noqa: E402

pytestmark = pytest.mark.gpu

HAS_JAX = has("jax")


def _jax_gpus() -> int:
    if not HAS_JAX:
        return 0
    import jax

    try:
        return len(jax.devices("gpu"))
    except RuntimeError:
        return 0


@pytest.fixture(scope="module")
def jax() -> Iterator[Any]:
    if not HAS_JAX:
        if REQUIRE_GPU:
            pytest.fail("CAIJIT_REQUIRE_GPU=1 but JAX is not installed")
        pytest.skip(str(jax_missing()))
    if _jax_gpus() == 0:
        if REQUIRE_GPU:
            pytest.fail("CAIJIT_REQUIRE_GPU=1 but JAX sees no GPU (is jax-cuda13-plugin installed?)")
        pytest.skip("JAX has no CUDA backend here")
    import jax

    yield jax


DTYPES = ["float16", "bfloat16", "float32", "float64", "int32"]
TOL = {"float16": 1e-2, "bfloat16": 5e-2, "float32": 1e-6, "float64": 1e-12, "int32": 0}


def make_axpy(jax: Any, **kw: Any) -> Any:
    import caijit.jax as cjax

    k = caijit.kernel(AXPY)
    return cjax.kernel_call(
        k,
        lambda x, y: x,
        grid=lambda x, y: (x.size + 255) // 256,
        block=256,
        a=2,
        n=lambda x, y: x.size,
        **kw,
    )


def random(jax: Any, shape: tuple[int, ...], dtype: str, seed: int) -> Any:
    rng = numpy.random.default_rng(seed)
    if dtype == "int32":
        a = rng.integers(-1000, 1000, shape).astype(numpy.int32)
    else:
        a = rng.uniform(-2, 2, shape).astype(numpy.float32)
    return jax.numpy.asarray(a, dtype=dtype)


def close(got: Any, want: Any, dtype: str) -> None:
    g, w = numpy.asarray(got, dtype=numpy.float64), numpy.asarray(want, dtype=numpy.float64)
    numpy.testing.assert_allclose(g, w, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_values_inside_jit(jax: Any, dtype: str) -> None:
    with jax.enable_x64(dtype == "float64"):
        f = jax.jit(make_axpy(jax))
        x, y = random(jax, (5000,), dtype, 1), random(jax, (5000,), dtype, 2)
        out = f(x, y)
        assert out.dtype == x.dtype and out.shape == x.shape
        close(out, 2 * x + y, dtype)


def test_a_second_call_compiles_nothing_and_never_syncs_the_host(jax: Any) -> None:
    f = make_axpy(jax)
    x, y = random(jax, (4096,), "float32", 3), random(jax, (4096,), "float32", 4)
    jax.block_until_ready(jax.jit(f)(x, y))
    before = caijit.stats()
    # Same shapes, a new jit (traced again): the prepared launch is reused.
    out = jax.block_until_ready(jax.jit(f)(x, y))
    for _ in range(10):
        out = jax.jit(f)(x, out)
    jax.block_until_ready(out)
    after = caijit.stats()
    assert after["compiles"] == before["compiles"]
    assert after["host_syncs"] == before["host_syncs"]
    # One handler call per execution, or fewer where XLA replays a captured command buffer.
    assert 0 <= after["launches"] - before["launches"] <= 11
    want = y
    for _ in range(11):
        want = 2 * x + want
    close(out, want, "float32")


def test_ordering_with_xla_ops_in_a_fori_loop(jax: Any) -> None:
    f = make_axpy(jax)
    x, y = random(jax, (4096,), "float32", 5), random(jax, (4096,), "float32", 6)

    @jax.jit
    def loop(x: Any, y: Any) -> Any:
        # Each iteration reads what the previous kernel and XLA's own ops wrote.
        return jax.lax.fori_loop(0, 50, lambda i, y: f(x, y) * 0.5 - 0.25 * x, y)

    want = y
    for _ in range(50):
        want = (2 * x + want) * 0.5 - 0.25 * x
    close(loop(x, y), want, "float32")


def test_vmap_sequential_and_broadcast_all(jax: Any) -> None:
    xs, ys = random(jax, (6, 1000), "float32", 7), random(jax, (6, 1000), "float32", 8)
    seq = jax.jit(jax.vmap(make_axpy(jax)))(xs, ys)
    close(seq, 2 * xs + ys, "float32")
    before = caijit.stats()["launches"]
    broad = jax.jit(jax.vmap(make_axpy(jax, vmap_method="broadcast_all")))(xs, ys)
    jax.block_until_ready(broad)
    assert caijit.stats()["launches"] - before == 1  # one launch over the whole batch
    close(broad, 2 * xs + ys, "float32")
    mixed = jax.jit(jax.vmap(make_axpy(jax, vmap_method="broadcast_all"), in_axes=(0, None)))(xs, ys[0])
    close(mixed, 2 * xs + ys[0], "float32")


def test_grad_through_the_backward_kernel(jax: Any) -> None:
    from jax.test_util import check_grads

    mod = load_example("05_jax_custom_op.py")
    with jax.enable_x64(True):
        x = random(jax, (16, 64), "float64", 9)
        gamma = random(jax, (64,), "float64", 10)
        beta = random(jax, (64,), "float64", 11)
        # Finite differences against the kernels' reverse mode, in double precision.
        check_grads(mod.affine_relu, (x, gamma, beta), order=1, modes=["rev"], atol=1e-5, rtol=1e-5)
        g = jax.jit(jax.grad(lambda *a: (mod.affine_relu(*a) ** 2).sum(), argnums=(0, 1, 2)))(x, gamma, beta)
        r = jax.grad(lambda *a: (mod.reference(*a) ** 2).sum(), argnums=(0, 1, 2))(x, gamma, beta)
        for a, b in zip(g, r):
            close(a, b, "float64")


def test_array_parameters_see_the_shape(jax: Any) -> None:
    import caijit.jax as cjax

    f = cjax.kernel_call(
        caijit.kernel(ROW_SUM),
        lambda x: jax.ShapeDtypeStruct(x.shape[:1], x.dtype),
        grid=lambda x: (x.shape[0] + 127) // 128,
        block=128,
    )
    x = random(jax, (300, 17), "float32", 15)
    numpy.testing.assert_allclose(numpy.asarray(jax.jit(f)(x)), numpy.asarray(x).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_input_output_aliases_and_donation(jax: Any) -> None:
    import caijit.jax as cjax

    k = caijit.kernel(SCALE_IN_PLACE)
    f = cjax.kernel_call(k, lambda x: x, grid=lambda x: (x.size + 255) // 256, block=256, input_output_aliases={0: 0}, a=3.0, n=lambda x: x.size)
    x = random(jax, (3000,), "float32", 12)
    host = numpy.asarray(x)
    # Aliased without donation: XLA copies, the caller's array is unchanged.
    out = jax.jit(f)(x)
    close(out, 3 * host, "float32")
    close(x, host, "float32")
    # Donated: the kernel writes the input's memory in place.
    ptr = x.unsafe_buffer_pointer()
    out = jax.jit(f, donate_argnums=0)(x)
    close(out, 3 * host, "float32")
    assert x.is_deleted()
    assert out.unsafe_buffer_pointer() == ptr


def test_shard_map_over_two_gpus(jax: Any) -> None:
    if _jax_gpus() < 2:
        pytest.skip("shard_map over two GPUs needs two GPUs")
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(numpy.array(jax.devices("gpu")[:2]), ("i",))
    f = make_axpy(jax)
    sharded = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("i"), P("i")), out_specs=P("i")))
    x, y = random(jax, (8192,), "float32", 13), random(jax, (8192,), "float32", 14)
    x, y = (jax.device_put(a, NamedSharding(mesh, P("i"))) for a in (x, y))
    before = caijit.stats()["launches"]
    # The first execution calls the handler once per shard (later ones may replay a
    # captured command buffer without calling it).
    out = jax.block_until_ready(sharded(x, y))
    assert caijit.stats()["launches"] - before == 2  # one launch per shard
    assert {s.device for s in out.addressable_shards} == set(jax.devices("gpu")[:2])
    close(out, 2 * numpy.asarray(x) + numpy.asarray(y), "float32")


COMMAND_BUFFER_SCRIPT = """
import os
import numpy, jax, jax.numpy as jnp, caijit, caijit.jax
k = caijit.kernel(SOURCE)
f = caijit.jax.kernel_call(k, lambda x, y: x, grid=lambda x, y: (x.size + 255) // 256, block=256, a=2, n=lambda x, y: x.size)

@jax.jit
def step(x, y):
    for _ in range(6):  # six custom calls between fusions: one command buffer
        y = f(x, y) * 0.5
    return y

x = jnp.asarray(numpy.random.default_rng(0).standard_normal(4096), jnp.float32)
y = jnp.asarray(numpy.random.default_rng(1).standard_normal(4096), jnp.float32)
want = y
for _ in range(6):
    want = (2 * x + want) * 0.5
for _ in range(5):  # the first run captures, the later ones replay the CUDA graph
    out = step(x, y)
numpy.testing.assert_allclose(numpy.asarray(out), numpy.asarray(want), rtol=1e-6, atol=1e-6)
print("launches", caijit.stats()["launches"])
"""


def test_inside_xla_command_buffers(jax: Any) -> None:
    import subprocess
    import sys

    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1").strip()
    r = subprocess.run([sys.executable, "-c", f"SOURCE = {AXPY!r}\n" + COMMAND_BUFFER_SCRIPT], capture_output=True, text=True, timeout=300, env=env)
    if r.returncode != 0 and "Unknown flag" in r.stderr:
        pytest.skip(f"this XLA does not take the command buffer flags: {r.stderr.strip().splitlines()[-1]}")
    assert r.returncode == 0, r.stdout + r.stderr
    launches = int(r.stdout.split("launches", 1)[1])
    # Captured once and replayed: fewer handler calls than the 30 kernel runs.
    assert 6 <= launches <= 30, r.stdout


OVERLOADED = r"""
__global__ void affine(const float* x, float* out, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = a * x[i] + 1.0f; }
__global__ void affine(const int* x, int* out, int a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = a * x[i] + 2; }
"""

IFDEF_SWAP = r"""
#ifdef SWAP
extern "C" __global__ void affine(const float* x, float* out, float b, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = a * x[i] + b; }
#else
extern "C" __global__ void affine(const float* x, float* out, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = a * x[i] + b; }
#endif
"""


def test_overloads_are_picked_by_dtype_inside_jit(jax: Any) -> None:
    import caijit.jax as cjax

    f = jax.jit(cjax.kernel_call(caijit.kernel(OVERLOADED, "affine"), lambda x: x, grid=1, block=32, a=3, n=lambda x: x.size))
    x = numpy.arange(8)
    numpy.testing.assert_array_equal(numpy.asarray(f(jax.numpy.asarray(x, "float32"))), 3 * x.astype(numpy.float32) + 1)
    numpy.testing.assert_array_equal(numpy.asarray(f(jax.numpy.asarray(x, "int32"))), 3 * x.astype(numpy.int32) + 2)


def test_scalars_never_bind_to_a_name_the_compiled_branch_may_not_give(jax: Any) -> None:
    """The `#if` branches name a and b in opposite orders: binding a=2, b=10 by the first
    branch's names would swap them in the compiled one; caijit refuses instead."""
    import caijit.jax as cjax

    k = caijit.kernel(IFDEF_SWAP, "affine")
    f = cjax.kernel_call(k, lambda x: x, grid=1, block=32, a=2.0, b=10.0, n=lambda x: x.size)
    with pytest.raises(caijit.ArgumentError, match="no parameter named `a`"):
        jax.jit(f)(jax.numpy.arange(8, dtype=jax.numpy.float32))


# --- compiled programs outside the process that traced them (issue #26) ---------------------

CROSS_COMMON = r'''
import json, os, sys
os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
import numpy as np
import jax, jax.numpy as jnp
import caijit, caijit.jax as cj

def make(body, name):
    k = caijit.kernel('extern "C" __global__ void ' + name + '(const float* x, float* y, int n) {'
                      ' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) ' + body + ' }')
    return cj.kernel_call(k, lambda x: x, grid=lambda x: (x.size + 255) // 256, block=256, n=lambda x: x.size)

x = jnp.ones(1000, jnp.float32)
out_dir, what, fresh = sys.argv[1], sys.argv[2], sys.argv[3] == "fresh"
res = {}
'''

CROSS_A = CROSS_COMMON + r'''
f = make("y[i] = x[i] + 1.0f;", "add_one")
if what == "exe":
    from jax.experimental.serialize_executable import serialize
    compiled = jax.jit(f).lower(x).compile()
    res["own"] = float(np.asarray(compiled(x))[0])
    payload, _, _ = serialize(compiled)
else:
    from jax import export
    try:
        exp = export.export(jax.jit(f), platforms=("cuda",), disabled_checks=[export.DisabledSafetyCheck.custom_call(cj.TARGET)])(x)
        payload = exp.serialize()
    except (ImportError, ModuleNotFoundError) as e:
        print("SKIP " + str(e)); sys.exit(0)
with open(os.path.join(out_dir, what), "wb") as fh:
    fh.write(payload)
print("RESULT " + json.dumps(res))
'''

CROSS_B = CROSS_COMMON + r'''
# This process's own kernel first, with the same signature (A's kernel is not traced here);
# or nothing at all (fresh): importing caijit.jax is all a process needs to load A's program.
g = jax.jit(lambda x: x * 100.0) if fresh else make("y[i] = x[i] * 100.0f;", "times_hundred")
compiled_b = jax.jit(g).lower(x).compile()
res["own"] = float(np.asarray(compiled_b(x))[0])
with open(os.path.join(out_dir, what), "rb") as fh:
    payload = fh.read()
if what == "exe":
    from jax.experimental.serialize_executable import serialize, deserialize_and_load
    _, in_tree, out_tree = serialize(compiled_b)
    loaded = deserialize_and_load(payload, in_tree, out_tree)
    res["A"] = np.asarray(loaded(x)).tolist()
else:
    from jax import export
    res["A"] = np.asarray(jax.jit(export.deserialize(bytearray(payload)).call)(x)).tolist()
print("RESULT " + json.dumps(res))
'''


def _cross_process(what: str, fresh: bool) -> dict[str, Any]:
    import json
    import subprocess
    import sys
    import tempfile

    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    with tempfile.TemporaryDirectory(prefix="caijit_xproc_") as d:
        results = []
        for code in (CROSS_A, CROSS_B):
            args = [sys.executable, "-c", code, d, what, "fresh" if fresh else "traced"]
            r = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
            assert r.returncode == 0, r.stdout + r.stderr
            if r.stdout.startswith("SKIP "):
                pytest.skip(flatbuffers_missing(r.stdout[5:].strip()))
            results.append(json.loads(r.stdout.split("RESULT ", 1)[1]))
    return results[1]


@pytest.mark.parametrize("what, fresh", [("exe", False), ("export", False), ("exe", True), ("export", True)])
def test_a_program_runs_the_kernel_it_was_traced_with_in_another_process(jax: Any, what: str, fresh: bool) -> None:
    """Process A compiles add_one (y = x + 1) and saves it (serialize_executable, or
    jax.export); process B traces times_hundred (y = 100 x, same signature) first, then runs
    A's program: it must compute x + 1 (B compiles A's kernel from the call's attributes).
    With ``fresh``, B traces no caijit kernel at all before loading A's program."""
    b = _cross_process(what, fresh)
    assert b["own"] == 100.0, b
    assert b["A"] == [2.0] * 1000, f"A's program ran another kernel in process B: {b}"


# --- empty inputs, nested vmap, shared memory on every GPU ------------------------------------


def test_empty_inputs_launch_nothing(jax: Any) -> None:
    f = jax.jit(make_axpy(jax))
    one = jax.numpy.ones(3, jax.numpy.float32)
    assert jax.device_get(f(one, one)).tolist() == [3.0, 3.0, 3.0]
    empty = jax.numpy.zeros((0,), jax.numpy.float32)
    before = caijit.stats()["launches"]
    assert f(empty, empty).shape == (0,)
    xs = jax.numpy.zeros((0, 100), jax.numpy.float32)
    assert jax.jit(jax.vmap(make_axpy(jax, vmap_method="broadcast_all")))(xs, xs).shape == (0, 100)
    assert caijit.stats()["launches"] == before


def test_nested_vmap_with_broadcast_all_is_one_launch(jax: Any) -> None:
    f = make_axpy(jax, vmap_method="broadcast_all", command_buffer=False)
    xs, ys = random(jax, (5, 4, 100), "float32", 21), random(jax, (5, 4, 100), "float32", 22)
    fn = jax.jit(jax.vmap(jax.vmap(f)))
    jax.block_until_ready(fn(xs, ys))
    before = caijit.stats()["launches"]
    out = jax.block_until_ready(fn(xs, ys))
    assert caijit.stats()["launches"] - before == 1
    close(out, 2 * numpy.asarray(xs) + numpy.asarray(ys), "float32")


SHARED_64K = r"""
extern "C" __global__ void reverse_block(const float* x, float* out, int n) {
    extern __shared__ float tile[];   // 16384 floats: 64 KiB, above the 48 KiB default
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int j = threadIdx.x; j < 16384; j += blockDim.x) tile[j] = (float)j;
    __syncthreads();
    if (i < n) out[i] = x[i] + tile[16383 - threadIdx.x];
}
"""


def test_shared_memory_above_48k_on_every_gpu(jax: Any) -> None:
    import caijit.jax as cjax

    k = caijit.kernel(SHARED_64K)
    f = jax.jit(cjax.kernel_call(k, lambda x: x, grid=lambda x: (x.size + 255) // 256, block=256, shared_mem=65536, n=lambda x: x.size))
    host = numpy.arange(1024, dtype=numpy.float32)
    want = host + (16383 - numpy.arange(1024) % 256)
    for device in jax.devices("gpu"):
        out = f(jax.device_put(host, device))
        assert out.devices() == {device}
        numpy.testing.assert_array_equal(numpy.asarray(out), want)
