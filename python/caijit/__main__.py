"""The command line: python -m caijit {demo,info,compile,cache,bundle}; see --help.

``demo`` checks the installation, ``info`` shows what caijit found (driver, NVRTC, disk
cache), ``compile`` prints kernels' parameter layouts, ``cache`` shows or clears the disk
cache, and ``bundle`` bakes compiled kernels into a file that launches without NVRTC
(``bundle build``) or lists one (``bundle info``)."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from typing import Any, NoReturn, Optional

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


def info_data() -> dict[str, Any]:
    """What `info` shows: the driver and devices, NVRTC and its headers, the disk cache
    (each part with an "error" where it is not available)."""
    data: dict[str, Any] = {"caijit": caijit.__version__, "python": sys.version.split()[0]}
    try:
        driver: dict[str, Any] = {"version": _native.driver_version(), "checks_parameters": _native.driver_checks_parameters(), "devices": []}
        for d in range(caijit.device_count()):
            name, cc, mem = _native.device_info(d)
            driver["devices"].append({"index": d, "name": name, "compute_capability": list(cc), "memory_bytes": mem})
    except caijit.CudaNotAvailable as e:
        driver = {"error": str(e)}
    data["driver"] = driver
    try:
        path, ver, inc, archs = _native.nvrtc_info()
        data["nvrtc"] = {
            "path": path,
            "version": list(ver),
            "build": _native.nvrtc_build(),
            "include_dirs": list(inc),
            "architectures": [f"sm_{a}" for a in archs],
        }
    except caijit.CudaNotAvailable as e:
        data["nvrtc"] = {"error": str(e)}
    data["disk_cache"] = _native.cache_info()
    s = caijit.stats()
    data["untrusted"] = {"compiles": s["untrusted_compiles"], "fallbacks": s["trusted_fallbacks"]}
    return data


def info(as_json: bool = False) -> int:
    data = info_data()
    if as_json:
        print(json.dumps(data, indent=2))
        return 0
    print(f"caijit {data['caijit']} (Python {data['python']})")
    driver = data["driver"]
    if "error" in driver:
        print(f"CUDA driver: not available ({driver['error']})")
    else:
        checks = "cross-checked by the driver" if driver["checks_parameters"] else "not cross-checked (the driver predates CUDA 12.4)"
        print(f"CUDA driver: {driver['version']}; kernel parameters {checks}")
        for d in driver["devices"]:
            cc = d["compute_capability"]
            print(f"  device {d['index']}: {d['name']}, compute capability {cc[0]}.{cc[1]}, {d['memory_bytes'] / 2**30:.0f} GiB")
    nvrtc = data["nvrtc"]
    if "error" in nvrtc:
        print(f"NVRTC: not available ({nvrtc['error']})")
    else:
        print(f"NVRTC {nvrtc['version'][0]}.{nvrtc['version'][1]}: {nvrtc['path']}")
        print(f"  build (in every cache key): {nvrtc['build']}")
        print(f"  CUDA headers: {', '.join(nvrtc['include_dirs']) or 'not found'}")
        print(f"  architectures: {', '.join(nvrtc['architectures'])}")
    print(f"disk cache: {_cache_line(data['disk_cache'])}")
    u = data["untrusted"]
    print(
        f"  this process: {u['compiles']} untrusted compilations (NVRTC's own search path; never cached), "
        f"{u['fallbacks']} of them after NVRTC asked for a header caijit had not found"
    )
    return 0


def _cache_line(c: dict[str, Any]) -> str:
    if c["state"] == "disabled":
        return "disabled (CAIJIT_CACHE=0)"
    if c["state"] == "refused":
        return f"not used: {c['dir']}: {c['why']}"
    return f"{c['dir']} (mode {c['mode']}, {c['entries']} entries, {c['bytes'] / 2**20:.1f} MiB)"


class UsageError(Exception):
    """A mistake in what the command was given: printed as one line, exit status 2."""


_template_line = caijit.bundles.template_line


def compile_cmd(args: argparse.Namespace) -> int:
    source = caijit._read_text(args.file)  # an ArgumentError names the file: a usage error
    decls = _native.declarations(source)
    if not decls:
        raise UsageError(f"{args.file}: declares no __global__ function")
    exprs = list(args.instantiate or [])
    # A name that is an expression (`axpy<float>`, an overload cast) names an instance: it
    # is instantiated as `caijit.kernel(source, name)` would, without --instantiate.
    if args.name is not None and any(c in args.name for c in "<(") and args.name not in exprs:
        exprs.append(args.name)
    notes: list[str] = []
    kernels: list[dict[str, Any]] = _native.compile_program(
        source, args.arch, args.file, exprs, list(args.option or []), list(args.include or []), [], notes
    )
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    instantiated = {k["name"] for k in kernels}
    # Templates nobody instantiated: not in the binary, listed with how to instantiate them.
    templates = [(n, t, p, x) for n, _, t, p, x in decls if t and n not in instantiated]
    if args.name is not None:
        everything = kernels
        kernels = [k for k in kernels if args.name in (k["name"], k["name_expression"], k["lowered_name"])]
        templates = [d for d in templates if d[0] == args.name]
        if not kernels and not templates:
            names = sorted({k["name_expression"] or k["name"] for k in everything} | {n for n, *_ in decls})
            raise UsageError(f"{args.file}: no kernel named {args.name!r}; it has: {', '.join(names)}")
    if args.json:
        print(json.dumps(kernels, indent=2))
        for template in templates:
            print(f"note: {_template_line(*template)}", file=sys.stderr)
        return 0
    for k in kernels:
        label = k["name_expression"] or k["name"]
        print(f"{label}: {k['lowered_name']} ({k['arch']} {k['image']}, cache {k['cache']}, {k['param_bytes']} parameter bytes)")
        if k["demangled"]:
            print(f"  {k['demangled']}")
        for p in k["params"]:
            print(f"  [{p['index']}] {p['type']:<32} {p['kind']:<8} size {p['size']:>3}  offset {p['offset']:>3}  {p['name'] or ''}")
    for template in templates:
        print(_template_line(*template))
    return 0


DESCRIPTION = """\
caijit: launch CUDA C++ kernels on any CUDA Array Interface array.

Every command works without a GPU (demo and info say what needs one)."""

EPILOG = """\
examples, one per command:
  python -m caijit demo                          check the installation end to end
  python -m caijit info                          driver, devices, NVRTC, disk cache
  python -m caijit compile k.cu --instantiate 'axpy<float>' --arch sm_80
                                                 parameter layouts of k.cu's kernels
  python -m caijit cache info                    where the disk cache is and its size
  python -m caijit bundle build manifest.json --arch sm_80,sm_90 -o app.caijit
                                                 bake recorded kernels (CAIJIT_RECORD)
  python -m caijit bundle info app.caijit        list a bundle's kernels

The same option has the same name in every command: --instantiate EXPR (alias
--instance), --arch, --json, -o/--output.

Run `python -m caijit COMMAND --help` for a command's options.
(From a checkout: .venv/bin/python -m caijit ..., or `source .venv/bin/activate` first.)"""

COMPILE_EPILOG = """\
examples:
  python -m caijit compile kernels/ops/elementwise.cu
  python -m caijit compile k.cu --name scale --arch sm_80
  python -m caijit compile k.cu --name 'axpy<float>'
  python -m caijit compile k.cu --instantiate 'axpy<float>' --instantiate 'axpy<double>'
  python -m caijit compile k.cu -I include --option=-DTILE=32 --json

Templates are compiled only when instantiated: without --instantiate they are listed
with their template parameters and the option that instantiates them."""


class _Parser(argparse.ArgumentParser):
    """argparse, with the missing-command message naming the commands."""

    def error(self, message: str) -> NoReturn:
        if "required: COMMAND" in message:
            message = "missing a command: one of demo, info, compile, cache, bundle (python -m caijit --help says what each does)"
        elif "required: ACTION" in message:
            message = f"missing an action: info or clear ({self.prog} --help has an example of each)"
            if self.prog.endswith("bundle"):
                message = f"missing an action: build or info ({self.prog} --help has an example of each)"
        super().error(message)


def _commands(p: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by its name (``"bundle build"`` for a nested one)."""
    out: dict[str, argparse.ArgumentParser] = {}
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sp in action.choices.items():
                out[prefix + name] = sp
                out.update(_commands(sp, prefix + name + " "))
    return out


def _options(p: argparse.ArgumentParser) -> list[str]:
    return [o for a in p._actions for o in a.option_strings if o not in ("-h", "--help")]


def unknown_options_message(p: argparse.ArgumentParser, command: str, extras: list[str]) -> str:
    """The error for arguments ``command`` does not take: each option that is another
    command's is named with that command (and this command's option for the same thing, or
    the closest of its options)."""
    commands = _commands(p)
    mine = _options(commands[command])
    hints = []
    for extra in extras:
        flag = extra.split("=", 1)[0]
        if not flag.startswith("-") or flag == "-":
            continue
        others = [c for c, sp in commands.items() if c != command and flag in _options(sp)]
        if others:
            hint = f"{flag} is an option of {' and '.join(others)}, not of {command}"
        else:
            hint = f"{flag} is not an option of {command}"
            close = difflib.get_close_matches(flag, mine, n=1, cutoff=0.6)
            if close:
                hint += f"; did you mean {close[0]}?"
            else:
                hint += f"; its options: {', '.join(o for o in mine if o.startswith('--'))}"
        hints.append(hint)
    message = f"unrecognized arguments: {' '.join(extras)}"
    return message + ("; " + "; ".join(hints) if hints else "")


def parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    p = _Parser(prog="python -m caijit", description=DESCRIPTION, epilog=EPILOG, formatter_class=fmt)
    p.add_argument("--version", action="version", version=f"caijit {caijit.__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", title="commands", required=True, parser_class=_Parser)
    sub.add_parser(
        "demo",
        help="validate an array interface, compile a kernel and (with a GPU) launch it",
        description="Validate a CUDA Array Interface, compile a kernel with NVRTC and, with a GPU, launch it and check the result.",
        epilog="example:\n  python -m caijit demo",
        formatter_class=fmt,
    )
    i = sub.add_parser(
        "info",
        help="show the CUDA driver, devices, NVRTC and disk cache caijit uses",
        description="Show the CUDA driver, the devices, the NVRTC library and headers, and the disk cache.",
        epilog="examples:\n  python -m caijit info\n  python -m caijit info --json",
        formatter_class=fmt,
    )
    i.add_argument("--json", action="store_true", help="print it as JSON, e.g. for scripts")
    c = sub.add_parser(
        "compile",
        help="compile a .cu file (no GPU needed) and print each kernel's parameter layout",
        description="Compile a CUDA C++ file with NVRTC (no GPU needed) and print each kernel's parameter layout.",
        epilog=COMPILE_EPILOG,
        formatter_class=fmt,
    )
    c.add_argument("file", metavar="FILE", help="the CUDA C++ source file, e.g. kernels.cu")
    c.add_argument(
        "--arch",
        metavar="ARCH",
        help="the GPU architecture to compile for, e.g. sm_80 (default: device 0's; without a GPU, CAIJIT_ARCH, else sm_90)",
    )
    c.add_argument("--name", metavar="NAME", help="only this kernel, e.g. --name scale or --name 'axpy<float>'")
    c.add_argument(
        "--instantiate",
        "--instance",
        dest="instantiate",
        action="append",
        metavar="EXPR",
        help="instantiate a template, e.g. --instantiate 'axpy<float>' (repeatable; --instance is the same)",
    )
    c.add_argument("--option", action="append", metavar="OPT", help="pass an option to NVRTC, e.g. --option=-DTILE=32 (repeatable)")
    c.add_argument("-I", "--include", action="append", metavar="DIR", help="add an include directory, e.g. -I include (repeatable)")
    c.add_argument("--json", action="store_true", help="print the layouts as JSON, e.g. for scripts")
    cache = sub.add_parser(
        "cache",
        help="show or clear the disk cache of compiled kernels",
        description="Show or clear the disk cache of compiled kernels (CAIJIT_CACHE_DIR, default ~/.cache/caijit).",
        epilog="examples:\n  python -m caijit cache info\n  python -m caijit cache clear",
        formatter_class=fmt,
    )
    cache.add_argument("action", choices=["info", "clear"], metavar="ACTION", help="info: path, entries and size; clear: remove every entry")
    caijit.bundles.add_parser(sub, fmt)
    return p


def _json_error(e: Exception, status: int) -> int:
    """With --json an error is JSON too, on stdout: its type, message and (a CompileError)
    NVRTC's log."""
    error: dict[str, Any] = {"type": "UsageError" if isinstance(e, UsageError) else type(e).__name__, "message": str(e)}
    if isinstance(e, caijit.CompileError):
        error["log"] = e.log
    print(json.dumps({"error": error}, indent=2))
    return status


def main(argv: Optional[list[str]] = None) -> int:
    p = parser()
    args, extras = p.parse_known_args(argv)
    if extras:
        command = args.cmd + (f" {args.bundle_cmd}" if args.cmd == "bundle" else "")
        _commands(p)[command].error(unknown_options_message(p, command, extras))
    try:
        if args.cmd == "demo":
            return demo()
        if args.cmd == "info":
            return info(args.json)
        if args.cmd == "compile":
            return compile_cmd(args)
        if args.cmd == "bundle":
            return caijit.bundles.run(args)
        if args.action == "clear":
            try:
                print(f"removed {_native.cache_clear()} entries")
            except caijit.CacheError as e:  # CAIJIT_CACHE_DIR names no usable directory
                raise UsageError(str(e)) from None
        else:
            print(_cache_line(_native.cache_info()))
        return 0
    except (UsageError, caijit.ArgumentError) as e:  # a mistake in what was asked
        if getattr(args, "json", False):
            return _json_error(e, 2)
        print(f"python -m caijit {args.cmd}: error: {e}", file=sys.stderr)
        return 2
    except caijit.CaijitError as e:
        if getattr(args, "json", False):
            return _json_error(e, 1)
        print(f"error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`... | head`): stop quietly, as a killed pipeline would.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
