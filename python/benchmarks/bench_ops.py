"""Achieved bandwidth of the kernel library beside a device-to-device copy and PyTorch's
equivalent op, measured in the same run on the same tensors.

bandwidth = bytes that must move / kernel time: CUDA events around 4 back-to-back calls,
median of 25 such batches, inputs alternating between two sets. Arrays are 1 GiB each: far
past the 50 MiB L2. The GPU is held busy (a sleep kernel) while each batch is enqueued, so
the events time the kernels and not the host's first launch, which differs between caijit
(15-30 µs of Python per op) and PyTorch (5-14 µs) and moved the ratios by up to 1 %; host
cost per launch is bench_launch.py's subject.

Run on a GPU machine: python python/benchmarks/bench_ops.py (CAIJIT_BENCH_QUICK=1: only
the host cost per call of small ops beside PyTorch's, in under a minute).
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


def host_costs(quick: bool = False) -> None:
    """Host µs per call on small arrays (the GPU keeps up), beside PyTorch's op of the same
    kind: caijit.ops on the same PyTorch tensors and on caijit arrays. Medians of rounds
    that interleave the three (each round: N calls of each), with the rounds' range."""
    import time

    import caijit

    n = 4096
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    half = torch.empty(n, device="cuda", dtype=torch.float16)
    out, s0 = torch.empty(n, device="cuda"), torch.empty((), device="cuda")
    m, row, o2 = x.view(64, 64), y[:64].view(1, 64), out.view(64, 64)
    # The same data as caijit arrays.
    cx, cy = caijit.to_device(x.cpu().numpy()), caijit.to_device(y.cpu().numpy())
    chalf, cout, cs0 = caijit.empty(n, "float16"), caijit.empty(n), caijit.empty(())
    cm, crow, co2 = caijit.to_device(x.cpu().numpy().reshape(64, 64)), caijit.to_device(y[:64].cpu().numpy().reshape(1, 64)), caijit.empty((64, 64))
    try:
        torch.softmax(m, -1, out=o2)
        torch_softmax: Callable[[], object] = lambda: torch.softmax(m, -1, out=o2)
        softmax_label = "torch.softmax(out=)"
    except TypeError:
        torch_softmax, softmax_label = (lambda: torch.softmax(m, -1)), "torch.softmax"
    cases: list[tuple[str, str, Callable[[], object], Callable[[], object], Callable[[], object]]] = [
        ("axpy", "torch.add(alpha=, out=)", lambda: torch.add(y, x, alpha=2.0, out=out),
         lambda: ops.axpy(2.0, x, y, out=out), lambda: ops.axpy(2.0, cx, cy, out=cout)),
        ("cast float32→float16", "out.copy_(x)", lambda: half.copy_(x),
         lambda: ops.cast(x, "float16", out=half), lambda: ops.cast(cx, "float16", out=chalf)),
        ("add, broadcast row", "torch.add(out=)", lambda: torch.add(m, row, out=o2),
         lambda: ops.add(m, row, out=o2), lambda: ops.add(cm, crow, out=co2)),
        ("sum, whole array", "torch.sum(dim=0, out=)", lambda: torch.sum(x, dim=0, out=s0),
         lambda: ops.sum(x, out=s0), lambda: ops.sum(cx, out=cs0)),
        ("softmax, 64 rows of 64", softmax_label, torch_softmax,
         lambda: ops.softmax(m, out=o2), lambda: ops.softmax(cm, out=co2)),
        ("axpy, new result", "torch.add(alpha=)", lambda: torch.add(y, x, alpha=2.0),
         lambda: ops.axpy(2.0, x, y), lambda: ops.axpy(2.0, cx, cy)),
        ("cast, new result", "x.to(float16)", lambda: x.to(torch.float16),
         lambda: ops.cast(x, "float16"), lambda: ops.cast(cx, "float16")),
        ("add, new result", "torch.add", lambda: torch.add(m, row),
         lambda: ops.add(m, row), lambda: ops.add(cm, crow)),
        ("sum, new result", "torch.sum", lambda: torch.sum(x),
         lambda: ops.sum(x), lambda: ops.sum(cx)),
        ("softmax, new result", "torch.softmax", lambda: torch.softmax(m, -1),
         lambda: ops.softmax(m), lambda: ops.softmax(cm)),
    ]
    rounds, calls = (11, 500) if quick else (31, 2000)

    def batch(fn: Callable[[], object]) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        dt = (time.perf_counter() - t0) / calls
        torch.cuda.synchronize()
        return dt * 1e6

    print(f"\n## Host cost per op call ({n} float32 elements; median of {rounds} interleaved rounds of {calls} calls, [range])\n")
    print("| op | PyTorch op | PyTorch µs | caijit (PyTorch tensors) µs | ratio | caijit (caijit arrays) µs | ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, label, peer, mine_t, mine_c in cases:
        fns = (peer, mine_t, mine_c)
        for f in fns:
            f()
        torch.cuda.synchronize()
        times: list[list[float]] = [[], [], []]
        for _ in range(rounds):
            for k, f in enumerate(fns):
                times[k].append(batch(f))
        med = [statistics.median(t) for t in times]

        def cell(k: int) -> str:
            return f"{med[k]:.2f} [{min(times[k]):.2f}–{max(times[k]):.2f}]"

        print(f"| {name} | `{label}` | {cell(0)} | {cell(1)} | {med[1] / med[0]:.2f}x | {cell(2)} | {med[2] / med[0]:.2f}x |")


if __name__ == "__main__":
    import os

    # CAIJIT_BENCH_QUICK=1: the host-cost table alone, in well under a minute.
    quick = os.environ.get("CAIJIT_BENCH_QUICK") == "1"
    if not quick:
        main()
    host_costs(quick)
