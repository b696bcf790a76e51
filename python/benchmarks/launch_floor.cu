// The floor of the launch-overhead table: a C++ loop of cuLaunchKernel for the same empty
// kernel (3 pointers + 1 int; or 8 pointers), timed like bench_launch.py. Built on the GPU
// machine as a library, which bench_launch.py loads and calls batch by batch between the
// Python paths' batches (so that every path is timed in the same moments of the host's
// drifting speed), or as a program:
//   nvcc -O2 -shared -Xcompiler -fPIC -DLAUNCH_FLOOR_LIBRARY -o /tmp/liblaunch_floor.so \
//       python/benchmarks/launch_floor.cu -lcuda
//   nvcc -O2 -o /tmp/launch_floor python/benchmarks/launch_floor.cu -lcuda
//   /tmp/launch_floor      # 3 arrays + 1 int: median host µs per launch, sustained µs
//   /tmp/launch_floor 8    # 8 arrays
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>

extern "C" __global__ void empty3(const float*, const float*, float*, int) {}
extern "C" __global__ void empty8(const float*, const float*, const float*, const float*, const float*, const float*,
                                  const float*, float*) {}

namespace {
struct Floor {
    CUfunction f3 = nullptr, f8 = nullptr;
    float* p[8] = {};
    int n = 1024;
    void* three[4] = {};
    void* all[8] = {};
};

// Set up once, in place (the parameter arrays point into the struct).
Floor& state() {
    static Floor s;
    static bool ready = [] {
        cudaFree(0);
        cudaGetFuncBySymbol(&s.f3, (const void*)empty3);
        cudaGetFuncBySymbol(&s.f8, (const void*)empty8);
        for (auto& x : s.p) cudaMalloc(&x, 4096);
        void* three[] = {&s.p[0], &s.p[1], &s.p[2], &s.n};
        std::copy(three, three + 4, s.three);
        for (int i = 0; i < 8; ++i) s.all[i] = &s.p[i];
        return true;
    }();
    (void)ready;
    return s;
}
}  // namespace

// Launch `n` times (8 pointers if `eight`, else 3 pointers + 1 int) and return the host
// seconds it took, without synchronising; -1 if a launch failed.
extern "C" double caijit_floor_batch(int eight, int n) {
    Floor& s = state();
    CUfunction f = eight ? s.f8 : s.f3;
    void** params = eight ? s.all : s.three;
    CUresult failed = CUDA_SUCCESS;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) failed = CUresult(failed | cuLaunchKernel(f, 1, 1, 1, 128, 1, 1, 0, 0, params, nullptr));
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return failed == CUDA_SUCCESS ? seconds : -1.0;
}

extern "C" void caijit_floor_sync() { cudaDeviceSynchronize(); }

#ifndef LAUNCH_FLOOR_LIBRARY
int main(int argc, char** argv) {
    int eight = argc > 1 && argv[1][0] == '8';
    if (caijit_floor_batch(eight, 2000) < 0) {
        std::fprintf(stderr, "cuLaunchKernel failed\n");
        return 1;
    }
    caijit_floor_sync();
    std::vector<double> batches;
    for (int r = 0; r < 100; ++r) {
        batches.push_back(caijit_floor_batch(eight, 200) / 200);
        caijit_floor_sync();
    }
    double sustained = caijit_floor_batch(eight, 20000);
    auto t0 = std::chrono::steady_clock::now();
    caijit_floor_sync();
    sustained = (sustained + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()) / 20000;
    std::sort(batches.begin(), batches.end());
    std::printf("%.3f %.3f\n", batches[50] * 1e6, sustained * 1e6);
    return 0;
}
#endif
