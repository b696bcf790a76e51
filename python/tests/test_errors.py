"""caijit's exceptions carry their data as attributes (CPU: what can fail without a GPU)."""

from __future__ import annotations

import pytest

import caijit
from conftest import Raising


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
    assert e.value.call == "cuMemAlloc"
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


# --- errors keep their data across conversion (CPU: each is refused before any GPU use) ---

KERNEL = 'extern "C" __global__ void k(int n, const float* x) {}'
TEMPLATE = "template <typename T> __global__ void t(T* y, T v) {}"


class Cai:
    """A foreign array: only `__cuda_array_interface__` (never read by a GPU here)."""

    def __init__(self, **changes: object) -> None:
        d: dict[str, object] = {"shape": (4,), "typestr": "<f4", "data": (0x7F0000000000, False), "version": 3}
        d.update(changes)
        self.__cuda_array_interface__ = {k: v for k, v in d.items() if v is not None}


def where(e: pytest.ExceptionInfo[BaseException]) -> tuple[object, object, object]:
    return (getattr(e.value, "index"), getattr(e.value, "argument"), getattr(e.value, "ctype"))


def test_a_malformed_interface_of_a_launch_argument_names_it() -> None:
    k = caijit.kernel(KERNEL, "k")
    with pytest.raises(caijit.InterfaceError, match="missing the required key 'data'") as e:
        k[1, 1](3, Cai(data=None))
    assert where(e) == (1, "x", "const float*")
    assert str(e.value).startswith("argument 1 `x` (`const float*`): "), str(e.value)
    assert isinstance(e.value, ValueError), "still an InterfaceError (a ValueError), not reclassified"
    t = caijit.kernel(TEMPLATE)
    with pytest.raises(caijit.InterfaceError, match="'stream'") as e:
        t[1, 1](Cai(stream=0), 1.0)
    assert where(e) == (0, "y", "T*")
    # Outside a call, no argument: None, as before.
    with pytest.raises(caijit.InterfaceError) as e:
        caijit.parse_interface(Cai(data=None))
    assert where(e) == (None, None, None)


def test_a_producer_whose_interface_raises_is_named_as_the_argument() -> None:
    exc = RuntimeError("the device is gone")
    k = caijit.kernel(KERNEL, "k")
    with pytest.raises(caijit.InterfaceError) as e:
        k[1, 1](3, Raising(exc))
    assert e.value.__cause__ is exc and "Raising" in str(e.value)
    assert where(e) == (1, "x", "const float*")


def test_wrong_typed_and_oversized_scalars_name_the_argument() -> None:
    k = caijit.kernel(KERNEL, "k")
    x = Cai()
    with pytest.raises(caijit.ArgumentError, match="cannot pass a str") as e:
        k[1, 1]("3", x)
    assert where(e) == (0, "n", "int")
    with pytest.raises(caijit.ArgumentError, match="does not fit in 128 bits") as e:
        k[1, 1](1 << 200, x)
    assert where(e) == (0, "n", "int")
    with pytest.raises(caijit.ArgumentError, match="cannot pass a dict") as e:
        k[1, 1](3, dict(x.__cuda_array_interface__))
    assert where(e) == (1, "x", "const float*")


def test_caijit_ops_errors_name_the_argument_of_the_ops_function() -> None:
    np = pytest.importorskip("numpy")
    x = Cai()
    with pytest.raises(caijit.ArgumentError, match="a must be a number, got str") as e:
        caijit.ops.scale(x, "two")
    assert where(e) == (1, "a", None)
    with pytest.raises(caijit.ArgumentError, match="does not fit in 128 bits") as e:
        caijit.ops.axpy(1 << 200, x, x)
    assert where(e) == (0, "a", None)
    with pytest.raises(caijit.ArgumentError, match="value must be a number") as e:
        caijit.ops.fill(x, object())
    assert where(e) == (1, "value", None)
    with pytest.raises(caijit.InterfaceError, match="missing the required key 'data'") as e:
        caijit.ops.scale(Cai(data=None), 2.0)
    assert where(e) == (0, "x", None)
    assert str(e.value).startswith("argument 0 `x`: "), str(e.value)
    with pytest.raises(caijit.InterfaceError) as e:
        caijit.ops.add(x, Raising(KeyError("shape")))
    assert where(e) == (1, "b", None)
    with pytest.raises(caijit.ArgumentError, match="host memory") as e:
        caijit.ops.add(x, np.zeros(4, np.float32))
    assert where(e) == (1, "b", None)
    with pytest.raises(caijit.ArgumentError, match="host memory") as e:
        caijit.ops.scale(x, 2.0, out=np.zeros(4, np.float32))
    assert where(e)[1:] == ("out", None) and isinstance(e.value.index, int)
    with pytest.raises(caijit.ArgumentError, match="not supported by caijit") as e:
        caijit.ops.cast(x, "object")
    assert where(e) == (1, "dtype", None)


def test_a_kernel_name_the_source_does_not_have_is_an_error_at_once(tmp_path: Any) -> None:
    src = "#include <caijit/caijit.cuh>\nextern \"C\" __global__ void scale(float* x) {}\ntemplate <typename T> __global__ void axpy(T a) {}\n"
    with pytest.raises(caijit.ArgumentError, match=r'no kernel named "scael" in the program \(it has: scale, axpy\)'):
        caijit.kernel(src, "scael")
    with pytest.raises(caijit.ArgumentError, match='no kernel named "axpi<float>"'):
        caijit.kernel(src, "axpi<float>")
    for fine in ("scale", "axpy<float>", "(void(*)(float*))scale", "::scale"):
        caijit.kernel(src, fine)
    # Kernels a macro or a header of the user's may declare: the compiler decides.
    caijit.kernel("#define K(n) __global__ void n() {}\nK(made)\n", "made")
    caijit.kernel('#include "mine.cuh"\n', "elsewhere")


def test_a_path_that_is_no_cuda_source_is_named_as_such(tmp_path: Any) -> None:
    odd = tmp_path / "tk.cuu"
    odd.write_text('extern "C" __global__ void k() {}\n')
    with pytest.raises(caijit.ArgumentError, match=r"tk.cuu' is a file but not a CUDA source \(.cu, .cuh, .h, .hpp\)"):
        caijit.kernel(str(odd))
    with pytest.raises(caijit.ArgumentError, match="no such file"):
        caijit.kernel(str(tmp_path / "missing.cuu"))
    with pytest.raises(caijit.ArgumentError, match="no such file"):
        caijit.kernel(str(tmp_path / "missing.cu"))


def test_a_typo_in_a_template_argument_is_named_in_caijits_words() -> None:
    from conftest import nvrtc_missing

    if nvrtc_missing():
        pytest.skip(nvrtc_missing() or "")
    k = caijit.kernel("template <typename T> __global__ void axpy(T* x) { x[0] += 1; }", "axpy<flaot>")
    with pytest.raises(caijit.CompileError, match=r'the kernel name "axpy<flaot>" is not valid in kernel.cu: identifier "flaot" is undefined') as e:
        k.compile(arch="sm_90")
    assert "__nv_name_map" not in str(e.value)


class _Cai:
    """An array of 4 elements of `typestr` at an address no one reads (checks only)."""

    def __init__(self, typestr: str) -> None:
        self.__cuda_array_interface__ = {"shape": (4,), "typestr": typestr, "data": (0x7F0000000000, False), "version": 3}


def test_wrong_arguments_are_argument_errors_with_or_without_a_gpu() -> None:
    """The parameters are known without a GPU: a wrong argument is the error, not the
    missing driver."""
    from conftest import nvrtc_missing

    if nvrtc_missing():
        pytest.skip(nvrtc_missing() or "")
    k = caijit.kernel('extern "C" __global__ void scale(float* x, float a, int n) {}', "scale")
    with pytest.raises(caijit.ArgumentError, match="kernel `scale` takes 3 arguments, got 1"):
        k[1, 1](1.0)
    with pytest.raises(caijit.ArgumentError, match=r"argument 0 `x` \(`float\*`\): expected an array of float32 \(float\), got float64"):
        k[1, 1](_Cai("<f8"), 2.0, 4)
    with pytest.raises(caijit.ArgumentError, match="argument 2 `n`.* is out of range for int"):
        k[1, 1](_Cai("<f4"), 2.0, 2**40)
    with pytest.raises(caijit.ArgumentError, match="add: operands are float32 and float64; cast one first"):
        caijit.ops.add(_Cai("<f4"), _Cai("<f8"))
