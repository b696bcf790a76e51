// Elementwise kernels over contiguous arrays: grid-stride loops, 16-byte vector loads and
// stores when every pointer is 16-byte aligned, a scalar loop for the rest.
#include <caijit/caijit.cuh>
#include <caijit/convert.cuh>

// out = a * x + y
template <typename T>
__global__ void axpy(T a, const T* __restrict__ x, const T* __restrict__ y, T* __restrict__ out, long long n) {
    using V16 = caijit::vec16<T>;
    caijit::vector_loop<T>(
        n,
        [=](long long i) {
            const V16 xv = reinterpret_cast<const V16*>(x)[i], yv = reinterpret_cast<const V16*>(y)[i];
            V16 o;
#pragma unroll
            for (int k = 0; k < V16::size; ++k) o.v[k] = a * xv.v[k] + yv.v[k];
            reinterpret_cast<V16*>(out)[i] = o;
        },
        [=](long long i) { out[i] = a * x[i] + y[i]; },
        x, y, out);
}

// out = a * x
template <typename T>
__global__ void scale(T a, const T* __restrict__ x, T* __restrict__ out, long long n) {
    using V16 = caijit::vec16<T>;
    caijit::vector_loop<T>(
        n,
        [=](long long i) {
            const V16 xv = reinterpret_cast<const V16*>(x)[i];
            V16 o;
#pragma unroll
            for (int k = 0; k < V16::size; ++k) o.v[k] = a * xv.v[k];
            reinterpret_cast<V16*>(out)[i] = o;
        },
        [=](long long i) { out[i] = a * x[i]; },
        x, out);
}

// out[i] = v
template <typename T>
__global__ void fill(T* __restrict__ out, T v, long long n) {
    using V16 = caijit::vec16<T>;
    caijit::vector_loop<T>(
        n,
        [=](long long i) {
            V16 o;
#pragma unroll
            for (int k = 0; k < V16::size; ++k) o.v[k] = v;
            reinterpret_cast<V16*>(out)[i] = o;
        },
        [=](long long i) { out[i] = v; },
        out);
}

// out = D(x), for every pair of real types (bool and 16-bit floats included)
template <typename S, typename D>
__global__ void cast(const S* __restrict__ x, D* __restrict__ out, long long n) {
    for (long long i = caijit::global_thread(); i < n; i += caijit::grid_threads()) {
        out[i] = caijit::convert<D>(x[i]);
    }
}

// Binary operations; `op`: 0 add, 1 subtract, 2 multiply, 3 divide, 4 maximum, 5 minimum.
template <typename T>
__device__ __forceinline__ T apply(int op, T a, T b) {
    switch (op) {
        case 0: return a + b;
        case 1: return a - b;
        case 2: return a * b;
        case 3: return a / b;
        case 4: return a < b ? b : a;
        default: return b < a ? b : a;
    }
}

// out = a (op) b, all contiguous and of one shape.
template <typename T>
__global__ void binary_contiguous(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, long long n, int op) {
    using V16 = caijit::vec16<T>;
    caijit::vector_loop<T>(
        n,
        [=](long long i) {
            const V16 av = reinterpret_cast<const V16*>(a)[i], bv = reinterpret_cast<const V16*>(b)[i];
            V16 o;
#pragma unroll
            for (int k = 0; k < V16::size; ++k) o.v[k] = apply(op, av.v[k], bv.v[k]);
            reinterpret_cast<V16*>(out)[i] = o;
        },
        [=](long long i) { out[i] = apply(op, a[i], b[i]); },
        a, b, out);
}

// out = a (op) b over broadcast views: `a` and `b` carry out's shape with zero strides on
// broadcast dimensions (NumPy's rule), so one flat index addresses all three.
template <typename T, int N>
__global__ void binary_broadcast(caijit::Array<const T, N> a, caijit::Array<const T, N> b, caijit::Array<T, N> out, int op) {
    const long long n = out.size();
    for (long long i = caijit::global_thread(); i < n; i += caijit::grid_threads()) {
        out[i] = apply(op, a[i], b[i]);
    }
}
