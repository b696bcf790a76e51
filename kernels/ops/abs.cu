// out = |x|, elementwise, as NumPy's absolute over real types: floating values lose their
// sign bit (-0.0 and -NaN included), unsigned values are unchanged, and the most negative
// integer stays itself.
#include <caijit/caijit.cuh>
#include <caijit/map.cuh>

struct abs_op {
    template <typename T>
    __device__ T operator()(T x) const {
        return x < T(0) ? T(-x) : x;
    }
    __device__ unsigned char operator()(unsigned char x) const { return x; }
    __device__ unsigned short operator()(unsigned short x) const { return x; }
    __device__ unsigned int operator()(unsigned int x) const { return x; }
    __device__ unsigned long long operator()(unsigned long long x) const { return x; }
    // The sign bit cleared (PTX's abs.f64 leaves a NaN's sign unspecified).
    __device__ float operator()(float x) const { return __int_as_float(__float_as_int(x) & 0x7fffffff); }
    __device__ double operator()(double x) const {
        return __longlong_as_double(__double_as_longlong(x) & 0x7fffffffffffffffLL);
    }
    __device__ __half operator()(__half x) const { return __habs(x); }
    __device__ __nv_bfloat16 operator()(__nv_bfloat16 x) const { return __habs(x); }
};

template <typename T>
__global__ void unary(const T* __restrict__ x, T* __restrict__ out, long long n) {
    caijit::map(x, out, n, abs_op{});
}
