"""The command line: demo, info and compile work without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "caijit", *args], capture_output=True, text=True, timeout=300, env={**os.environ, **env})


def test_demo_runs_everywhere() -> None:
    r = run("demo")
    assert r.returncode == 0, r.stderr
    assert "parse_interface" in r.stdout and "compiled saxpy_strided for sm_90" in r.stdout
    assert ("no GPU" in r.stdout) or ("max |error|" in r.stdout)


def test_info() -> None:
    r = run("info")
    assert r.returncode == 0, r.stderr
    assert "NVRTC" in r.stdout and "disk cache" in r.stdout


def test_compile_prints_layouts() -> None:
    path = os.path.join(ROOT, "kernels", "ops", "elementwise.cu")
    r = run("compile", path, "--arch", "sm_80", "--instantiate", "axpy<double>", "--name", "axpy<double>", "--json")
    assert r.returncode == 0, r.stderr
    (k,) = json.loads(r.stdout)
    assert k["demangled"] == "void axpy<double>(double, double const*, double const*, double*, long long)"
    assert [p["offset"] for p in k["params"]] == [0, 8, 16, 24, 32]
    assert k["arch"] == "sm_80" and k["image"] == "cubin"


def test_compile_error_exit_code_and_log(tmp_path: "os.PathLike[str]") -> None:
    bad = os.path.join(tmp_path, "bad.cu")
    with open(bad, "w") as f:
        f.write('extern "C" __global__ void k(float* y) {\n  y[0] = nope;\n}\n')
    r = run("compile", bad)
    assert r.returncode == 1
    assert "bad.cu(2)" in r.stderr and "nope" in r.stderr


def test_cache_directory_trust(tmp_path: "os.PathLike[str]") -> None:
    """The disk cache is used only in a directory this user owns and others cannot write;
    `info` says which, and why not."""
    private = os.path.join(tmp_path, "private")
    r = run("info", CAIJIT_CACHE_DIR=private)
    assert r.returncode == 0, r.stderr
    assert f"disk cache: {private} (mode 700, 0 entries" in r.stdout
    assert oct(os.stat(private).st_mode & 0o777) == "0o700"
    shared = os.path.join(tmp_path, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    r = run("info", CAIJIT_CACHE_DIR=shared)
    assert f"disk cache: not used: {shared}: its mode 777 lets others write it" in r.stdout
    source = os.path.join(tmp_path, "k.cu")
    with open(source, "w") as f:
        f.write('extern "C" __global__ void k(float* y) { y[0] = 1.f; }\n')
    r = run("compile", source, CAIJIT_CACHE_DIR=shared)
    assert r.returncode == 0, r.stderr
    assert f"warning: not using the disk cache {shared}: its mode 777" in r.stderr  # and compiled anyway
    assert os.listdir(shared) == []
    assert run("info", CAIJIT_CACHE="0").stdout.count("disk cache: disabled") == 1


def test_cache_directory_must_be_absolute() -> None:
    for value in ("", "relative/cache"):
        r = run("info", CAIJIT_CACHE_DIR=value)
        assert r.returncode == 1, r.stdout
        assert "CAIJIT_CACHE_DIR must be an absolute path" in r.stderr, r.stderr
