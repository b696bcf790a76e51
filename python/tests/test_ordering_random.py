"""Randomised stream-ordering tests: a hypothesis state machine drives caijit launches,
``caijit.ops`` calls, exports, frees and CUDA graph replays over arrays of every producer
(caijit, CuPy, PyTorch, Numba, a DLPack-only wrapper, a plain CAI dict object) on every kind
of stream (legacy, per-thread, caijit.Stream, foreign non-blocking and blocking streams,
stream objects dropped while their arrays live), against a host-side model of every
array's values.

Views move too: ``caijit.as_cuda_array`` views of caijit arrays (and views of those views)
are launched on another thread, where a view of a per-thread-default-stream array must be
refused as the array itself is; and DLPack-only arrays are read by launches captured into
CUDA graphs, which the producer's handshake must not break.

Nothing synchronises the host between the steps that could race: slow kernels (spins) make
missing stream edges show, freed memory is at once reallocated and scribbled over (-1) by
each library, and values are only read at check steps, each through its library on the
array's own stream (``.get()``, ``.cpu()``, ``copy_to_host()``), which hypothesis places at
random too. Values are small integers in float32, so the model compares exactly.

Environment:
    CAIJIT_ORDERING_EXAMPLES  examples (state machine runs) per test run; default 200
    CAIJIT_ORDERING_STEPS     steps per example; default 12
    CAIJIT_ORDERING_SEED      the seed (default: a fresh one, printed in the summary)
    CAIJIT_ORDERING_REPORT    a file the one-line summary is appended to
    CAIJIT_ORDERING_TORCH_CAI_RAW=1  use ``torch.as_tensor`` of a caijit array without the
                              CAI v3 consumer's wait on the exported stream, which PyTorch
                              leaves out (it ignores the ``stream`` key), instead of doing
                              that wait for it
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import os
import random
import threading
import warnings
from typing import Any, ClassVar, Iterator, Optional, Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    consumes,
    initialize,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

import caijit
import caijit.ops as ops

pytestmark = pytest.mark.gpu


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


EXAMPLES = _env_int("CAIJIT_ORDERING_EXAMPLES", 200)
STEPS = _env_int("CAIJIT_ORDERING_STEPS", 12)
SEED: Optional[int] = _env_int("CAIJIT_ORDERING_SEED", -1) if os.environ.get("CAIJIT_ORDERING_SEED", "").strip() else None
REPORT = os.environ.get("CAIJIT_ORDERING_REPORT", "").strip() or None
TORCH_CAI_RAW = os.environ.get("CAIJIT_ORDERING_TORCH_CAI_RAW") == "1"

PRODUCERS = ("caijit", "cupy", "torch", "numba", "dlpack", "plain")
#: Streams an array can be made on; "dropped": a fresh foreign stream object that only
#: caijit keeps alive once the array is made.
STREAM_KINDS = ("legacy", "per_thread", "caijit", "cupy_nonblocking", "cupy_blocking", "torch", "dropped")
POOL_KINDS = STREAM_KINDS[:-1]
#: The stream a launch or op is given ("none": caijit chooses by the stream protocol).
LAUNCH_STREAMS = ("none",) + POOL_KINDS
#: Streams a consumer library works on (PyTorch refuses DLPack on the per-thread stream).
CONSUMER_STREAMS = ("legacy", "caijit", "cupy_nonblocking", "cupy_blocking", "torch")
CONSUMERS = ("torch_cai", "torch_dlpack", "cupy_cai", "cupy_dlpack", "numba_cai")
OPS = ("fill", "scale", "add", "axpy", "sum")
#: Spin lengths in clock cycles (the H200 runs ~1.7 GHz: 1e6 cycles ≈ 0.6 ms).
CYCLES = (0, 200_000, 1_000_000, 2_000_000)
BLOCK = 256
#: Model values stay below this, so float32 arithmetic on them is exact.
EXACT = float(2**22)

KERNELS = r"""
// Busy-waits `cycles` clock cycles: a slow producer, when a write follows on its stream.
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}
// Every block waits `cycles`, then y = v: a slow write.
extern "C" __global__ void slow_fill(float* y, float v, long long n, long long cycles) {
    if (threadIdx.x == 0) { long long t0 = clock64(); while (clock64() - t0 < cycles) {} }
    __syncthreads();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) y[i] = v;
}
// Every block waits `cycles` before it reads x, then y = a x + b (x may be y).
extern "C" __global__ void slow_axpb(const float* x, float* y, float a, float b, long long n, long long cycles) {
    if (threadIdx.x == 0) { long long t0 = clock64(); while (clock64() - t0 < cycles) {} }
    __syncthreads();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) y[i] = a * x[i] + b;
}
// y += a x: captured into CUDA graphs (N replays, N times the effect).
extern "C" __global__ void accumulate(const float* x, float* y, float a, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) y[i] += a * x[i];
}
"""


def pattern(n: int, base: int) -> np.ndarray:
    """The values arrays are made with: small distinct integers."""
    return (np.arange(n) % 16 + base).astype(np.float32)


def fits(values: np.ndarray) -> bool:
    return bool(np.abs(values).max(initial=0.0) < EXACT)


@dataclasses.dataclass
class RunStats:
    examples: int = 0
    steps: int = 0
    seed: int = 0


RUN = RunStats()


# ------------------------------------------------------------------------ libraries


class Libs:
    """The array libraries found on this machine, imported lazily (CPU CI has none)."""

    def __init__(self) -> None:
        self.missing: dict[str, str] = {}
        self.torch: Any = self._load("torch", self._torch)
        self.cupy: Any = self._load("cupy", self._cupy)
        self.numba: Any = self._load("numba", self._numba)  # numba.cuda

    def _load(self, name: str, load: Any) -> Any:
        try:
            return load()
        except Exception as e:  # noqa: BLE001 - reported in the summary line
            self.missing[name] = f"{type(e).__name__}: {e}"
            return None

    @staticmethod
    def _torch() -> Any:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        return torch

    @staticmethod
    def _cupy() -> Any:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
        return cupy

    @staticmethod
    def _numba() -> Any:
        if not hasattr(np, "row_stack"):  # Numba 0.68 imports numpy.row_stack (gone in NumPy 2.5)
            setattr(np, "row_stack", np.vstack)
        from numba import cuda

        if not cuda.is_available():
            raise RuntimeError("numba.cuda.is_available() is False")
        return cuda

    @property
    def names(self) -> list[str]:
        return [n for n in ("torch", "cupy", "numba") if getattr(self, n) is not None]

    def synchronize(self) -> None:
        """Wait for the whole device (only where a step means to: graph capture)."""
        if self.torch is not None:
            self.torch.cuda.synchronize()
        elif self.cupy is not None:
            self.cupy.cuda.runtime.deviceSynchronize()


class _StreamHandle:
    """A raw stream handle speaking the CUDA stream protocol (for CuPy's
    ``Stream.from_external``), keeping the object that owns the stream alive."""

    def __init__(self, handle: int, owner: Any) -> None:
        self.handle = handle
        self.owner = owner

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


@dataclasses.dataclass(eq=False)
class PoolStream:
    """A stream of one kind: its CAI value and what caijit is given for it (1, 2, the stream
    object, or the bare handle once only caijit keeps the object alive)."""

    kind: str
    handle: int
    obj: Any
    device: int
    libs: Libs
    #: Whether PyTorch or CuPy have used it (their allocators keep memory by stream handle).
    foreign: bool = False

    def __repr__(self) -> str:
        return self.kind if self.handle in (1, 2) else f"{self.kind}:{self.handle:#x}"

    def borrowed(self) -> PoolStream:
        return dataclasses.replace(self, obj=self.handle)

    def cupy(self) -> Any:
        cp = self.libs.cupy
        self.foreign = True
        if self.handle == 1:
            return cp.cuda.Stream.null
        if self.handle == 2:
            return cp.cuda.Stream.ptds
        if isinstance(self.obj, cp.cuda.Stream):
            return self.obj
        if hasattr(cp.cuda.Stream, "from_external"):  # CuPy 14: ExternalStream is deprecated
            return cp.cuda.Stream.from_external(_StreamHandle(self.handle, self.obj))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return cp.cuda.ExternalStream(self.handle)

    def torch(self) -> Any:
        torch = self.libs.torch
        self.foreign = True
        if self.handle == 1:
            return torch.cuda.default_stream()
        if isinstance(self.obj, torch.cuda.Stream):
            return self.obj
        return torch.cuda.ExternalStream(self.handle)

    def numba(self) -> Any:
        nc = self.libs.numba
        if self.handle == 1:
            return nc.legacy_default_stream()
        if self.handle == 2:
            return nc.per_thread_default_stream()
        return nc.external_stream(self.handle)


class StreamPool:
    """One device's stream of each kind, kept for the whole module (PyTorch's and CuPy's
    allocators cache memory per stream: long-lived streams keep them warm)."""

    def __init__(self, libs: Libs, device: int) -> None:
        self.libs = libs
        self.device = device
        self.streams: dict[str, PoolStream] = {kind: self.new(kind) for kind in POOL_KINDS}

    def available(self, kind: str) -> str:
        """The kind used for ``kind`` here (foreign streams only on device 0, and only with
        their library)."""
        if self.device != 0:
            return kind if kind in ("legacy", "per_thread", "caijit") else "caijit"
        if kind.startswith("cupy") and self.libs.cupy is None:
            kind = "torch"
        if kind == "torch" and self.libs.torch is None:
            kind = "cupy_nonblocking" if self.libs.cupy is not None else "caijit"
        if kind == "dropped" and self.libs.cupy is None and self.libs.torch is None:
            kind = "caijit"
        return kind

    def new(self, kind: str) -> PoolStream:
        kind = self.available(kind)
        if kind == "legacy":
            return PoolStream(kind, 1, 1, self.device, self.libs)
        if kind == "per_thread":
            return PoolStream(kind, 2, 2, self.device, self.libs)
        if kind == "caijit":
            s = caijit.Stream(self.device)
            return PoolStream(kind, s.handle, s, self.device, self.libs)
        if kind in ("cupy_nonblocking", "cupy_blocking") or (kind == "dropped" and self.libs.cupy is not None):
            c = self.libs.cupy.cuda.Stream(non_blocking=kind != "cupy_blocking")
            return PoolStream(kind, int(c.ptr), c, self.device, self.libs)
        t = self.libs.torch.cuda.Stream()  # "torch", or "dropped" without CuPy
        return PoolStream(kind, int(t.cuda_stream), t, self.device, self.libs)

    def get(self, kind: str) -> PoolStream:
        """The pool's stream of ``kind``; for "dropped", a fresh stream object."""
        kind = self.available(kind)
        return self.new(kind) if kind == "dropped" else self.streams[kind]

    def live(self, stream: PoolStream) -> PoolStream:
        """``stream`` if it is still certainly alive, else the legacy stream (a stream
        object that only a freed array kept alive may be gone)."""
        if not isinstance(stream.obj, int) or stream.handle in (1, 2):
            return stream
        for s in self.streams.values():
            if s.handle == stream.handle:
                return s
        return self.streams["legacy"]


# ------------------------------------------------------------------------ producers


class PlainCAI:
    """An object that carries nothing but a CAI dict (the owner's memory, on the owner's
    stream), keeping its owner alive."""

    def __init__(self, owner: Any, ptr: int, n: int, stream: int, owner_lib: str) -> None:
        self.owner = owner
        self.owner_lib = owner_lib
        self.__cuda_array_interface__ = {
            "shape": (n,),
            "typestr": "<f4",
            "data": (ptr, False),
            "version": 3,
            "strides": None,
            "stream": stream,
        }


class AsInterface:
    """A CuPy array or PyTorch tensor read through a CUDA Array Interface alone (as any CAI
    producer: an op's result on it is caijit's), with the producer stream caijit's fast path
    for it reads: the library's current stream (CuPy exports it; PyTorch's interface has
    none, so it is added). Anything else as it is."""

    def __init__(self, obj: Any, lib: str) -> None:
        self.obj, self.lib = obj, lib

    @property
    def __cuda_array_interface__(self) -> Any:
        d = dict(self.obj.__cuda_array_interface__)
        if self.lib == "torch":
            import torch

            d["stream"], d["version"] = torch.cuda.current_stream(self.obj.device).cuda_stream or 1, 3
        return d

    @staticmethod
    def of(obj: Any) -> Any:
        lib = type(obj).__module__.split(".")[0]
        return AsInterface(obj, lib) if lib in ("cupy", "torch") and hasattr(obj, "__cuda_array_interface__") else obj


class DLPackOnly:
    """Speaks nothing but DLPack (no ``__cuda_array_interface__``): forwards to the tensor
    it wraps."""

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None) -> Any:
        kw: dict[str, Any] = {}
        if max_version is not None:
            kw["max_version"] = max_version
        if dl_device is not None:
            kw["dl_device"] = dl_device
        if copy is not None:
            kw["copy"] = copy
        return self.tensor.__dlpack__(stream=stream, **kw)

    def __dlpack_device__(self) -> Any:
        return self.tensor.__dlpack_device__()


class Adapter(abc.ABC):
    """How one producer makes an array on a stream, reads it back (synchronising, on that
    stream), writes it with its own library (where it has a write: `fill`), and reallocates
    freed memory."""

    name: ClassVar[str] = ""
    #: Whose allocator recycles the memory when the array dies.
    memory: ClassVar[str] = ""
    #: The library whose *current* stream is the array's producer stream when it is used
    #: ("": the array names its stream itself).
    current: ClassVar[str] = ""
    #: Stream kinds the producer's arrays live on, and substitutes for the others.
    homes: ClassVar[tuple[str, ...]] = STREAM_KINDS
    remap: ClassVar[dict[str, str]] = {}

    def __init__(self, libs: Libs) -> None:
        self.libs = libs

    def home_kind(self, kind: str, device: int) -> str:
        if device != 0:
            return kind if kind in ("legacy", "per_thread", "caijit") else "caijit"
        return kind if kind in self.homes else self.remap.get(kind, "legacy")

    def memory_of(self, obj: Any) -> str:
        return self.memory

    def current_lib(self) -> str:
        return self.current

    @abc.abstractmethod
    def make(self, n: int, base: int, home: PoolStream) -> Any: ...

    @abc.abstractmethod
    def to_host(self, obj: Any, home: PoolStream) -> np.ndarray: ...

    def fill(self, obj: Any, value: int, home: PoolStream) -> None:
        """Write `value` everywhere with the producer's own library (those that have a
        write of their own override this; for the others slow writes are caijit's)."""
        raise TypeError(f"{self.name} arrays have no write of their own")

    @property
    def can_fill(self) -> bool:
        return type(self).fill is not Adapter.fill

    def scribble(self, n: int, home: PoolStream) -> None:
        """Allocate ``n`` floats on ``home`` and write -1 over them (then free them)."""


class CaijitAdapter(Adapter):
    name = "caijit"
    memory = "caijit"

    def make(self, n: int, base: int, home: PoolStream) -> Any:
        return caijit.to_device(pattern(n, base), stream=home.obj, device=home.device)

    def to_host(self, obj: Any, home: PoolStream) -> np.ndarray:
        return np.asarray(obj.copy_to_host())

    def fill(self, obj: Any, value: int, home: PoolStream) -> None:
        ops.fill(obj, float(value))  # on the array's own stream

    def scribble(self, n: int, home: PoolStream) -> None:
        a = caijit.empty(n, stream=home.obj, device=home.device)
        ops.fill(a, -1.0)


class CupyAdapter(Adapter):
    name = "cupy"
    memory = "cupy"
    current = "cupy"
    homes = ("legacy", "per_thread", "caijit", "cupy_nonblocking", "cupy_blocking", "torch")
    remap = {"dropped": "cupy_nonblocking"}

    def make(self, n: int, base: int, home: PoolStream) -> Any:
        cp = self.libs.cupy
        with home.cupy():
            return ((cp.arange(n, dtype=cp.float32) % 16) + base).astype(cp.float32, copy=False)

    def to_host(self, obj: Any, home: PoolStream) -> np.ndarray:
        with home.cupy():
            return np.asarray(obj.get())

    def fill(self, obj: Any, value: int, home: PoolStream) -> None:
        with home.cupy():
            obj.fill(value)

    def scribble(self, n: int, home: PoolStream) -> None:
        cp = self.libs.cupy
        with home.cupy():
            cp.full(n, -1, dtype=cp.float32)


class TorchAdapter(Adapter):
    name = "torch"
    memory = "torch"
    current = "torch"
    # Not the per-thread stream: PyTorch refuses it as a DLPack stream.
    homes = ("legacy", "caijit", "cupy_nonblocking", "cupy_blocking", "torch")
    remap = {"per_thread": "torch", "dropped": "torch"}

    def make(self, n: int, base: int, home: PoolStream) -> Any:
        torch = self.libs.torch
        with torch.cuda.stream(home.torch()):
            return torch.arange(n, dtype=torch.float32, device="cuda").remainder_(16).add_(base)

    def to_host(self, obj: Any, home: PoolStream) -> np.ndarray:
        with self.libs.torch.cuda.stream(home.torch()):
            return np.asarray(obj.cpu().numpy())

    def fill(self, obj: Any, value: int, home: PoolStream) -> None:
        with self.libs.torch.cuda.stream(home.torch()):
            obj.fill_(value)

    def scribble(self, n: int, home: PoolStream) -> None:
        torch = self.libs.torch
        with torch.cuda.stream(home.torch()):
            torch.full((n,), -1.0, device="cuda")


class NumbaAdapter(Adapter):
    name = "numba"
    memory = "numba"
    homes = ("legacy", "per_thread", "caijit", "cupy_nonblocking", "cupy_blocking", "torch")
    remap = {"dropped": "caijit"}

    def make(self, n: int, base: int, home: PoolStream) -> Any:
        return self.libs.numba.to_device(pattern(n, base), stream=home.numba())

    def to_host(self, obj: Any, home: PoolStream) -> np.ndarray:
        s = home.numba()
        h = obj.copy_to_host(stream=s)
        s.synchronize()
        return np.asarray(h)


class DLPackAdapter(Adapter):
    """A DLPack-only wrapper of a PyTorch tensor (of a CuPy array without PyTorch)."""

    name = "dlpack"

    def __init__(self, libs: Libs, backing: Adapter) -> None:
        super().__init__(libs)
        self.backing = backing

    def home_kind(self, kind: str, device: int) -> str:
        return self.backing.home_kind(kind, device)

    def memory_of(self, obj: Any) -> str:
        return self.backing.memory

    def current_lib(self) -> str:
        return self.backing.current

    def make(self, n: int, base: int, home: PoolStream) -> Any:
        return DLPackOnly(self.backing.make(n, base, home))

    def to_host(self, obj: Any, home: PoolStream) -> np.ndarray:
        return self.backing.to_host(obj.tensor, home)

    def fill(self, obj: Any, value: int, home: PoolStream) -> None:
        self.backing.fill(obj.tensor, value, home)


class PlainAdapter(Adapter):
    """A plain CAI dict object over PyTorch memory (caijit memory where PyTorch cannot
    live on the stream, or is missing): the dict's stream is the owner's."""

    name = "plain"

    def __init__(self, libs: Libs, caijit_: Adapter, torch_: Optional[Adapter]) -> None:
        super().__init__(libs)
        self.owners: dict[str, Adapter] = {"caijit": caijit_}
        if torch_ is not None:
            self.owners["torch"] = torch_

    def _owner_lib(self, home: PoolStream) -> str:
        t = self.owners.get("torch")
        return "torch" if t is not None and home.device == 0 and home.kind in t.homes else "caijit"

    def memory_of(self, obj: Any) -> str:
        return str(obj.owner_lib)

    def make(self, n: int, base: int, home: PoolStream) -> Any:
        lib = self._owner_lib(home)
        owner = self.owners[lib].make(n, base, home)
        ptr = int(owner.data_ptr()) if lib == "torch" else int(owner.ptr)
        return PlainCAI(owner, ptr, n, home.handle, lib)

    def to_host(self, obj: Any, home: PoolStream) -> np.ndarray:
        return self.owners[obj.owner_lib].to_host(obj.owner, home)

    def fill(self, obj: Any, value: int, home: PoolStream) -> None:
        self.owners[obj.owner_lib].fill(obj.owner, value, home)


# ------------------------------------------------------------------------ environment


class Env:
    """Libraries, kernels and producers, shared by every example of the module."""

    def __init__(self) -> None:
        self.libs = Libs()
        self.devices = caijit.device_count()
        m = caijit.module(KERNELS)
        self.spin = m["spin"]
        self.slow_fill = m["slow_fill"]
        self.slow_axpb = m["slow_axpb"]
        self.accumulate = m["accumulate"]
        c = CaijitAdapter(self.libs)
        self.adapters: dict[str, Adapter] = {"caijit": c}
        torch_ = TorchAdapter(self.libs) if self.libs.torch is not None else None
        cupy_ = CupyAdapter(self.libs) if self.libs.cupy is not None else None
        if torch_ is not None:
            self.adapters["torch"] = torch_
        if cupy_ is not None:
            self.adapters["cupy"] = cupy_
        if self.libs.numba is not None:
            self.adapters["numba"] = NumbaAdapter(self.libs)
        backing = torch_ or cupy_
        if backing is not None:
            self.adapters["dlpack"] = DLPackAdapter(self.libs, backing)
        self.adapters["plain"] = PlainAdapter(self.libs, c, torch_)
        self.pools = [StreamPool(self.libs, d) for d in range(min(self.devices, 2))]

    def warm_streams(self) -> None:
        """Each library allocates once at both array sizes on each stream of the pool (their
        caching allocators keep memory per stream, and growing may synchronise)."""
        for log2n in (16, 20):
            for name in ("caijit", "cupy", "torch"):
                ad = self.adapters.get(name)
                if ad is None:
                    continue
                for home in self.pools[0].streams.values():
                    if home.kind in ad.homes:
                        ad.scribble(1 << log2n, home)
        self.libs.synchronize()

    def adapter(self, producer: str) -> Adapter:
        """The producer's adapter (caijit's where its library is missing)."""
        return self.adapters.get(producer, self.adapters["caijit"])

    def current_devices(self) -> list[int]:
        """The current device of each library (caijit must leave it as it was: 0)."""
        out = []
        if self.libs.cupy is not None:
            out.append(int(self.libs.cupy.cuda.runtime.getDevice()))
        if self.libs.torch is not None:
            out.append(int(self.libs.torch.cuda.current_device()))
        return out

    def summary(self, failures: int) -> str:
        missing = "; ".join(f"{k} ({v})" for k, v in self.libs.missing.items()) or "none"
        return (
            f"caijit ordering: examples={RUN.examples} steps={RUN.steps} seed={RUN.seed} failures={failures} "
            f"(max_examples={EXAMPLES}, steps/example={STEPS}, libraries={','.join(self.libs.names) or 'none'}, "
            f"missing={missing}, devices={self.devices})"
        )


@pytest.fixture(scope="module")
def env() -> Env:
    """The environment, warmed up: every kernel, op and library call the machine makes has
    run once (a first launch loads a module and may synchronise the device, which would hide
    ordering bugs), through the smoke sequence on small arrays."""
    e = Env()
    RUN.seed = -1
    for log2n in (16, 20):
        smoke_sequence(e, log2n=log2n, cycles=1_000)
    e.warm_streams()
    return e


# ------------------------------------------------------------------------ the model


@dataclasses.dataclass(eq=False)
class Rec:
    """A live array and its expected values."""

    name: str
    producer: str
    home: PoolStream  # its producer stream
    device: int
    obj: Any
    values: np.ndarray
    memory: str  # whose allocator owns the memory
    current: str  # "torch"/"cupy": the library's current stream must be `home` when it is used
    #: Streams caijit work read this DLPack-only array on: DLPack has no reverse edge, so
    #: (as its user must) the tester orders the array's own stream after them before its
    #: library writes it again.
    borrowers: list[PoolStream] = dataclasses.field(default_factory=list)

    @property
    def writable(self) -> bool:
        """caijit writes only arrays whose later users it orders (not DLPack imports)."""
        return self.producer != "dlpack"

    def __repr__(self) -> str:
        return self.name


def _distinct(streams: Sequence[PoolStream]) -> list[PoolStream]:
    out: list[PoolStream] = []
    for s in streams:
        if all(s.handle != o.handle for o in out):
            out.append(s)
    return out


class OrderingMachine(RuleBasedStateMachine):
    """Random sequences of ordered work on arrays of every producer and stream."""

    arrays = Bundle("arrays")

    def __init__(self, env: Env) -> None:
        super().__init__()
        RUN.examples += 1
        self.env = env
        self.libs = env.libs
        self.pools = env.pools
        self.n = 1 << 16
        self.live: list[Rec] = []
        self.scalars: list[tuple[str, Any, float, float]] = []  # (what, 0-d array, want, tolerance)
        self.log: list[str] = []
        #: Streams the pool let go of that PyTorch or CuPy used, kept until teardown: their
        #: allocators key freed memory by stream handle, so such a stream must not die with
        #: work pending and leave its handle to a new stream.
        self.retired: list[PoolStream] = []
        self.count = 0
        self.host_syncs = caijit.stats()["host_syncs"]
        self.ok = True

    # -------------------------------------------------------------------- helpers

    @property
    def grid(self) -> int:
        return min(128, (self.n + BLOCK - 1) // BLOCK)

    @contextlib.contextmanager
    def _step(self, text: str) -> Iterator[None]:
        """One step: logged (printed with a failure), then checked for host
        synchronisations by caijit and for a changed current device."""
        RUN.steps += 1
        self.log.append(text)
        self.ok = False
        yield
        syncs = caijit.stats()["host_syncs"]
        if syncs != self.host_syncs:
            self._fail(f"caijit synchronised the host {syncs - self.host_syncs} time(s)")
        devices = self.env.current_devices()
        if any(d != 0 for d in devices):
            self._fail(f"the current device changed to {devices} (cupy, torch)")
        self.ok = True

    def _note(self, text: str) -> None:
        self.log[-1] += f"; {text}"

    def _fail(self, what: str) -> None:
        steps = "\n  ".join(f"{i}. {s}" for i, s in enumerate(self.log, 1))
        origin = f"seed {RUN.seed}" if RUN.seed >= 0 else "the hand-written smoke sequence"
        raise AssertionError(f"{what}\n{origin}, n={self.n}; this example's steps:\n  {steps}")

    def _pool(self, device: int) -> StreamPool:
        return self.pools[device]

    def _resolve(self, kind: str, device: int, dlpack: bool = False) -> Optional[PoolStream]:
        """A launch's explicit stream (None: chosen by the stream protocol)."""
        if kind == "none":
            return None
        if dlpack and kind == "per_thread":
            kind = "legacy"  # PyTorch refuses DLPack exports to the per-thread stream
        return self._pool(device).get(kind)

    @staticmethod
    def _arg(stream: Optional[PoolStream]) -> Any:
        return None if stream is None else stream.obj

    @staticmethod
    def _on(stream: Optional[PoolStream]) -> str:
        return "the protocol's stream" if stream is None else repr(stream)

    def _record(self, ad: Adapter, obj: Any, home: PoolStream, values: np.ndarray) -> Rec:
        self.count += 1
        memory = ad.memory_of(obj)
        if memory == "caijit":
            home = home.borrowed()  # caijit keeps the stream object alive, nobody else does
        rec = Rec(f"{ad.name}{self.count}@{home!r}", ad.name, home, home.device, obj, values, memory, ad.current_lib())
        self.live.append(rec)
        return rec

    def _create(self, producer: str, kind: str, base: int, device: int) -> Rec:
        ad = self.env.adapter(producer)
        home = self._pool(device).get(ad.home_kind(kind, device))
        return self._record(ad, ad.make(self.n, base, home), home, pattern(self.n, base))

    def _new_caijit(self, stream: Optional[PoolStream], device: int) -> Rec:
        """A zeroed caijit array for a result, on ``stream`` (the legacy stream when None)."""
        home = stream if stream is not None else self._pool(device).get("legacy")
        obj = caijit.zeros(self.n, stream=home.obj, device=device)
        return self._record(self.env.adapters["caijit"], obj, home, np.zeros(self.n, np.float32))

    def _launch_stream_of(self, stream: Optional[PoolStream], device: int) -> PoolStream:
        """The stream work with a DLPack-only argument runs on: the given one, else the
        legacy stream (the DLPack view carries the stream of its handshake: 1)."""
        return stream if stream is not None else self._pool(device).get("legacy")

    def _lend(self, recs: Sequence[Rec], on: PoolStream) -> None:
        for r in recs:
            if r.producer == "dlpack":
                r.borrowers.append(on)

    def _order(self, waiter: PoolStream, producer: PoolStream) -> None:
        """``waiter`` waits for the work enqueued so far on ``producer`` (an event: what a
        user of the other libraries does by hand)."""
        if waiter.handle == producer.handle:
            return
        if self.libs.cupy is not None:
            waiter.cupy().wait_event(producer.cupy().record())
        elif self.libs.torch is not None:
            waiter.torch().wait_stream(producer.torch())
        else:
            caijit._native.order_streams(waiter.handle, producer.handle, waiter.device)

    @contextlib.contextmanager
    def _scope(self, recs: Sequence[Rec], extra: Sequence[tuple[str, PoolStream]] = ()) -> Iterator[None]:
        """Make each library's current stream the producer stream of its arrays among
        ``recs`` and ``extra`` (a PyTorch tensor or CuPy array is produced on its library's
        current stream). Arrays of one library on several streams are joined as a correct
        program joins them: the first one's stream (``extra``'s first) waits for the others
        before, they wait for it after (GPU-side waits, no host synchronisation)."""
        homes = [e for e in extra if e[0]] + [(r.current, r.home) for r in recs if r.current]
        torch_homes = _distinct([h for lib, h in homes if lib == "torch"])
        cupy_homes = _distinct([h for lib, h in homes if lib == "cupy"])
        tp: Any = None
        cp: Any = None
        with contextlib.ExitStack() as stack:
            if torch_homes:
                tp = torch_homes[0].torch()
                for other in torch_homes[1:]:
                    tp.wait_stream(other.torch())
                stack.enter_context(self.libs.torch.cuda.stream(tp))
            if cupy_homes:
                cp = cupy_homes[0].cupy()
                for other in cupy_homes[1:]:
                    cp.wait_event(other.cupy().record())
                stack.enter_context(cp)
            yield
        for other in torch_homes[1:]:
            other.torch().wait_stream(tp)
        for other in cupy_homes[1:]:
            other.cupy().wait_event(cp.record())

    def _scribble(self, home: PoolStream) -> None:
        """Reallocate freed memory at once with every library on ``home`` and write -1 over
        it: a kernel that still reads freed memory then reads -1."""
        for name in ("caijit", "cupy", "torch"):
            ad = self.env.adapters.get(name)
            if ad is None or (home.device != 0 and name != "caijit"):
                continue
            if home.kind in ad.homes or home.kind in ("legacy", "caijit"):
                ad.scribble(self.n, home)

    def _check(self, rec: Rec) -> None:
        got = self.env.adapter(rec.producer).to_host(rec.obj, rec.home).reshape(-1)
        want = rec.values
        if np.array_equal(got, want):
            return
        bad = np.flatnonzero(got != want)
        i = int(bad[0])
        wrong = np.unique(got[bad])[:8]
        self._fail(
            f"{rec.name}: {bad.size} of {got.size} values differ; first [{i}]: got {got[i]}, want {want[i]}; "
            f"wrong values seen: {wrong.tolist()} (-1: a recycled allocation's scribble)"
        )

    def _check_scalars(self) -> None:
        for what, arr, want, tol in self.scalars:
            got = float(np.asarray(arr.copy_to_host()).reshape(()))
            if abs(got - want) > tol:
                self._fail(f"{what}: got {got}, want {want} (tolerance {tol})")
        self.scalars.clear()

    # -------------------------------------------------------------------- rules

    @initialize(
        target=arrays,
        log2n=st.sampled_from([16, 16, 16, 20]),
        first=st.sampled_from(PRODUCERS),
        first_stream=st.sampled_from(STREAM_KINDS),
        second=st.sampled_from(PRODUCERS),
        second_stream=st.sampled_from(STREAM_KINDS),
    )
    def setup(self, log2n: int, first: str, first_stream: str, second: str, second_stream: str) -> MultipleResults[Rec]:
        """The example's array size (1<<20 floats sometimes, for the recycling hazard) and
        two arrays."""
        self.n = 1 << log2n
        with self._step(f"setup n=1<<{log2n}"):
            a = self._create(first, first_stream, 1, 0)
            b = self._create(second, second_stream, 2, 0)
            self._note(f"made {a.name} = pattern+1, {b.name} = pattern+2")
        return multiple(a, b)

    @rule(target=arrays, producer=st.sampled_from(PRODUCERS), stream=st.sampled_from(STREAM_KINDS), base=st.integers(-8, 8))
    def create(self, producer: str, stream: str, base: int) -> Rec:
        with self._step(f"create {producer} on {stream}"):
            rec = self._create(producer, stream, base, 0)
            self._note(f"made {rec.name} = pattern{base:+d}")
        return rec

    @precondition(lambda self: len(self.pools) > 1)
    @rule(
        target=arrays,
        producer=st.sampled_from(["caijit", "plain"]),
        stream=st.sampled_from(["legacy", "per_thread", "caijit"]),
        base=st.integers(-8, 8),
    )
    def create_on_device1(self, producer: str, stream: str, base: int) -> Rec:
        with self._step(f"create {producer} on device 1, {stream}"):
            rec = self._create(producer, stream, base, 1)
            self._note(f"made {rec.name} = pattern{base:+d}")
        return rec

    @rule(
        rec=arrays,
        value=st.integers(-8, 8),
        by=st.sampled_from(["kernel", "library"]),
        stream=st.sampled_from(LAUNCH_STREAMS),
        cycles=st.sampled_from(CYCLES),
    )
    def slow_write(self, rec: Rec, value: int, by: str, stream: str, cycles: int) -> None:
        """rec = value, slowly: caijit's slow_fill (on ``stream``), or a spin on the array's
        stream and then its own library's fill there."""
        ad = self.env.adapter(rec.producer)
        if not rec.writable or not ad.can_fill:
            by = "library" if not rec.writable else "kernel"
        with self._step(f"slow_write {rec.name} = {value} by {by} cycles={cycles}"):
            if by == "library":
                for borrower in rec.borrowers:  # the user's part for DLPack-only arrays
                    self._order(rec.home, borrower)
                rec.borrowers.clear()
                self.env.spin[1, 1, rec.home.obj](cycles)
                ad.fill(rec.obj, value, rec.home)
            else:
                s = self._resolve(stream, rec.device)
                self._note(f"on {self._on(s)}")
                with self._scope([rec]):
                    self.env.slow_fill[self.grid, BLOCK, self._arg(s)](rec.obj, np.float32(value), self.n, cycles)
            rec.values = np.full(self.n, value, np.float32)

    def _writable_out(self, y: Rec, stream: Optional[PoolStream], device: int) -> tuple[Rec, bool]:
        if y.writable and y.device == device:
            return y, False
        return self._new_caijit(stream, device), True

    @rule(
        target=arrays,
        x=arrays,
        y=arrays,
        a=st.sampled_from([-2.0, -1.0, 1.0, 2.0]),
        b=st.integers(-3, 3),
        stream=st.sampled_from(LAUNCH_STREAMS),
        cycles=st.sampled_from(CYCLES),
    )
    def launch(self, x: Rec, y: Rec, a: float, b: int, stream: str, cycles: int) -> Any:
        """y = a x + b by a kernel that spins before it reads x (a DLPack-only y: into a new
        caijit array)."""
        with self._step(f"launch {y.name} = {a:g}*{x.name}{b:+d} on {stream} cycles={cycles}"):
            if x.device != y.device and y.writable:
                with pytest.raises(caijit.ArgumentError):
                    self.env.slow_axpb[self.grid, BLOCK](x.obj, y.obj, np.float32(a), np.float32(b), self.n, cycles)
                self._note("refused: arrays on two devices")
                return multiple()
            want = a * x.values + b
            if not fits(want):
                self._note("skipped: the values would outgrow exact float32")
                return multiple()
            s = self._resolve(stream, x.device, dlpack=x.producer == "dlpack")
            out, new = self._writable_out(y, s, x.device)
            self._note(f"into {out.name} on {self._on(s)}")
            with self._scope([x, out]):
                self.env.slow_axpb[self.grid, BLOCK, self._arg(s)](x.obj, out.obj, np.float32(a), np.float32(b), self.n, cycles)
            self._lend([x], self._launch_stream_of(s, x.device))
            out.values = want.astype(np.float32)
            return out if new else multiple()

    @rule(
        target=arrays,
        y=arrays,
        producer=st.sampled_from(PRODUCERS),
        home=st.sampled_from(STREAM_KINDS),
        via=st.sampled_from(["kernel", "ops.scale", "ops.axpy"]),
        base=st.integers(-8, 8),
        a=st.sampled_from([-1.0, 1.0, 2.0]),
        b=st.integers(-3, 3),
        stream=st.sampled_from(LAUNCH_STREAMS),
        cycles=st.sampled_from(CYCLES),
    )
    def launch_on_temporary(
        self, y: Rec, producer: str, home: str, via: str, base: int, a: float, b: int, stream: str, cycles: int
    ) -> Any:
        """A temporary made inline as an argument (``k[...](make(), y)``): its last reference
        dies when the call returns, before the kernel (delayed by ``cycles``) has read it;
        every library then reallocates and scribbles at once."""
        device = y.device
        ad = self.env.adapter(producer)
        th = self._pool(device).get(ad.home_kind(home, device))
        if device != 0 and ad.memory != "caijit":
            ad = self.env.adapters["caijit"]
        t = pattern(self.n, base)
        with self._step(f"{via} on a temporary {ad.name}@{th!r} (pattern{base:+d}) into {y.name}, a={a:g} b={b:+d} on {stream} cycles={cycles}"):
            s = self._resolve(stream, device, dlpack=ad.name == "dlpack")
            out, new = self._writable_out(y, s, device)
            if via == "kernel":
                want = a * t + b
            elif via == "ops.scale":
                want = a * t
            else:
                want = a * t + out.values
            if not fits(want):
                self._note("skipped: the values would outgrow exact float32")
                if new:
                    self.live.remove(out)
                return multiple()
            self._note(f"into {out.name} on {self._on(s)}")
            if via != "kernel":  # ops take no spin: delay them behind one on the output's stream
                self.env.spin[1, 1, out.home.obj](cycles)
            with self._scope([out], [(ad.current_lib(), th)]):
                if via == "kernel":
                    self.env.slow_axpb[self.grid, BLOCK, self._arg(s)](
                        ad.make(self.n, base, th), out.obj, np.float32(a), np.float32(b), self.n, cycles
                    )
                else:
                    if via == "ops.scale":
                        ops.scale(ad.make(self.n, base, th), a, out=out.obj, stream=self._arg(s))
                    else:
                        ops.axpy(a, ad.make(self.n, base, th), out.obj, out=out.obj, stream=self._arg(s))
            self._scribble(th)
            out.values = want.astype(np.float32)
            return out if new else multiple()

    @rule(
        target=arrays,
        op=st.sampled_from(OPS),
        x=arrays,
        z=arrays,
        out=arrays,
        use_out=st.booleans(),
        a=st.sampled_from([-1.0, 1.0, 2.0]),
        stream=st.sampled_from(LAUNCH_STREAMS),
        delay=st.sampled_from(CYCLES),
    )
    def op(self, op: str, x: Rec, z: Rec, out: Rec, use_out: bool, a: float, stream: str, delay: int) -> Any:
        """A caijit.ops call (with ``out=``, or allocating its result on ``stream``), after a
        spin of ``delay`` cycles on the stream of its first array, which it waits for."""
        use_out = use_out and out.writable and op != "sum"
        table: dict[str, list[Rec]] = {"fill": [], "scale": [x], "add": [x, z], "axpy": [x, z], "sum": [x]}
        inputs = table[op]
        used = inputs + ([out] if use_out else [])
        scalar = f", a={a:g}" if op in ("fill", "scale", "axpy") else ""
        text = f"ops.{op}({', '.join(r.name for r in inputs)}{scalar}) out={out.name if use_out else None} on {stream} delay={delay}"
        with self._step(text):
            device = used[0].device if used else x.device
            if any(r.device != device for r in used):
                with pytest.raises(caijit.CaijitError):
                    self._call_op(op, x, z, out.obj if use_out else None, a, None)
                self._note("refused: arrays on two devices")
                return multiple()
            want: np.ndarray
            if op == "fill":
                want = np.full(self.n, a, np.float32)
            elif op == "scale":
                want = a * x.values
            elif op == "add":
                want = x.values + z.values
            elif op == "axpy":
                want = a * x.values + z.values
            else:
                want = x.values
            if not fits(want):
                self._note("skipped: the values would outgrow exact float32")
                return multiple()
            s = self._resolve(stream, device, dlpack=any(r.producer == "dlpack" for r in used))
            target: Optional[Rec] = out if use_out else None
            if op == "fill" and target is None:
                target = self._new_caijit(s, device)  # fill needs its out
            first = used[0] if used else target
            assert first is not None
            self.env.spin[1, 1, first.home.obj](delay)  # before the scope's joins, which then wait for it
            with self._scope(used):
                result = self._call_op(op, x, z, None if target is None else target.obj, a, self._arg(s))
            self._lend(inputs, self._launch_stream_of(s, device))
            if op == "sum":
                total = float(np.sum(x.values, dtype=np.float64))
                tol = 1e-5 * float(np.sum(np.abs(x.values), dtype=np.float64)) + 1.0
                self.scalars.append((f"ops.sum({x.name}) of step {len(self.log)}", result, total, tol))
                return multiple()
            new = target is None or target is not out
            if target is None:  # the op allocated its result on s (the legacy stream for None)
                home = s if s is not None else self._pool(device).get("legacy")
                target = self._record(self.env.adapters["caijit"], result, home, want)
            target.values = want.astype(np.float32)
            self._note(f"result in {target.name}")
            return target if new else multiple()

    def _call_op(self, op: str, x: Rec, z: Rec, out: Any, a: float, stream: Any) -> Any:
        if op == "fill":
            return ops.fill(out, a, stream=stream)
        # A result the op allocates is of its first array's library (a CuPy array, a PyTorch
        # tensor): this machine models caijit results, so such a first array is passed
        # through its interface alone (its own fast paths are taken with out= and as the
        # second array).
        first = x.obj if out is not None else AsInterface.of(x.obj)
        if op == "scale":
            return ops.scale(first, a, out=out, stream=stream)
        if op == "add":
            return ops.add(first, z.obj, out=out, stream=stream)
        if op == "axpy":
            return ops.axpy(a, first, z.obj, out=out, stream=stream)
        return ops.sum(first, stream=stream)

    @rule(
        target=arrays,
        src=arrays,
        consumer=st.sampled_from(CONSUMERS),
        stream=st.sampled_from(CONSUMER_STREAMS),
        via=st.sampled_from(["legacy", "per_thread", "caijit", "cupy_nonblocking", "torch"]),
        cycles=st.sampled_from(CYCLES),
        d1=st.integers(-3, 3),
        d2=st.integers(-3, 3),
        write=st.booleans(),
    )
    def export(self, src: Rec, consumer: str, stream: str, via: str, cycles: int, d1: int, d2: int, write: bool) -> Any:
        """A caijit array with pending work (a slow kernel; ``src`` itself when it is one,
        else a copy of it made on ``via``), exported to another library that reads it on its
        current stream ``stream`` (r = array + d1, a new array of that library) and, with
        ``write``, adds d2 to it in place. The DLPack consumers' release orders the array
        after them; after a CAI consumer the tester does it (CAI has no release)."""
        lib = consumer.split("_")[0]
        if getattr(self.libs, lib) is None:
            consumer = "numba_cai" if self.libs.numba is not None else "none"
        with self._step(f"export {src.name} to {consumer} on {stream} (copy via {via}) cycles={cycles} d1={d1:+d} d2={d2:+d} write={write}"):
            if src.device != 0 or consumer == "none":
                self._note("skipped: device 1 or no consumer library")
                return multiple()
            created: list[Rec] = []
            if src.producer == "caijit":
                exp = src
                self.env.slow_axpb[self.grid, BLOCK](exp.obj, exp.obj, np.float32(1), np.float32(0), self.n, cycles)
            else:
                vs = self._pool(0).get(via)
                exp = self._new_caijit(vs, 0)
                created.append(exp)
                with self._scope([src]):
                    self.env.slow_axpb[self.grid, BLOCK](src.obj, exp.obj, np.float32(1), np.float32(0), self.n, cycles)
                self._lend([src], self._pool(0).get("legacy"))
                exp.values = src.values.copy()
                self._note(f"copied into {exp.name}")
            cai = exp.obj.__cuda_array_interface__
            withheld = os.environ.get("CAIJIT_CAI_EXPORT_STREAM") == "0" or os.environ.get("CAIJIT_CAI_EXPORT_VERSION") == "2"
            if not withheld and cai.get("stream") != exp.home.handle:
                self._fail(f"{exp.name} exports stream {cai.get('stream')}, not its stream {exp.home.handle:#x}")
            if consumer == "numba_cai":
                if withheld:  # no stream to wait for: the user orders Numba's (legacy) copy
                    self._order(self._pool(0).get("legacy"), exp.home)
                nd = self.libs.numba.as_cuda_array(exp.obj)  # Numba waits for the exported stream
                got = np.asarray(nd.copy_to_host())
                if nd.stream:
                    nd.stream.synchronize()
                if not np.array_equal(got, exp.values):
                    bad = np.flatnonzero(got != exp.values)
                    self._fail(f"Numba read {exp.name}: {bad.size} values differ, first got {got[bad[0]]}, want {exp.values[bad[0]]}")
                return multiple(*created)
            ad = self.env.adapters[lib]
            c = self._pool(0).get(ad.home_kind(stream, 0))
            self._note(f"consumer stream {c!r}")
            r = self._consume(consumer, exp, c, d1, d2 if write else None, withheld)
            rec = self._record(ad, r, c, exp.values + np.float32(d1))
            if write:
                exp.values = exp.values + np.float32(d2)
            self._note(f"read into {rec.name}")
            return multiple(*created, rec)

    def _consume(self, consumer: str, exp: Rec, c: PoolStream, d1: int, d2: Optional[int], withheld: bool) -> Any:
        if consumer.startswith("torch"):
            torch = self.libs.torch
            with torch.cuda.stream(c.torch()):
                if consumer == "torch_dlpack":
                    t = torch.from_dlpack(exp.obj)  # __dlpack__(stream=c): c waits for the array
                else:
                    t = torch.as_tensor(exp.obj, device="cuda")
                    if not TORCH_CAI_RAW or withheld:
                        self._order(c, exp.home)  # the CAI v3 consumer's wait, which PyTorch leaves out
                r = t + d1
                if d2 is not None:
                    t.add_(d2)
                del t  # DLPack: the release orders the array's stream after c
        else:
            cp = self.libs.cupy
            with c.cupy():
                if consumer == "cupy_dlpack":
                    a = cp.from_dlpack(exp.obj)
                else:
                    a = cp.asarray(exp.obj)  # CuPy waits for the exported stream (CAI v3)
                    if withheld:
                        self._order(c, exp.home)
                r = a + d1
                if d2 is not None:
                    a += d2
                del a
        if consumer.endswith("_cai"):
            self._order(exp.home, c)  # CAI has no release: the user orders the array after the consumer
        return r

    @rule(rec=consumes(arrays), scribble=st.booleans())
    def drop(self, rec: Rec, scribble: bool) -> None:
        """The last reference to an array dies (work reading it may still be pending);
        with ``scribble`` every library reallocates and overwrites at once."""
        with self._step(f"drop {rec.name}{' and scribble' if scribble else ''}"):
            home = self._pool(rec.device).live(rec.home)
            rec.obj = None
            rec.borrowers.clear()
            self.live.remove(rec)
            if scribble:
                self._scribble(home)

    @rule(kind=st.sampled_from(["caijit", "cupy_nonblocking", "cupy_blocking", "torch"]))
    def replace_stream(self, kind: str) -> None:
        """The pool lets go of a stream object (arrays caijit made on it keep it alive)
        and makes a new one (one PyTorch or CuPy used is only let go of at teardown)."""
        with self._step(f"replace the {kind} stream"):
            pool = self._pool(0)
            kind = pool.available(kind)
            old = pool.streams[kind]
            if old.handle not in (1, 2):
                if old.foreign:
                    self.retired.append(old)
                pool.streams[kind] = pool.new(kind)
                self._note(f"{old!r} -> {pool.streams[kind]!r}")

    @precondition(lambda self: self.libs.torch is not None or self.libs.cupy is not None)
    @rule(x=arrays, y=arrays, lib=st.sampled_from(["torch", "cupy"]), a=st.sampled_from([-1.0, 1.0]), replays=st.integers(1, 3))
    def capture(self, x: Rec, y: Rec, lib: str, a: float, replays: int) -> None:
        """A caijit launch (y += a x) captured into a CUDA graph on a capturing stream and
        replayed ``replays`` times. The capture orders nothing outside it, so the
        capturer synchronises before and after; then y is checked."""
        if getattr(self.libs, lib) is None:
            lib = "cupy" if lib == "torch" else "torch"
        with self._step(f"capture {y.name} += {a:g}*{x.name} with {lib}, {replays} replays"):
            # (A DLPack-only x is read too: its producer must be asked for a capture-legal
            # handshake. The capturer synchronises before and after, as for every array.)
            if not y.writable or x.device != 0 or y.device != 0 or getattr(self.libs, lib) is None:
                self._note("skipped: a DLPack-only y, device-1 arrays, or neither PyTorch nor CuPy")
                return
            want = y.values.astype(np.float64)
            for _ in range(replays):
                want = want + a * (want if x is y else x.values)
            if not fits(want):
                self._note("skipped: the values would outgrow exact float32")
                return
            self.libs.synchronize()
            launch = self.env.accumulate
            if lib == "torch":
                torch = self.libs.torch
                g = torch.cuda.CUDAGraph()
                s = torch.cuda.Stream()
                with torch.cuda.graph(g, stream=s):
                    launch[self.grid, BLOCK, s](x.obj, y.obj, np.float32(a), self.n)
                for _ in range(replays):
                    g.replay()
            else:
                cs = self.libs.cupy.cuda.Stream(non_blocking=True)
                cs.begin_capture()
                try:
                    launch[self.grid, BLOCK, cs](x.obj, y.obj, np.float32(a), self.n)
                finally:
                    graph = cs.end_capture()
                for _ in range(replays):
                    graph.launch(stream=cs)
            self.libs.synchronize()
            y.values = want.astype(np.float32)
            self._check(y)

    @rule(
        target=arrays,
        x=consumes(arrays),
        depth=st.integers(1, 3),
        a=st.sampled_from([-1.0, 1.0, 2.0]),
        b=st.integers(-3, 3),
        cycles=st.sampled_from(CYCLES),
        drop_array=st.booleans(),
    )
    def view_on_another_thread(self, x: Rec, depth: int, a: float, b: int, cycles: int, drop_array: bool) -> Any:
        """A view of a caijit array x (``caijit.as_cuda_array``, and views of that view up to
        ``depth``), made here, launched on another thread (out = a x + b, into a new caijit
        array on a caijit stream). The view follows x's rules: where x is on this thread's
        per-thread default stream, the worker must be refused (``ArgumentError``: its "2"
        is another stream, which orders nothing), launch and export alike; elsewhere the
        launch is ordered after x's pending work. With ``drop_array`` the view is all that
        holds x from here on (x's memory must stay x's, whatever is allocated after);
        otherwise x goes back to the arrays."""
        with self._step(f"view of {x.name} (depth {depth}) launched on another thread, a={a:g} b={b:+d} cycles={cycles}"):
            if x.producer != "caijit":
                self._note("skipped: not a caijit array")
                return multiple(x)
            want = a * x.values + b
            if not fits(want):
                self._note("skipped: the values would outgrow exact float32")
                return multiple(x)
            view = caijit.as_cuda_array(x.obj)
            for _ in range(depth - 1):
                view = caijit._native.launch_view(view)
            s = self._pool(x.device).get("caijit")
            out = self._new_caijit(s, x.device)
            if drop_array:
                self._note("x dropped: only the view holds it")
                x.obj = None
                self.live.remove(x)
                self._scribble(self._pool(x.device).live(x.home))
            outcome: dict[str, Any] = {}
            kernel, grid = self.env.slow_axpb, self.grid

            def worker() -> None:
                try:
                    kernel[grid, BLOCK, s.obj](view, out.obj, np.float32(a), np.float32(b), self.n, cycles)
                    outcome["launch"] = "accepted"
                except caijit.ArgumentError as e:
                    outcome["launch"] = f"refused: {e}"
                try:
                    view.__cuda_array_interface__
                    outcome["export"] = "accepted"
                except caijit.ArgumentError as e:
                    outcome["export"] = f"refused: {e}"

            t = threading.Thread(target=worker)
            t.start()
            t.join(120)
            if t.is_alive():
                self._fail("the worker thread hangs")
            refused = x.home.kind == "per_thread"
            for what in ("launch", "export"):
                if refused and not str(outcome.get(what)).startswith("refused"):
                    self._fail(f"a view of {x.name}, on the per-thread default stream of this thread, was not refused on another thread ({what}: {outcome.get(what)})")
                if not refused and outcome.get(what) != "accepted":
                    self._fail(f"a view of {x.name} was refused on another thread ({what}: {outcome.get(what)})")
            if refused:
                self._note("refused on the worker, as the array is")
            else:
                out.values = want.astype(np.float32)
            del view
            return multiple(out) if drop_array else multiple(out, x)

    @rule(rec=arrays)
    def check(self, rec: Rec) -> None:
        """Read one array back through its library, on its own stream, and compare."""
        with self._step(f"check {rec.name}"):
            self._check(rec)

    @rule()
    def check_all(self) -> None:
        with self._step("check every array"):
            for rec in list(self.live):
                self._check(rec)
            self._check_scalars()

    def teardown(self) -> None:
        try:
            if self.ok:  # not after a failed step: its failure is the one to report
                with self._step("final check of every array"):
                    for rec in list(self.live):
                        self._check(rec)
                    self._check_scalars()
        finally:
            for rec in self.live:
                rec.obj = None
            self.live.clear()
            self.scalars.clear()
            # Retired streams go now: let their work finish first (see `retired`). Nothing
            # is left to race: every array was checked and freed.
            self.libs.synchronize()
            self.retired.clear()


# ------------------------------------------------------------------------ tests


def smoke_sequence(env: Env, log2n: int, cycles: int) -> None:
    """One hand-written sequence: every producer on every stream kind (a slow write by its
    library, read by a kernel on another stream, written back, dropped and scribbled over),
    temporaries of each, every op, every consumer, graph capture with both libraries, a
    replaced stream, and device 1 where there is one."""
    m = OrderingMachine(env)
    try:
        a, b = m.setup(log2n, "caijit", "caijit", "torch", "torch").values
        sink = m.create("caijit", "caijit", 0)
        vias = ("kernel", "ops.scale", "ops.axpy")
        for i, producer in enumerate(PRODUCERS):
            for j, kind in enumerate(STREAM_KINDS):
                x = m.create(producer, kind, 3)
                m.slow_write(x, 5, "library", "none", cycles)
                m.launch(x, sink, 2.0, 1, "cupy_nonblocking", cycles)
                m.check(sink)
                m.launch(sink, x, 1.0, -1, "none", cycles)
                m.check(x)
                m.drop(x, True)
                m.launch_on_temporary(sink, producer, kind, vias[(i + j) % 3], 4, 1.0, 2, "torch", cycles)
                m.check(sink)
        for op in OPS:
            for use_out in (False, True):
                m.op(op, a, b, sink, use_out, 1.0, "caijit", cycles)
        m.check_all()
        for consumer in CONSUMERS:
            m.export(a, consumer, "torch", "cupy_nonblocking", cycles, 1, 2, True)
            m.export(b, consumer, "cupy_blocking", "caijit", cycles, -1, 0, False)
        m.check_all()
        for lib in ("torch", "cupy"):
            m.capture(a, sink, lib, 1.0, 3)
            d = m.create("dlpack", "caijit", 2)
            m.capture(d, sink, lib, 1.0, 2)  # a DLPack-only argument in a capture
            m.drop(d, True)
        for kind in ("per_thread", "caijit", "legacy"):
            v = m.create("caijit", kind, 1)
            m.slow_write(v, 4, "kernel", "none", cycles)  # pending work on its home stream
            m.view_on_another_thread(v, 2, 1.0, 1, cycles, False)
            m.view_on_another_thread(v, 3, 2.0, 0, cycles, True)
        for kind in ("caijit", "cupy_nonblocking", "cupy_blocking", "torch"):
            y = m.create("caijit", kind, 6)
            m.slow_write(y, 7, "kernel", "legacy", cycles)
            m.replace_stream(kind)
            m.launch(y, sink, 1.0, 0, "none", cycles)
            m.drop(y, True)
        if len(m.pools) > 1:
            d = m.create_on_device1("caijit", "caijit", 1)
            e = m.create_on_device1("plain", "per_thread", 2)
            m.launch(d, e, 2.0, 1, "none", cycles)
            m.launch(d, e, 1.0, 1, "legacy", cycles)
            m.launch(d, sink, 1.0, 0, "none", cycles)  # two devices: refused
            m.op("add", d, e, e, True, 1.0, "caijit", cycles)
            m.op("scale", d, e, e, False, 2.0, "none", cycles)
            m.slow_write(e, 3, "kernel", "caijit", cycles)
            m.check(e)
            m.drop(d, True)
        m.check_all()
    finally:
        m.teardown()


def test_every_producer_and_stream_once(env: Env) -> None:
    """The smoke sequence, warm: a readable first failure before the random runs."""
    RUN.seed = -1
    smoke_sequence(env, log2n=16, cycles=1_000_000)


def test_random_ordering(env: Env) -> None:
    """The state machine: ``CAIJIT_ORDERING_EXAMPLES`` examples of ``CAIJIT_ORDERING_STEPS``
    steps, seeded by ``CAIJIT_ORDERING_SEED`` (else a fresh seed, printed)."""
    seed_value = SEED if SEED is not None and SEED >= 0 else random.SystemRandom().randrange(2**32)
    RUN.examples, RUN.steps, RUN.seed = 0, 0, seed_value

    def factory() -> OrderingMachine:
        return OrderingMachine(env)

    hypothesis_seed(seed_value)(factory)
    failures = 0
    try:
        run_state_machine_as_test(
            factory,  # type: ignore[arg-type]  # any callable returning a machine
            settings=settings(
                max_examples=EXAMPLES,
                stateful_step_count=STEPS,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                derandomize=False,
                database=None,
                print_blob=True,
                report_multiple_bugs=False,
            ),
        )
    except BaseException:
        failures = 1
        raise
    finally:
        line = env.summary(failures)
        print(line)
        if REPORT:
            with open(REPORT, "a", encoding="utf-8") as f:
                f.write(line + "\n")
