"""Shared fixtures. GPU tests skip without a device and fail with CAIJIT_REQUIRE_GPU=1."""

from __future__ import annotations

import importlib.util
import os
import tempfile
import threading
from typing import Any, Callable, Iterator

import numpy
import pytest

# Numba 0.68 imports numpy.row_stack, which NumPy 2.5 removed (test setup, not library).
if not hasattr(numpy, "row_stack"):
    numpy.row_stack = numpy.vstack  # type: ignore[attr-defined]

REQUIRE_GPU = os.environ.get("CAIJIT_REQUIRE_GPU") == "1"

# Kernels the JAX lowering and JAX op tests both launch.
#: A template over every dtype JAX has (half and bfloat16 included).
AXPY = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
template <typename T>
__global__ void axpy(T a, const T* x, const T* y, T* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}
"""

#: A kernel that writes its input (an input/output alias).
SCALE_IN_PLACE = r"""
extern "C" __global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"""

#: A kernel over a 2-D `caijit::Array`.
ROW_SUM = r"""
#include <caijit/array.cuh>
extern "C" __global__ void row_sum(caijit::Array<const float, 2> x, float* out) {
    long long r = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (r >= x.shape[0]) return;
    float s = 0.f;
    for (long long c = 0; c < x.shape[1]; ++c) s += x(r, c);
    out[r] = s;
}
"""


class Raising:
    """A producer whose `__cuda_array_interface__` property raises `exc`."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    @property
    def __cuda_array_interface__(self) -> dict[str, object]:
        raise self.exc


def has(module: str) -> bool:
    """Whether `module` can be imported (an optional peer: CuPy, PyTorch, Numba, JAX)."""
    return importlib.util.find_spec(module) is not None


def jax_missing() -> str | None:
    """Why JAX cannot be imported here (the caijit.jax tests skip with it), saying how to
    get it, or None."""
    import sys

    if has("jax"):
        return None
    if sys.version_info < (3, 11):
        return "caijit.jax needs JAX >= 0.10.2, which needs Python >= 3.11 (set-up installs none on Python 3.10)"
    return "JAX is not installed: pip install -r python/requirements-jax.txt (scripts/setup.sh installs a CPU jaxlib)"


def flatbuffers_missing(message: str) -> str:
    """The skip of a jax.export serialization that failed with ImportError ``message``."""
    return f"jax.export cannot serialize without flatbuffers: pip install -r python/requirements-jax.txt (scripts/setup.sh installs it); {message}"


def gpu_unavailable_reason() -> str | None:
    """One short line (the SKIPPED lines repeat it): why GPU tests cannot run, or None."""
    import caijit

    try:
        if caijit.device_count() == 0:
            return "no CUDA device (the driver reports none)"
    except caijit.CudaNotAvailable as e:
        # The whole message lists every library tried; its first clause says enough.
        first = str(e).split(" (tried", 1)[0].split(";", 1)[0].strip()
        return f"no CUDA device: {first[:100]}"
    return None


def nvrtc_missing() -> str | None:
    """Why NVRTC cannot be used here (tests that compile or bake skip with it), or None."""
    import caijit

    try:
        caijit._native.nvrtc_info()
    except caijit.CudaNotAvailable as e:
        return f"NVRTC is not installed: {str(e)[:80]}"
    return None


# Every compilation of the test run (in this process and in the subprocesses it starts,
# which inherit os.environ) uses a temporary disk cache, not the user's ~/.cache/caijit;
# a CAIJIT_CACHE_DIR set explicitly (scripts/gpu-run.sh) is kept. Set at import, before
# any test module imports caijit and compiles anything.
_CACHE_DIR = tempfile.TemporaryDirectory(prefix="caijit-test-cache-")
if "CAIJIT_CACHE_DIR" not in os.environ:
    os.environ["CAIJIT_CACHE_DIR"] = os.path.join(_CACHE_DIR.name, "cache")


class DLPackOnly:
    """An array that speaks only DLPack (forwarding to the array it wraps)."""

    def __init__(self, t: Any) -> None:
        self.t = t

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.t.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return self.t.__dlpack_device__()


def load_example(filename: str) -> Any:
    """The module of ``examples/<filename>``, imported (its ``main`` not run)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location(filename.removesuffix(".py"), os.path.join(root, "examples", filename))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session", autouse=True)
def temporary_cache_dir() -> Iterator[str]:
    """The test run's disk cache directory (removed after the run)."""
    yield os.environ["CAIJIT_CACHE_DIR"]
    _CACHE_DIR.cleanup()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any("gpu" in item.keywords for item in items):
        return
    reason = gpu_unavailable_reason()
    if reason is None:
        return
    for item in items:
        if "gpu" in item.keywords:
            if REQUIRE_GPU:
                item.add_marker(pytest.mark.xfail(reason=f"CAIJIT_REQUIRE_GPU=1 but {reason}", run=False, strict=True))
            else:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def in_threads() -> Callable[[Callable[[int], None], int], None]:
    """``run(work, n)``: ``work(i)`` for i in range(n), each in a thread of its own, all
    started before any is joined; fails with every exception the threads raised."""

    def run(work: Callable[[int], None], n: int) -> None:
        errors: list[BaseException] = []

        def guarded(i: int) -> None:
            try:
                work(i)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors

    return run


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Skipped tests counted by reason, one line a reason (not one line a test), before
    pytest's verdict line; left out where -rs (or -ra) lists each skip anyway."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped or "s" in getattr(terminalreporter, "reportchars", ""):
        return
    reasons: dict[str, int] = {}
    for report in skipped:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    terminalreporter.write_line(f"skipped {len(skipped)}, by reason:")
    for reason, n in sorted(reasons.items(), key=lambda r: (-r[1], r[0])):
        terminalreporter.write_line(f"  {n:>4}  {reason}")
