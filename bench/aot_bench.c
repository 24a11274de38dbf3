/* AOT executor artefacts under a C host, the same binary on either runtime (LD_LIBRARY_PATH): one
 * figure per process on its last line. DIR holds lib.so (scripts/make_aot_fixtures.py --bench).
 *
 *   aot_bench latency DIR N     median microseconds of run (inputs set once), AOT executor
 *   aot_bench graph DIR N       the same for a graph-executor build of the model in DIR
 *   aot_bench memory DIR K      resident kB: after one executor has run, then per executor for
 *                               K executors (each run once), "FIRST PER_EXTRA"
 */
#include <stdint.h>

#include "bench_util.h"

static long resident_kb(void) {
  long rss, data;
  vm_kb(&rss, &data);
  return rss;
}

static TVMFunctionHandle fn(TVMModuleHandle m, const char* name) {
  TVMFunctionHandle f = NULL;
  CHECK(TVMModGetFunction(m, name, 0, &f));
  if (!f) {
    fprintf(stderr, "no function %s\n", name);
    exit(1);
  }
  return f;
}

static void call0(TVMFunctionHandle f) {
  TVMValue r;
  int rc;
  CHECK(TVMFuncCall(f, NULL, NULL, 0, &r, &rc));
}

static TVMModuleHandle make(TVMModuleHandle lib) {
  TVMValue v, r;
  int c = kDLDevice, rc = 0;
  v.v_device.device_type = kDLCPU;
  v.v_device.device_id = 0;
  CHECK(TVMFuncCall(fn(lib, "default"), &v, &c, 1, &r, &rc));
  return r.v_handle;
}

/* Fills every input of `ex` with ones (AOT: its own input arrays; graph: nothing to set, the
 * executor's inputs start as whatever memory holds, which does not change the time of a dense net). */
static void ones(TVMModuleHandle ex) {
  TVMValue r, v;
  int rc, c = kDLInt;
  TVMFunctionHandle count = NULL, get = NULL;
  TVMModGetFunction(ex, "get_num_inputs", 0, &count);
  TVMModGetFunction(ex, "get_input", 0, &get);
  if (!count || !get) return;
  CHECK(TVMFuncCall(count, NULL, NULL, 0, &r, &rc));
  for (int64_t i = 0; i < r.v_int64; i++) {
    v.v_int64 = i;
    TVMValue a;
    int ac;
    CHECK(TVMFuncCall(get, &v, &c, 1, &a, &ac));
    if (ac != kTVMNDArrayHandle) continue;
    DLTensor* t = a.v_handle;
    size_t n = (t->dtype.bits + 7) / 8;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    float* host = malloc(n);
    for (size_t k = 0; k < n / 4; k++) host[k] = 1.0f;
    CHECK(TVMArrayCopyFromBytes(t, host, n));
    free(host);
  }
}

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  const char* mode = argv[1];
  int n = atoi(argv[3]);
  char path[1024];
  snprintf(path, sizeof path, "%s/lib.so", argv[2]);
  TVMModuleHandle lib;
  CHECK(TVMModLoadFromFile(path, "so", &lib));
  if (!strcmp(mode, "latency") || !strcmp(mode, "graph")) {
    TVMModuleHandle ex = make(lib);
    ones(ex);
    TVMFunctionHandle run = fn(ex, "run");
    for (int i = 0; i < 10; i++) call0(run);
    double* t = malloc(sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++) {
      double start = now_ns();
      call0(run);
      t[i] = (now_ns() - start) / 1e3;
    }
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    printf("%.2f\n", t[n / 2]);
    return 0;
  }
  if (!strcmp(mode, "memory")) {
    TVMModuleHandle* ex = malloc(sizeof(TVMModuleHandle) * (size_t)n);
    ex[0] = make(lib);
    ones(ex[0]);
    call0(fn(ex[0], "run"));
    long first = resident_kb();
    for (int k = 1; k < n; k++) {
      ex[k] = make(lib);
      ones(ex[k]);
      call0(fn(ex[k], "run"));
    }
    long all = resident_kb();
    printf("%ld %.1f\n", first, n > 1 ? (double)(all - first) / (n - 1) : 0.0);
    return 0;
  }
  return 2;
}
