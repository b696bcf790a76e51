// A stand-in for libcuda.so.1 that does no GPU work: every driver call a launch or a graph
// replay makes returns at once (device memory is host memory; a stream capture only counts
// the launches made into it, each one kernel node), so that `valgrind --tool=callgrind`
// counts caijit's own instructions per launch on a machine without a GPU, the same count on
// every run. A measuring instrument for python/benchmarks/count_launch.py, and a witness for
// python/tests/test_graph_host.py of the parameters each kernel node was given (`stub_*`
// below); never loaded by caijit itself, only where LD_LIBRARY_PATH points at it.
// Build: gcc -O2 -shared -fPIC -o libcuda.so.1 stub_cuda.c
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void* Handle;
typedef unsigned long long CUdeviceptr;

static __thread Handle current = 0;
static char context[64], module[64], function[64], pool[64];

// Device, context and stream queries.
CUresult cuInit(unsigned flags) { return 0; }
CUresult cuDriverGetVersion(int* v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return 0; }
CUresult cuDeviceGet(CUdevice* d, int ordinal) { *d = ordinal; return 0; }
CUresult cuDeviceGetAttribute(int* v, int attribute, CUdevice d) {
    *v = attribute == 75 ? 9 : attribute == 76 ? 0 : 1024;  // compute capability 9.0
    return 0;
}
CUresult cuDeviceGetName(char* name, int len, CUdevice d) { strncpy(name, "stub", len); return 0; }
CUresult cuDevicePrimaryCtxRetain(Handle* c, CUdevice d) { *c = context; return 0; }
CUresult cuCtxGetCurrent(Handle* c) { *c = current; return 0; }
CUresult cuCtxSetCurrent(Handle c) { current = c; return 0; }
CUresult cuCtxSynchronize(void) { return 0; }
// A stream made here; the legacy and per-thread default streams (handles 0-2) never capture.
typedef struct {
    int capturing;
    unsigned long long id;
    struct Graph* graph;
    Handle last; // the node the last launch captured became
} Stream;
typedef struct Graph {
    size_t nodes;
} Graph;
static unsigned long long captures = 0;
static Stream* made(Handle s) { return (size_t)s > 2 ? (Stream*)s : NULL; }
static Stream* capturing(Handle s) { return made(s) && made(s)->capturing ? made(s) : NULL; }
CUresult cuStreamCreate(Handle* s, unsigned flags) { *s = calloc(1, sizeof(Stream)); return 0; }
CUresult cuStreamDestroy_v2(Handle s) { return 0; }
CUresult cuStreamSynchronize(Handle s) { return 0; }
CUresult cuStreamIsCapturing(Handle s, int* status) { *status = capturing(s) != NULL; return 0; }
CUresult cuStreamGetCaptureInfo_v3(Handle s, int* status, unsigned long long* id, Graph** graph, Handle** deps,
                                   void* edges, size_t* n) {
    Stream* c = capturing(s);
    *status = c != NULL; // CU_STREAM_CAPTURE_STATUS_ACTIVE
    if (id) *id = c ? c->id : 0;
    if (graph) *graph = c ? c->graph : NULL;
    if (deps) *deps = c && c->last ? &c->last : NULL;
    if (n) *n = c && c->last ? 1 : 0;
    return 0;
}
CUresult cuStreamGetCaptureInfo(Handle s, int* status, unsigned long long* id) {
    *status = 0;
    if (id) *id = 0;
    return 0;
}
CUresult cuStreamGetCtx(Handle s, Handle* c) { *c = context; return 0; }
CUresult cuStreamWaitEvent(Handle s, Handle e, unsigned flags) { return 0; }
CUresult cuThreadExchangeStreamCaptureMode(int* mode) { return 0; }
CUresult cuEventCreate(Handle* e, unsigned flags) { *e = malloc(16); return 0; }
CUresult cuEventRecord(Handle e, Handle s) { return 0; }
CUresult cuEventQuery(Handle e) { return 0; }
CUresult cuEventSynchronize(Handle e) { return 0; }

// Modules and kernels (the image is not read).
CUresult cuModuleLoadData(Handle* m, const void* image) { *m = module; return 0; }
CUresult cuModuleGetFunction(Handle* f, Handle m, const char* name) { *f = function; return 0; }
CUresult cuFuncGetAttribute(int* v, int attribute, Handle f) { *v = attribute == 0 ? 1024 : 0; return 0; }
CUresult cuFuncSetAttribute(Handle f, int attribute, int v) { return 0; }
CUresult cuOccupancyMaxPotentialBlockSize(int* grid, int* block, Handle f, void* cb, size_t smem, int limit) {
    *grid = 1;
    *block = 256;
    return 0;
}
// Kernel nodes, numbered in the order they were captured in this process. With
// `stub_record(n)`, each keeps the first 8 bytes of its first n parameters as it was last
// given them (captured, or set in an executable graph): `stub_node_param(node, i)`; and as
// its graph's own node was last given them (what a child-graph copy launches):
// `stub_template_param(node, i)`.
#define MAX_NODES 4096
#define MAX_RECORDED 8
typedef struct {
    int index;
} Node;
static int node_count = 0, recorded = 0;
static unsigned long long node_params[MAX_NODES][MAX_RECORDED], template_params[MAX_NODES][MAX_RECORDED];
void stub_record(int n) { recorded = n < MAX_RECORDED ? n : MAX_RECORDED; }
int stub_nodes(void) { return node_count; }
unsigned long long stub_node_param(int node, int i) { return node_params[node][i]; }
unsigned long long stub_template_param(int node, int i) { return template_params[node][i]; }
static void record_in(unsigned long long (*table)[MAX_RECORDED], const Node* node, void** params) {
    for (int i = 0; i < recorded && node->index < MAX_NODES; i++) memcpy(&table[node->index][i], params[i], 8);
}
static void record(const Node* node, void** params) {
    record_in(node_params, node, params);
    record_in(template_params, node, params);
}

// A launch into a capture becomes a kernel node.
static void captured(Handle s, void** params) {
    Stream* c = capturing(s);
    if (c) {
        Node* node = malloc(sizeof(Node));
        node->index = node_count++;
        record(node, params);
        c->last = node;
        c->graph->nodes++;
    }
}
CUresult cuLaunchKernel(Handle f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, Handle s, void** params, void** extra) {
    captured(s, params);
    return 0;
}
typedef struct {
    unsigned grid[3], block[3], smem;
    Handle stream;
} LaunchConfig; // CUlaunchConfig's first members
CUresult cuLaunchKernelEx(const LaunchConfig* config, Handle f, void** params, void** extra) {
    captured(config->stream, params);
    return 0;
}

// Stream capture and graphs: one kernel node per captured launch, nothing else.
CUresult cuStreamBeginCapture_v2(Handle s, int mode) {
    Stream* c = made(s);
    if (!c || c->capturing) return 900; // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    *c = (Stream){1, ++captures, calloc(1, sizeof(Graph)), NULL};
    return 0;
}
CUresult cuStreamEndCapture(Handle s, Graph** g) {
    Stream* c = capturing(s);
    if (!c) return 901; // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    *g = c->graph;
    *c = (Stream){0};
    return 0;
}
CUresult cuGraphGetNodes(Graph* g, Handle* nodes, size_t* n) {
    if (nodes)
        for (size_t i = 0; i < *n && i < g->nodes; i++) nodes[i] = function;
    *n = g->nodes;
    return 0;
}
CUresult cuGraphNodeGetType(Handle node, int* type) { *type = 0; return 0; } // CU_GRAPH_NODE_TYPE_KERNEL
CUresult cuGraphInstantiateWithFlags(Handle* exec, Graph* g, unsigned long long flags) { *exec = malloc(16); return 0; }
typedef struct {
    Handle func;
    unsigned grid[3], block[3], smem;
    void** params;
} KernelNodeParams; // CUDA_KERNEL_NODE_PARAMS's first members
CUresult cuGraphExecKernelNodeSetParams_v2(Handle exec, Node* node, const KernelNodeParams* p) {
    record_in(node_params, node, p->params);
    return 0;
}
CUresult cuGraphKernelNodeSetParams_v2(Node* node, const KernelNodeParams* p) {
    record_in(template_params, node, p->params);
    return 0;
}
// A child-graph node added to a capture; `stub_fail_children(n)`: the next n fail.
static int children = 0, failing_children = 0;
int stub_children(void) { return children; }
void stub_fail_children(int n) { failing_children = n; }
CUresult cuGraphAddChildGraphNode(Handle* node, Graph* g, const Handle* deps, size_t n, Graph* child) {
    if (failing_children > 0) {
        failing_children--;
        return 999; // CUDA_ERROR_UNKNOWN
    }
    children++;
    *node = malloc(sizeof(Node));
    ((Node*)*node)->index = MAX_NODES; // (not a kernel node: never recorded)
    g->nodes++;
    return 0;
}
CUresult cuStreamUpdateCaptureDependencies_v2(Handle s, Handle* nodes, const void* edges, size_t n, unsigned flags) {
    Stream* c = capturing(s);
    if (c && n == 1) c->last = nodes[0];
    return 0;
}
CUresult cuGraphLaunch(Handle exec, Handle s) { return 0; }
CUresult cuGraphExecDestroy(Handle exec) { return 0; }
CUresult cuGraphDestroy(Graph* g) { return 0; }
CUresult cuUserObjectCreate(Handle* o, void* payload, void (*destroy)(void*), unsigned n, unsigned flags) {
    *o = malloc(16);
    return 0;
}
CUresult cuGraphRetainUserObject(Graph* g, Handle o, unsigned n, unsigned flags) { return 0; }

// Memory: host memory stands in for device memory.
CUresult cuMemPoolCreate(Handle* p, const void* props) { *p = pool; return 0; }
CUresult cuMemPoolSetAttribute(Handle p, int attribute, void* v) { return 0; }
CUresult cuMemPoolTrimTo(Handle p, size_t keep) { return 0; }
CUresult cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t n, Handle from, Handle s) {
    void* m = NULL;
    if (posix_memalign(&m, 256, n ? n : 1)) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
    *p = (CUdeviceptr)m;
    return 0;
}
CUresult cuMemFreeAsync(CUdeviceptr p, Handle s) { free((void*)p); return 0; }
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) { return cuMemAllocFromPoolAsync(p, n, pool, NULL); }
CUresult cuMemFree_v2(CUdeviceptr p) { free((void*)p); return 0; }
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, Handle s) { memset((void*)p, v, n); return 0; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* s, size_t n, Handle st) { memcpy((void*)d, s, n); return 0; }
CUresult cuMemcpyDtoHAsync_v2(void* d, CUdeviceptr s, size_t n, Handle st) { memcpy(d, (void*)s, n); return 0; }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, Handle st) {
    memcpy((void*)d, (void*)s, n);
    return 0;
}
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
    *free_bytes = 1ull << 36;
    *total = 1ull << 37;
    return 0;
}
CUresult cuPointerGetAttribute(void* v, int attribute, CUdeviceptr p) {
    switch (attribute) {
        case 1: *(Handle*)v = context; return 0;           // CONTEXT
        case 2: *(unsigned*)v = 2; return 0;               // MEMORY_TYPE: device
        case 9: *(int*)v = 0; return 0;                    // DEVICE_ORDINAL
        case 11: *(CUdeviceptr*)v = p; return 0;           // RANGE_START_ADDR
        case 12: *(size_t*)v = 1 << 20; return 0;          // RANGE_SIZE
        default: *(unsigned long long*)v = 0; return 0;
    }
}
CUresult cuGetErrorString(CUresult r, const char** s) { *s = "stub driver error"; return 0; }
CUresult cuGetErrorName(CUresult r, const char** s) { *s = "CUDA_ERROR_STUB"; return 0; }
