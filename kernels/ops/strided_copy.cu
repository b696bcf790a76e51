// Copy any strided N-d view (N <= 8; arbitrary, zero and negative byte strides) into a
// contiguous C-order output: the building block for making foreign views contiguous.
//
// Work is split into (row, column chunk) tiles of the last dimension, so the index
// arithmetic (divisions by extents) happens once per tile, not once per element; a tile
// whose source columns are dense and 16-byte aligned is copied with vector accesses.
#include <caijit/caijit.cuh>

// The byte offset of row `r` (rows: the last axis's lines, in C order) of the view `a`.
template <typename T, int N>
__device__ __forceinline__ long long row_offset(const caijit::Array<T, N>& a, long long r) {
    long long off = 0;
#pragma unroll
    for (int d = N - 2; d >= 0; --d) {
        off += (r % a.shape[d]) * a.strides[d];
        r /= a.shape[d];
    }
    return off;
}

template <typename T, int N>
__global__ void strided_copy(caijit::Array<const T, N> src, T* __restrict__ dst) {
    using V16 = caijit::vec16<T>;
    constexpr long long CHUNK = 4096;
    const long long cols = src.shape[N - 1];
    const long long rows = cols == 0 ? 0 : src.size() / cols;
    const long long chunks = (cols + CHUNK - 1) / CHUNK;
    const long long cstride = src.strides[N - 1];
    const char* base = reinterpret_cast<const char*>(src.data);
    for (long long t = blockIdx.x; t < rows * chunks; t += gridDim.x) {
        const long long r = t / chunks, c0 = (t % chunks) * CHUNK;
        const T* row = reinterpret_cast<const T*>(base + row_offset(src, r));
        T* out = dst + r * cols;
        const long long c1 = c0 + CHUNK < cols ? c0 + CHUNK : cols;
        long long c = c0;
        if (V16::size > 1 && cstride == (long long)sizeof(T) && caijit::aligned16(row + c0, out + c0)) {
            const long long nv = (c1 - c0) / V16::size;
            const V16* in_v = reinterpret_cast<const V16*>(row + c0);
            V16* out_v = reinterpret_cast<V16*>(out + c0);
            for (long long v = threadIdx.x; v < nv; v += blockDim.x) out_v[v] = in_v[v];
            c = c0 + nv * V16::size;
        }
        const char* rowb = reinterpret_cast<const char*>(row);
        for (long long k = c + threadIdx.x; k < c1; k += blockDim.x) {
            out[k] = *reinterpret_cast<const T*>(rowb + k * cstride);
        }
    }
}

// The inverse: a contiguous C-order `src` scattered into any strided N-d view `dst` (N <= 8;
// no two elements of `dst` share memory): how an op writes an `out` that is not
// C-contiguous. Tiled as strided_copy is.
template <typename T, int N>
__global__ void strided_scatter(const T* __restrict__ src, caijit::Array<T, N> dst) {
    constexpr long long CHUNK = 4096;
    const long long cols = dst.shape[N - 1];
    const long long rows = cols == 0 ? 0 : dst.size() / cols;
    const long long chunks = (cols + CHUNK - 1) / CHUNK;
    const long long cstride = dst.strides[N - 1];
    char* base = reinterpret_cast<char*>(dst.data);
    for (long long t = blockIdx.x; t < rows * chunks; t += gridDim.x) {
        const long long r = t / chunks, c0 = (t % chunks) * CHUNK;
        char* row = base + row_offset(dst, r);
        const T* in = src + r * cols;
        const long long c1 = c0 + CHUNK < cols ? c0 + CHUNK : cols;
        for (long long k = c0 + threadIdx.x; k < c1; k += blockDim.x) {
            *reinterpret_cast<T*>(row + k * cstride) = in[k];
        }
    }
}
