// Everything caijit offers device code: include this one header.
#pragma once

#if __has_include(<cuda_fp16.h>)
#include <cuda_fp16.h>
#endif
#if __has_include(<cuda_bf16.h>)
#include <cuda_bf16.h>
#endif

#include <caijit/array.cuh>
#include <caijit/complex.cuh>
#include <caijit/grid.cuh>
#include <caijit/vec.cuh>
