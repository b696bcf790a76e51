// Copy any strided N-d view into a contiguous C-order output: the building block for
// making foreign views (transposes, negative strides, broadcasts) contiguous.
#include <caijit/caijit.cuh>

template <typename T, int N>
__global__ void strided_copy(caijit::Array<const T, N> src, T* __restrict__ dst) {
    const long long n = src.size();
    for (long long i = caijit::global_thread(); i < n; i += caijit::grid_threads()) {
        dst[i] = src[i];
    }
}
