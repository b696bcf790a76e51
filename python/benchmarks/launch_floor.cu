// The floor of the launch-overhead table: a C++ loop of cuLaunchKernel for the same empty
// kernel (3 pointers + 1 int; with the argument 8, 8 pointers), timed like
// bench_launch.py. Built on the GPU machine:
//   nvcc -O2 -o /tmp/launch_floor python/benchmarks/launch_floor.cu -lcuda
//   /tmp/launch_floor      # 3 arrays + 1 int
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

int main(int argc, char** argv) {
    cudaFree(0);
    bool eight = argc > 1 && argv[1][0] == '8';
    CUfunction f;
    cudaGetFuncBySymbol(&f, eight ? (const void*)empty8 : (const void*)empty3);
    float* p[8];
    for (auto& x : p) cudaMalloc(&x, 4096);
    int n = 1024;
    void* three[] = {&p[0], &p[1], &p[2], &n};
    void* all[] = {&p[0], &p[1], &p[2], &p[3], &p[4], &p[5], &p[6], &p[7]};
    void** params = eight ? all : three;
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
