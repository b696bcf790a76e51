"""Compile cost: cold compile, disk-cache hit and memory-cache hit through caijit, beside
NVRTC alone (the same library, source and options, called through ctypes) in the same run.

Runs without a GPU: python python/benchmarks/bench_compile.py
"""

from __future__ import annotations

import ctypes
import os
import statistics
import tempfile
import time
import uuid

import caijit
from caijit import _native

SRC = r"""
template <typename T>
__global__ void axpy(T a, const T* __restrict__ x, T* __restrict__ y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = a * x[i] + y[i];
}
"""
ARCH = "sm_90"


def nvrtc_alone(lib: ctypes.CDLL, source: str, include_dirs: list[str]) -> float:
    prog = ctypes.c_void_p()
    t0 = time.perf_counter()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"kernel.cu", 0, None, None) == 0
    assert lib.nvrtcAddNameExpression(prog, b"axpy<float>") == 0
    opts = [f"-arch={ARCH}".encode(), b"-std=c++17", b"-DCAIJIT=1"] + [f"-I{d}".encode() for d in include_dirs]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    assert lib.nvrtcCompileProgram(prog, len(opts), arr) == 0
    size = ctypes.c_size_t()
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetCUBIN(prog, buf)
    lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetPTX(prog, ptx)
    lowered = ctypes.c_char_p()
    lib.nvrtcGetLoweredName(prog, b"axpy<float>", ctypes.byref(lowered))
    dt = time.perf_counter() - t0
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return dt


def main() -> None:
    path, _, include_dirs, _ = _native.nvrtc_info()
    lib = ctypes.CDLL(path)
    reps = 15
    with tempfile.TemporaryDirectory() as cache_dir:
        os.environ["CAIJIT_CACHE_DIR"] = cache_dir
        cold, alone, disk, mem = [], [], [], []
        for _ in range(reps):
            src = f"// {uuid.uuid4()}\n{SRC}"
            alone.append(nvrtc_alone(lib, src, include_dirs))
            t0 = time.perf_counter()
            _native.compile_program(src, ARCH, None, ["axpy<float>"])
            cold.append(time.perf_counter() - t0)
        # Disk hits: a fresh process has an empty memory cache; emulate by new sources that
        # are on disk but not in memory (compiled by a subprocess-equivalent: a second key).
        srcs = [f"// disk {uuid.uuid4()}\n{SRC}" for _ in range(reps)]
        import subprocess
        import sys

        code = (
            "import sys, caijit; from caijit import _native\n"
            "for s in sys.stdin.read().split('\\x00'):\n"
            f"    _native.compile_program(s, '{ARCH}', None, ['axpy<float>'])\n"
        )
        subprocess.run([sys.executable, "-c", code], input="\x00".join(srcs), text=True, check=True, env=os.environ)
        before = caijit.stats()["disk_cache_hits"]
        for s in srcs:
            t0 = time.perf_counter()
            _native.compile_program(s, ARCH, None, ["axpy<float>"])
            disk.append(time.perf_counter() - t0)
        assert caijit.stats()["disk_cache_hits"] - before == reps
        for _ in range(200):
            t0 = time.perf_counter()
            _native.compile_program(srcs[0], ARCH, None, ["axpy<float>"])
            mem.append(time.perf_counter() - t0)

    med = statistics.median
    print("\n## Compile (axpy<float>, sm_90), medians")
    print("| path | time | vs NVRTC alone |")
    print("|---|---|---|")
    print(f"| NVRTC alone (ctypes, same options) | {med(alone) * 1e3:.2f} ms | 1.00x |")
    print(f"| caijit cold compile | {med(cold) * 1e3:.2f} ms | {med(cold) / med(alone):.2f}x |")
    print(f"| caijit disk-cache hit | {med(disk) * 1e3:.3f} ms | {med(disk) / med(alone):.3f}x |")
    print(f"| caijit memory-cache hit | {med(mem) * 1e6:.1f} µs | {med(mem) / med(alone):.4f}x |")


if __name__ == "__main__":
    main()
