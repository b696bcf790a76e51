"""Faults give clear errors, never crashes: no NVRTC, an unusable cache directory, a kernel
that traps (a sticky device error), out-of-memory."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

import caijit

PKG = os.path.dirname(os.path.dirname(os.path.abspath(caijit.__file__)))


def run_isolated(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter without site-packages (so pip's NVRTC is unseen)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CUDA_HOME", "CUDA_PATH", "PYTHONPATH")}
    clean.update(env)
    prelude = f"import sys; sys.path.insert(0, {PKG!r})\n"
    return subprocess.run([sys.executable, "-S", "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True, env=clean, timeout=300)


def run_subprocess(code: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter with this one's environment (a sticky device error
    must not poison the test process)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(
    ctypes.util.find_library("nvrtc") is not None or os.path.isdir("/usr/local/cuda"),
    reason="this machine has a system NVRTC, so it cannot be missing",
)
def test_missing_nvrtc_is_cuda_not_available() -> None:
    r = run_isolated(
        """
        try:
            import caijit
        except ImportError as e:  # numpy lives in site-packages; caijit itself must not need it
            print("import failed", e); raise
        try:
            caijit.kernel('extern "C" __global__ void k() {}').compile(arch="sm_90")
        except caijit.CudaNotAvailable as e:
            print("CudaNotAvailable:", e)
        """,
        CAIJIT_NVRTC_PATH="/nonexistent/libnvrtc.so.13",
    )
    assert r.returncode == 0, r.stderr
    # An explicit CAIJIT_NVRTC_PATH is honoured or an error naming it, never replaced silently.
    assert "CudaNotAvailable: " in r.stdout, r.stdout
    assert "CAIJIT_NVRTC_PATH=/nonexistent/libnvrtc.so.13: no such file" in r.stdout, r.stdout


def test_unusable_cache_directory_is_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIJIT_CACHE_DIR", "/etc/passwd/caijit")  # under a file: never creatable
    before = caijit.stats()["disk_cache_errors"]
    k = caijit.kernel(f'// {uuid.uuid4()}\nextern "C" __global__ void k(int* y) {{ y[0] = 1; }}')
    (info,) = k.compile(arch="sm_90")
    assert info["cache"] == "compiled"
    assert caijit.stats()["disk_cache_errors"] == before + 1


@pytest.mark.gpu
def test_trapping_kernel_gives_errors_not_crashes() -> None:
    r = run_subprocess(
        """
        import caijit
        k = caijit.kernel('extern "C" __global__ void boom(int* y) { if (threadIdx.x == 0) __trap(); y[0] = 1; }')
        y = caijit.zeros(4, "int32")
        s = caijit.Stream()
        k[1, 32, s](y)
        try:
            s.synchronize()
        except caijit.LaunchError as e:
            print("sync:", e)
        try:
            k[1, 32, s](y)
            s.synchronize()
        except caijit.LaunchError as e:
            print("after:", e)
        """
    )
    assert r.returncode == 0, r.stderr
    assert "sync: cuStreamSynchronize failed" in r.stdout, r.stdout
    assert "after:" in r.stdout, "the sticky error is reported by the next call"


@pytest.mark.gpu
def test_out_of_memory_is_a_launch_error() -> None:
    with pytest.raises(caijit.LaunchError, match="allocating .* bytes"):
        caijit.empty(1 << 48, "uint8")
