"""Issue #20 from Python, without a GPU: parameter types are what NVRTC compiled, names
are anything NVRTC accepts, and every program it compiles has launchable kernels."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import caijit

IFDEF = r"""
#ifdef USE_INT
extern "C" __global__ void scale(int* x, int a, int n) { int i = threadIdx.x; if (i < n) x[i] *= a; }
#else
extern "C" __global__ void scale(float* x, float a, int n) { int i = threadIdx.x; if (i < n) x[i] *= a; }
#endif
"""

NAMESPACED = r"""
namespace a { __global__ void k(float* x, int n) { if (threadIdx.x < n) x[threadIdx.x] += 1; } }
namespace a { namespace b { template <typename T> __global__ void t(T* x, T v) { x[threadIdx.x] = v; } } }
"""

OVERLOADS = r"""
__global__ void ov(double* x, int n) {}
__global__ void ov(float* x, int n) {}
"""

MACROS = r"""
#define MAKE(T) __global__ void k_##T(T* x, T a) { x[threadIdx.x] += a; }
MAKE(float)
#define MAKE_C(T) extern "C" __global__ void c_##T(T* x, T a) { x[threadIdx.x] *= a; }
MAKE_C(double)
"""


def params(infos: list[dict[str, Any]]) -> list[tuple[str, str, int, int]]:
    (info,) = infos
    return [(p["type"], p["kind"], p["size"], p["offset"]) for p in info["params"]]


def test_the_ifdef_branch_compiled_decides_the_types() -> None:
    assert params(caijit.kernel(IFDEF, "scale").compile(arch="sm_90")) == [
        ("float*", "pointer", 8, 0),
        ("float", "scalar", 4, 8),
        ("int", "scalar", 4, 12),
    ]
    k = caijit.kernel(IFDEF, "scale", defines={"USE_INT": None})
    assert [p["type"] for p in k.params] == ["int*", "int", "int"]


def test_namespaced_kernels_by_qualified_name() -> None:
    k = caijit.kernel(NAMESPACED, "a::k")
    assert params(k.compile(arch="sm_90")) == [("float*", "pointer", 8, 0), ("int", "scalar", 4, 8)]
    assert [p["name"] for p in k.params] == ["x", "n"]
    m = caijit.module(NAMESPACED)
    assert m.names == ["a::k", "a::b::t"]
    t = m["a::b::t"].specialize("double")
    assert t.name == "a::b::t<double>"
    assert params(t.compile(arch="sm_90")) == [("double*", "pointer", 8, 0), ("double", "scalar", 8, 8)]


def test_overloads_by_cast_and_macro_made_kernels_by_name() -> None:
    k = caijit.kernel(OVERLOADS, "(void(*)(float*, int))ov")
    assert params(k.compile(arch="sm_90")) == [("float*", "pointer", 8, 0), ("int", "scalar", 4, 8)]
    with pytest.raises(caijit.ArgumentError, match="overloaded"):
        caijit.kernel(OVERLOADS, "ov").params
    assert params(caijit.kernel(MACROS, "k_float").compile(arch="sm_90")) == [("float*", "pointer", 8, 0), ("float", "scalar", 4, 8)]
    assert params(caijit.kernel(MACROS, "c_double").compile(arch="sm_90")) == [("double*", "pointer", 8, 0), ("double", "scalar", 8, 8)]


def test_default_template_arguments() -> None:
    src = "template <typename T, int BLOCK = 256, bool B = (BLOCK > 4)> __global__ void k(const T* x, T* y, int n) {}"
    k = caijit.kernel(src, "k").specialize("float")
    (info,) = k.compile(arch="sm_90")
    assert info["demangled"] == "void k<float, 256, true>(float const*, float*, int)"


@pytest.mark.parametrize("t", ["__half", "__nv_bfloat16", "caijit::complex<float>"])
def test_instances_include_the_headers_their_types_need(t: str) -> None:
    src = "template <typename T> __global__ void axpy(T a, const T* x, T* y, int n) { int i = threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }"
    (info,) = caijit.kernel(src, "axpy").specialize(t).compile(arch="sm_90")
    assert info["params"][0]["kind"] == "scalar"


def test_cli_instantiates_qualified_names(tmp_path: Path) -> None:
    f = tmp_path / "ns.cu"
    f.write_text(NAMESPACED)
    out = subprocess.run(
        [sys.executable, "-m", "caijit", "compile", str(f), "--instantiate", "a::k", "--instantiate", "a::b::t<int>", "--json", "--arch", "sm_90"],
        capture_output=True,
        text=True,
        check=True,
    )
    kernels = json.loads(out.stdout)
    assert {k["name"] for k in kernels} == {"a::k", "a::b::t"}


def test_cli_notes_what_it_could_not_learn_and_instantiates_half(tmp_path: Path) -> None:
    f = tmp_path / "m.cu"
    f.write_text(MACROS + "template <typename T> __global__ void t(T* x) {}\n")
    run = [sys.executable, "-m", "caijit", "compile", str(f), "--arch", "sm_90", "--json"]
    out = subprocess.run(run, capture_output=True, text=True, check=True)
    assert "c_double" in out.stderr and "macro" in out.stderr
    assert "k_float" in {k["name"] for k in json.loads(out.stdout)}
    out = subprocess.run([*run, "--instantiate", "t<__half>", "--instantiate", "c_double"], capture_output=True, text=True, check=True)
    kernels = {k["name_expression"]: k for k in json.loads(out.stdout)}
    assert [p["type"] for p in kernels["t<__half>"]["params"]] == ["__half*"]
    assert [p["type"] for p in kernels["c_double"]["params"]] == ["double*", "double"]
