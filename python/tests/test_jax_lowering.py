"""caijit.jax without a GPU: the XLA FFI binding against the header jaxlib ships, and the
lowering of kernel_call to the custom call (for the "cuda" platform, from a CPU jaxlib)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from typing import Any

import pytest

from conftest import jax_missing  # noqa: E402

if jax_missing() is not None:
    pytest.skip(str(jax_missing()), allow_module_level=True)
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import caijit  # noqa: E402
import caijit.jax as cjax  # noqa: E402
from caijit import _native  # noqa: E402
from conftest import AXPY, ROW_SUM, SCALE_IN_PLACE, flatbuffers_missing, load_example  # noqa: E402


def lower_for_cuda(f, *args):  # type: ignore[no-untyped-def]
    return jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


def axpy_call(**kw):  # type: ignore[no-untyped-def]
    k = caijit.kernel(AXPY)
    return cjax.kernel_call(
        k,
        lambda x, y: jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=lambda x, y: (x.size + 255) // 256,
        block=256,
        a=2,
        n=lambda x, y: x.size,
        **kw,
    )


def launch_ids(text: str) -> list[str]:
    """The fingerprint of each custom call's launch, in order."""
    return re.findall(r'caijit_fingerprint = "([0-9a-f]{32})"', text)


def unescape_mlir(text: str) -> str:
    r"""An MLIR string literal's contents: `\\` and `\XX` (hex) escapes, as MLIR prints them."""
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "\\":
            if text[i + 1] == "\\":
                out += b"\\"
                i += 2
            else:
                out.append(int(text[i + 1 : i + 3], 16))
                i += 3
        else:
            out += text[i].encode()
            i += 1
    return out.decode()


def launches(text: str) -> list[tuple[str, str]]:
    """`(fingerprint, description)` of each custom call, read from its attributes."""
    pairs = re.findall(r'caijit_fingerprint = "([0-9a-f]{32})", caijit_launch = "((?:[^"\\]|\\.)*)"', text)
    return [(fp, unescape_mlir(desc)) for fp, desc in pairs]


# --- the binding's layout, against the header -------------------------------------------


def test_binding_layout_matches_the_header() -> None:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to compile xla/ffi/api/c_api.h with")
    header_dir = jax.ffi.include_dir()
    assert os.path.exists(os.path.join(header_dir, "xla", "ffi", "api", "c_api.h"))
    layout, version = _native.xla_ffi_layout()
    with open(os.path.join(header_dir, "xla", "ffi", "api", "c_api.h")) as f:
        text = f.read()
    # XLA's FFI 0.4 (jaxlib 0.11) renamed the extension header struct; its layout is the same.
    renamed = {"XLA_FFI_Extension_Base": "XLA_FFI_InternalExtension"} if "XLA_FFI_InternalExtension" in text else {}
    lines = []
    for name, _ in layout:
        c_name = name
        for old, new in renamed.items():
            c_name = c_name.replace(old + "_STRUCT_SIZE", new + "_STRUCT_SIZE").replace(old + ".", new + ".")
        if c_name.endswith("_STRUCT_SIZE") or "." not in c_name:  # a size, or an enum's value
            expr = f"(unsigned long)({c_name})"
        else:
            struct, field = c_name.split(".")
            expr = f"(unsigned long)offsetof({struct}, {field})"
        lines.append(f'    printf("%s %lu\\n", "{name}", {expr});')
    source = "\n".join(
        [
            "#include <stddef.h>",
            "#include <stdio.h>",
            '#include "xla/ffi/api/c_api.h"',
            "int main(void) {",
            '    printf("VERSION %d.%d\\n", XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR);',
            *lines,
            "    return 0;",
            "}",
        ]
    )
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "check.c"), os.path.join(d, "check")
        with open(src, "w") as f:
            f.write(source)
        r = subprocess.run([cc, "-I", header_dir, src, "-o", exe], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout.split("\n")
    header = dict(line.split(" ", 1) for line in out if line)
    major, minor = (int(v) for v in header.pop("VERSION").split("."))
    # The header may be newer than the bindings (a later minor version adds fields at the end).
    assert major == version[0] and minor >= version[1], (header, version)
    for name, value in layout:
        if name == "XLA_FFI_Api_STRUCT_SIZE":
            assert int(header[name]) >= value, name  # newer APIs append functions
        else:
            assert int(header[name]) == value, f"{name}: the header says {header[name]}, caijit's binding {value}"


# --- lowering ----------------------------------------------------------------------------


def test_kernel_call_lowers_to_the_caijit_custom_call() -> None:
    x = jnp.ones(1000, jnp.float32)
    text = lower_for_cuda(axpy_call(), x, x)
    assert "stablehlo.custom_call @caijit_launch(%arg0, %arg1)" in text
    assert len(launch_ids(text)) == 1
    assert "-> tensor<1000xf32>" in text


def test_without_command_buffers_the_call_goes_to_the_direct_target() -> None:
    x = jnp.ones(1000, jnp.float32)
    text = lower_for_cuda(axpy_call(command_buffer=False), x, x)
    assert "stablehlo.custom_call @caijit_launch_direct(%arg0, %arg1)" in text
    assert len(launch_ids(text)) == 1


def test_each_dtype_deduces_its_own_instance_and_the_same_one_is_reused() -> None:
    f = axpy_call()
    ids = {}
    for dtype in (jnp.float16, jnp.bfloat16, jnp.float32, jnp.int32):
        x = jnp.ones(64, dtype)
        ids[dtype] = launch_ids(lower_for_cuda(f, x, x))[0]
    assert len(set(ids.values())) == 4
    # The same shapes and dtypes again: the prepared launch is reused, nothing compiles.
    before = caijit.stats()["compiles"]
    x = jnp.ones(64, jnp.float32)
    assert launch_ids(lower_for_cuda(axpy_call(), x, x)) != [] and launch_ids(lower_for_cuda(f, x, x))[0] == ids[jnp.float32]
    assert caijit.stats()["compiles"] == before


def test_vmap_sequential_launches_per_element_and_broadcast_all_once() -> None:
    xs = jnp.ones((8, 1000), jnp.float32)
    seq = lower_for_cuda(jax.vmap(axpy_call()), xs, xs)
    assert "stablehlo.while" in seq and "custom_call @caijit_launch" in seq and "(tensor<1000xf32>, tensor<1000xf32>) -> tensor<1000xf32>" in seq
    broad = lower_for_cuda(jax.vmap(axpy_call(vmap_method="broadcast_all")), xs, xs)
    assert "stablehlo.while" not in broad
    assert "(tensor<8x1000xf32>, tensor<8x1000xf32>) -> tensor<8x1000xf32>" in broad
    # An unbatched argument is broadcast to the batch.
    mixed = lower_for_cuda(jax.vmap(axpy_call(vmap_method="broadcast_all"), in_axes=(0, None)), xs, xs[0])
    assert "(tensor<8x1000xf32>, tensor<8x1000xf32>) -> tensor<8x1000xf32>" in mixed


def test_vmap_method_none_refuses_vmap() -> None:
    xs = jnp.ones((8, 1000), jnp.float32)
    f = axpy_call(vmap_method=None)
    assert "custom_call @caijit_launch" in lower_for_cuda(f, xs[0], xs[0])
    with pytest.raises(caijit.ArgumentError, match="vmap_method=None"):
        lower_for_cuda(jax.vmap(f), xs, xs)


def test_input_output_aliases_lower_to_operand_aliases() -> None:
    k = caijit.kernel(SCALE_IN_PLACE)
    f = cjax.kernel_call(
        k, lambda x: x, grid=lambda x: (x.size + 255) // 256, block=256, input_output_aliases={0: 0}, a=3.0, n=lambda x: x.size
    )
    text = lower_for_cuda(f, jnp.ones(512, jnp.float32))
    assert "output_operand_aliases" in text and "custom_call @caijit_launch" in text


def test_array_parameters_take_the_buffer_with_its_shape() -> None:
    k = caijit.kernel(ROW_SUM)
    f = cjax.kernel_call(k, lambda x: jax.ShapeDtypeStruct(x.shape[:1], x.dtype), grid=1, block=128)  # type: ignore[no-untyped-call]
    text = lower_for_cuda(f, jnp.ones((100, 7), jnp.float32))
    assert "(tensor<100x7xf32>) -> tensor<100xf32>" in text
    with pytest.raises(caijit.ArgumentError, match="expected a 2-d buffer"):
        lower_for_cuda(f, jnp.ones((100,), jnp.float32))


def test_kernel_call_errors_name_the_parameter() -> None:
    x = jnp.ones(16, jnp.float32)
    k = caijit.kernel(SCALE_IN_PLACE)
    # An input written through a non-const pointer without an alias.
    f = cjax.kernel_call(k, jax.ShapeDtypeStruct((16,), jnp.float32), grid=1, block=16, a=1.0, n=16)
    with pytest.raises(caijit.ArgumentError, match="kernel `scale` has 1 buffer parameters"):
        lower_for_cuda(f, x)
    g = cjax.kernel_call(k, [], grid=1, block=16, a=1.0, n=16)
    with pytest.raises(caijit.ArgumentError, match="input 0 is bound to a non-const parameter"):
        lower_for_cuda(g, x)
    h = cjax.kernel_call(k, lambda x: x, grid=1, block=16, input_output_aliases={0: 0}, alpha=1.0, n=16)
    with pytest.raises(caijit.ArgumentError, match="no parameter named `alpha`"):
        lower_for_cuda(h, x)
    big = cjax.kernel_call(k, lambda x: x, grid=1, block=16, input_output_aliases={0: 0}, a=1.0, n=1 << 40)
    with pytest.raises(caijit.ArgumentError, match="out of range"):
        lower_for_cuda(big, x)
    with pytest.raises(caijit.ArgumentError, match="grid"):
        lower_for_cuda(cjax.kernel_call(k, lambda x: x, grid=(1, -1), block=16, input_output_aliases={0: 0}, a=1.0, n=16), x)

    def traced(x):  # type: ignore[no-untyped-def]
        return cjax.kernel_call(k, lambda x: x, grid=1, block=16, input_output_aliases={0: 0}, a=x[0], n=16)(x)

    with pytest.raises(caijit.ArgumentError, match="traced value"):
        lower_for_cuda(traced, x)
    with pytest.raises(caijit.ArgumentError, match="caijit.Kernel"):
        cjax.kernel_call("not a kernel", x, grid=1, block=1)  # type: ignore[arg-type]


def test_the_example_lowers_with_its_backward_kernel() -> None:
    mod = load_example("05_jax_custom_op.py")
    x = jnp.ones((4, 256), jnp.float32)
    params = mod.init_params()
    text = jax.jit(jax.grad(mod.loss)).trace(params, x, x).lower(lowering_platforms=("cuda",)).as_text()
    # Forward and backward kernels: two distinct prepared launches.
    assert len(set(launch_ids(text))) >= 2, text


SHARD_MAP_SCRIPT = """
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"
import numpy, jax, jax.numpy as jnp, caijit, caijit.jax
from jax.sharding import Mesh, PartitionSpec as P
k = caijit.kernel(SOURCE)
f = caijit.jax.kernel_call(k, lambda x, y: x, grid=lambda x, y: (x.size + 255) // 256, block=256, a=2, n=lambda x, y: x.size)
mesh = Mesh(numpy.array(jax.devices()[:2]), ("i",))
sm = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("i"), P("i")), out_specs=P("i")))
x = jnp.ones(8192, jnp.float32)
print(sm.trace(x, x).lower(lowering_platforms=("cuda",)).as_text())
"""


def test_shard_map_lowers_to_one_custom_call_per_shard() -> None:
    import sys

    script = f"SOURCE = {AXPY!r}\n" + SHARD_MAP_SCRIPT
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    # Inside the manual computation, the custom call sees the shard's shape (4096 of 8192).
    assert "manual_computation" in text
    assert "custom_call @caijit_launch" in text and "(tensor<4096xf32>, tensor<4096xf32>) -> tensor<4096xf32>" in text


OVERLOADED = """
__global__ void ov(const float* x, float* y, float a, int n) {}
__global__ void ov(const double* x, double* y, double a, int n) {}
__global__ void ov(const int* x, int* y, int a, int n) {}
"""


def test_overloads_are_picked_by_the_buffers_and_scalars() -> None:
    """As a launch does: each dtype lowers to its own overload (not "ambiguous")."""
    k = caijit.kernel(OVERLOADED, "ov")
    f = cjax.kernel_call(k, lambda x: x, grid=1, block=32, a=2, n=lambda x: x.size)
    ids = {dt: launch_ids(lower_for_cuda(f, jnp.ones(8, dt)))[0] for dt in (jnp.float32, jnp.int32)}
    assert len(set(ids.values())) == 2
    names = {
        dt: _native.xla_prepare(k, [(dt, [8])], [(dt, [8])], [], [("a", 2), ("n", 8)], [1, 1, 1], [32, 1, 1], 0, [])[1]
        for dt in ("float32", "float64", "int32")
    }
    assert names == {"float32": "_Z2ovPKfPffi", "float64": "_Z2ovPKdPddi", "int32": "_Z2ovPKiPiii"}
    with pytest.raises(caijit.ArgumentError, match="no overload of `ov` takes these buffers"):
        lower_for_cuda(f, jnp.ones(8, jnp.int16))


def test_scalars_bind_only_to_names_every_declaration_gives() -> None:
    """Two `#if` branches name `a` and `b` in opposite orders: caijit cannot tell which is
    compiled, so it refuses to bind them by name rather than maybe swap them."""
    src = """
#ifdef SWAP
extern "C" __global__ void affine(const float* x, float* out, float b, float a, int n) {}
#else
extern "C" __global__ void affine(const float* x, float* out, float a, float b, int n) {}
#endif
"""
    f = cjax.kernel_call(caijit.kernel(src, "affine"), lambda x: x, grid=1, block=32, a=2.0, b=10.0, n=lambda x: x.size)
    with pytest.raises(caijit.ArgumentError, match="no parameter named `a`"):
        lower_for_cuda(f, jnp.ones(8, jnp.float32))


def test_a_plain_name_in_two_namespaces_is_ambiguous() -> None:
    src = "namespace a { __global__ void k(float* x) {} }\nnamespace b { __global__ void k(double* x) {} }\n"
    g = cjax.kernel_call(caijit.kernel(src, "k"), lambda x: x, grid=1, block=1, input_output_aliases={0: 0})
    with pytest.raises(caijit.ArgumentError, match="`k` is ambiguous: a::k, b::k"):
        lower_for_cuda(g, jnp.ones(1, jnp.float32))
    h = cjax.kernel_call(caijit.kernel(src, "a::k"), lambda x: x, grid=1, block=1, input_output_aliases={0: 0})
    assert len(launch_ids(lower_for_cuda(h, jnp.ones(1, jnp.float32)))) == 1


# --- each call carries its launch (issue #26): fingerprint, description, registry ---------


def test_each_call_carries_its_launch_and_its_fingerprint_not_an_index() -> None:
    import hashlib

    x = jnp.ones(1000, jnp.float32)
    text = lower_for_cuda(axpy_call(), x, x)
    assert not re.search(r"caijit_launch = \d", text), "a bare per-process index"
    [(fp, desc)] = launches(text)
    # The fingerprint is the description's SHA-256 (first 128 bits), computed independently.
    assert fp == hashlib.sha256(desc.encode()).hexdigest()[:32]
    # The description holds the whole program and the instance, not a reference to them.
    assert desc.startswith("19:caijit-xla-launch/2") and AXPY.strip() in desc
    assert "axpy" in desc and "float32" in desc
    # Another scalar, another grid: another launch, another fingerprint.
    other = cjax.kernel_call(caijit.kernel(AXPY), lambda x, y: x, grid=lambda x, y: (x.size + 127) // 128, block=128, a=3, n=lambda x, y: x.size)
    [(fp2, desc2)] = launches(lower_for_cuda(other, x, x))
    assert fp2 != fp and desc2 != desc


def test_a_registered_launch_resolves_only_with_its_own_description() -> None:
    x = jnp.ones(256, jnp.float32)
    [(fp, desc)] = launches(lower_for_cuda(axpy_call(), x, x))
    assert "axpy" in _native.xla_resolve(fp, desc)
    tampered = desc.replace("out[i] = a * x[i] + y[i]", "out[i] = a * x[i] - y[i]")
    assert tampered != desc
    with pytest.raises(caijit.ArgumentError, match="differs from the launch registered under its fingerprint"):
        _native.xla_resolve(fp, tampered)


def test_a_description_that_does_not_match_its_fingerprint_is_refused() -> None:
    """The handler's fingerprint check: a description is compiled only when it hashes to
    the fingerprint its call carries (here one no launch is registered under)."""
    x = jnp.ones(128, jnp.float32)
    [(fp, desc)] = launches(lower_for_cuda(axpy_call(), x, x))
    unknown = format(int(fp, 16) ^ 1, "032x")
    with pytest.raises(caijit.ArgumentError, match="does not match its fingerprint"):
        _native.xla_resolve(unknown, desc)
    with pytest.raises(caijit.ArgumentError, match="32 hex digits"):
        _native.xla_resolve("0", desc)


FRESH_PROCESS = r"""
import json, sys
import caijit
from caijit import _native
a, b = json.loads(sys.stdin.read())
result = {}
# Nothing is registered in this process yet: each description must hash to its fingerprint.
for name, pair in {"swapped": (a[0], b[1]), "garbled": (a[0], a[1][:-3]), "own": a}.items():
    try:
        result[name] = _native.xla_resolve(*pair)
    except caijit.ArgumentError as e:
        result[name] = "ArgumentError: " + str(e)
print("RESULT " + json.dumps(result))
"""


def test_a_launch_resolves_in_a_fresh_process_from_its_attributes_alone() -> None:
    """What a deserialized executable's handler does in a process that never traced the
    kernel: compile it from the description; A's fingerprint with B's description (a
    ×100 kernel instead of +1) is refused, never run."""
    import json
    import sys

    x = jnp.ones(64, jnp.float32)
    [a] = launches(lower_for_cuda(axpy_call(), x, x))
    scale = cjax.kernel_call(caijit.kernel(SCALE_IN_PLACE), lambda x: x, grid=1, block=64, input_output_aliases={0: 0}, a=100.0, n=lambda x: x.size)
    [b] = launches(lower_for_cuda(scale, x))
    r = subprocess.run([sys.executable, "-c", FRESH_PROCESS], input=json.dumps([a, b]), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.split("RESULT ", 1)[1])
    assert "axpy" in result["own"], result
    assert result["swapped"].startswith("ArgumentError") and "does not match its fingerprint" in result["swapped"], result
    assert result["garbled"].startswith("ArgumentError") and "does not match its fingerprint" in result["garbled"], result


def test_a_header_edited_after_tracing_is_refused_in_a_fresh_process(tmp_path: Any) -> None:
    """The description names the program's headers by their contents: a process that finds
    other headers than the tracing one did (an edited `scale.h`) refuses the launch instead
    of compiling another kernel under the traced program's fingerprint."""
    import json
    import sys

    (tmp_path / "scale.h").write_text("#define FACTOR 2.0f\n")
    src = '#include "scale.h"\nextern "C" __global__ void k(float* y, int n) { if ((int)threadIdx.x < n) y[threadIdx.x] *= FACTOR; }\n'
    k = caijit.kernel(src, include_dirs=[str(tmp_path)])
    x = jnp.ones(8, jnp.float32)
    [a] = launches(lower_for_cuda(cjax.kernel_call(k, lambda x: x, grid=1, block=8, input_output_aliases={0: 0}, n=8), x))
    run = lambda: subprocess.run([sys.executable, "-c", FRESH_PROCESS], input=json.dumps([a, a]), capture_output=True, text=True, timeout=300)
    r = run()
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.split("RESULT ", 1)[1])["own"] == "k"
    (tmp_path / "scale.h").write_text("#define FACTOR 100.0f\n")
    r = run()
    assert r.returncode == 0, r.stderr
    own = json.loads(r.stdout.split("RESULT ", 1)[1])["own"]
    assert own.startswith("ArgumentError") and "other headers" in own, own


def test_an_empty_input_launches_nothing_and_gives_empty_results() -> None:
    f = axpy_call()
    empty = jnp.zeros((0,), jnp.float32)
    text = lower_for_cuda(f, empty, empty)
    assert "custom_call" not in text and "tensor<0xf32>" in text
    # No custom call: the program runs on any backend, this CPU one included.
    out = jax.jit(f)(empty, empty)
    assert out.shape == (0,) and out.dtype == jnp.float32
    g = axpy_call(vmap_method="broadcast_all")
    xs = jnp.zeros((0, 100), jnp.float32)
    assert "custom_call" not in lower_for_cuda(jax.vmap(g), xs, xs)
    assert jax.jit(jax.vmap(g))(xs, xs).shape == (0, 100)
    # Checked all the same: an empty input of the wrong kind is the same error.
    with pytest.raises(caijit.ArgumentError, match="non-const"):
        bad = cjax.kernel_call(caijit.kernel(SCALE_IN_PLACE), [], grid=lambda x: x.size // 256, block=256, a=2.0, n=lambda x: x.size)
        lower_for_cuda(bad, empty)


def test_a_zero_grid_gives_zeros_and_an_aliased_output_its_input() -> None:
    k = caijit.kernel(AXPY)
    f = cjax.kernel_call(k, lambda x, y: jax.ShapeDtypeStruct((4,), x.dtype), grid=(0, 1), block=32, a=2, n=4)
    x = jnp.ones(4, jnp.float32)
    assert jax.device_get(jax.jit(f)(x, x)).tolist() == [0.0] * 4
    s = cjax.kernel_call(caijit.kernel(SCALE_IN_PLACE), lambda x: x, grid=0, block=32, input_output_aliases={0: 0}, a=3.0, n=4)
    assert jax.device_get(jax.jit(s)(x)).tolist() == [1.0] * 4
    with pytest.raises(caijit.ArgumentError, match="must not be negative"):
        lower_for_cuda(cjax.kernel_call(k, lambda x, y: x, grid=-1, block=32, a=2, n=4), x, x)


def test_nested_vmap_with_broadcast_all_is_one_launch_over_every_level() -> None:
    f = axpy_call(vmap_method="broadcast_all")
    xs = jnp.ones((5, 4, 100), jnp.float32)
    text = lower_for_cuda(jax.vmap(jax.vmap(f)), xs, xs)
    assert "stablehlo.while" not in text
    assert len(launch_ids(text)) == 1
    assert "(tensor<5x4x100xf32>, tensor<5x4x100xf32>) -> tensor<5x4x100xf32>" in text
    # Three levels, one of them unbatched in an argument: still one launch, broadcast.
    xss = jnp.ones((2, 5, 4, 100), jnp.float32)
    text = lower_for_cuda(jax.vmap(jax.vmap(jax.vmap(f)), in_axes=(0, None)), xss, xs)
    assert "stablehlo.while" not in text and len(launch_ids(text)) == 1
    assert "(tensor<2x5x4x100xf32>, tensor<2x5x4x100xf32>) -> tensor<2x5x4x100xf32>" in text
    # Fixed out_shapes get every batch dimension in front.
    g = cjax.kernel_call(
        caijit.kernel(AXPY), jax.ShapeDtypeStruct((100,), jnp.float32), grid=lambda x, y: (x.size + 255) // 256, block=256,
        a=2, n=lambda x, y: x.size, vmap_method="broadcast_all",
    )
    assert "-> tensor<5x4x100xf32>" in lower_for_cuda(jax.vmap(jax.vmap(g)), xs, xs)


ROUND_TRIP = r"""
import ctypes, json, os, sys
import jax, jax.numpy as jnp
import caijit
from caijit import _native
# caijit's handler, registered for the CPU platform under a probe name: XLA:CPU calls its
# instantiate stage like XLA:GPU does (its execute stage then finds no CUDA stream).
cap = jax.ffi.pycapsule(ctypes.c_void_p(_native.xla_handler_address(False)))
jax.ffi.register_ffi_target("caijit_cpu_probe", {"instantiate": cap, "execute": cap}, platform="cpu", api_version=1)
role, what, d = sys.argv[1:4]
fp, desc = json.load(open(os.path.join(d, "attrs")))
x = jnp.ones(64, jnp.float32)
if role == "A":
    call = jax.ffi.ffi_call("caijit_cpu_probe", jax.ShapeDtypeStruct((64,), jnp.float32))
    f = jax.jit(lambda x, y: call(x, y, caijit_fingerprint=fp, caijit_launch=desc))
    if what == "exe":
        from jax.experimental.serialize_executable import serialize
        payload, _, _ = serialize(f.lower(x, x).compile())
    else:
        from jax import export
        try:
            exp = export.export(f, platforms=("cpu",), disabled_checks=[export.DisabledSafetyCheck.custom_call("caijit_cpu_probe")])(x, x)
            payload = exp.serialize()
        except ImportError as e:
            print("SKIP " + str(e)); sys.exit(0)
    open(os.path.join(d, what), "wb").write(bytes(payload))
    print("RESULT {}")
    sys.exit(0)
payload = open(os.path.join(d, what), "rb").read()
if role == "tampered":  # the kernel's body changed, the fingerprint kept
    assert b"+ y[i]" in payload
    payload = payload.replace(b"+ y[i]", b"- y[i]")
result = {}
try:
    if what == "exe":
        from jax.experimental.serialize_executable import deserialize_and_load, serialize
        _, in_tree, out_tree = serialize(jax.jit(lambda x, y: x).lower(x, x).compile())
        loaded = deserialize_and_load(payload, in_tree, out_tree)
    else:
        from jax import export
        loaded = jax.jit(export.deserialize(bytearray(payload)).call).lower(x, x).compile()
    result["loaded"] = "yes"
    loaded(x, x)
    result["ran"] = "yes"
except Exception as e:
    result["error"] = str(e)
# Registered by loading the program, or not: a probe with another description says which.
try:
    _native.xla_resolve(fp, desc + " ")
except caijit.ArgumentError as e:
    result["registry"] = str(e)
print("RESULT " + json.dumps(result))
"""


@pytest.mark.parametrize("what", ["exe", "export"])
def test_a_serialized_program_resolves_its_launch_in_a_fresh_process(what: str) -> None:
    """Both round trips across processes with XLA itself (on its CPU platform): process A
    saves a compiled program (serialize_executable) or a jax.export artifact whose custom
    call carries an axpy launch; a fresh process loading it resolves and registers that
    launch from the call's attributes alone (XLA's instantiate stage), and a copy whose
    kernel body was altered fails to load with the fingerprint error, never running."""
    import json
    import sys

    x = jnp.ones(64, jnp.float32)
    [(fp, desc)] = launches(lower_for_cuda(axpy_call(), x, x))
    with tempfile.TemporaryDirectory(prefix="caijit_roundtrip_") as d:
        with open(os.path.join(d, "attrs"), "w") as f:
            json.dump([fp, desc], f)
        results = {}
        for role in ("A", "fresh", "tampered"):
            # XLA's CPU platform, also where JAX has a GPU (the probe is registered for CPU).
            env = {**os.environ, "JAX_PLATFORMS": "cpu"}
            r = subprocess.run([sys.executable, "-c", ROUND_TRIP, role, what, d], capture_output=True, text=True, timeout=300, env=env)
            assert r.returncode == 0, r.stdout + r.stderr
            if r.stdout.startswith("SKIP "):
                pytest.skip(flatbuffers_missing(r.stdout[5:].strip()))
            results[role] = json.loads(r.stdout.split("RESULT ", 1)[1])
    fresh, tampered = results["fresh"], results["tampered"]
    # Loaded (instantiated) without a caijit error; only the CUDA stream is missing at run.
    assert fresh.get("loaded") == "yes" and "caijit" not in fresh.get("error", ""), fresh
    assert "differs from the launch registered under its fingerprint" in fresh["registry"], fresh
    assert "loaded" not in tampered and "does not match its fingerprint" in tampered["error"], tampered
    assert "does not match its fingerprint" in tampered["registry"], tampered


def test_scalar_errors_carry_the_parameter_index_name_and_type() -> None:
    x = jnp.ones(16, jnp.float32)
    k = caijit.kernel(SCALE_IN_PLACE)  # scale(float* x, float a, int n)

    def call(**scalars):  # type: ignore[no-untyped-def]
        return cjax.kernel_call(k, lambda x: x, grid=1, block=16, input_output_aliases={0: 0}, **scalars)

    with pytest.raises(caijit.ArgumentError, match="scalar `a`: expected a Python or NumPy number") as e:
        lower_for_cuda(call(a="two", n=16), x)
    assert (e.value.index, e.value.argument, e.value.ctype) == (1, "a", "float")
    with pytest.raises(caijit.ArgumentError, match="does not fit in 128 bits") as e:
        lower_for_cuda(call(a=1.0, n=1 << 200), x)
    assert (e.value.index, e.value.argument, e.value.ctype) == (2, "n", "int")
    with pytest.raises(caijit.ArgumentError, match="traced value") as e:
        lower_for_cuda(lambda x: call(a=x[0], n=16)(x), x)
    assert (e.value.index, e.value.argument, e.value.ctype) == (1, "a", "float")
    with pytest.raises(caijit.ArgumentError, match="an array of shape") as e:
        lower_for_cuda(call(a=jnp.ones(2), n=16), x)
    assert (e.value.index, e.value.argument, e.value.ctype) == (1, "a", "float")
    # A scalar the kernel has no parameter for: named, with no index or type.
    with pytest.raises(caijit.ArgumentError) as e:
        lower_for_cuda(call(a=1.0, n=16, alpha=object()), x)
    assert (e.value.index, e.value.argument, e.value.ctype) == (None, "alpha", None)
