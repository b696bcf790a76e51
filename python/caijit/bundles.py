"""Kernel bundles: ship compiled kernels without NVRTC (see ``docs/bundles.md``).

Record the kernel instances a run uses, bake them for every architecture, load the bundle
where NVRTC is absent::

    CAIJIT_RECORD=manifest.json python app.py
    python -m caijit bundle build manifest.json --arch sm_80,sm_90,sm_100,sm_120 -o app.caijit
    CAIJIT_BUNDLES=app.caijit python app.py        # or caijit.load_bundle("app.caijit")
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from typing import Any, Iterator, Optional, Union

from . import _native

__all__ = ["load_bundle", "loaded_bundles", "record", "bundle_info", "build"]

PathLike = Union[str, "os.PathLike[str]"]

#: The precompiled kernel library a wheel carries (``caijit.ops`` then needs no NVRTC).
OPS_BUNDLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ops.caijit")

#: The architectures it is baked for (CUBINs; PTX of the newest for newer GPUs).
OPS_ARCHS = ["sm_80", "sm_90", "sm_100", "sm_120"]


def load_bundle(path: PathLike) -> dict[str, Any]:
    """Read the bundle at ``path`` (its table of contents, index and every program record
    are verified now, a program's other sections when one of its instances is first looked
    up) and look every later kernel instance up in it (before compiling, after the bundles
    of ``CAIJIT_BUNDLES``). Returns a summary: ``path``, ``archs``, ``nvrtc``, ``programs``,
    ``kernels``. A corrupt, truncated or other-version file, or one that is not a regular
    file, raises :class:`caijit.BundleError` and is not loaded."""
    return _native.load_bundle(os.fspath(path))


def loaded_bundles() -> list[dict[str, Any]]:
    """Summaries of the bundles loaded (those of ``CAIJIT_BUNDLES`` first)."""
    return _native.loaded_bundles()


@contextlib.contextmanager
def record(path: PathLike) -> Iterator[None]:
    """Within the block, record every kernel instance compiled or loaded into the manifest
    at ``path`` (JSON lines, appended; several processes may record into one file)."""
    before = _native.record(os.fspath(path))
    try:
        yield
    finally:
        _native.record(before)


def bundle_info(path: PathLike) -> str:
    """The listing ``python -m caijit bundle info`` prints (every section is verified; the
    bundle is not loaded)."""
    return _native.bundle_info(os.fspath(path))


def build(
    manifests: Union[PathLike, list[PathLike], None],
    files: list[PathLike],
    archs: list[str],
    output: PathLike,
    *,
    ptx: bool = True,
    jobs: Optional[int] = None,
    progress: bool = False,
    ops: bool = False,
    instances: Optional[list[str]] = None,
    merge: Optional[int] = None,
) -> tuple[int, int, int]:
    """Compile every instance of ``manifests`` (one or several) and every kernel of
    ``files`` for ``archs`` into the bundle ``output``; returns ``(programs read, programs
    in the bundle, bytes)`` (the instances of one source are compiled as one program).
    ``instances``: template instances (name expressions, ``"axpy<float>"``) to compile
    from every file of ``files``, as a launch that deduces them looks them up.
    ``ops``: also every instance of the kernel library (``caijit.ops``). ``merge``: at most
    this many instances of one source per compiled program (default 4; 1: one module per
    instance, the smallest first launch and the largest bundle). Needs NVRTC."""
    if manifests is None:
        manifests = []
    elif not isinstance(manifests, list):
        manifests = [manifests]
    return _native.bundle_build(
        [os.fspath(m) for m in manifests],
        [os.fspath(f) for f in files],
        list(archs),
        os.fspath(output),
        ptx=ptx,
        jobs=jobs,
        progress=progress,
        ops=ops,
        instances=list(instances or []),
        merge=merge,
    )


# ----- python -m caijit bundle -----

def template_line(name: str, template_params: list[str], param_types: list[str], examples: list[str]) -> str:
    example = f"{name}<{', '.join(examples)}>"
    return (
        f"{name}<{', '.join(template_params)}>({', '.join(param_types)}): a template, not compiled; "
        f"instantiate it with --instantiate '{example}'"
    )


def uninstantiated_templates(source: str, exprs: list[str]) -> list[str]:
    """The lines `compile` and `bundle build` print for the templates of ``source`` that no
    expression of ``exprs`` (``axpy<float>``, an overload cast) instantiates."""
    out = []
    for name, _, template_params, param_types, examples in _native.declarations(source):
        named = re.compile(rf"(?<![\w:]){re.escape(name)}\s*<")
        if template_params and not any(named.search(e) for e in exprs):
            out.append(template_line(name, template_params, param_types, examples))
    return out


EPILOG = """examples:
  CAIJIT_RECORD=manifest.json python app.py
  python -m caijit bundle build manifest.json --arch sm_80,sm_90,sm_100,sm_120 -o app.caijit
  python -m caijit bundle build kernels.cu --arch sm_90 -o kernels.caijit
  python -m caijit bundle build axpy.cu --instantiate 'axpy<float>' --instantiate 'axpy<double>' --arch sm_90 -o axpy.caijit
  python -m caijit bundle info app.caijit
  CAIJIT_BUNDLES=app.caijit python app.py"""


BUILD_EPILOG = """examples:
  python -m caijit bundle build manifest.json --arch sm_80,sm_90,sm_100,sm_120 -o app.caijit
  python -m caijit bundle build axpy.cu --instantiate 'axpy<float>' --arch sm_90 -o axpy.caijit
  python -m caijit bundle build --ops --arch sm_90 -o ops.caijit"""


def add_parser(sub: Any, fmt: Any) -> None:
    """The ``bundle`` command of ``python -m caijit``."""
    b = sub.add_parser(
        "bundle",
        help="bake recorded kernel instances into a bundle that launches without NVRTC, or list one",
        description="Bake the kernel instances a run recorded (CAIJIT_RECORD=manifest.json) and the kernels of .cu files "
        "into one bundle for several architectures, or list a bundle.",
        epilog=EPILOG,
        formatter_class=fmt,
    )
    bs = b.add_subparsers(dest="bundle_cmd", metavar="ACTION", required=True)
    build_p = bs.add_parser(
        "build",
        help="compile a manifest's instances (and .cu files) into a bundle",
        description="Compile the kernel instances of manifests (CAIJIT_RECORD) and the kernels of .cu files for several "
        "architectures into one bundle. Templates of a .cu file are compiled only when instantiated (--instantiate).",
        epilog=BUILD_EPILOG,
        formatter_class=fmt,
    )
    build_p.add_argument("inputs", nargs="*", metavar="INPUT", help="manifests (recorded) and/or .cu files, e.g. manifest.json")
    build_p.add_argument(
        "--instantiate",
        "--instance",
        dest="instantiate",
        action="append",
        default=[],
        metavar="EXPR",
        help="a template instance to compile from each .cu file given, e.g. --instantiate 'axpy<float>' "
        "(repeatable; --instance is the same)",
    )
    build_p.add_argument("--ops", action="store_true", help="also every instance of the kernel library (caijit.ops), every dtype")
    build_p.add_argument("--arch", required=True, metavar="ARCHS", help="comma-separated architectures, e.g. sm_80,sm_90,sm_100,sm_120")
    build_p.add_argument("--ptx", dest="ptx", action="store_true", default=True, help="also store PTX of the newest architecture (default)")
    build_p.add_argument("--no-ptx", dest="ptx", action="store_false", help="store CUBINs only (no forward compatibility)")
    build_p.add_argument("-j", "--jobs", type=_at_least_one, metavar="N", help="compilations at once (default: one per CPU)")
    build_p.add_argument(
        "--merge",
        type=_at_least_one,
        metavar="N",
        help="at most N instances of one source per module (default 4; 1: one module per instance, the fastest first "
        "launch and the largest bundle)",
    )
    build_p.add_argument("-o", "--output", required=True, metavar="FILE", help="the bundle to write, e.g. app.caijit")
    info_p = bs.add_parser(
        "info",
        help="verify a bundle and list its programs, kernels and parameters",
        description="Verify every section of a bundle and list its programs, kernels and parameters.",
        epilog="example:\n  python -m caijit bundle info app.caijit",
        formatter_class=fmt,
    )
    info_p.add_argument("bundle", metavar="FILE", help="the bundle, e.g. app.caijit")


def _at_least_one(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return n


def run(args: argparse.Namespace) -> int:
    if args.bundle_cmd == "info":
        print(bundle_info(args.bundle), end="")
        return 0
    manifests = [i for i in args.inputs if not i.endswith((".cu", ".cuh"))]
    files = [i for i in args.inputs if i.endswith((".cu", ".cuh"))]
    archs = [a.strip() for a in args.arch.split(",") if a.strip()]
    from . import _read_text

    # Templates are compiled only when instantiated: say which of the files' are left out,
    # as `compile` does.
    for f in files:
        for line in uninstantiated_templates(_read_text(f), args.instantiate):
            print(f"warning: {f}: {line}", file=sys.stderr)
    read, baked, size = build(
        manifests,
        files,
        archs,
        args.output,
        ptx=args.ptx,
        jobs=args.jobs,
        progress=sys.stderr.isatty(),
        ops=args.ops,
        instances=args.instantiate,
        merge=args.merge,
    )
    print(f"wrote {args.output}: {read} programs as {baked} for {', '.join(archs)}, {size} bytes")
    return 0
