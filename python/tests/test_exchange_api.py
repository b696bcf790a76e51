"""The DLPack C exchange API path, without a GPU: a producer type whose
``__dlpack_c_exchange_api__`` is a ``DLPackExchangeAPI`` table made with ctypes, describing
(fake) CUDA device memory. Its view is built without touching the device, so the table's
contract (versions, the borrowing and the owning reads, the deleter called once, the
producer's current stream, failures falling back) is checked on any machine."""

from __future__ import annotations

import ctypes
from typing import Any, Optional

import pytest

import caijit
from caijit import _native

from conftest import gpu_unavailable_reason, has
from test_dlpack import _capsule_new, _ExchangeAPI, _ManagedVersioned, _Tensor

_DLTENSOR_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(_Tensor))
_MANAGED_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.POINTER(_ManagedVersioned)))
_STREAM_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))
_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_ManagedVersioned))

_NAME = b"dlpack_exchange_api"

#: Everything a table points to, alive for the process (as the specification requires).
_KEEP: list[Any] = []

STREAM = 0x5EED


class Fake:
    """What a fake tensor says through the table."""

    def __init__(self, shape: tuple[int, ...], strides: Optional[tuple[int, ...]], *, ptr: int = 0x7F0000000000,
                 device: tuple[int, int] = (2, 0), dtype: tuple[int, int, int] = (2, 32, 1), offset: int = 0,
                 readonly: bool = False) -> None:
        self.shape, self.strides, self.ptr, self.device, self.dtype = shape, strides, ptr, device, dtype
        self.offset, self.readonly = offset, readonly


def _fill(obj: Fake, t: Any) -> None:
    n = len(obj.shape)
    shape = (ctypes.c_int64 * max(n, 1))(*obj.shape)
    strides = (ctypes.c_int64 * max(n, 1))(*(obj.strides or ()))
    _KEEP.append((shape, strides))
    t.data = obj.ptr
    t.device.device_type, t.device.device_id = obj.device
    t.ndim = n
    t.dtype.code, t.dtype.bits, t.dtype.lanes = obj.dtype
    t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64)) if obj.strides is not None else None
    t.byte_offset = obj.offset


class Producer:
    """A table and the calls made through it."""

    def __init__(self, *, borrowing: bool = True, version: tuple[int, int] = (1, 3), fail: bool = False) -> None:
        self.calls: dict[str, int] = {"dltensor": 0, "managed": 0, "stream": 0, "deleted": 0}
        self.stream_devices: list[tuple[int, int]] = []

        def dltensor(obj: Fake, out: Any) -> int:
            self.calls["dltensor"] += 1
            if fail:
                return -1
            _fill(obj, out.contents)
            return 0

        def deleter(m: Any) -> None:
            self.calls["deleted"] += 1

        def managed(obj: Fake, out: Any) -> int:
            self.calls["managed"] += 1
            if fail:
                return -1
            m = _ManagedVersioned()
            m.version.major, m.version.minor = 1, 3
            m.flags = 1 if obj.readonly else 0
            m.deleter = ctypes.cast(self._deleter, ctypes.c_void_p)
            _fill(obj, m.dl_tensor)
            _KEEP.append(m)
            out[0] = ctypes.pointer(m)
            return 0

        def stream(device_type: int, device_id: int, out: Any) -> int:
            self.calls["stream"] += 1
            self.stream_devices.append((device_type, device_id))
            out[0] = STREAM
            return 0

        self._deleter = _DELETER(deleter)
        fns = (_DLTENSOR_FN(dltensor), _MANAGED_FN(managed), _STREAM_FN(stream))
        api = _ExchangeAPI()
        api.header.version.major, api.header.version.minor = version
        api.managed_tensor_allocator = 1  # never called by a consumer
        api.managed_tensor_from_py_object_no_sync = ctypes.cast(fns[1], ctypes.c_void_p)
        api.managed_tensor_to_py_object_no_sync = 1
        api.dltensor_from_py_object_no_sync = ctypes.cast(fns[0], ctypes.c_void_p) if borrowing else None
        api.current_work_stream = ctypes.cast(fns[2], ctypes.c_void_p)
        _KEEP.extend((fns, api, self._deleter))
        self.capsule = _capsule_new(ctypes.addressof(api), _NAME, None)

        class Tensor(Fake):
            __dlpack_c_exchange_api__ = self.capsule

        self.Tensor = Tensor


@pytest.mark.parametrize("borrowing", [True, False])
def test_exchange_views(borrowing: bool) -> None:
    p = Producer(borrowing=borrowing)
    t = p.Tensor((3, 4), (1, 3), offset=16)
    assert _native._testing._route(t) == "exchange 1.3" + ("" if borrowing else " (owning)")
    v = _native.launch_view(t)
    assert (v.shape, v.strides, v.ptr, v.device, v.stream) == ((3, 4), (4, 12), 0x7F0000000000 + 16, 0, STREAM)
    assert v.dtype == "float32" and v.readonly is False
    assert p.stream_devices == [(2, 0)]
    if borrowing:
        assert p.calls["dltensor"] == 1 and p.calls["managed"] == 0
    else:  # the owning read: released (deleter called) once, right after the read
        assert p.calls["managed"] == 1 and p.calls["deleted"] == 1
        assert _native.launch_view(p.Tensor((2,), None, readonly=True)).readonly is True
        assert p.calls["deleted"] == 2
    # C-ordered (strides NULL), 0-d, empty.
    assert _native.launch_view(p.Tensor((2, 3), None)).strides == (12, 4)
    assert _native.launch_view(p.Tensor((), None)).shape == ()
    assert _native.launch_view(p.Tensor((0, 3), None)).ptr == 0


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="launches with fake pointers and a fake stream need a machine without a GPU")
def test_the_stream_is_asked_once_per_launch_and_device() -> None:
    p = Producer()
    k = caijit.kernel('extern "C" __global__ void k(const float* a, const float* b) {}')
    a, b = p.Tensor((4,), None), p.Tensor((4,), None, ptr=0x7F0000100000)
    with pytest.raises(caijit.CudaNotAvailable):
        k[1, 1](a, b)  # the arguments are converted before the device is needed
    assert p.calls["dltensor"] == 2 and p.calls["stream"] == 1


def test_host_tensors_and_failures_take_the_next_path() -> None:
    p = Producer()
    with pytest.raises(caijit.ArgumentError, match="cannot pass"):
        _native.launch_view(p.Tensor((3,), None, device=(1, 0)))
    with pytest.raises(caijit.ArgumentError, match="cannot pass"):
        _native.launch_view(p.Tensor((3,), None, dtype=(2, 32, 4)))  # 4 lanes
    failing = Producer(fail=True)
    with pytest.raises(caijit.ArgumentError, match="cannot pass"):
        _native.launch_view(failing.Tensor((3,), None))
    assert failing.calls["dltensor"] == 1


@pytest.mark.parametrize("version", [(1, 2), (2, 0), (0, 9)])
def test_tables_of_other_versions_are_not_used(version: tuple[int, int]) -> None:
    p = Producer(version=version)
    assert _native._testing._route(p.Tensor((3,), None)) == "other"
    with pytest.raises(caijit.ArgumentError, match="cannot pass"):
        _native.launch_view(p.Tensor((3,), None))
    assert p.calls["dltensor"] == 0


def test_a_capsule_of_another_name_is_not_used() -> None:
    class Odd(Fake):
        __dlpack_c_exchange_api__ = _capsule_new(ctypes.addressof(_ExchangeAPI()), b"something_else", None)

    assert _native._testing._route(Odd((3,), None)) == "other"


def test_forced_paths() -> None:
    p = Producer()
    t = p.Tensor((3,), None)
    assert _native.launch_view(t, path="exchange").stream == STREAM
    with pytest.raises(caijit.ArgumentError, match="cannot pass"):
        _native.launch_view(t, path="generic")
    with pytest.raises(caijit.ArgumentError, match="no conversion path"):
        _native.launch_view(t, path="nonsense")


def test_phase_times() -> None:
    p = Producer()
    _native.phase_times(reset=True, enable=True)
    try:
        _native.launch_view(p.Tensor((3,), None))
        times = _native.phase_times(reset=True)
    finally:
        _native.phase_times(enable=False)
    assert times["arg.exchange"][0] == 1 and times["producer_stream"][0] == 1
    assert all(isinstance(c, int) and isinstance(ns, int) for c, ns in times.values())


def _typed(module: str, qualname: str, base: type = object) -> Any:
    t = type(qualname, (base,), {"__module__": module})
    t.__qualname__ = qualname
    return t


def test_routes_by_type() -> None:
    """Known producers are recognised by their MRO's names, subclasses included, whatever
    `cupy.*` module defines CuPy's ndarray (no CuPy needed: only the route is asked)."""
    for module, name in [("cupy", "ndarray"), ("cupy._core.core", "ndarray"), ("cupy._core.core", "_ndarray_base"), ("cupy._future", "ndarray")]:
        t = _typed(module, name)
        assert _native._testing._route(t()) == "cupy", (module, name)
        assert _native._testing._route(_typed("user", "Sub", t)()) == "cupy"
    for module, name in [("numpy", "ndarray"), ("cupyx", "ndarray"), ("cupy", "Stream")]:
        assert _native._testing._route(_typed(module, name)()) == "other", (module, name)
    for module in ("numba.cuda.cudadrv.devicearray", "numba_cuda.numba.cuda.cudadrv.devicearray"):
        assert _native._testing._route(_typed("user", "Sub", _typed(module, "DeviceNDArrayBase"))()) == "numba"
    assert _native._testing._route(_typed("mylib.cudadrv.devicearray", "DeviceNDArrayBase")()) == "other"
    torch_like = _typed("torch", "Tensor")
    assert _native._testing._route(torch_like()) == "torch"
    assert _native._testing._route(_typed("torch.nn.parameter", "Parameter", torch_like)()) == "torch"
    assert _native._testing._route(3) == "other" and _native._testing._route(None) == "other"


class _NumbaMemoryPointer:
    """numba-cuda's MemoryPointer: the pointer as an attribute, and a property returning it."""

    def __init__(self, pointer: Any) -> None:
        self.device_pointer = pointer

    @property
    def device_ctypes_pointer(self) -> Any:
        return self.device_pointer


class _NumbaLike:
    """What numba-cuda's DeviceNDArrayBase holds, and its __cuda_array_interface__ as
    numba-cuda 0.30 writes it (fake device memory: nothing is dereferenced)."""

    def __init__(self, shape: tuple[int, ...], strides: tuple[int, ...], dtype: Any, ptr: int, stream: Any = 0) -> None:
        import numpy as np

        self.shape, self.strides, self.dtype, self.stream = shape, strides, np.dtype(dtype), stream
        self.gpu_data = _NumbaMemoryPointer(ctypes.c_size_t(ptr))

    @property
    def device_ctypes_pointer(self) -> Any:
        return self.gpu_data.device_ctypes_pointer

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        size, contiguous = self.dtype.itemsize, True
        for n, s in zip(reversed(self.shape), reversed(self.strides)):
            if n > 1 and s != 0:
                if size != s:
                    contiguous = False
                    break
                size *= n
        stream = self.stream
        return {
            "shape": self.shape,
            "strides": None if contiguous else tuple(self.strides),
            "data": (self.device_ctypes_pointer.value or 0, False),
            "typestr": self.dtype.str,
            "stream": int(stream) if stream != 0 else None,
            "version": 3,
        }


def test_numba_fast_path_matches_numbas_interface() -> None:
    Base = _typed("numba.cuda.cudadrv.devicearray", "DeviceNDArrayBase", _NumbaLike)
    ptr = 0x7F0000000000
    cases = [
        ((3, 4), (16, 4), "float32", 0),
        ((3, 4), (4, 12), "float32", 0),  # F order
        ((3, 1), (4, 999), "float32", 0),  # an extent of 1 with any stride is still C order
        ((2, 3), (48, 8), "int64", 0x5EED),  # a stream, strided
        ((0, 3), (12, 4), "float32", 0),
        ((), (), "int16", 0),
    ]
    for shape, strides, dtype, stream in cases:
        a = Base(shape, strides, dtype, ptr if 0 not in shape else 0, stream)
        fast, generic = _native.launch_view(a, path="known"), _native.launch_view(a, path="generic")
        facts = lambda v: (v.shape, v.strides, v.ptr, str(v.dtype), v.readonly, v.stream)  # noqa: E731
        assert facts(fast) == facts(generic), (shape, strides)
        assert _native.launch_view(a).stream == (stream or None)


class _CUdeviceptr:
    """cuda-python's `CUdeviceptr`: no `value`, an int through `__int__`."""

    def __init__(self, ptr: int) -> None:
        self._ptr = ptr

    def __int__(self) -> int:
        return self._ptr


class _RaisingValue:
    @property
    def value(self) -> int:
        raise RuntimeError("boom")


@pytest.mark.parametrize("pointer", [_CUdeviceptr(0x7F0000000000), object(), None, ctypes.c_ssize_t(-8), _RaisingValue()],
                         ids=["CUdeviceptr", "object", "None", "negative", "value raises"])
def test_numba_pointers_the_fast_path_cannot_read_get_the_generic_answer(pointer: Any) -> None:
    """A pointer that is not a ctypes pointer (or whose value is not an address) is not
    reinterpreted by the fast path: the launch reads the object's own interface, and
    reports the error that gives, typed."""
    Base = _typed("numba.cuda.cudadrv.devicearray", "DeviceNDArrayBase", _NumbaLike)
    a = Base((4,), (4,), "float32", 0)
    a.gpu_data = _NumbaMemoryPointer(pointer)
    outcomes = []
    for path in ("known", "generic"):
        with pytest.raises(caijit.CaijitError) as e:
            _native.launch_view(a, path=path)
        outcomes.append((type(e.value), str(e.value)))
    assert outcomes[0] == outcomes[1]


def test_numba_broadcast_axes_keep_their_zero_strides() -> None:
    """Numba's own interface calls an array with a broadcast axis (stride 0) contiguous,
    which would have a kernel read 12 elements of a 4-element allocation: the fast path
    keeps the real strides."""
    Base = _typed("numba.cuda.cudadrv.devicearray", "DeviceNDArrayBase", _NumbaLike)
    v = _native.launch_view(Base((3, 4), (0, 8), "float64", 0x7F0000000000, 0), path="known")
    assert tuple(v.strides) == (0, 8) and not v.is_c_contiguous
    lo, hi = v.byte_extent
    assert hi - lo == 4 * 8


class _CupyLike:
    """What CuPy's ndarray holds that caijit reads (`dtype`, `data.ptr`, `data.device_id`,
    `ndim`, `size`, `shape`, `strides`, `_c_contiguous`), and its __cuda_array_interface__ as CuPy 14 writes
    it, with the stream its C function reports (fake device memory: nothing is
    dereferenced)."""

    def __init__(self, shape: tuple[int, ...], strides: tuple[int, ...], dtype: Any, ptr: int) -> None:
        import numpy as np

        self.shape, self.strides, self.dtype = shape, strides, np.dtype(dtype)
        self.ndim, self.size = len(shape), int(np.prod(shape))
        self.data = type("MemoryPointer", (), {"ptr": ptr, "device_id": 0})()
        c = np.lib.stride_tricks.as_strided(np.empty(1, self.dtype), shape, strides) if shape else np.empty((), self.dtype)
        self._c_contiguous = bool(c.flags.c_contiguous)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        stream = _cupy_current_stream() or 1
        return {
            "shape": self.shape,
            "strides": None if self._c_contiguous else self.strides,
            "data": (self.data.ptr if self.size > 0 else 0, False),
            "typestr": self.dtype.str,
            "descr": [("", self.dtype.str)],
            "stream": stream,
            "version": 3,
        }


#: The stream the fake `cupy_backends.cuda.stream.get_current_stream_ptr` returns.
_CUPY_STREAM = {"ptr": STREAM}


def _cupy_current_stream() -> int:
    return int(_CUPY_STREAM["ptr"])


_get_current_stream_ptr = ctypes.CFUNCTYPE(ctypes.c_ssize_t)(_cupy_current_stream)


@pytest.mark.skipif(has("cupy_backends"),
                    reason="CuPy is installed: its own function serves (test_fast_paths_gpu.py compares CuPy's paths)")
def test_cupy_fast_path_matches_cupys_interface(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CuPy path's view equals the one CuPy's own interface gives, and its stream comes
    from the C function CuPy's export calls, found through Cython's `__pyx_capi__` (here a
    capsule of the same name and signature made with ctypes)."""
    import sys
    import types

    module = types.ModuleType("cupy_backends.cuda.stream")
    capsule = _capsule_new(ctypes.cast(_get_current_stream_ptr, ctypes.c_void_p), b"intptr_t (void)", None)
    module.__pyx_capi__ = {"get_current_stream_ptr": capsule}  # type: ignore[attr-defined]
    _KEEP.append((module, capsule))  # caijit keeps the function for the process
    for name in ("cupy_backends", "cupy_backends.cuda"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.stream", sys.modules.get("cupy_backends.cuda.stream") or module)
    Base = _typed("cupy", "ndarray", _CupyLike)
    ptr = 0x7F0000000000
    cases = [((3, 4), (16, 4), "float32"), ((3, 4), (4, 12), "float32"), ((2, 3), (48, 8), "int64"), ((5,), (8,), "float32"), ((5,), (4,), "float32"),
             ((0,), (4,), "float32"), ((2, 0), (4, 4), "float32"), ((), (), "int16")]
    for shape, strides, dtype in cases:
        a = Base(shape, strides, dtype, ptr)
        fast, generic = _native.launch_view(a, path="known"), _native.launch_view(a, path="generic")
        facts = lambda v: (v.shape, v.strides, v.ptr, str(v.dtype), v.readonly, v.stream, v.device)  # noqa: E731
        assert facts(fast)[:6] == facts(generic)[:6], (shape, strides)
        assert fast.stream == STREAM and fast.device == 0
    # A Python subclass may override what CuPy's interface reads (here `size`, which the
    # 1-D shortcut of CuPy's own type reads): its arrays are read as the interface reads them.
    Sub = type("Sub", (Base,), {"size": property(lambda self: 7, lambda self, v: None)})
    a = Sub((6,), (4,), "float32", ptr)
    assert _native.launch_view(a, path="known").shape == _native.launch_view(a, path="generic").shape == (6,)
    _CUPY_STREAM["ptr"] = 0
    try:
        assert _native.launch_view(Base((4,), (4,), "float32", ptr)).stream == 1  # the null stream: legacy
    finally:
        _CUPY_STREAM["ptr"] = STREAM
