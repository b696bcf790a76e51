// Reductions: sum and max over a whole contiguous array (two passes: per-block partials,
// then one block) and over the last axis of a row-major matrix (one block per row).
// 16-bit floats accumulate in float.
#include <caijit/caijit.cuh>
#include <caijit/convert.cuh>

template <typename A>
__device__ __forceinline__ A combine(int op, A a, A b) { return op == 0 ? a + b : (a < b ? b : a); }

// Block-wide reduction of one value per thread; the result is valid in thread 0.
template <typename A>
__device__ __forceinline__ A block_reduce(A v, int op) {
    __shared__ A warp_results[32];
#pragma unroll
    for (int o = 16; o > 0; o /= 2) v = combine(op, v, static_cast<A>(__shfl_down_sync(0xffffffffu, v, o)));
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_results[warp] = v;
    __syncthreads();
    const int warps = (blockDim.x + 31) / 32;
    if (warp == 0) {
        v = lane < warps ? warp_results[lane] : (op == 0 ? A(0) : warp_results[0]);
#pragma unroll
        for (int o = 16; o > 0; o /= 2) v = combine(op, v, static_cast<A>(__shfl_down_sync(0xffffffffu, v, o)));
    }
    __syncthreads();
    return v;
}

// partial[blockIdx.x] = reduce(x[block's share]); op 0 sum, 1 max. Needs n >= 1 for max.
// Four independent 16-byte loads per iteration keep enough bytes in flight.
template <typename T, typename A>
__global__ void reduce_partial(const T* __restrict__ x, A* __restrict__ partial, long long n, int op) {
    using V16 = caijit::vec16<T>;
    constexpr int U = 4;
    const A init = op == 0 ? A(0) : caijit::convert<A>(x[0]);
    A acc[U] = {init, init, init, init};
    long long start = 0;
    if (V16::size > 1 && caijit::aligned16(x)) {
        const long long nv = n / V16::size;
        const long long stride = caijit::grid_threads();
        long long i = caijit::global_thread();
        for (; i + (U - 1) * stride < nv; i += U * stride) {
            V16 v[U];
#pragma unroll
            for (int u = 0; u < U; ++u) v[u] = reinterpret_cast<const V16*>(x)[i + u * stride];
#pragma unroll
            for (int u = 0; u < U; ++u)
#pragma unroll
                for (int k = 0; k < V16::size; ++k) acc[u] = combine(op, acc[u], caijit::convert<A>(v[u].v[k]));
        }
        for (; i < nv; i += stride) {
            const V16 v = reinterpret_cast<const V16*>(x)[i];
#pragma unroll
            for (int k = 0; k < V16::size; ++k) acc[0] = combine(op, acc[0], caijit::convert<A>(v.v[k]));
        }
        start = nv * V16::size;
    }
    for (long long i = start + caijit::global_thread(); i < n; i += caijit::grid_threads()) {
        acc[0] = combine(op, acc[0], caijit::convert<A>(x[i]));
    }
    A total = combine(op, combine(op, acc[0], acc[1]), combine(op, acc[2], acc[3]));
    total = block_reduce(total, op);
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// out[0] = reduce(partial[0..m)) converted to the output type; one block.
template <typename A, typename T>
__global__ void reduce_final(const A* __restrict__ partial, T* __restrict__ out, long long m, int op) {
    A acc = op == 0 ? A(0) : partial[0];
    for (long long i = threadIdx.x; i < m; i += blockDim.x) acc = combine(op, acc, partial[i]);
    acc = block_reduce(acc, op);
    if (threadIdx.x == 0) out[0] = caijit::convert<T>(acc);
}

// out[r] = reduce(x[r, :]) converted to the output type, for a row-major (rows, cols)
// matrix with cols >= 1; one block per row, four independent 16-byte loads per thread in
// flight when the row is aligned.
template <typename T, typename A, typename R>
__global__ void reduce_rows(const T* __restrict__ x, R* __restrict__ out, long long rows, long long cols, int op) {
    using V16 = caijit::vec16<T>;
    constexpr int U = 4;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* row = x + r * cols;
        const A init = op == 0 ? A(0) : caijit::convert<A>(row[0]);
        A acc[U] = {init, init, init, init};
        long long start = 0;
        if (V16::size > 1 && caijit::aligned16(row)) {
            const V16* vrow = reinterpret_cast<const V16*>(row);
            const long long nv = cols / V16::size, step = blockDim.x;
            long long v = threadIdx.x;
            for (; v + (U - 1) * step < nv; v += U * step) {
                V16 e[U];
#pragma unroll
                for (int u = 0; u < U; ++u) e[u] = vrow[v + u * step];
#pragma unroll
                for (int u = 0; u < U; ++u)
#pragma unroll
                    for (int k = 0; k < V16::size; ++k) acc[u] = combine(op, acc[u], caijit::convert<A>(e[u].v[k]));
            }
            for (; v < nv; v += step) {
                const V16 e = vrow[v];
#pragma unroll
                for (int k = 0; k < V16::size; ++k) acc[0] = combine(op, acc[0], caijit::convert<A>(e.v[k]));
            }
            start = nv * V16::size;
        }
        for (long long c = start + threadIdx.x; c < cols; c += blockDim.x) acc[0] = combine(op, acc[0], caijit::convert<A>(row[c]));
        A total = combine(op, combine(op, acc[0], acc[1]), combine(op, acc[2], acc[3]));
        total = block_reduce(total, op);
        if (threadIdx.x == 0) out[r] = caijit::convert<R>(total);
    }
}
