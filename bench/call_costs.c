/* What each C entry point a host calls per request costs, on either runtime (the dynamic linker
 * picks libtvm_runtime.so): prints one line, nanoseconds per call for every case, the least of
 * ROUNDS timed loops of N calls each (the least: the machine's noise only adds).
 *
 *   call_costs MODEL_DIR CHAIN_DIR INPUT_NAME [N] [ROUNDS]
 *
 * MODEL_DIR: a small model (lib.so, graph.json, params.bin) whose input 0, INPUT_NAME, is set; CHAIN_DIR: a
 * chain of tiny operators (graph.json's node count), whose run is timed per node. Cases, in the
 * order printed:
 *   funccall     TVMFuncCall(get_num_outputs)
 *   set_name     set_input("<input 0>", DLTensor*)           (the host's tensor, copied in)
 *   set_index    set_input(0, DLTensor*)
 *   zero_copy    set_input_zero_copy("<input 0>", DLTensor*)
 *   get_output   get_output(0) returning an NDArray, then TVMArrayFree
 *   get_into     get_output(0, DLTensor*) copying into the host's tensor
 *   from_bytes   TVMArrayCopyFromBytes (input 0's size)
 *   to_bytes     TVMArrayCopyToBytes
 *   alloc_free   TVMArrayAlloc + TVMArrayFree (input 0's shape)
 *   retain_free  TVMObjectRetain + TVMObjectFree of a module handle
 *   run_node     run of CHAIN_DIR, per operator node
 */
#include "bench_util.h"

#include <stdint.h>

static TVMFunctionHandle fn(TVMModuleHandle m, const char* name) {
  TVMFunctionHandle f;
  CHECK(TVMModGetFunction(m, name, 0, &f));
  return f;
}

static TVMModuleHandle executor(const char* dir, int load) {
  size_t n;
  char* json = slurp(dir, "graph.json", &n);
  char path[1024];
  snprintf(path, sizeof path, "%s/lib.so", dir);
  TVMModuleHandle lib;
  CHECK(TVMModLoadFromFile(path, "so", &lib));
  TVMModuleHandle ex = create_graph_executor(json, lib);
  if (load) {
    size_t pn;
    char* params = slurp(dir, "params.bin", &pn);
    TVMByteArray bytes = {params, pn};
    TVMValue v[1], r;
    int c[1] = {kTVMBytes}, rc;
    v[0].v_handle = &bytes;
    CHECK(TVMFuncCall(fn(ex, "load_params"), v, c, 1, &r, &rc));
    free(params);
  }
  free(json);
  return ex;
}

/* The nodes of a graph JSON: occurrences of "op" keys. */
static int count_nodes(const char* dir) {
  size_t n;
  char* json = slurp(dir, "graph.json", &n);
  int nodes = 0;
  for (char* p = json; (p = strstr(p, "\"op\"")); p += 4) nodes++;
  free(json);
  return nodes;
}

/* ONLY=<case> times that case alone (for a profiler), the others skipped. */
static const char* only;

#define TIME(label, body)                                     \
  do {                                                        \
    if (only && strcmp(only, label)) break;                   \
    double best = 1e300;                                      \
    for (int round_ = 0; round_ < rounds; round_++) {         \
      double s = now_ns();                                    \
      for (int i = 0; i < iters; i++) { body; }               \
      double t = (now_ns() - s) / iters;                      \
      if (t < best) best = t;                                 \
    }                                                         \
    printf("%s%.2f", first ? "" : " ", best);                 \
    first = 0;                                                \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: call_costs MODEL_DIR CHAIN_DIR INPUT_NAME [N] [ROUNDS]\n");
    return 2;
  }
  int iters = argc > 4 ? atoi(argv[4]) : 20000, rounds = argc > 5 ? atoi(argv[5]) : 7, first = 1;
  only = getenv("ONLY");
  TVMModuleHandle ex = executor(argv[1], 1);
  TVMFunctionHandle num_outputs = fn(ex, "get_num_outputs"), set_input = fn(ex, "set_input"),
                    zero_copy = fn(ex, "set_input_zero_copy"), get_output = fn(ex, "get_output"),
                    get_input = fn(ex, "get_input"), run = fn(ex, "run");
  TVMValue v[2], r;
  int c[2], rc;
  /* Input 0: its name, shape and dtype, from the executor itself. */
  v[0].v_int64 = 0;
  c[0] = kDLInt;
  CHECK(TVMFuncCall(get_input, v, c, 1, &r, &rc));
  DLTensor* in0 = (DLTensor*)r.v_handle;
  size_t bytes = (size_t)((in0->dtype.bits * in0->dtype.lanes + 7) / 8);
  for (int d = 0; d < in0->ndim; d++) bytes *= (size_t)in0->shape[d];
  TVMArrayHandle host;
  CHECK(TVMArrayAlloc(in0->shape, in0->ndim, in0->dtype.code, in0->dtype.bits, in0->dtype.lanes, kDLCPU, 0, &host));
  const char* name = argv[3];
  char* buf = calloc(1, bytes);
  CHECK(TVMArrayCopyFromBytes(host, buf, bytes));
  CHECK(TVMFuncCall(run, v, c, 0, &r, &rc));
  /* An output buffer of output 0's shape. */
  v[0].v_int64 = 0;
  c[0] = kDLInt;
  CHECK(TVMFuncCall(get_output, v, c, 1, &r, &rc));
  TVMArrayHandle out0 = r.v_handle, out_host;
  CHECK(TVMArrayAlloc(out0->shape, out0->ndim, out0->dtype.code, out0->dtype.bits, out0->dtype.lanes, kDLCPU, 0,
                      &out_host));
  CHECK(TVMArrayFree(out0));

  TIME("funccall", CHECK(TVMFuncCall(num_outputs, v, c, 0, &r, &rc)));
  TIME("set_name", {
    v[0].v_str = name;
    c[0] = kTVMStr;
    v[1].v_handle = host;
    c[1] = kTVMDLTensorHandle;
    CHECK(TVMFuncCall(set_input, v, c, 2, &r, &rc));
  });
  TIME("set_index", {
    v[0].v_int64 = 0;
    c[0] = kDLInt;
    v[1].v_handle = host;
    c[1] = kTVMDLTensorHandle;
    CHECK(TVMFuncCall(set_input, v, c, 2, &r, &rc));
  });
  TIME("zero_copy", {
    v[0].v_str = name;
    c[0] = kTVMStr;
    v[1].v_handle = host;
    c[1] = kTVMDLTensorHandle;
    CHECK(TVMFuncCall(zero_copy, v, c, 2, &r, &rc));
  });
  /* Back to a copied input, for the cases below. */
  v[0].v_int64 = 0;
  c[0] = kDLInt;
  v[1].v_handle = host;
  c[1] = kTVMDLTensorHandle;
  CHECK(TVMFuncCall(set_input, v, c, 2, &r, &rc));
  TIME("get_output", {
    v[0].v_int64 = 0;
    c[0] = kDLInt;
    CHECK(TVMFuncCall(get_output, v, c, 1, &r, &rc));
    CHECK(TVMArrayFree(r.v_handle));
  });
  TIME("get_into", {
    v[0].v_int64 = 0;
    c[0] = kDLInt;
    v[1].v_handle = out_host;
    c[1] = kTVMDLTensorHandle;
    CHECK(TVMFuncCall(get_output, v, c, 2, &r, &rc));
  });
  TIME("from_bytes", CHECK(TVMArrayCopyFromBytes(host, buf, bytes)));
  TIME("to_bytes", CHECK(TVMArrayCopyToBytes(host, buf, bytes)));
  TIME("alloc_free", {
    TVMArrayHandle a;
    CHECK(TVMArrayAlloc(in0->shape, in0->ndim, in0->dtype.code, in0->dtype.bits, in0->dtype.lanes, kDLCPU, 0, &a));
    CHECK(TVMArrayFree(a));
  });
  TIME("retain_free", {
    CHECK(TVMObjectRetain(ex));
    CHECK(TVMObjectFree(ex));
  });
  TVMModuleHandle chain = executor(argv[2], 0);
  TVMFunctionHandle chain_run = fn(chain, "run");
  int nodes = count_nodes(argv[2]);
  /* The chain's inputs are left as allocated: its tiny kernels read whatever is there. */
  CHECK(TVMFuncCall(chain_run, v, c, 0, &r, &rc));
  int saved = iters;
  iters = iters / 20 > 0 ? iters / 20 : 1;
  TIME("run_node", CHECK(TVMFuncCall(chain_run, v, c, 0, &r, &rc)));
  iters = saved;
  (void)nodes;
  printf(" %d %zu\n", nodes, bytes);
  free(buf);
  return 0;
}
