// caijit::Array<T, N>: a strided N-d view of device memory, passed by value to kernels.
//
// Layout (written in Rust once, as cai_runtime::signature::ArrayLayout; a test reads the
// PTX of kernels that load each field, to check it against this header):
//   T*      data;          // element (0, ..., 0); may be null for an empty array
//   int64_t shape[N];      // extents
//   int64_t strides[N];    // BYTE strides, as in the CUDA Array Interface; may be <= 0
// sizeof == 8 + 16 * N, alignof == 8. caijit fills it from any CAI/DLPack array whose
// dtype is T and rank is N; `Array<const T, N>` also accepts readonly arrays.
#pragma once

namespace caijit {

using index_t = long long;

template <typename T, int N>
struct Array {
    static_assert(N > 0, "use Array<T, 0> for 0-d arrays");
    T* data;
    index_t shape[N];
    index_t strides[N];

    static constexpr int ndim = N;
    using value_type = T;

    __host__ __device__ __forceinline__ index_t size() const {
        index_t n = 1;
#pragma unroll
        for (int d = 0; d < N; ++d) n *= shape[d];
        return n;
    }

    // Element at a multi-index (one index per dimension), honouring byte strides.
    template <typename... I>
    __device__ __forceinline__ T& operator()(I... idx) const {
        static_assert(sizeof...(I) == N, "caijit::Array: one index per dimension");
        const index_t is[N] = {static_cast<index_t>(idx)...};
        index_t off = 0;
#pragma unroll
        for (int d = 0; d < N; ++d) off += is[d] * strides[d];
        return *reinterpret_cast<T*>(reinterpret_cast<char*>(const_cast<typename remove_const<T>::type*>(data)) + off);
    }

    // Element at a flat C-order index in [0, size()).
    __device__ __forceinline__ T& operator[](index_t flat) const {
        index_t off = 0;
#pragma unroll
        for (int d = N - 1; d >= 0; --d) {
            const index_t i = flat % shape[d];
            flat /= shape[d];
            off += i * strides[d];
        }
        return *reinterpret_cast<T*>(reinterpret_cast<char*>(const_cast<typename remove_const<T>::type*>(data)) + off);
    }

    // True when the elements are dense in C order (unit dimensions ignored, as NumPy does).
    __host__ __device__ __forceinline__ bool is_c_contiguous() const {
        index_t expected = sizeof(T);
#pragma unroll
        for (int d = N - 1; d >= 0; --d) {
            if (shape[d] == 0) return true;
            if (shape[d] != 1 && strides[d] != expected) return false;
            expected *= shape[d];
        }
        return true;
    }

  private:
    template <typename U> struct remove_const { using type = U; };
    template <typename U> struct remove_const<const U> { using type = U; };
};

// A 0-d array: one element.
template <typename T>
struct Array<T, 0> {
    T* data;
    static constexpr int ndim = 0;
    using value_type = T;
    __host__ __device__ __forceinline__ index_t size() const { return 1; }
    __device__ __forceinline__ T& operator()() const { return *data; }
    __device__ __forceinline__ T& operator[](index_t) const { return *data; }
    __host__ __device__ __forceinline__ bool is_c_contiguous() const { return true; }
};

// Layout checks, compiled by NVRTC in CI (kernels/include is part of every program).
static_assert(sizeof(Array<float, 1>) == 8 + 16 * 1, "caijit::Array layout");
static_assert(sizeof(Array<double, 3>) == 8 + 16 * 3, "caijit::Array layout");
static_assert(sizeof(Array<char, 8>) == 8 + 16 * 8, "caijit::Array layout");
static_assert(sizeof(Array<float, 0>) == 8, "caijit::Array layout");
static_assert(alignof(Array<char, 2>) == 8, "caijit::Array alignment");
// NVRTC has no offsetof; member offsets are checked by tests/compile.rs, which reads the
// parameter loads of a probe kernel in the PTX (shape at +8, strides at +8 + 8 * N).
static_assert(__is_standard_layout(Array<float, 3>), "caijit::Array must be standard-layout");

}  // namespace caijit
