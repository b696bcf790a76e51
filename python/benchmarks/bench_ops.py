"""Achieved bandwidth of the kernel library beside a device-to-device copy and PyTorch's
equivalent op, measured in the same run on the same tensors.

bandwidth = bytes that must move / kernel time: CUDA events around 4 back-to-back calls,
median of 25 such batches, inputs alternating between two sets. Arrays are 1 GiB each: far
past the 50 MiB L2. The GPU is held busy (a sleep kernel) while each batch is enqueued, so
the events time the kernels and not the host's first launch, which differs between caijit
(15-30 µs of Python per op) and PyTorch (5-14 µs) and moved the ratios by up to 1 %; host
cost per launch is bench_launch.py's subject.

Run on a GPU machine: python python/benchmarks/bench_ops.py
"""

from __future__ import annotations

import statistics
from typing import Callable

import torch

import caijit.ops as ops

GIB = 1 << 30
REPS = 25
BATCH = 4
SLEEP_CYCLES = 2_000_000  # ~1 ms at the H200's clock: longer than enqueueing a batch


def timed(fn: Callable[[int], None]) -> float:
    """Median kernel seconds per call of fn(i) (i alternates input sets): CUDA events around
    BATCH back-to-back calls, enqueued while a sleep kernel holds the GPU, so the start event
    fires with the whole batch queued behind it."""
    fn(0)
    fn(1)
    torch.cuda.synchronize()
    times = []
    for _ in range(REPS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(SLEEP_CYCLES)
        start.record()
        for i in range(BATCH):
            fn(i % 2)
        end.record()
        if start.query():
            raise RuntimeError("the sleep ended before the batch was enqueued: raise SLEEP_CYCLES")
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / BATCH)
    return statistics.median(times)


def main() -> None:
    n = GIB // 4  # float32 elements per 1 GiB array
    dev = "cuda"
    xs = [torch.randn(n, device=dev) for _ in range(2)]
    ys = [torch.randn(n, device=dev) for _ in range(2)]
    out = torch.empty(n, device=dev)
    rows, cols = 1 << 15, n >> 15  # (32768, 8192)

    copy_t = timed(lambda i: out.copy_(xs[i]))
    copy_bw = 2 * n * 4 / copy_t
    rows_out: list[tuple[str, float, float]] = []

    def add(name: str, nbytes: float, mine: Callable[[int], None], peer: Callable[[int], None]) -> None:
        rows_out.append((name, nbytes / timed(mine), nbytes / timed(peer)))

    add("axpy (float32)", 3 * n * 4,
        lambda i: ops.axpy(2.0, xs[i], ys[i], out=out),
        lambda i: torch.add(ys[i], xs[i], alpha=2.0, out=out))
    add("scale (float32)", 2 * n * 4,
        lambda i: ops.scale(xs[i], 2.0, out=out),
        lambda i: torch.mul(xs[i], 2.0, out=out))
    half = torch.empty(n, device=dev, dtype=torch.float16)
    add("cast float32→float16", n * 6,
        lambda i: ops.cast(xs[i], "float16", out=half),
        lambda i: half.copy_(xs[i]))
    m2 = [x.view(rows, cols) for x in xs]
    brow = [y[:cols].view(1, cols) for y in ys]
    o2 = out.view(rows, cols)
    add("add, broadcast row (float32)", 2 * n * 4,
        lambda i: ops.add(m2[i], brow[i], out=o2),
        lambda i: torch.add(m2[i], brow[i], out=o2))
    add("contiguous copy (float32)", 2 * n * 4,
        lambda i: ops.ascontiguous(xs[i], out=out),
        lambda i: out.copy_(xs[i]))
    sub = [x.view(rows, cols)[:, 16:] for x in xs]  # a crop: rows with a pitch
    o3 = torch.empty(rows, cols - 16, device=dev)
    add("strided copy, column crop (row pitch)", 2 * o3.numel() * 4,
        lambda i: ops.ascontiguous(sub[i], out=o3),
        lambda i: o3.copy_(sub[i]))
    ot = torch.empty(cols, rows, device=dev)
    add("transpose 2-D (float32)", 2 * n * 4,
        lambda i: ops.transpose(m2[i], out=ot),
        lambda i: ot.copy_(m2[i].t()))
    s0 = torch.empty((), device=dev)
    add("sum, whole array (float32)", n * 4,
        lambda i: ops.sum(xs[i], out=s0),
        lambda i: torch.sum(xs[i], dim=0, out=s0))
    add("max, whole array (float32)", n * 4,
        lambda i: ops.max(xs[i], out=s0),
        lambda i: torch.amax(xs[i], dim=0, out=s0))
    srow = torch.empty(rows, device=dev)
    add("sum, last axis (float32)", n * 4,
        lambda i: ops.sum(m2[i], axis=-1, out=srow),
        lambda i: torch.sum(m2[i], dim=-1, out=srow))
    add("softmax, rows of 8192 (float32)", 2 * n * 4,
        lambda i: ops.softmax(m2[i], out=o2),
        lambda i: torch.softmax(m2[i], dim=-1))

    name = torch.cuda.get_device_name()
    print(f"\n## Kernel library bandwidth on {name} (1 GiB arrays, kernel time, median of {REPS} batches of {BATCH})")
    print(f"device-to-device copy: {copy_bw / 1e9:.0f} GB/s\n")
    print("| op | caijit GB/s | % of copy | PyTorch GB/s | caijit / PyTorch |")
    print("|---|---|---|---|---|")
    for op, mine, peer in rows_out:
        print(f"| {op} | {mine / 1e9:.0f} | {100 * mine / copy_bw:.0f}% | {peer / 1e9:.0f} | {mine / peer:.2f}x |")


def host_costs() -> None:
    """Host µs per call on small arrays (the GPU keeps up), beside PyTorch's op: what an op
    costs a program that issues many small ones."""
    import time

    x, y = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
    half = torch.empty(4096, device="cuda", dtype=torch.float16)
    out, s0 = torch.empty(4096, device="cuda"), torch.empty((), device="cuda")
    m, row = x.view(64, 64), y[:64].view(1, 64)
    cases = [
        ("axpy", lambda: ops.axpy(2.0, x, y, out=out), lambda: torch.add(y, x, alpha=2.0, out=out)),
        ("cast float32→float16", lambda: ops.cast(x, "float16", out=half), lambda: half.copy_(x)),
        ("add, broadcast row", lambda: ops.add(m, row, out=out.view(64, 64)), lambda: torch.add(m, row, out=out.view(64, 64))),
        ("sum, whole array", lambda: ops.sum(x, out=s0), lambda: torch.sum(x, dim=0, out=s0)),
        ("softmax", lambda: ops.softmax(m, out=out.view(64, 64)), lambda: torch.softmax(m, dim=-1)),
        ("cast, new result", lambda: ops.cast(x, "float16"), lambda: x.half()),
    ]

    def per_call(fn: Callable[[], object], n: int = 2000) -> float:
        fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best = min(best, (time.perf_counter() - t0) / n)
            torch.cuda.synchronize()
        return best * 1e6

    print("\n## Host cost per op call (4096 float32 elements; best of 5 × 2000 calls)\n")
    print("| op | caijit µs | PyTorch µs | caijit / PyTorch |")
    print("|---|---|---|---|")
    for name, mine, peer in cases:
        a, b = per_call(mine), per_call(peer)
        print(f"| {name} | {a:.1f} | {b:.1f} | {a / b:.2f}x |")


if __name__ == "__main__":
    main()
    host_costs()
