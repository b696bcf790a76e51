"""DLPack import and export: capsules read on the CPU (NumPy's), the struct layouts against
dlpack.h, the producer checks of the import (the capsule's own device, one call of a
producer's __dlpack__), and CUDA producers seen only through __dlpack__ on the GPU."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest

import caijit
from caijit import _native
from conftest import DLPackOnly

DTYPES = {
    np.bool_: ((6, 8, 1), "|b1"),
    np.int8: ((0, 8, 1), "|i1"),
    np.int16: ((0, 16, 1), "<i2"),
    np.int32: ((0, 32, 1), "<i4"),
    np.int64: ((0, 64, 1), "<i8"),
    np.uint8: ((1, 8, 1), "|u1"),
    np.uint16: ((1, 16, 1), "<u2"),
    np.uint32: ((1, 32, 1), "<u4"),
    np.uint64: ((1, 64, 1), "<u8"),
    np.float16: ((2, 16, 1), "<f2"),
    np.float32: ((2, 32, 1), "<f4"),
    np.float64: ((2, 64, 1), "<f8"),
    np.complex64: ((5, 64, 1), "<c8"),
    np.complex128: ((5, 128, 1), "<c16"),
}


def _capsule(a: np.ndarray, versioned: bool) -> Any:
    return a.__dlpack__(max_version=(1, 0)) if versioned else a.__dlpack__()


@pytest.mark.parametrize("versioned", [False, True])
def test_capsule_reading_matches_numpy(versioned: bool) -> None:
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    for a in (base, base[:, ::2], base.T, base[1], np.ones((), np.float32)):
        cap = _capsule(a, versioned)
        t = _native._testing._dlpack_read(cap)
        assert tuple(t["shape"]) == a.shape
        if t["strides"] is not None:
            assert tuple(s * a.itemsize for s in t["strides"]) == a.strides
        else:
            assert a.flags.c_contiguous
        assert t["dtype"] == (2, 32, 1) and t["caijit_dtype"] == "<f4"
        assert t["data"] == a.__array_interface__["data"][0]
        assert t["device"] == (1, 0)
        assert t["readonly"] is False
        assert type(cap).__name__ == "PyCapsule"


def test_versioned_capsules_carry_readonly() -> None:
    a = np.arange(4, dtype=np.int32)
    a.flags.writeable = False
    assert _native._testing._dlpack_read(a.__dlpack__(max_version=(1, 0)))["readonly"] is True


def test_dtype_codes() -> None:
    for np_type, (code, typestr) in DTYPES.items():
        t = _native._testing._dlpack_read(np.zeros(3, np_type).__dlpack__())
        assert t["dtype"] == code and t["caijit_dtype"] == typestr, np_type


def test_not_a_capsule_and_consumed_capsules_are_refused() -> None:
    with pytest.raises(caijit.ArgumentError, match="not a capsule"):
        _native._testing._dlpack_read(3)
    cap = np.zeros(3, np.float32).__dlpack__()
    assert _native._testing._dlpack_consume(cap) is True
    with pytest.raises(caijit.ArgumentError, match="unconsumed"):
        _native._testing._dlpack_read(cap)
    assert _native._testing._dlpack_consume(cap) is False


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _ManagedVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _Version),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _Tensor),
    ]


class _Header(ctypes.Structure):
    _fields_ = [("version", _Version), ("prev_api", ctypes.c_void_p)]


class _ExchangeAPI(ctypes.Structure):
    _fields_ = [("header", _Header)] + [
        (name, ctypes.c_void_p)
        for name in (
            "managed_tensor_allocator",
            "managed_tensor_from_py_object_no_sync",
            "managed_tensor_to_py_object_no_sync",
            "dltensor_from_py_object_no_sync",
            "current_work_stream",
        )
    ]


def test_struct_layouts_match_dlpack_h() -> None:
    """The Rust structs against ctypes' C layout of dlpack.h 1.3's declarations."""
    ours = {name: (size, align, offsets) for name, size, align, offsets in _native._testing._dlpack_layouts()}
    for name, s in {
        "DLPackVersion": _Version,
        "DLDevice": _Device,
        "DLDataType": _DType,
        "DLTensor": _Tensor,
        "DLManagedTensor": _Managed,
        "DLManagedTensorVersioned": _ManagedVersioned,
        "DLPackExchangeAPIHeader": _Header,
        "DLPackExchangeAPI": _ExchangeAPI,
    }.items():
        offsets = [getattr(s, f).offset for f, *_ in s._fields_]
        assert ours[name] == (ctypes.sizeof(s), ctypes.alignment(s), offsets), name


class Exported:
    """Hands out one capsule made by caijit's export."""

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack__(self, **kw: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> Any:
        return (1, 0)


@pytest.mark.parametrize("versioned", [False, True])
def test_export_is_consumed_and_released_once(versioned: bool) -> None:
    """caijit's export (the code behind DeviceArray.__dlpack__), over host memory so that
    NumPy can consume it without a GPU: the consumer reads the same memory and layout, and
    the tensor is released exactly once, when the consumer is done with it."""
    import gc

    a = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    released: list[bool] = []
    cap = _native._testing._dlpack_export_host(a, versioned, released)
    assert type(cap).__name__ == "PyCapsule"
    t = _native._testing._dlpack_read(cap)
    assert (tuple(t["shape"]), t["data"], t["device"], t["dtype"]) == (a.shape, a.__array_interface__["data"][0], (1, 0), (2, 32, 1))
    assert tuple(s * 4 for s in t["strides"]) == a.strides
    b = np.from_dlpack(Exported(cap))
    np.testing.assert_array_equal(b, a)
    assert b.__array_interface__["data"][0] == a.__array_interface__["data"][0]
    del cap
    gc.collect()
    assert released == [], "the consumer holds the tensor"
    del b
    gc.collect()
    assert released == [True]


def test_an_unconsumed_export_is_freed_once() -> None:
    import gc

    released: list[bool] = []
    for versioned in (False, True):
        cap = _native._testing._dlpack_export_host(np.ones(3, np.int16), versioned, released)
        del cap
        gc.collect()
    assert released == [False, False]
    # Consumed by caijit's own consumer helper: released as used.
    cap = _native._testing._dlpack_export_host(np.ones(3, np.int16), True, released)
    assert _native._testing._dlpack_consume(cap) is True
    del cap
    gc.collect()
    assert released == [False, False, True]


def test_a_readonly_export_says_so_when_versioned() -> None:
    a = np.arange(4, dtype=np.int32)
    a.flags.writeable = False
    assert _native._testing._dlpack_read(_native._testing._dlpack_export_host(a, True, []))["readonly"] is True
    assert _native._testing._dlpack_read(_native._testing._dlpack_export_host(a, False, []))["readonly"] is False  # legacy: no flag


def test_host_dlpack_is_refused() -> None:
    k = caijit.kernel('extern "C" __global__ void k(const float* x) {}')
    with pytest.raises(caijit.ArgumentError, match="host memory"):
        k[1, 1](DLPackOnly(np.zeros(3, np.float32)))


class ClaimsCuda:
    """A producer that says its tensor is on CUDA device 0 and hands a host capsule."""

    def __init__(self, a: Any, accepts_max_version: bool = True, raises: Any = None) -> None:
        self.a, self.accepts, self.raises, self.calls = a, accepts_max_version, raises, 0

    def __dlpack__(self, stream: Any = None, **kw: Any) -> Any:
        self.calls += 1
        if self.raises is not None:
            raise self.raises
        if kw and not self.accepts:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self) -> Any:
        return (2, 0)


@pytest.mark.parametrize("accepts_max_version", [True, False])
def test_the_capsules_own_device_is_checked(accepts_max_version: bool) -> None:
    p = ClaimsCuda(np.zeros(3, np.float32), accepts_max_version)
    with pytest.raises(caijit.ArgumentError, match=r"says \(2, 0\) but its capsule's tensor is on \(1, 0\), host memory"):
        _native.launch_view(p)
    # A producer predating DLPack 1.0 is asked again without max_version, once.
    assert p.calls == (1 if accepts_max_version else 2)


def test_a_producers_own_type_error_is_raised_after_one_call() -> None:
    p = ClaimsCuda(np.zeros(3, np.float32), raises=TypeError("the producer's own"))
    with pytest.raises(TypeError, match="the producer's own"):
        _native.launch_view(p)
    assert p.calls == 1


class OnlyDLPack:
    """A producer that speaks nothing but DLPack (records the stream it was asked for)."""

    def __init__(self, a: Any) -> None:
        self.a = a
        self.streams: list[Any] = []

    def __dlpack__(self, stream: Any = None, **kw: Any) -> Any:
        self.streams.append(stream)
        return self.a.__dlpack__(stream=stream, **kw)

    def __dlpack_device__(self) -> Any:
        return self.a.__dlpack_device__()


@pytest.mark.gpu
def test_cuda_dlpack_producers() -> None:
    torch = pytest.importorskip("torch")
    k = caijit.kernel(r"""
        #include <caijit/caijit.cuh>
        template <typename T, int N>
        __global__ void twice(caijit::Array<const T, N> x, caijit::Array<T, N> y) {
            for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < y.size(); i += (long long)gridDim.x * blockDim.x) y[i] = x[i] + x[i];
        }""")
    x = torch.randn(33, 17, device="cuda").t()  # strided
    y = torch.empty(17, 33, device="cuda")
    src = OnlyDLPack(x)
    k.forall(y.numel())(src, y)
    torch.testing.assert_close(y, 2 * x)
    assert src.streams == [1], "asked to order its work before the legacy stream it launched on"
    s = caijit.Stream()
    k.forall(y.numel(), stream=s)(src, y)
    s.synchronize()
    assert src.streams[-1] == s.handle
    bf = OnlyDLPack(torch.randn(64, device="cuda", dtype=torch.bfloat16))
    out = torch.empty(64, device="cuda", dtype=torch.bfloat16)
    k.forall(64)(bf, out)
    torch.testing.assert_close(out, 2 * bf.a)
    # The capsule names the device: the view knows it without asking the driver.
    assert caijit._native.launch_view(src, path="dlpack").device == x.device.index


@pytest.mark.gpu
def test_caijit_arrays_export_dlpack() -> None:
    torch = pytest.importorskip("torch")
    h = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = caijit.to_device(h)
    assert a.__dlpack_device__() == (2, 0)
    t = torch.from_dlpack(a)
    assert t.device.type == "cuda" and t.shape == (3, 4)
    np.testing.assert_array_equal(t.cpu().numpy(), h)
    t.mul_(2)  # zero-copy: the caijit array sees the write
    np.testing.assert_array_equal(a.copy_to_host(), 2 * h)
    del a  # the tensor keeps the memory alive
    np.testing.assert_array_equal(t.cpu().numpy(), 2 * h)
    # A consumer on another stream is ordered after the array's pending work.
    s = caijit.Stream()
    b = caijit.to_device(np.ones(1000, np.float32), stream=s)
    consumer = torch.cuda.Stream()  # torch's default stream is handle 0, which DLPack forbids
    before = caijit.stats()["waits"]
    cap = b.__dlpack__(stream=consumer.cuda_stream)
    assert type(cap).__name__ == "PyCapsule"
    read = caijit._native._testing._dlpack_read(cap)
    assert read["device"] == (2, 0) and read["data"] == b.ptr and tuple(read["shape"]) == (1000,)
    assert caijit.stats()["waits"] == before + 1, "the consumer's stream waits for the array's stream"
    # Consuming it releases it: the array's stream waits for the consumer's (the reverse edge).
    before = caijit.stats()["waits"]
    assert caijit._native._testing._dlpack_consume(cap) is True
    assert caijit.stats()["waits"] == before + 1
    versioned = b.__dlpack__(stream=-1, max_version=(1, 3))
    assert caijit._native._testing._dlpack_read(versioned)["readonly"] is False
    del versioned  # unconsumed: freed by its capsule without ordering
    with pytest.raises(caijit.ArgumentError, match="stream=0"):
        b.__dlpack__(stream=0)
    jax = pytest.importorskip("jax")
    c = caijit.to_device(np.arange(5, dtype=np.int32))
    try:
        j = jax.dlpack.from_dlpack(c)
    except Exception as e:  # noqa: BLE001 - JAX without a GPU backend
        pytest.skip(f"jax cannot take a CUDA DLPack tensor here: {e}")
    np.testing.assert_array_equal(np.asarray(j), np.arange(5))


@pytest.mark.gpu
def test_export_refuses_streams_that_are_not_streams() -> None:
    """Only -1 (no ordering), 1, 2 and handles are CUDA stream values: a negative other than
    -1 is refused before the driver sees it, and the process stays usable."""
    a = caijit.zeros(16, "float32", stream=caijit.Stream())
    for bad in (-2, -(2**40)):
        with pytest.raises(caijit.ArgumentError, match=f"stream={bad}"):
            a.__dlpack__(stream=bad)
    a.__dlpack__(stream=-1)
    caijit.zeros(4).copy_to_host()


@pytest.mark.gpu
def test_export_refuses_another_dl_device() -> None:
    """``dl_device`` asking for another device (the CPU) would need a copy: refused."""
    a = caijit.zeros(4, "float32")
    with pytest.raises(BufferError, match="dl_device"):
        a.__dlpack__(dl_device=(1, 0), max_version=(1, 0))
    a.__dlpack__(dl_device=a.__dlpack_device__(), max_version=(1, 0))


# A CUDA producer that can only export a copy (DLPack 1.x's IS_COPIED flag).
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_COPIES: list[Any] = []
IS_COPIED = 1 << 1


class CopyingProducer:
    """A CUDA DLPack producer that copies (flags IS_COPIED), as DLPack 1.x allows when the
    consumer does not pass copy=False. Records the keyword arguments it was called with."""

    def __init__(self) -> None:
        self.kwargs: list[dict[str, Any]] = []

    def __dlpack__(self, **kw: Any) -> Any:
        self.kwargs.append(kw)
        if kw.get("copy") is False:
            raise BufferError("this producer can only export a copy")
        shape = (ctypes.c_int64 * 1)(4)
        m = _ManagedVersioned()
        m.version.major, m.version.minor = 1, 3
        m.flags = IS_COPIED
        m.dl_tensor.data = 0x7F0000001000
        m.dl_tensor.device.device_type, m.dl_tensor.device.device_id = 2, 0
        m.dl_tensor.ndim = 1
        m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits, m.dl_tensor.dtype.lanes = 2, 32, 1
        m.dl_tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        _COPIES.append((shape, m))
        return _capsule_new(ctypes.addressof(m), b"dltensor_versioned", None)

    def __dlpack_device__(self) -> Any:
        return (2, 0)



def test_an_import_asks_for_no_copy_and_refuses_a_copy() -> None:
    """A kernel's writes into a producer's copy would be lost: caijit asks ``copy=False``,
    and a capsule flagged IS_COPIED is refused all the same."""
    p = CopyingProducer()
    with pytest.raises(BufferError, match="only export a copy"):
        _native.launch_view(p, path="dlpack")
    assert p.kwargs[0].get("copy") is False

    class Insistent(CopyingProducer):
        def __dlpack__(self, **kw: Any) -> Any:
            return super().__dlpack__(**{k: v for k, v in kw.items() if k != "copy"})

    with pytest.raises(caijit.ArgumentError, match="IS_COPIED"):
        _native.launch_view(Insistent(), path="dlpack")
