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
from typing import Any, Callable

import numpy as np
from bench_launch import EMPTY0, EMPTY1, SRC8, Path, floor_paths, has, measure_round, python_path  # the launch benchmark's timing (and NumPy setup)
from bench_launch import SRC as SRC3

import caijit
from caijit import _native

SRC = "\n".join((EMPTY0, EMPTY1, SRC3))


def main() -> None:
    # Every row is timed as bench_launch.py times launches, all rows taking turns batch by
    # batch (the host's speed drifts over seconds): differences between rows place costs.
    paths: list[Path] = []
    notes: list[str] = []

    def per_call(name: str, f: Callable[[], Any], sync: Callable[[], None] = lambda: None) -> None:
        paths.append(python_path(name, f, sync))
    m = caijit.module(SRC)
    k0, k1, k3 = m["empty0"][1, 32], m["empty1"][1, 32], m["empty3"][1, 32]
    a, b, c = (caijit.zeros(1024) for _ in range(3))

    def sync() -> None:
        c.copy_to_host()

    paths += floor_paths()[:1]  # the nvcc-built C loop (3 arrays + 1 int), CAIJIT_LAUNCH_FLOOR
    per_call("python: empty loop body (lambda: None)", lambda: None)
    libc_gil, libc_nogil = ctypes.PyDLL(None).abs, ctypes.CDLL(None).abs
    per_call("ctypes libc abs(), GIL held", lambda: libc_gil(-3))
    per_call("ctypes libc abs(), GIL released", lambda: libc_nogil(-3))
    per_call("pyo3 getter: caijit array .size", lambda: a.size)
    per_call("launch, no arguments", lambda: k0(), sync)
    per_call("launch, 1 int", lambda: k1(5), sync)
    per_call("launch, 3 caijit arrays + 1 int", lambda: k3(a, b, c, 5), sync)
    per_call("launch_view(caijit array)", lambda: _native.launch_view(a))
    per_call("launch_view(5)  [error path]", lambda: _try(lambda: _native.launch_view(5)))
    if has("cupy"):
        import cupy

        x = cupy.zeros(1024, cupy.float32)
        csync = cupy.cuda.Device().synchronize
        notes.append(f"route of a CuPy array: {_native._testing._route(x)}  (cupy: the attribute-reading path)")
        per_call("launch, 3 CuPy arrays + 1 int", lambda: k3(x, x, x, 5), csync)
        per_call("launch_view(CuPy array)", lambda: _native.launch_view(x))
        per_call("CuPy a.data.ptr", lambda: x.data.ptr)
        per_call("CuPy a.shape, a.strides, a.dtype", lambda: (x.shape, x.strides, x.dtype))
        per_call("CuPy get_current_stream().ptr", lambda: cupy.cuda.get_current_stream().ptr)
        per_call("CuPy a.flags.c_contiguous", lambda: x.flags.c_contiguous)
        per_call("CuPy a.__cuda_array_interface__", lambda: x.__cuda_array_interface__)
        per_call("launch_view(CuPy array, path=generic)  [its CAI dict]", lambda: _native.launch_view(x, path="generic"))
        per_call("CuPy a.__dlpack__()", lambda: x.__dlpack__())
        raw = cupy.RawKernel(SRC, "empty3")
        n32 = np.int32(5)
        per_call("CuPy RawKernel, 3 CuPy arrays + np.int32", lambda: raw((1,), (32,), (x, x, x, n32)), csync)
        raw0 = cupy.RawKernel(SRC, "empty0")
        per_call("CuPy RawKernel, no arguments", lambda: raw0((1,), (32,), ()), csync)
        try:
            from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch  # type: ignore[import-not-found]

            dev = Device()
            dev.set_current()
            cs = dev.create_stream()
            prog = Program(SRC, code_type="c++", options=ProgramOptions(arch=f"sm_{dev.arch}")).compile("cubin")
            cfg = LaunchConfig(grid=1, block=32)
            ck0 = prog.get_kernel("empty0")
            per_call("cuda.core launch, no arguments", lambda: launch(cs, cfg, ck0), cs.sync)
        except Exception as e:  # noqa: BLE001
            print(f"cuda.core skipped: {e}")
    if has("torch"):
        import torch

        t = torch.zeros(1024, device="cuda")
        tsync = torch.cuda.synchronize
        per_call("launch, 3 torch tensors + 1 int", lambda: k3(t, t, t, 5), tsync)
        per_call("launch_view(torch tensor)", lambda: _native.launch_view(t))
        per_call("torch t.data_ptr()", lambda: t.data_ptr())
        per_call("torch t.shape, t.stride(), t.dtype", lambda: (t.shape, t.stride(), t.dtype))
        per_call("torch t.is_cuda, t.requires_grad", lambda: (t.is_cuda, t.requires_grad))
        per_call("torch t.requires_grad", lambda: t.requires_grad)
        per_call("torch t.is_neg()", lambda: t.is_neg())
        is_neg = torch.Tensor.is_neg
        per_call("torch Tensor.is_neg(t)", lambda: is_neg(t))
        per_call("torch t.is_conj()", lambda: t.is_conj())
        per_call("torch _cuda_getCurrentRawStream(0)", lambda: torch._C._cuda_getCurrentRawStream(0))
        for name, f in _exchange_calls(t):
            per_call(name, f)
        notes.append(f"route of a torch tensor: {_native._testing._route(t)}")
        for path in ("exchange", "known", "generic", "dlpack"):
            per_call(f"launch_view(torch tensor, path={path})", lambda p=path: _try(lambda: _native.launch_view(t, path=p)))  # type: ignore[misc]
        t8 = [torch.zeros(1024, device="cuda") for _ in range(8)]
        k8 = caijit.kernel(SRC8)[1, 32]
        per_call("launch, 8 torch tensors", lambda: k8(*t8), tsync)
    times = measure_round(paths, sustained=False)  # (host µs only)
    print("\n## Launch probe, host µs per call (median of 100 batches of 200, all rows interleaved)")
    print("| what | µs |\n|---|---|")
    for p in paths:
        print(f"| {p.name} | {times[p.name][0]:.3f} |")
    for note in notes:
        print(f"- {note}")
    phases(k3, a, b, c)


def phases(k3: Any, a: Any, b: Any, c: Any) -> None:
    """Per-phase µs per launch of `k3(x, y, z, 5)` for each producer."""
    producers: list[tuple[str, Any, Callable[[], None]]] = [("caijit", (a, b, c), lambda: c.copy_to_host())]
    if has("cupy"):
        import cupy

        producers.append(("CuPy", tuple(cupy.zeros(1024, cupy.float32) for _ in range(3)), cupy.cuda.Device().synchronize))
    if has("torch"):
        import torch

        producers.append(("PyTorch", tuple(torch.zeros(1024, device="cuda") for _ in range(3)), torch.cuda.synchronize))
    if has("numba"):
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


def _exchange_calls(t: Any) -> list[tuple[str, Callable[[], object]]]:
    """The DLPack exchange API's own read of a tensor (`dltensor_from_py_object_no_sync`,
    called through ctypes), beside the same ctypes call of a C function that does nothing
    with its arguments: their difference is the read itself."""
    capsule = getattr(type(t), "__dlpack_c_exchange_api__", None)
    if capsule is None:
        return []
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    table = (ctypes.c_void_p * 7).from_address(get_pointer(capsule, b"dlpack_exchange_api"))
    borrow, callable_check = table[5], ctypes.cast(ctypes.pythonapi.PyCallable_Check, ctypes.c_void_p).value
    if borrow is None or callable_check is None:  # no borrowing read (dlpack.h 1.3: the table's 6th pointer)
        return []
    out = (ctypes.c_byte * 64)()  # a DLTensor (48 bytes)
    signature = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)
    read, baseline = signature(borrow), signature(callable_check)
    return [
        ("ctypes: a C function of (object, pointer) that reads nothing (baseline)", lambda: baseline(t, out)),
        ("ctypes: the exchange API's dltensor_from_py_object_no_sync(t)", lambda: read(t, out)),
    ]


def _try(f: Callable[[], object]) -> None:
    try:
        f()
    except Exception:
        pass


if __name__ == "__main__":
    main()
