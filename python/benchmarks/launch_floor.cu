// The floor of the launch-overhead table: a C++ loop of cuLaunchKernel for the same empty
// kernel (3 pointers + 1 int), timed like bench_launch.py. Built on the GPU machine:
//   nvcc -O2 -o /tmp/launch_floor python/benchmarks/launch_floor.cu -lcuda
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>

extern "C" __global__ void empty3(const float*, const float*, float*, int) {}

int main() {
    cudaFree(0);
    CUfunction f;
    cudaGetFuncBySymbol(&f, (const void*)empty3);
    float *a, *b, *c;
    cudaMalloc(&a, 4096); cudaMalloc(&b, 4096); cudaMalloc(&c, 4096);
    int n = 1024;
    void* params[] = {&a, &b, &c, &n};
    auto launch = [&] { cuLaunchKernel(f, 1, 1, 1, 128, 1, 1, 0, 0, params, nullptr); };
    using clk = std::chrono::steady_clock;
    for (int i = 0; i < 2000; ++i) launch();
    cudaDeviceSynchronize();
    std::vector<double> batches;
    for (int r = 0; r < 100; ++r) {
        auto t0 = clk::now();
        for (int i = 0; i < 200; ++i) launch();
        batches.push_back(std::chrono::duration<double>(clk::now() - t0).count() / 200);
        cudaDeviceSynchronize();
    }
    auto t0 = clk::now();
    for (int i = 0; i < 20000; ++i) launch();
    cudaDeviceSynchronize();
    double sustained = std::chrono::duration<double>(clk::now() - t0).count() / 20000;
    std::sort(batches.begin(), batches.end());
    std::printf("%.3f %.3f\n", batches[50] * 1e6, sustained * 1e6);
    return 0;
}
