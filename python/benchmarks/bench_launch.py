"""Launch overhead: an empty kernel with 3 array arguments + 1 int, caijit beside its peers
measured in the same run, batch by batch.

host µs      = median over 100 batches of 200 launches, timed without synchronising; the
               paths take turns batch by batch (in a new seeded random order each batch), so
               that every path is timed in the same moments of the host's drifting speed
sustained µs = 20,000 launches, then one synchronisation, divided by 20,000 (path after path)
Each figure is the median over rounds; the targets are per-round ratios.

The floor is a C++ loop of cuLaunchKernel in a library this process loads, timed batch by
batch between the Python paths (on the same primary context they use); the same loop as a
program of its own (CAIJIT_LAUNCH_FLOOR_EXE) adds a cross-check row. On a GPU machine:
    nvcc -O2 -shared -Xcompiler -fPIC -DLAUNCH_FLOOR_LIBRARY -o /tmp/liblaunch_floor.so \
        python/benchmarks/launch_floor.cu -lcuda
    nvcc -O2 -o /tmp/launch_floor python/benchmarks/launch_floor.cu -lcuda
    CAIJIT_LAUNCH_FLOOR=/tmp/liblaunch_floor.so CAIJIT_LAUNCH_FLOOR_EXE=/tmp/launch_floor \
        python python/benchmarks/bench_launch.py
CAIJIT_BENCH_QUICK=1 measures caijit's paths and the closest peers only (before/after
comparisons of two builds); CAIJIT_BENCH_ROUNDS sets the number of rounds (default 3).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import random
import statistics
import subprocess
import time
from typing import Callable, NamedTuple

import numpy as np

if not hasattr(np, "row_stack"):  # Numba 0.68 with NumPy 2.5 (benchmark setup, not library)
    np.row_stack = np.vstack  # type: ignore[attr-defined]

import caijit

N = 1 << 10
# The empty kernels every launch benchmark launches (bench_launch, probe_launch, count_launch).
EMPTY0 = 'extern "C" __global__ void empty0() {}'
EMPTY1 = 'extern "C" __global__ void empty1(int n) {}'
SRC = 'extern "C" __global__ void empty3(const float* a, const float* b, float* c, int n) {}'
SRC8 = 'extern "C" __global__ void empty8(const float* a, const float* b, const float* c, const float* d, const float* e, const float* f, const float* g, float* h) {}'


FLOOR = "C++ cuLaunchKernel loop (the floor)"
FLOOR8 = "C++ cuLaunchKernel loop, 8 arrays"
FLOOR_EXE = "C++ cuLaunchKernel loop, a process of its own (cross-check)"
CAIJIT = "caijit, caijit arrays"
CAIJIT_CUPY = "caijit, CuPy arrays"
RAWKERNEL = "CuPy RawKernel, CuPy arrays"
CAIJIT_TORCH = "caijit, PyTorch tensors"
CAIJIT_TORCH8 = "caijit, 8 PyTorch tensors"
CAIJIT_NUMBA = "caijit, Numba arrays"
NUMBA_CUPY = "Numba @cuda.jit, CuPy arrays"
NUMBA_TORCH = "Numba @cuda.jit, PyTorch tensors"

#: (label, numerator row, denominator row, target): the issue's targets, as ratios of host
#: µs per round.
TARGETS = [
    ("caijit with its own arrays / C floor", CAIJIT, FLOOR, "<= 1.15"),
    ("caijit with PyTorch tensors / C floor", CAIJIT_TORCH, FLOOR, "<= 1.25"),
    ("caijit with CuPy arrays / CuPy RawKernel", CAIJIT_CUPY, RAWKERNEL, "<= 1.0"),
    ("caijit with Numba arrays / C floor", CAIJIT_NUMBA, FLOOR, "<= 1.6"),
    ("caijit with 8 PyTorch tensors / 8-argument C loop", CAIJIT_TORCH8, FLOOR8, "<= 1.3"),
    ("Numba @cuda.jit / caijit, CuPy arrays", NUMBA_CUPY, CAIJIT_CUPY, ">= 20"),
    ("Numba @cuda.jit / caijit, PyTorch tensors", NUMBA_TORCH, CAIJIT_TORCH, ">= 20"),
]


def has(mod: str) -> bool:
    try:
        return importlib.util.find_spec(mod) is not None
    except ImportError:  # a submodule of a missing or broken package (cuda.core without cuda)
        return False


BATCHES, PER_BATCH, SUSTAINED = 100, 200, 20_000


class Path(NamedTuple):
    """A launch path: `batch(n)` launches n times and returns the host seconds it took
    (without synchronising); `sync` waits for the device."""

    name: str
    batch: Callable[[int], float]
    sync: Callable[[], None]


def python_path(name: str, launch: Callable[[], None], sync: Callable[[], None]) -> Path:
    def batch(n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            launch()
        return time.perf_counter() - t0

    return Path(name, batch, sync)


def floor_paths() -> list[Path]:
    """The C floor (3 arrays + 1 int, and 8 arrays) from the library CAIJIT_LAUNCH_FLOOR names;
    none without it."""
    lib_path = os.environ.get("CAIJIT_LAUNCH_FLOOR")
    if not lib_path or not os.path.exists(lib_path):
        return []
    lib = ctypes.CDLL(lib_path)
    lib.caijit_floor_batch.restype = ctypes.c_double
    lib.caijit_floor_batch.argtypes = [ctypes.c_int, ctypes.c_int]

    def batch(eight: int) -> Callable[[int], float]:
        def run(n: int) -> float:
            seconds = float(lib.caijit_floor_batch(eight, n))
            if seconds < 0:
                raise RuntimeError("the C floor's cuLaunchKernel failed")
            return seconds

        return run

    return [Path(FLOOR, batch(0), lib.caijit_floor_sync), Path(FLOOR8, batch(1), lib.caijit_floor_sync)]


def measure_round(paths: list[Path], seed: int = 0, sustained: bool = True) -> dict[str, tuple[float, float]]:
    """Host µs (median of the batches) and sustained µs per launch of every path (NaN
    without `sustained`), the paths taking turns batch by batch in a new random order each
    batch (no path always follows the same neighbour). Sustained µs are measured path
    after path, in a random order too."""
    for p in paths:
        p.batch(2000)
        p.sync()
    samples: dict[str, list[float]] = {p.name: [] for p in paths}
    order = random.Random(seed)
    for _ in range(BATCHES):
        for p in order.sample(paths, len(paths)):
            samples[p.name].append(p.batch(PER_BATCH) / PER_BATCH)
            p.sync()
    out = {p.name: (statistics.median(samples[p.name]) * 1e6, float("nan")) for p in paths}
    for p in order.sample(paths, len(paths)) if sustained else ():
        t0 = time.perf_counter()
        p.batch(SUSTAINED)
        p.sync()
        out[p.name] = (out[p.name][0], (time.perf_counter() - t0) / SUSTAINED * 1e6)
    return out


ROUNDS = int(os.environ.get("CAIJIT_BENCH_ROUNDS", "3"))


def main() -> None:
    # The paths take turns batch by batch, so that the drift of the host's speed (10-40 %
    # within a run on the H200 machines, over seconds) falls on all paths alike; the table
    # gives medians over rounds, the targets the per-round ratios.
    paths: list[Path] = floor_paths()  # the nvcc-built C loop (gpu-run.sh builds it)
    k = caijit.kernel(SRC)
    launcher = k[1, 128]
    launcher8 = caijit.kernel(SRC8)[1, 128]
    a, b, c = (caijit.zeros(N) for _ in range(3))

    def sync_all() -> None:
        c.copy_to_host()

    paths.append(python_path(CAIJIT, lambda: launcher(a, b, c, N), sync_all))

    if has("cupy"):
        import cupy

        ca, cb, cc = (cupy.zeros(N, cupy.float32) for _ in range(3))
        raw = cupy.RawKernel(SRC, "empty3")
        n32 = np.int32(N)
        paths.append(python_path(CAIJIT_CUPY, lambda: launcher(ca, cb, cc, N), cupy.cuda.Device().synchronize))
        paths.append(python_path(RAWKERNEL, lambda: raw((1,), (128,), (ca, cb, cc, n32)), cupy.cuda.Device().synchronize))

    if has("torch"):
        import torch

        ta, tb, tc = (torch.zeros(N, device="cuda") for _ in range(3))
        t8 = [torch.zeros(N, device="cuda") for _ in range(8)]
        paths.append(python_path(CAIJIT_TORCH, lambda: launcher(ta, tb, tc, N), torch.cuda.synchronize))
        paths.append(python_path(CAIJIT_TORCH8, lambda: launcher8(*t8), torch.cuda.synchronize))
        paths.append(python_path("PyTorch torch.add(a, b, out=c)", lambda: torch.add(ta, tb, out=tc), torch.cuda.synchronize))

    # CAIJIT_BENCH_QUICK=1: caijit's paths and the two closest peers only (for before/after
    # comparisons of two builds, run alternately).
    quick = os.environ.get("CAIJIT_BENCH_QUICK") == "1"
    if has("numba") and not quick:
        from numba import cuda

        @cuda.jit
        def empty3(x, y, z, n):  # type: ignore[no-untyped-def]
            pass

        na, nb, nc = (cuda.device_array(N, np.float32) for _ in range(3))
        empty3[1, 128](na, nb, nc, N)
        paths.append(python_path(CAIJIT_NUMBA, lambda: launcher(na, nb, nc, N), cuda.synchronize))
        paths.append(python_path("Numba @cuda.jit, Numba arrays", lambda: empty3[1, 128](na, nb, nc, N), cuda.synchronize))
        if has("cupy"):
            paths.append(python_path(NUMBA_CUPY, lambda: empty3[1, 128](ca, cb, cc, N), cuda.synchronize))
        if has("torch"):
            paths.append(python_path(NUMBA_TORCH, lambda: empty3[1, 128](ta, tb, tc, N), cuda.synchronize))

    if has("cuda.core") and has("cupy") and not quick:
        try:
            from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch  # type: ignore[import-not-found]

            dev = Device()
            dev.set_current()
            cstream = dev.create_stream()
            kern = Program(SRC, code_type="c++", options=ProgramOptions(arch=f"sm_{dev.arch}")).compile("cubin").get_kernel("empty3")
            cfg = LaunchConfig(grid=1, block=128)
            pa, pb, pc = ca.data.ptr, cb.data.ptr, cc.data.ptr
            n32c = np.int32(N)
            paths.append(python_path("cuda.core launch, raw pointers", lambda: launch(cstream, cfg, kern, pa, pb, pc, n32c), cstream.sync))
        except Exception as e:  # noqa: BLE001 - a peer we cannot run is reported, not fatal
            print(f"cuda.core peer skipped: {e}")

    rounds = [measure_round(paths, seed) for seed in range(ROUNDS)]
    # A cross-check of the in-process floor: the same C loop as a program of its own (its
    # own clean context), once per round, not interleaved.
    exe = os.environ.get("CAIJIT_LAUNCH_FLOOR_EXE")
    if exe and os.path.exists(exe):
        for r in rounds:
            host, sus = map(float, subprocess.run([exe], capture_output=True, text=True, check=True).stdout.split())
            r[FLOOR_EXE] = (host, sus)

    rows = [(name, statistics.median(r[name][0] for r in rounds), statistics.median(r[name][1] for r in rounds)) for name in rounds[0]]
    s = caijit.stats()
    floor_host = rows[0][1] if rows[0][0] == FLOOR else float("nan")
    print(f"\n## Launch overhead (empty kernel, 3 arrays + 1 int), µs per launch, median of {ROUNDS} rounds of interleaved batches")
    print("| path | host µs | sustained µs | host vs C floor | per-round host vs floor |")
    print("|---|---|---|---|---|")
    for name, host, sus in rows:
        print(f"| {name} | {host:.2f} | {sus:.2f} | {host / floor_host:.2f}x | {spread(rounds, name, FLOOR)} |")
    print("\nTargets, host µs ratios per round (median [min-max]):")
    for label, num, den, target in TARGETS:
        if num in rounds[0] and den in rounds[0]:
            print(f"- {label}: {spread(rounds, num, den)} (target {target})")
        else:
            print(f"- {label}: not measured ({num if num not in rounds[0] else den} missing)")
    chart(rows, os.environ.get("CAIJIT_BENCH_CHART", "launch_overhead.png"))
    print(f"\ncaijit counters: launches={s['launches']} host_syncs={s['host_syncs']} waits={s['waits']} events_created={s['events_created']}")


def spread(rounds: list[dict[str, tuple[float, float]]], num: str, den: str) -> str:
    """The ratio of two rows' host µs, median over rounds with its range: `1.12x [1.08-1.19]`."""
    if num not in rounds[0] or den not in rounds[0]:
        return "-"
    q = sorted(r[num][0] / r[den][0] for r in rounds)
    return f"{statistics.median(q):.2f}x [{q[0]:.2f}-{q[-1]:.2f}]"


def chart(rows: list[tuple[str, float, float]], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib is not installed: no chart)")
        return
    names = [r[0] for r in rows][::-1]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1))
    ax.barh(names, [r[1] for r in rows][::-1], color=["#d62728" if n.startswith("caijit") else "#7f7f7f" for n in names])
    ax.set_xlabel("host µs per launch (lower is better)")
    ax.set_title("Launch overhead: empty kernel, 3 arrays + 1 int (H200)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"chart: {path}")


if __name__ == "__main__":
    main()
