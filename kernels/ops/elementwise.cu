// Elementwise kernels: grid-stride loops over contiguous arrays, templated over dtypes.
#include <caijit/caijit.cuh>

// y = a * x + y
template <typename T>
__global__ void axpy(T a, const T* __restrict__ x, T* __restrict__ y, long long n) {
    for (long long i = caijit::global_thread(); i < n; i += caijit::grid_threads()) {
        y[i] = a * x[i] + y[i];
    }
}

// y = a * x
template <typename T>
__global__ void scale(T a, const T* __restrict__ x, T* __restrict__ y, long long n) {
    for (long long i = caijit::global_thread(); i < n; i += caijit::grid_threads()) {
        y[i] = a * x[i];
    }
}

// y[i] = v
template <typename T>
__global__ void fill(T* __restrict__ y, T v, long long n) {
    for (long long i = caijit::global_thread(); i < n; i += caijit::grid_threads()) {
        y[i] = v;
    }
}
