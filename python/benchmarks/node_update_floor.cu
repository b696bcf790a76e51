// The floor under a graph replay's rebinding: what the driver takes to give one kernel node
// of an executable graph new parameters, called from C. A chain of 1,000 empty kernels
// (2 pointers + 1 int, as bench_graph.py's) is captured and instantiated; then every node
// gets new pointers, 21 rounds, each way the driver offers: `kernelParams` (what caijit
// passes), an `extra` parameter buffer, and the generic `cuGraphExecNodeSetParams`; with
// the graph idle and with two launches of it in flight. Median µs per node. On the GPU
// machine:
//   nvcc -O2 -arch=native -o /tmp/node_update_floor python/benchmarks/node_update_floor.cu -lcuda
//   /tmp/node_update_floor
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>

extern "C" __global__ void empty(const float* x, float* y, int n) {}

static void check(CUresult r, const char* what) {
    if (r != CUDA_SUCCESS) {
        const char* s = "?";
        cuGetErrorString(r, &s);
        std::printf("%s: %s\n", what, s);
        std::exit(1);
    }
}
static void check(cudaError_t r, const char* what) {
    if (r != cudaSuccess) {
        std::printf("%s: %s\n", what, cudaGetErrorString(r));
        std::exit(1);
    }
}
#define CHECK(call) check((call), #call)

enum Way { KERNEL_PARAMS, EXTRA_BUFFER, NODE_SET_PARAMS };
static const char* const WAY_NAMES[] = {"kernelParams", "extra buffer", "cuGraphExecNodeSetParams"};

// Give `node` of `exec` the parameters (x, y, n) of `empty`, `base` being its captured ones.
static void set_params(Way way, CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS& base, const float* x,
                       float* y, int n) {
    void* args[3] = {&x, &y, &n};
    struct {
        const float* x;
        float* y;
        int n;
    } packed = {x, y, n};
    size_t size = 20;  // the parameters' bytes, as the kernel lays them out (8 + 8 + 4)
    void* extra[5] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    CUDA_KERNEL_NODE_PARAMS p = base;
    switch (way) {
    case KERNEL_PARAMS:
        p.kernelParams = args;
        p.extra = nullptr;
        CHECK(cuGraphExecKernelNodeSetParams(exec, node, &p));
        break;
    case EXTRA_BUFFER:
        p.kernelParams = nullptr;
        p.extra = extra;
        CHECK(cuGraphExecKernelNodeSetParams(exec, node, &p));
        break;
    case NODE_SET_PARAMS: {
        CUgraphNodeParams g = {};
        g.type = CU_GRAPH_NODE_TYPE_KERNEL;
        g.kernel.func = p.func;
        g.kernel.gridDimX = p.gridDimX, g.kernel.gridDimY = p.gridDimY, g.kernel.gridDimZ = p.gridDimZ;
        g.kernel.blockDimX = p.blockDimX, g.kernel.blockDimY = p.blockDimY, g.kernel.blockDimZ = p.blockDimZ;
        g.kernel.sharedMemBytes = p.sharedMemBytes;
        g.kernel.kernelParams = args;
        CHECK(cuGraphExecNodeSetParams(exec, node, &g));
        break;
    }
    }
}

int main() {
    const int K = 1000;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    float* bufs[2];
    CHECK(cudaMalloc(&bufs[0], 1 << 20));
    CHECK(cudaMalloc(&bufs[1], 1 << 20));
    empty<<<1, 32, 0, s>>>(bufs[0], bufs[0], 0);  // loads the module before the capture
    CHECK(cudaStreamSynchronize(s));

    cudaGraph_t graph;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < K; i++) empty<<<1, 1024, 0, s>>>(bufs[0] + i, bufs[0] + i + 1, 1024);
    CHECK(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec_rt;
    CHECK(cudaGraphInstantiate(&exec_rt, graph, 0));
    CUgraphExec exec = reinterpret_cast<CUgraphExec>(exec_rt);
    CUstream stream = reinterpret_cast<CUstream>(s);

    size_t n = 0;
    CHECK(cuGraphGetNodes(reinterpret_cast<CUgraph>(graph), nullptr, &n));
    std::vector<CUgraphNode> nodes(n);
    CHECK(cuGraphGetNodes(reinterpret_cast<CUgraph>(graph), nodes.data(), &n));
    std::vector<CUDA_KERNEL_NODE_PARAMS> base(n);
    for (size_t i = 0; i < n; i++) CHECK(cuGraphKernelNodeGetParams(nodes[i], &base[i]));

    for (bool in_flight : {false, true}) {
        for (Way way : {KERNEL_PARAMS, EXTRA_BUFFER, NODE_SET_PARAMS}) {
            std::vector<double> per_node;
            for (int round = 0; round < 21; round++) {
                float* b = bufs[round & 1];  // new pointers every round
                if (in_flight) {
                    CHECK(cuGraphLaunch(exec, stream));
                    CHECK(cuGraphLaunch(exec, stream));
                }
                auto t0 = std::chrono::steady_clock::now();
                for (size_t i = 0; i < n; i++) set_params(way, exec, nodes[i], base[i], b + i, b + i + 1, 1024);
                auto t1 = std::chrono::steady_clock::now();
                per_node.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
                CHECK(cuGraphLaunch(exec, stream));
                CHECK(cudaStreamSynchronize(s));
            }
            std::sort(per_node.begin(), per_node.end());
            std::printf("%-26s graph %-9s: %.3f µs a node (median of 21; min %.3f)\n", WAY_NAMES[way], in_flight ? "in flight" : "idle",
                        per_node[10], per_node[0]);
        }
    }
    return 0;
}
