"""Finding a bad kernel (docs/debugging.md): the ring of recent launches named by sticky
faults, launch-blocking mode with the Python call site, -lineinfo builds, and
caijit.profile(). A faulting kernel ruins its CUDA context, so those tests run in a
subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from typing import Any, Callable

import pytest

import caijit
from caijit import _native
from conftest import gpu_unavailable_reason


def run_subprocess(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter with this one's environment plus `env`."""
    full = dict(os.environ)
    full.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300, env=full)


def _line_of(code: str, marker: str) -> int:
    """The line of `code` (dedented, as run) that holds `marker`."""
    return next(i for i, l in enumerate(textwrap.dedent(code).splitlines(), 1) if marker in l)


# A kernel that writes far outside any allocation (an illegal address), and one that is
# fine; both templates, so the ring must name the instance.
FAULTING = r"""
template <typename T>
__global__ void good(T* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = T(1); }
template <typename T>
__global__ void bad(T* y, int n) { y[(1ll << 40) + threadIdx.x] = T(2); }
"""


# ---------------------------------------------------------------------------------------
# Without a GPU


def _turns_on_and_off(turn: Callable[[bool], bool], switch: str) -> None:
    """`turn(True)` turns `switch` on and says it was off; `turn(False)` turns it off."""
    assert _native._testing._switch(switch) is False
    assert turn(True) is False
    try:
        assert _native._testing._switch(switch) is True
        assert turn(True) is True
    finally:
        turn(False)
    assert _native._testing._switch(switch) is False


def test_switches_turn_on_and_off_and_say_what_they_were() -> None:
    _turns_on_and_off(caijit.debug, "blocking")
    assert caijit.nvtx(False) is False
    with pytest.raises(caijit.ArgumentError, match="unknown switch"):
        _native._testing._switch("everything")


def test_launch_blocking_is_read_from_the_environment() -> None:
    r = run_subprocess("import caijit; from caijit import _native; print(_native._testing._switch('blocking'))", CAIJIT_LAUNCH_BLOCKING="1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"
    r = run_subprocess("import caijit; from caijit import _native; print(_native._testing._switch('blocking'))", CAIJIT_LAUNCH_BLOCKING="0")
    assert r.stdout.strip() == "False", r.stderr


def test_lineinfo_compiles_with_the_option_and_is_cached_apart(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "lineinfo_k.cu")
    with open(path, "w") as f:
        f.write('extern "C" __global__ void li(float* y) { y[threadIdx.x] = 1.f; }\n')
    plain = caijit.kernel(path).compile(arch="sm_90")[0]
    lined = caijit.kernel(path, lineinfo=True).compile(arch="sm_90")[0]
    assert "-lineinfo" in lined["nvrtc_options"], lined["nvrtc_options"]
    assert "-lineinfo" not in plain["nvrtc_options"], plain["nvrtc_options"]
    # A separate cache entry: compiling the line-info build did not answer from the plain one.
    assert lined["cache"] != "memory" or plain["cache"] == "memory"
    again = caijit.kernel(path, lineinfo=True).compile(arch="sm_90")[0]
    assert again["cache"] in ("memory", "disk"), again["cache"]
    assert "-lineinfo" in caijit.module(path, lineinfo=True).kernel("li").compile(arch="sm_90")[0]["nvrtc_options"]


def test_lineinfo_is_read_from_the_environment(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "env_k.cu")
    with open(path, "w") as f:
        f.write('extern "C" __global__ void li(float* y) { y[threadIdx.x] = 1.f; }\n')
    code = f"import caijit; print(caijit.kernel({path!r}).compile(arch='sm_90')[0]['nvrtc_options'])"
    on = run_subprocess(code, CAIJIT_LINEINFO="1")
    assert on.returncode == 0, on.stderr
    assert "-lineinfo" in on.stdout
    off = run_subprocess(code, CAIJIT_LINEINFO="0")
    assert off.returncode == 0, off.stderr
    assert "-lineinfo" not in off.stdout
    # An explicit lineinfo=False wins over the environment.
    explicit = run_subprocess(code.replace(f"kernel({path!r})", f"kernel({path!r}, lineinfo=False)"), CAIJIT_LINEINFO="1")
    assert "-lineinfo" not in explicit.stdout, explicit.stderr


def test_an_empty_profile_has_a_header_and_no_rows(capsys: pytest.CaptureFixture[str]) -> None:
    with caijit.profile() as p:
        with pytest.raises(caijit.ArgumentError, match="already active"):
            with caijit.profile():
                pass
    assert p.rows == []
    text = p.table()
    assert "launches" in text and text in capsys.readouterr().out
    assert json.loads(p.to_json()) == []
    assert _native._testing._switch("profile") is False
    with caijit.profile() as q:  # a new profile can start once the last one ended
        pass
    assert q.rows == []


@pytest.fixture(scope="module")
def nvtx_recorder(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The test NVTX tool (tests/data/nvtx_recorder.c), built with the C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the NVTX test tool")
    src = os.path.join(os.path.dirname(__file__), "data", "nvtx_recorder.c")
    lib = str(tmp_path_factory.mktemp("nvtx") / "libnvtx_recorder.so")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", lib, src], check=True)
    return lib


def test_nvtx_ranges_reach_the_tool_through_the_injection_interface(nvtx_recorder: str, tmp_path: os.PathLike[str]) -> None:
    log = os.path.join(tmp_path, "nvtx.log")
    code = """
        import caijit
        caijit.kernel('extern "C" __global__ void nvtx_probe(float* y) { y[0] = 1.f; }').compile(arch="sm_90")
        """
    r = run_subprocess(code, NVTX_INJECTION64_PATH=nvtx_recorder, NVTX_TEST_LOG=log, CAIJIT_NVTX="1")
    assert r.returncode == 0, r.stderr
    lines = open(log).read().splitlines()
    assert lines[0] == "attached 16", lines
    pushes = [l for l in lines if l.startswith("push ")]
    assert pushes and all(l.startswith("push caijit compile") for l in pushes), lines
    assert "nvtx_probe" in " ".join(pushes) or "kernel.cu" in " ".join(pushes), lines
    assert lines.count("pop") == len(pushes), lines
    # Off: the tool is never even loaded.
    os.remove(log)
    r = run_subprocess(code, NVTX_INJECTION64_PATH=nvtx_recorder, NVTX_TEST_LOG=log, CAIJIT_NVTX="0")
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(log)


def test_an_nvtx_tool_that_cannot_be_loaded_is_a_warning(tmp_path: os.PathLike[str]) -> None:
    missing = os.path.join(tmp_path, "no-such-tool.so")
    code = """
        import warnings, caijit
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            caijit.nvtx(True)
        print([str(x.message) for x in w])
        """
    r = run_subprocess(code, NVTX_INJECTION64_PATH=missing)
    assert r.returncode == 0, r.stderr
    assert "could not be attached" in r.stdout and "no-such-tool.so" in r.stdout, r.stdout
    r = run_subprocess(code)
    assert r.stdout.strip() == "[]", r.stdout


BOUNDS = r"""
#include <caijit/array.cuh>
template <typename T>
__global__ void row(caijit::Array<T, 1> x, long long at) { if (threadIdx.x == 0) x(at) = T(5); }
template <typename T>
__global__ void grid2(caijit::Array<const T, 2> x, caijit::Array<T, 1> out, long long r, long long c) {
    if (threadIdx.x == 0) out(0) = x(r, c);
}
template <typename T>
__global__ void flat(caijit::Array<T, 2> x, long long i) { if (threadIdx.x == 0) x[i] = T(1); }
"""


def test_the_bounds_checked_header_compiles_for_every_accessor() -> None:
    for name in ("row<float>", "grid2<double>", "flat<int>"):
        for defines in ({}, {"CAIJIT_BOUNDS_CHECK": "1"}):
            info = caijit.kernel(BOUNDS, name, defines=defines).compile(arch="sm_90")[0]
            assert info["name_expression"] == name


def test_debug_turns_on_launch_blocking_and_bounds_checks() -> None:
    try:
        assert caijit.debug(True) is False
        assert _native._testing._switch("blocking") and _native._testing._switch("bounds")
    finally:
        caijit.debug(False)
    assert not _native._testing._switch("blocking") and not _native._testing._switch("bounds")
    r = run_subprocess("import caijit; from caijit import _native; print(_native._testing._switch('blocking'), _native._testing._switch('bounds'))", CAIJIT_DEBUG="1")
    assert r.stdout.strip() == "True True", r.stdout + r.stderr


def test_recent_launches_is_a_list_of_records() -> None:
    launches = caijit.recent_launches()
    assert isinstance(launches, list)
    for r in launches:
        assert {"kernel", "grid", "block", "arguments", "text", "site"} <= r.keys()


def test_launch_sites_turn_on_and_off_and_are_read_from_the_environment() -> None:
    _turns_on_and_off(caijit.launch_sites, "sites")
    r = run_subprocess("import caijit; from caijit import _native; print(_native._testing._switch('sites'))", CAIJIT_LAUNCH_SITES="1")
    assert r.stdout.strip() == "True", r.stdout + r.stderr


STUB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "count_launch", "stub_cuda.c")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the stand-in driver")
@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="the stand-in driver replaces a missing one: with a GPU, the GPU tests above read the ring")
def test_the_ring_keeps_each_launch_and_its_site_without_a_gpu(tmp_path: Any) -> None:
    """Under the stand-in driver of the launch-cost count (every call succeeds, no GPU), the
    ring holds each launch as it was made, and, with launch sites on, its file:line."""
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(tmp_path / "libcuda.so.1"), STUB], check=True)
    (tmp_path / "libcuda.so").symlink_to("libcuda.so.1")
    src = 'extern "C" __global__ void ring3(const float* a, float* c, int n, double x) {}'
    _native.compile_program(src, "sm_90")  # into this run's disk cache, where the launches find it
    code = f"""
        import caijit
        k = caijit.kernel({src!r})
        a = caijit.zeros(12, "float32")
        def launch():
            k[2, 32](a, a, 7, 0.5)  # FIRST
        launch()
        k[1, 64](a, a, -3, 2.0)  # SECOND
        for r in caijit.recent_launches():
            print(r["kernel"], r["grid"], r["arguments"][2:], r["site"], "|", r["text"])
        """
    env = dict(LD_LIBRARY_PATH=f"{tmp_path}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    first, second = _line_of(code, "FIRST"), _line_of(code, "SECOND")
    r = run_subprocess(code, CAIJIT_LAUNCH_SITES="1", **env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    if sys.version_info < (3, 11):
        # Python 3.10 has no PyFrame_GetLasti: the ring keeps no sites there (docs/debugging.md).
        assert lines[0].startswith("ring3 (1, 1, 1) ['-3', '2.0'] None | #"), lines
        assert lines[1].startswith("ring3 (2, 1, 1) ['7', '0.5'] None | #"), lines
        return
    assert lines[0].startswith(f"ring3 (1, 1, 1) ['-3', '2.0'] <string>:{second} | #"), lines
    assert lines[1].startswith(f"ring3 (2, 1, 1) ['7', '0.5'] <string>:{first} | #"), lines
    assert "ring3 grid (1, 1, 1) block (64, 1, 1) on device 0 stream 0x1 with (float32[12] at 0x" in lines[0], lines
    assert lines[0].endswith(f", -3, 2.0) from <string>:{second}"), lines
    r = run_subprocess(code, **env)  # sites off: none kept
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith("ring3 (1, 1, 1) ['-3', '2.0'] None | #"), r.stdout


# ---------------------------------------------------------------------------------------
# On a GPU


@pytest.mark.gpu
def test_a_sticky_fault_names_the_faulting_kernel_from_the_ring() -> None:
    r = run_subprocess(
        f"""
        import caijit
        src = {FAULTING!r}
        good, bad = caijit.kernel(src, "good"), caijit.kernel(src, "bad")
        y = caijit.zeros(64, "float32")
        good[1, 64](y, 64)          # warm up: compiled, loaded, launched
        y.copy_to_host()
        bad[1, 32](y, 64)           # faults on the device; the launch itself succeeds
        try:
            good[1, 64](y, 64)      # may already see the fault, or not
            caijit.zeros(8, "int32").copy_to_host()   # an unrelated call reports it
        except caijit.LaunchError as e:
            print("code", e.code_name)
            print("first", e.recent_launches[0]["kernel"])
            print("kernels", [l["kernel"] for l in e.recent_launches])
            print("message", str(e).replace(chr(10), " | "))
        """
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "code CUDA_ERROR_ILLEGAL_ADDRESS" in out or "code CUDA_ERROR_LAUNCH_FAILED" in out, out
    assert "'bad<float>'" in out, out
    assert "bad<float> grid (1, 1, 1) block (32, 1, 1)" in out, out
    assert "float32[64]" in out, out


# Launches from two lines, the faulting one inside a function; then an unrelated call that
# reports the fault. Prints each recent launch's kernel and site, and the message.
SITED = f"""
    import caijit
    src = {FAULTING!r}
    good, bad = caijit.kernel(src, "good"), caijit.kernel(src, "bad")
    y = caijit.zeros(64, "float32")
    good[1, 64](y, 64)  # GOOD LAUNCH
    y.copy_to_host()
    def launch_bad():
        bad[1, 32](y, 64)  # BAD LAUNCH
    launch_bad()
    try:
        for _ in range(100):
            caijit.zeros(8, "int32").copy_to_host()
        print("no error")
    except caijit.LaunchError as e:
        print("sites", [(l["kernel"], l["site"]) for l in e.recent_launches])
        print("message", str(e).replace(chr(10), " | "))
    """


@pytest.mark.gpu
def test_with_launch_sites_on_the_ring_names_each_launch_call_site() -> None:
    good_line, bad_line = _line_of(SITED, "GOOD LAUNCH"), _line_of(SITED, "BAD LAUNCH")
    for on in (dict(CAIJIT_LAUNCH_SITES="1"), {}):
        r = run_subprocess(SITED, **on)
        assert r.returncode == 0, r.stderr
        out = r.stdout
        if on:
            assert f"('bad<float>', '<string>:{bad_line}')" in out, out
            assert f"('good<float>', '<string>:{good_line}')" in out, out
            assert f"bad<float> grid (1, 1, 1) block (32, 1, 1) on device" in out and f"from <string>:{bad_line}" in out, out
        else:  # off: no site is kept
            assert "('bad<float>', None)" in out and "from <string>" not in out, out
    # caijit.launch_sites(True) does the same without the environment.
    r = run_subprocess(SITED.replace("import caijit", "import caijit; caijit.launch_sites(True)"))
    assert f"('bad<float>', '<string>:{bad_line}')" in r.stdout, r.stdout + r.stderr


@pytest.mark.gpu
def test_a_fault_in_a_jax_custom_call_is_named_by_the_next_caijit_call() -> None:
    code = f"""
        import os, time, caijit
        try:
            import jax, jax.numpy as jnp
            jax.devices("gpu")
        except Exception as e:
            print("NO JAX GPU", e); raise SystemExit(0)
        import caijit.jax as cjax
        bad = caijit.kernel({FAULTING!r}, "bad")
        f = jax.jit(cjax.kernel_call(bad, lambda y: y, grid=1, block=32, input_output_aliases={{0: 0}}, n=64))
        out = f(jnp.zeros(64, jnp.float32))  # enqueued by XLA's handler; faults on the device
        try:
            for _ in range(200):  # until the fault reaches the context (XLA runs asynchronously)
                caijit.zeros(8, "int32").copy_to_host()
                time.sleep(0.01)
            print("no error", flush=True)
        except caijit.LaunchError as e:
            print("kernels", [l["kernel"] for l in e.recent_launches])
            print("message", str(e).replace(chr(10), " | "), flush=True)
        os._exit(0)  # the context is dead: skip JAX's teardown
        """
    r = run_subprocess(code)
    if "NO JAX GPU" in r.stdout:
        if os.environ.get("CAIJIT_REQUIRE_GPU") == "1":
            pytest.fail(f"CAIJIT_REQUIRE_GPU=1 but JAX sees no GPU: {r.stdout}")
        pytest.skip("JAX has no CUDA backend here")
    assert r.returncode == 0, r.stderr
    assert "kernels [" in r.stdout and "'bad<float>'" in r.stdout, r.stdout + r.stderr
    assert "bad<float> grid (1, 1, 1) block (32, 1, 1)" in r.stdout and "float32[64]" in r.stdout and ", 64)" in r.stdout, r.stdout


@pytest.mark.gpu
def test_launch_blocking_raises_at_the_faulting_launch_with_its_call_site() -> None:
    code = f"""
        import caijit
        src = {FAULTING!r}
        good, bad = caijit.kernel(src, "good"), caijit.kernel(src, "bad")
        y = caijit.zeros(64, "float32")
        good[1, 64](y, 64)
        try:
            bad[2, 32](y, 64)  # THE LAUNCH
            print("no error at the launch")
        except caijit.LaunchError as e:
            print("kernel", e.kernel)
            print("grid", e.grid, "block", e.block)
            print("arguments", e.arguments)
            print("site", e.site)
        """
    r = run_subprocess(code, CAIJIT_LAUNCH_BLOCKING="1")
    assert r.returncode == 0, r.stderr
    line = next(i for i, l in enumerate(textwrap.dedent(code).splitlines(), 1) if "THE LAUNCH" in l)
    assert "kernel bad<float>" in r.stdout, r.stdout
    assert "grid (2, 1, 1) block (32, 1, 1)" in r.stdout, r.stdout
    assert "float32[64]" in r.stdout and "64" in r.stdout, r.stdout
    assert f"site <string>:{line}" in r.stdout, r.stdout
    # caijit.debug(True) does the same without the environment.
    r = run_subprocess(code.replace("import caijit", "import caijit; caijit.debug(True)"))
    assert "kernel bad<float>" in r.stdout, r.stdout + r.stderr


@pytest.mark.gpu
def test_launch_blocking_leaves_a_launch_captured_into_a_graph_alone() -> None:
    # Waiting on a stream being captured is illegal (and its kernel has not run): blocking
    # mode must skip the wait for a captured launch, and the graph must compute what the
    # launches would have.
    code = """
        import caijit, torch
        k = caijit.kernel("__global__ void twice(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += 2 * x[i]; }")
        n = 4096
        x = torch.randn(n, device="cuda")
        y = torch.zeros(n, device="cuda")
        k[16, 256](x, y, n)  # load the module outside the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        with torch.cuda.graph(g, stream=s):
            k[16, 256, s](x, y, n)
        y.zero_()
        g.replay(); g.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(y, 4 * x)
        print("OK")
        """
    r = run_subprocess(code, CAIJIT_LAUNCH_BLOCKING="1")
    if r.returncode != 0 and "No module named 'torch'" in r.stderr:
        pytest.skip("PyTorch is not installed")
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


@pytest.mark.gpu
def test_nvtx_sees_one_range_per_launch_named_by_the_instance(nvtx_recorder: str, tmp_path: os.PathLike[str]) -> None:
    log = os.path.join(tmp_path, "nvtx.log")
    code = f"""
        import caijit
        src = {FAULTING!r}
        good = caijit.kernel(src, "good")
        y = caijit.zeros(64, "float32")
        good[1, 64](y, 64)          # warm up (compile and load: not counted below)
        y.copy_to_host()
        open({log!r}, "a").write("-- launches\\n")
        for _ in range(5):
            good[1, 64](y, 64)
        y64 = caijit.zeros(8, "float64")
        good[1, 8](y64, 8)
        y.copy_to_host()
        """
    r = run_subprocess(code, NVTX_INJECTION64_PATH=nvtx_recorder, NVTX_TEST_LOG=log, CAIJIT_NVTX="1")
    assert r.returncode == 0, r.stderr
    lines = open(log).read().splitlines()
    after = lines[lines.index("-- launches") + 1 :]
    launches = [l for l in after if l.startswith("push ") and "caijit compile" not in l]
    assert launches.count("push good<float>") == 5, after
    assert launches.count("push good<double>") == 1, after
    assert len(launches) == 6, after


@pytest.mark.gpu
def test_bounds_checks_name_the_argument_index_and_shape() -> None:
    import numpy

    x1 = caijit.to_device(numpy.arange(10, dtype="float32"))
    x2 = caijit.to_device(numpy.arange(12, dtype="float64").reshape(3, 4))
    out = caijit.zeros(1, "float64")
    row, grid2, flat = caijit.kernel(BOUNDS, "row"), caijit.kernel(BOUNDS, "grid2"), caijit.kernel(BOUNDS, "flat")
    row[1, 32](x1, 3)  # warm up: the plain instances
    grid2[1, 32](x2, out, 2, 3)
    assert float(numpy.asarray(out.copy_to_host())[0]) == 11.0
    rev = _reversed_rows(x2)
    caijit.debug(True)
    try:
        row[1, 32](x1, 9)  # in bounds: no error
        with pytest.raises(caijit.ArgumentError) as e:
            row[1, 32](x1, 10)
        assert e.value.index == 0 and e.value.argument == "x", str(e.value)
        assert "index (10)" in str(e.value) and "shape (10)" in str(e.value), str(e.value)
        with pytest.raises(caijit.ArgumentError) as e:
            grid2[1, 32](x2, out, 1, 4)
        assert e.value.index == 0 and "index (1, 4)" in str(e.value) and "shape (3, 4)" in str(e.value), str(e.value)
        assert "dimension 1" in str(e.value)
        # A negative-stride view: the shape is checked, whatever the strides.
        with pytest.raises(caijit.ArgumentError) as e:
            grid2[1, 32](rev, out, -1, 0)
        assert e.value.index == 0 and "index (-1, 0)" in str(e.value) and "shape (3, 4)" in str(e.value), str(e.value)
        grid2[1, 32](rev, out, 0, 1)  # row 0 of the reversed view is row 2
        assert float(numpy.asarray(out.copy_to_host())[0]) == 9.0
        with pytest.raises(caijit.ArgumentError, match=r"flat index 12 is out of bounds for shape \(3, 4\)"):
            flat[1, 32](caijit.to_device(numpy.zeros((3, 4), "int32")), 12)
        # The record was cleared: the next in-bounds launch is fine.
        row[1, 32](x1, 0)
    finally:
        caijit.debug(False)
    row[1, 32](x1, 2)  # debug off: the plain instance again


class _Reversed:
    """A view of a 2-D float64 caijit array with its rows reversed (a negative byte
    stride), through a CAI dict; it keeps the array alive."""

    def __init__(self, a: Any) -> None:
        cai = a.__cuda_array_interface__
        rows, cols = cai["shape"]
        self.owner = a
        self.__cuda_array_interface__ = {
            "shape": (rows, cols),
            "typestr": cai["typestr"],
            "data": (cai["data"][0] + (rows - 1) * cols * 8, False),
            "strides": (-cols * 8, 8),
            "version": 3,
            "stream": cai.get("stream"),
        }


def _reversed_rows(a: Any) -> _Reversed:
    return _Reversed(a)


SPIN = r"""
extern "C" __global__ void spin(unsigned long long ns, unsigned long long* took) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
    took[0] = t - t0;
}
"""


@pytest.mark.gpu
def test_profile_times_a_known_duration_spin_kernel_within_5_percent() -> None:
    import numpy

    k = caijit.kernel(SPIN)
    took = caijit.zeros(1, "uint64")
    k[1, 1](2_000_000, took)  # warm up (compile, load, first launch)
    took.copy_to_host()
    runs = 5
    with caijit.profile() as p:
        for _ in range(runs):
            k[1, 1](2_000_000, took)
    (row,) = [r for r in p.rows if r["kernel"] == "spin"]
    assert row["launches"] == runs
    spun_ms = int(numpy.asarray(took.copy_to_host())[0]) / 1e6
    mean_ms = row["gpu_ms"] / runs
    assert abs(mean_ms - spun_ms) / spun_ms < 0.05, (mean_ms, spun_ms)
    assert row["host_ms"] > 0
    assert "spin" in p.table()


@pytest.mark.gpu
def test_profile_sees_launches_inside_ops_and_on_other_streams() -> None:
    import numpy

    x = caijit.to_device(numpy.random.default_rng(1).standard_normal(1000).astype("float32"))
    caijit.ops.scale(x, 2.0)  # warm up
    s = caijit.Stream()
    with caijit.profile() as p:
        caijit.ops.scale(x, 2.0)
        caijit.ops.scale(x, 3.0, stream=s)
    launches = sum(r["launches"] for r in p.rows)
    assert launches == 2, p.rows
    assert all(r["gpu_ms"] > 0 for r in p.rows)


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("compute-sanitizer") is None, reason="compute-sanitizer is not on PATH")
def test_compute_sanitizer_names_the_file_and_line_of_a_lineinfo_build(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "oob_kernel.cu")
    with open(path, "w") as f:
        f.write('extern "C" __global__ void oob(float* y, int n) {\n    int i = threadIdx.x;\n    y[i + n] = 1.f;  // out of bounds\n}\n')
    code = f"""
        import caijit
        k = caijit.kernel({path!r}, lineinfo=True)
        y = caijit.zeros(32, "float32")
        k[1, 32](y, 32)
        try:
            y.copy_to_host()
        except caijit.LaunchError as e:
            print("fault", e.code_name)
        """
    r = subprocess.run(
        ["compute-sanitizer", "--tool", "memcheck", sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = r.stdout + r.stderr
    assert "Invalid __global__ write" in report, report[-4000:]
    assert f"{path}:3" in report or "oob_kernel.cu:3" in report, report[-4000:]
