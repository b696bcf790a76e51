"""Compilation from Python without a GPU: kernels, modules, errors."""

from __future__ import annotations

import os
from typing import Any, Optional

import numpy as np
import pytest

import caijit
from caijit import _native

SRC = r"""
template <typename T> __global__ void axpy(T a, const T* x, T* y, int n) { int i = threadIdx.x; if (i < n) y[i] += a * x[i]; }
extern "C" __global__ void scale(float* y, float a) { y[threadIdx.x] *= a; }
"""


def test_kernel_needs_a_name_when_ambiguous() -> None:
    with pytest.raises(caijit.ArgumentError, match="declares 2 kernels"):
        caijit.kernel(SRC)
    # A name the source cannot have is an error at once, listing the kernels it has; where a
    # macro may make it, NVRTC judges it at the first compilation, with the same list.
    with pytest.raises(caijit.ArgumentError, match=r'no kernel named "nope" in the program \(it has: axpy, scale\)'):
        caijit.kernel(SRC, "nope")
    with pytest.raises(caijit.ArgumentError, match=r'no kernel named "nope" in the program \(it has: axpy, scale\)'):
        caijit.kernel("#define UNUSED 1\n" + SRC, "nope").compile(arch="sm_90")


def test_specialize_and_compile_for_an_arch() -> None:
    k = caijit.kernel(SRC, "axpy").specialize("double")
    (info,) = [i for i in k.compile(arch="sm_90") if i["name_expression"] == "axpy<double>"]
    assert [p["type"] for p in info["params"]] == ["double", "const double*", "double*", "int"]


def test_module_lists_kernels() -> None:
    m = caijit.module(SRC)
    assert m.names == ["axpy", "scale"]
    assert m["scale"].name == "scale"
    infos = m["scale"].compile(arch="sm_80")
    assert any(i["lowered_name"] == "scale" for i in infos)


def test_compile_error_has_the_log() -> None:
    k = caijit.kernel('extern "C" __global__ void k(int* y) {\n y[0] = missing;\n}')
    with pytest.raises(caijit.CompileError) as e:
        k.compile(arch="sm_90")
    assert "missing" in e.value.log and "(2)" in e.value.log


def test_templates_need_specialization_for_attributes() -> None:
    with pytest.raises(caijit.ArgumentError, match="specialize"):
        caijit.kernel(SRC, "axpy").num_regs


def test_launcher_configuration_errors() -> None:
    k = caijit.kernel(SRC, "scale")
    with pytest.raises(caijit.ArgumentError, match="grid must be"):
        k[(1, 2, 3, 4), 32]
    with pytest.raises(caijit.ArgumentError, match="kernel\\[grid, block\\]"):
        k[1]
    with pytest.raises(caijit.ArgumentError, match="cannot use a"):
        k[1, 32, "not a stream"]


def test_processes_sharing_one_disk_cache(tmp_path: Any) -> None:
    """Four processes compile the same new program into one cache directory at once; the
    directory ends with one good entry that a fifth process loads."""
    import subprocess
    import sys
    import uuid

    src = f'// {uuid.uuid4()}\nextern "C" __global__ void k(int* y) {{ y[0] = 5; }}'
    code = (
        "import sys, caijit\n"
        "print(caijit.kernel(sys.argv[1]).compile(arch='sm_90')[0]['cache'])\n"
    )
    env = {**os.environ, "CAIJIT_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", code, src], env=env, stdout=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=300)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    entries = [f for f in os.listdir(tmp_path) if f.endswith(".cubin-entry")]
    assert len(entries) == 1 and not [f for f in os.listdir(tmp_path) if f.startswith(".tmp-")]
    again = subprocess.run([sys.executable, "-c", code, src], env=env, capture_output=True, text=True, timeout=300)
    assert again.stdout.strip() == "disk", again.stderr
    assert oct(os.stat(os.path.join(tmp_path, entries[0])).st_mode & 0o777) == "0o600"


def test_processes_compiling_at_once_share_one_cache_entry(tmp_path: "os.PathLike[str]") -> None:
    """Eight processes compile the same program into one cache at once: each gets the right
    kernel, and the cache ends with one valid entry (written atomically, no leftovers)."""
    import subprocess
    import sys
    import uuid

    cache = os.path.join(tmp_path, "cache")
    src = f'// {uuid.uuid4()}\nextern "C" __global__ void k(double* y, long long n) {{ y[0] = n; }}\n'
    code = (
        "import caijit, json, sys\n"
        f"(k,) = caijit.kernel({src!r}).compile(arch='sm_90')\n"
        "print(json.dumps([k['cache'], [(p['type'], p['size'], p['offset']) for p in k['params']]]))\n"
    )
    env = {**os.environ, "CAIJIT_CACHE_DIR": cache}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(8)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    import json

    results = [json.loads(o) for o, _ in outs]
    layout = [["double*", 8, 0], ["long long", 8, 8]]
    assert all(r[1] == layout for r in results), results
    assert os.listdir(cache) and all(n.endswith(".cubin-entry") for n in os.listdir(cache)), os.listdir(cache)
    assert len(os.listdir(cache)) == 1
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert json.loads(again.stdout) == ["disk", layout], again.stderr


def test_a_second_compile_in_one_process_is_a_memory_hit() -> None:
    import uuid

    k = caijit.kernel(f'// {uuid.uuid4()}\nextern "C" __global__ void k(float* y) {{ y[0] = 1.f; }}')
    (first,) = k.compile(arch="sm_90")
    (second,) = k.compile(arch="sm_90")
    assert first["cache"] in ("compiled", "disk") and second["cache"] == "memory"


def test_an_option_nvrtc_refuses_is_named() -> None:
    k = caijit.kernel('extern "C" __global__ void k(float* y) { y[0] = 1.f; }', options=["-lineinfo", "--bogus-flag"])
    with pytest.raises(caijit.CompileError, match='does not accept the option "--bogus-flag"') as e:
        k.compile(arch="sm_90")
    assert "-lineinfo" not in str(e.value)


@pytest.mark.parametrize(
    "value, instance",
    [(np.float32(2.0), "k<float>"), (np.int32(2), "k<int>"), (np.float64(2.0), "k<double>"), (2.0, None)],
)
def test_numpy_scalars_deduce_their_own_type(value: Any, instance: Optional[str]) -> None:
    """numpy.float64 subclasses float: it is still a NumPy scalar, whose dtype decides the
    instance (a plain Python float decides nothing). Deduced without a GPU through the JAX
    binding's preparation, which reads scalars as a launch does."""
    k = caijit.kernel("template <typename S>\n__global__ void k(float* y, S a) { y[threadIdx.x] = (float)a; }\n")
    args = (k, [], [("float32", [4])], [], [("a", value)], [1, 1, 1], [32, 1, 1], 0, [])
    if instance is None:
        with pytest.raises(caijit.ArgumentError, match="typed scalar"):
            _native.xla_prepare(*args)
        return
    _, name = _native.xla_prepare(*args)
    assert name.replace(" ", "") == instance


# A trusted compilation gives NVRTC no way to read a byte the key did not cover: caijit
# applies include directories and pre-includes itself and hands every header in memory.

_KERNEL_T = 'extern "C" __global__ void k(T* x, T a) { x[0] = a; }\n'


def test_a_trusted_compile_gives_nvrtc_no_search_path(tmp_path: Any) -> None:
    dirs = [tmp_path / n for n in "abcdef"]
    for i, d in enumerate(dirs):
        d.mkdir()
        (d / f"h{i}.h").write_text(f"#define H{i} {i}\n")
    (tmp_path / "pre.h").write_text("typedef float T;\n")
    a, b, c, d, e, f = (str(x) for x in dirs)
    options = ["-I", a, f"-I{b}", f"-I={c}", f"--include-path={d}", "--include-path", e, "-include", str(tmp_path / "pre.h")]
    src = "".join(f"#include <h{i}.h>\n" for i in range(6)) + "static_assert(H0 + H1 + H2 + H3 + H4 + H5 == 15, \"\");\n" + _KERNEL_T
    (info,) = caijit.kernel(src, "k", options=options, include_dirs=[f]).compile(arch="sm_90")
    assert info["untrusted"] is None
    opts = info["nvrtc_options"]
    assert not any(o.startswith(("-I", "--include-path")) for o in opts), opts
    assert "-no-source-include" in opts, opts
    assert [p["type"] for p in info["params"]] == ["float*", "float"]


@pytest.mark.parametrize(
    "spelling",
    [[" -I{d}"], ["-I{d} "], ["\t-I", " {d} "], [" --include-path={d}\t"], [" -include={d}/t.h"], ["--pre-include", "{d}/t.h "]],
)
def test_options_are_read_as_nvrtc_reads_them(tmp_path: Any, spelling: list[str]) -> None:
    """NVRTC strips the blanks at both ends of every option string: caijit reads each one
    the same way, so a header found through a blank-padded option is in the key (an edit
    recompiles) and NVRTC is still given no search path."""
    d = tmp_path / "inc"
    d.mkdir()
    (d / "t.h").write_text("typedef int T;\n")
    options = [o.format(d=d) for o in spelling]
    src = ("" if any("include=" in o or "pre-include" in o for o in options) else "#include <t.h>\n") + _KERNEL_T

    def types() -> tuple[list[str], Any]:
        (info,) = caijit.kernel(src, "k", options=options).compile(arch="sm_90")
        assert not any(o.lstrip().startswith(("-I", "--include-path")) for o in info["nvrtc_options"]), info["nvrtc_options"]
        return [p["type"] for p in info["params"]], info["untrusted"]

    assert types() == (["int*", "int"], None)
    (d / "t.h").write_text("typedef double T;\n")
    assert types() == (["double*", "double"], None)


def test_a_blank_after_the_equals_sign_is_part_of_the_directory(tmp_path: Any, monkeypatch: Any) -> None:
    """`-I= inc` names the directory ` inc` (NVRTC trims blanks after `-I`, not after `=`)."""
    (tmp_path / "inc").mkdir()
    (tmp_path / " inc").mkdir()
    (tmp_path / "inc" / "t.h").write_text("typedef int T;\n")
    (tmp_path / " inc" / "t.h").write_text("typedef double T;\n")
    monkeypatch.chdir(tmp_path)
    (info,) = caijit.kernel("#include <t.h>\n" + _KERNEL_T, "k", options=["-I= inc"]).compile(arch="sm_90")
    assert [p["type"] for p in info["params"]] == ["double*", "double"]


def test_a_pre_cxx11_program_is_compiled_untrusted(tmp_path: Any) -> None:
    """Under -std=c++03 `R"(` opens no raw string: caijit's scanner (C++11) would misread the
    program, so it is compiled untrusted (NVRTC's own search; never cached)."""
    (tmp_path / "a.h").write_text("#define V 1111.0f\n")
    src = f'#if 0\nconst char* s = R"(\n#endif\n#include "{tmp_path}/a.h"\n#if 0\n)";\n#endif\nextern "C" __global__ void k(float* o) {{ o[0] = V; }}\n'
    before = caijit.stats()["untrusted_compiles"]
    caijit.kernel(src, "k", options=["-std=c++03"]).compile(arch="sm_90")  # (no C++11 probe: no kernel is described)
    assert caijit.stats()["untrusted_compiles"] == before + 1


def _subprocess_compile(cwd: Any, env: dict[str, str], code: str) -> Any:
    import json
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_pre_include_found_in_the_current_directory_is_in_the_key(tmp_path: Any) -> None:
    """NVRTC opens a relative pre-include in the current directory (also with
    `-no-source-include`): caijit looks there too, hashes it and hands it in memory."""
    env = {**os.environ, "CAIJIT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("CAIJIT_CACHE", None)
    code = (
        "import caijit, json\n"
        f"k = caijit.kernel({_KERNEL_T!r}, 'k', options=['-no-source-include', '-include', 'cfg.h']).compile(arch='sm_90')[0]\n"
        "print(json.dumps([k['cache'], k['params'][1]['type'], k['untrusted']]))\n"
    )
    (tmp_path / "cfg.h").write_text("typedef int T;\n")
    assert _subprocess_compile(tmp_path, env, code) == ["compiled", "int", None]
    assert _subprocess_compile(tmp_path, env, code) == ["disk", "int", None]
    (tmp_path / "cfg.h").write_text("typedef double T;\n")
    assert _subprocess_compile(tmp_path, env, code) == ["compiled", "double", None]


def _nvrtc_with_another_build_id(dest: Any) -> str:
    """A copy of the NVRTC in use (library and builtins) whose GNU build ID differs by one
    byte: the same version, another build. Returns the copied library's path."""
    import re
    import shutil

    path = _native.nvrtc_info()[0]
    lib = os.path.realpath(path)
    build = _native.nvrtc_build()
    ident = re.search(re.escape(os.path.basename(path)) + r" build-id ([0-9a-f]+)", build)
    assert ident, build
    for name in os.listdir(os.path.dirname(lib)):
        if name.startswith("libnvrtc") and ".alt." not in name:
            shutil.copy(os.path.join(os.path.dirname(lib), name), dest / name)
    copy = dest / os.path.basename(path)
    data = bytearray(copy.read_bytes())
    old = bytes.fromhex(ident.group(1))
    at = data.find(old)
    # (NVRTC 13 has its note near the start, NVRTC 12 past 100 MiB: one place either way.)
    assert at >= 0 and data.find(old, at + 1) < 0, "the build ID is not in the file exactly once"
    data[at] ^= 0xFF
    copy.write_bytes(bytes(data))
    return str(copy)


def test_the_key_names_the_exact_nvrtc_build(tmp_path: Any) -> None:
    """A binary made by one NVRTC build is not served to another of the same major.minor
    (13.0.48 and 13.0.88 make different code)."""
    (tmp_path / "other").mkdir()
    other = _nvrtc_with_another_build_id(tmp_path / "other")
    env = {**os.environ, "CAIJIT_CACHE_DIR": str(tmp_path / "cache"), "CAIJIT_CUDA_INCLUDE": _native.nvrtc_info()[2][0]}
    for k in ("CAIJIT_CACHE", "CAIJIT_NVRTC_PATH"):
        env.pop(k, None)
    code = (
        "import caijit, json\nfrom caijit import _native\n"
        "k = caijit.kernel('extern \"C\" __global__ void k(float* o, float a) { o[0] = sinf(a); }').compile(arch='sm_90')[0]\n"
        "print(json.dumps([k['cache'], _native.nvrtc_info()[1:3], _native.nvrtc_build()]))\n"
    )
    first = _subprocess_compile(tmp_path, env, code)
    again = _subprocess_compile(tmp_path, env, code)
    # The copy is also first on the loader's path under NVRTC's sonames: where the machine
    # has an NVRTC of its own (a CUDA toolkit in the loader's cache), cudarc's lookup by
    # soname must find the copy, not that one.
    lib_dir = os.path.dirname(other)
    for alias in ("libnvrtc.so", f"libnvrtc.so.{_native.nvrtc_info()[1][0]}"):
        if alias != os.path.basename(other):
            if os.path.lexists(os.path.join(lib_dir, alias)):
                os.remove(os.path.join(lib_dir, alias))  # an unaltered copy of the same build
            os.symlink(os.path.basename(other), os.path.join(lib_dir, alias))
    loader_path = os.pathsep.join(p for p in (lib_dir, os.environ.get("LD_LIBRARY_PATH", "")) if p)
    theirs = _subprocess_compile(tmp_path, {**env, "CAIJIT_NVRTC_PATH": other, "LD_LIBRARY_PATH": loader_path}, code)
    assert (first[0], again[0]) == ("compiled", "disk")
    assert theirs[1] == first[1], "the same version and headers: only the build differs"
    assert theirs[2] != first[2]
    assert theirs[0] == "compiled", "another NVRTC build was served this one's binary"


@pytest.mark.gpu
def test_an_edited_header_of_an_untrusted_program_launches_its_new_code(tmp_path: Any) -> None:
    """A computed include makes a program untrusted: after its header changes, a new kernel
    compiles and loads the new binary (not the module loaded for the old one)."""
    (tmp_path / "cfg.h").write_text("#define VALUE 3\n")
    src = tmp_path / "k.cu"
    src.write_text('#define CFG "cfg.h"\n#include CFG\nextern "C" __global__ void k(int* o) { o[0] = VALUE; }\n')
    out = caijit.zeros((1,), np.int32)
    caijit.kernel(str(src))[1, 1](out)
    assert out.copy_to_host()[0] == 3
    (tmp_path / "cfg.h").write_text("#define VALUE 7\n")
    caijit.kernel(str(src))[1, 1](out)
    assert out.copy_to_host()[0] == 7


def test_a_file_program_finds_its_headers_beside_it_trusted_or_not(tmp_path: Any) -> None:
    """`#include "x.h"` of `sub/k.cu` is `sub/x.h`, whether caijit hands NVRTC every header
    (trusted) or NVRTC searches itself (untrusted: a computed include), and whatever `x.h`
    the current directory holds."""
    import json
    import subprocess
    import sys

    (tmp_path / "sub").mkdir()
    (tmp_path / "x.h").write_text("#define PARAM_T int\n")
    (tmp_path / "sub" / "x.h").write_text("#define PARAM_T double\n")
    (tmp_path / "sub" / "y.h").write_text("\n")
    body = '#include "x.h"\nextern "C" __global__ void k(PARAM_T a, float* o) { *o = a; }\n'
    (tmp_path / "sub" / "trusted.cu").write_text(body)
    (tmp_path / "sub" / "untrusted.cu").write_text('#define CFG "y.h"\n#include CFG\n' + body)
    code = (
        "import caijit, json, sys; i = caijit.kernel(sys.argv[1]).compile('sm_90')[0];"
        " print(json.dumps([i['params'][0]['type'], i['untrusted'] is not None]))"
    )
    env = {**os.environ, "CAIJIT_CACHE_DIR": str(tmp_path / "cache")}
    for path, untrusted in (("sub/trusted.cu", False), ("sub/untrusted.cu", True)):
        r = subprocess.run([sys.executable, "-c", code, path], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        assert json.loads(r.stdout) == ["double", untrusted], (path, r.stdout)


def test_text_that_is_not_valid_unicode_is_an_argument_error() -> None:
    for kwargs in ({"source": "__global__ void k() {}\ud800"}, {"source": "__global__ void k() {}", "options": ["-DX=\ud800"]}):
        with pytest.raises(caijit.ArgumentError, match="not valid Unicode"):
            caijit.kernel(**kwargs)  # type: ignore[arg-type]
