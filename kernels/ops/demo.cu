// The kernel of `python -m caijit demo`: an extern "C" kernel (no mangling) mixing a
// strided input view, a contiguous output and scalars.
#include <caijit/caijit.cuh>

extern "C" __global__ void saxpy_strided(float a, caijit::Array<const float, 2> x, float* __restrict__ y) {
    const long long rows = x.shape[0], cols = x.shape[1];
    for (long long i = caijit::global_thread(); i < rows * cols; i += caijit::grid_threads()) {
        y[i] = a * x(i / cols, i % cols) + y[i];
    }
}
