"""What a call costs a PyTorch program, per call on the host (µs), side by side in one
process: a direct caijit launch, the same kernel as a caijit operator (caijit.torch.op), a
hand-written torch.library.custom_op around the launch, the matching native PyTorch op,
and the kernel library's `caijit.ops.add` on tensors (its operator) beside the same call
with `out=` (the direct path) and `torch.add`.

Small arrays (4096 float32): the GPU work is shorter than the launch, so the time per call
is the host's. Each figure is the median of ROUNDS rounds of CALLS calls, synchronized
after each round. Needs PyTorch with a GPU:
    python python/benchmarks/bench_torch.py [--rounds 7] [--calls 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import torch

import caijit
import caijit.torch as ct

SRC = r"""
extern "C" __global__ void scaled_add(const float* x, const float* y, float* out, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}
"""


def per_call_us(f: Callable[[], Any], rounds: int, calls: int) -> float:
    for _ in range(50):
        f()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=2000)
    a = ap.parse_args()
    n = 4096
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    k = caijit.kernel(SRC, "scaled_add")
    blocks = (n + 255) // 256
    op = ct.op(k, name="caijit_bench::scaled_add", outputs={"out": ct.like("x")})
    registered = torch.ops.caijit_bench.scaled_add.default

    @torch.library.custom_op("caijit_bench::scaled_add_by_hand", mutates_args=())
    def by_hand(x: torch.Tensor, y: torch.Tensor, alpha: float, n: int) -> torch.Tensor:
        o = torch.empty_like(x)
        k[blocks, 256](x, y, o, alpha, n)
        return o

    @by_hand.register_fake
    def _(x: torch.Tensor, y: torch.Tensor, alpha: float, n: int) -> torch.Tensor:
        return torch.empty_like(x)

    def direct_into() -> None:
        k[blocks, 256](x, y, out, 2.0, n)

    def direct_new() -> None:
        k[blocks, 256](x, y, torch.empty_like(x), 2.0, n)

    rows = [
        ("direct launch into an existing tensor", direct_into),
        ("torch.empty_like + direct launch", direct_new),
        ("caijit.torch.op operator, called", lambda: op(x, y, 2.0, n)),
        ("the same, through the dispatcher (torch.ops...)", lambda: registered(x, y, 2.0, n)),
        ("hand-written torch.library.custom_op", lambda: by_hand(x, y, 2.0, n)),
        ("torch.add(y, x, alpha=2.0) (native PyTorch)", lambda: torch.add(y, x, alpha=2.0)),
        ("caijit.ops.add(x, y, out=out) (direct)", lambda: caijit.ops.add(x, y, out=out)),
        ("caijit.ops.add(x, y) (its operator)", lambda: caijit.ops.add(x, y)),
        ("torch.ops.caijit.add(x, y)", lambda: torch.ops.caijit.add(x, y)),
        ("torch.add(x, y) (native PyTorch)", lambda: torch.add(x, y)),
    ]
    results = [(name, per_call_us(f, a.rounds, a.calls)) for name, f in rows]
    base = results[1][1]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {n} float32, median of {a.rounds} x {a.calls} calls")
    print(f"| call | µs per call | vs empty_like + launch |\n|---|---:|---:|")
    for name, us in results:
        print(f"| {name} | {us:.1f} | {us / base:.2f}x |")


if __name__ == "__main__":
    main()
