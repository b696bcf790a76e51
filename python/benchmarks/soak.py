"""Soak: 1,000,000 launches; host RSS and device memory before and after (growth must be
bounded). Run on a GPU machine: python python/benchmarks/soak.py"""

from __future__ import annotations

import resource
import time

import numpy as np

import caijit

N = 1_000_000


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    k = caijit.kernel('extern "C" __global__ void inc(const float* a, float* b, int n) { int i = threadIdx.x; if (i < n) b[i] += a[i]; }')
    a, b = caijit.to_device(np.ones(128, np.float32)), caijit.zeros(128)
    own, other = caijit.Stream(), caijit.Stream()
    c = caijit.zeros(128, stream=other)  # a foreign producer stream: every launch orders against it
    launcher = k[1, 128, own]
    for _ in range(10_000):
        launcher(a, b, 128)
    own.synchronize()
    free0, rss0, t0 = _free(), rss_mib(), time.perf_counter()
    for i in range(N):
        launcher(a, c if i % 2 else b, 128)
    own.synchronize()
    other.synchronize()
    dt = time.perf_counter() - t0
    free1, rss1 = _free(), rss_mib()
    s = caijit.stats()
    print(f"\n## Soak: {N:,} launches in {dt:.1f} s ({dt / N * 1e6:.2f} µs each)")
    print(f"host RSS: {rss0:.1f} MiB → {rss1:.1f} MiB ({rss1 - rss0:+.1f} MiB)")
    print(f"device free memory: {free0 / 2**20:.0f} MiB → {free1 / 2**20:.0f} MiB ({(free1 - free0) / 2**20:+.0f} MiB)")
    print(f"events created: {s['events_created']}, waits: {s['waits']}, host syncs: {s['host_syncs']}")
    assert abs(rss1 - rss0) < 64, "host memory grew"
    assert abs(free1 - free0) < 64 * 2**20, "device memory grew"
    assert (b.copy_to_host() == 10_000 + N // 2).all()


def _free() -> int:
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    return free.value


if __name__ == "__main__":
    main()
