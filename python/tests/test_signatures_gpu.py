"""Issue #20 on the GPU: kernels whose types only the compiler knows launch with the right
results: the `#ifdef` kernel both ways, namespaced, defaulted, overloaded and macro-made
kernels. Skips without a GPU; fails with CAIJIT_REQUIRE_GPU=1. Fresh random inputs;
outputs poisoned before each launch; each kernel warmed up (compiled and launched once)
before the launch whose result is checked."""

from __future__ import annotations

import numpy as np
import pytest

import caijit
from test_signatures import NAMESPACES

pytestmark = pytest.mark.gpu

rng = np.random.default_rng()

IFDEF = r"""
#ifdef USE_INT
extern "C" __global__ void scale(int* x, int a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }
#else
extern "C" __global__ void scale(float* x, float a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }
#endif
"""

NAMESPACED = r"""
namespace a {
__global__ void add_one(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.0f; }
namespace b {
template <typename T> __global__ void fill(T* x, T v, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = v; }
}
}
"""

DEFAULTED = r"""
template <typename T, typename Acc = double, int BLOCK = 128>
__global__ void scaled_copy(const T* x, T* y, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) y[i] = (T)((Acc)x[i] * (Acc)BLOCK);
}
"""

MACROS = r"""
#define AXPY(T) __global__ void axpy_##T(T a, const T* x, T* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }
AXPY(float)
AXPY(double)
#define SCALE_C(T) extern "C" __global__ void scale_##T(T* x, T a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }
SCALE_C(int)
"""

OVERLOADS = r"""
__global__ void twice(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }
__global__ void twice(double* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0; }
"""

N = 10_001
GRID, BLOCK = (N + 127) // 128, 128


def test_ifdef_kernel_with_floats() -> None:
    k = caijit.kernel(IFDEF, "scale")
    x_h = rng.standard_normal(N).astype(np.float32)
    x = caijit.to_device(x_h)
    k[GRID, BLOCK](caijit.to_device(x_h), 3.0, N)  # warm-up
    k[GRID, BLOCK](x, 2.5, N)
    np.testing.assert_allclose(x.copy_to_host(), x_h * np.float32(2.5), rtol=1e-6)
    # An int32 array is refused, never read as floats.
    with pytest.raises(caijit.ArgumentError):
        k[GRID, BLOCK](caijit.to_device(np.ones(N, np.int32)), 2, N)


def test_ifdef_kernel_with_ints() -> None:
    k = caijit.kernel(IFDEF, "scale", defines={"USE_INT": None})
    x_h = rng.integers(-1000, 1000, N).astype(np.int32)
    x = caijit.to_device(x_h)
    k[GRID, BLOCK](caijit.to_device(x_h), 3, N)  # warm-up
    k[GRID, BLOCK](x, 7, N)
    np.testing.assert_array_equal(x.copy_to_host(), x_h * 7)
    with pytest.raises(caijit.ArgumentError):
        k[GRID, BLOCK](caijit.to_device(np.ones(N, np.float32)), 2, N)


def test_namespaced_kernels() -> None:
    k = caijit.kernel(NAMESPACED, "a::add_one")
    x_h = rng.standard_normal(N).astype(np.float32)
    x = caijit.to_device(x_h)
    k[GRID, BLOCK](caijit.to_device(x_h), N)  # warm-up
    k[GRID, BLOCK](x, N)
    np.testing.assert_allclose(x.copy_to_host(), x_h + 1, rtol=1e-6)
    fill = caijit.kernel(NAMESPACED, "a::b::fill")
    for dtype in (np.float64, np.int64):
        y = caijit.to_device(np.full(N, -99, dtype))  # poisoned
        fill[GRID, BLOCK](caijit.to_device(np.zeros(N, dtype)), dtype(1), N)  # warm-up
        v = dtype(rng.integers(1, 100))
        fill[GRID, BLOCK](y, v, N)
        assert (y.copy_to_host() == v).all()


def test_defaulted_template_arguments() -> None:
    k = caijit.kernel(DEFAULTED, "scaled_copy")
    for dtype in (np.float32, np.int32):
        x_h = (rng.standard_normal(N) * 100).astype(dtype)
        y = caijit.to_device(np.full(N, -7, dtype))  # poisoned
        k[GRID, BLOCK](caijit.to_device(x_h), caijit.to_device(x_h), N)  # warm-up
        k[GRID, BLOCK](caijit.to_device(x_h), y, N)
        want = (x_h.astype(np.float64) * 128).astype(dtype)
        np.testing.assert_allclose(y.copy_to_host(), want, rtol=1e-6, atol=1e-6)


def test_macro_made_kernels() -> None:
    for name, dtype in (("axpy_float", np.float32), ("axpy_double", np.float64)):
        k = caijit.kernel(MACROS, name)
        x_h = rng.standard_normal(N).astype(dtype)
        y_h = rng.standard_normal(N).astype(dtype)
        y = caijit.to_device(y_h)
        k[GRID, BLOCK](2.0, caijit.to_device(x_h), caijit.to_device(y_h), N)  # warm-up
        k[GRID, BLOCK](3.0, caijit.to_device(x_h), y, N)
        np.testing.assert_allclose(y.copy_to_host(), 3 * x_h + y_h, rtol=1e-6, atol=1e-6)
    k = caijit.kernel(MACROS, "scale_int")
    x_h = rng.integers(-1000, 1000, N).astype(np.int32)
    x = caijit.to_device(x_h)
    k[GRID, BLOCK](caijit.to_device(x_h), 2, N)  # warm-up
    k[GRID, BLOCK](x, -3, N)
    np.testing.assert_array_equal(x.copy_to_host(), x_h * -3)


def test_overloads_picked_by_the_arguments() -> None:
    k = caijit.kernel(OVERLOADS, "twice")
    for dtype in (np.float32, np.float64):
        x_h = rng.standard_normal(N).astype(dtype)
        x = caijit.to_device(x_h)
        k[GRID, BLOCK](caijit.to_device(x_h), N)  # warm-up
        k[GRID, BLOCK](x, N)
        np.testing.assert_allclose(x.copy_to_host(), 2 * x_h, rtol=1e-6)
    with pytest.raises(caijit.ArgumentError, match="no overload"):
        k[GRID, BLOCK](caijit.to_device(np.ones(N, np.int32)), N)


def test_a_plain_name_does_not_pick_between_namespaces() -> None:
    """`k` names neither a::k nor b::k: not an overload set picked by dtype."""
    src = NAMESPACES
    for dtype in ("float32", "float64"):
        with pytest.raises(caijit.ArgumentError, match=r"`k` is ambiguous: a::k, b::k"):
            caijit.kernel(src, "k")[1, 1](caijit.zeros(1, dtype))
    x = caijit.zeros(1, "float64")
    caijit.kernel(src, "b::k")[1, 1](x)
    assert x.copy_to_host()[0] == 2


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "complex64"])
def test_readme_axpy_on_types_that_need_headers(dtype: str) -> None:
    src = r"""
template <typename T>
__global__ void axpy(T a, const T* x, T* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
    k = caijit.kernel(src, "axpy")
    n = 4096
    if dtype == "complex64":
        x_h = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
        y_h = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
        a = 2 - 1j  # a Python complex: T is deduced from the arrays
        x, y = caijit.to_device(x_h), caijit.to_device(y_h)
        k[(n + 127) // 128, 128](a, x, caijit.to_device(y_h), n)  # warm-up
        k[(n + 127) // 128, 128](a, x, y, n)
        np.testing.assert_allclose(y.copy_to_host(), a * x_h + y_h, rtol=1e-5)
        return
    if dtype == "float16":
        x_h = rng.standard_normal(n).astype(np.float16)
        y_h = rng.standard_normal(n).astype(np.float16)
        a = 2.0
        x, y = caijit.to_device(x_h), caijit.to_device(y_h)
        k[(n + 127) // 128, 128](a, x, caijit.to_device(y_h), n)  # warm-up
        k[(n + 127) // 128, 128](a, x, y, n)
        np.testing.assert_allclose(y.copy_to_host().astype(np.float64), (2 * x_h.astype(np.float64) + y_h), rtol=1e-2, atol=1e-2)
        return
    # bfloat16, which NumPy lacks: PyTorch tensors (as the ops tests do).
    torch = pytest.importorskip("torch")
    x = torch.randn(n, device="cuda").bfloat16()
    y0 = torch.randn(n, device="cuda").bfloat16()
    y = y0.clone()
    k[(n + 127) // 128, 128](2.0, x, y0.clone(), n)  # warm-up
    k[(n + 127) // 128, 128](2.0, x, y, n)
    torch.cuda.synchronize()
    torch.testing.assert_close(y.double(), 2 * x.double() + y0.double(), rtol=3e-2, atol=3e-2)


# Issue #26: a default that depends on an earlier template parameter, written out because a
# later one is deduced, takes the compiler's value (SHIFT = 24 for 32-bit, 8 for 16-bit T).
DEPENDENT_DEFAULT = r"""
template <typename T, int SHIFT = sizeof(T) * 8 - 8, typename O = int>
__global__ void top_byte(const T* x, O* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (O)((x[i] >> SHIFT) & 0xff);
}
"""


def test_a_dependent_default_before_a_deduced_argument_is_the_compilers() -> None:
    k = caijit.kernel(DEPENDENT_DEFAULT, "top_byte")
    for dtype, out, shift in ((np.uint32, np.int64, 24), (np.uint16, np.float32, 8)):
        x_h = rng.integers(0, np.iinfo(dtype).max, N, dtype=dtype, endpoint=True)
        y = caijit.to_device(np.full(N, -7, out))  # poisoned
        k[GRID, BLOCK](caijit.to_device(x_h), caijit.to_device(np.zeros(N, out)), N)  # warm-up
        k[GRID, BLOCK](caijit.to_device(x_h), y, N)
        np.testing.assert_array_equal(y.copy_to_host(), ((x_h.astype(np.int64) >> shift) & 0xFF).astype(out))


ROWS = r"""
__global__ void number_rows(float (*rows)[4], int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) for (int j = 0; j < 4; ++j) rows[i][j] = i * 4 + j;
}
"""


def test_a_pointer_to_an_array_takes_an_array_of_its_elements() -> None:
    k = caijit.kernel(ROWS)
    k[1, 32](caijit.to_device(np.zeros((8, 4), np.float32)), 8)  # warm-up
    rows = caijit.to_device(np.full((N, 4), -1, np.float32))  # poisoned
    k[GRID, BLOCK](rows, N)
    np.testing.assert_array_equal(rows.copy_to_host(), np.arange(N * 4, dtype=np.float32).reshape(N, 4))
    with pytest.raises(caijit.ArgumentError, match="rows"):
        k[GRID, BLOCK](caijit.to_device(np.zeros((N, 4), np.float64)), N)
