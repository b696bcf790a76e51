"""Instructions per launch, counted without a GPU: the launch paths run against a stand-in
driver that does no GPU work (count_launch/stub_cuda.c), under valgrind's callgrind, which
counts the same instructions on every run. Time on a GPU machine drifts by 10-40 %; this
count does not, so it shows what a change to the launch path saves (the driver's own
work, the floor, is not in it).

For each case the loop runs twice, 0 and N launches, and the difference divided by N is
reported: the whole Python loop iteration, and the part inside caijit's `__call__`. The
graph cases replay a captured chain of 10 kernels (kernel i reads buffer i and writes i+1,
as in `bench_graph.py`): without arguments, with the arrays it is bound to, and with every
array rebound (two sets in turn), by keyword and by position; the driver's own work on
graphs is not in them either.
`--top K` lists the K costliest functions (inclusive) of caijit's part of one case.

Needs gcc and valgrind (no GPU, no CUDA driver). From the repository root:
    python python/benchmarks/count_launch.py [--launches N] [--top K] [--case NAME]
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench_launch import EMPTY0, EMPTY1, SRC  # the launch benchmark's empty kernels

HERE = Path(__file__).resolve().parent
#: A graph's kernel: two arrays and an int, as `bench_graph.py`'s.
EMPTY2 = 'extern "C" __global__ void empty2(const float* x, float* y, int n) {}'
#: The chain of `EMPTY2` launches a graph case captures (kernel i reads buffer i, writes i+1).
CHAIN = 10
GRAPH_CASES = [f"graph of {CHAIN} kernels: {how}" for how in ("no rebinding", "same arguments", "all rebound", "all rebound by position")]
CASES = ["no arguments", "1 int", "3 caijit arrays + 1 int", "3 CAI objects + 1 int", "3 Numba-style arrays + 1 int", *GRAPH_CASES]
#: caijit's part of a launch: everything under the launcher's `__call__`; of a replay, the graph's.
CALL = "Launcher::__pymethod___call__"
REPLAY = "Graph::__pymethod___call__"


def run_case(case: str, n: int) -> None:
    """The measured loop (run under callgrind with the stand-in driver)."""
    import caijit

    k0, k1, k3 = (caijit.kernel(s)[1, 32] for s in (EMPTY0, EMPTY1, SRC))
    a = caijit.zeros(1024)

    class Cai:
        """A foreign array: only `__cuda_array_interface__` (the generic path)."""

        def __init__(self, interface: dict[str, object]) -> None:
            self.__cuda_array_interface__ = interface

    c = Cai(a.__cuda_array_interface__)

    class DeviceNDArrayBase:
        """What caijit's Numba path reads of a Numba device array (Numba's own needs a GPU)."""

        __module__, __qualname__ = "numba.cuda.cudadrv.devicearray", "DeviceNDArrayBase"

        def __init__(self, interface: dict[str, Any]) -> None:
            self.shape, self.strides, self.dtype, self.stream = interface["shape"], (4,), np.dtype(np.float32), 0
            self._pointer = ctypes.c_size_t(interface["data"][0])

        @property
        def device_ctypes_pointer(self) -> ctypes.c_size_t:
            return self._pointer

    nb = DeviceNDArrayBase(a.__cuda_array_interface__)
    if case in GRAPH_CASES:
        k2 = caijit.kernel(EMPTY2)[1, 32]
        names = [f"b{i}" for i in range(CHAIN + 1)]
        sets = [dict(zip(names, (caijit.zeros(32) for _ in names))) for _ in range(2)]
        with caijit.graph() as g:
            bufs = [g.input(name, b) for name, b in sets[0].items()]
            for i in range(CHAIN):
                k2(bufs[i], bufs[i + 1], 32)
        turn = [0]

        def rebound() -> None:
            turn[0] ^= 1
            g(**sets[turn[0]])

        lists = [list(s.values()) for s in sets]

        def by_position() -> None:
            turn[0] ^= 1
            g(*lists[turn[0]])

        how = case.split(": ")[1]
        launch = {"no rebinding": g, "same arguments": lambda: g(**sets[0]), "all rebound": rebound, "all rebound by position": by_position}[how]
        for _ in range(200 + n):
            launch()
        return
    launch = {
        "no arguments": lambda: k0(),
        "1 int": lambda: k1(5),
        "3 caijit arrays + 1 int": lambda: k3(a, a, a, 5),
        "3 CAI objects + 1 int": lambda: k3(c, c, c, 5),
        "3 Numba-style arrays + 1 int": lambda: k3(nb, nb, nb, 5),
    }[case]
    for _ in range(200 + n):  # the first 200 compile, load and warm up (also in the 0 run)
        launch()


def callgrind(case: str, n: int, stub: Path, out: Path) -> None:
    # A fixed hash seed: with a random one, the start-up's own instruction count (dict
    # layouts) differs between the two runs by millions, swamping the loop's difference.
    env = dict(os.environ, LD_LIBRARY_PATH=f"{stub}:{os.environ.get('LD_LIBRARY_PATH', '')}", PYTHONHASHSEED="0")
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__, "--run", case, str(n)]
    subprocess.run(cmd, env=env, check=True, capture_output=True)


def inclusive(path: Path) -> collections.Counter[str]:
    """Inclusive instruction counts per function of a callgrind output."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", "--auto=no", str(path)], capture_output=True, text=True, check=True
    ).stdout
    counts: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*)", line)
        if m:
            counts[m.group(2)] += int(m.group(1).replace(",", ""))
    return counts


def per_launch(before: collections.Counter[str], after: collections.Counter[str], n: int) -> dict[str, float]:
    return {name: (after[name] - before.get(name, 0)) / n for name in after}


def matching(counts: dict[str, float], fragment: str) -> float:
    return max((v for k, v in counts.items() if fragment in k), default=0.0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--launches", type=int, default=3000)
    p.add_argument("--top", type=int, default=0, help="list the costliest functions of caijit's part")
    p.add_argument("--case", choices=CASES, action="append", help="measure only these (default: all)")
    p.add_argument("--run", nargs=2, metavar=("CASE", "N"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.run:
        run_case(args.run[0], int(args.run[1]))
        return
    for tool in ("gcc", "valgrind", "callgrind_annotate"):
        if shutil.which(tool) is None:
            sys.exit(f"count_launch.py needs {tool}")
    # Compile the kernels with the real toolchain first (NVRTC may load the CUDA driver,
    # which the stand-in does not fully provide); the measured runs hit caijit's disk cache.
    from caijit import _native

    for src in (EMPTY0, EMPTY1, SRC, EMPTY2):
        _native.compile_program(src, "sm_90")
    with tempfile.TemporaryDirectory() as tmp:
        stub = Path(tmp)
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(stub / "libcuda.so.1"), str(HERE / "count_launch" / "stub_cuda.c")], check=True)
        (stub / "libcuda.so").symlink_to("libcuda.so.1")
        print(f"\n## Instructions per launch or replay (callgrind, stand-in driver, {args.launches} of them)")
        print("| case | whole loop iteration | inside caijit's `__call__` |\n|---|---|---|")
        tops = {}
        for case in args.case or CASES:
            runs = []
            for n in (0, args.launches):
                out = stub / f"{len(runs)}.out"
                callgrind(case, n, stub, out)
                runs.append(inclusive(out))
            counts = per_launch(runs[0], runs[1], args.launches)
            call = REPLAY if case in GRAPH_CASES else CALL
            if matching(counts, call) <= 0:
                sys.exit(f"count_launch.py: no function named like {call!r} in the profile of {case!r} (a stripped build?)")
            print(f"| {case} | {matching(counts, 'PROGRAM TOTALS'):.0f} | {matching(counts, call):.0f} |")
            tops[case] = counts
        for case, counts in tops.items() if args.top else ():
            print(f"\n### {case}: costliest functions inside caijit (inclusive, per launch)")
            mine = sorted(((v, k) for k, v in counts.items() if "_native" in k or "cai_runtime" in k), reverse=True)
            for v, k in mine[: args.top]:
                print(f"{v:8.0f}  {k[:150]}")


if __name__ == "__main__":
    main()
