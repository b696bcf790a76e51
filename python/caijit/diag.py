"""Finding a bad kernel: launch-blocking mode, NVTX ranges, line info, the ring of recent
launches and a per-kernel profile. See ``docs/debugging.md``."""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any, Optional, Sequence, TextIO

from . import _native

__all__ = ["debug", "launch_sites", "nvtx", "profile", "Profile", "recent_launches"]


def debug(on: bool = True) -> bool:
    """Debug mode on or off (``CAIJIT_DEBUG=1`` sets it at start-up). Two things:

    * launch-blocking mode (alone: ``CAIJIT_LAUNCH_BLOCKING=1``): every launch waits for
      its kernel, and a fault is raised at the launch that caused it as a
      :class:`caijit.LaunchError` carrying ``.kernel``, ``.grid``, ``.block``,
      ``.arguments`` and ``.site`` (the Python ``file:line`` of the call);
    * bounds checks: kernels launch as their bounds-checked debug instance (compiled
      again with ``CAIJIT_BOUNDS_CHECK`` defined, cached apart), in which every
      ``caijit::Array`` access is checked against the shape; the first violation raises a
      :class:`caijit.ArgumentError` naming the argument, the index and the shape. Raw
      pointer parameters cannot be checked.

    Costs a host synchronisation per launch, and the checks in the kernel. Returns the
    previous state (of launch-blocking mode)."""
    was = _native._set_switch("blocking", bool(on))
    _native._set_switch("bounds", bool(on))
    return was


def nvtx(on: bool = True) -> bool:
    """NVTX ranges named by kernel instance (``axpy<float>``) around every launch, and
    ``caijit compile <name>`` around every compile, on or off (``CAIJIT_NVTX=1``). The
    ranges go to the tool ``NVTX_INJECTION64_PATH`` names (Nsight Systems sets it); without
    one they cost nothing. A tool that cannot be loaded is a warning. Returns the previous
    state."""
    was = _native._set_switch("nvtx", bool(on))
    if on:
        _, why = _native._nvtx_tool()
        if why is not None:
            warnings.warn(f"caijit.nvtx: the NVTX tool could not be attached: {why}", RuntimeWarning, stacklevel=2)
    return was


def launch_sites(on: bool = True) -> bool:
    """Keep the Python ``file:line`` of every kernel launch in the ring of recent launches,
    on or off (``CAIJIT_LAUNCH_SITES=1`` sets it at start-up): a sticky fault then names
    where each recent launch was made. Costs a frame lookup per launch, hence off by
    default; the line is worked out only when a fault is reported. Returns the previous state."""
    return bool(_native._set_switch("sites", bool(on)))


def recent_launches() -> list[dict[str, Any]]:
    """The launches caijit keeps per device (the last 16), newest first: ``kernel``,
    ``grid``, ``block``, ``shared_mem``, ``stream``, ``arguments`` (each formatted),
    ``site`` (the Python ``file:line`` of the launch with :func:`launch_sites` on, else
    ``None``) and ``text`` (the whole record as one line). The same list a sticky fault's
    :class:`caijit.LaunchError` carries as ``.recent_launches``."""
    return _native.recent_launches()


def _options(options: Sequence[str], lineinfo: Optional[bool]) -> list[str]:
    """``options`` with ``-lineinfo`` added when asked (``lineinfo=True``, or ``None`` and
    ``CAIJIT_LINEINFO=1``)."""
    out = list(options)
    if lineinfo is None:
        lineinfo = _native._lineinfo_by_env()
    if lineinfo and "-lineinfo" not in out:
        out.append("-lineinfo")
    return out


class Profile:
    """Times every caijit launch on the GPU while the ``with`` block runs (two events per
    launch, on the launch's stream; launches inside a CUDA graph capture are counted as
    ``untimed``). Leaving the block waits for the timed launches. One profile at a time.

    >>> with caijit.profile() as p:            # doctest: +SKIP
    ...     k[grid, block](x, y)
    >>> p.table()                              # doctest: +SKIP
    """

    def __init__(self) -> None:
        self._native = _native.Profile()
        self.rows: list[dict[str, Any]] = []

    def __enter__(self) -> "Profile":
        self._native.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.rows = self._native.finish()

    def table(self, file: Optional[TextIO] = None) -> str:
        """Print (to ``file``, else standard output) and return one line per kernel
        instance: launches, total and mean GPU time, total host enqueue time."""
        lines = [f"{'kernel':<40} {'device':>6} {'launches':>9} {'gpu total ms':>13} {'gpu mean us':>12} {'host ms':>9}"]
        for r in sorted(self.rows, key=lambda r: -r["gpu_ms"]):
            mean_us = 1e3 * r["gpu_ms"] / r["launches"] if r["launches"] else float("nan")
            untimed = f" (+{r['untimed']} untimed)" if r["untimed"] else ""
            lines.append(
                f"{r['kernel']:<40} {r['device']:>6} {r['launches']:>9} {r['gpu_ms']:>13.4f} {mean_us:>12.2f} {r['host_ms']:>9.4f}{untimed}"
            )
        text = "\n".join(lines)
        print(text, file=file if file is not None else sys.stdout)
        return text

    def to_json(self) -> str:
        """The rows as JSON: a list of ``{kernel, device, launches, untimed, gpu_ms,
        host_ms}``."""
        return json.dumps(self.rows)


def profile() -> Profile:
    """``with caijit.profile() as p:`` — see :class:`Profile`."""
    return Profile()
