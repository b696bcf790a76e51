// 16-byte vectors for memory-bound kernels: one 128-bit load or store per vector.
#pragma once

namespace caijit {

template <typename T>
struct alignas(16) vec16 {
    static constexpr int size = sizeof(T) <= 16 ? 16 / sizeof(T) : 1;
    T v[size];
};

// N elements of T loaded or stored as one access (N * sizeof(T) bytes, aligned to that).
template <typename T, int N>
struct alignas(N * sizeof(T) >= 16 ? 16 : N * sizeof(T)) vec {
    T v[N];
};

// True when every pointer given is 16-byte aligned.
template <typename... P>
__device__ __forceinline__ bool aligned16(const P*... p) {
    return ((reinterpret_cast<unsigned long long>(p) % 16 == 0) && ...);
}

}  // namespace caijit

#include <caijit/grid.cuh>

namespace caijit {

// A grid-stride loop over n elements of T: `vector_body(i)` handles the 16-byte vector i
// when every pointer given is 16-byte aligned, `scalar_body(i)` element i otherwise (and
// the tail).
template <typename T, typename VectorBody, typename ScalarBody, typename... P>
__device__ __forceinline__ void vector_loop(long long n, VectorBody vector_body, ScalarBody scalar_body, const P*... ptrs) {
    constexpr int V = vec16<T>::size;
    long long start = 0;
    if (V > 1 && aligned16(ptrs...)) {
        const long long nv = n / V;
        for (long long i = global_thread(); i < nv; i += grid_threads()) vector_body(i);
        start = nv * V;
    }
    for (long long i = start + global_thread(); i < n; i += grid_threads()) scalar_body(i);
}

}  // namespace caijit
