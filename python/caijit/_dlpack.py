"""DLPack import (consumer side), read with ctypes so that no unsafe code is needed in the
extension: the capsule's ``DLManagedTensor`` (or ``DLManagedTensorVersioned``) becomes a
CUDA Array Interface view that keeps the capsule alive.

The DLPack stream handshake: ``obj.__dlpack__(stream=s)`` makes the producer order its own
pending work before ``s``; the view then carries ``s`` as its producer stream, so caijit's
stream protocol launches on ``s`` (or orders against it) like for any CAI array.
"""

from __future__ import annotations

import ctypes
from typing import Any

from .errors import ArgumentError, InterfaceError

KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED, KDL_CPU = 2, 3, 13, 1
_READ_ONLY = 1


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


# Capsules are passed by address (``id()`` in CPython), with the GIL held: the same calls
# serve reading a capsule we hold and a capsule being destroyed (no new references to it).
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", ctypes.pythonapi))
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", ctypes.pythonapi))

# DLPack type codes → NumPy kinds (bfloat16 is exported as caijit reads it: "<V2").
_KINDS = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}


def _typestr(code: int, bits: int, lanes: int) -> str:
    if lanes != 1:
        raise InterfaceError(f"DLPack dtype with {lanes} lanes is not supported")
    if code == 4 and bits == 16:
        return "<V2"
    if code not in _KINDS or bits % 8:
        raise InterfaceError(f"DLPack dtype code {code} with {bits} bits is not supported")
    return ("|" if bits == 8 else "<") + _KINDS[code] + str(bits // 8)


class DLPackView:
    """A CUDA Array Interface over a DLPack capsule, alive as long as this object."""

    def __init__(self, capsule: Any, interface: dict[str, Any], bfloat16: bool) -> None:
        self._capsule = capsule  # the producer frees the memory when the capsule dies
        self.__cuda_array_interface__ = interface
        self.bfloat16 = bfloat16


def is_cuda_dlpack(obj: Any) -> bool:
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is None or not hasattr(obj, "__dlpack__"):
        return False
    return int(dev()[0]) in (KDL_CUDA, KDL_CUDA_MANAGED)


def view(obj: Any, stream: int) -> DLPackView:
    """Import ``obj`` by DLPack for use on ``stream`` (a CAI-style handle: 1, 2 or a CUstream)."""
    dev_type, _ = obj.__dlpack_device__()
    if int(dev_type) not in (KDL_CUDA, KDL_CUDA_MANAGED):
        raise ArgumentError(f"a DLPack array on device type {dev_type} is not on a CUDA device (no implicit copies)")
    try:
        capsule = obj.__dlpack__(stream=stream, max_version=(1, 0))
    except TypeError:  # producers predating DLPack 1.0
        capsule = obj.__dlpack__(stream=stream)
    interface = interface_from_capsule(capsule)
    interface["stream"] = stream  # the producer ordered its work before this stream
    return DLPackView(capsule, interface, bfloat16=interface["typestr"] == "<V2")


def interface_from_capsule(capsule: Any) -> dict[str, Any]:
    """The CAI dict (stream None) of an unconsumed DLPack capsule, legacy or versioned."""
    address = id(capsule)
    if _is_valid(address, b"dltensor_versioned"):
        managed: Any = _DLManagedTensorVersioned.from_address(_get_pointer(address, b"dltensor_versioned"))
        if managed.version.major != 1:
            raise InterfaceError(f"DLPack version {managed.version.major}.{managed.version.minor} is not supported")
        readonly = bool(managed.flags & _READ_ONLY)
    elif _is_valid(address, b"dltensor"):
        managed = _DLManagedTensor.from_address(_get_pointer(address, b"dltensor"))
        readonly = False
    else:
        raise InterfaceError("__dlpack__() did not return an unconsumed DLPack capsule")
    t = managed.dl_tensor
    typestr = _typestr(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    itemsize = t.dtype.bits // 8
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = None if not t.strides else tuple(t.strides[i] * itemsize for i in range(t.ndim))
    empty = any(n == 0 for n in shape)
    return {
        "shape": shape,
        "typestr": typestr,
        "data": (0 if empty else (t.data or 0) + t.byte_offset, readonly),
        "strides": strides,
        "version": 3,
        "stream": None,  # no stream is known from the capsule itself
    }


# ---------------------------------------------------------------------------- export

_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CapsuleDestructor]

_NAME = b"dltensor"
#: Exported tensors by address: the struct, its shape and strides, the array they keep
#: alive, and the stream the consumer uses it on.
_LIVE: dict[int, tuple[Any, ...]] = {}
_CODES = {"b": 6, "i": 0, "u": 1, "f": 2, "c": 5}


def _delete_impl(address: int) -> None:
    entry = _LIVE.pop(address, None)
    if entry is not None:
        _release(entry[3], entry[4])


def _release(array: Any, consumer_stream: int) -> None:
    """The consumer is done with ``array``: the array's own stream waits for the work the
    consumer enqueued on its stream before the array may be freed (a reverse edge)."""
    from . import _native

    if consumer_stream not in (-1, array.stream):
        try:
            _native.order_streams(array.stream, consumer_stream, array.device)
        except Exception:  # a deleter cannot raise; a dead context orders nothing anyway
            pass


def _destroy_capsule_impl(capsule: int) -> None:
    # A consumer that took the tensor renamed the capsule ("used_dltensor") and owns it.
    if _is_valid(capsule, _NAME):
        _LIVE.pop(_get_pointer(capsule, _NAME), None)  # never consumed: never used on a stream


# C callbacks (module-level, so they live as long as any capsule that points at them).
_delete = _Deleter(_delete_impl)
_destroy_capsule = _CapsuleDestructor(_destroy_capsule_impl)


def export(array: Any, device: int, consumer_stream: Any) -> Any:
    """A DLPack capsule of a caijit array (legacy ``dltensor``), after making the consumer's
    stream wait for the array's pending work (``stream=-1``: no ordering). When the consumer
    releases the tensor, the array's stream waits for the consumer's stream, so the array
    is not freed under the consumer's last use of it.

    The ordering uses the array's own stream: the export opt-outs change what the CUDA
    Array Interface tells other libraries, never how caijit orders its own memory."""
    from . import _native

    if consumer_stream is None:
        consumer_stream = 1  # the array API: None means the legacy default stream for CUDA
    consumer_stream = int(consumer_stream)
    if consumer_stream == 0:
        raise ArgumentError("__dlpack__(stream=0) is ambiguous; pass 1 (legacy) or 2 (per-thread)")
    if consumer_stream not in (-1, array.stream):
        _native.order_streams(consumer_stream, array.stream, device)
    typestr = array.dtype.str if str(array.dtype) != "void16" else "<V2"
    kind, itemsize = typestr[1], int(typestr[2:])
    code = 4 if typestr == "<V2" else _CODES[kind]
    ndim = len(array.shape)
    shape = (ctypes.c_int64 * max(ndim, 1))(*array.shape)
    strides = (ctypes.c_int64 * max(ndim, 1))(*(s // itemsize for s in array.strides))
    m = _DLManagedTensor()
    m.dl_tensor.data = array.ptr or None
    m.dl_tensor.device = _DLDevice(KDL_CUDA, device)
    m.dl_tensor.ndim = ndim
    m.dl_tensor.dtype = _DLDataType(code, itemsize * 8, 1)
    m.dl_tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    m.dl_tensor.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    m.dl_tensor.byte_offset = 0
    m.deleter = ctypes.cast(_delete, ctypes.c_void_p)
    address = ctypes.addressof(m)
    _LIVE[address] = (m, shape, strides, array, consumer_stream)
    return _capsule_new(address, _NAME, _destroy_capsule)
