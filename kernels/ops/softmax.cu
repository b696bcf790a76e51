// Row-wise softmax of a row-major (rows, cols) matrix, numerically stable: one block per
// row computes the row's max and sum of exponentials in one pass (online rescaling), then
// writes exp(x - max) / sum in a second pass over the row (served mostly from L2).
#include <caijit/caijit.cuh>
#include <caijit/convert.cuh>

struct MaxSum { float m, s; };

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
    const float m = fmaxf(a.m, b.m);
    if (m == __int_as_float(0xff800000)) return {m, 0.f};
    return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

template <typename T>
__global__ void softmax_rows(const T* __restrict__ x, T* __restrict__ y, long long rows, long long cols) {
    __shared__ MaxSum warp_results[32];
    __shared__ MaxSum row_result;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* in = x + r * cols;
        T* out = y + r * cols;
        MaxSum t{__int_as_float(0xff800000), 0.f};
        for (long long c = threadIdx.x; c < cols; c += blockDim.x) t = merge(t, MaxSum{caijit::convert<float>(in[c]), 1.f});
#pragma unroll
        for (int o = 16; o > 0; o /= 2) {
            MaxSum other{__shfl_down_sync(0xffffffffu, t.m, o), __shfl_down_sync(0xffffffffu, t.s, o)};
            t = merge(t, other);
        }
        const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
        if (lane == 0) warp_results[warp] = t;
        __syncthreads();
        if (warp == 0) {
            t = lane < warps ? warp_results[lane] : MaxSum{__int_as_float(0xff800000), 0.f};
#pragma unroll
            for (int o = 16; o > 0; o /= 2) {
                MaxSum other{__shfl_down_sync(0xffffffffu, t.m, o), __shfl_down_sync(0xffffffffu, t.s, o)};
                t = merge(t, other);
            }
            if (lane == 0) row_result = t;
        }
        __syncthreads();
        const float m = row_result.m, inv = 1.f / row_result.s;
        for (long long c = threadIdx.x; c < cols; c += blockDim.x) {
            out[c] = caijit::convert<T>(__expf(caijit::convert<float>(in[c]) - m) * inv);
        }
        __syncthreads();
    }
}
