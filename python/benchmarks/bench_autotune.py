"""`caijit.autotune` against an exhaustive sweep of the same space, and what tuning costs once.

The kernel: a shared-memory block sum of 2^24 float32 with ITEMS elements per thread (a
template parameter) and the block size as the launch's; 5 block sizes x 4 ITEMS = 20
candidates. The sweep times every candidate itself (CUDA events around 200 launches,
median of 5), independently of the tuner; the tuner's choice is then looked up in the
sweep. Needs a GPU and PyTorch (for the events):
    python python/benchmarks/bench_autotune.py
"""

from __future__ import annotations

import statistics
import time

import torch

import caijit

SRC = r"""
template <int ITEMS>
__global__ void block_sum(const float* x, float* out, long long n) {
    __shared__ float s[1024];
    float acc = 0.f;
    long long base = (long long)blockIdx.x * blockDim.x * ITEMS + threadIdx.x;
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
        long long i = base + (long long)j * blockDim.x;
        if (i < n) acc += x[i];
    }
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, s[0]);
}
"""
N = 1 << 24
BLOCKS = (64, 128, 256, 512, 1024)
ITEMS = (1, 2, 4, 8)


def grid(block: int, items: int) -> int:
    return (N + block * items - 1) // (block * items)


def sweep_us(k: caijit.Kernel, x: torch.Tensor, out: torch.Tensor, block: int, items: int) -> float:
    inst = k.specialize(str(items))
    launch = inst[grid(block, items), block]
    for _ in range(10):
        launch(x, out, N)
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(200):
            launch(x, out, N)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / 200)
    return statistics.median(times)


def main() -> None:
    k = caijit.kernel(SRC, "block_sum")
    x = torch.rand(N, device="cuda")
    out = torch.zeros(1, device="cuda")
    configs = [caijit.Config(block=b, template=(i,)) for b in BLOCKS for i in ITEMS]
    tuned = caijit.autotune(k, configs, grid=lambda cfg, x, out, n: grid(cfg.block, cfg.template[0]))
    torch.cuda.synchronize()
    before = caijit.stats()["tune_launches"]
    t0 = time.perf_counter()
    r = tuned.result(x, out, N)
    torch.cuda.synchronize()
    tuning_ms = (time.perf_counter() - t0) * 1e3
    launches = caijit.stats()["tune_launches"] - before
    sweep = {(b, i): sweep_us(k, x, out, b, i) for b in BLOCKS for i in ITEMS}
    best = min(sweep, key=sweep.__getitem__)
    chosen = configs[r.best]
    picked = (chosen.block, chosen.template[0])
    print(f"{torch.cuda.get_device_name()}, block_sum of 2^24 float32, {len(configs)} candidates")
    print("| block | ITEMS | sweep µs | tuner median µs |")
    print("|---:|---:|---:|---:|")
    for (c, (b, i)) in zip(r.trials, sweep):
        mark = " (tuned)" if (b, i) == picked else (" (sweep best)" if (b, i) == best else "")
        print(f"| {b} | {i} | {sweep[(b, i)]:.2f}{mark} | {c.get('median_us', float('nan')):.2f} |")
    print()
    print(f"tuned: block={picked[0]} ITEMS={picked[1]}, {sweep[picked]:.2f} µs; sweep best: block={best[0]} ITEMS={best[1]}, "
          f"{sweep[best]:.2f} µs; tuned / best = {sweep[picked] / sweep[best]:.3f}")
    print(f"one-time tuning: {tuning_ms:.1f} ms, {launches} timed launches (warm-up included), compiles included")


if __name__ == "__main__":
    main()
