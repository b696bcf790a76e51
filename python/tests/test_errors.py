"""caijit's exceptions carry their data as attributes (CPU: what can fail without a GPU)."""

from __future__ import annotations

import pytest

import caijit


def test_compile_errors_carry_the_log_and_no_code_when_nvrtc_ran() -> None:
    with pytest.raises(caijit.CompileError) as e:
        caijit.module('extern "C" __global__ void k(float* y) { y[0] = undefined_name; }')["k"].compile(arch="sm_90")
    assert "undefined_name" in e.value.log
    assert e.value.code is None and e.value.code_name is None


def test_refused_options_name_the_option() -> None:
    with pytest.raises(caijit.CompileError, match="--no-such-option"):
        caijit.module('extern "C" __global__ void k() {}', options=("--no-such-option",))["k"].compile(arch="sm_90")


@pytest.mark.gpu
def test_argument_errors_name_the_argument_index_name_and_type() -> None:
    k = caijit.kernel('extern "C" __global__ void k(int n, float* x) {}', "k")
    with pytest.raises(caijit.ArgumentError) as e:
        k[1, 1](3, caijit.zeros(4, "int32"))
    assert (e.value.index, e.value.argument, e.value.ctype) == (1, "x", "float*")
    assert isinstance(e.value, TypeError) and "argument 1 `x` (`float*`)" in str(e.value)


@pytest.mark.gpu
def test_driver_errors_carry_the_cuda_result() -> None:
    with pytest.raises(caijit.LaunchError) as e:
        caijit.empty(1 << 52, "uint8")
    assert (e.value.code, e.value.code_name) == (2, "CUDA_ERROR_OUT_OF_MEMORY")
    assert e.value.call == "cuMemAllocFromPoolAsync"
    caijit.zeros(4)  # the process is still usable


def test_every_class_has_its_attributes_with_defaults() -> None:
    assert caijit.ArgumentError("m").index is None and caijit.ArgumentError("m").argument is None
    assert caijit.ArgumentError("m").ctype is None
    assert caijit.LaunchError("m").code is None and caijit.LaunchError("m").code_name is None
    assert caijit.CompileError("m").log == "" and caijit.CompileError("m").code is None
    assert issubclass(caijit.CacheError, OSError) and issubclass(caijit.CacheError, caijit.CaijitError)


def test_conversion_errors_name_the_argument_index_name_and_declared_type() -> None:
    """An argument refused while it is converted (before any GPU work) says which one."""
    np = pytest.importorskip("numpy")
    k = caijit.kernel('extern "C" __global__ void k(int n, const float* x) {}', "k")
    with pytest.raises(caijit.ArgumentError, match="host memory") as e:
        k[1, 1](3, np.zeros(4, np.float32))
    assert (e.value.index, e.value.argument, e.value.ctype) == (1, "x", "const float*")
    t = caijit.kernel("template <typename T> __global__ void t(T* y, T v) {}")
    with pytest.raises(caijit.ArgumentError, match="cannot pass") as e:
        t[1, 1](object(), 1.0)
    assert (e.value.index, e.value.argument, e.value.ctype) == (0, "y", "T*")
    with pytest.raises(caijit.ArgumentError) as e:
        caijit.ops.scale(np.zeros(3), 2.0)
    assert (e.value.index, e.value.argument) == (0, "x")
