/* One C driver for both runtimes on OpenCL device 0 (the dynamic linker picks libtvm_runtime.so):
 *   opencl_bench latency MODEL_DIR ROUNDS   median microseconds per run (run + TVMSynchronize)
 *   opencl_bench load    MODEL_DIR          milliseconds of create + load_params + the first run
 *                                           (every kernel's program built) + TVMSynchronize
 *   opencl_bench share   MODEL_DIR K [OTHER_DIR]
 *                                           "first_kB second_kB per_extra_kB": VmData growth of the
 *                                           first executor (created, params loaded, run), of the
 *                                           second sharing its weights (share_params; with
 *                                           OTHER_DIR, of that graph, e.g. a batch-4 build sharing
 *                                           batch 1's weights), and per executor after the second
 *                                           (K > 2: the slope; in ours the second also pays for
 *                                           what folding derives, once)
 * DEVICE_BYTES=SHIM: the share figures count live device bytes through the OpenCL shim instead.
 * Models: a folder with lib.so, graph.json, params.bin, built for OpenCL. Each executor loads the
 * library anew (as separate hosts would); ONE_LIB=1 makes them share one loaded library, VERBOSE=1
 * prints each additional executor's steps (create, share_params, first run). */
#include "bench_util.h"

static TVMModuleHandle create_on_opencl(const char* dir, TVMModuleHandle* lib) {
  size_t n;
  if (!*lib) *lib = load_lib(dir);
  char* json = slurp(dir, "graph.json", &n);
  TVMModuleHandle ex = create_graph_executor_on(json, *lib, kDLOpenCL);
  free(json);
  return ex;
}

static void run_sync(TVMModuleHandle ex) {
  call_packed(ex, "run", NULL, NULL, 0);
  CHECK(TVMSynchronize(kDLOpenCL, 0, NULL));
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const char *mode = argv[1], *dir = argv[2];
  size_t pn;
  char* params = slurp(dir, "params.bin", &pn);
  TVMByteArray blob = {params, pn};
  TVMModuleHandle lib = NULL;
  if (!strcmp(mode, "load")) {
    double t0 = now_ns();
    TVMModuleHandle ex = create_on_opencl(dir, &lib);
    bind_weights(ex, NULL, &blob);
    run_sync(ex);
    printf("%.3f\n", (now_ns() - t0) / 1e6);
    return 0;
  }
  if (!strcmp(mode, "latency")) {
    int rounds = argc > 3 ? atoi(argv[3]) : 11;
    TVMModuleHandle ex = create_on_opencl(dir, &lib);
    bind_weights(ex, NULL, &blob);
    run_sync(ex);
    run_sync(ex);
    double* t = malloc(sizeof(double) * rounds);
    double probe = now_ns();
    run_sync(ex);
    probe = now_ns() - probe;
    int inner = probe < 50e3 ? (int)(50e3 / (probe + 1)) + 1 : 1; /* batch tiny runs */
    for (int i = 0; i < rounds; i++) {
      double s = now_ns();
      for (int j = 0; j < inner; j++) run_sync(ex);
      t[i] = (now_ns() - s) / inner / 1e3;
    }
    qsort(t, rounds, sizeof(double), cmp_double);
    printf("%.3f\n", t[rounds / 2]);
    return 0;
  }
  if (!strcmp(mode, "share") && argc > 3) {
    int k = atoi(argv[3]);
    const char* other = argc > 4 ? argv[4] : NULL;
    TVMModuleHandle* ex = calloc(k, sizeof *ex);
    TVMModuleHandle* libs = calloc(k, sizeof *libs);
    long base = memory_kb();
    ex[0] = create_on_opencl(dir, &libs[0]);
    bind_weights(ex[0], NULL, &blob);
    run_sync(ex[0]);
    long first = memory_kb(), second = first;
    for (int i = 1; i < k; i++) {
      const char* d = other && i == k - 1 ? other : dir;
      size_t on;
      char* op = slurp(d, "params.bin", &on);
      TVMByteArray ob = {op, on};
      /* ONE_LIB=1: every executor of MODEL_DIR made from one loaded library. */
      if (getenv("ONE_LIB") && !strcmp(getenv("ONE_LIB"), "1") && d == dir) libs[i] = libs[0];
      long t0 = memory_kb();
      ex[i] = create_on_opencl(d, &libs[i]);
      long t1 = memory_kb();
      bind_weights(ex[i], ex[0], &ob);
      long t2 = memory_kb();
      run_sync(ex[i]);
      long t3 = memory_kb();
      if (getenv("VERBOSE")) fprintf(stderr, "create %ld share %ld run %ld\n", t1 - t0, t2 - t1, t3 - t2);
      free(op);
      /* The first executor runs again once others share its weights (it folds then, in ours). */
      run_sync(ex[0]);
      if (i == 1) second = memory_kb();
    }
    long all = memory_kb();
    if (getenv("VERBOSE")) { /* ours: what the first and the last executor hold */
      TVMFunctionHandle f;
      TVMValue r;
      int rc;
      for (int i = 0; i < k; i += k - 1) {
        if (TVMModGetFunction(ex[i], "get_memory_usage", 0, &f) || !f) break;
        CHECK(TVMFuncCall(f, NULL, NULL, 0, &r, &rc));
        fprintf(stderr, "executor %d: %s\n", i, r.v_str);
      }
    }
    printf("%ld %ld %ld\n", first - base, second - first, k > 2 ? (all - second) / (k - 2) : 0);
    return 0;
  }
  return 2;
}
