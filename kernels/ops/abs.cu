// out = |x|, elementwise (NumPy's absolute over real types: unsigned values unchanged;
// the most negative integer stays itself, as in NumPy).
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
};

template <typename T>
__global__ void abs_kernel(const T* __restrict__ x, T* __restrict__ out, long long n) {
    caijit::map(x, out, n, abs_op{});
}
