"""What a launch-bound sequence costs replayed from a graph, side by side in one process.

A chain of K small kernels (K = 10, 100, 1000), kernel i reading buffer i and writing
buffer i+1 (N float32 each, one block of N threads: 1,024 by default, `--n 32` for one
warp; far shorter than a launch; `--empty` for kernels with the same parameters and an empty
body, which measures what replaying costs apart from the work). Every array argument is rebound at every replay: two sets
of K+1 buffers are used in turn. Rows:

- caijit launches: the K launches made one by one from Python;
- torch.cuda.graph + copies: the same kernels captured by PyTorch (each a caijit launch on
  PyTorch's capture stream), replayed after copying the new set into its static buffers,
  which is what PyTorch asks of a graph whose inputs change;
- caijit graph, no rebinding: `g()`;
- caijit graph, same arguments: `g(b0=..., ..., bK=...)` with the arrays it is bound to
  already (every argument converted and checked, no node changed);
- caijit graph, all rebound: `g(b0=..., ..., bK=...)`, 2K parameter slots in K nodes;
- caijit graph, all rebound, caijit arrays: the same with two sets of `caijit.zeros`
  arrays, whose conversion costs less than a PyTorch tensor's;
- caijit graph, all rebound by position, caijit arrays: `g(*arrays)`, which looks up no
  names.

Per replay: host µs (the Python call, the GPU left running), and GPU µs per kernel to
completion (R replays, synchronised at the end, divided by R*K). Also: capture +
instantiate (what a user pays once), and the host cost of rebinding per changed slot (all
rebound minus no rebinding, divided by 2K), of which the nodes' updates (all rebound minus
same arguments), and the same with caijit arrays. Needs a GPU and PyTorch:
    python python/benchmarks/bench_graph.py [--rounds 5] [--n 1024] [--empty]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import torch

import caijit

SRC = r"""
extern "C" __global__ void add1(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.0f;
}
extern "C" __global__ void empty(const float* x, float* y, int n) {}
"""


def timed(f: Callable[[], Any], reps: int, rounds: int) -> tuple[float, float]:
    """(host µs per call, wall µs per call to completion): medians over rounds."""
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    host, wall = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host.append((t1 - t0) / reps * 1e6)
        wall.append((t2 - t0) / reps * 1e6)
    return statistics.median(host), statistics.median(wall)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=1024, help="float32 elements per buffer: one block of this many threads")
    ap.add_argument("--empty", action="store_true", help="kernels with the same parameters and an empty body")
    args = ap.parse_args()
    N = args.n
    add1 = caijit.kernel(SRC, "empty" if args.empty else "add1")
    rows = []
    for k in (10, 100, 1000):
        reps = max(20, 20_000 // k)
        sets = [[torch.zeros(N, device="cuda") for _ in range(k + 1)] for _ in range(2)]
        turn = [0]

        def chain(bufs: list[Any], stream: Any = None) -> None:
            for i in range(k):
                add1[1, N, stream](bufs[i], bufs[i + 1], N)

        def eager() -> None:
            turn[0] ^= 1
            chain(sets[turn[0]])

        chain(sets[0])
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with caijit.graph() as g:
            chain([g.input(f"b{i}", b) for i, b in enumerate(sets[0])])
        torch.cuda.synchronize()
        capture_ms = (time.perf_counter() - t0) * 1e3
        names = [f"b{i}" for i in range(k + 1)]
        bound = [dict(zip(names, s)) for s in sets]

        def replay_rebound() -> None:
            turn[0] ^= 1
            g(**bound[turn[0]])

        own = [dict(zip(names, (caijit.zeros(N) for _ in range(k + 1)))) for _ in range(2)]

        def replay_rebound_own() -> None:
            turn[0] ^= 1
            g(**own[turn[0]])

        own_lists = [list(o.values()) for o in own]

        def replay_rebound_own_by_position() -> None:
            turn[0] ^= 1
            g(*own_lists[turn[0]])

        static = [torch.zeros(N, device="cuda") for _ in range(k + 1)]
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            chain(static, s)
        torch.cuda.current_stream().wait_stream(s)
        tg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(tg, stream=s):
            chain(static, s)

        def torch_graph() -> None:
            turn[0] ^= 1
            for dst, src in zip(static, sets[turn[0]]):
                dst.copy_(src)
            tg.replay()

        g(**bound[0])
        measured = {
            "caijit launches": timed(eager, reps, args.rounds),
            "torch.cuda.graph + copies": timed(torch_graph, reps, args.rounds),
            "caijit graph, no rebinding": timed(g, reps, args.rounds),
            "caijit graph, same arguments": timed(lambda: g(**bound[0]), reps, args.rounds),
            "caijit graph, all rebound": timed(replay_rebound, reps, args.rounds),
            "caijit graph, all rebound, caijit arrays": timed(replay_rebound_own, reps, args.rounds),
            "caijit graph, all rebound by position, caijit arrays": timed(replay_rebound_own_by_position, reps, args.rounds),
        }
        # Each path computed the chain: buffer K holds buffer 0 (zeros) + K.
        for bufs in (sets[0], sets[1], static):
            bufs[-1].zero_()
        g(**bound[0])
        chain(sets[1])
        tg.replay()
        torch.cuda.synchronize()
        for bufs in (sets[0], sets[1], static):
            assert torch.all(bufs[-1] == (0 if args.empty else k)), "a path computed something else"
        rebound = measured["caijit graph, all rebound"][0]
        rebind = (rebound - measured["caijit graph, no rebinding"][0]) / (2 * k)
        nodes = (rebound - measured["caijit graph, same arguments"][0]) / (2 * k)
        own_rebind = (measured["caijit graph, all rebound, caijit arrays"][0] - measured["caijit graph, no rebinding"][0]) / (2 * k)
        positional = (measured["caijit graph, all rebound by position, caijit arrays"][0] - measured["caijit graph, no rebinding"][0]) / (2 * k)
        rows.append((k, measured, capture_ms, (rebind, nodes, own_rebind, positional)))

    body = "an empty body" if args.empty else "y = x + 1"
    print(f"{torch.cuda.get_device_name()}, kernels of one block of {N} threads, {body}")
    print()
    print("| K kernels | path | host µs / replay | GPU µs / kernel to completion |")
    print("|---:|---|---:|---:|")
    for k, measured, _, _ in rows:
        for path, (host, wall) in measured.items():
            print(f"| {k} | {path} | {host:.1f} | {wall / k:.3f} |")
    print()
    for k, _, capture_ms, (rebind, nodes, own_rebind, positional) in rows:
        print(
            f"K={k}: capture + instantiate {capture_ms:.2f} ms; rebinding {rebind:.3f} µs per changed slot (host), "
            f"of which {nodes:.3f} µs the nodes' updates; with caijit arrays {own_rebind:.3f} µs per changed slot, "
            f"{positional:.3f} by position"
        )


if __name__ == "__main__":
    main()
