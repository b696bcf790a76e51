"""parse_interface on dicts shaped exactly as each producer exports them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import caijit

PTR = 0x7F12_3400_0000


def cupy_like(shape: tuple[int, ...] = (4, 3), typestr: str = "<f4", stream: int = 1) -> dict[str, Any]:
    # CuPy 14: version 3, descr, strides None when C-contiguous, the current stream.
    return {
        "shape": shape,
        "typestr": typestr,
        "descr": [("", typestr)],
        "stream": stream,
        "version": 3,
        "strides": None,
        "data": (PTR, False),
    }


def test_cupy_v3_with_descr_and_stream() -> None:
    i = caijit.parse_interface(cupy_like(stream=0x55AA00))
    assert i.shape == (4, 3)
    assert i.strides == (12, 4)
    assert i.dtype == np.dtype(np.float32)
    assert (i.ptr, i.readonly, i.version, i.stream) == (PTR, False, 3, 0x55AA00)
    assert (i.size, i.nbytes, i.itemsize, i.ndim) == (12, 48, 4, 2)
    assert i.is_c_contiguous and not i.is_f_contiguous
    assert caijit.parse_interface(cupy_like(stream=1)).stream == 1
    assert caijit.parse_interface(cupy_like(stream=2)).stream == 2


def test_cupy_empty_array_has_null_pointer() -> None:
    d = cupy_like(shape=(0, 5))
    d["data"] = (0, False)
    i = caijit.parse_interface(d)
    assert (i.size, i.nbytes, i.ptr) == (0, 0, 0)
    assert i.is_c_contiguous and i.is_f_contiguous


def test_pytorch_v2_without_stream_key() -> None:
    # torch.Tensor.__cuda_array_interface__ of a transposed (2, 3) float16 tensor.
    d = {"typestr": "<f2", "shape": (3, 2), "strides": (2, 6), "data": (PTR, False), "version": 2}
    i = caijit.parse_interface(d)
    assert i.stream is None and i.version == 2
    assert i.dtype == np.dtype(np.float16)
    assert i.strides == (2, 6)
    assert i.is_f_contiguous and not i.is_c_contiguous


def test_numba_v3_with_stream_none() -> None:
    d = {"shape": (5,), "strides": None, "data": (PTR, False), "typestr": "<i8", "version": 3, "stream": None}
    i = caijit.parse_interface(d)
    assert i.stream is None
    assert i.dtype == np.dtype(np.int64)
    assert i.strides == (8,)


def test_jax_v2_readonly_without_strides_key() -> None:
    d = {"shape": (2, 2), "typestr": "<f4", "data": (PTR, True), "version": 2}
    i = caijit.parse_interface(d)
    assert i.readonly and i.stream is None and i.strides == (8, 4)


def test_pycuda_explicit_strides_on_contiguous_array() -> None:
    d = {"shape": (3, 4), "typestr": "<u2", "data": (PTR, False), "strides": (8, 2), "version": 3, "stream": None}
    i = caijit.parse_interface(d)
    assert i.is_c_contiguous
    # Re-exported by the producer rules: contiguous → strides None.
    assert i.__cuda_array_interface__["strides"] is None


def test_every_supported_dtype() -> None:
    for ts, np_dtype in [
        ("|b1", np.bool_),
        ("|i1", np.int8),
        ("<i2", np.int16),
        ("<i4", np.int32),
        ("<i8", np.int64),
        ("|u1", np.uint8),
        ("<u2", np.uint16),
        ("<u4", np.uint32),
        ("<u8", np.uint64),
        ("<f2", np.float16),
        ("<f4", np.float32),
        ("<f8", np.float64),
        ("<c8", np.complex64),
        ("<c16", np.complex128),
    ]:
        assert caijit.parse_interface(cupy_like(typestr=ts)).dtype == np.dtype(np_dtype), ts


def test_bfloat16_only_when_asked() -> None:
    with pytest.raises(caijit.InterfaceError, match="typestr"):
        caijit.parse_interface(cupy_like(typestr="<V2"))
    assert caijit.parse_interface(cupy_like(typestr="<V2"), bfloat16=True).itemsize == 2


def test_negative_strides_and_extent() -> None:
    d = {"shape": (4,), "typestr": "<f8", "data": (PTR, False), "strides": (-8,), "version": 3}
    i = caijit.parse_interface(d)
    assert i.byte_extent == (-24, 8)
    assert not i.is_c_contiguous


def test_object_with_the_attribute() -> None:
    class Producer:
        __cuda_array_interface__ = cupy_like()

    assert caijit.parse_interface(Producer()).shape == (4, 3)


def test_interface_is_itself_a_cai_object() -> None:
    i = caijit.parse_interface(cupy_like(stream=7))
    again = caijit.parse_interface(i)
    assert (again.shape, again.stream, again.version) == ((4, 3), 7, 3)


def test_hierarchy() -> None:
    assert issubclass(caijit.InterfaceError, (caijit.CaijitError, ValueError))
    assert issubclass(caijit.ArgumentError, caijit.CaijitError) and issubclass(caijit.ArgumentError, TypeError)
    for cls in (caijit.CompileError, caijit.LaunchError, caijit.CudaNotAvailable):
        assert issubclass(cls, caijit.CaijitError)


def _without(d: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != key}


MALFORMED: list[tuple[str, dict[str, Any], str]] = [
    ("stream 0", {**cupy_like(), "stream": 0}, "stream"),
    ("a mask", {**cupy_like(), "mask": object()}, "mask"),
    ("null pointer with elements", {**cupy_like(), "data": (0, False)}, "data"),
    ("big-endian", cupy_like(typestr=">i4"), "typestr"),
    ("version 4", {**cupy_like(), "version": 4}, "version"),
    ("negative extent", {**cupy_like(), "shape": (3, -1)}, "shape"),
    ("data of length 3", {**cupy_like(), "data": (PTR, False, 0)}, "data"),
    ("overflowing shape", {**cupy_like(), "shape": (2**32, 2**32)}, "shape"),
    ("extent beyond 64 bits", {**cupy_like(), "shape": (2**64,)}, "shape"),
    ("negative pointer", {**cupy_like(), "data": (-1, False)}, "data"),
    ("readonly not a bool", {**cupy_like(), "data": (PTR, "no")}, "data"),
    ("strides rank", {**cupy_like(), "strides": (4,)}, "strides"),
    ("string shape", {**cupy_like(), "shape": "3"}, "shape"),
    ("float stream", {**cupy_like(), "stream": 1.5}, "stream"),
    ("typestr not a str", {**cupy_like(), "typestr": 4}, "typestr"),
    ("unknown kind", cupy_like(typestr="<O8"), "typestr"),
    ("missing shape", _without(cupy_like(), "shape"), "shape"),
    ("missing typestr", _without(cupy_like(), "typestr"), "typestr"),
    ("missing data", _without(cupy_like(), "data"), "data"),
    ("missing version", _without(cupy_like(), "version"), "version"),
]


@pytest.mark.parametrize("case,d,key", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_interfaces_name_the_key(case: str, d: dict[str, Any], key: str) -> None:
    with pytest.raises(caijit.InterfaceError, match=f"'{key}'"):
        caijit.parse_interface(d)


def test_non_dict_interface() -> None:
    class Bad:
        __cuda_array_interface__ = [("shape", (3,))]

    with pytest.raises(caijit.InterfaceError, match="__cuda_array_interface__ must be a dict, got list"):
        caijit.parse_interface(Bad())


def test_object_without_interface_is_an_argument_error() -> None:
    with pytest.raises(caijit.ArgumentError, match="has no __cuda_array_interface__"):
        caijit.parse_interface(np.zeros(3))


def test_producer_exceptions_are_the_cause_of_an_interface_error() -> None:
    class Broken:
        @property
        def __cuda_array_interface__(self) -> dict[str, Any]:
            raise RuntimeError("producer exploded")

    with pytest.raises(caijit.InterfaceError, match="Broken raised RuntimeError: producer exploded") as e:
        caijit.parse_interface(Broken())
    assert isinstance(e.value.__cause__, RuntimeError)


class _Cai:
    def __init__(self, interface: dict[str, Any]) -> None:
        self.__cuda_array_interface__ = interface


def test_numpy_bools_and_invalid_unicode_in_an_interface() -> None:
    # NumPy's bool is a bool for the readonly flag, as NumPy's ints are ints elsewhere.
    for flag in (np.True_, np.False_):
        view = caijit.parse_interface(_Cai(dict(cupy_like(), data=(np.uint64(PTR), flag))))
        assert view.readonly is bool(flag)
    # A typestr with a lone surrogate is a wrong typestr, not an encoding crash.
    with pytest.raises(caijit.InterfaceError, match=r"\['typestr'\] must be a str"):
        caijit.parse_interface(_Cai(cupy_like(typestr="<f\ud800")))


def test_a_producer_error_names_the_argument_in_its_message() -> None:
    class Lazy:
        @property
        def __cuda_array_interface__(self) -> dict[str, Any]:
            raise RuntimeError("device lost")

    k = caijit.kernel('extern "C" __global__ void k(float* x, float* y) {}')
    with pytest.raises(caijit.InterfaceError, match=r"^argument 1 `y` \(`float\*`\): the __cuda_array_interface__ of a Lazy raised") as e:
        k[1, 1](_Cai(cupy_like()), Lazy())
    assert e.value.index == 1


def test_a_malformed_dlpack_device_is_an_argument_error() -> None:
    class Odd:
        def __init__(self, device: Any) -> None:
            self.device = device

        def __dlpack__(self, **kw: Any) -> Any:
            raise AssertionError("not asked: the device is read first")

        def __dlpack_device__(self) -> Any:
            return self.device

    k = caijit.kernel('extern "C" __global__ void k(float* x) {}')
    for device in (2, ("cuda", 0), (2,)):
        with pytest.raises(caijit.ArgumentError, match=r"argument 0: a \S*Odd by DLPack: its __dlpack_device__\(\) returned .*, not a \(device type, device id\) pair of ints"):
            k[1, 1](Odd(device))


def test_array_dtypes_are_checked_before_any_device_work() -> None:
    """Dtypes caijit cannot hold are refused by name, on any machine (no GPU needed)."""
    with pytest.raises(caijit.ArgumentError, match="big-endian"):
        caijit.empty(3, ">f4")
    with pytest.raises(caijit.ArgumentError, match="float128"):
        caijit.empty(3, "float128")
    with pytest.raises(caijit.ArgumentError, match="not a dtype"):
        caijit.empty(3, "nonsense")
