/* A minimal NVTX tool for tests: loaded through NVTX_INJECTION64_PATH, it fills the core
 * module's RangePushA and RangePop slots and appends "push <name>" / "pop" lines to the
 * file NVTX_TEST_LOG names. Built by python/tests/test_debugging.py. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*nvtx_fn)(void);
typedef const void *(*get_export_table_fn)(uint32_t id);
typedef struct {
    size_t struct_size;
    int (*get_module_function_table)(int module, nvtx_fn ***table, unsigned int *size);
} callbacks_t;

static FILE *out;

static int push_a(const char *name) {
    fprintf(out, "push %s\n", name);
    fflush(out);
    return 0;
}

static int pop(void) {
    fprintf(out, "pop\n");
    fflush(out);
    return 0;
}

int InitializeInjectionNvtx2(get_export_table_fn get) {
    const char *log = getenv("NVTX_TEST_LOG");
    if (!log || !(out = fopen(log, "a"))) return 0;
    const callbacks_t *cb = (const callbacks_t *)get(1); /* NVTX_ETID_CALLBACKS */
    if (!cb || cb->struct_size < sizeof(callbacks_t)) return 0;
    nvtx_fn **table = NULL;
    unsigned int size = 0;
    if (!cb->get_module_function_table(1 /* NVTX_CB_MODULE_CORE */, &table, &size) || size < 12) return 0;
    *table[9] = (nvtx_fn)push_a; /* NVTX_CBID_CORE_RangePushA */
    *table[11] = (nvtx_fn)pop;   /* NVTX_CBID_CORE_RangePop */
    fprintf(out, "attached %u\n", size);
    fflush(out);
    return 1;
}
