// Row-wise softmax of a row-major (rows, cols) matrix, numerically stable, one block per
// row. float16/bfloat16/float compute in float, double in double.
// - softmax_rows_reg: the row is held in registers (16-byte vectors, up to VPT per thread),
//   so it is read once and written once; for aligned rows of up to VPT * 1024 vectors.
// - softmax_rows: any row: the max and sum of exponentials in one pass (online rescaling),
//   then exp(x - max) / sum in a second pass over the row (served mostly from L2).
#include <caijit/caijit.cuh>
#include <caijit/convert.cuh>
#include <caijit/vec.cuh>

namespace {

__device__ __forceinline__ float fast_exp(float x) { return __expf(x); }
__device__ __forceinline__ double fast_exp(double x) { return exp(x); }

template <typename A> __device__ __forceinline__ A neg_inf() { return -__int_as_float(0x7f800000); }
template <> __device__ __forceinline__ double neg_inf<double>() { return -__longlong_as_double(0x7ff0000000000000ll); }

template <typename A>
struct MaxSum { A m, s; };

template <typename A>
__device__ __forceinline__ MaxSum<A> merge(MaxSum<A> a, MaxSum<A> b) {
    const A m = a.m < b.m ? b.m : a.m;
    if (m == neg_inf<A>()) return {m, A(0)};
    return {m, a.s * fast_exp(a.m - m) + b.s * fast_exp(b.m - m)};
}

template <typename A>
__device__ __forceinline__ MaxSum<A> warp_merge(MaxSum<A> t) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
        MaxSum<A> other{__shfl_down_sync(0xffffffffu, t.m, o), __shfl_down_sync(0xffffffffu, t.s, o)};
        t = merge(t, other);
    }
    return t;
}

// Block-wide max (op 0) or sum (op 1) of one value per thread, returned to every thread.
template <typename A>
__device__ __forceinline__ A block_all(A v, int op) {
    __shared__ A partial[32];
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
        const A w = __shfl_xor_sync(0xffffffffu, v, o);
        v = op == 0 ? (v < w ? w : v) : v + w;
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = partial[0];
    for (int w = 1; w < warps; ++w) v = op == 0 ? (v < partial[w] ? partial[w] : v) : v + partial[w];
    __syncthreads();  // partial is reused by the next call
    return v;
}

}  // namespace

template <typename T, int VPT>
__global__ void softmax_rows_reg(const T* __restrict__ x, T* __restrict__ y, long long rows, long long cols) {
    using A = typename caijit::accumulator<T>::type;
    using V = caijit::vec16<T>;
    constexpr int E = V::size;
    const long long nv = cols / E;  // the host guarantees cols % E == 0 and aligned rows
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const V* in = reinterpret_cast<const V*>(x + r * cols);
        V* out = reinterpret_cast<V*>(y + r * cols);
        V buf[VPT];
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const long long v = threadIdx.x + (long long)k * blockDim.x;
            if (v < nv) buf[k] = in[v];
        }
        A m = neg_inf<A>();
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            if (threadIdx.x + (long long)k * blockDim.x < nv) {
#pragma unroll
                for (int e = 0; e < E; ++e) {
                    const A v = caijit::convert<A>(buf[k].v[e]);
                    m = m < v ? v : m;
                }
            }
        }
        m = block_all(m, 0);
        A s = A(0);
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            if (threadIdx.x + (long long)k * blockDim.x < nv) {
#pragma unroll
                for (int e = 0; e < E; ++e) s += fast_exp(caijit::convert<A>(buf[k].v[e]) - m);
            }
        }
        const A inv = A(1) / block_all(s, 1);
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const long long v = threadIdx.x + (long long)k * blockDim.x;
            if (v < nv) {
                V o;
#pragma unroll
                for (int e = 0; e < E; ++e) o.v[e] = caijit::convert<T>(fast_exp(caijit::convert<A>(buf[k].v[e]) - m) * inv);
                out[v] = o;
            }
        }
    }
}

template <typename T>
__global__ void softmax_rows(const T* __restrict__ x, T* __restrict__ y, long long rows, long long cols) {
    using A = typename caijit::accumulator<T>::type;
    __shared__ MaxSum<A> warp_results[32];
    __shared__ MaxSum<A> row_result;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* in = x + r * cols;
        T* out = y + r * cols;
        MaxSum<A> t{neg_inf<A>(), A(0)};
        for (long long c = threadIdx.x; c < cols; c += blockDim.x) {
            // One exponential per element: rescale the running sum only when the max grows.
            const A v = caijit::convert<A>(in[c]);
            if (v > t.m) {
                t.s = t.s * fast_exp(t.m - v) + A(1);
                t.m = v;
            } else {
                t.s += fast_exp(v - t.m);
            }
        }
        t = warp_merge(t);
        const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
        if (lane == 0) warp_results[warp] = t;
        __syncthreads();
        if (warp == 0) {
            t = warp_merge(lane < warps ? warp_results[lane] : MaxSum<A>{neg_inf<A>(), A(0)});
            if (lane == 0) row_result = t;
        }
        __syncthreads();
        const A m = row_result.m, inv = A(1) / row_result.s;
        for (long long c = threadIdx.x; c < cols; c += blockDim.x) {
            out[c] = caijit::convert<T>(fast_exp(caijit::convert<A>(in[c]) - m) * inv);
        }
        __syncthreads();
    }
}
