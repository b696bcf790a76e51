// caijit::convert<D>(s): value conversion between every real element type, half and
// bfloat16 included (they go through float).
#pragma once

#include <caijit/caijit.cuh>

namespace caijit {

__device__ __forceinline__ float widen(__half h) { return __half2float(h); }
__device__ __forceinline__ float widen(__nv_bfloat16 h) { return __bfloat162float(h); }
template <typename S>
__device__ __forceinline__ S widen(S s) { return s; }

template <typename D>
struct narrow {
    template <typename S>
    __device__ __forceinline__ static D from(S s) { return static_cast<D>(s); }
};
template <>
struct narrow<__half> {
    template <typename S>
    __device__ __forceinline__ static __half from(S s) { return __float2half_rn(static_cast<float>(s)); }
};
template <>
struct narrow<__nv_bfloat16> {
    template <typename S>
    __device__ __forceinline__ static __nv_bfloat16 from(S s) { return __float2bfloat16_rn(static_cast<float>(s)); }
};

template <typename D, typename S>
__device__ __forceinline__ D convert(S s) { return narrow<D>::from(widen(s)); }

// The accumulator type of a reduction over T: float for 16-bit floats, T otherwise.
template <typename T> struct accumulator { using type = T; };
template <> struct accumulator<__half> { using type = float; };
template <> struct accumulator<__nv_bfloat16> { using type = float; };

}  // namespace caijit
