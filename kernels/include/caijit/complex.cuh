// caijit::complex<T>: the element type of complex64 / complex128 arrays (NumPy layout:
// real then imaginary part), aligned like CUDA's float2 / double2.
#pragma once

namespace caijit {

template <typename T>
struct alignas(2 * sizeof(T)) complex {
    T re, im;
    complex() = default;
    __host__ __device__ constexpr complex(T r, T i = T(0)) : re(r), im(i) {}
    __host__ __device__ friend complex operator+(complex a, complex b) { return {a.re + b.re, a.im + b.im}; }
    __host__ __device__ friend complex operator-(complex a, complex b) { return {a.re - b.re, a.im - b.im}; }
    __host__ __device__ friend complex operator*(complex a, complex b) {
        return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
    }
};

static_assert(sizeof(complex<float>) == 8 && alignof(complex<float>) == 8, "complex64 layout");
static_assert(sizeof(complex<double>) == 16 && alignof(complex<double>) == 16, "complex128 layout");

}  // namespace caijit
