/* One C driver for both runtimes (the dynamic linker picks libtvm_runtime.so): prints one number.
 *   runtime_bench latency  MODEL_DIR ROUNDS  median microseconds per run
 *   runtime_bench dispatch MODEL_DIR ROUNDS  median nanoseconds per operator node per run
 *   runtime_bench funccall MODEL_DIR ROUNDS  nanoseconds per TVMFuncCall (executor get_num_outputs)
 *   runtime_bench set_input  MODEL_DIR ROUNDS  nanoseconds per set_input of input 0 (NDArray)
 *   runtime_bench get_output MODEL_DIR ROUNDS  nanoseconds per get_output(0, array) copy
 *   runtime_bench load     MODEL_DIR         "milliseconds peak_kB": create + load_params time, and
 *                                            the rise of VmHWM above the process with the blob read
 * Models: a folder with lib.so, graph.json, params.bin (bound or unbound params). */
#include "bench_util.h"

static long status_kb(const char* key) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  size_t n = strlen(key);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, n)) kb = atol(line + n);
  fclose(f);
  return kb;
}

static TVMFunctionHandle fn(TVMModuleHandle m, const char* name) {
  TVMFunctionHandle f;
  CHECK(TVMModGetFunction(m, name, 0, &f));
  return f;
}

static TVMModuleHandle create(const char* dir, const char* json, TVMByteArray* params) {
  char path[1024];
  TVMModuleHandle lib;
  snprintf(path, sizeof path, "%s/lib.so", dir);
  CHECK(TVMModLoadFromFile(path, "so", &lib));
  TVMModuleHandle ex = create_graph_executor(json, lib);
  TVMModFree(lib);
  TVMValue v[1], r;
  int c[1], rc;
  v[0].v_handle = params;
  c[0] = kTVMBytes;
  TVMFunctionHandle load = fn(ex, "load_params");
  CHECK(TVMFuncCall(load, v, c, 1, &r, &rc));
  TVMFuncFree(load);
  return ex;
}

/* Median of `rounds` timings of `body`, in ns per iteration of `inner`. */
#define MEDIAN(rounds, inner, body)                                  \
  ({                                                                 \
    double* t_ = malloc(sizeof(double) * (rounds));                  \
    for (int r_ = 0; r_ < (rounds); r_++) {                          \
      double s_ = now_ns();                                          \
      for (int i_ = 0; i_ < (inner); i_++) { body; }                 \
      t_[r_] = (now_ns() - s_) / (inner);                            \
    }                                                                \
    qsort(t_, (rounds), sizeof(double), cmp_double);                        \
    double m_ = t_[(rounds) / 2];                                    \
    free(t_);                                                        \
    m_;                                                              \
  })

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const char *mode = argv[1], *dir = argv[2];
  int rounds = argc > 3 ? atoi(argv[3]) : 1;
  size_t n, pn;
  char* json = slurp(dir, "graph.json", &n);
  char* params = slurp(dir, "params.bin", &pn);
  TVMByteArray blob = {params, pn};
  if (!strcmp(mode, "load")) {
    long before = status_kb("VmRSS:");
    double t0 = now_ns();
    TVMModuleHandle ex = create(dir, json, &blob);
    double ms = (now_ns() - t0) / 1e6;
    printf("%.3f %ld\n", ms, status_kb("VmHWM:") - before);
    TVMModFree(ex);
    return 0;
  }
  TVMModuleHandle ex = create(dir, json, &blob);
  TVMFunctionHandle run = fn(ex, "run");
  TVMValue v[2], r;
  int c[2], rc;
  CHECK(TVMFuncCall(run, NULL, NULL, 0, &r, &rc));
  CHECK(TVMFuncCall(run, NULL, NULL, 0, &r, &rc));
  double result = 0;
  if (!strcmp(mode, "latency") || !strcmp(mode, "dispatch")) {
    int inner = 1;
    double probe = MEDIAN(3, 1, TVMFuncCall(run, NULL, NULL, 0, &r, &rc));
    if (probe < 50e3) inner = (int)(50e3 / (probe + 1)) + 1; /* batch tiny runs for a clean clock */
    result = MEDIAN(rounds, inner, CHECK(TVMFuncCall(run, NULL, NULL, 0, &r, &rc)));
    if (!strcmp(mode, "dispatch")) {
      int ops = 0;
      for (const char* p = json; (p = strstr(p, "\"tvm_op\"")); p++) ops++;
      result /= ops;
    } else {
      result /= 1e3;
    }
  } else if (!strcmp(mode, "funccall")) {
    TVMFunctionHandle f = fn(ex, "get_num_outputs");
    result = MEDIAN(rounds, 10000, TVMFuncCall(f, NULL, NULL, 0, &r, &rc));
  } else if (!strcmp(mode, "set_input") || !strcmp(mode, "get_output")) {
    int get = !strcmp(mode, "get_output");
    TVMFunctionHandle g = fn(ex, get ? "get_output" : "get_input");
    v[0].v_int64 = 0;
    c[0] = kDLInt;
    CHECK(TVMFuncCall(g, v, c, 1, &r, &rc)); /* a view, for the shape and dtype */
    TVMArrayHandle like = r.v_handle, arr;
    CHECK(TVMArrayAlloc(like->shape, like->ndim, like->dtype.code, like->dtype.bits, 1, 1, 0, &arr));
    TVMArrayFree(like);
    TVMFunctionHandle f = fn(ex, get ? "get_output" : "set_input");
    v[1].v_handle = arr;
    c[1] = kTVMNDArrayHandle;
    result = MEDIAN(rounds, 10000, CHECK(TVMFuncCall(f, v, c, 2, &r, &rc)));
  } else {
    return 2;
  }
  printf("%.3f\n", result);
  return 0;
}
