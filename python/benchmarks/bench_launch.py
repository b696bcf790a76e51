"""Launch overhead: an empty kernel with 3 array arguments + 1 int, caijit beside its peers
measured in the same run (MEASURED.md's method).

host µs      = median over 100 batches of 200 launches, timed without synchronising
sustained µs = 20,000 launches, then one synchronisation, divided by 20,000

Run on a GPU machine: python python/benchmarks/bench_launch.py
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from typing import Callable

import numpy as np

if not hasattr(np, "row_stack"):  # Numba 0.68 with NumPy 2.5 (benchmark setup, not library)
    np.row_stack = np.vstack  # type: ignore[attr-defined]

import caijit

N = 1 << 10
SRC = 'extern "C" __global__ void empty3(const float* a, const float* b, float* c, int n) {}'


def has(mod: str) -> bool:
    return importlib.util.find_spec(mod) is not None


def measure(launch: Callable[[], None], sync: Callable[[], None]) -> tuple[float, float]:
    for _ in range(2000):
        launch()
    sync()
    batches = []
    for _ in range(100):
        t0 = time.perf_counter()
        for _ in range(200):
            launch()
        batches.append((time.perf_counter() - t0) / 200)
        sync()
    t0 = time.perf_counter()
    for _ in range(20_000):
        launch()
    sync()
    sustained = (time.perf_counter() - t0) / 20_000
    return statistics.median(batches) * 1e6, sustained * 1e6


def main() -> None:
    rows: list[tuple[str, float, float]] = []
    k = caijit.kernel(SRC)
    launcher = k[1, 128]
    dev_sync = caijit.Stream  # noqa: F841 - keeps the import visible in profiles

    a, b, c = (caijit.zeros(N) for _ in range(3))
    legacy = caijit.Stream  # the arrays live on the legacy stream

    def sync_all() -> None:
        c.copy_to_host()

    rows.append(("caijit, caijit arrays", *measure(lambda: launcher(a, b, c, N), sync_all)))

    if has("cupy"):
        import cupy

        ca, cb, cc = (cupy.zeros(N, cupy.float32) for _ in range(3))
        rows.append(("caijit, CuPy arrays", *measure(lambda: launcher(ca, cb, cc, N), cupy.cuda.Device().synchronize)))
        raw = cupy.RawKernel(SRC, "empty3")
        n32 = np.int32(N)
        rows.append(("CuPy RawKernel, CuPy arrays", *measure(lambda: raw((1,), (128,), (ca, cb, cc, n32)), cupy.cuda.Device().synchronize)))

    if has("torch"):
        import torch

        ta, tb, tc = (torch.zeros(N, device="cuda") for _ in range(3))
        rows.append(("caijit, PyTorch tensors", *measure(lambda: launcher(ta, tb, tc, N), torch.cuda.synchronize)))
        rows.append(("PyTorch torch.add(a, b, out=c)", *measure(lambda: torch.add(ta, tb, out=tc), torch.cuda.synchronize)))

    if has("numba"):
        from numba import cuda

        @cuda.jit
        def empty3(x, y, z, n):  # type: ignore[no-untyped-def]
            pass

        na, nb, nc = (cuda.device_array(N, np.float32) for _ in range(3))
        empty3[1, 128](na, nb, nc, N)
        rows.append(("caijit, Numba arrays", *measure(lambda: launcher(na, nb, nc, N), cuda.synchronize)))
        rows.append(("Numba @cuda.jit, Numba arrays", *measure(lambda: empty3[1, 128](na, nb, nc, N), cuda.synchronize)))

    s = caijit.stats()
    print("\n## Launch overhead (empty kernel, 3 arrays + 1 int), µs per launch")
    print("| path | host µs | sustained µs |")
    print("|---|---|---|")
    for name, host, sus in rows:
        print(f"| {name} | {host:.2f} | {sus:.2f} |")
    print(f"\ncaijit counters: launches={s['launches']} host_syncs={s['host_syncs']} waits={s['waits']} events_created={s['events_created']}")


if __name__ == "__main__":
    main()
