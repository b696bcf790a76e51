// Elementwise maps over contiguous arrays, the body of the kernel library's unary ops
// (an op is a functor and a one-line kernel in kernels/ops/<name>.cu).
#pragma once

#include <caijit/vec.cuh>

namespace caijit {

// out[i] = op(x[i]) for i < n: 16-byte vectors (four in flight per thread) when both
// pointers are 16-byte aligned, a scalar loop otherwise.
template <typename T, typename Op>
__device__ __forceinline__ void map(const T* __restrict__ x, T* __restrict__ out, long long n, Op op) {
    using V16 = vec16<T>;
    vector_loop<T>(
        n,
        [=](long long i) { return reinterpret_cast<const V16*>(x)[i]; },
        [=](long long i, const V16& xv) {
            V16 o;
#pragma unroll
            for (int k = 0; k < V16::size; ++k) o.v[k] = op(xv.v[k]);
            reinterpret_cast<V16*>(out)[i] = o;
        },
        [=](long long i) { out[i] = op(x[i]); },
        x, out);
}

}  // namespace caijit
