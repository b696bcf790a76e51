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

// Bounds checks (debug instances only: caijit compiles a kernel with CAIJIT_BOUNDS_CHECK
// defined, as a separate cache entry, when caijit.debug(True) or CAIJIT_DEBUG=1 is on).
// Every access through operator() and operator[] is checked against the shape; the first
// violation of a launch is written to caijit_bounds_record, which the host reads (and
// clears) after the launch, and the access goes to a scratch buffer instead of memory.
// Raw pointers cannot be checked.
//   caijit_bounds_record: [0] set, [1] data pointer, [2] rank, [3] dimension (-1: a flat
//   index), [4] the flat index, [5..13) the indices, [13..21) the shape (first 8 dims).
#ifdef CAIJIT_BOUNDS_CHECK
__device__ long long caijit_bounds_record[21];
__device__ __align__(16) unsigned char caijit_bounds_scratch[256];
#endif

namespace caijit {

using index_t = long long;

#ifdef CAIJIT_BOUNDS_CHECK
namespace detail {
// Record the first out-of-bounds access of the launch; the access goes to scratch memory.
template <typename T>
__device__ __noinline__ T& out_of_bounds(const void* data, int n, int dim, const index_t* is, const index_t* shape, index_t flat) {
    static_assert(sizeof(T) <= sizeof(caijit_bounds_scratch), "caijit::Array bounds checks: element type too large");
    if (atomicCAS(reinterpret_cast<unsigned long long*>(&caijit_bounds_record[0]), 0ull, 1ull) == 0ull) {
        caijit_bounds_record[1] = reinterpret_cast<long long>(data);
        caijit_bounds_record[2] = n;
        caijit_bounds_record[3] = dim;
        caijit_bounds_record[4] = flat;
        for (int d = 0; d < n && d < 8; ++d) {
            caijit_bounds_record[5 + d] = is ? is[d] : 0;
            caijit_bounds_record[13 + d] = shape[d];
        }
        __threadfence();
    }
    return *reinterpret_cast<T*>(caijit_bounds_scratch);
}
}  // namespace detail
#endif

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
#ifdef CAIJIT_BOUNDS_CHECK
#pragma unroll
        for (int d = 0; d < N; ++d)
            if (is[d] < 0 || is[d] >= shape[d]) return detail::out_of_bounds<T>(data, N, d, is, shape, -1);
#endif
        index_t off = 0;
#pragma unroll
        for (int d = 0; d < N; ++d) off += is[d] * strides[d];
        return *reinterpret_cast<T*>(reinterpret_cast<char*>(const_cast<typename remove_const<T>::type*>(data)) + off);
    }

    // Element at a flat C-order index in [0, size()).
    __device__ __forceinline__ T& operator[](index_t flat) const {
#ifdef CAIJIT_BOUNDS_CHECK
        if (flat < 0 || flat >= size()) return detail::out_of_bounds<T>(data, N, -1, nullptr, shape, flat);
#endif
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
