// Elementwise kernels over contiguous arrays: grid-stride loops, 16-byte vector loads and
// stores (four per thread in flight) when every pointer is 16-byte aligned, a scalar loop
// for the rest.
#include <caijit/caijit.cuh>
#include <caijit/convert.cuh>

// out = a * x + y
template <typename T>
__global__ void axpy(T a, const T* __restrict__ x, const T* __restrict__ y, T* __restrict__ out, long long n) {
    using V16 = caijit::vec16<T>;
    caijit::vector_loop<T>(
        n,
        [=](long long i) { return caijit::vec<V16, 2>{{reinterpret_cast<const V16*>(x)[i], reinterpret_cast<const V16*>(y)[i]}}; },
        [=](long long i, const caijit::vec<V16, 2>& in) {
            V16 o;
#pragma unroll
            for (int k = 0; k < V16::size; ++k) o.v[k] = a * in.v[0].v[k] + in.v[1].v[k];
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
        [=](long long i) { return reinterpret_cast<const V16*>(x)[i]; },
        [=](long long i, const V16& xv) {
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
        [=](long long) { return 0; },
        [=](long long i, int) {
            V16 o;
#pragma unroll
            for (int k = 0; k < V16::size; ++k) o.v[k] = v;
            reinterpret_cast<V16*>(out)[i] = o;
        },
        [=](long long i) { out[i] = v; },
        out);
}

// out = D(x), for every pair of real types (bool and 16-bit floats included). PyTorch's
// layout for elementwise kernels: each block converts one contiguous chunk of
// U * blockDim.x vectors of four elements, its threads' U loads all in flight before the
// first store (a grid-stride loop over chunks covers grids the launch had to cap). On the
// H200 this matched PyTorch's cast (1.000x, kernel time) where a grid-stride loop over
// single vectors reached 0.998x. The loop is written out rather than through vector_loop:
// a lambda's captured pointers lose __restrict__, which kept the second load behind the
// first store. Unaligned pointers take the scalar loop.
template <typename S, typename D>
__global__ void cast(const S* __restrict__ x, D* __restrict__ out, long long n) {
    constexpr int N = 4, U = 2;
    using VS = caijit::vec<S, N>;
    using VD = caijit::vec<D, N>;
    long long start = 0;
    if (reinterpret_cast<unsigned long long>(x) % alignof(VS) == 0 && reinterpret_cast<unsigned long long>(out) % alignof(VD) == 0) {
        const VS* __restrict__ xv = reinterpret_cast<const VS*>(x);
        VD* __restrict__ ov = reinterpret_cast<VD*>(out);
        const long long nv = n / N, chunk = static_cast<long long>(blockDim.x) * U;
        for (long long base = blockIdx.x * chunk + threadIdx.x; base < nv; base += gridDim.x * chunk) {
            VS a[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (base + u * blockDim.x < nv) a[u] = xv[base + u * blockDim.x];
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (base + u * blockDim.x < nv) {
                    VD b;
#pragma unroll
                    for (int k = 0; k < N; ++k) b.v[k] = caijit::convert<D>(a[u].v[k]);
                    ov[base + u * blockDim.x] = b;
                }
            }
        }
        start = nv * N;
    }
    for (long long i = start + caijit::global_thread(); i < n; i += caijit::grid_threads()) {
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
        [=](long long i) { return caijit::vec<V16, 2>{{reinterpret_cast<const V16*>(a)[i], reinterpret_cast<const V16*>(b)[i]}}; },
        [=](long long i, const caijit::vec<V16, 2>& in) {
            V16 o;
#pragma unroll
            for (int k = 0; k < V16::size; ++k) o.v[k] = apply(op, in.v[0].v[k], in.v[1].v[k]);
            reinterpret_cast<V16*>(out)[i] = o;
        },
        [=](long long i) { out[i] = apply(op, a[i], b[i]); },
        a, b, out);
}

// out = a (op) b over broadcast views: `a` and `b` carry out's shape with zero strides on
// broadcast dimensions (NumPy's rule). Work is split into (row, column chunk) tiles of the
// last dimension, so the index arithmetic happens once per tile, not once per element.
template <typename T, int N>
__global__ void binary_broadcast(caijit::Array<const T, N> a, caijit::Array<const T, N> b, caijit::Array<T, N> out, int op) {
    constexpr long long CHUNK = 1024;
    const long long cols = out.shape[N - 1];
    const long long rows = cols == 0 ? 0 : out.size() / cols;
    const long long chunks = (cols + CHUNK - 1) / CHUNK;
    const long long sa = a.strides[N - 1], sb = b.strides[N - 1], so = out.strides[N - 1];
    for (long long t = blockIdx.x; t < rows * chunks; t += gridDim.x) {
        const long long r = t / chunks, c0 = (t % chunks) * CHUNK;
        long long oa = 0, ob = 0, oo = 0, rest = r;
#pragma unroll
        for (int d = N - 2; d >= 0; --d) {
            const long long i = rest % out.shape[d];
            rest /= out.shape[d];
            oa += i * a.strides[d];
            ob += i * b.strides[d];
            oo += i * out.strides[d];
        }
        const char* pa = reinterpret_cast<const char*>(a.data) + oa;
        const char* pb = reinterpret_cast<const char*>(b.data) + ob;
        char* po = reinterpret_cast<char*>(out.data) + oo;
        const long long c1 = c0 + CHUNK < cols ? c0 + CHUNK : cols;
        long long c = c0 + threadIdx.x;
        // Rows contiguous in out and in each operand that is not broadcast along them: 16-byte
        // vectors (a broadcast operand's one value is repeated).
        using V = caijit::vec16<T>;
        constexpr long long item = sizeof(T);
        if (V::size > 1 && so == item && (sa == 0 || sa == item) && (sb == 0 || sb == item) && caijit::aligned16(po) &&
            (sa == 0 || caijit::aligned16(pa)) && (sb == 0 || caijit::aligned16(pb))) {
            const long long nvec = (c1 - c0) / V::size;
            for (long long j = threadIdx.x; j < nvec; j += blockDim.x) {
                const long long e0 = c0 + j * V::size;
                V va, vb, vo;
                if (sa) va = *reinterpret_cast<const V*>(pa + e0 * item);
                if (sb) vb = *reinterpret_cast<const V*>(pb + e0 * item);
#pragma unroll
                for (int k = 0; k < V::size; ++k) {
                    const T x = sa ? va.v[k] : *reinterpret_cast<const T*>(pa);
                    const T y = sb ? vb.v[k] : *reinterpret_cast<const T*>(pb);
                    vo.v[k] = apply(op, x, y);
                }
                *reinterpret_cast<V*>(po + e0 * item) = vo;
            }
            c = c0 + nvec * V::size + threadIdx.x;
        }
        for (; c < c1; c += blockDim.x) {
            *reinterpret_cast<T*>(po + c * so) =
                apply(op, *reinterpret_cast<const T*>(pa + c * sa), *reinterpret_cast<const T*>(pb + c * sb));
        }
    }
}
