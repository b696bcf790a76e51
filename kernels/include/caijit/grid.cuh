// Grid-stride loop helpers.
#pragma once

namespace caijit {

// The global thread index and the total number of threads of a 1-D launch, as 64-bit.
__device__ __forceinline__ long long global_thread() {
    return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long grid_threads() {
    return static_cast<long long>(gridDim.x) * blockDim.x;
}

}  // namespace caijit
