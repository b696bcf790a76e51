"""Autotuning: of several launch configurations (and template instances) of one kernel,
the fastest for each tuning key, measured on the GPU once, remembered in caijit's disk
cache, and launched from then on.

>>> tuned = caijit.autotune(                                            # doctest: +SKIP
...     k,
...     configs=[caijit.Config(block=b) for b in (128, 256, 512, 1024)],
...     key=lambda x, y, n: n.bit_length(),
...     grid=lambda cfg, x, y, n: (n + cfg.block - 1) // cfg.block,
... )
>>> tuned(x, y, n)             # tuned at the first call of each key, then launched
>>> print(tuned.result(x, y, n).table())
"""

from __future__ import annotations

import math
import operator
from typing import Any, Callable, Dict, Hashable, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import _native
from .errors import ArgumentError

Dims = Union[int, Sequence[int]]


class Config(NamedTuple):
    """One candidate: a block size, dynamic shared memory in bytes, template arguments of
    the kernel's explicit instance (integers and dtype names; none: the instance the
    arguments select), and a grid (fixed, a function of the arguments, or the launcher's
    ``grid``)."""

    block: Dims = 256
    shared_mem: int = 0
    template: Tuple[Union[int, str], ...] = ()
    grid: Optional[Union[Dims, Callable[..., Dims]]] = None

    def label(self) -> str:
        """What names the candidate across calls (its grid may follow the arguments)."""
        grid = "" if self.grid is None or callable(self.grid) else f" grid={_dims(self.grid, 'grid')}"
        template = f" template=<{', '.join(map(str, self.template))}>" if self.template else ""
        return f"block={_dims(self.block, 'block')} shared_mem={self.shared_mem}{template}{grid}"


def _dims(d: Any, what: str) -> Tuple[int, int, int]:
    """1 to 3 positive integers (Python or NumPy) as three."""
    try:
        t = (operator.index(d),) if not isinstance(d, (tuple, list)) else tuple(operator.index(n) for n in d)
    except TypeError:
        t = ()
    if not 1 <= len(t) <= 3 or not all(n >= 1 for n in t):
        raise ArgumentError(f"autotune: {what} must be 1 to 3 positive integers, got {d!r}")
    return (t + (1, 1))[:3]  # type: ignore[return-value]


class Result(NamedTuple):
    """A tuning: each candidate's label and its trial (times in µs, or why it failed), the
    winner's position, whether it was read from the disk cache, and where it came from:
    ``"measured"`` (timed by this process), ``"disk"`` (the disk cache), ``"bundle"``
    (shipped in a loaded bundle) or ``"off"`` (``CAIJIT_AUTOTUNE=0``: the first candidate,
    untimed)."""

    candidates: List[str]
    trials: List[Dict[str, Any]]
    best: int
    from_disk: bool
    text: str
    source: str = "measured"

    def table(self) -> str:
        return self.text

    @property
    def config(self) -> str:
        return self.candidates[self.best]


def _default_key(args: Sequence[Any]) -> Hashable:
    """Each array argument's shape and dtype (scalars do not count)."""
    out = []
    for a in args:
        shape = getattr(a, "shape", None)
        if shape is not None and not isinstance(a, (int, float, bool)):
            out.append((tuple(shape), str(getattr(a, "dtype", ""))))
    return tuple(out)


def _size(args: Sequence[Any]) -> int:
    for a in args:
        shape = getattr(a, "shape", None)
        if shape is not None and not isinstance(a, (int, float, bool)):
            return max(1, int(math.prod(shape)))
    raise ArgumentError("autotune: no array argument to size the default grid by; give grid=")


class Autotuned:
    """A launcher that launches the fastest of ``configs`` for the call's tuning key (made
    by :func:`autotune`): ``tuned(*args, stream=None)``."""

    def __init__(
        self,
        kernel: Any,
        configs: Iterable[Union[Config, Dict[str, Any]]],
        key: Optional[Callable[..., Hashable]],
        grid: Optional[Callable[..., Dims]],
    ) -> None:
        self.kernel = kernel
        self.configs = [c if isinstance(c, Config) else Config(**c) for c in configs]
        if not self.configs:
            raise ArgumentError("autotune: configs is empty")
        labels = [c.label() for c in self.configs]
        twice = sorted({lab for lab in labels if labels.count(lab) > 1})
        if twice:
            raise ArgumentError(f"autotune: configs repeat {twice}")
        self.key, self.grid = key, grid
        self._labels = labels
        self._tuner = _native.Tuner()

    def _candidates(self, args: Sequence[Any]) -> List[Tuple[str, Tuple[int, int, int], Tuple[int, int, int], int, Tuple[Any, ...]]]:
        out = []
        for c, label in zip(self.configs, self._labels):
            block = _dims(c.block, "block")
            if callable(c.grid):
                grid = _dims(c.grid(*args), "grid")
            elif c.grid is not None:
                grid = _dims(c.grid, "grid")
            elif self.grid is not None:
                grid = _dims(self.grid(c, *args), "grid")
            else:
                grid = _dims(-(-_size(args) // (block[0] * block[1] * block[2])), "grid")
            out.append((label, grid, block, c.shared_mem, tuple(c.template)))
        return out

    def _key(self, args: Sequence[Any]) -> str:
        return repr(self.key(*args) if self.key is not None else _default_key(args))

    def __call__(self, *args: Any, stream: Any = None) -> None:
        self._tuner.launch(self.kernel, self._key(args), self._candidates(args), args, stream)

    def result(self, *args: Any, stream: Any = None) -> Result:
        """The tuning for these arguments' key (tuned now when it is not known)."""
        r = self._tuner.result(self.kernel, self._key(args), self._candidates(args), args, stream)
        return Result(r["candidates"], r["trials"], r["best"], r["source"] == "disk", r["table"], r["source"])

    def __repr__(self) -> str:
        return f"caijit.Autotuned({self.kernel.name!r}, {len(self.configs)} configs)"


def autotune(
    kernel: Any,
    configs: Iterable[Union[Config, Dict[str, Any]]],
    *,
    key: Optional[Callable[..., Hashable]] = None,
    grid: Optional[Callable[..., Dims]] = None,
) -> Autotuned:
    """A launcher of ``kernel`` that, for each tuning key, times every one of ``configs`` on
    the GPU once (on scratch copies of the arrays the kernel writes), remembers the fastest
    in caijit's disk cache, and launches it: ``tuned(*args, stream=None)``.

    ``key(*args)`` buckets the calls (default: each array's shape and dtype); ``grid(config,
    *args)`` gives each config's grid where the config has none (default: one thread per
    element of the first array). A config that cannot be compiled or launched is skipped
    with its reason (``tuned.result(*args).table()``). ``CAIJIT_AUTOTUNE=0`` launches the
    first config, untimed."""
    return Autotuned(kernel, configs, key, grid)
