"""Where a rebound graph replay's host time goes: a chain of K empty kernels (kernel i
reading input i and writing input i+1, K+1 inputs, 2K parameter slots), replayed with
PyTorch tensors and with caijit arrays:

- host µs per replay: no arguments, the arrays it is bound to (every input converted and
  checked, no node changed), every input rebound by keyword, and by position; the nodes'
  updates are "rebound" less "same";
- the argument conversion inside a rebound replay (``CAIJIT_PHASE_TIMES``' counters read
  through ``_native.phase_times``: ``arg.exchange`` for a PyTorch tensor, ``arg.caijit``
  for a caijit array), per input;
- what PyTorch's own reads cost over the same inputs in the same order (cold, as a replay
  meets them): ``t.requires_grad`` and ``t.is_neg()``, the two checks caijit makes beyond
  PyTorch's DLPack exchange API (which checks neither); and a whole conversion, as a launch
  makes it (``_native.launch_view``), over the tensors and over as many caijit arrays.

Run on a GPU machine with PyTorch: python python/benchmarks/probe_replay.py [--k 1000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import torch
from bench_graph import timed  # the graph benchmark's timing

import caijit
from caijit import _native

SRC = r'extern "C" __global__ void empty(const float* x, float* y, int n) {}'
N = 1024


def probe(k: int, make: Callable[[], Any], label: str) -> list[Any]:
    kernel = caijit.kernel(SRC, "empty")
    sets = [[make() for _ in range(k + 1)] for _ in range(2)]
    with caijit.graph() as g:
        inputs = [g.input(f"b{i}", b) for i, b in enumerate(sets[0])]
        for i in range(k):
            kernel[1, N](inputs[i], inputs[i + 1], N)
    by_name = [{f"b{i}": b for i, b in enumerate(s)} for s in sets]
    turn = [0]

    def rebound() -> None:
        turn[0] ^= 1
        g(**by_name[turn[0]])

    def rebound_by_position() -> None:
        turn[0] ^= 1
        g(*sets[turn[0]])

    # (host µs per call, medians of 7 rounds of 10 calls, the GPU drained between rounds)
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("no arguments", g),
        ("same arguments", lambda: g(**by_name[0])),
        ("all rebound", rebound),
        ("all rebound by position", rebound_by_position),
    ]
    rows = {name: timed(f, 10, 7)[0] for name, f in calls}
    replays = 20
    _native.phase_times(reset=True, enable=True)
    for _ in range(replays):
        rebound()
    phases = _native.phase_times(reset=True, enable=False)
    torch.cuda.synchronize()
    print(f"## {label}: {k} kernels, {k + 1} inputs, {2 * k} slots")
    print("| replay | host µs | per input |")
    print("|---|---:|---:|")
    for name, us in rows.items():
        print(f"| {name} | {us:.1f} | {us / (k + 1):.3f} |")
    nodes = rows["all rebound"] - rows["same arguments"]
    print(f"nodes' updates (all rebound - same arguments): {nodes / k:.3f} µs a node, {nodes / (2 * k):.3f} a slot")
    for phase, (count, ns) in phases.items():
        if phase.startswith("arg.") and count:
            print(f"{phase} in a rebound replay: {ns / count / 1000:.3f} µs an input ({count // replays} a replay)")
    return sets[0] + sets[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=1000, help="kernels in the chain")
    args = ap.parse_args()
    print(f"{torch.cuda.get_device_name()}, PyTorch {torch.__version__}")
    tensors = probe(args.k, lambda: torch.zeros(N, device="cuda"), "PyTorch tensors")
    arrays = probe(args.k, lambda: caijit.zeros(N), "caijit arrays")

    def each(read: Callable[[Any], Any], objs: list[Any]) -> float:
        """µs per object of `read` over all of `objs` in turn, less the bare loop."""

        def loop(f: Callable[[Any], Any]) -> float:
            t0 = time.perf_counter()
            for o in objs:
                f(o)
            return (time.perf_counter() - t0) / len(objs) * 1e6

        return statistics.median(loop(read) - loop(lambda o: None) for _ in range(21))

    print(
        f"PyTorch's own reads over the {len(tensors)} tensors in turn: "
        f"t.requires_grad {each(lambda t: t.requires_grad, tensors):.3f} µs, t.is_neg() {each(lambda t: t.is_neg(), tensors):.3f} µs"
    )
    # A conversion alone, as a launch makes it (`launch_view` also builds the view object it
    # returns: the caijit arrays' row is that baseline).
    print(
        f"launch_view over the same tensors in turn: {each(_native.launch_view, tensors):.3f} µs; "
        f"over as many caijit arrays: {each(_native.launch_view, arrays):.3f} µs"
    )

if __name__ == "__main__":
    main()
