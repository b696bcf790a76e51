"""``python -m caijit {demo,info,compile,cache}``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Optional

import caijit
from caijit import _native


DEMO_SOURCE = r"""
#include <caijit/caijit.cuh>
// y = a * x + y over a strided 2-D view x (here: a transpose) and a contiguous y.
extern "C" __global__ void saxpy_strided(float a, caijit::Array<const float, 2> x, float* __restrict__ y) {
    const long long rows = x.shape[0], cols = x.shape[1];
    for (long long i = caijit::global_thread(); i < rows * cols; i += caijit::grid_threads()) {
        y[i] = a * x(i / cols, i % cols) + y[i];
    }
}
"""


def _gpu() -> Optional[str]:
    """None when a GPU is usable, else why not."""
    try:
        if caijit.device_count() == 0:
            return "the CUDA driver reports no device"
    except caijit.CudaNotAvailable as e:
        return str(e)
    return None


def demo() -> int:
    print(f"caijit {caijit.__version__}")
    # 1. What works everywhere: validating a CUDA Array Interface (no GPU, no CUDA).
    cai = {"shape": (3, 4), "typestr": "<f4", "data": (0x7F0000000000, False), "strides": (4, 12), "version": 3, "stream": 1}
    i = caijit.parse_interface(cai)
    print(f"parse_interface: shape={i.shape} strides={i.strides} dtype={i.dtype} stream={i.stream} "
          f"C-contiguous={i.is_c_contiguous} F-contiguous={i.is_f_contiguous}")
    try:
        caijit.parse_interface({**cai, "stream": 0})
    except caijit.InterfaceError as e:
        print(f"rejected as the spec requires: {e}")
    # 2. Compiling with NVRTC (needs NVRTC, not a GPU).
    k = caijit.kernel(DEMO_SOURCE)
    try:
        info = k.compile(arch="sm_90")[0]
    except caijit.CudaNotAvailable as e:
        print(f"NVRTC is not available, so nothing can be compiled: {e}")
        return 0
    params = ", ".join(f"{p['type']} {p['name']} @{p['offset']}" for p in info["params"])
    print(f"compiled {info['name']} for {info['arch']} ({info['image']}, cache: {info['cache']}): ({params})")
    # 3. Launching (needs a GPU).
    why = _gpu()
    if why is not None:
        print(f"no GPU, so no launch: {why}")
        print("on a machine with an NVIDIA GPU this demo launches the kernel on a caijit array and checks it")
        return 0
    import numpy as np

    name, cc, mem = _native.device_info(0)
    print(f"device 0: {name}, compute capability {cc[0]}.{cc[1]}, {mem / 2**30:.0f} GiB")
    rng = np.random.default_rng()
    x_host = rng.standard_normal((512, 256)).astype(np.float32)   # x is used transposed: (256, 512)
    y_host = rng.standard_normal((256, 512)).astype(np.float32)
    x = caijit.to_device(x_host)
    y = caijit.to_device(y_host)
    xt = caijit.parse_interface({**x.__cuda_array_interface__, "shape": (256, 512), "strides": (4, 256 * 4)})
    k.forall(y.size)(np.float32(2.0), xt, y)
    got = y.copy_to_host()
    want = 2.0 * x_host.T + y_host
    err = float(np.max(np.abs(got - want)))
    print(f"launched saxpy_strided on a transposed view: max |error| = {err:.2e}")
    s = caijit.stats()
    print(f"stats: launches={s['launches']} compiles={s['compiles']} waits={s['waits']} host_syncs={s['host_syncs']}")
    return 0 if err < 1e-5 else 1


def info() -> int:
    print(f"caijit {caijit.__version__} (Python {sys.version.split()[0]})")
    try:
        checks = "cross-checked by the driver" if _native.driver_checks_parameters() else "not cross-checked (the driver predates CUDA 12.4)"
        print(f"CUDA driver: {_native.driver_version()}; kernel parameters {checks}")
        for d in range(caijit.device_count()):
            name, cc, mem = _native.device_info(d)
            print(f"  device {d}: {name}, compute capability {cc[0]}.{cc[1]}, {mem / 2**30:.0f} GiB")
    except caijit.CudaNotAvailable as e:
        print(f"CUDA driver: not available ({e})")
    try:
        path, ver, inc, archs = _native.nvrtc_info()
        print(f"NVRTC {ver[0]}.{ver[1]}: {path}")
        print(f"  CUDA headers: {', '.join(inc) or 'not found'}")
        print(f"  architectures: {', '.join(f'sm_{a}' for a in archs)}")
    except caijit.CudaNotAvailable as e:
        print(f"NVRTC: not available ({e})")
    print(f"disk cache: {_cache_line(_native.cache_info())}")
    return 0


def _cache_line(c: dict[str, Any]) -> str:
    if c["state"] == "disabled":
        return "disabled (CAIJIT_CACHE=0)"
    if c["state"] == "refused":
        return f"not used: {c['dir']}: {c['why']}"
    return f"{c['dir']} (mode {c['mode']}, {c['entries']} entries, {c['bytes'] / 2**20:.1f} MiB)"


def compile_cmd(args: argparse.Namespace) -> int:
    with open(args.file, encoding="utf-8") as f:
        source = f.read()
    exprs = list(args.instantiate or [])
    kernels: list[dict[str, Any]] = _native.compile_program(
        source, args.arch, args.file, exprs, list(args.option or []), list(args.include or []), []
    )
    if args.name:
        kernels = [k for k in kernels if args.name in (k["name"], k["name_expression"], k["lowered_name"])]
    if args.json:
        print(json.dumps(kernels, indent=2))
        return 0
    for k in kernels:
        label = k["name_expression"] or k["name"]
        print(f"{label}: {k['lowered_name']} ({k['arch']} {k['image']}, cache {k['cache']}, {k['param_bytes']} parameter bytes)")
        if k["demangled"]:
            print(f"  {k['demangled']}")
        for p in k["params"]:
            print(f"  [{p['index']}] {p['type']:<32} {p['kind']:<8} size {p['size']:>3}  offset {p['offset']:>3}  {p['name'] or ''}")
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m caijit", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("demo", help="compile and (with a GPU) launch a kernel on a caijit array")
    sub.add_parser("info", help="driver, devices, NVRTC, cache")
    c = sub.add_parser("compile", help="compile a .cu file without a GPU and print each kernel's parameter layout")
    c.add_argument("file")
    c.add_argument("--arch", default="sm_90")
    c.add_argument("--name")
    c.add_argument("--instantiate", action="append", help="a name expression, e.g. 'axpy<float>' (repeatable)")
    c.add_argument("--option", action="append", help="an NVRTC option (repeatable)")
    c.add_argument("-I", "--include", action="append")
    c.add_argument("--json", action="store_true")
    cache = sub.add_parser("cache", help="the disk cache")
    cache.add_argument("action", choices=["clear", "info"])
    args = parser.parse_args(argv)
    try:
        if args.cmd == "demo":
            return demo()
        if args.cmd == "info":
            return info()
        if args.cmd == "compile":
            return compile_cmd(args)
        if args.action == "clear":
            print(f"removed {_native.cache_clear()} entries")
        else:
            print(_cache_line(_native.cache_info()))
        return 0
    except caijit.CaijitError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
