// Copy any strided N-d view (N <= 8; arbitrary, zero and negative byte strides) into a
// contiguous C-order output: the building block for making foreign views contiguous.
//
// Rows of the output's last dimension are contiguous: each block takes whole rows, so the
// index arithmetic (divisions by extents) happens once per row, not once per element.
#include <caijit/caijit.cuh>

template <typename T, int N>
__global__ void strided_copy(caijit::Array<const T, N> src, T* __restrict__ dst) {
    const long long cols = src.shape[N - 1];
    const long long rows = cols == 0 ? 0 : src.size() / cols;
    const long long cstride = src.strides[N - 1];
    const char* base = reinterpret_cast<const char*>(src.data);
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        long long off = 0, rest = r;
#pragma unroll
        for (int d = N - 2; d >= 0; --d) {
            off += (rest % src.shape[d]) * src.strides[d];
            rest /= src.shape[d];
        }
        const char* row = base + off;
        T* out = dst + r * cols;
        for (long long c = threadIdx.x; c < cols; c += blockDim.x) {
            out[c] = *reinterpret_cast<const T*>(row + c * cstride);
        }
    }
}
