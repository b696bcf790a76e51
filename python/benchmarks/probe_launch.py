"""Where a Python launch's time goes: the launch with 0, 1 and 4 arguments, and each
argument kind's conversion alone (``caijit._native.launch_view``), beside the attribute
reads it is made of. Differences between rows place the cost; absolute values drift.

Then the per-phase split of a launch by producer (``CAIJIT_PHASE_TIMES``' counters, read
through ``_native.phase_times``): argument conversion by route, the producers' current
streams, device choice, kernel lookup, the Rust launch (checks, packing, stream ordering,
``cuLaunchKernel``, split into its ``launch.*`` steps: check+marshal, bind, producer scan,
events, the driver call, the GIL's release and the rest), DLPack releases. The timing
itself adds two clock reads per phase.

Run on a GPU machine: python python/benchmarks/probe_launch.py
"""

from __future__ import annotations

import ctypes
import importlib.util
from typing import Any, Callable

import numpy as np
from bench_launch import floor_paths, measure, measure_round  # the launch benchmark's timing (and NumPy setup)

import caijit
from caijit import _native

SRC = r"""
extern "C" __global__ void empty0() {}
extern "C" __global__ void empty1(int n) {}
extern "C" __global__ void empty3(const float* a, const float* b, float* c, int n) {}
"""


def per_call(f: Callable[[], Any], sync: Callable[[], None] = lambda: None) -> float:
    """Host µs per call, timed as bench_launch.py times launches."""
    return measure(f, sync)[0]


def main() -> None:
    rows: list[tuple[str, float]] = []
    m = caijit.module(SRC)
    k0, k1, k3 = m["empty0"][1, 32], m["empty1"][1, 32], m["empty3"][1, 32]
    a, b, c = (caijit.zeros(1024) for _ in range(3))

    def sync() -> None:
        c.copy_to_host()

    for floor in floor_paths()[:1]:  # the nvcc-built C loop (3 arrays + 1 int), CAIJIT_LAUNCH_FLOOR
        rows.append(("C++ cuLaunchKernel loop, 3 arrays + 1 int (the floor)", measure_round([floor])[floor.name][0]))
    rows.append(("python: empty loop body (lambda: None)", per_call(lambda: None)))
    libc_gil, libc_nogil = ctypes.PyDLL(None).abs, ctypes.CDLL(None).abs
    rows.append(("ctypes libc abs(), GIL held", per_call(lambda: libc_gil(-3))))
    rows.append(("ctypes libc abs(), GIL released", per_call(lambda: libc_nogil(-3))))
    rows.append(("pyo3 getter: caijit array .size", per_call(lambda: a.size)))
    rows.append(("launch, no arguments", per_call(lambda: k0(), sync)))
    rows.append(("launch, 1 int", per_call(lambda: k1(5), sync)))
    rows.append(("launch, 3 caijit arrays + 1 int", per_call(lambda: k3(a, b, c, 5), sync)))
    rows.append(("launch_view(caijit array)", per_call(lambda: _native.launch_view(a))))
    rows.append(("launch_view(5)  [error path]", per_call(lambda: _try(lambda: _native.launch_view(5)))))
    if importlib.util.find_spec("cupy"):
        import cupy

        x = cupy.zeros(1024, cupy.float32)
        csync = cupy.cuda.Device().synchronize
        rows.append((f"route of a CuPy array: {_native._route(x)}  (cupy: the attribute-reading path)", float("nan")))
        rows.append(("launch, 3 CuPy arrays + 1 int", per_call(lambda: k3(x, x, x, 5), csync)))
        rows.append(("launch_view(CuPy array)", per_call(lambda: _native.launch_view(x))))
        rows.append(("CuPy a.data.ptr", per_call(lambda: x.data.ptr)))
        rows.append(("CuPy a.shape, a.strides, a.dtype", per_call(lambda: (x.shape, x.strides, x.dtype))))
        rows.append(("CuPy get_current_stream().ptr", per_call(lambda: cupy.cuda.get_current_stream().ptr)))
        rows.append(("CuPy a.flags.c_contiguous", per_call(lambda: x.flags.c_contiguous)))
        rows.append(("CuPy a.__cuda_array_interface__", per_call(lambda: x.__cuda_array_interface__)))
        rows.append(("launch_view(CuPy array, path=generic)  [its CAI dict]", per_call(lambda: _native.launch_view(x, path="generic"))))
        rows.append(("CuPy a.__dlpack__()", per_call(lambda: x.__dlpack__())))
        raw = cupy.RawKernel(SRC, "empty3")
        n32 = np.int32(5)
        rows.append(("CuPy RawKernel, 3 CuPy arrays + np.int32", per_call(lambda: raw((1,), (32,), (x, x, x, n32)), csync)))
        raw0 = cupy.RawKernel(SRC, "empty0")
        rows.append(("CuPy RawKernel, no arguments", per_call(lambda: raw0((1,), (32,), ()), csync)))
        try:
            from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch  # type: ignore[import-not-found]

            dev = Device()
            dev.set_current()
            cs = dev.create_stream()
            prog = Program(SRC, code_type="c++", options=ProgramOptions(arch=f"sm_{dev.arch}")).compile("cubin")
            cfg = LaunchConfig(grid=1, block=32)
            ck0 = prog.get_kernel("empty0")
            rows.append(("cuda.core launch, no arguments", per_call(lambda: launch(cs, cfg, ck0), cs.sync)))
        except Exception as e:  # noqa: BLE001
            print(f"cuda.core skipped: {e}")
    if importlib.util.find_spec("torch"):
        import torch

        t = torch.zeros(1024, device="cuda")
        tsync = torch.cuda.synchronize
        rows.append(("launch, 3 torch tensors + 1 int", per_call(lambda: k3(t, t, t, 5), tsync)))
        rows.append(("launch_view(torch tensor)", per_call(lambda: _native.launch_view(t))))
        rows.append(("torch t.data_ptr()", per_call(lambda: t.data_ptr())))
        rows.append(("torch t.shape, t.stride(), t.dtype", per_call(lambda: (t.shape, t.stride(), t.dtype))))
        rows.append(("torch t.is_cuda, t.requires_grad", per_call(lambda: (t.is_cuda, t.requires_grad))))
        rows.append(("torch t.requires_grad", per_call(lambda: t.requires_grad)))
        rows.append(("torch t.is_neg()", per_call(lambda: t.is_neg())))
        is_neg = torch.Tensor.is_neg
        rows.append(("torch Tensor.is_neg(t)", per_call(lambda: is_neg(t))))
        rows.append(("torch t.is_conj()", per_call(lambda: t.is_conj())))
        rows.append(("torch _cuda_getCurrentRawStream(0)", per_call(lambda: torch._C._cuda_getCurrentRawStream(0))))
        rows.append((f"route of a torch tensor: {_native._route(t)}", float("nan")))
        for path in ("exchange", "known", "generic", "dlpack"):
            rows.append((f"launch_view(torch tensor, path={path})", per_call(lambda: _try(lambda: _native.launch_view(t, path=path)))))
        t8 = [torch.zeros(1024, device="cuda") for _ in range(8)]
        k8 = caijit.kernel('extern "C" __global__ void empty8(const float* a, const float* b, const float* c, const float* d, const float* e, const float* f, const float* g, float* h) {}')[1, 32]
        rows.append(("launch, 8 torch tensors", per_call(lambda: k8(*t8), tsync)))
    print("\n## Launch probe, host µs per call (median of 100 batches of 200)")
    print("| what | µs |\n|---|---|")
    for name, us in rows:
        print(f"| {name} | {us:.3f} |")
    phases(k3, a, b, c)


def phases(k3: Any, a: Any, b: Any, c: Any) -> None:
    """Per-phase µs per launch of `k3(x, y, z, 5)` for each producer."""
    producers: list[tuple[str, Any, Callable[[], None]]] = [("caijit", (a, b, c), lambda: c.copy_to_host())]
    if importlib.util.find_spec("cupy"):
        import cupy

        producers.append(("CuPy", tuple(cupy.zeros(1024, cupy.float32) for _ in range(3)), cupy.cuda.Device().synchronize))
    if importlib.util.find_spec("torch"):
        import torch

        producers.append(("PyTorch", tuple(torch.zeros(1024, device="cuda") for _ in range(3)), torch.cuda.synchronize))
    if importlib.util.find_spec("numba"):
        from numba import cuda

        producers.append(("Numba", tuple(cuda.device_array(1024, np.float32) for _ in range(3)), cuda.synchronize))
    n = 20_000
    table: dict[str, dict[str, float]] = {}
    for name, (x, y, z), sync in producers:
        for _ in range(2000):
            k3(x, y, z, 5)
        sync()
        _native.phase_times(reset=True, enable=True)
        for _ in range(n):
            k3(x, y, z, 5)
        times = _native.phase_times(reset=True, enable=False)
        sync()
        row = {phase: ns / n / 1000 for phase, (count, ns) in times.items() if count}
        # What the runtime's sub-phases leave out: the GIL's release and retaking around the
        # launch, and the rest of Kernel::launch (counters, the context guard, ...).
        if "launch" in row and "launch.runtime" in row:
            row["launch.gil"] = row["launch"] - row["launch.runtime"]
            steps = ("launch.check", "launch.bind", "launch.scan", "launch.events", "launch.driver")
            row["launch.rest"] = row["launch.runtime"] - sum(row.get(p, 0.0) for p in steps)
        table[name] = row
    names = sorted({p for t in table.values() for p in t}, key=lambda p: (p == "total", p))
    print("\n## Launch phases, µs per launch of 3 arrays + 1 int (CAIJIT_PHASE_TIMES counters)")
    print("| phase | " + " | ".join(table) + " |")
    print("|---|" + "---|" * len(table))
    for p in names:
        print(f"| {p} | " + " | ".join(f"{t.get(p, 0.0):.3f}" for t in table.values()) + " |")


def _try(f: Callable[[], object]) -> None:
    try:
        f()
    except Exception:
        pass


if __name__ == "__main__":
    main()
