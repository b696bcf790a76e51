"""The derive's Python side, through the example extension (examples/rust-extension):
a Rust type exporting CAI v3 to Python and built from any CAI object. No GPU needed:
pointers are only described, never dereferenced."""

from __future__ import annotations

from typing import Any

import pytest

import caijit

cai_image = pytest.importorskip("cai_image", reason="examples/rust-extension is not built (scripts/setup.sh builds it)")

PTR = 0x7F00_1234_0000


class Producer:
    def __init__(self, **kw: Any) -> None:
        self.__cuda_array_interface__ = {"shape": (3, 4), "typestr": "<f4", "data": (PTR, False), "version": 3, "strides": None, "stream": 7, **kw}


def test_rust_type_exports_cai_v3_with_its_stream() -> None:
    img = cai_image.Image(PTR, 3, 4, stream=2)
    cai = img.__cuda_array_interface__
    assert cai["version"] == 3 and cai["stream"] == 2 and cai["strides"] is None
    i = caijit.parse_interface(img)
    assert (i.shape, i.strides, str(i.dtype), i.ptr) == ((3, 4), (16, 4), "float32", PTR)
    assert caijit.parse_interface(cai_image.Image(0, 0, 5)).ptr == 0  # empty: data (0, readonly)


def test_rust_function_takes_any_cai_object() -> None:
    assert cai_image.describe(Producer()) == (PTR, (3, 4), 7)
    assert cai_image.describe(cai_image.Image(PTR, 2, 8)) == (PTR, (2, 8), None)
    flat = cai_image.flatten(Producer(stream=1))
    assert caijit.parse_interface(flat).shape == (1, 12)


@pytest.mark.parametrize(
    "bad,key",
    [
        ({"typestr": "<f8"}, "typestr"),
        ({"shape": (2, 3, 4)}, "shape"),
        ({"strides": (4, 12)}, "strides"),
        ({"data": (PTR, True)}, "data"),
        ({"stream": 0}, "stream"),
    ],
)
def test_rust_import_checks_and_names_the_key(bad: dict[str, Any], key: str) -> None:
    with pytest.raises(ValueError, match=f"'{key}'"):
        cai_image.describe(Producer(**bad))


def test_objects_without_an_interface_are_type_errors() -> None:
    with pytest.raises(TypeError, match="no __cuda_array_interface__"):
        cai_image.describe(object())
