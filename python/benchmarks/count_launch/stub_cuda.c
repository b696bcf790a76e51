// A stand-in for libcuda.so.1 that does no GPU work: every driver call a launch makes
// returns at once (device memory is host memory), so that `valgrind --tool=callgrind`
// counts caijit's own instructions per launch on a machine without a GPU, the same count on
// every run. A measuring instrument for python/benchmarks/count_launch.py: never loaded by
// tests or by caijit itself, only where LD_LIBRARY_PATH points at it.
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
CUresult cuStreamCreate(Handle* s, unsigned flags) { *s = malloc(16); return 0; }
CUresult cuStreamDestroy_v2(Handle s) { return 0; }
CUresult cuStreamSynchronize(Handle s) { return 0; }
CUresult cuStreamIsCapturing(Handle s, int* status) { *status = 0; return 0; }
CUresult cuStreamGetCaptureInfo_v3(Handle s, int* status, unsigned long long* id, void* a, void* b, void* c,
                                   size_t* n) {
    *status = 0;
    if (id) *id = 0;
    if (n) *n = 0;
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
CUresult cuLaunchKernel(Handle f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, Handle s, void** params, void** extra) {
    return 0;
}
CUresult cuLaunchKernelEx(const void* config, Handle f, void** params, void** extra) { return 0; }

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
