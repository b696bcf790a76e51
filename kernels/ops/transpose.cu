// 2-D transpose through shared memory: square tiles (64 wide for elements of up to 8
// bytes, else 32; padded against bank conflicts), read and written with coalesced accesses,
// 16 or 4 elements per thread in flight. Launch with block (32, 8) and a grid of
// ceil(rows / TILE) * ceil(cols / TILE) blocks.
#include <caijit/caijit.cuh>

template <typename T>
__global__ void transpose(const T* __restrict__ in, T* __restrict__ out, long long rows, long long cols) {
    constexpr int TILE = sizeof(T) <= 8 ? 64 : 32, ROWS = 8, W = 32, J = TILE / W;
    __shared__ T tile[TILE][TILE + 1];
    const long long tiles_x = (cols + TILE - 1) / TILE;
    const long long tiles = tiles_x * ((rows + TILE - 1) / TILE);
    for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
        const long long r0 = (t / tiles_x) * TILE, c0 = (t % tiles_x) * TILE;
#pragma unroll
        for (int k = 0; k < TILE; k += ROWS) {
#pragma unroll
            for (int j = 0; j < J; ++j) {
                const long long r = r0 + threadIdx.y + k, c = c0 + threadIdx.x + j * W;
                if (r < rows && c < cols) tile[threadIdx.y + k][threadIdx.x + j * W] = in[r * cols + c];
            }
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; k += ROWS) {
#pragma unroll
            for (int j = 0; j < J; ++j) {
                const long long r = c0 + threadIdx.y + k, c = r0 + threadIdx.x + j * W;  // out is cols x rows
                if (r < cols && c < rows) out[r * rows + c] = tile[threadIdx.x + j * W][threadIdx.y + k];
            }
        }
        __syncthreads();
    }
}
