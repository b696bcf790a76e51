"""A newcomer's mistakes get messages that name the file, option or key at fault (CPU only)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import caijit
from conftest import Raising, gpu_unavailable_reason

SOURCE = 'extern "C" __global__ void scale(float a, float* y) { y[0] *= a; }\n'
TEMPLATE = "template <typename T>\n__global__ void axpy(T a, const T* x, T* y) { y[0] += a * x[0]; }\n"


def cai(**changes: object) -> dict[str, object]:
    d: dict[str, object] = {"shape": (2, 3), "typestr": "<f4", "data": (0x7F0000000000, False), "version": 3}
    d.update(changes)
    return d


# --- sources given as paths -------------------------------------------------------------


@pytest.mark.parametrize("path", ["/nonexistent/k.cu", "/nonexistent/k.cuh", "/nonexistent/k.h"])
def test_a_missing_source_path_says_no_such_file(path: str) -> None:
    with pytest.raises(caijit.ArgumentError, match="no such file") as e:
        caijit.kernel(path)
    assert path in str(e.value)
    with pytest.raises(caijit.ArgumentError, match="no such file"):
        caijit.module(path)


def test_a_directory_or_binary_source_path_says_so(tmp_path: Path) -> None:
    d = tmp_path / "dir.cu"
    d.mkdir()
    with pytest.raises(caijit.ArgumentError, match="is a directory") as e:
        caijit.kernel(str(d))
    assert str(d) in str(e.value)
    b = tmp_path / "bin.cu"
    b.write_bytes(b"\x7fELF\xff\xfe\x00")
    with pytest.raises(caijit.ArgumentError, match="not UTF-8") as e:
        caijit.kernel(b)
    assert str(b) in str(e.value)


def test_source_text_is_not_read_as_a_path() -> None:
    # One line ending in neither suffix, or text with a newline: source, not a path.
    assert caijit.kernel(SOURCE).name == "scale"


# --- producers' __cuda_array_interface__ ----------------------------------------------------


@pytest.mark.parametrize("exc", [RuntimeError("the device is gone"), KeyError("shape")])
def test_an_exception_in_the_producers_property_is_an_interface_error(exc: BaseException) -> None:
    with pytest.raises(caijit.InterfaceError) as e:
        caijit.parse_interface(Raising(exc))
    assert e.value.__cause__ is exc
    assert "Raising" in str(e.value) and type(exc).__name__ in str(e.value)
    # The same for a launch argument, caught as any caijit error (before the GPU is needed).
    k = caijit.kernel(SOURCE)
    with pytest.raises(caijit.CaijitError) as e2:
        k[1, 1](np.float32(2), Raising(exc))
    assert isinstance(e2.value, caijit.InterfaceError) and e2.value.__cause__ is exc


def test_a_huge_typestr_is_cut_in_the_message() -> None:
    huge = "<f" + "4" * (10 << 20)
    with pytest.raises(caijit.InterfaceError) as e:
        caijit.parse_interface(cai(typestr=huge))
    message = str(e.value)
    assert "'typestr'" in message and len(message) < 400, len(message)
    with pytest.raises(caijit.InterfaceError) as e:
        caijit.parse_interface(cai(shape=("x" * (10 << 20),)))
    assert "'shape'" in str(e.value) and len(str(e.value)) < 400


def test_numpy_integers_are_accepted_in_shapes_and_strides() -> None:
    i = caijit.parse_interface(cai(shape=(np.int64(2), np.int32(3)), strides=(np.int64(12), 4), data=(np.uint64(0x7F0000000000), False)))
    assert i.shape == (2, 3) and i.strides == (12, 4)
    for bad in [(True, 3), (2.0, 3), (np.bool_(True), 3)]:
        with pytest.raises(caijit.InterfaceError, match=r"\['shape'\]"):
            caijit.parse_interface(cai(shape=bad))


def test_array_shapes_accept_numpy_integers() -> None:
    for shape in [np.int64(3), (np.int64(2), 3), [2, np.int32(3)]]:
        try:
            caijit.empty(shape)
        except caijit.CudaNotAvailable:
            pass  # the shape was read; allocating needs a GPU
    for bad in [2.0, (True, 2), "23", (2, -1), (2, None)]:
        with pytest.raises(caijit.ArgumentError, match="shape must be"):
            caijit.zeros(bad)  # type: ignore[arg-type]


def test_a_deeply_nested_list_names_what_it_got() -> None:
    nested: list[object] = []
    for _ in range(100_000):
        nested = [nested]
    with pytest.raises(caijit.InterfaceError) as e:
        caijit.parse_interface(cai(shape=nested))
    message = str(e.value)
    assert not message.endswith("got list "), message
    assert "repr() raised RecursionError" in message, message


def test_a_byte_count_overflow_says_bytes() -> None:
    with pytest.raises(caijit.InterfaceError) as e:
        caijit.parse_interface(cai(shape=(2**31, 2**31)))
    assert "bytes" in str(e.value) and "more elements" not in str(e.value), str(e.value)
    with pytest.raises(caijit.InterfaceError, match="more elements than fit in 64 bits"):
        caijit.parse_interface(cai(shape=(2**40, 2**40)))


# --- inspecting kernels without a GPU -----------------------------------------------------

def test_params_and_compile_without_a_gpu() -> None:
    if gpu_unavailable_reason() is None:
        pytest.skip("this checks the machine without a GPU")
    k = caijit.kernel(SOURCE + TEMPLATE, "scale")
    assert [p["type"] for p in k.params] == ["float", "float*"]
    (info,) = k.compile()  # this kernel's instances only, for sm_90
    assert info["name"] == "scale" and info["arch"] == "sm_90"
    t = caijit.kernel(SOURCE + TEMPLATE, "axpy")
    assert [p["type"] for p in t.specialize("float").params] == ["float", "const float*", "float*"]
    (d,) = t.specialize("double").compile()
    assert d["demangled"].startswith("void axpy<double>(")
    assert t.compile() == []  # a template not launched yet has no instances
    with pytest.raises(caijit.CompileError, match="nope"):
        caijit.kernel('extern "C" __global__ void k(float* y) { y[0] = nope; }').params
    with pytest.raises(caijit.CudaNotAvailable):
        k.num_regs  # a loaded kernel's attribute needs a device


def test_the_inspection_architecture_is_caijit_arch() -> None:
    code = (
        "import caijit\n"
        "k = caijit.kernel('extern \"C\" __global__ void f(int* y) { y[0] = 1; }')\n"
        "print(k.compile()[0]['arch'])\n"
    )
    if gpu_unavailable_reason() is None:
        pytest.skip("with a GPU, device 0's architecture is used")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "CAIJIT_ARCH": "sm_80"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "sm_80"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "CAIJIT_ARCH": "volta"})
    assert r.returncode == 1 and "CAIJIT_ARCH" in r.stderr, r.stderr


def test_an_explicit_nvrtc_path_that_does_not_exist_is_an_error_naming_it() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "caijit", "info"],
        capture_output=True,
        text=True,
        env={**os.environ, "CAIJIT_NVRTC_PATH": "/nonexistent/libnvrtc.so"},
    )
    assert "CAIJIT_NVRTC_PATH=/nonexistent/libnvrtc.so: no such file" in r.stdout, r.stdout


def test_the_skip_reason_is_one_short_line() -> None:

    reason = gpu_unavailable_reason()
    if reason is None:
        pytest.skip("a GPU is present")
    assert "\n" not in reason and len(reason) <= 120, reason
