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

// A grid-stride loop over n elements of T. When every pointer given is 16-byte aligned,
// the 16-byte vectors are handled U per thread per step: `load(i)` reads what vector i
// needs and `store(i, loaded)` computes and writes it; the U loads are issued before the
// first store, so U loads per thread are in flight. `scalar_body(i)` handles element i
// otherwise (and the tail).
template <typename T, typename Load, typename Store, typename ScalarBody, typename... P>
__device__ __forceinline__ void vector_loop(long long n, Load load, Store store, ScalarBody scalar_body, const P*... ptrs) {
    constexpr int V = vec16<T>::size, U = 4;
    long long start = 0;
    if (V > 1 && aligned16(ptrs...)) {
        const long long nv = n / V, stride = grid_threads();
        long long i = global_thread();
        for (; i + (U - 1) * stride < nv; i += U * stride) {
            decltype(load(i)) in[U];
#pragma unroll
            for (int u = 0; u < U; ++u) in[u] = load(i + u * stride);
#pragma unroll
            for (int u = 0; u < U; ++u) store(i + u * stride, in[u]);
        }
        for (; i < nv; i += stride) store(i, load(i));
        start = nv * V;
    }
    for (long long i = start + global_thread(); i < n; i += grid_threads()) scalar_body(i);
}

}  // namespace caijit
