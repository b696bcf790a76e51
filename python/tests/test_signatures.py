"""Issue #20 from Python, without a GPU: parameter types are what NVRTC compiled, names
are anything NVRTC accepts, and every program it compiles has launchable kernels."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import caijit
from caijit import _native

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


IFDEF_SWAP = r"""
#ifdef SWAP
extern "C" __global__ void affine(const float* x, float* out, float b, float a, int n) {
    int i = threadIdx.x; if (i < n) out[i] = a * x[i] + b; }
#else
extern "C" __global__ void affine(const float* x, float* out, float a, float b, int n) {
    int i = threadIdx.x; if (i < n) out[i] = a * x[i] + b; }
#endif
"""


@pytest.mark.parametrize("defines", [{}, {"SWAP": None}])
def test_parameter_names_are_those_every_declaration_agrees_on(defines: dict[str, Any]) -> None:
    """The tokenizer reads both `#if` branches and cannot tell which one is compiled: the
    names they disagree on are no names (not the first branch's, which would bind scalars
    to the wrong parameters); caijit.jax then refuses to bind them by name."""
    k = caijit.kernel(IFDEF_SWAP, "affine", defines=defines)
    assert [p["name"] for p in k.params] == ["x", "out", None, None, "n"]
    with pytest.raises(caijit.ArgumentError, match=r"no parameter named `a`.*give it one name in every declaration"):
        _native.xla_prepare(k, [("float32", [8])], [("float32", [8])], [], [("a", 2.0), ("b", 10.0), ("n", 8)], [1, 1, 1], [32, 1, 1], 0, [])
    # Branches of different types: the compiled types tell which branch names them.
    typed = IFDEF_SWAP.replace("float b, float a", "double b, double a")
    assert [p["name"] for p in caijit.kernel(typed, "affine").params] == ["x", "out", "a", "b", "n"]
    assert [p["name"] for p in caijit.kernel(typed, "affine", defines={"SWAP": None}).params] == ["x", "out", "b", "a", "n"]
    # A forward declaration without names, then the definition: the definition names them.
    fwd = 'extern "C" __global__ void f(float*, int);\nextern "C" __global__ void f(float* y, int n) {}'
    assert [p["name"] for p in caijit.kernel(fwd, "f").params] == ["y", "n"]


NAMESPACES = r"""
namespace a { __global__ void k(float* x) { x[0] = 1; } }
namespace b { __global__ void k(double* x) { x[0] = 2; } }
"""


def test_same_name_in_two_namespaces_is_ambiguous_not_an_overload_set() -> None:
    with pytest.raises(caijit.ArgumentError, match=r"`k` is ambiguous: a::k, b::k"):
        caijit.kernel(NAMESPACES, "k").params
    with pytest.raises(caijit.ArgumentError, match=r"`k` is ambiguous: a::k, b::k"):
        caijit.kernel(NAMESPACES, "k").compile(arch="sm_90")
    assert [p["type"] for p in caijit.kernel(NAMESPACES, "b::k").params] == ["double*"]
    # A name expression is NVRTC's to look up.
    templates = "namespace a { template <typename T> __global__ void t(T* x) {} }\nnamespace b { __global__ void t(double* x) {} }\n"
    assert [p["type"] for p in caijit.kernel(templates, "a::t<float>").params] == ["float*"]
    # When the preprocessor keeps one of them, the plain name finds it.
    one = "#ifdef B\nnamespace b { __global__ void k(double* x) {} }\n#else\nnamespace a { __global__ void k(float* x) {} }\n#endif\n"
    assert [p["type"] for p in caijit.kernel(one, "k").params] == ["float*"]
    assert [p["type"] for p in caijit.kernel(one, "k", defines={"B": None}).params] == ["double*"]


def test_the_overload_casts_suggested_compile() -> None:
    src = "namespace ns { struct S { int v; }; __global__ void ov(double* x, ns::S s) {} __global__ void ov(const float* x, int n) {} }"
    with pytest.raises(caijit.ArgumentError, match="overloaded") as e:
        caijit.kernel(src, "ns::ov").params
    casts = re.findall(r'"([^"]+)"', str(e.value))
    assert len(casts) == 2, str(e.value)
    assert sorted(tuple(p["type"] for p in caijit.kernel(src, c).params) for c in casts) == [("const float*", "int"), ("double*", "ns::S")]


def test_signature_error_names_the_kernel_and_carries_its_parameter() -> None:
    # (The program compiles: naming the kernel is the error.)
    for src in ['extern "C" __global__ void k(const float& a, float* y) {}', '__global__ void k(const float& a, float* y) {}']:
        with pytest.raises(caijit.ArgumentError) as e:
            caijit.kernel(src, "k").params
        assert "caijit_probe" not in str(e.value) and "`k`" in str(e.value), str(e.value)
        assert (e.value.index, e.value.argument, e.value.ctype) == (0, "a", "float const &"), str(e.value)


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


# Issue #26: the compiler's types, and one kernel caijit cannot read spoils nothing else.


@pytest.mark.parametrize(
    "own, kernel",
    [
        ("struct half { float lo, hi; };", 'extern "C" __global__ void k(half h, float* o) {}'),
        ("struct nv_bfloat16 { double v; };", "__global__ void k(nv_bfloat16 h, float* o) {}"),
        ("template <class T> struct complex { T re, im, w; };", "__global__ void k(complex<float> h, float* o) {}"),
        ("namespace my { struct __half { int a, b, c; }; }", 'extern "C" __global__ void k(my::__half h, float* o) {}'),
    ],
)
def test_a_programs_own_type_named_like_cudas_is_its_own_struct(own: str, kernel: str) -> None:
    src = f'{own}\n{kernel}\nextern "C" __global__ void unrelated(float* o) {{}}\n'
    (h, o) = caijit.kernel(src, "k").params
    assert (h["kind"], o["kind"]) == ("struct", "pointer"), h
    assert h["type"] in kernel, h
    assert [p["type"] for p in caijit.kernel(src, "unrelated").params] == ["float*"]


def test_odd_builtin_types_are_opaque_values_of_their_size() -> None:
    src = (
        "__global__ void mul(unsigned __int128 x, __int128 y, long double d, char32_t c, unsigned long long* o) {}\n"
        'extern "C" __global__ void unrelated(float* o) {}\n'
    )
    got = [(p["type"], p["kind"], p["size"], p["name"]) for p in caijit.kernel(src, "mul", options=["-device-int128"]).params]
    assert got == [
        ("unsigned __int128", "struct", 16, "x"),
        ("__int128", "struct", 16, "y"),
        ("long double", "struct", 8, "d"),
        ("char32_t", "struct", 4, "c"),
        ("unsigned long long*", "pointer", 8, "o"),
    ]


def test_an_unreadable_kernel_is_unusable_alone_and_says_why(tmp_path: Path) -> None:
    src = 'extern "C" __global__ void by_ref(const float& a, float* y) {}\nextern "C" __global__ void fine(float* y, int n) {}\n'
    assert [p["type"] for p in caijit.kernel(src, "fine").params] == ["float*", "int"]
    with pytest.raises(caijit.ArgumentError, match="reference") as e:
        caijit.kernel(src, "by_ref").params
    assert "`by_ref`" in str(e.value) and e.value.index == 0, str(e.value)
    # The CLI lists the usable kernels and says why the other is not.
    f = tmp_path / "u.cu"
    f.write_text(src)
    out = subprocess.run([sys.executable, "-m", "caijit", "compile", str(f), "--arch", "sm_90", "--json"], capture_output=True, text=True, check=True)
    assert {k["name"] for k in json.loads(out.stdout)} == {"fine"}
    assert "by_ref" in out.stderr and "reference" in out.stderr, out.stderr


def test_deeply_nested_template_arguments_are_read() -> None:
    t = "int"
    for _ in range(40):
        t = f"W<{t}>"
    src = (
        "template <class T> struct W { T v; };\ntemplate <class T> __global__ void k(T t, int* o) {}\n"
        f'template __global__ void k<{t}>({t}, int*);\nextern "C" __global__ void unrelated(float* o) {{}}\n'
    )
    assert [p["type"] for p in caijit.kernel(src, "unrelated").params] == ["float*"]
    (w, o) = caijit.kernel(src, f"k<{t}>").params
    assert (w["kind"], w["size"], o["type"]) == ("struct", 4, "int*"), w


@pytest.mark.parametrize("attrs", ["__launch_bounds__(256)", "[[deprecated]]", "__launch_bounds__(64, 2) [[deprecated]] __noinline__"])
def test_attributes_before_global_hide_neither_extern_c_nor_template(attrs: str) -> None:
    src = f'extern "C" {attrs} __global__ void k(float* o, int n) {{}}'
    assert [(p["type"], p["name"]) for p in caijit.kernel(src, "k").params] == [("float*", "o"), ("int", "n")]
    ((name, extern_c, tparams, types, _),) = _native.declarations(f"template <typename T> {attrs} __global__ void t(T* o, int n) {{}}")
    assert (name, extern_c, tparams, types) == ("t", False, ["T"], ["T*", "int"])


def test_a_pointer_to_an_array_is_a_pointer_to_its_elements() -> None:
    src = "__global__ void k(float (*rows)[4], const double (*)[4][2], int n) {}"
    ps = caijit.kernel(src).compile(arch="sm_90")[0]["params"]
    assert [(p["type"], p["kind"], p["size"], p["offset"], p["name"]) for p in ps] == [
        ("float*", "pointer", 8, 0, "rows"),
        ("const double*", "pointer", 8, 8, None),
        ("int", "scalar", 4, 16, "n"),
    ]
